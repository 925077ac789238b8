"""Orders, rentals and the dashboard as staff read them: records show no Save
button and refuse a POST, JSON snapshots render as tables, money has two
decimals, and the dashboard draws its charts (server-side SVG) with the
figures beside them."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

import pytest
import time_machine
from django.contrib.auth.models import Permission
from django.test import Client

from accounts.services import ssh_key_add
from rentals.models import Order, Rental
from tests.rentals.helpers import T0, new_key_line, pay

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_client(staff):
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def sized_order(chains, customer, customer_api, catalog):
    """An order with a workload (so a sizing snapshot), an add-on and an SSH key."""
    key = ssh_key_add(account=customer, public_key=new_key_line() + " alice@laptop", name="laptop")
    with time_machine.travel(T0, tick=False):
        resp = customer_api.post(
            "/api/v1/orders",
            {
                "region": "DFW-1",
                "gpu": "h100-sxm",
                "gpu_count": 1,
                "term": "monthly",
                "terms": 1,
                "template": "vllm-0.9-ubuntu-24.04",
                "addons": ["private-vlan"],
                "ssh_keys": [key.pk],
                "workload": {"model": "llama-3.1-70b", "precision": "fp8", "context": 8192, "concurrency": 1},
                "pay_currency": "LTC",
            },
            format="json",
        )
    assert resp.status_code == 201, resp.json()
    return resp.json()


def test_order_page_is_read_only_without_a_save_button(admin_client, sized_order):
    url = f"/admin/rentals/order/{sized_order['id']}/change/"
    page = admin_client.get(url)
    html = page.content.decode()
    assert page.status_code == 200
    assert 'name="_save"' not in html and 'name="_continue"' not in html
    assert "View order" in html
    before = Order.objects.get(pk=sized_order["id"]).status
    assert admin_client.post(url, {"status": "cancelled"}).status_code == 403
    assert Order.objects.get(pk=sized_order["id"]).status == before


def test_rental_page_is_read_only_and_actions_still_work(admin_client, active_rental):
    url = f"/admin/rentals/rental/{active_rental.pk}/change/"
    html = admin_client.get(url).content.decode()
    assert 'name="_save"' not in html and "View rental" in html
    assert admin_client.post(url, {"status": "terminated"}).status_code == 403
    listing = admin_client.get("/admin/rentals/rental/").content.decode()
    assert 'value="mark_provisioned"' in listing and 'value="terminate"' in listing


def test_actions_need_the_change_permission(active_rental, django_user_model):
    viewer = django_user_model.objects.create_user("viewer", "a-long-viewer-password", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_rental"))
    client = Client()
    client.force_login(viewer)
    listing = client.get("/admin/rentals/rental/")
    assert listing.status_code == 200 and 'value="terminate"' not in listing.content.decode()
    refused = client.post(
        "/admin/rentals/rental/",
        {"action": "terminate", "_selected_action": [active_rental.pk], "apply": "1", "reason": "not mine to do"},
    )
    assert Rental.objects.get(pk=active_rental.pk).status == "active", refused.status_code


def test_json_snapshots_render_as_tables(admin_client, sized_order):
    html = admin_client.get(f"/admin/rentals/order/{sized_order['id']}/change/").content.decode()
    # The workload: a key/value table, not a JSON string.
    assert '<th scope="row">precision</th><td>fp8</td>' in html
    assert '<th scope="row">context</th><td>8192</td>' in html
    assert '{"model": "llama-3.1-70b"' not in html and "{&quot;model&quot;" not in html
    # The sizing result's nested objects are tables inside the table.
    assert re.search(r'<th scope="row">per_gpu</th><td><table class="json-table">', html)
    # SSH keys: a table with a column per field, the key's fingerprint in a row.
    order = Order.objects.get(pk=sized_order["id"])
    assert '<th scope="col">fingerprint</th>' in html
    assert order.ssh_keys[0]["fingerprint"] in html
    # Add-ons as a list of words.
    assert "private-vlan" in html
    # Money in the price snapshot has two decimals and thousands separators.
    assert "1,715.00" in html and "1,690.00" in html


def test_rental_ssh_keys_render_as_a_table(admin_client, active_rental):
    html = admin_client.get(f"/admin/rentals/rental/{active_rental.pk}/change/").content.decode()
    assert '<table class="json-table json-records">' in html
    assert active_rental.ssh_keys[0]["fingerprint"] in html


def test_the_order_list_reads_like_a_billing_list(admin_client, sized_order):
    html = admin_client.get("/admin/rentals/order/").content.decode()
    assert "1 \u00d7 H100 SXM" in html and "1 \u00d7 monthly" in html
    assert "1,715.00" in html


# --- The dashboard --------------------------------------------------------------------


@pytest.fixture
def dashboard(admin_client, active_rental):
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):  # the day and month the invoice settled in
        resp = admin_client.get("/admin/rentals/rentaldashboard/")
    assert resp.status_code == 200
    return resp.content.decode()


def test_dashboard_money_has_two_decimals(admin_client, sized_order, staff):
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(sized_order["invoice"]["number"], 1_905_555_556, txid="tx-h100")
    with time_machine.travel(T0 + timedelta(hours=1), tick=False):
        html = admin_client.get("/admin/rentals/rentaldashboard/").content.decode()
    revenue = html[html.index('id="revenue"') :]
    assert "1,715.00" in revenue  # the month's USD, with cents and separators
    assert "19.05555556 LTC (1,905,555,556 litoshi)" in revenue
    assert re.search(r">\s*1715\s*<", html) is None


def test_dashboard_revenue_chart_per_day_and_currency(dashboard):
    assert 'aria-label="Revenue per day, USD, last 90 days"' in dashboard
    # One bar for the day the L4's invoice settled, in LTC, with its figure on hover.
    assert "<title>2026-11-30: LTC 250.00</title>" in dashboard
    assert "250.00 in all" in dashboard


def test_dashboard_gpus_rented_and_free_per_card_and_region(dashboard):
    section = dashboard[dashboard.index('id="stock-charts"') :]
    for region in ("DFW-1", "IAD-1", "PDX-1"):
        assert f'aria-label="GPUs rented and free per card in {region}"' in section
    # The figures table beside the DFW-1 chart: the L4 row counts the rental's GPU as rented.
    dfw = section[section.index("GPUs in DFW-1") : section.index("GPUs in IAD-1")]
    assert "<th>Card</th>" in dfw.replace(' class="figure"', "") and "Rented" in dfw and "Free" in dfw
    assert re.search(r"<title>L4: \d+ Rented</title>", dfw)


def test_dashboard_invoices_by_state_and_time_to_hand_over(dashboard):
    assert 'aria-label="Invoices by state"' in dashboard
    assert "<title>settled: 1 Settled</title>" in dashboard
    # Settled at T0+5 min, active at T0+10 min: one rental in the 2-5 min bucket... 5 min exactly is "5-15 min".
    assert 'aria-label="Rentals by time from settled invoice to active"' in dashboard
    assert "<title>5-15 min: rentals 1</title>" in dashboard
    assert "median 5 min 00 s" in dashboard


# --- A customer's page: their orders, invoices, rentals and credit -------------------


def _panel(html: str, name: str) -> str:
    """The readonly field of one panel on the account page."""
    match = re.search(rf'<div class="form-row field-panel_{name}">(.*?)</div>\s*</div>\s*</div>', html, re.S)
    assert match, f"no {name} panel"
    return match.group(1)


def test_account_page_shows_orders_invoices_rentals_and_credit(admin_client, active_rental, customer):
    from billing.services import credit_adjust

    credit_adjust(account_id=customer.pk, amount_usd=Decimal("12.50"), reason="goodwill", actor=None)
    order = active_rental.order
    invoice = order.invoice
    html = admin_client.get(f"/admin/accounts/account/{customer.pk}/change/").content.decode()

    orders = _panel(html, "orders")
    assert f'href="/admin/rentals/order/{order.pk}/change/"' in orders
    assert f'href="/admin/billing/invoice/{invoice.pk}/change/"' in orders
    assert f"/admin/rentals/order/?account__id__exact={customer.pk}" in orders

    invoices = _panel(html, "invoices")
    assert invoice.number in invoices and "paid" in invoices
    assert f'<a href="/admin/rentals/order/{order.pk}/change/">order {order.pk}</a>' in invoices

    rentals = _panel(html, "rentals")
    assert f'href="/admin/rentals/rental/{active_rental.pk}/change/"' in rentals

    credit = _panel(html, "credit")
    assert "Balance: <strong>12.50 USD</strong>" in credit
    ledger_url = f"/admin/billing/creditentry/?account__id__exact={customer.pk}"
    assert ledger_url in credit
    # The filtered lists the panels link to answer, and hold this customer's rows.
    for url, needle in (
        (ledger_url, "goodwill"),
        (f"/admin/rentals/order/?account__id__exact={customer.pk}", f"/admin/rentals/order/{order.pk}/change/"),
        (f"/admin/billing/invoice/?account__id__exact={customer.pk}", invoice.number),
        (f"/admin/rentals/rental/?account__id__exact={customer.pk}", f"/admin/rentals/rental/{active_rental.pk}/"),
    ):
        resp = admin_client.get(url)
        assert resp.status_code == 200 and needle in resp.content.decode(), url


def test_account_panels_are_bounded_and_link_to_the_rest(admin_client, chains, customer):
    from billing.services import LineSpec, invoice_create
    from core.admin import PANEL_ROWS

    for n in range(PANEL_ROWS + 3):
        invoice_create(
            account=customer,
            payable=("test", n),
            description="t",
            lines=[LineSpec("x", Decimal(1), Decimal("5.00"), Decimal("5.00"))],
            currency="LTC",
        )
    html = admin_client.get(f"/admin/accounts/account/{customer.pk}/change/").content.decode()
    invoices = _panel(html, "invoices")
    assert invoices.count("/admin/billing/invoice/") - 1 == PANEL_ROWS  # the rows, and the link to all
    assert f"All {PANEL_ROWS + 3} invoices" in invoices
    assert "No orders yet." in _panel(html, "orders")


def test_account_panels_follow_the_viewers_permissions(active_rental, customer, django_user_model):
    clerk = django_user_model.objects.create_user("clerk", "a-long-clerk-password", is_staff=True)
    clerk.user_permissions.add(
        *Permission.objects.filter(codename__in=["view_account", "change_account", "view_invoice"])
    )
    client = Client()
    client.force_login(clerk)
    html = client.get(f"/admin/accounts/account/{customer.pk}/change/").content.decode()
    assert "field-panel_invoices" in html
    assert "field-panel_orders" not in html and "field-panel_credit" not in html


def test_renewal_invoice_links_to_its_rental(admin_client, active_rental):
    from billing.models import Invoice

    invoice = Invoice.objects.get(pk=active_rental.order.invoice_id)
    Invoice.objects.filter(pk=invoice.pk).update(subject_kind="renewal", subject_id=active_rental.pk)
    html = admin_client.get(f"/admin/billing/invoice/{invoice.pk}/change/").content.decode()
    assert (
        f'<a href="/admin/rentals/rental/{active_rental.pk}/change/">renewal of rental {active_rental.pk}</a>' in html
    )


def test_a_report_opens_no_row_of_its_model(active_rental, django_user_model):
    """The dashboard and the calibration report are proxies of rentals and
    benchmark runs, open to every member of staff; a row's page behind them
    (and its history) is not: staff without `view_rental` see no rental there."""
    plain = django_user_model.objects.create_user("plainstaff", "a-long-plain-password", is_staff=True)
    client = Client()
    client.force_login(plain)
    assert client.get("/admin/rentals/rentaldashboard/").status_code == 200
    for url in (
        f"/admin/rentals/rentaldashboard/{active_rental.pk}/change/",
        f"/admin/rentals/rentaldashboard/{active_rental.pk}/history/",
    ):
        resp = client.get(url)
        assert resp.status_code == 403, (url, resp.status_code)
        assert active_rental.account.username not in resp.content.decode()
    assert client.get(f"/admin/rentals/rental/{active_rental.pk}/change/").status_code == 403
