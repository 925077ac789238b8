"""A rental's whole life with the clock moved: order -> invoice -> payment
(record_payment) -> settled -> provisioning -> active -> renewal invoice at the
right moment -> paid from credit -> extended; unpaid -> grace -> suspended ->
terminated -> slots free again. Every periodic job is run twice: the second run
changes nothing."""

from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine

from accounts.services import ssh_key_add
from billing import services as billing
from billing.models import Invoice
from billing.selectors import credit_balance_usd
from catalog.models import Slot, SlotStatus
from rentals import services
from rentals.models import Order, Rental, RentalPeriod, UsageReport
from tests.rentals.helpers import MONTH, T0, committed, new_key_line, pay, run_jobs_twice

pytestmark = pytest.mark.django_db


def free_l4_dfw() -> int:
    return Slot.objects.filter(host__gpu__slug="l4", host__region__code="DFW-1", status=SlotStatus.FREE).count()


def test_the_whole_life(ordered, customer, customer_api, staff_api, staff):
    stock_at_start = free_l4_dfw() + 1  # the order holds one
    invoice = ordered["invoice"]
    assert (invoice["amount_usd"], invoice["pay_currency"], invoice["amount"]) == ("250.00", "LTC", "277777778")

    # Paid and confirmed five minutes later.
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(invoice["number"], 277_777_778, confirmations=1)
        assert customer_api.get(f"/api/v1/invoices/{invoice['id']}").json()["status"] == "processing"
        assert not Rental.objects.exists()
        pay(invoice["number"], 277_777_778, confirmations=6)
    order = customer_api.get(f"/api/v1/orders/{ordered['id']}").json()
    assert (order["status"], order["invoice"]["status"]) == ("paid", "settled")
    rental = customer_api.get(f"/api/v1/rentals/{order['rental_id']}").json()
    assert (rental["status"], rental["periods"], rental["paid_until"]) == ("provisioning", [], None)
    assert Slot.objects.filter(holder=f"rental:{rental['id']}", status=SlotStatus.RENTED).count() == 1

    # Handed over two minutes after payment: the first paid period starts then.
    handover = T0 + timedelta(minutes=7)
    with time_machine.travel(handover, tick=False), committed():
        resp = staff_api.post(
            f"/api/v1/ops/rentals/{rental['id']}/ready",
            {"ipv4": "203.0.113.10", "ipv6_prefix": "2001:db8:10:20::/64"},
            format="json",
        )
    assert resp.status_code == 200, resp.json()
    rental = customer_api.get(f"/api/v1/rentals/{rental['id']}").json()
    assert rental["status"] == "active" and rental["provisioning_seconds"] == 120
    assert (rental["ipv4"], rental["ipv6_prefix"]) == ("203.0.113.10", "2001:db8:10:20::/64")
    end1 = handover + MONTH
    assert rental["periods"] == [
        {
            "kind": "initial",
            "starts_at": handover.isoformat().replace("+00:00", "Z"),
            "ends_at": end1.isoformat().replace("+00:00", "Z"),
            "invoice_id": invoice["id"],
        }
    ]

    # Credit that will pay the renewal.
    billing.credit_post(account_id=customer.pk, kind="adjustment", amount_usd=Decimal("300.00"), reason="goodwill")

    # A minute before the renewal moment (7 days before the end): nothing.
    assert run_jobs_twice(end1 - timedelta(days=7, minutes=1)) == [0, 0, 0, 0, 0]
    assert not Invoice.objects.exclude(pk=invoice["id"]).exists()
    # At the moment: one renewal invoice, at the price on the order, paid from credit, period extended.
    with time_machine.travel(end1 - timedelta(days=7), tick=False):
        assert run_jobs_twice(end1 - timedelta(days=7)) == [0, 0, 0, 0, 0]
    renewal = Invoice.objects.exclude(pk=invoice["id"]).get()
    assert (renewal.total_usd, renewal.status, renewal.settled_via) == (Decimal("250.00"), "settled", "credit")
    assert not renewal.requests.exists()  # nothing to pay on chain: no address handed out
    assert [(ln.description, ln.amount_usd) for ln in renewal.lines.all()] == [
        ("L4 GPU, per card and month", Decimal("250.00"))
    ]
    assert credit_balance_usd(account=customer) == Decimal("50.00")
    end2 = end1 + MONTH
    rental_obj = Rental.objects.get(pk=rental["id"])
    assert rental_obj.paid_until == end2
    assert list(rental_obj.periods.values_list("kind", "starts_at", "ends_at")) == [
        ("initial", handover, end1),
        ("renewal", end1, end2),
    ]

    # The next renewal is issued but the credit does not cover it: unpaid.
    assert run_jobs_twice(end2 - timedelta(days=7)) == [0, 0, 0, 0, 0]
    unpaid = Invoice.objects.filter(status="new").get()
    # Quoted at issue in the currency the rental was paid in, its rate held for a day.
    assert unpaid.total_usd == Decimal("250.00") and unpaid.active_request.currency == "LTC"
    assert unpaid.expires_at == end2 - timedelta(days=6)
    # Past the end: three days of grace, still active; then suspended.
    assert run_jobs_twice(end2 + timedelta(days=3, minutes=-1)) == [0, 0, 0, 0, 0]
    assert Rental.objects.get(pk=rental["id"]).status == "active"
    with committed():
        assert services.rentals_suspend_due(now=end2 + timedelta(days=3)) == 1
    assert run_jobs_twice(end2 + timedelta(days=3)) == [0, 0, 0, 0, 0]
    assert Rental.objects.get(pk=rental["id"]).status == "suspended"
    assert Invoice.objects.get(pk=unpaid.pk).status == "expired"
    # Seven days later: terminated, the slot back in stock.
    assert run_jobs_twice(end2 + timedelta(days=10, minutes=-1)) == [0, 0, 0, 0, 0]
    with committed():
        assert services.rentals_terminate_due(now=end2 + timedelta(days=10)) == 1
    assert run_jobs_twice(end2 + timedelta(days=10)) == [0, 0, 0, 0, 0]
    final = customer_api.get(f"/api/v1/rentals/{rental['id']}").json()
    assert final["status"] == "terminated"
    assert free_l4_dfw() == stock_at_start
    assert not Slot.objects.filter(holder=f"rental:{rental['id']}").exists()
    assert [j.action for j in rental_obj.jobs.order_by("created_at")] == ["provision", "power_off", "deprovision"]


