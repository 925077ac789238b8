"""The billing API: only the owner sees an invoice; the error shape everywhere."""

from decimal import Decimal

import pytest

from billing import services
from billing.services import LineSpec

pytestmark = pytest.mark.django_db


def invoice(account, currency="BTC", total="120.00"):
    total = Decimal(total)
    return services.invoice_create(
        account=account,
        payable=("test", 1),
        description="Two weeks of something",
        lines=[LineSpec("Thing, per week", Decimal(2), total / 2, total)],
        currency=currency,
    )


def test_invoice_detail_has_the_contract_fields(chains, customer, customer_api):
    inv = invoice(customer)
    body = customer_api.get(f"/api/v1/invoices/{inv.pk}").json()
    req = inv.active_request
    assert {k: body[k] for k in ("id", "number", "status", "exception", "amount_usd", "pay_currency", "address")} == {
        "id": inv.pk,
        "number": inv.number,
        "status": "new",
        "exception": "none",
        "amount_usd": "120.00",
        "pay_currency": "BTC",
        "address": req.address,
    }
    assert body["amount"] == str(int(req.amount_due)) and body["amount"].isdigit()
    assert body["amount_display"] == "0.00126316"
    assert body["payment_uri"].startswith(f"bitcoin:{req.address}?amount=0.00126316")
    assert body["expires_at"] and body["lines"][0]["quantity"] == "2"
    assert body["requests"][0]["rate"]["source"] == "setting"
    assert body["payments"] == []


def test_payments_show_confirmations_seen_and_needed(chains, customer, customer_api):
    inv = invoice(customer)
    services.payment_record_manual(
        invoice_number=inv.number, txid="t1", amount=1000, confirmations=1, reason="test", actor=None
    )
    body = customer_api.get(f"/api/v1/invoices/{inv.pk}").json()
    assert body["payments"][0] | {"first_seen_at": None} == {
        "currency": "BTC",
        "txid": "t1",
        "index": 0,
        "position": "0",
        "amount": "1000",
        "amount_display": "0.00001000",
        "amount_usd": "0.95",
        "late_rate_usd": None,
        "confirmations": 1,
        "confirmations_required": 2,
        "status": "pending",
        "disposition": "open",
        "first_seen_at": None,
        "confirmed_at": None,
    }
    assert body["paid_amount"] == "1000" and body["confirmed_amount"] == "0"


def test_other_accounts_get_404_on_every_invoice_endpoint(chains, customer, other_customer, api):
    inv = invoice(customer)
    api.force_authenticate(other_customer)
    for method, path in [
        ("get", f"/api/v1/invoices/{inv.pk}"),
        ("get", f"/api/v1/invoices/{inv.pk}/qr.svg"),
        ("post", f"/api/v1/invoices/{inv.pk}/currency"),
        ("post", f"/api/v1/invoices/{inv.pk}/requote"),
        ("post", f"/api/v1/invoices/{inv.pk}/pay-with-credit"),
    ]:
        resp = getattr(api, method)(path, {"currency": "ETH"}, format="json") if method == "post" else api.get(path)
        assert resp.status_code == 404, path
        assert resp.json()["error"]["code"] == "not_found"
    assert api.get("/api/v1/invoices").json()["results"] == []


def test_unauthenticated_is_401_in_the_error_shape(api):
    resp = api.get("/api/v1/invoices")
    assert resp.status_code == 401
    assert resp.json()["error"]["code"] == "not_authenticated"


def test_switch_currency_through_the_api(chains, customer, customer_api):
    inv = invoice(customer)
    resp = customer_api.post(f"/api/v1/invoices/{inv.pk}/currency", {"currency": "xmr"}, format="json")
    assert resp.status_code == 200
    body = resp.json()
    assert body["pay_currency"] == "XMR" and body["payment_uri"].startswith("monero:")
    assert [r["active"] for r in body["requests"]] == [False, True]
    bad = customer_api.post(f"/api/v1/invoices/{inv.pk}/currency", {"currency": "DOGE"}, format="json")
    assert bad.status_code == 400
    error = bad.json()["error"]
    assert error["code"] == "unknown_currency"
    assert error["details"]["currencies"] == ["BTC", "ETH", "USDT", "USDC", "XMR", "SOL", "LTC"]
    missing = customer_api.post(f"/api/v1/invoices/{inv.pk}/currency", {}, format="json")
    assert missing.status_code == 400 and missing.json()["error"]["code"] == "invalid"


def test_qr_code_is_svg_of_the_payment_uri(chains, customer, customer_api):
    inv = invoice(customer, currency="SOL")
    resp = customer_api.get(f"/api/v1/invoices/{inv.pk}/qr.svg")
    assert resp.status_code == 200
    assert resp["Content-Type"] == "image/svg+xml"
    assert resp.content.lstrip().startswith(b"<?xml") or b"<svg" in resp.content[:200]


def test_pay_with_credit(chains, customer, customer_api):
    services.credit_post(account_id=customer.pk, kind="adjustment", amount_usd=Decimal("100.00"), reason="goodwill")
    inv = invoice(customer, total="120.00")
    short = customer_api.post(f"/api/v1/invoices/{inv.pk}/pay-with-credit")
    assert short.status_code == 409 and short.json()["error"]["code"] == "insufficient_credit"
    services.credit_post(account_id=customer.pk, kind="adjustment", amount_usd=Decimal("20.00"), reason="more")
    paid = customer_api.post(f"/api/v1/invoices/{inv.pk}/pay-with-credit")
    assert paid.status_code == 200 and paid.json()["status"] == "settled"
    assert paid.json()["settled_via"] == "credit"
    ledger = customer_api.get("/api/v1/account/credit").json()["results"]
    assert [(e["kind"], e["amount_usd"], e["balance_after_usd"]) for e in ledger] == [
        ("invoice_payment", "-120.00", "0.00"),
        ("adjustment", "20.00", "120.00"),
        ("adjustment", "100.00", "100.00"),
    ]


def test_currencies_lists_the_enabled_ones(chains, api, settings):
    settings.XMR_ADDRESS = ""
    rows = api.get("/api/v1/currencies").json()
    assert [r["code"] for r in rows] == ["BTC", "ETH", "USDT", "USDC", "SOL", "LTC"]
    btc = rows[0]
    assert (btc["decimals"], btc["confirmations"], btc["network"]) == (8, 2, "bitcoin-mainnet")
    assert btc["health"]["ok"] is True
    assert {r["code"]: r["confirmations"] for r in rows}["LTC"] == 6
