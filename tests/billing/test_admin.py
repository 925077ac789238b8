"""Staff corrections in the admin: each needs a reason, goes through the
billing services and lands in the audit trail."""

import re
from decimal import Decimal

import pytest
from django.test import Client
from django.utils import timezone

from billing import services
from billing.models import CreditEntry, Invoice, Payment, RateSample
from billing.selectors import credit_balance_usd
from billing.services import LineSpec
from core.models import AuditEntry

pytestmark = pytest.mark.django_db


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_superuser("opsperson", "a-long-staff-password")


@pytest.fixture
def admin_client(staff):
    client = Client()
    client.force_login(staff)
    return client


@pytest.fixture
def invoice(chains, customer):
    return services.invoice_create(
        account=customer,
        subject="test:1",
        description="t",
        lines=[LineSpec("x", Decimal(1), Decimal("90.00"), Decimal("90.00"))],
        currency="LTC",
    )


def act(client, action, pk, **form):
    return client.post("/admin/billing/invoice/", {"action": action, "_selected_action": [pk], "apply": "1", **form})


def test_record_a_payment_from_the_admin(admin_client, invoice):
    resp = act(
        admin_client,
        "record_payment",
        invoice.pk,
        reason="seen on the node",
        txid="ab" * 32,
        amount="100000000",
        confirmations="6",
        output_index="1",
        currency="",
    )
    assert resp.status_code == 302
    payment = Payment.objects.get()
    assert (payment.txid, payment.output_index, int(payment.amount), payment.source) == (
        "ab" * 32,
        1,
        100_000_000,
        "manual",
    )
    assert Invoice.objects.get(pk=invoice.pk).status == "settled"
    entry = AuditEntry.objects.get(action="payment.record")
    assert (entry.actor_name, entry.reason) == ("opsperson", "seen on the node")


def test_mark_invalid_from_the_admin_needs_a_reason(admin_client, invoice):
    resp = act(admin_client, "mark_invalid", invoice.pk, reason="")
    assert resp.status_code == 200 and b"This field is required" in resp.content
    assert Invoice.objects.get(pk=invoice.pk).status == "new"
    act(admin_client, "mark_invalid", invoice.pk, reason="duplicate of GRH-2026-000002")
    inv = Invoice.objects.get(pk=invoice.pk)
    assert (inv.status, inv.exception) == ("invalid", "marked")


def test_credit_adjustment_and_refund_from_the_admin(admin_client, customer):
    resp = admin_client.post(
        "/admin/billing/creditentry/add/",
        {"account": customer.pk, "kind": "adjustment", "amount_usd": "120.00", "reason": "outage credit"},
    )
    assert resp.status_code == 302, resp.content[:1000]
    resp = admin_client.post(
        "/admin/billing/creditentry/add/",
        {
            "account": customer.pk,
            "kind": "refund",
            "amount_usd": "100.00",
            "reason": "customer asked, ticket 4",
            "refund_currency": "BTC",
            "refund_destination": "bc1qexample",
            "refund_amount": "105263",
            "refund_txid": "cd" * 32,
        },
    )
    assert resp.status_code == 302
    assert credit_balance_usd(account=customer) == Decimal("20.00")
    refund = CreditEntry.objects.get(kind="refund")
    assert (refund.amount_usd, refund.refund_txid, refund.created_by.username) == (
        Decimal("-100.00"),
        "cd" * 32,
        "opsperson",
    )
    # More than the balance is refused, and nothing is written.
    resp = admin_client.post(
        "/admin/billing/creditentry/add/",
        {"account": customer.pk, "kind": "adjustment", "amount_usd": "-50.00", "reason": "mistake"},
    )
    assert resp.status_code == 200 and b"20.00 USD of credit" in resp.content  # the form again, with why
    assert b"mistake" in resp.content  # what staff typed is kept
    assert CreditEntry.objects.count() == 2
    assert credit_balance_usd(account=customer) == Decimal("20.00")


def test_manual_rate_from_the_admin(admin_client):
    until = (timezone.now() + timezone.timedelta(hours=2)).strftime("%Y-%m-%d %H:%M:%S")
    resp = admin_client.post(
        "/admin/billing/ratesample/add/",
        {
            "currency": "XMR",
            "usd": "170.5",
            "valid_until_0": until[:10],
            "valid_until_1": until[11:],
            "note": "kraken halted XMR",
        },
    )
    assert resp.status_code == 302, resp.content[:1000]
    sample = RateSample.objects.get(source="manual")
    assert (sample.currency, sample.usd, sample.created_by.username) == ("XMR", Decimal("170.5"), "opsperson")


