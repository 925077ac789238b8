"""Shared pieces of the billing tests (no tests here): an invoice for one line,
and a payment of its active request as a watcher would report it."""

from __future__ import annotations

from decimal import Decimal

from billing import services
from billing.models import Invoice
from billing.services import LineSpec, Observation


def make_invoice(account, total="100.00", currency="LTC", payable=("test", 1), description="Test invoice") -> Invoice:
    total = Decimal(total)
    return services.invoice_create(
        account=account,
        payable=payable,
        description=description,
        lines=[LineSpec("Thing", Decimal(1), total, total)],
        currency=currency,
    )


def observation(invoice: Invoice, amount: int | None = None, *, confirmations=0, txid="tx1", index=0) -> Observation:
    """A payment to the invoice's active request: `amount` base units (None: the amount due)."""
    request = invoice.active_request
    assert request is not None
    return Observation(
        currency=request.currency,
        txid=txid,
        output_index=index,
        match_key=request.match_key,
        amount=int(request.amount_due) if amount is None else amount,
        confirmations=confirmations,
    )


def observe(invoice: Invoice, amount: int | None = None, **seen):
    return services.payment_observe(observation=observation(invoice, amount, **seen))
