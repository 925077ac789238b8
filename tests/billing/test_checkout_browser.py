"""The checkout page in a real headless browser (Debian's Chromium): read the
amount and address, see and decode the QR, switch to Spanish, watch a payment
recorded by staff turn the page to seen and then paid without a reload; an
expired invoice's fresh quote; a phone's width; the keyboard; no CSP errors."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pytest
from django.core.management import call_command

from billing import services
from billing.models import Invoice, InvoiceStatus
from tests.browser import PHONE_HEIGHT, PHONE_WIDTH
from tests.qr_decode import decode_png

# A real Chromium against the live server: slow.
pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture(autouse=True)
def _fast_polling(settings):
    settings.CHECKOUT_POLL_SECONDS = 1


def record(number: str, *, txid: str, amount: int, confirmations: int) -> None:
    call_command(
        "record_payment",
        number,
        txid=txid,
        amount=amount,
        confirmations=confirmations,
        reason="seen in the block explorer",
    )


def mark_page(browser) -> None:
    """A flag in the page's window: it survives updates, not a reload."""
    browser.driver.execute_script("window.__notReloaded = true;")


def not_reloaded(browser) -> bool:
    return browser.driver.execute_script("return window.__notReloaded === true;")


def test_pay_an_order_from_its_checkout_page(browser, order_via_api):
    order = order_via_api(pay_currency="LTC")
    api_invoice = order["invoice"]
    path = urlsplit(api_invoice["checkout_url"]).path
    assert path.startswith("/pay/")

    browser.open(path)
    browser.wait_text(".badge-new", "Awaiting payment")
    assert browser.text("h1") == f"Invoice {api_invoice['number']}"
    # The amount and the address the payer reads are the invoice's.
    assert browser.text("#amount") == api_invoice["amount_display"]
    assert browser.text("#address") == api_invoice["address"]
    assert browser.find("a[data-href=pay_uri]").get_attribute("href") == api_invoice["payment_uri"]
    assert "2 \N{MULTIPLICATION SIGN} A100 SXM" in browser.text(".facts") and "DFW-1" in browser.text(".facts")
    assert "1,881.00 USD" in browser.text(".lines tfoot")

    # The QR code is drawn, and what is drawn decodes to the payment URI.
    qr = browser.find(".qr img")
    browser.wait(lambda: browser.driver.execute_script("return arguments[0].naturalWidth > 0", qr), message="QR")
    assert decode_png(qr.screenshot_as_png) == [api_invoice["payment_uri"]]
    assert browser.wait(lambda: browser.find("[data-countdown]").text not in ("", "00:00"))

    # Spanish, from the page's switch; the choice sticks.
    browser.find('.langs a[hreflang="es"]').click()
    browser.wait_text(".badge-new", "Esperando el pago")
    assert browser.driver.find_element("css selector", "html").get_attribute("lang") == "es"
    assert browser.text("h1") == f"Factura {api_invoice['number']}"
    assert "1 881,00 USD" in browser.text(".lines tfoot").replace("\u00a0", " ")
    assert browser.current_path == path

    # A payment seen in the mempool: the page turns to seen, without a reload.
    mark_page(browser)
    record(api_invoice["number"], txid="ab" * 32, amount=int(api_invoice["amount"]), confirmations=0)
    browser.wait_text(".badge-seen", "Pago detectado")
    assert browser.text("[data-field=confirmations]") == "0"
    assert browser.text("[data-field=confirmations_required]") == "6"
    assert not browser.visible(".pay")

    # Confirmed: paid, still without a reload.
    record(api_invoice["number"], txid="ab" * 32, amount=int(api_invoice["amount"]), confirmations=6)
    browser.wait_text(".badge-paid", "Pagada")
    assert not_reloaded(browser)
    assert not browser.visible(".badge-seen")
    assert Invoice.objects.get(number=api_invoice["number"]).status == InvoiceStatus.SETTLED
    assert browser.console_errors() == []


