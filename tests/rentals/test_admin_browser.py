"""The staff admin in a real headless browser (Debian's Chromium, tests/browser.py)
at 1,400 pixels: log in, find an order, mark its rental provisioned, record a
payment with a reason, then open every list and a record of each. Every page
is checked for server errors (the server's own signal, and the page), for
console errors (a Content-Security-Policy violation is one) and for sideways
scrolling (the page, each list and each inline table fits the window)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.core.signals import got_request_exception
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from accounts.models import SshKey
from billing.models import Invoice, Payment
from core.models import AuditEntry
from rentals.models import Rental
from tests.rentals.helpers import T0, pay

pytestmark = pytest.mark.django_db(transaction=True)

WIDTH = 1400

# Everything wider than its box, as the browser lays the page out: the page
# itself, the lists, inline tables and fieldsets, and any table past the window.
OVERFLOW_JS = """
const over = [];
const root = document.documentElement;
if (root.scrollWidth > root.clientWidth + 1) over.push(`page: ${root.scrollWidth} > ${root.clientWidth}`);
for (const el of document.querySelectorAll('#changelist .results, .inline-group .tabular, fieldset, .report-card')) {
  if (el.scrollWidth > el.clientWidth + 1) {
    over.push(`${el.tagName.toLowerCase()}.${el.className}: ${el.scrollWidth} > ${el.clientWidth}`);
  }
}
for (const table of document.querySelectorAll('table')) {
  const right = table.getBoundingClientRect().right;
  if (right > window.innerWidth + 1) over.push(`table ${table.id || table.className}: right edge ${right}`);
}
return over;
"""


@pytest.fixture
def server_errors():
    """Exceptions the live server met while answering (they would be 500s)."""
    seen: list[str] = []

    def record(sender, request=None, **kwargs):
        seen.append(getattr(request, "path", "?"))

    got_request_exception.connect(record, weak=False)
    yield seen
    got_request_exception.disconnect(record)


@pytest.fixture
def checked(browser, server_errors):
    """`checked(where)`: the page the browser shows is whole and fits the window."""

    def check(where: str) -> None:
        assert server_errors == [], f"server error answering {server_errors} (at {where})"
        text = browser.page_text()
        assert "Server Error" not in text and "Traceback" not in text, where
        assert browser.console_errors() == [], where
        assert browser.driver.execute_script(OVERFLOW_JS) == [], where

    return check


@pytest.fixture
def provisioning(ordered):
    """The ordered L4, paid: its rental waits for hand-over."""
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(ordered["invoice"]["number"], 277_777_778)
    return Rental.objects.get(order_id=ordered["id"])


@pytest.fixture
def unpaid(provisioning, customer, customer_api):
    """A second order, placed now, its invoice waiting for money."""
    key = SshKey.objects.filter(account=customer).first()
    resp = customer_api.post(
        "/api/v1/orders",
        {
            "region": "DFW-1",
            "gpu": "rtx-4090",
            "gpu_count": 2,
            "term": "weekly",
            "terms": 1,
            "template": "ubuntu-24.04",
            "addons": [],
            "ssh_keys": [key.pk],
            "pay_currency": "LTC",
        },
        format="json",
    )
    assert resp.status_code == 201, resp.json()
    return resp.json()


def search(browser, text: str) -> None:
    box = browser.find("#searchbar")
    box.clear()
    box.send_keys(text, Keys.ENTER)
    browser.wait(lambda: f"q={text}" in browser.driver.current_url, message=f"searched {text}")


def run_action(browser, value: str, row_link_text: str) -> None:
    """Tick the row whose link reads `row_link_text`, choose the action, Go."""
    row = next(
        tr
        for tr in browser.find_all("#result_list tbody tr")
        if row_link_text in tr.find_element("css selector", "th").text
    )
    row.find_element("css selector", "input.action-select").click()
    Select(browser.find("select[name=action]")).select_by_value(value)
    browser.find("button[name=index]").click()
    browser.wait_visible("textarea[name=reason]")


def test_staff_work_through_the_admin_in_a_browser(browser, checked, staff, ordered, provisioning, unpaid):
    browser.size(WIDTH, 900)

    # Log in.
    browser.open("/admin/")
    browser.wait_visible("#login-form")
    checked("login page")
    browser.find("#id_username").send_keys("opsperson")
    browser.find("#id_password").send_keys("a-long-staff-password", Keys.ENTER)
    browser.wait(lambda: browser.current_path == "/admin/", message="the index after logging in")
    assert "Rentals" in browser.text("#content-main")
    checked("index")

    # Find the order by its invoice number, and open it.
    browser.find('#content-main a[href="/admin/rentals/order/"]').click()
    browser.wait_visible("#changelist")
    checked("orders")
    search(browser, ordered["invoice"]["number"])
    assert len(browser.find_all("#result_list tbody tr")) == 1
    checked("orders, searched")
    browser.find("#result_list tbody tr th a").click()
    browser.wait_text("#content h1", "View order")
    assert not browser.find_all("input[name=_save]")  # a record: nothing to save
    assert "1 \u00d7 monthly" not in browser.page_text()  # (that is the list's column, not the page's)
    assert browser.find_all("table.json-table.json-records")  # the SSH keys, as a table
    checked("order page")

    # Mark its rental provisioned, with the addresses and a reason.
    browser.open("/admin/rentals/rental/")
    search(browser, ordered["invoice"]["number"])
    run_action(browser, "mark_provisioned", str(provisioning.pk))
    checked("mark provisioned form")
    browser.find("textarea[name=reason]").send_keys("racked and imaged, ticket 311")
    browser.find("input[name=ipv4]").send_keys("198.51.100.7")
    browser.find("input[name=ipv6_prefix]").send_keys("2001:db8:7::/64")
    browser.find("input[type=submit][value=Confirm]").click()
    browser.wait_text(".messagelist .success", "done for 1")
    checked("rentals, after marking provisioned")
    rental = Rental.objects.get(pk=provisioning.pk)
    assert (rental.status, rental.ipv4, rental.ipv6_prefix) == ("active", "198.51.100.7", "2001:db8:7::/64")
    entry = AuditEntry.objects.get(action="rental.activate", object_id=str(rental.pk))
    assert (entry.actor_name, entry.reason) == ("opsperson", "racked and imaged, ticket 311")

    # Record a payment for the other invoice, with a reason.
    number = unpaid["invoice"]["number"]
    browser.find(".breadcrumbs a").click()  # Home
    browser.find('#content-main a[href="/admin/billing/invoice/"]').click()
    browser.wait_visible("#changelist")
    checked("invoices")
    search(browser, number)
    run_action(browser, "record_payment", number)
    checked("record payment form")
    coins = f"{unpaid['invoice']['amount_display']} LTC"
    assert "settles at" in browser.find(".action-facts").text  # the amount due and the confirmations needed
    browser.find("input[name=txid]").send_keys("cd" * 32)
    browser.find("input[name=amount]").send_keys(coins)  # whole coins, as the checkout page shows them
    browser.find("input[name=confirmations]").send_keys("6")
    browser.find("textarea[name=reason]").send_keys("seen on the node, ticket 312")
    browser.find("input[type=submit][value=Confirm]").click()
    browser.wait_text(".messagelist .success", "done for 1")
    checked("invoices, after recording a payment")
    browser.find("#result_list tbody tr th a").click()
    browser.wait_text("#content h1", "View invoice")
    assert coins in browser.find_all(".inline-group")[-1].text  # the payments inline: in whole coins
    checked("invoice page")
    invoice = Invoice.objects.get(number=number)
    assert invoice.status == "settled"
    payment = Payment.objects.get(invoice=invoice)
    assert (payment.source, payment.reason, payment.recorded_by_id) == (
        "manual",
        "seen on the node, ticket 312",
        staff.pk,
    )


def test_every_list_and_a_record_of_each_fit_1400_pixels(
    browser, checked, staff, customer, ordered, provisioning, unpaid
):
    """Wide lists and inline tables: each changelist of the index, and the
    first record of each, at 1,400 pixels, without sideways scrolling."""
    browser.size(WIDTH, 900)
    browser.open("/admin/login/")
    browser.find("#id_username").send_keys("opsperson")
    browser.find("#id_password").send_keys("a-long-staff-password", Keys.ENTER)
    browser.wait(lambda: browser.current_path == "/admin/", message="logged in")
    lists = [a.get_attribute("href") for a in browser.find_all("#content-main tr[class^=model-] th a")]
    assert len(lists) > 20
    # The customer's page, with their orders, invoices, rentals and credit.
    lists.append(browser.url(f"/admin/accounts/account/{customer.pk}/change/"))
    for url in lists:
        browser.open(url)
        browser.wait(lambda: browser.find_all("#content"), message=url)
        checked(url)
        first = browser.find_all("#result_list tbody tr th a")
        if first:
            record = first[0].get_attribute("href")
            browser.open(record)
            browser.wait(lambda: browser.find_all("#content h1"), message=record)
            checked(record)