def test_billing_admin_pages_render(admin_client, invoice):
    for url in (
        "/admin/billing/invoice/",
        f"/admin/billing/invoice/{invoice.pk}/change/",
        "/admin/billing/invoice/?status__exact=new&requests__currency=LTC",
        "/admin/billing/payment/",
        "/admin/billing/creditbalance/",
        "/admin/billing/ratesample/",
        "/admin/billing/chainstate/",
        f"/admin/billing/invoice/?q={invoice.active_request.address}",
    ):
        resp = admin_client.get(url)
        assert resp.status_code == 200, url
    assert (
        invoice.number.encode()
        in admin_client.get(f"/admin/billing/invoice/?q={invoice.active_request.address}").content
    )


def test_a_refund_must_say_its_currency(admin_client, customer):
    services.credit_post(account_id=customer.pk, kind="adjustment", amount_usd=Decimal("50.00"), reason="seed")
    admin_client.post(
        "/admin/billing/creditentry/add/",
        {
            "account": customer.pk,
            "kind": "refund",
            "amount_usd": "10.00",
            "reason": "ticket 5",
            "refund_currency": "",
            "refund_destination": "bc1qexample",
            "refund_amount": "1000",
            "refund_txid": "ef" * 32,
        },
    )
    assert not CreditEntry.objects.filter(kind="refund").exists()
    assert credit_balance_usd(account=customer) == Decimal("50.00")


# --- How billing records read -----------------------------------------------------------


def _paid(invoice, amount=100_000_000):
    return services.payment_record_manual(
        invoice_number=invoice.number,
        txid="ab" * 32,
        amount=amount,
        confirmations=6,
        output_index=0,
        currency=None,
        reason="seen on the node",
        actor=None,
    )


def test_an_issued_invoice_shows_no_save_button_and_refuses_a_post(admin_client, invoice):
    url = f"/admin/billing/invoice/{invoice.pk}/change/"
    html = admin_client.get(url).content.decode()
    assert 'name="_save"' not in html and 'name="_continue"' not in html and "View invoice" in html
    assert admin_client.post(url, {"status": "settled", "total_usd": "1.00"}).status_code == 403
    assert Invoice.objects.get(pk=invoice.pk).status == "new"
    # The corrections are still there, as actions on the list.
    assert 'value="record_payment"' in admin_client.get("/admin/billing/invoice/").content.decode()


def test_crypto_amounts_in_whole_coins_beside_base_units_and_rates_as_prices(admin_client, invoice):
    _paid(invoice)
    html = admin_client.get(f"/admin/billing/invoice/{invoice.pk}/change/").content.decode()
    # 90.00 USD at 90 USD per LTC: 1 LTC asked; the rate reads as a price, not 90.000000000000.
    assert "1.00000000 LTC (100,000,000 litoshi)" in html
    assert ">90.00<" in html and "90.000000000000" not in html
    payment = Payment.objects.get()
    page = admin_client.get(f"/admin/billing/payment/{payment.pk}/change/").content.decode()
    assert "1.00000000 LTC (100,000,000 litoshi)" in page and 'name="_save"' not in page
    listing = admin_client.get("/admin/billing/payment/").content.decode()
    assert "1.00000000 LTC" in listing and "100,000,000" in listing and "90.00" in listing


def test_ledger_rows_show_money_with_two_decimals_and_no_save(admin_client, customer):
    services.credit_adjust(account_id=customer.pk, amount_usd=Decimal("1234.5"), reason="goodwill", actor=None)
    entry = CreditEntry.objects.get()
    page = admin_client.get(f"/admin/billing/creditentry/{entry.pk}/change/").content.decode()
    assert "1,234.50" in page and 'name="_save"' not in page
    listing = admin_client.get("/admin/billing/creditentry/").content.decode()
    assert "1,234.50" in listing


def test_rate_samples_list_prices(admin_client):
    RateSample.objects.create(
        currency="SOL", source="kraken", usd=Decimal("151.237500000000"), observed_at=timezone.now()
    )
    RateSample.objects.create(
        currency="USDT", source="kraken", usd=Decimal("0.998712000000"), observed_at=timezone.now()
    )
    listing = admin_client.get("/admin/billing/ratesample/").content.decode()
    cells = re.findall(r'<td class="field-usd_price">([^<]*)</td>', listing)
    assert sorted(cells) == ["0.9987", "151.24"]
    assert "151.237500000000" not in listing and "0.998712000000" not in listing