def test_paying_while_suspended_resumes_and_counts_the_grace_it_ran(active_rental, customer, customer_api):
    end = active_rental.paid_until
    run_jobs_twice(end - timedelta(days=7))
    run_jobs_twice(end + timedelta(days=3))
    assert Rental.objects.get(pk=active_rental.pk).status == "suspended"
    invoice = Invoice.objects.get(status="expired", renewal__rental=active_rental)
    resumed_at = end + timedelta(days=4)
    with time_machine.travel(resumed_at, tick=False):
        resp = customer_api.post(f"/api/v1/invoices/{invoice.pk}/requote", {"currency": "LTC"}, format="json")
        assert resp.status_code == 200, resp.json()
        pay(invoice.number, int(resp.json()["amount"]), txid="tx-renewal")
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.status == "active" and rental.suspended_at is None
    last = rental.periods.order_by("starts_at").last()
    # It ran 3 days of grace unpaid, then was off for a day: the new month counts the
    # grace (as a renewal paid during it would have), not the day off.
    start = resumed_at - timedelta(days=3)
    assert (last.kind, last.starts_at, last.ends_at) == ("resume", start, start + MONTH)
    assert rental.paid_until == start + MONTH
    assert rental.paid_until - resumed_at == MONTH - timedelta(days=3)
    assert [j.action for j in rental.jobs.order_by("created_at")][-1] == "power_on"


def test_a_renewal_paid_during_grace_continues_from_the_end(active_rental, customer_api):
    end = active_rental.paid_until
    run_jobs_twice(end - timedelta(days=7))
    invoice = Invoice.objects.get(status="new", renewal__rental=active_rental)
    with time_machine.travel(end + timedelta(days=1), tick=False):
        # Its quote of a week ago has lapsed: a fresh one, at today's rate.
        resp = customer_api.post(f"/api/v1/invoices/{invoice.pk}/requote", {}, format="json")
        assert resp.status_code == 200, resp.json()
        pay(invoice.number, int(resp.json()["amount"]), txid="tx-grace")
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.paid_until == end + MONTH  # the paid period is continuous
    assert rental.status == "active"


