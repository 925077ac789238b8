"""Edges of the lifecycle: renewal invoices that can be paid as issued, a
cancelled rental that is never extended, usage billed only for months the
rental ran and only once their correction window is over, and the real
provisioning job on the rental."""

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine

from billing.models import CreditEntry, Invoice
from billing.selectors import credit_balance_usd
from rentals.models import ProvisioningJob, Rental, UsageReport
from tests.keys import TEST_RATES
from tests.rentals.helpers import MONTH, T0, committed, new_key_line, pay, run_jobs_twice

LATER = timedelta(minutes=10)

pytestmark = pytest.mark.django_db


# --- Renewal invoices are quoted at issue ----------------------------------------------------


def test_the_automatic_renewal_is_quoted_in_the_rentals_currency(active_rental, customer_api):
    order_address = Invoice.objects.get(pk=active_rental.order.invoice_id).active_request.address
    issued_at = active_rental.paid_until - timedelta(days=7)
    run_jobs_twice(issued_at)

    body = customer_api.get(f"/api/v1/rentals/{active_rental.pk}").json()
    [renewal] = body["renewal_invoices"]
    invoice = Invoice.objects.get(pk=renewal["id"])
    request = invoice.active_request
    # 250.00 USD at the test LTC rate (90 USD), rounded up to the next litoshi.
    assert "LTC=90" in TEST_RATES.split(",")
    expected = 277_777_778
    assert (renewal["pay_currency"], renewal["amount"]) == ("LTC", str(expected))
    assert renewal["address"] == request.address != order_address
    assert renewal["payment_uri"].startswith("litecoin:" + request.address)
    assert renewal["checkout_url"].endswith(f"/pay/{invoice.checkout_token}")
    assert renewal["expires_at"] == (issued_at + timedelta(hours=24)).isoformat().replace("+00:00", "Z")
    assert request.rate_usd == Decimal("90")

    # Paid as issued, the rental gains its month.
    with time_machine.travel(issued_at + timedelta(hours=1), tick=False):
        pay(invoice.number, int(renewal["amount"]), txid="tx-as-issued")
    assert Rental.objects.get(pk=active_rental.pk).paid_until == active_rental.paid_until + MONTH


def test_renew_now_uses_the_currency_asked_for_then_the_last_paid_one(active_rental, customer_api):
    start = active_rental.paid_until - timedelta(days=10)
    with time_machine.travel(start, tick=False):
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {"pay_currency": "BTC"}, format="json")
    assert resp.status_code == 201, resp.json()
    [renewal] = resp.json()["renewal_invoices"]
    assert renewal["pay_currency"] == "BTC" and renewal["address"] and renewal["amount"]
    with time_machine.travel(start + timedelta(minutes=5), tick=False):
        pay(renewal["number"], int(renewal["amount"]), confirmations=2, txid="tx-btc")
    assert Rental.objects.get(pk=active_rental.pk).pay_currency == "BTC"

    # The next one, asked for without a currency, is quoted in BTC: the last currency paid in.
    with time_machine.travel(start + timedelta(days=1), tick=False):
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert resp.status_code == 201, resp.json()
    latest = resp.json()["renewal_invoices"][-1]
    assert (latest["pay_currency"], latest["status"]) == ("BTC", "new")
    assert latest["address"] != renewal["address"]


def test_a_renewal_in_a_currency_no_longer_enabled_is_issued_without_one(active_rental, settings):
    Rental.objects.filter(pk=active_rental.pk).update(pay_currency="XMR")
    settings.XMR_ADDRESS, settings.XMR_VIEW_KEY = "", ""  # XMR switched off since the rental was paid
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    invoice = Invoice.objects.get(renewal__rental=active_rental)
    assert invoice.status == "new" and invoice.active_request is None
    assert invoice.expires_at == active_rental.paid_until + timedelta(days=3)  # chosen when paying


def test_credit_spent_while_a_renewal_is_issued_leaves_it_open_to_pay(active_rental, customer_api, monkeypatch):
    from rentals.services import lifecycle

    # The balance is read before its lock: another renewal or invoice may spend it meanwhile.
    monkeypatch.setattr(lifecycle, "credit_balance_usd", lambda account: Decimal("250.00"))
    at = active_rental.paid_until - timedelta(days=10)
    with time_machine.travel(at, tick=False), committed():
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert resp.status_code == 201, resp.json()
    invoice = Invoice.objects.get(renewal__rental=active_rental)
    assert (invoice.status, invoice.total_usd, invoice.settled_via) == ("new", Decimal("250.00"), "")
    assert not CreditEntry.objects.exists()
    assert Rental.objects.get(pk=active_rental.pk).paid_until == active_rental.paid_until


