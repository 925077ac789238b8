"""The contract every chain family's watcher keeps, written once and run against
each family's own node, as Django runs one suite over each database backend.

A family's test folder runs it by importing these tests (`from
tests.chains.contract import *`) beside a `family` fixture: a `Family` that
issues an invoice in its currency, pays it on its node, makes what was paid
final there (blocks mined to the confirmation policy, a slot finalized) and
runs its watcher. tests/chains/test_contract_ltc.py, ethereum/, monero/ and
solana/test_contract.py do so; each family's own tests keep what only it has
(replacement, reorgs, tokens, locked transfers, references)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from billing.models import CreditEntry, InvoiceException, InvoiceStatus, PaymentDisposition
from billing.selectors import credit_balance_usd

__all__ = [
    "Family",
    "test_a_late_payment_settles_late_inside_the_window_and_is_credit_after_it",
    "test_a_partial_payment_then_a_top_up_settles_once",
    "test_an_over_payment_becomes_credit",
]

pytestmark = [pytest.mark.chain, pytest.mark.django_db]

TOTAL = "35.00"  # USD, each invoice of the contract


@dataclass
class Family:
    """What the contract needs of a family's test harness."""

    name: str
    invoice: Callable[..., Any]  # (total, now=None) -> Invoice, in the family's currency
    pay: Callable[[Any, int], str]  # (invoice, base units) -> txid, sent on the node
    final: Callable[[], None]  # what was paid becomes final (mined to the policy, finalized)
    scan: Callable[[], Any]  # one run of the watcher
    before_late: Callable[[], None] = lambda: None  # what the family needs to list long-closed destinations

    @staticmethod
    def due(invoice: Any) -> int:
        return int(invoice.active_request.amount_due)

    @staticmethod
    def status(invoice: Any) -> tuple[str, str]:
        invoice.refresh_from_db()
        return invoice.status, invoice.exception

    @staticmethod
    def worth(invoice: Any, amount: int) -> Decimal:
        """USD `amount` base units are worth at the invoice's rate, in cents (as billing counts it)."""
        from billing.currencies import currency_get
        from core.money import cents

        request = invoice.active_request
        return cents(Decimal(amount) * request.rate_usd / currency_get(request.currency).scale)

    @staticmethod
    def amounts(invoice: Any) -> list[int]:
        from billing.models import Payment

        return sorted(int(p.amount) for p in Payment.objects.filter(invoice=invoice))


def test_an_over_payment_becomes_credit(family: Family, customer: Any) -> None:
    invoice = family.invoice(TOTAL)
    family.pay(invoice, family.due(invoice) * 2)
    family.final()
    family.scan()
    assert family.status(invoice) == (InvoiceStatus.SETTLED, InvoiceException.PAID_OVER)
    [entry] = CreditEntry.objects.filter(invoice=invoice)
    assert (
        entry.amount_usd
        == credit_balance_usd(account=customer)
        == family.worth(invoice, family.due(invoice) * 2) - Decimal(TOTAL)
    )
    assert Decimal("35.00") <= entry.amount_usd <= Decimal("35.01")  # a due rounded up to the base unit


def test_a_partial_payment_then_a_top_up_settles_once(family: Family, customer: Any) -> None:
    invoice = family.invoice(TOTAL)
    due = family.due(invoice)
    family.pay(invoice, due // 2)
    family.final()
    family.scan()
    assert family.status(invoice) == (InvoiceStatus.NEW, InvoiceException.PAID_PARTIAL)
    family.pay(invoice, due - due // 2)
    family.final()
    family.scan()
    assert family.status(invoice) == (InvoiceStatus.SETTLED, InvoiceException.NONE)
    assert family.amounts(invoice) == sorted([due // 2, due - due // 2])
    assert {p.disposition for p in invoice.payments.all()} == {PaymentDisposition.APPLIED}
    assert not CreditEntry.objects.filter(invoice=invoice).exists()
    family.scan()  # nothing more to see: nothing counted twice
    assert family.amounts(invoice) == sorted([due // 2, due - due // 2])


def test_a_late_payment_settles_late_inside_the_window_and_is_credit_after_it(
    family: Family, customer: Any, settings: Any
) -> None:
    from billing.services import invoices_advance_due

    family.before_late()
    late = family.invoice(TOTAL, now=timezone.now() - timedelta(minutes=settings.INVOICE_EXPIRY_MINUTES + 5))
    closed_at = timezone.now() - timedelta(hours=settings.INVOICE_MONITORING_HOURS + 1)
    closed = family.invoice(TOTAL, now=closed_at - timedelta(minutes=settings.INVOICE_EXPIRY_MINUTES))
    family.scan()  # the watcher is healthy: expiry does not wait for it
    invoices_advance_due()
    assert family.status(late)[0] == family.status(closed)[0] == InvoiceStatus.EXPIRED
    family.pay(late, family.due(late))
    family.pay(closed, family.due(closed))
    family.final()
    family.scan()
    assert family.status(late) == (InvoiceStatus.SETTLED, InvoiceException.PAID_LATE)
    assert family.status(closed) == (InvoiceStatus.EXPIRED, InvoiceException.PAID_LATE)
    [entry] = CreditEntry.objects.filter(invoice=closed)
    assert entry.kind == "late_payment"
    assert entry.amount_usd == credit_balance_usd(account=customer) == family.worth(closed, family.due(closed))