def test_cancel_runs_to_the_end_of_the_paid_period(active_rental, customer_api):
    end = active_rental.paid_until
    resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel")
    assert resp.status_code == 200 and resp.json()["auto_renew"] is False and resp.json()["cancelled_at"]
    assert run_jobs_twice(end - timedelta(days=7)) == [0, 0, 0, 0, 0]
    assert not Invoice.objects.filter(renewal__rental=active_rental).exists()  # no renewal
    assert run_jobs_twice(end - timedelta(minutes=1)) == [0, 0, 0, 0, 0]
    assert Rental.objects.get(pk=active_rental.pk).status == "active"  # a paid period is never cut short
    with committed():
        assert services.rentals_suspend_due(now=end) == 1
    assert Rental.objects.get(pk=active_rental.pk).status == "terminated"


def test_auto_renew_off_issues_no_renewal(active_rental, customer_api):
    resp = customer_api.patch(f"/api/v1/rentals/{active_rental.pk}", {"auto_renew": False}, format="json")
    assert resp.status_code == 200 and resp.json()["auto_renew"] is False
    run_jobs_twice(active_rental.paid_until - timedelta(days=1))
    assert not Invoice.objects.filter(renewal__rental=active_rental).exists()


def test_renew_now_and_only_one_open_renewal(active_rental, customer_api):
    resp = customer_api.post(
        f"/api/v1/rentals/{active_rental.pk}/renew", {"terms": 3, "pay_currency": "BTC"}, format="json"
    )
    assert resp.status_code == 201, resp.json()
    invoice = Invoice.objects.get(renewal__rental=active_rental)
    assert invoice.total_usd == Decimal("750.00") and invoice.active_request.currency == "BTC"
    again = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert again.status_code == 409 and again.json()["error"]["code"] == "renewal_open"
    pay(invoice.number, int(invoice.active_request.amount_due), confirmations=2, txid="tx-3")
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.paid_until == active_rental.paid_until + 3 * MONTH


def report_usage(staff_api, rental, month: str, egress_tb: str, at):
    with time_machine.travel(at, tick=False), committed():
        return staff_api.post(
            f"/api/v1/ops/rentals/{rental.pk}/usage", {"month": month, "egress_tb": egress_tb}, format="json"
        )


# The rental is handed over on 30 November: November is its first month.
NOVEMBER_ENDED = T0 + timedelta(days=1)


def test_egress_beyond_20_tb_goes_onto_the_next_renewal(active_rental, staff_api):
    resp = report_usage(staff_api, active_rental, "2026-11", "23.5", NOVEMBER_ENDED)
    assert resp.status_code == 200, resp.json()
    assert resp.json() | {"rental_id": 0} == {
        "rental_id": 0,
        "month": "2026-11",
        "egress_tb": "23.500",
        "overage_tb": "3.500",
        "overage_usd": "14.00",
        "billed_invoice_id": None,
    }
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    invoice = Invoice.objects.get(renewal__rental=active_rental)
    assert [(ln.code, ln.amount_usd) for ln in invoice.lines.all()] == [
        ("gpu", Decimal("250.00")),
        ("usage:egress", Decimal("14.00")),
    ]
    assert UsageReport.objects.get().billed_invoice_id == invoice.pk
    billed = report_usage(staff_api, active_rental, "2026-11", "30", active_rental.paid_until)
    assert billed.status_code == 409 and billed.json()["error"]["code"] == "usage_already_billed"


def test_egress_of_an_ending_rental_gets_its_own_invoice(active_rental, customer_api, staff_api):
    customer_api.post(f"/api/v1/rentals/{active_rental.pk}/cancel")
    assert report_usage(staff_api, active_rental, "2026-11", "21", NOVEMBER_ENDED).status_code == 200
    # Inside the correction window nothing is billed; once it closes, the periodic job bills it.
    window_closes = NOVEMBER_ENDED - timedelta(hours=12) + timedelta(days=3)
    assert run_jobs_twice(window_closes - timedelta(seconds=1)) == [0, 0, 0, 0, 0]
    assert not Invoice.objects.filter(renewal__rental=active_rental).exists()
    assert run_jobs_twice(window_closes) == [0, 0, 0, 0, 0]
    invoice = Invoice.objects.get(renewal__rental=active_rental, renewal__kind="usage")
    assert invoice.total_usd == Decimal("4.00") and invoice.active_request.currency == "LTC"