# --- Cancelling voids open renewals ------------------------------------------------------------


def test_cancelling_voids_an_asked_for_renewal_and_its_late_money_becomes_credit(active_rental, customer_api):
    at = active_rental.paid_until - timedelta(days=10)
    with time_machine.travel(at, tick=False):
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
        [renewal] = resp.json()["renewal_invoices"]
        with committed():
            assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
    invoice = Invoice.objects.get(pk=renewal["id"])
    assert invoice.status == "invalid"

    # The customer pays it anyway: credit, not an extension.
    with time_machine.travel(at + timedelta(minutes=10), tick=False):
        pay(invoice.number, int(renewal["amount"]), txid="tx-after-cancel")
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.paid_until == active_rental.paid_until and rental.periods.count() == 1
    assert credit_balance_usd(account=rental.account) == Decimal("250.00")

    again = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "rental_cancelled"


def test_a_renewal_in_flight_when_cancelled_becomes_credit(active_rental, customer_api):
    at = active_rental.paid_until - timedelta(days=10)
    with time_machine.travel(at, tick=False):
        [renewal] = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json").json()[
            "renewal_invoices"
        ]
        pay(renewal["number"], int(renewal["amount"]), confirmations=1, txid="tx-in-flight")
        assert Invoice.objects.get(pk=renewal["id"]).status == "processing"
        with committed():
            customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel")
        pay(renewal["number"], int(renewal["amount"]), confirmations=6, txid="tx-in-flight")
    rental = Rental.objects.get(pk=active_rental.pk)
    assert Invoice.objects.get(pk=renewal["id"]).status == "settled"
    assert rental.paid_until == active_rental.paid_until
    entry = CreditEntry.objects.get(invoice_id=renewal["id"])
    assert (entry.kind, entry.amount_usd) == ("unfulfilled", Decimal("250.00"))


