"""The checkout page without a browser: the token, every currency in both
languages, the QR, the JSON status through a payment's life, the currency
switch and the fresh quote from the page, 404s that name no invoice."""

from __future__ import annotations

import html
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import time_machine
import zxingcpp
from babel.messages.pofile import read_po
from django.conf import settings
from django.utils import timezone

from billing import services
from billing.currencies import CURRENCIES
from billing.models import InvoiceStatus
from core.models import AuditEntry
from tests.qr_decode import decode_svg

pytestmark = pytest.mark.django_db

HTML = {"HTTP_ACCEPT": "text/html,application/xhtml+xml"}


def page(client, invoice, language="en", **headers):
    return client.get(f"/pay/{invoice.checkout_token}", HTTP_ACCEPT_LANGUAGE=language, **HTML, **headers)


def status(client, invoice) -> dict:
    resp = client.get(f"/pay/{invoice.checkout_token}/status")
    assert resp.status_code == 200
    return resp.json()


def qr_texts(svg: str) -> list[str]:
    """The QR codes in an SVG (a 1D reader may also see a stray barcode in the modules: not a QR code)."""
    return [text for text, kind in decode_svg(svg) if kind == zxingcpp.BarcodeFormat.QRCode]


def pay(invoice, amount: int, confirmations: int, txid: str = "t1", **kw):
    return services.payment_record_manual(
        invoice_number=invoice.number, txid=txid, amount=amount, confirmations=confirmations, reason="test", actor=None
    )


def test_tokens_are_random_long_and_not_the_number(checkout_invoice):
    invoices = [checkout_invoice() for _ in range(3)]
    tokens = [inv.checkout_token for inv in invoices]
    assert len(set(tokens)) == 3
    for inv in invoices:
        token = inv.checkout_token
        assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)  # 256 bits, URL-safe
        assert inv.number not in token and inv.number.split("-")[-1] not in token
        assert str(inv.pk) != token


def test_the_api_answers_the_checkout_url(checkout_invoice, customer_api):
    inv = checkout_invoice()
    body = customer_api.get(f"/api/v1/invoices/{inv.pk}").json()
    assert body["checkout_url"] == f"{settings.SITE_URL}/pay/{inv.checkout_token}"
    listed = customer_api.get("/api/v1/invoices").json()["results"]
    assert listed[0]["checkout_url"] == body["checkout_url"]


def test_an_order_answers_its_invoice_checkout_url(order_via_api, client):
    order = order_via_api()
    path = urlsplit(order["invoice"]["checkout_url"]).path
    resp = client.get(path, **HTML)
    assert resp.status_code == 200
    assert order["invoice"]["address"] in resp.content.decode()


@pytest.mark.parametrize("code", list(CURRENCIES))
def test_every_currency_has_a_page_in_both_languages(code, checkout_invoice, client):
    inv = checkout_invoice(currency=code)
    req = inv.active_request
    amount = CURRENCIES[code].coins_str(int(req.amount_due))
    for language, waiting, title in (("en", "Awaiting payment", "Invoice"), ("es", "Esperando el pago", "Factura")):
        resp = page(client, inv, language)
        assert resp.status_code == 200
        text = resp.content.decode()
        assert f'<html lang="{language}">' in text
        assert resp["Content-Language"] == language
        assert waiting in text and f"{title} {inv.number}" in text
        assert f'<code id="amount" data-field="due_display">{amount}</code>' in text
        assert f'<code id="address" class="address">{req.address}</code>' in text
        assert f'href="{html.escape(req.payment_uri)}"' in text
    body = status(client, inv)
    assert (body["state"], body["currency"], body["due"], body["pay_uri"]) == (
        "new",
        code,
        str(int(req.amount_due)),
        req.payment_uri,
    )
    qr = client.get(body["qr_url"])
    assert qr.status_code == 200 and qr["Content-Type"] == "image/svg+xml"
    assert qr_texts(qr.content.decode()) == [req.payment_uri]


def test_the_page_is_private_and_strict(checkout_invoice, client):
    resp = page(client, checkout_invoice())
    csp = dict(part.split(" ", 1) for part in resp["Content-Security-Policy"].split("; "))
    assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'" and csp["style-src"] == "'self'"
    assert csp["frame-ancestors"] == "'none'" and csp["form-action"] == "'self'"
    assert resp["Referrer-Policy"] == "same-origin"
    assert "noindex" in resp["X-Robots-Tag"]
    assert "no-store" in resp["Cache-Control"]
    text = resp.content.decode()
    # No inline script or style anywhere: every script and sheet is a file the project serves.
    assert re.findall(r"<script[^>]*>", text) == ['<script src="/static/billing/checkout.js" defer>']
    assert "<style" not in text and " style=" not in text
    assert not re.search(r"\son[a-z]+=", text)  # no inline event handlers


