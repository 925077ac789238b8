"""Invoices, payment requests and the payment state machine against PostgreSQL."""

import dataclasses
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.utils import timezone

from billing import services, signals
from billing.currencies import CURRENCIES
from billing.models import (
    CreditEntry,
    Invoice,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentStatus,
)
from billing.selectors import credit_balance_usd
from billing.services import Observation
from core.errors import DomainError
from tests.billing.helpers import make_invoice, observe

pytestmark = pytest.mark.django_db

START = "2026-11-30 12:00:00+00:00"


def reload(invoice):
    return Invoice.objects.get(pk=invoice.pk)


@pytest.fixture
def frozen():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


# --- Invoices and requests ------------------------------------------------------


def test_numbers_are_sequential_per_year(chains, customer, frozen):
    a, b = make_invoice(customer), make_invoice(customer)
    assert (a.number, b.number) == ("GRH-2026-000001", "GRH-2026-000002")
    frozen.move_to("2027-01-01 00:00:01+00:00")
    assert make_invoice(customer).number == "GRH-2027-000001"


def test_numbers_grow_past_six_digits_and_the_invoice_row_holds_its_number_and_window(chains, customer, frozen):
    from billing.models import InvoiceCounter

    make_invoice(customer)
    InvoiceCounter.objects.filter(series="GRH-2026").update(last=999_998)
    a, b = make_invoice(customer), make_invoice(customer)
    assert (a.number, b.number) == ("GRH-2026-999999", "GRH-2026-1000000")
    stored = Invoice.objects.get(pk=b.pk)
    assert (stored.number, stored.expires_at, stored.monitoring_until) == (b.number, b.expires_at, b.monitoring_until)
    assert stored.expires_at == timezone.now() + timedelta(minutes=30) < stored.monitoring_until


@pytest.mark.parametrize("currency", ["LTC", "BTC", "ETH", "USDT", "XMR", "SOL"])
def test_the_payment_uri_names_the_invoice_as_the_number_was_written(chains, customer, settings, frozen, currency):
    """The number and the request are written by one statement, which puts the
    number's digits into the URI; the rest of it is escaped as the URI escapes it.
    ETH and its tokens (EIP-681) carry no message: their URI must come out untouched."""
    from billing.chains.config import destination_derive, payment_uri
    from billing.models import InvoiceCounter, PaymentRequest

    settings.INVOICE_NUMBER_PREFIX = "Rent Hub&Co"  # a prefix a URI must escape
    first = make_invoice(customer, currency=currency)  # the year's first: its counter row is made on the way
    InvoiceCounter.objects.filter(series="Rent Hub&Co-2026").update(last=999_999)
    later = make_invoice(customer, currency=currency)
    for invoice, number in ((first, "Rent Hub&Co-2026-000001"), (later, "Rent Hub&Co-2026-1000000")):
        request = invoice.active_request
        stored = PaymentRequest.objects.get(pk=request.pk)
        destination = destination_derive(currency=currency, index=stored.derivation_index)
        if currency == "SOL":  # its reference is fresh on each derivation: the stored one is the request's
            destination = dataclasses.replace(destination, reference=stored.reference)
        expected = payment_uri(
            destination=destination,
            amount=stored.amount_due,
            label=settings.PAYMENT_LABEL,
            message=f"Invoice {number}",
        )
        assert invoice.number == reload(invoice).number == number
        assert stored.payment_uri == request.payment_uri == expected
        assert request.pk == stored.pk and request._state.adding is False


def test_a_failed_invoice_leaves_no_gap(chains, customer, settings, frozen):
    make_invoice(customer)
    settings.MANUAL_RATES_USD = ""
    settings.RATE_PROVIDERS = []
    with pytest.raises(DomainError) as exc:
        make_invoice(customer)
    assert exc.value.code == "rate_unavailable"
    settings.MANUAL_RATES_USD = "LTC=90"
    assert make_invoice(customer).number == "GRH-2026-000002"


def test_request_amount_is_rounded_up_and_destination_fresh(chains, customer, frozen):
    a = make_invoice(customer, total="100.00", currency="LTC")
    req = a.active_request
    # 100 / 90 LTC = 1.111111111... -> 111111112 litoshi (rounded up)
    assert int(req.amount_due) == 111_111_112
    assert req.rate_usd == Decimal("90") and req.rate_source == "setting"
    assert req.address.startswith("ltc1")
    assert (
        req.payment_uri
        == f"litecoin:{req.address}?amount=1.11111112&label=GPU%20Rent%20Hub&message=Invoice%20{a.number}"
    )
    assert (req.expires_at - req.created_at) == timedelta(minutes=30)
    assert a.monitoring_until - a.expires_at == timedelta(hours=24)
    b = make_invoice(customer, currency="LTC")
    assert b.active_request.address != req.address
    assert b.active_request.derivation_index == req.derivation_index + 1