def test_a_payment_recorded_while_cancelling_keeps_its_renewal_open_and_becomes_credit(
    active_rental, customer_api, monkeypatch
):
    from billing import services as billing_services

    at = active_rental.paid_until - timedelta(days=10)
    with time_machine.travel(at, tick=False):
        [renewal] = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json").json()[
            "renewal_invoices"
        ]
    void = billing_services.invoice_void
    raced = []

    def void_after_a_payment(*, invoice_id, **kwargs):
        # The watcher commits a sighting after cancel listed the open renewals
        # and before it takes the invoice's lock.
        if not raced:
            raced.append(invoice_id)
            pay(renewal["number"], int(renewal["amount"]) // 2, confirmations=0, txid="tx-racing")
        return void(invoice_id=invoice_id, **kwargs)

    monkeypatch.setattr(billing_services, "invoice_void", void_after_a_payment)
    with time_machine.travel(at + timedelta(minutes=1), tick=False), committed():
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel")
    assert resp.status_code == 200, resp.json()
    assert raced == [renewal["id"]]
    assert Rental.objects.get(pk=active_rental.pk).cancelled_at is not None
    assert Invoice.objects.get(pk=renewal["id"]).status == "new"  # it holds a payment: not voided

    # The rest arrives: the renewal settles and, the rental being cancelled, becomes credit.
    with time_machine.travel(at + timedelta(minutes=5), tick=False):
        pay(renewal["number"], int(renewal["amount"]) // 2, confirmations=6, txid="tx-racing")
        pay(renewal["number"], int(renewal["amount"]) - int(renewal["amount"]) // 2, confirmations=6, txid="tx-rest")
    assert Invoice.objects.get(pk=renewal["id"]).status == "settled"
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.paid_until == active_rental.paid_until
    assert credit_balance_usd(account=rental.account) == Decimal("250.00")


# --- Usage: months the rental ran, once they ended, after a correction window ---------------


def _usage(staff_api, rental, month, egress_tb, at):
    with time_machine.travel(at, tick=False), committed():
        return staff_api.post(
            f"/api/v1/ops/rentals/{rental.pk}/usage", {"month": month, "egress_tb": egress_tb}, format="json"
        )


def test_usage_is_refused_for_months_the_rental_did_not_run_or_that_have_not_ended(active_rental, staff_api):
    december = T0 + timedelta(days=10)
    before = _usage(staff_api, active_rental, "2026-10", "25", december)
    assert before.status_code == 400 and before.json()["error"]["code"] == "usage_month_outside_rental"
    running = _usage(staff_api, active_rental, "2026-12", "25", december)
    assert running.status_code == 409 and running.json()["error"]["code"] == "usage_month_not_ended"
    ahead = _usage(staff_api, active_rental, "2029-05", "25", december)
    assert ahead.status_code == 409 and ahead.json()["error"]["code"] == "usage_month_not_ended"
    assert not UsageReport.objects.exists()


def test_usage_of_a_provisioning_rental_or_after_termination_is_refused(active_rental, staff_api, staff):
    from rentals import services

    with committed():
        services.rental_terminate(rental_id=active_rental.pk, actor=staff, reason="test", now=T0 + timedelta(days=2))
    after = _usage(staff_api, active_rental, "2027-01", "25", T0 + timedelta(days=70))
    assert after.status_code == 400 and after.json()["error"]["code"] == "usage_month_outside_rental"
    # December is the month it ended in: reportable.
    assert _usage(staff_api, active_rental, "2026-12", "25", T0 + timedelta(days=70)).status_code == 200


def test_a_report_is_corrected_in_its_window_and_billed_after(active_rental, staff_api):
    ended = T0 + timedelta(hours=12)  # 1 December 00:00
    assert (
        _usage(staff_api, active_rental, "2026-11", "30", ended + timedelta(hours=1)).json()["overage_usd"] == "40.00"
    )
    corrected = _usage(staff_api, active_rental, "2026-11", "22", ended + timedelta(days=2))
    assert corrected.json() | {"rental_id": 0} == {
        "rental_id": 0,
        "month": "2026-11",
        "egress_tb": "22.000",
        "overage_tb": "2.000",
        "overage_usd": "8.00",
        "billed_invoice_id": None,
    }
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    invoice = Invoice.objects.get(renewal__rental=active_rental)
    assert [(ln.code, ln.amount_usd) for ln in invoice.lines.all()] == [
        ("gpu", Decimal("250.00")),
        ("usage:egress", Decimal("8.00")),
    ]


def test_the_usage_invoice_of_a_cancelled_rental_outlives_its_termination(active_rental, customer_api, staff_api):
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    run_jobs_twice(T0 + timedelta(days=4))
    usage = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="usage")
    assert usage.total_usd == Decimal("20.00")
    run_jobs_twice(active_rental.paid_until)  # the paid period ends: terminated
    assert Rental.objects.get(pk=active_rental.pk).status == "terminated"
    assert Invoice.objects.get(pk=usage.pk).status == "expired"  # still owed, not voided
    assert UsageReport.objects.get().billed_invoice_id == usage.pk
    # and it can still be paid: re-quoted, then paid, after the rental has ended
    with time_machine.travel(active_rental.paid_until + timedelta(days=1), tick=False):
        resp = customer_api.post(f"/api/v1/invoices/{usage.pk}/requote", {"currency": "LTC"}, format="json")
        assert resp.status_code == 200, resp.json()
        pay(usage.number, int(resp.json()["amount"]), txid="tx-usage-after-the-end")
    assert Invoice.objects.get(pk=usage.pk).status == "settled"
    assert not CreditEntry.objects.filter(invoice_id=usage.pk).exists()


def test_usage_still_in_its_window_waits_for_the_next_renewal(active_rental, staff_api, settings):
    settings.USAGE_CORRECTION_DAYS = 30
    _usage(staff_api, active_rental, "2026-11", "30", T0 + timedelta(days=1))
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))  # 23 December: inside the 30 days
    invoice = Invoice.objects.get(renewal__rental=active_rental)
    assert [ln.code for ln in invoice.lines.all()] == ["gpu"]
    assert UsageReport.objects.get().billed_invoice_id is None


def test_usage_on_a_renewal_voided_by_cancelling_is_billed_on_its_own_invoice(active_rental, customer_api, staff_api):
    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    renewal = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="auto")
    assert [(ln.code, ln.amount_usd) for ln in renewal.lines.all()] == [
        ("gpu", Decimal("250.00")),
        ("usage:egress", Decimal("20.00")),
    ]
    with time_machine.travel(active_rental.paid_until - timedelta(days=6), tick=False), committed():
        assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
    assert Invoice.objects.get(pk=renewal.pk).status == "invalid"

    # The egress was used: voiding the renewal must not void what it billed for it.
    run_jobs_twice(active_rental.paid_until - timedelta(days=5))
    usage = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="usage")
    assert [(ln.code, ln.amount_usd) for ln in usage.lines.all()] == [("usage:egress", Decimal("20.00"))]
    assert UsageReport.objects.get().billed_invoice_id == usage.pk