def test_the_page_needs_nothing_from_outside():
    """Every asset is a file of the project (the browser tests load them from the
    live server): no CDN, no web font, no address of another site."""
    from django.contrib.staticfiles import finders

    for name in ("checkout.js", "checkout.css", "favicon.svg"):
        body = Path(finders.find(f"billing/{name}")).read_text()
        assert "://" not in body.replace("http://www.w3.org/2000/svg", ""), name
        assert "@import" not in body and "url(" not in body, name


@pytest.mark.parametrize(
    "path",
    ["/pay/{guess}", "/pay/{guess}/status", "/pay/{guess}/qr.svg"],
)
def test_wrong_tokens_are_404s_that_name_no_invoice(path, checkout_invoice, client):
    inv = checkout_invoice()
    token = inv.checkout_token
    near = ("A" if token[0] != "A" else "B") + token[1:]
    guesses = [near, inv.number, str(inv.pk), "x" * 43, "x" * 500, token.upper() if token.upper() != token else "y"]
    answers = set()
    for guess in guesses:
        for accept in (HTML, {}):
            resp = client.get(path.format(guess=guess), **accept)
            assert resp.status_code == 404, (guess, accept)
            text = resp.content.decode()
            assert inv.number not in text and token not in text and inv.active_request.address not in text
            if not accept:
                assert resp.json() == {
                    "error": {"code": "not_found", "message": "No such payment page.", "details": {}}
                }
            # A short guess (the invoice's id, "1") would be cut out of the page's own markup.
            answers.add(text.replace(guess, "") if len(guess) > 8 else text)
    # One answer whatever the guess (a page for browsers, the error shape for the rest).
    assert len(answers) == (2 if path == "/pay/{guess}" else 1)


def test_actions_with_a_wrong_token_are_404s(checkout_invoice, client):
    inv = checkout_invoice()
    for action in ("currency", "requote"):
        resp = client.post(f"/pay/{'z' * 43}/{action}", {"currency": "BTC"})
        assert resp.status_code == 404
    assert inv.requests.count() == 1


def test_other_methods_get_the_error_shape(checkout_invoice, client):
    inv = checkout_invoice()
    resp = client.post(f"/pay/{inv.checkout_token}/status")
    assert resp.status_code == 405
    assert resp.json()["error"]["code"] == "method_not_allowed"
    assert client.get(f"/pay/{inv.checkout_token}/currency").status_code == 405


