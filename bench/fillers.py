"""Open invoices by the hundred thousand for the chain benches: an invoice and its
active payment request per destination, written in batches, with what the watchers
read (currency, network, match key, keyset, index, amount) and nothing they do not.

    fillers_register(customer=..., count=99_999, currency="LTC", network="litecoin-regtest",
                     keyset="bench:filler", first_index=0, match_key=lambda i: ...,
                     amount_due=100_000_000, amount_usd=Decimal("90.00"), rate_usd=Decimal(90))
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

# Rows per statement: PostgreSQL binds at most 65,535 parameters in one, and an invoice row
# binds 18, a payment request row about as many.
BATCH = 2000


def fillers_register(
    *,
    customer,
    count: int,
    currency: str,
    network: str,
    keyset: str,
    first_index: int,
    match_key: Callable[[int], str],
    amount_due: int,
    amount_usd: Decimal,
    rate_usd: Decimal,
    days: int = 1,
) -> None:
    """`count` open invoices, each with one active payment request whose derivation
    index runs from `first_index` and whose match key is `match_key(index)`. The
    keyset's counter is moved past them, so invoices issued afterwards take the next
    indexes."""
    from django.db.models.functions import Greatest
    from django.utils import timezone

    from billing.models import DerivationCounter, Invoice, PaymentRequest

    now = timezone.now()
    later = now + timezone.timedelta(days=days)
    for start in range(0, count, BATCH):
        rows = Invoice.objects.bulk_create(
            Invoice(
                number=f"BENCH-{start + i:07d}",
                account=customer,
                subject_kind="bench",
                description="filler",
                total_usd=amount_usd,
                created_at=now,
                expires_at=later,
                monitoring_until=later,
            )
            for i in range(min(BATCH, count - start))
        )
        PaymentRequest.objects.bulk_create(
            PaymentRequest(
                invoice=row,
                currency=currency,
                network=network,
                address="filler",
                match_key=match_key(first_index + start + i),
                keyset=keyset,
                derivation_index=first_index + start + i,
                amount_due=amount_due,
                amount_usd=amount_usd,
                rate_usd=rate_usd,
                rate_source="manual",
                rate_at=now,
                payment_uri="",
                created_at=now,
                expires_at=later,
            )
            for i, row in enumerate(rows)
        )
    DerivationCounter.objects.filter(keyset=keyset).update(next_index=Greatest("next_index", first_index + count))