def test_within_the_allowance_nothing_is_billed(active_rental, staff_api):
    resp = report_usage(staff_api, active_rental, "2026-11", "20", NOVEMBER_ENDED)
    assert resp.json()["overage_usd"] == "0.00"
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    assert Invoice.objects.get(renewal__rental=active_rental).total_usd == Decimal("250.00")


def test_ops_endpoints_need_a_staff_token(active_rental, customer_api):
    resp = customer_api.post(
        f"/api/v1/ops/rentals/{active_rental.pk}/usage", {"month": "2026-12", "egress_tb": "1"}, format="json"
    )
    assert resp.status_code == 403 and resp.json()["error"]["code"] == "permission_denied"


def test_other_accounts_get_404_on_rental_endpoints(active_rental, other_customer, api):
    api.force_authenticate(other_customer)
    for method, path, body in [
        ("get", f"/api/v1/rentals/{active_rental.pk}", None),
        ("patch", f"/api/v1/rentals/{active_rental.pk}", {"auto_renew": False}),
        ("post", f"/api/v1/rentals/{active_rental.pk}/renew", {}),
        ("post", f"/api/v1/rentals/{active_rental.pk}/cancel", None),
    ]:
        resp = getattr(api, method)(path, body, format="json")
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found", path
    assert api.get("/api/v1/rentals").json()["results"] == []


def test_late_payment_without_stock_becomes_credit(chains, customer, customer_api, catalog):
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    with time_machine.travel(T0, tick=False):
        order = customer_api.post(
            "/api/v1/orders",
            {
                "region": "PDX-1",
                "gpu": "b200",
                "gpu_count": 8,
                "term": "weekly",
                "terms": 1,
                "template": "ubuntu-24.04",
                "addons": [],
                "ssh_keys": [key.pk],
                "pay_currency": "USDT",
            },
            format="json",
        ).json()
    with time_machine.travel(T0 + timedelta(hours=1), tick=False), committed():
        billing.invoices_advance_due()
    assert Order.objects.get(pk=order["id"]).status == "expired"
    Slot.objects.filter(host__gpu__slug="b200", host__region__code="PDX-1", status=SlotStatus.FREE).update(
        status=SlotStatus.RENTED, holder="external"
    )  # someone else took the last node
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        pay(order["invoice"]["number"], int(order["invoice"]["amount"]), confirmations=12, txid="0xlate")
    order = Order.objects.get(pk=order["id"])
    assert order.status == "unfulfilled" and not Rental.objects.exists()
    assert order.invoice.status == "settled" and order.invoice.exception == "paid_late"
    assert credit_balance_usd(account=customer) == Decimal("7848.00")


def test_staff_extension_adds_a_period(active_rental, staff):
    period = services.rental_extend(rental_id=active_rental.pk, days=3, actor=staff, reason="outage on 12-02")
    assert (period.kind, period.starts_at, period.ends_at) == (
        "extension",
        active_rental.paid_until,
        active_rental.paid_until + timedelta(days=3),
    )
    assert RentalPeriod.objects.filter(rental=active_rental).count() == 2


def test_a_rental_suspended_with_paid_time_left_keeps_it(active_rental, staff, customer_api):
    end = active_rental.paid_until
    services.rental_suspend(rental_id=active_rental.pk, actor=staff, reason="abuse report", now=T0 + timedelta(days=1))
    # Suspended long ago but still paid: the termination job leaves it alone.
    assert services.rentals_terminate_due(now=T0 + timedelta(days=9)) == 0
    renewal = services.rental_renew_now(
        rental_id=active_rental.pk, account=active_rental.account, terms=1, currency="LTC", now=T0 + timedelta(days=9)
    )
    with time_machine.travel(T0 + timedelta(days=9), tick=False):
        pay(renewal.invoice.number, int(renewal.invoice.active_request.amount_due), txid="tx-resume")
    rental = Rental.objects.get(pk=active_rental.pk)
    assert rental.status == "active" and rental.end_reason == ""
    assert rental.paid_until == end + MONTH  # the paid days before the suspension are not lost


def test_no_automatic_renewal_while_one_asked_for_is_open(active_rental, customer_api):
    with time_machine.travel(active_rental.paid_until - timedelta(days=7, hours=1), tick=False):
        resp = customer_api.post(f"/api/v1/rentals/{active_rental.pk}/renew", {}, format="json")
    assert resp.status_code == 201
    run_jobs_twice(active_rental.paid_until - timedelta(days=7))
    assert Invoice.objects.filter(renewal__rental=active_rental).count() == 1
