"""The pictures of the checkout page in docs/checkout/: each state (new, seen,
paid, expired) at a phone's width (360 px) and a desktop's (1280 px).

Not part of the suite (the name is not test_*): `make screenshots` runs it
explicitly. Each picture is taken once the page shows its state.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from billing import services
from tests.browser import DEFAULT_HEIGHT, DEFAULT_WIDTH, PHONE_HEIGHT, PHONE_WIDTH

pytestmark = pytest.mark.django_db(transaction=True)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checkout"
WIDTHS = {"phone": (PHONE_WIDTH, PHONE_HEIGHT), "desktop": (DEFAULT_WIDTH, DEFAULT_HEIGHT)}


def invoice_in(state: str, make):
    invoice = make(currency="LTC")
    request = invoice.active_request
    if state == "seen":
        services.payment_record_manual(
            invoice_number=invoice.number,
            txid="5e" * 32,
            amount=int(request.amount_due),
            confirmations=2,
            reason="screenshot",
            actor=None,
        )
    elif state == "paid":
        services.payment_record_manual(
            invoice_number=invoice.number,
            txid="9a" * 32,
            amount=int(request.amount_due),
            confirmations=6,
            reason="screenshot",
            actor=None,
        )
    elif state == "expired":
        services.invoices_advance_due(now=invoice.expires_at + timedelta(seconds=1))
    return invoice


@pytest.mark.parametrize("width", list(WIDTHS))
@pytest.mark.parametrize("state", ["new", "seen", "paid", "expired"])
def test_screenshot(state, width, browser, checkout_invoice):
    invoice = invoice_in(state, checkout_invoice)
    browser.size(*WIDTHS[width])
    browser.open(f"/pay/{invoice.checkout_token}")
    browser.wait_visible(f".badge-{state}")
    if state == "new":
        qr = browser.find(".qr img")
        browser.wait(lambda: browser.driver.execute_script("return arguments[0].naturalWidth > 0", qr))
        browser.wait_visible("button[data-copy=address]")
    path = browser.screenshot(DOCS / f"{state}-{width}.png")
    assert path.stat().st_size > 10_000
