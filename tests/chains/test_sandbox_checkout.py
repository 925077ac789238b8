"""The sandbox's demo invoice and its checkout page: `sandbox_invoice` issues
it, the page shows it in a real browser, and `sandbox_pay --confirm` paying it
from the regtest node turns the page to paid without a reload."""

from __future__ import annotations

from io import StringIO
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from billing.chains.utxo.watcher import bitcoin_cursor_set, process_state_clear
from billing.models import Invoice, InvoiceStatus
from devtools.sandbox import sandbox_start

pytestmark = [pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _call(*args) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


def test_sandbox_pay_turns_the_checkout_page_to_paid(tmp_path, settings, browser):
    sandbox = sandbox_start(folder=tmp_path / "sandbox")
    try:
        for name, value in sandbox.env.items():
            setattr(settings, name, value if name != "SANDBOX" else True)
        settings.CHECKOUT_POLL_SECONDS = 1
        process_state_clear()
        bitcoin_cursor_set(currency="LTC", height=sandbox.node.height())

        out = _call("sandbox_invoice")
        lines = dict(line.split(": ", 1) for line in out.splitlines())
        page = lines["Checkout page"]
        invoice = Invoice.objects.get(account__username="sandbox-demo")
        assert page.endswith(f"/pay/{invoice.checkout_token}")
        assert f"Invoice {invoice.number}" in lines and "25.00 USD" in lines[f"Invoice {invoice.number}"]
        assert _call("sandbox_invoice") == out  # the open demo invoice again, not another

        browser.open(urlsplit(page).path)
        browser.wait_text(".badge-new", "Awaiting payment")
        assert browser.text("#address") == invoice.active_request.address
        browser.driver.execute_script("window.__notReloaded = true;")

        paid = _call("sandbox_pay", invoice.number, "--confirm")
        assert f"Its checkout page shows it: {page}" in paid
        assert paid.endswith(f"Invoice {invoice.number} is settled (none).")
        browser.wait_text(".badge-paid", "Paid")
        assert browser.driver.execute_script("return window.__notReloaded === true;")
        invoice.refresh_from_db()
        assert invoice.status == InvoiceStatus.SETTLED
    finally:
        sandbox.stop()