def test_usage_on_a_voided_renewal_can_be_corrected_before_it_is_billed_again(active_rental, customer_api, staff_api):
    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    billed = _usage(staff_api, active_rental, "2026-11", "24", active_rental.paid_until - timedelta(days=7))
    assert billed.status_code == 409 and billed.json()["error"]["code"] == "usage_already_billed"
    at = active_rental.paid_until - timedelta(days=6)
    with time_machine.travel(at, tick=False), committed():
        assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
    corrected = _usage(staff_api, active_rental, "2026-11", "24", at + timedelta(minutes=1))
    assert corrected.status_code == 200, corrected.json()
    usage = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="usage")
    assert usage.total_usd == Decimal("16.00") and UsageReport.objects.get().billed_invoice_id == usage.pk


def test_usage_on_a_renewal_voided_by_termination_is_billed_on_its_own_invoice(active_rental, staff_api, staff):
    from rentals import services

    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    renewal = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="auto")
    with committed():
        services.rental_terminate(
            rental_id=active_rental.pk, actor=staff, reason="test", now=active_rental.paid_until - timedelta(days=6)
        )
    assert Invoice.objects.get(pk=renewal.pk).status == "invalid"
    usage = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="usage")
    assert usage.total_usd == Decimal("20.00") and UsageReport.objects.get().billed_invoice_id == usage.pk


def test_usage_on_a_renewal_left_to_lapse_goes_onto_the_next_one_once(active_rental, customer_api, staff_api):
    """A renewal asked for while the one that billed the usage has lapsed takes
    the usage over, the lapsed one closed, inside its monitoring window too: left
    on it while a late payment could still settle it, a customer who let each
    automatic renewal lapse and asked for a new one at once never paid for egress
    (each renewal paid carried none, the next automatic one all of it)."""
    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    issued = active_rental.paid_until - timedelta(days=7)
    run_jobs_twice(issued)
    auto = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="auto")
    assert [ln.code for ln in auto.lines.all()] == ["gpu", "usage:egress"]

    inside = issued + timedelta(hours=30)  # its quote held 24 hours; its window is open
    run_jobs_twice(inside)
    assert Invoice.objects.get(pk=auto.pk).status == "expired"
    with time_machine.travel(inside, tick=False), committed():
        first = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert first.status_code == 201, first.json()
    [asked] = [r for r in first.json()["renewal_invoices"] if r["id"] != auto.pk]
    manual = Invoice.objects.get(pk=asked["id"])
    assert [ln.code for ln in manual.lines.all()] == ["gpu", "usage:egress"]
    assert Invoice.objects.get(pk=auto.pk).status == "invalid"
    assert UsageReport.objects.get().billed_invoice_id == manual.pk
    with time_machine.travel(inside, tick=False):
        requote = customer_api.post(f"/api/v1/invoices/{auto.pk}/requote", {}, format="json")
    assert requote.status_code == 409 and requote.json()["error"]["code"] == "invoice_not_expired"
    run_jobs_twice(inside + timedelta(hours=25))  # that one lapses too, unpaid

    # The next renewal asked for takes it over again: the usage is billed on whichever is paid.
    after = issued + timedelta(days=3)
    run_jobs_twice(after)
    with time_machine.travel(after, tick=False), committed():
        second = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert second.status_code == 201, second.json()
    [latest] = [r for r in second.json()["renewal_invoices"] if r["id"] not in (auto.pk, manual.pk)]
    renewal = Invoice.objects.get(pk=latest["id"])
    assert [(ln.code, ln.amount_usd) for ln in renewal.lines.all()] == [
        ("gpu", Decimal("250.00")),
        ("usage:egress", Decimal("20.00")),
    ]
    assert UsageReport.objects.get().billed_invoice_id == renewal.pk
    assert Invoice.objects.get(pk=manual.pk).status == "invalid"

    with time_machine.travel(after + timedelta(minutes=5), tick=False):
        pay(renewal.number, int(latest["amount"]), txid="tx-renewal-with-usage")
    assert Rental.objects.get(pk=active_rental.pk).paid_until == active_rental.paid_until + MONTH
    run_jobs_twice(after + timedelta(days=2))
    assert UsageReport.objects.get().billed_invoice_id == renewal.pk


