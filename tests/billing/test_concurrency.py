"""Money under concurrency, on PostgreSQL with one connection per thread."""

import threading
from decimal import Decimal

import pytest
from django.db import connection

from billing import services
from billing.models import CreditBalance, CreditEntry, Invoice, Payment
from billing.services import LineSpec, Observation
from core.errors import DomainError


def run_together(n, fn):
    barrier = threading.Barrier(n)
    results, lock = [], threading.Lock()

    def worker(i):
        try:
            barrier.wait()
            out = fn(i)
        except DomainError as exc:
            out = exc.code
        finally:
            connection.close()
        with lock:
            results.append(out)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(results) == n
    return results


@pytest.mark.django_db(transaction=True)
def test_one_observation_applied_by_two_threads_is_credited_once(chains, customer):
    inv = services.invoice_create(
        account=customer,
        payable=("test", 1),
        description="t",
        lines=[LineSpec("x", Decimal(1), Decimal("90.00"), Decimal("90.00"))],
        currency="LTC",
    )
    req = inv.active_request
    obs = Observation("LTC", "deadbeef", 0, req.match_key, 150_000_000, 6)  # 1.5 LTC for a 1 LTC invoice

    run_together(2, lambda i: services.payment_observe(observation=obs))

    assert Payment.objects.count() == 1
    assert list(CreditEntry.objects.values_list("kind", "amount_usd")) == [("overpayment", Decimal("45.00"))]
    assert CreditBalance.objects.get(account=customer).balance_usd == Decimal("45.00")
    assert Invoice.objects.get(pk=inv.pk).status == "settled"


@pytest.mark.django_db(transaction=True)
def test_ledger_never_negative_under_concurrent_debits(chains, customer):
    services.credit_post(account_id=customer.pk, kind="adjustment", amount_usd=Decimal("250.00"), reason="seed")
    invoices = [
        services.invoice_create(
            account=customer,
            payable=("test", i),
            description="t",
            lines=[LineSpec("x", Decimal(1), Decimal("100.00"), Decimal("100.00"))],
            currency=None,
        )
        for i in range(8)
    ]

    results = run_together(8, lambda i: services.invoice_pay_with_credit(invoice_id=invoices[i].pk, account=customer))

    assert sum(isinstance(r, Invoice) for r in results) == 2
    assert results.count("insufficient_credit") == 6
    balance = CreditBalance.objects.get(account=customer).balance_usd
    assert balance == Decimal("50.00")
    ledger = list(CreditEntry.objects.order_by("id").values_list("amount_usd", "balance_after_usd"))
    assert ledger == [
        (Decimal("250.00"), Decimal("250.00")),
        (Decimal("-100.00"), Decimal("150.00")),
        (Decimal("-100.00"), Decimal("50.00")),
    ]
    assert Invoice.objects.filter(status="settled", settled_via="credit").count() == 2
