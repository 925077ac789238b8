"""billing.payable: the one port between billing and what it bills for.

A kind is registered once; an invoice for a kind nobody registered is refused;
each callback runs when its change commits (settled, closed unpaid, quoted anew),
a failing one is logged and never undoes billing's work; a re-quote asks first.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.test import TestCase

from billing import payable as port
from billing import services
from billing.models import Invoice, InvoiceLine
from billing.payable import NOTHING, Payable, PayableRef, UnknownPayable, payable_get, payable_register
from billing.services import LineSpec
from core.errors import DomainError
from tests.billing.helpers import make_invoice, observe

pytestmark = pytest.mark.django_db

START = "2026-11-30 12:00:00+00:00"


class Recording(Payable):
    """Remembers every call; refuses a re-quote when told to."""

    label = "thing"

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.refuse = False
        self.fail = False

    def _record(self, name: str, **kwargs: Any) -> None:
        self.calls.append((name, kwargs))
        if self.fail:
            raise RuntimeError("the owner is down")

    def requote_check(self, *, invoice_id: int, subject_id: int) -> None:
        self.calls.append(("requote_check", {"invoice_id": invoice_id, "subject_id": subject_id}))
        if self.refuse:
            raise DomainError("insufficient_stock", "gone", status=409)

    def on_settled(self, *, invoice_id: int, subject_id: int, late: bool) -> None:
        self._record("on_settled", invoice_id=invoice_id, subject_id=subject_id, late=late)

    def on_expired(self, *, invoice_id: int, subject_id: int, status: str) -> None:
        self._record("on_expired", invoice_id=invoice_id, subject_id=subject_id, status=status)

    def on_quoted(self, *, invoice_id: int, subject_id: int, currency: str) -> None:
        self._record("on_quoted", invoice_id=invoice_id, subject_id=subject_id, currency=currency)

    def admin_url(self, *, subject_id: int) -> str | None:
        return f"/things/{subject_id}/"


@pytest.fixture
def thing(monkeypatch) -> Recording:
    """A kind "thing" registered for one test (and gone after it)."""
    recording = Recording()
    monkeypatch.setattr(port, "_payables", dict(port._payables))
    payable_register(kind="thing", payable=recording)
    return recording


@pytest.fixture
def frozen():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


def issue(account, *, kind: str = "thing", subject_id: int = 7, currency: str | None = "LTC") -> Invoice:
    return make_invoice(account, "50.00", currency, PayableRef(kind, subject_id), description="A thing")


def pay(invoice: Invoice, *, confirmations: int = 6) -> None:
    observe(invoice, confirmations=confirmations, txid="tx-thing")


# --- Registration -------------------------------------------------------------------------


def test_a_kind_is_registered_once(thing):
    assert payable_get("thing") is thing
    payable_register(kind="thing", payable=thing)  # the same one again: harmless
    with pytest.raises(ValueError, match="registered already"):
        payable_register(kind="thing", payable=Recording())
    for bad in ("", "a:b", "x" * 17):
        with pytest.raises(ValueError):
            payable_register(kind=bad, payable=NOTHING)


def test_rentals_registers_its_three_kinds():
    from rentals import payables

    assert (payable_get("order"), payable_get("renewal"), payable_get("usage")) == (
        payables.ORDER,
        payables.RENEWAL,
        payables.USAGE,
    )


def test_an_unknown_kind_is_refused_and_nothing_is_written(chains, customer):
    with pytest.raises(UnknownPayable):
        issue(customer, kind="nobody")
    assert not Invoice.objects.exists() and not InvoiceLine.objects.exists()


def test_the_subject_is_stored_as_kind_and_id(chains, customer, thing):
    invoice = Invoice.objects.get(pk=issue(customer).pk)
    assert (invoice.subject_kind, invoice.subject_id, invoice.subject) == ("thing", 7, "thing:7")
    assert port.payable_describe(kind="thing", subject_id=7) == "thing 7"
    assert port.payable_describe(kind="gone", subject_id=3) == "gone:3"  # an old row of a kind no longer sold


# --- Callbacks, on commit -----------------------------------------------------------------


def test_settled_calls_on_settled_after_the_commit(chains, customer, thing, frozen):
    invoice = issue(customer)
    with TestCase.captureOnCommitCallbacks(execute=False) as callbacks:
        pay(invoice)
        assert thing.calls == []  # nothing before the commit
    for callback in callbacks:
        callback()
    assert thing.calls == [("on_settled", {"invoice_id": invoice.pk, "subject_id": 7, "late": False})]


def test_expired_and_invalid_call_on_expired(chains, customer, thing, frozen):
    expiring, voided = issue(customer, subject_id=1), issue(customer, subject_id=2)
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.invoice_void(invoice_id=voided.pk, reason="cancelled")
    frozen.shift(timedelta(hours=1))
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.invoices_advance_due()
    assert thing.calls == [
        ("on_expired", {"invoice_id": voided.pk, "subject_id": 2, "status": "invalid"}),
        ("on_expired", {"invoice_id": expiring.pk, "subject_id": 1, "status": "expired"}),
    ]


def test_a_switch_of_currency_calls_on_quoted(chains, customer, thing, frozen):
    invoice = issue(customer)
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.invoice_switch_currency(invoice_id=invoice.pk, account=customer, currency="BTC")
    assert thing.calls == [("on_quoted", {"invoice_id": invoice.pk, "subject_id": 7, "currency": "BTC"})]


def test_a_failing_callback_is_logged_and_billing_keeps_its_work(chains, customer, thing, frozen, caplog):
    thing.fail = True
    invoice = issue(customer)
    with TestCase.captureOnCommitCallbacks(execute=True):
        pay(invoice)
    assert Invoice.objects.get(pk=invoice.pk).status == "settled"
    assert [name for name, _ in thing.calls] == ["on_settled"]
    assert "left to the owner's reconcile job" in caplog.text


# --- Re-quote -----------------------------------------------------------------------------


def test_a_requote_asks_the_owner_first_and_a_refusal_changes_nothing(chains, customer, thing, frozen):
    invoice = issue(customer)
    frozen.shift(timedelta(hours=1))
    services.invoices_advance_due()
    thing.calls.clear()
    thing.refuse = True
    with pytest.raises(DomainError) as refused:
        services.invoice_requote(invoice_id=invoice.pk, account=customer)
    assert refused.value.code == "insufficient_stock"
    assert thing.calls == [("requote_check", {"invoice_id": invoice.pk, "subject_id": 7})]
    assert Invoice.objects.get(pk=invoice.pk).status == "expired" and invoice.requests.count() == 1
    thing.refuse = False
    with TestCase.captureOnCommitCallbacks(execute=True):
        services.invoice_requote(invoice_id=invoice.pk, account=customer)
    assert Invoice.objects.get(pk=invoice.pk).status == "new"
    assert thing.calls[-1] == ("on_quoted", {"invoice_id": invoice.pk, "subject_id": 7, "currency": "LTC"})


def test_a_requote_of_a_kind_no_longer_registered_is_refused(chains, customer, thing, frozen):
    invoice = issue(customer)
    frozen.shift(timedelta(hours=1))
    services.invoices_advance_due()
    Invoice.objects.filter(pk=invoice.pk).update(subject_kind="gone")
    with pytest.raises(DomainError) as refused:
        services.invoice_requote(invoice_id=invoice.pk, account=customer)
    assert refused.value.code == "invoice_subject_unknown"


# --- Issuing around the caller's writes ---------------------------------------------------


def test_issuing_takes_the_number_on_leaving_the_block(chains, customer, thing):
    from django.db import transaction

    spec = services.InvoiceSpec(
        account=customer,
        payable=PayableRef("thing", 3),
        description="A thing",
        lines=[LineSpec("Thing", Decimal(1), Decimal("10.00"), Decimal("10.00"))],
        currency="LTC",
    )
    with transaction.atomic(), services.invoice_issuing(spec=spec) as invoice:
        assert invoice.number.startswith("~") and invoice.active_request is None
    assert not invoice.number.startswith("~") and invoice.active_request is not None


def test_an_error_inside_the_block_issues_nothing(chains, customer, thing):
    from django.db import transaction

    spec = services.InvoiceSpec(
        account=customer,
        payable=PayableRef("thing", 4),
        description="A thing",
        lines=[LineSpec("Thing", Decimal(1), Decimal("10.00"), Decimal("10.00"))],
        currency="LTC",
    )
    with pytest.raises(ZeroDivisionError), transaction.atomic(), services.invoice_issuing(spec=spec):
        1 / 0  # noqa: B018
    assert not Invoice.objects.exists()


# --- Outermost entry points ---------------------------------------------------------------


def test_the_outermost_entry_points_refuse_to_run_nested(chains, customer):
    """durable=True: the checkout page's actions and what billing's Payable runs for rentals
    open their own transaction; nested in another they would hold their locks to its commit."""
    from django.db import transaction

    from rentals.services import renewal_apply, rental_from_order

    for call in (
        lambda: services.checkout_requote(token="t"),
        lambda: services.checkout_currency_switch(token="t", currency="BTC"),
        lambda: rental_from_order(order_id=0),
        lambda: renewal_apply(invoice_id=0),
    ):
        with pytest.raises(RuntimeError, match="durable"), transaction.atomic():
            call()


def test_a_receiver_that_raises_does_not_hold_back_the_payable(chains, customer, thing, frozen, caplog):
    """Nor the caller, whose work is committed: the failure is logged, not raised."""
    from billing import signals

    def broken(**kwargs: Any) -> None:
        raise RuntimeError("a receiver's bug")

    invoice = issue(customer)
    signals.invoice_settled.connect(broken)
    try:
        with TestCase.captureOnCommitCallbacks(execute=True):
            pay(invoice)
    finally:
        signals.invoice_settled.disconnect(broken)
    assert [name for name, _ in thing.calls] == ["on_settled"]
    assert "a receiver's bug" in caplog.text