def test_usage_on_a_lapsed_renewal_with_a_payment_confirming_stays_on_it(active_rental, customer_api, staff_api):
    """The lapsed renewal was paid late, inside its window, and the payment
    confirms: a renewal asked for meanwhile leaves the usage on it (voided, the
    payment would become credit instead of settling it)."""
    from billing import services
    from billing.services import Observation

    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    issued = active_rental.paid_until - timedelta(days=7)
    run_jobs_twice(issued)
    auto = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="auto")
    inside = issued + timedelta(hours=30)
    run_jobs_twice(inside)
    assert Invoice.objects.get(pk=auto.pk).status == "expired"
    request = auto.active_request
    with time_machine.travel(inside, tick=False), committed():
        services.payment_observe(
            observation=Observation(
                currency=request.currency,
                txid="tx-late-confirming",
                output_index=0,
                match_key=request.match_key,
                amount=int(request.amount_due),
                confirmations=0,
            ),
            now=inside,
        )
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert resp.status_code == 201, resp.json()
    [asked] = [r for r in resp.json()["renewal_invoices"] if r["id"] != auto.pk]
    assert [ln.code for ln in Invoice.objects.get(pk=asked["id"]).lines.all()] == ["gpu"]
    assert UsageReport.objects.get().billed_invoice_id == auto.pk
    assert Invoice.objects.get(pk=auto.pk).status != "invalid"


def test_usage_on_a_lapsed_renewal_re_quoted_that_moment_stays_on_it(
    active_rental, customer_api, staff_api, monkeypatch
):
    # The customer re-quotes (or pays) the lapsed renewal between the renewal's listing of
    # its usage and its lock on that invoice: the usage stays there, billed once.
    from billing import services as billing_services
    from core.errors import Conflict

    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    issued = active_rental.paid_until - timedelta(days=7)
    run_jobs_twice(issued)
    auto = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="auto")
    after = issued + timedelta(days=3)
    run_jobs_twice(after)

    def re_quoted(**kwargs):
        raise Conflict("invoice_not_lapsed", "re-quoted meanwhile")

    monkeypatch.setattr(billing_services, "invoice_void_lapsed", re_quoted)
    with time_machine.travel(after, tick=False), committed():
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert resp.status_code == 201, resp.json()
    [asked] = [r for r in resp.json()["renewal_invoices"] if r["id"] != auto.pk]
    assert [ln.code for ln in Invoice.objects.get(pk=asked["id"]).lines.all()] == ["gpu"]
    assert UsageReport.objects.get().billed_invoice_id == auto.pk


def test_a_renewal_with_usage_paid_after_a_cancel_keeps_the_usage_and_credits_the_rest(
    active_rental, customer_api, staff_api
):
    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    issued = active_rental.paid_until - timedelta(days=7)
    run_jobs_twice(issued)
    renewal = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="auto")
    assert renewal.total_usd == Decimal("270.00")
    amount = int(renewal.active_request.amount_due)
    with time_machine.travel(issued + timedelta(hours=1), tick=False):
        pay(renewal.number, amount, confirmations=1, txid="tx-in-flight")  # confirming: not voided
        with committed():
            assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
        pay(renewal.number, amount, confirmations=6, txid="tx-in-flight")
    assert Invoice.objects.get(pk=renewal.pk).status == "settled"
    # The 20.00 of egress was used: it stays paid by this invoice; the 250.00 term comes back.
    entry = CreditEntry.objects.get(invoice_id=renewal.pk)
    assert (entry.kind, entry.amount_usd) == ("unfulfilled", Decimal("250.00"))
    assert UsageReport.objects.get().billed_invoice_id == renewal.pk
    run_jobs_twice(active_rental.paid_until + timedelta(days=1))
    assert not Invoice.objects.filter(renewal__rental=active_rental, renewal__kind="usage").exists()