def test_an_expired_invoice_offers_a_fresh_quote_that_works(browser, order_via_api):
    order = order_via_api(pay_currency="BTC")
    invoice = Invoice.objects.get(number=order["invoice"]["number"])
    old_address = order["invoice"]["address"]
    # The periodic job runs past the rate lock: the invoice expires, its order lets its slots go.
    services.invoices_advance_due(now=invoice.expires_at + timedelta(seconds=1))
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.EXPIRED

    browser.open(urlsplit(order["invoice"]["checkout_url"]).path)
    browser.wait_text(".badge-expired", "Quote expired")
    assert not browser.visible(".pay")
    button = browser.wait_visible(".actions button[type=submit]")
    assert button.text == "Get a fresh quote"
    assert browser.find("#requote-currency").get_attribute("value") == "BTC"
    button.click()

    browser.wait_text(".badge-new", "Awaiting payment")
    invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.NEW
    new_request = invoice.active_request
    assert new_request.address != old_address
    assert browser.text("#address") == new_request.address
    assert browser.text("#amount") == f"{int(new_request.amount_due) / 10**8:.8f}"
    assert browser.wait(lambda: browser.find("[data-countdown]").text.startswith(("29:", "30:")))
    # The order holds its servers again.
    from rentals.models import Order

    assert Order.objects.get(pk=order["id"]).status == "awaiting_payment"
    assert browser.console_errors() == []


def test_switch_currency_from_the_page(browser, checkout_invoice):
    invoice = checkout_invoice(currency="LTC")
    browser.open(f"/pay/{invoice.checkout_token}")
    browser.wait_text(".badge-new", "Awaiting payment")
    from selenium.webdriver.support.ui import Select

    Select(browser.find("#currency")).select_by_value("XMR")
    browser.find(".switch button[type=submit]").click()
    browser.wait(lambda: "XMR" in browser.text(".amount"), message="the amount in XMR")
    invoice.refresh_from_db()
    assert invoice.active_request.currency == "XMR"
    assert browser.text("#address") == invoice.active_request.address
    qr = browser.find(".qr img")
    browser.wait(lambda: browser.driver.execute_script("return arguments[0].naturalWidth > 0", qr), message="QR")
    assert decode_png(qr.screenshot_as_png) == [invoice.active_request.payment_uri]


def test_phone_width_keyboard_and_copy(browser, checkout_invoice):
    invoice = checkout_invoice(currency="ETH")
    browser.size(PHONE_WIDTH, PHONE_HEIGHT)
    browser.driver.execute_cdp_cmd(
        "Browser.grantPermissions", {"permissions": ["clipboardReadWrite", "clipboardSanitizedWrite"]}
    )
    browser.open(f"/pay/{invoice.checkout_token}")
    browser.wait_text(".badge-new", "Awaiting payment")
    # Nothing wider than the phone's screen: no sideways scrolling.
    assert browser.driver.execute_script("return document.documentElement.scrollWidth") <= PHONE_WIDTH
    qr_box = browser.find(".qr img").rect
    assert qr_box["x"] >= 0 and qr_box["x"] + qr_box["width"] <= PHONE_WIDTH

    # Every control is reached with the Tab key, in reading order, and is labelled.
    from selenium.webdriver.common.keys import Keys

    body = browser.find("body")
    body.send_keys(Keys.TAB)
    reached = []
    for _ in range(20):
        active = browser.driver.switch_to.active_element
        reached.append(
            active.get_attribute("data-copy")
            or active.get_attribute("id")
            or active.get_attribute("hreflang")
            or active.text
        )
        active.send_keys(Keys.TAB)
    for control in ("en", "es", "Open in wallet", "amount", "address", "currency"):
        assert control in reached, reached
    assert reached.index("amount") < reached.index("address") < reached.index("currency")
    for select in browser.find_all("select"):
        assert browser.find(f"label[for={select.get_attribute('id')}]").get_attribute("textContent").strip()

    # The copy button puts the address on the clipboard and says so.
    copy = browser.find("button[data-copy=address]")
    copy.send_keys(Keys.ENTER)
    browser.wait_text(".copied", "Copied")
    clip = browser.driver.execute_async_script(
        "const done = arguments[arguments.length - 1]; navigator.clipboard.readText().then(done, e => done('!' + e));"
    )
    assert clip == invoice.active_request.address
    assert browser.console_errors() == []


def test_the_page_works_without_javascript_errors_under_its_csp(browser, checkout_invoice, live_server):
    """The policy forbids inline script: the page's own script runs (copy buttons
    shown, countdown ticking) and the console has no violation."""
    invoice = checkout_invoice(currency="SOL")
    browser.open(f"/pay/{invoice.checkout_token}")
    browser.wait_visible("button[data-copy=amount]")
    csp = browser.driver.execute_script(
        "return fetch(location.href).then(r => r.headers.get('Content-Security-Policy'))"
    )
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    # An inline script injected into the page is refused by the browser.
    browser.driver.execute_script(
        "const s = document.createElement('script'); s.textContent = 'window.__inline = 1'; document.body.append(s);"
    )
    assert browser.driver.execute_script("return window.__inline === undefined")
    errors = browser.console_errors()
    assert len(errors) == 1 and "Content Security Policy" in errors[0], errors
