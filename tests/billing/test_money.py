"""Money at its edges: wei amounts above 64 bits agree everywhere they are shown,
an over-payment worth less than a cent is not called one, a partly paid order
says what arrived, the order follows its invoice's currency, and every change
of an invoice's quote or payment leaves a named audit row."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from urllib.parse import parse_qs, urlsplit

import pytest
import zxingcpp

from billing import services
from billing.currencies import CURRENCIES
from billing.models import CreditEntry, Invoice, PaymentRequest
from core.models import AuditEntry
from tests.qr_decode import decode_svg

pytestmark = pytest.mark.django_db

HTML = {"HTTP_ACCEPT": "text/html,application/xhtml+xml"}


def pay(invoice, amount: int, confirmations: int = 100, txid: str = "t1"):
    return services.payment_record_manual(
        invoice_number=invoice.number, txid=txid, amount=amount, confirmations=confirmations, reason="test", actor=None
    )


def test_a_wei_amount_above_64_bits_agrees_on_the_page_the_uri_and_the_api(
    checkout_invoice, client, customer_api, settings
):
    from tests.keys import TEST_RATES

    settings.MANUAL_RATES_USD = TEST_RATES.replace("ETH=3500", "ETH=55")
    inv = checkout_invoice(currency="ETH")  # 1,881.00 USD at 55 USD: 34.2 ETH, above 2**64 wei
    amount = PaymentRequest.objects.get(invoice=inv).amount_due  # as the database gives it back
    assert type(amount) is int and amount > 2**64
    assert amount == inv.active_request.amount_due  # the one written: nothing lost on the way
    body = customer_api.get(f"/api/v1/invoices/{inv.pk}").json()
    assert body["amount"] == str(amount) and body["requests"][0]["amount"] == str(amount)
    coins = CURRENCIES["ETH"].coins_str(amount)
    assert body["amount_display"] == coins
    # EIP-681 carries wei in `value`.
    assert parse_qs(urlsplit(body["payment_uri"]).query)["value"] == [str(amount)]
    status = client.get(f"/pay/{inv.checkout_token}/status").json()
    assert (status["amount_due"], status["due"], status["due_display"]) == (str(amount), str(amount), coins)
    assert status["pay_uri"] == body["payment_uri"]
    page = client.get(f"/pay/{inv.checkout_token}", **HTML).content.decode()
    assert f">{coins}</code>" in page
    svg = client.get(status["qr_url"]).content.decode()
    assert [t for t, kind in decode_svg(svg) if kind == zxingcpp.BarcodeFormat.QRCode] == [body["payment_uri"]]
    # A confirmation update rewrites the payment unchanged (it drifted by 2 wei a time through a float).
    pay(inv, amount, confirmations=1)
    pay(inv, amount, confirmations=100)
    payment = inv.payments.get()
    assert payment.amount == amount
    inv.refresh_from_db()
    assert (inv.status, inv.exception) == ("settled", "none")


def test_an_over_payment_worth_less_than_a_cent_is_not_paid_over(checkout_invoice, client):
    inv = checkout_invoice(currency="XMR", total="390.00")
    due = inv.active_request.amount_due
    pay(inv, due + 1)  # one piconero more
    inv.refresh_from_db()
    assert (inv.status, inv.exception) == ("settled", "none")
    assert not CreditEntry.objects.filter(invoice=inv).exists()
    # A piconero sent after it settled is closed without a ledger row (it is worth 0.00 USD), not paid_over.
    pay(inv, 1, txid="dust")
    inv.refresh_from_db()
    assert (inv.status, inv.exception) == ("settled", "none")
    assert inv.payments.get(txid="dust").disposition == "credited"
    assert not CreditEntry.objects.filter(invoice=inv).exists()
    assert client.get(f"/pay/{inv.checkout_token}/status").json()["paid_over"] is False


def test_an_over_payment_of_a_cent_or_more_is_paid_over_and_credited(checkout_invoice):
    inv = checkout_invoice(currency="XMR", total="390.00")
    due = inv.active_request.amount_due
    cent = -(-CURRENCIES["XMR"].scale // 180 // 100)  # a cent of XMR at 180 USD
    pay(inv, due + cent)
    inv.refresh_from_db()
    assert (inv.status, inv.exception) == ("settled", "paid_over")
    assert CreditEntry.objects.get(invoice=inv, kind="overpayment").amount_usd == Decimal("0.01")


def test_the_order_follows_its_invoice_currency(order_via_api, customer_api, django_capture_on_commit_callbacks):
    order = order_via_api()
    assert order["pay_currency"] == "LTC"
    with django_capture_on_commit_callbacks(execute=True):
        resp = customer_api.post(
            f"/api/v1/invoices/{order['invoice']['id']}/currency", {"currency": "ETH"}, format="json"
        )
    assert resp.status_code == 200, resp.json()
    again = customer_api.get(f"/api/v1/orders/{order['id']}").json()
    assert again["pay_currency"] == again["invoice"]["pay_currency"] == "ETH"


def test_an_order_closed_with_money_on_it_says_what_arrived(
    order_via_api, customer_api, django_capture_on_commit_callbacks
):
    order = order_via_api()
    inv = Invoice.objects.get(pk=order["invoice"]["id"])
    pay(inv, -(-inv.active_request.amount_due // 3))  # a third of 1,881.00 USD
    with django_capture_on_commit_callbacks(execute=True):
        services.invoices_advance_due(now=inv.expires_at + timedelta(seconds=1))
    closed = customer_api.get(f"/api/v1/orders/{order['id']}").json()
    assert closed["status"] == "expired"
    assert closed["close_reason"].startswith("invoice expired with 627.00 of 1881.00 USD paid;")
    assert "unpaid" not in closed["close_reason"]
    summary = closed["invoice"]["payment_summary"]
    assert (summary["counted_usd"], summary["due_usd"], summary["credited_usd"]) == ("627.00", "1254.00", "0.00")
    assert summary["credit_at"] is not None
    # The payer finishes it at a fresh quote for the rest: the order holds its slots again.
    with django_capture_on_commit_callbacks(execute=True):
        resp = customer_api.post(f"/api/v1/invoices/{inv.pk}/requote", {"currency": "BTC"}, format="json")
    assert resp.status_code == 200, resp.json()
    body = resp.json()
    assert body["pay_currency"] == "BTC" and body["requests"][-1]["amount_usd"] == "1254.00"
    assert body["payment_summary"]["credit_at"] is None
    reopened = customer_api.get(f"/api/v1/orders/{order['id']}").json()
    assert (reopened["status"], reopened["pay_currency"], reopened["close_reason"]) == ("awaiting_payment", "BTC", "")


def test_quote_changes_and_credit_payments_leave_named_audit_rows(checkout_invoice, customer, customer_api):
    inv = checkout_invoice(currency="LTC", total="90.00")
    customer_api.post(f"/api/v1/invoices/{inv.pk}/currency", {"currency": "BTC"}, format="json")
    switch = AuditEntry.objects.get(action="invoice.switch_currency", object_id=str(inv.pk))
    assert switch.actor == customer and switch.changes["currency"] == ["LTC", "BTC"]

    services.credit_adjust(account_id=customer.pk, amount_usd=Decimal("100.00"), reason="goodwill", actor=None)
    paid = checkout_invoice(currency="LTC", total="90.00")
    resp = customer_api.post(f"/api/v1/invoices/{paid.pk}/pay-with-credit", {}, format="json")
    assert resp.status_code == 200, resp.json()
    entry = AuditEntry.objects.get(action="invoice.pay_with_credit", object_id=str(paid.pk))
    assert entry.actor == customer and entry.changes["amount_usd"] == "90.00"

    voided = checkout_invoice(currency="LTC", total="90.00")
    services.invoice_void(invoice_id=voided.pk, reason="rental terminated")
    void = AuditEntry.objects.get(action="invoice.void", object_id=str(voided.pk))
    assert void.actor is None and void.actor_name == "system"


def test_a_solana_invoice_offers_the_wallet_link_not_the_address(checkout_invoice, client):
    inv = checkout_invoice(currency="SOL")
    text = client.get(f"/pay/{inv.checkout_token}", **HTML).content.decode()
    request = inv.active_request
    assert request.reference and request.address in text
    assert 'data-copy="address"' not in text and "Copy address" not in text
    assert 'data-copy="pay-link"' in text and "Copy wallet link" in text
    assert "cannot be matched to this invoice" in text
    ltc = client.get(f"/pay/{checkout_invoice(currency='LTC').checkout_token}", **HTML).content.decode()
    assert 'data-copy="address"' in ltc and 'data-copy="pay-link"' not in ltc