@pytest.mark.parametrize(("times", "unfulfilled", "overpaid"), [(1, "200.00", None), (2, "150.00", "250.00")])
def test_a_renewal_paid_while_its_rental_is_cancelled_is_credited_as_buying_nothing(
    active_rental, customer_api, times, unfulfilled, overpaid
):
    """The renewal is paid, in full, a day into its 24-hour quote once the coin
    has fallen 20 %, and the rental cancelled while the payment confirms: the
    renewal buys nothing and is credited at the market's rate when the coins
    were seen, not at the old price (the same free option as a short payment
    left to expire). Paid twice over, the over-payment was credited at the
    quote's rate when it settled: what is credited back on cancel is what all
    of it was worth less that, so the whole is credit at the market's rate."""
    from billing import services
    from billing.models import RateSample
    from billing.services import Observation

    issued = active_rental.paid_until - timedelta(days=7)
    run_jobs_twice(issued)
    renewal = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="auto")
    request = renewal.active_request
    seen_at = issued + timedelta(hours=20)
    for source in ("kraken", "coingecko"):
        RateSample.objects.create(
            currency=request.currency,
            source=source,
            usd=request.rate_usd * Decimal("0.8"),
            observed_at=seen_at - timedelta(seconds=30),
        )

    def seen(confirmations: int) -> None:
        with committed():
            services.payment_observe(
                observation=Observation(
                    currency=request.currency,
                    txid="tx-watched",
                    output_index=0,
                    match_key=request.match_key,
                    amount=times * int(request.amount_due),
                    confirmations=confirmations,
                ),
                now=seen_at,
            )

    with time_machine.travel(seen_at, tick=False):
        seen(1)
        with committed():
            assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
        seen(6)
    assert Invoice.objects.get(pk=renewal.pk).status == "settled"
    entries = {e.kind: e.amount_usd for e in CreditEntry.objects.filter(invoice_id=renewal.pk)}
    assert entries.get("unfulfilled") == Decimal(unfulfilled)
    assert entries.get("overpayment") == (Decimal(overpaid) if overpaid else None)
    assert credit_balance_usd(account=active_rental.account) == Decimal("200.00") * times


def test_a_usage_invoice_of_its_own_that_lapses_keeps_its_usage(active_rental, customer_api, staff_api):
    # Billed again each time it lapsed, a customer who never pays would be sent one after another.
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
    _usage(staff_api, active_rental, "2026-11", "25", T0 + timedelta(days=1))
    run_jobs_twice(T0 + timedelta(days=4))
    usage = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="usage")
    run_jobs_twice(T0 + timedelta(days=12))
    from rentals import services

    with committed():
        services.rentals_usage_bill_due(now=T0 + timedelta(days=12))
    assert Invoice.objects.get(pk=usage.pk).status == "expired"
    assert Invoice.objects.filter(renewal__rental=active_rental, renewal__kind="usage").count() == 1
    assert UsageReport.objects.get().billed_invoice_id == usage.pk


def test_a_suspended_rental_whose_renewal_is_confirming_is_not_terminated(active_rental, customer_api):
    # Paid minutes before the deadline, seen, not yet confirmed: a termination would wipe the
    # server and turn the payment into credit for a server gone.
    end = active_rental.paid_until
    run_jobs_twice(end + timedelta(days=3))
    assert Rental.objects.get(pk=active_rental.pk).status == "suspended"
    deadline = end + timedelta(days=10)
    run_jobs_twice(deadline - timedelta(hours=1))  # the automatic renewal has lapsed
    with time_machine.travel(deadline - timedelta(minutes=10), tick=False):
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
        assert resp.status_code == 201, resp.json()
        [renewal] = [r for r in resp.json()["renewal_invoices"] if r["status"] == "new"]
        pay(renewal["number"], int(renewal["amount"]), confirmations=1, txid="tx-last-minute")
    assert Invoice.objects.get(pk=renewal["id"]).status == "processing"
    run_jobs_twice(deadline + timedelta(minutes=5))
    assert Rental.objects.get(pk=active_rental.pk).status == "suspended"
    with time_machine.travel(deadline + timedelta(minutes=30), tick=False):
        pay(renewal["number"], int(renewal["amount"]), confirmations=6, txid="tx-last-minute")
    assert Rental.objects.get(pk=active_rental.pk).status == "active"
    assert not CreditEntry.objects.filter(invoice_id=renewal["id"]).exists()