def test_status_follows_a_payment_from_partial_to_paid_with_credit(checkout_invoice, client):
    inv = checkout_invoice(currency="LTC")
    due = int(inv.active_request.amount_due)
    pay(inv, due // 4, confirmations=0, txid="a")
    body = status(client, inv)
    assert (body["state"], body["partial"], body["paid"], body["due"]) == (
        "new",
        True,
        str(due // 4),
        str(due - due // 4),
    )
    # The wallet link and the QR now ask for the rest only.
    rest = CURRENCIES["LTC"].coins_str(due - due // 4).rstrip("0").rstrip(".")
    assert f"amount={rest}&" in body["pay_uri"] and body["pay_uri"] != inv.active_request.payment_uri
    assert qr_texts(client.get(body["qr_url"]).content.decode()) == [body["pay_uri"]]
    text = page(client, inv).content.decode()
    assert "Received so far" in text and CURRENCIES["LTC"].coins_str(due - due // 4) in text

    pay(inv, due, confirmations=1, txid="b")  # the rest and more: seen, confirming
    body = status(client, inv)
    assert (body["state"], body["confirmations"], body["confirmations_required"]) == ("seen", 0, 6)
    assert body["paid_over"] is True and body["final"] is False
    assert "Confirmations: <strong" in page(client, inv).content.decode()

    pay(inv, due // 4, confirmations=6, txid="a")
    pay(inv, due, confirmations=6, txid="b")
    body = status(client, inv)
    assert (body["state"], body["final"], body["credited"]) == ("paid", True, True)
    inv.refresh_from_db()
    assert body["credited_usd"] == f"{inv.credit_entries.get(kind='overpayment').amount_usd:.2f}"
    text = page(client, inv, "es").content.decode()
    assert "Pagada" in text and "de lo pagado a esta factura pasaron a ser saldo de tu cuenta" in text


def test_an_invoice_past_its_rate_lock_shows_expired_before_the_job_runs(checkout_invoice, client):
    inv = checkout_invoice()
    assert status(client, inv)["seconds_left"] > 0
    with time_machine.travel(inv.expires_at + timedelta(seconds=5), tick=False):
        body = status(client, inv)
        assert (body["state"], body["status"], body["can_requote"], body["seconds_left"]) == ("expired", "new", True, 0)
        # The fresh quote works at once: the invoice never left `new`.
        resp = client.post(f"/pay/{inv.checkout_token}/requote", {"currency": "BTC"})
        assert resp.status_code == 303 and resp["Location"] == f"/pay/{inv.checkout_token}"
        inv.refresh_from_db()
        assert inv.status == InvoiceStatus.NEW and inv.active_request.currency == "BTC"
        assert inv.expires_at == timezone.now() + timedelta(minutes=settings.INVOICE_EXPIRY_MINUTES)
    assert AuditEntry.objects.filter(action="invoice.requote", object_id=str(inv.pk), reason="checkout page").exists()


def test_a_fresh_quote_waits_while_the_watcher_is_blind(checkout_invoice, client):
    from billing.models import ChainState

    inv = checkout_invoice(currency="LTC")
    ChainState.objects.create(chain="litecoin", last_ok_at=inv.created_at - timedelta(hours=1))
    with time_machine.travel(inv.expires_at + timedelta(seconds=5), tick=False):
        resp = client.post(f"/pay/{inv.checkout_token}/requote", {"currency": "LTC"}, follow=True, **HTML)
    assert resp.status_code == 200
    assert "still checking the blockchain" in resp.content.decode()
    assert inv.requests.count() == 1


def test_an_expired_invoice_with_money_on_it_is_quoted_again_for_the_rest(checkout_invoice, client):
    inv = checkout_invoice(currency="LTC", total="390.00")
    first = inv.active_request
    pay(inv, -(-first.amount_due // 3), confirmations=6)  # a third: 130.00 USD
    services.invoices_advance_due(now=inv.expires_at + timedelta(seconds=1))
    body = status(client, inv)
    assert (body["state"], body["can_requote"], body["partial_expired"]) == ("expired", True, True)
    assert (body["counted_usd"], body["due_usd"]) == ("130.00", "260.00")
    assert body["credit_at"] is not None
    text = page(client, inv).content.decode()
    # One plain story: what arrived still counts, a fresh quote asks for the rest, or it becomes credit.
    assert "still counts toward this invoice" in text and '<div data-if="covered" hidden>' in text
    resp = client.post(f"/pay/{inv.checkout_token}/requote", {"currency": "BTC"}, follow=True, **HTML)
    assert resp.status_code == 200
    inv.refresh_from_db()
    rest = inv.active_request
    assert (inv.status, inv.exception, rest.currency, rest.amount_usd) == (
        "new",
        "paid_partial",
        "BTC",
        Decimal("260.00"),
    )
    body = status(client, inv)
    assert (body["state"], body["partial"], body["due"], body["due_usd"]) == (
        "new",
        True,
        str(rest.amount_due),
        "260.00",
    )
    # The amount's USD label is what remains, not the invoice's total.
    assert 'for <span data-field="due_usd" data-format="usd">260.00 USD</span>' in page(client, inv).content.decode()
    pay(inv, rest.amount_due, confirmations=6, txid="rest")
    inv.refresh_from_db()
    assert (inv.status, inv.exception) == ("settled", "none")
    assert not inv.credit_entries.exists()
    assert set(inv.payments.values_list("disposition", flat=True)) == {"applied"}


def test_switch_currency_from_the_page(checkout_invoice, client):
    inv = checkout_invoice(currency="LTC")
    resp = client.post(f"/pay/{inv.checkout_token}/currency", {"currency": "USDC"})
    assert resp.status_code == 303
    inv.refresh_from_db()
    assert inv.active_request.currency == "USDC"
    assert status(client, inv)["currency"] == "USDC"
    entry = AuditEntry.objects.get(action="invoice.switch_currency", object_id=str(inv.pk))
    assert entry.changes["currency"] == ["LTC", "USDC"] and entry.reason == "checkout page"
    assert entry.actor_name == "checkout page" and entry.changes["amount"] == inv.active_request.amount_due


def test_refused_switches_are_said_in_the_page_language(checkout_invoice, client, settings):
    inv = checkout_invoice(currency="LTC")
    settings.SOL_RECIPIENT = ""  # SOL is not enabled
    resp = client.post(
        f"/pay/{inv.checkout_token}/currency", {"currency": "SOL"}, follow=True, HTTP_ACCEPT_LANGUAGE="es", **HTML
    )
    assert "Esa moneda no está disponible ahora" in resp.content.decode()
    pay(inv, inv.active_request.amount_due, confirmations=0)  # paid in full, confirming
    resp = client.post(f"/pay/{inv.checkout_token}/currency", {"currency": "BTC"}, follow=True, **HTML)
    assert "This invoice can no longer change currency" in resp.content.decode()
    inv.refresh_from_db()
    assert inv.active_request.currency == "LTC"


def test_an_invoice_without_a_currency_lets_the_payer_choose(chains, customer, client):
    from decimal import Decimal

    from billing.services import LineSpec

    inv = services.invoice_create(
        account=customer,
        payable=("test", 0),
        description="Renewal",
        lines=[LineSpec("Renewal", Decimal(1), Decimal("70.00"), Decimal("70.00"))],
        currency=None,
        payable_until=timezone.now() + timedelta(days=3),
    )
    text = page(client, inv).content.decode()
    assert "Choose how to pay" in text and 'id="amount"' not in text
    assert status(client, inv)["request"] is None
    client.post(f"/pay/{inv.checkout_token}/currency", {"currency": "XMR"})
    inv.refresh_from_db()
    assert inv.active_request.currency == "XMR"
    assert inv.active_request.address in page(client, inv).content.decode()


def test_invalid_and_credit_paid_invoices(checkout_invoice, client, settings):
    settings.CHECKOUT_SUPPORT_URL = "https://support.example/ticket"
    inv = checkout_invoice()
    services.invoice_void(invoice_id=inv.pk, reason="order cancelled")
    body = status(client, inv)
    assert (body["state"], body["final"]) == ("invalid", True)
    text = page(client, inv).content.decode()
    assert "can no longer be paid" in text and 'href="https://support.example/ticket"' in text

    other = checkout_invoice(currency="BTC", total="70.00")
    services.credit_adjust(account_id=other.account_id, amount_usd=other.total_usd, reason="goodwill", actor=None)
    services.invoice_pay_with_credit(invoice_id=other.pk, account=other.account)
    body = status(client, other)
    assert (body["state"], body["via_credit"]) == ("paid", True)
    assert "paid from your account credit" in page(client, other).content.decode()


def test_language_from_accept_language_then_the_switch(checkout_invoice, client):
    inv = checkout_invoice()
    assert page(client, inv, "es-MX,es;q=0.9").headers["Content-Language"] == "es"
    assert page(client, inv, "fr-FR,fr;q=0.9").headers["Content-Language"] == "en"
    resp = client.get(f"/pay/{inv.checkout_token}?lang=es", **HTML)
    assert resp.status_code == 303 and resp["Location"] == f"/pay/{inv.checkout_token}"
    assert resp.cookies[settings.LANGUAGE_COOKIE_NAME].value == "es"
    # The switch wins over the browser's languages from now on.
    assert "Esperando el pago" in page(client, inv, "en").content.decode()
    resp = client.get(f"/pay/{inv.checkout_token}?lang=klingon", **HTML)
    assert resp.status_code == 303 and settings.LANGUAGE_COOKIE_NAME not in resp.cookies
    # The API stays English whatever the browser says.
    assert client.get("/api/v1/currencies", HTTP_ACCEPT_LANGUAGE="es").status_code == 200


def test_the_spanish_catalog_is_complete():
    path = settings.BASE_DIR / "billing" / "locale" / "es" / "LC_MESSAGES" / "django.po"
    with path.open("rb") as f:
        catalog = read_po(f)
    assert len(catalog) > 50
    for message in catalog:
        if not message.id:
            continue
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        assert all(strings), message.id
        assert "fuzzy" not in message.flags, message.id
        for placeholder in re.findall(r"%\(\w+\)s", message.id if isinstance(message.id, str) else message.id[0]):
            assert all(placeholder in s for s in strings), (message.id, placeholder)


def test_the_api_requotes_an_invoice_past_its_rate_lock_too(checkout_invoice, customer_api):
    inv = checkout_invoice(currency="BTC")
    assert customer_api.post(f"/api/v1/invoices/{inv.pk}/requote", {}, format="json").status_code == 409
    with time_machine.travel(inv.expires_at + timedelta(seconds=1), tick=False):
        resp = customer_api.post(f"/api/v1/invoices/{inv.pk}/requote", {}, format="json")
    assert resp.status_code == 200
    assert resp.json()["status"] == "new" and len(resp.json()["requests"]) == 2


def test_staff_see_the_checkout_link_in_the_admin(checkout_invoice, admin_client):
    inv = checkout_invoice()
    text = admin_client.get(f"/admin/billing/invoice/{inv.pk}/change/").content.decode()
    url = f"{settings.SITE_URL}/pay/{inv.checkout_token}"
    assert f'<a href="{url}" target="_blank" rel="noopener noreferrer">{url}</a>' in text
