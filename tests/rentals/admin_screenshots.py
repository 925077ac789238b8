"""The pictures of the staff admin in docs/admin/, at 1,400 pixels: the
dashboard over 90 days of orders paid in several currencies, an order with its
workload and sizing, an invoice with its payment, the invoice list, a
customer's page with their orders, invoices, rentals and credit, recording a
payment by hand, the card list with prices in place, and the two-factor set-up
page.

Not part of the suite (the name is not test_*): `make screenshots` runs it.
The data is made up by the run: orders placed through the API on days spread
over the last 90 days, paid, and handed over after a few minutes to a few hours.
"""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import time_machine
from django.utils import timezone
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.support.ui import Select

from accounts.models import SshKey
from accounts.services import ssh_key_add
from billing import services as billing
from rentals import services
from rentals.models import Rental
from tests.rentals.helpers import new_key_line

pytestmark = pytest.mark.django_db(transaction=True)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "admin"
WIDTH, HEIGHT = 1400, 900
CARDS = [("h100-sxm", 1), ("rtx-4090", 2), ("l40s", 4), ("a100-sxm", 2), ("l4", 1), ("mi300x", 8), ("h200-sxm", 1)]
CURRENCIES = ["BTC", "LTC", "ETH", "USDT", "USDC", "XMR", "SOL", "BTC", "USDT"]


@pytest.fixture
def history(chains, catalog, customer, customer_api, staff):
    """About forty orders over the last 90 days; most paid and handed over."""
    rng = random.Random(20261201)
    key = ssh_key_add(account=customer, public_key=new_key_line() + " alice@laptop", name="laptop")
    now = timezone.now()
    orders = []
    for i in range(40):
        at = now - timedelta(days=rng.uniform(0.5, 89), hours=rng.uniform(0, 6))
        gpu, count = rng.choice(CARDS)
        region = "DFW-1" if gpu == "mi300x" else rng.choice(["DFW-1", "IAD-1", "PDX-1"])
        body = {
            "region": region,
            "gpu": gpu,
            "gpu_count": count,
            "term": rng.choice(["monthly", "monthly", "weekly"]),
            "terms": 1,
            "template": "rocm-6.4-pytorch" if gpu == "mi300x" else "vllm-0.9-ubuntu-24.04",
            "addons": rng.choice([[], [], ["private-vlan"]]),
            "ssh_keys": [key.pk],
            "pay_currency": rng.choice(CURRENCIES),
        }
        if i == 0:
            body.update(gpu="h100-sxm", gpu_count=1, region="DFW-1", term="monthly", pay_currency="LTC")
            body["workload"] = {"model": "llama-3.1-70b", "precision": "fp8", "context": 8192, "concurrency": 1}
        with time_machine.travel(at, tick=False):
            resp = customer_api.post("/api/v1/orders", body, format="json")
        if resp.status_code != 201:
            continue
        order = resp.json()
        orders.append(order)
        if i % 9 == 8:
            continue  # left unpaid: expires
        invoice = order["invoice"]
        paid_at = at + timedelta(minutes=rng.uniform(2, 25))
        with time_machine.travel(paid_at, tick=False):
            billing.payment_record_manual(
                invoice_number=invoice["number"],
                txid=f"{i:02x}" * 32,
                amount=int(invoice["amount"]),
                confirmations=30,
                reason="picture data",
                actor=None,
            )
        rental = Rental.objects.filter(order_id=order["id"]).first()
        if rental is None or i in (3, 11):
            continue  # two wait for hand-over
        handed = paid_at + timedelta(seconds=rng.choice([90, 150, 240, 400, 700, 1500, 3000, 9000]))
        services.rental_activate(
            rental_id=rental.pk,
            ipv4=f"198.51.100.{10 + i}",
            ipv6_prefix=f"2001:db8:{i:x}::/64",
            actor=staff,
            now=handed,
        )
    # A goodwill credit, part of which paid a later invoice: the customer's page shows a ledger.
    billing.credit_adjust(account_id=customer.pk, amount_usd=Decimal("250.00"), reason="outage credit", actor=staff)
    return orders


def _record_payment_form(browser, number: str) -> None:
    """The record-a-payment form of invoice `number`, reached as staff reach it."""
    browser.open(f"/admin/billing/invoice/?q={number}")
    browser.find("#result_list tbody tr input.action-select").click()
    Select(browser.find("select[name=action]")).select_by_value("record_payment")
    browser.find("button[name=index]").click()
    browser.wait_visible("textarea[name=reason]")
    browser.find("input[name=txid]").send_keys("5f" * 32)
    browser.find("input[name=amount]").send_keys("0.0123 BTC")


@pytest.fixture
def part_paid(history, customer, customer_api):
    """An order placed now, paid in BTC, a third of it arrived (unconfirmed)."""
    key = SshKey.objects.filter(account=customer).first().pk
    body = {
        "region": "IAD-1",
        "gpu": "l40s",
        "gpu_count": 2,
        "term": "weekly",
        "terms": 2,
        "template": "vllm-0.9-ubuntu-24.04",
        "addons": [],
        "ssh_keys": [key],
        "pay_currency": "BTC",
    }
    order = customer_api.post("/api/v1/orders", body, format="json").json()
    billing.payment_record_manual(
        invoice_number=order["invoice"]["number"],
        txid="3a" * 32,
        amount=int(order["invoice"]["amount"]) // 3,
        confirmations=1,
        reason="picture data",
        actor=None,
    )
    return order


@pytest.fixture
def calibrated(history, customer, customer_api, staff):
    """A rental of an order with a workload, its three benchmark runs uploaded (the recorded files)."""
    from tests.rentals.benchmark_runs import order, upload
    from tests.rentals.helpers import T0, committed, pay

    placed = order(customer, customer_api)
    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(placed["invoice"]["number"], int(placed["invoice"]["amount"]), txid="tx-benchmarks")
    rental = Rental.objects.get(order_id=placed["id"])
    with committed():
        services.rental_activate(
            rental_id=rental.pk, ipv4="203.0.113.40", ipv6_prefix="2001:db8:40::/64", actor=staff, now=T0
        )
    for trace in ("chat", "rag", "batch"):
        assert upload(customer_api, rental.pk, trace).status_code == 201
    return rental


def test_screenshots(browser, staff, customer, history, part_paid, calibrated):
    browser.size(WIDTH, HEIGHT)
    browser.open("/admin/login/")
    browser.screenshot(DOCS / "login.png", full_page=False)
    browser.find("#id_username").send_keys("opsperson")
    browser.find("#id_password").send_keys("a-long-staff-password", Keys.ENTER)
    browser.wait(lambda: browser.current_path == "/admin/")
    pages = {
        "dashboard": "/admin/rentals/rentaldashboard/",
        "order": f"/admin/rentals/order/{history[0]['id']}/change/",
        "invoice": f"/admin/billing/invoice/{history[0]['invoice']['id']}/change/",
        "invoices": "/admin/billing/invoice/",
        "account": f"/admin/accounts/account/{customer.pk}/change/",
        "cards": "/admin/catalog/gpumodel/",
        "two-factor": "/admin/two-factor/",
        "benchmarks": "/admin/rentals/benchmarkcalibration/",
    }
    for name, path in pages.items():
        browser.open(path)
        browser.wait_visible("#content")
        assert browser.console_errors() == [], name
        shot = browser.screenshot(DOCS / f"{name}.png")
        assert shot.stat().st_size > 10_000
    _record_payment_form(browser, part_paid["invoice"]["number"])
    assert browser.console_errors() == []
    browser.screenshot(DOCS / "record-payment.png")