def test_a_renewal_that_never_confirms_holds_a_termination_for_a_bounded_time(active_rental, customer_api):
    """A renewal paid with too low a fee held the termination for as long as it
    confirmed (up to its monitoring window), and the next one as long again: the
    host's GPUs out of stock for good at the price of a few fees. The hold ends
    ORDER_CONFIRMING_HOLD_MINUTES after the termination was due; a payment that
    confirms after it is credited back."""
    from django.conf import settings

    end = active_rental.paid_until
    run_jobs_twice(end + timedelta(days=3))
    suspended_at = Rental.objects.get(pk=active_rental.pk).suspended_at
    deadline = suspended_at + timedelta(days=7)
    run_jobs_twice(deadline - timedelta(hours=1))
    with time_machine.travel(deadline - timedelta(minutes=10), tick=False):
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
        [renewal] = [r for r in resp.json()["renewal_invoices"] if r["status"] == "new"]
        pay(renewal["number"], int(renewal["amount"]), confirmations=1, txid="tx-low-fee")
    hold = timedelta(minutes=settings.ORDER_CONFIRMING_HOLD_MINUTES)
    run_jobs_twice(deadline + hold - timedelta(minutes=1))
    assert Rental.objects.get(pk=active_rental.pk).status == "suspended"
    run_jobs_twice(deadline + hold + timedelta(minutes=1))
    assert Rental.objects.get(pk=active_rental.pk).status == "terminated"
    assert Invoice.objects.get(pk=renewal["id"]).status == "processing"
    with time_machine.travel(deadline + hold + timedelta(hours=3), tick=False):
        pay(renewal["number"], int(renewal["amount"]), confirmations=6, txid="tx-low-fee")
    entry = CreditEntry.objects.get(invoice_id=renewal["id"])
    assert entry.kind == "unfulfilled" and entry.amount_usd > 0


def test_a_rental_renewed_after_the_job_listed_it_is_neither_suspended_nor_ended(active_rental, customer_api):
    from rentals.services import lifecycle

    end = active_rental.paid_until
    due = end + timedelta(days=3)
    with time_machine.travel(end - timedelta(days=1), tick=False):
        [renewal] = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json").json()[
            "renewal_invoices"
        ]
        pay(renewal["number"], int(renewal["amount"]), txid="tx-just-in-time")
    # The job read this rental as due before the payment above; under its lock it asks again.
    with committed():
        assert lifecycle._suspend_if_due(rental_id=active_rental.pk, now=due) is None
        assert lifecycle._terminate_if_due(rental_id=active_rental.pk, now=due + timedelta(days=7)) is None
    assert Rental.objects.get(pk=active_rental.pk).status == "active"
    # Cancelled now, it ends when its new paid period does, not when the old one did.
    with time_machine.travel(due, tick=False), committed():
        assert customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel").status_code == 200
        assert lifecycle._end_if_due(rental_id=active_rental.pk, now=end) is None
    assert Rental.objects.get(pk=active_rental.pk).status == "active"
    assert lifecycle._end_if_due(rental_id=active_rental.pk, now=end + MONTH).status == "terminated"


def test_renewal_terms_are_never_priced_at_nothing(active_rental, customer_api):
    # Placed under a 60 % multi-GPU tier (kept on the order), renewed for 12 terms once staff
    # set that tier to 40 %: together 100 %, refused as a new order's quote is.
    from catalog.models import TermDiscount
    from rentals.models import Order

    Order.objects.filter(pk=active_rental.order_id).update(multi_gpu_discount_pct=Decimal("60"))
    TermDiscount.objects.filter(term=active_rental.term, min_terms=12).update(percent=Decimal("40"))
    with time_machine.travel(active_rental.paid_until - timedelta(days=10), tick=False):
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {"terms": 12}, format="json")
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "pricing_unavailable"
    assert not Invoice.objects.filter(renewal__rental=active_rental).exists()


# --- Periodic jobs: one rental that fails holds back no other -------------------------------


def _second_rental(customer, customer_api, staff) -> Rental:
    from accounts.services import ssh_key_add
    from rentals import services

    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k2")
    with time_machine.travel(T0, tick=False):
        order = customer_api.post(
            "/api/v1/orders",
            {
                "region": "DFW-1",
                "gpu": "l4",
                "gpu_count": 1,
                "term": "monthly",
                "terms": 1,
                "template": "ollama-ubuntu-24.04",
                "addons": [],
                "ssh_keys": [key.pk],
                "pay_currency": "LTC",
            },
            format="json",
        ).json()
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(order["invoice"]["number"], int(order["invoice"]["amount"]), txid="tx-second")
    rental = Rental.objects.get(order_id=order["id"])
    with committed():
        services.rental_activate(
            rental_id=rental.pk, ipv4="203.0.113.12", ipv6_prefix="2001:db8:12::/64", actor=staff, now=T0 + LATER
        )
    return Rental.objects.get(pk=rental.pk)