def test_eth_and_tokens_share_one_index_sequence(chains, customer, frozen):
    eth = make_invoice(customer, currency="ETH").active_request
    usdt = make_invoice(customer, currency="USDT").active_request
    usdc = make_invoice(customer, currency="USDC").active_request
    assert len({eth.address, usdt.address, usdc.address}) == 3
    assert [eth.derivation_index + 1, eth.derivation_index + 2] == [usdt.derivation_index, usdc.derivation_index]
    assert usdt.payment_uri.startswith("ethereum:0xdAC17F958D2ee523a2206206994597C13D831ec7@1/transfer?address=")
    assert int(usdt.amount_due) == 100_000_000  # 100 USDT in 6-decimal units


@pytest.mark.parametrize(
    "currency,total,rate,units",
    [
        ("BTC", "12168.00", "95000", 12_808_422),  # 0.128084210... BTC, rounded up
        ("LTC", "390.00", "90", 433_333_334),
        ("ETH", "40000.00", "3500", 11_428_571_428_571_428_572),  # above 2^63 wei
        ("USDT", "1881.00", "1", 1_881_000_000),
        ("USDC", "0.01", "1", 10_000),
        ("XMR", "250.00", "180", 1_388_888_888_889),
        ("SOL", "155.00", "150", 1_033_333_334),
    ],
)
def test_usd_to_base_units_for_every_currency(currency, total, rate, units):
    got = services.amount_due_for(total_usd=Decimal(total), currency=currency, rate_usd=Decimal(rate))
    assert got == units
    assert isinstance(got, int)
    # Never short: the amount is worth at least the invoice, and one unit less is not.
    worth = Decimal(got) * Decimal(rate) / CURRENCIES[currency].scale
    less = Decimal(got - 1) * Decimal(rate) / CURRENCIES[currency].scale
    assert worth >= Decimal(total) > less


def test_wei_amounts_above_2_63_survive_the_database(chains, customer, frozen):
    inv = make_invoice(customer, total="40000.00", currency="ETH")
    assert int(inv.active_request.amount_due) > 2**63
    payment = observe(inv, 11_428_571_428_571_428_572, confirmations=12)
    assert int(Payment.objects.get(pk=payment.pk).amount) == 11_428_571_428_571_428_572
    assert reload(inv).status == InvoiceStatus.SETTLED


def test_disabled_currency_is_refused(chains, customer, settings, frozen):
    settings.SOL_RECIPIENT = ""
    with pytest.raises(DomainError) as exc:
        make_invoice(customer, currency="SOL")
    assert exc.value.code == "currency_unavailable"
    assert "SOL" not in exc.value.details["enabled"]


# --- The state machine through the services --------------------------------------