def test_a_rental_whose_renewal_fails_holds_back_no_other_renewal(
    active_rental, customer, customer_api, staff, monkeypatch
):
    from rentals.services import lifecycle

    other = _second_rental(customer, customer_api, staff)
    issue = lifecycle.renewal_issue

    def broken_for_one(*, rental_id, now=None):
        if rental_id == active_rental.pk:
            raise RuntimeError("bad data on one rental")
        return issue(rental_id=rental_id, now=now)

    monkeypatch.setattr(lifecycle, "renewal_issue", broken_for_one)
    at = active_rental.paid_until - timedelta(days=7)
    with time_machine.travel(at, tick=False), committed():
        assert lifecycle.rentals_renewals_issue(now=at) == 1
    assert Invoice.objects.filter(renewal__rental=other).count() == 1
    assert not Invoice.objects.filter(renewal__rental=active_rental).exists()

    monkeypatch.undo()  # fixed: the next run issues it
    with time_machine.travel(at + LATER, tick=False), committed():
        assert lifecycle.rentals_renewals_issue(now=at + LATER) == 1
    assert Invoice.objects.filter(renewal__rental=active_rental).count() == 1


# --- The provisioning job on the rental ---------------------------------------------------------


def test_the_rental_names_its_real_provisioning_job(active_rental):
    job = ProvisioningJob.objects.get(rental=active_rental, action="provision")
    assert active_rental.provision_job == job.pk
    assert job.payload["job"] == str(active_rental.provision_job)


# --- Closing the account ----------------------------------------------------------------------------


def test_closing_the_account_stops_its_rentals_renewing(active_rental, customer_api):
    resp = customer_api.delete("/api/v1/account", {"password": "correct horse battery staple"}, format="json")
    assert resp.status_code == 204
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.auto_renew is False and rental.status == "active"  # runs to the end of what was paid
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    assert not Invoice.objects.filter(renewal__rental=active_rental).exists()


def _renewal_paid_unconfirmed(rental, customer_api, when) -> dict:
    """A renewal of `rental` asked for and paid at `when`, seen on chain and not confirmed."""
    with time_machine.travel(when, tick=False):
        resp = customer_api.post(f"/api/v1/rentals/{rental.pk}/renew", {}, format="json")
        assert resp.status_code == 201, resp.json()
        [renewal] = [r for r in resp.json()["renewal_invoices"] if r["status"] == "new"]
        pay(renewal["number"], int(renewal["amount"]), confirmations=1, txid="tx-before-the-deadline")
    assert Invoice.objects.get(pk=renewal["id"]).status == "processing"
    return renewal


def test_a_rental_whose_renewal_is_confirming_is_not_switched_off(active_rental, customer_api):
    """Paid minutes before the suspension was due and still confirming: the
    server stays on (the job would power it off and on again within the hour)."""
    due = active_rental.paid_until + timedelta(days=3)
    renewal = _renewal_paid_unconfirmed(active_rental, customer_api, due - timedelta(minutes=10))
    run_jobs_twice(due + timedelta(minutes=5))
    assert Rental.objects.get(pk=active_rental.pk).status == "active"
    assert not ProvisioningJob.objects.filter(rental=active_rental, action="power_off").exists()
    with time_machine.travel(due + timedelta(minutes=40), tick=False):
        pay(renewal["number"], int(renewal["amount"]), confirmations=6, txid="tx-before-the-deadline")
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.status == "active" and rental.paid_until > due


def test_a_renewal_that_never_confirms_holds_off_the_suspension_for_a_while_only(active_rental, customer_api, settings):
    """A transaction sent with too low a fee is no way to run unpaid for the day
    its invoice is watched: past ORDER_CONFIRMING_HOLD_MINUTES after the
    suspension was due, the rental is suspended."""
    due = active_rental.paid_until + timedelta(days=3)
    _renewal_paid_unconfirmed(active_rental, customer_api, due - timedelta(minutes=10))
    hold = timedelta(minutes=settings.ORDER_CONFIRMING_HOLD_MINUTES)
    run_jobs_twice(due + hold - timedelta(minutes=1))
    assert Rental.objects.get(pk=active_rental.pk).status == "active"
    run_jobs_twice(due + hold)
    assert Rental.objects.get(pk=active_rental.pk).status == "suspended"