def test_exactly_at_tolerance_processes_and_one_unit_under_does_not(chains, customer, frozen):
    a, b = make_invoice(customer), make_invoice(customer)
    due = int(a.active_request.amount_due)
    at = -(-due * 995 // 1000)  # ceil(due x 0.995)
    observe(a, at, txid="a")
    observe(b, at - 1, txid="b")
    assert (reload(a).status, reload(a).exception) == ("processing", "none")
    assert (reload(b).status, reload(b).exception) == ("new", "paid_partial")


def test_mempool_then_confirmations_settle(chains, customer, frozen):
    inv = make_invoice(customer)
    due = int(inv.active_request.amount_due)
    seen = []
    handler = lambda **kw: seen.append(kw["invoice_id"])  # noqa: E731
    signals.invoice_settled.connect(handler)
    try:
        with django_capture_on_commit():
            observe(inv, due, confirmations=0)
            assert reload(inv).status == "processing"
            observe(inv, due, confirmations=5)
            assert reload(inv).status == "processing"  # LTC needs 6
            observe(inv, due, confirmations=6)
    finally:
        signals.invoice_settled.disconnect(handler)
    inv = reload(inv)
    assert inv.status == "settled" and inv.settled_via == "payment"
    assert Payment.objects.get().disposition == PaymentDisposition.APPLIED
    assert seen == [inv.pk]


def test_partial_then_top_up(chains, customer, frozen):
    inv = make_invoice(customer)
    due = int(inv.active_request.amount_due)
    observe(inv, due // 2, confirmations=6, txid="first")
    assert (reload(inv).status, reload(inv).exception) == ("new", "paid_partial")
    observe(inv, due - due // 2, confirmations=6, txid="second")
    assert (reload(inv).status, reload(inv).exception) == ("settled", "none")
    assert not CreditEntry.objects.exists()


def test_over_payment_becomes_credit_at_the_invoice_rate(chains, customer, frozen):
    inv = make_invoice(customer, total="90.00")  # 1 LTC at 90
    observe(inv, 150_000_000, confirmations=6)  # 1.5 LTC
    inv = reload(inv)
    assert (inv.status, inv.exception) == ("settled", "paid_over")
    entry = CreditEntry.objects.get()
    assert (entry.kind, entry.amount_usd, entry.invoice_id) == ("overpayment", Decimal("45.00"), inv.pk)
    assert credit_balance_usd(account=customer) == Decimal("45.00")


def test_same_observation_twice_counts_once(chains, customer, frozen):
    inv = make_invoice(customer, total="90.00")
    for _ in range(2):
        observe(inv, 150_000_000, confirmations=6)
    assert Payment.objects.count() == 1
    assert CreditEntry.objects.count() == 1
    assert credit_balance_usd(account=customer) == Decimal("45.00")


def test_expiry_then_late_payment_settles_inside_the_window(chains, customer, frozen):
    inv = make_invoice(customer)
    due = int(inv.active_request.amount_due)
    frozen.shift(timedelta(minutes=29))
    assert services.invoices_advance_due() == 0
    frozen.shift(timedelta(minutes=1))
    assert services.invoices_advance_due() == 1
    assert reload(inv).status == "expired"
    assert services.invoices_advance_due() == 0  # a second run changes nothing
    frozen.shift(timedelta(hours=3))
    observe(inv, due, confirmations=6)
    inv = reload(inv)
    assert (inv.status, inv.exception) == ("settled", "paid_late")


def test_late_partial_becomes_credit_when_the_window_closes(chains, customer, frozen):
    inv = make_invoice(customer, total="90.00")
    frozen.shift(timedelta(minutes=31))
    services.invoices_advance_due()
    observe(inv, 30_000_000, confirmations=6)  # 0.3 LTC = $27
    inv = reload(inv)
    assert (inv.status, inv.exception) == ("expired", "paid_late")
    assert not CreditEntry.objects.exists()
    frozen.shift(timedelta(hours=24))
    assert services.invoices_advance_due() == 0  # status unchanged; the money moved
    entry = CreditEntry.objects.get()
    assert (entry.kind, entry.amount_usd) == ("late_payment", Decimal("27.00"))
    assert Payment.objects.get().disposition == PaymentDisposition.CREDITED
    services.invoices_advance_due()
    assert CreditEntry.objects.count() == 1


def test_payment_after_the_window_is_credit_at_once(chains, customer, frozen):
    inv = make_invoice(customer, total="90.00")
    frozen.shift(timedelta(hours=25))
    services.invoices_advance_due()
    observe(inv, 100_000_000, confirmations=6)
    assert reload(inv).status == "expired"
    assert credit_balance_usd(account=customer) == Decimal("90.00")


def test_processing_never_confirmed_becomes_invalid_and_later_money_is_credit(chains, customer, frozen):
    inv = make_invoice(customer, total="90.00")
    observe(inv, 100_000_000, confirmations=0)
    frozen.shift(timedelta(hours=25))
    services.invoices_advance_due()
    assert reload(inv).status == "invalid"
    observe(inv, 100_000_000, confirmations=6)
    assert reload(inv).status == "invalid"
    assert credit_balance_usd(account=customer) == Decimal("90.00")


def test_reorg_back_then_forward_credits_once(chains, customer, frozen):
    inv = make_invoice(customer, total="90.00")
    observe(inv, 150_000_000, confirmations=2)
    assert reload(inv).status == "processing"
    services.payment_uncount(chain="litecoin", txid="tx1", position="0", reason="block orphaned")
    inv = reload(inv)
    assert (inv.status, inv.exception) == ("new", "none")
    assert Payment.objects.get().status == PaymentStatus.REMOVED
    observe(inv, 150_000_000, confirmations=6)
    assert reload(inv).status == "settled"
    observe(inv, 150_000_000, confirmations=7)
    assert CreditEntry.objects.count() == 1 and credit_balance_usd(account=customer) == Decimal("45.00")


def test_uncounting_applied_money_flags_the_invoice(chains, customer, frozen):
    inv = make_invoice(customer)
    observe(inv, int(inv.active_request.amount_due), confirmations=6)
    services.payment_uncount(chain="litecoin", txid="tx1", position="0", reason="deep reorg")
    inv = reload(inv)
    assert inv.status == "settled" and inv.needs_attention


def test_switching_currency_keeps_watching_the_old_destination(chains, customer, frozen):
    inv = make_invoice(customer, total="90.00", currency="LTC")
    old = inv.active_request
    frozen.shift(timedelta(minutes=20))
    services.invoice_switch_currency(invoice_id=inv.pk, account=customer, currency="BTC")
    inv = reload(inv)
    new = inv.active_request
    assert new.currency == "BTC" and new.address != old.address
    # A switch never holds the invoice (and what it reserves) past its first expiry.
    assert inv.expires_at == new.expires_at == old.expires_at == timezone.now() + timedelta(minutes=10)
    # Money that still reaches the old LTC destination counts, by fraction.
    half = old.amount_due // 2
    services.payment_observe(observation=Observation("LTC", "old", 0, old.match_key, half, 6))
    assert reload(inv).exception == "paid_partial"
    # A switch after a partial payment quotes the rest only, still within the first expiry.
    frozen.shift(timedelta(minutes=5))
    services.invoice_switch_currency(invoice_id=inv.pk, account=customer, currency="ETH")
    inv = reload(inv)
    eth = inv.active_request
    assert eth.amount_usd == Decimal("45.00") and eth.expires_at == old.expires_at
    services.payment_observe(observation=Observation("ETH", "eth", -1, eth.match_key, eth.amount_due, 12, final=True))
    inv = reload(inv)
    assert (inv.status, inv.exception) == ("settled", "none")


def test_requote_reopens_an_expired_unpaid_invoice(chains, customer, frozen):
    inv = make_invoice(customer)
    frozen.shift(timedelta(hours=2))
    services.invoices_advance_due()
    services.invoice_requote(invoice_id=inv.pk, account=customer)
    inv = reload(inv)
    assert inv.status == "new" and inv.requests.count() == 2
    assert inv.expires_at == timezone.now() + timedelta(minutes=30)


# --- Staff corrections ---------------------------------------------------------


def test_mark_settled_needs_a_reason_and_is_audited(chains, customer, django_user_model, frozen):
    from core.models import AuditEntry

    staff = django_user_model.objects.create_superuser("opsperson", "a-long-staff-password")
    inv = make_invoice(customer)
    with pytest.raises(DomainError):
        services.invoice_mark_settled(invoice_id=inv.pk, actor=staff, reason="  ")
    services.invoice_mark_settled(invoice_id=inv.pk, actor=staff, reason="paid by bank wire, ref 42")
    inv = reload(inv)
    assert (inv.status, inv.exception, inv.settled_via) == ("settled", "marked", "staff")
    entry = AuditEntry.objects.get(action="invoice.mark_settled")
    assert (entry.actor_name, entry.reason) == ("opsperson", "paid by bank wire, ref 42")


def test_mark_invalid_credits_confirmed_money(chains, customer, django_user_model, frozen):
    staff = django_user_model.objects.create_superuser("opsperson", "a-long-staff-password")
    inv = make_invoice(customer, total="90.00")
    observe(inv, 50_000_000, confirmations=6)
    services.invoice_mark_invalid(invoice_id=inv.pk, actor=staff, reason="customer asked to cancel")
    assert (reload(inv).status, reload(inv).exception) == ("invalid", "marked")
    assert credit_balance_usd(account=customer) == Decimal("45.00")


def test_record_payment_command(chains, customer, frozen, capsys):
    from django.core.management import call_command

    inv = make_invoice(customer)
    due = int(inv.active_request.amount_due)
    call_command(
        "record_payment",
        inv.number,
        "--txid",
        "abc",
        "--amount",
        str(due),
        "--confirmations",
        "1",
        "--reason",
        "seen in the node by hand",
    )
    assert "is processing" in capsys.readouterr().out
    call_command(
        "record_payment",
        inv.number,
        "--txid",
        "abc",
        "--amount",
        str(due),
        "--confirmations",
        "6",
        "--reason",
        "six now",
    )
    assert "is settled" in capsys.readouterr().out
    payment = Payment.objects.get()
    assert (payment.source, payment.confirmations) == ("manual", 6)


def django_capture_on_commit():
    """Run on_commit callbacks inside the test transaction."""
    from django.test import TestCase

    return TestCase.captureOnCommitCallbacks(execute=True)
