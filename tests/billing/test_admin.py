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

from .helpers import make_invoice

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
    return make_invoice(customer, total="90.00")


def act(client, action, pk, **form):
    return client.post("/admin/billing/invoice/", {"action": action, "_selected_action": [pk], "apply": "1", **form})


def test_record_a_payment_from_the_admin(admin_client, invoice):
    resp = act(
        admin_client,
        "record_payment",
        invoice.pk,
        reason="seen on the node",
        txid="ab" * 32,
        amount="100000000 litoshi",
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
            "refund_amount": "105263 satoshi",
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
    # Without a reason it is not set: the form comes back saying so.
    unexplained = admin_client.post(
        "/admin/billing/ratesample/add/",
        {"currency": "BTC", "usd": "90000", "valid_until_0": until[:10], "valid_until_1": until[11:], "note": ""},
    )
    assert unexplained.status_code == 200 and b"This field is required" in unexplained.content
    assert RateSample.objects.filter(source="manual").count() == 1


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
            "refund_amount": "1000 satoshi",
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


# --- The invoice list: what is left to pay, and which rows need attention ------------------


def _to_pay(client, invoice) -> str:
    html = client.get("/admin/billing/invoice/").content.decode()
    row = next(r for r in re.findall(r"<tr[ >].*?</tr>", html, re.S) if f">{invoice.number}<" in r)
    return re.search(r'<td class="field-amount_due">(.*?)</td>', row, re.S).group(1).strip()


def test_to_pay_says_what_is_left_or_why_nothing_is(admin_client, invoice, customer):
    # 90.00 USD at 90 USD per LTC: 1 LTC, nothing paid yet.
    assert _to_pay(admin_client, invoice) == "1.00000000 LTC"
    # A partial payment (0.4 LTC): 0.6 LTC left, of the 1 LTC asked.
    _paid(invoice, amount=40_000_000)
    assert _to_pay(admin_client, invoice) == "0.60000000 LTC of 1.00000000 LTC (part paid)"
    # Paid in full (confirmed): nothing left.
    services.payment_record_manual(
        invoice_number=invoice.number,
        txid="cd" * 32,
        amount=60_000_000,
        confirmations=6,
        reason="rest seen",
        actor=None,
    )
    assert _to_pay(admin_client, invoice) == "paid"

    # Paid from credit.
    services.credit_adjust(account_id=customer.pk, amount_usd=Decimal("100.00"), reason="seed", actor=None)
    from_credit = make_invoice(customer, payable=("test", 3))
    services.invoice_pay_with_credit(invoice_id=from_credit.pk, account=customer)
    assert _to_pay(admin_client, from_credit) == "paid from credit"

    # Marked invalid after a confirmed partial payment: the payment became credit.
    invalid = make_invoice(customer, payable=("test", 4))
    services.payment_record_manual(
        invoice_number=invalid.number, txid="ef" * 32, amount=50_000_000, confirmations=6, reason="seen", actor=None
    )
    services.invoice_mark_invalid(invoice_id=invalid.pk, actor=None, reason="duplicate order")
    assert _to_pay(admin_client, invalid) == "nothing (invalid); credited 45.00 USD"
    page = admin_client.get(f"/admin/billing/invoice/{invalid.pk}/change/").content.decode()
    assert f"/admin/billing/creditentry/?invoice__id__exact={invalid.pk}" in page
    assert admin_client.get(f"/admin/billing/creditentry/?invoice__id__exact={invalid.pk}").status_code == 200


def test_needs_attention_marks_only_the_rows_that_need_it(admin_client, invoice, customer):
    flagged = make_invoice(customer, payable=("test", 5))
    Invoice.objects.filter(pk=flagged.pk).update(needs_attention=True)
    html = admin_client.get("/admin/billing/invoice/").content.decode()
    cells = dict(
        re.findall(
            r'<th class="field-number"><a [^>]*>([^<]+)</a></th>.*?<td class="field-attention">(.*?)</td>', html, re.S
        )
    )
    assert cells[invoice.number] in ("", "&nbsp;")
    assert "review" in cells[flagged.number] and "icon-alert.svg" in cells[flagged.number]
    assert "icon-no.svg" not in html
    # The invoice's page says it in words.
    page = admin_client.get(f"/admin/billing/invoice/{invoice.pk}/change/").content.decode()
    assert "icon-no.svg" not in page and "icon-alert.svg" not in page
    page = admin_client.get(f"/admin/billing/invoice/{flagged.pk}/change/").content.decode()
    assert "icon-alert.svg" in page and "later un-counted (a deep reorg)" in page


# --- Recording a payment: whole coins or base units, against what is due -------------------


def test_record_payment_form_shows_amount_due_and_confirmations(admin_client, invoice, settings):
    settings.CONFIRMATIONS = {**settings.CONFIRMATIONS, "LTC": 6}
    resp = admin_client.post("/admin/billing/invoice/", {"action": "record_payment", "_selected_action": [invoice.pk]})
    html = resp.content.decode()
    assert "Amount due in LTC (active quote)" in html
    assert "1.00000000 LTC (100,000,000 litoshi) at 90.00 USD per LTC; settles at 6 confirmations" in html
    assert "0.5 LTC or 50000000 litoshi" in html  # how to write the amount


def test_record_payment_in_whole_coins_is_converted_exactly(admin_client, invoice):
    resp = act(
        admin_client,
        "record_payment",
        invoice.pk,
        reason="seen on the node",
        txid="12" * 32,
        amount="0.12345678 LTC",
        confirmations="1",
        output_index="0",
        currency="",
    )
    assert resp.status_code == 302
    assert int(Payment.objects.get().amount) == 12_345_678
    # The form now shows what was received and what is still due.
    html = admin_client.post(
        "/admin/billing/invoice/", {"action": "record_payment", "_selected_action": [invoice.pk]}
    ).content.decode()
    assert "0.12345678 LTC (12,345,678 litoshi); still due 0.87654322 LTC (87,654,322 litoshi)" in html


@pytest.mark.parametrize(
    ("typed", "error"),
    [
        ("100000000", "Say the unit"),
        ("0.123456789 LTC", "LTC has 8 decimal places; 0.123456789 has 9."),
        ("1.5 litoshi", "litoshi are whole numbers"),
        ("0.01 BTC", "Unknown unit"),
        ("0 LTC", "The amount must be positive."),
        ("one LTC", "Write a number and its unit"),
        ("1" + "0" * 100 + " LTC", "More than any chain can hold"),  # was a 500
    ],
)
def test_record_payment_refuses_amounts_it_cannot_read_exactly(admin_client, invoice, typed, error):
    resp = act(
        admin_client,
        "record_payment",
        invoice.pk,
        reason="seen on the node",
        txid="34" * 32,
        amount=typed,
        confirmations="1",
        output_index="0",
        currency="",
    )
    assert resp.status_code == 200 and error in resp.content.decode()
    assert not Payment.objects.exists()


def test_record_payment_refuses_an_amount_worth_more_than_a_payment_holds(admin_client, invoice):
    """20 billion LTC at 90 USD is 1.8e12 USD, more than a payment's value
    (numeric(14, 2)) holds: refused with a message, not a 500."""
    resp = admin_client.post(
        "/admin/billing/invoice/",
        {
            "action": "record_payment",
            "_selected_action": [invoice.pk],
            "apply": "1",
            "reason": "seen on the node",
            "txid": "34" * 32,
            "amount": "20000000000 LTC",
            "confirmations": "1",
            "output_index": "0",
            "currency": "",
        },
        follow=True,
    )
    assert resp.status_code == 200 and "is worth more than any payment can hold" in resp.content.decode()
    assert not Payment.objects.exists()


def test_amount_parse_is_exact_for_wei():
    from billing.admin_forms import amount_parse

    parsed = amount_parse("16.004571428571428572 ETH", currencies=["ETH"])
    assert (parsed.currency, parsed.base_units) == ("ETH", 16_004_571_428_571_428_572)
    assert amount_parse("2,500 wei", currencies=["ETH"]).base_units == 2500
    shared = amount_parse("5000000 token units", currencies=["USDT", "USDC"])
    assert (shared.currencies, shared.currency, shared.base_units) == (("USDT", "USDC"), None, 5_000_000)
    # 2^256 - 1 wei, in ether: exact, no float on the way.
    top = 2**256 - 1
    coins = f"{top // 10**18}.{top % 10**18:018d} ETH"
    assert amount_parse(coins, currencies=["ETH"]).base_units == top


def test_refund_amount_in_coins_with_the_currencys_decimals(admin_client, customer):
    services.credit_adjust(account_id=customer.pk, amount_usd=Decimal("200.00"), reason="seed", actor=None)
    form = {
        "account": customer.pk,
        "kind": "refund",
        "amount_usd": "100.00",
        "reason": "ticket 7",
        "refund_currency": "LTC",
        "refund_destination": "ltc1qexample",
        "refund_txid": "aa" * 32,
    }
    page = admin_client.get("/admin/billing/creditentry/add/").content.decode()
    assert "whole coins with the code" in page
    resp = admin_client.post("/admin/billing/creditentry/add/", {**form, "refund_amount": "1.11111111"})
    assert resp.status_code == 200 and "Say the unit" in resp.content.decode()
    resp = admin_client.post("/admin/billing/creditentry/add/", {**form, "refund_amount": "1" + "0" * 100 + " LTC"})
    assert resp.status_code == 200 and "More than any chain can hold" in resp.content.decode()  # was a 500
    resp = admin_client.post("/admin/billing/creditentry/add/", {**form, "refund_amount": "1.11111111 LTC"})
    assert resp.status_code == 302, resp.content[:2000]
    refund = CreditEntry.objects.get(kind="refund")
    assert int(refund.refund_amount) == 111_111_111
    page = admin_client.get(f"/admin/billing/creditentry/{refund.pk}/change/").content.decode()
    assert "1.11111111 LTC (111,111,111 litoshi)" in page


def test_payments_are_found_by_the_customers_username(admin_client, invoice, customer, other_customer):
    _paid(invoice)
    other = make_invoice(other_customer, payable=("test", 6))
    services.payment_record_manual(
        invoice_number=other.number, txid="77" * 32, amount=1000, confirmations=0, reason="seen", actor=None
    )
    html = admin_client.get(f"/admin/billing/payment/?q={customer.username}").content.decode()
    assert invoice.number in html and other.number not in html


def test_invoice_lines_show_their_description_once(admin_client, chains, customer):
    invoice = services.invoice_create(
        account=customer,
        payable=("test", 7),
        description="t",
        lines=[LineSpec("Private VLAN, per month", Decimal(1), Decimal("30.00"), Decimal("30.00"), code="addon:x")],
        currency="LTC",
    )
    _paid(invoice, amount=1000)
    html = admin_client.get(f"/admin/billing/invoice/{invoice.pk}/change/").content.decode()
    assert html.count("Private VLAN, per month") == 1
    # A payment row keeps its link to the payment's page, without its name repeated.
    payment = Payment.objects.get()
    assert f'href="/admin/billing/payment/{payment.pk}/change/"' in html
    assert str(payment) not in html


def test_to_pay_of_a_new_invoice_past_its_quote(admin_client, invoice, customer):
    """Before the periodic job expires it, an invoice past its rate lock asks for nothing more."""
    import time_machine

    unpaid = make_invoice(customer, payable=("test", 8))
    _paid(invoice, amount=25_000_000)
    with time_machine.travel(invoice.expires_at + timezone.timedelta(minutes=1), tick=False):
        assert _to_pay(admin_client, unpaid) == "nothing (quote ended unpaid)"
        assert _to_pay(admin_client, invoice) == "0.75000000 LTC of 1.00000000 LTC (part paid, quote ended)"
        # Money arriving now closes it as expired: what arrived becomes credit once it is final.
        services.payment_record_manual(
            invoice_number=unpaid.number, txid="99" * 32, amount=10_000_000, confirmations=6, reason="late", actor=None
        )
        assert _to_pay(admin_client, unpaid) == "nothing (expired); 0.10000000 LTC received, to become credit"


def test_to_pay_of_an_invalid_invoice_whose_payment_still_confirms(admin_client, invoice):
    services.payment_record_manual(
        invoice_number=invoice.number, txid="55" * 32, amount=30_000_000, confirmations=0, reason="seen", actor=None
    )
    services.invoice_mark_invalid(invoice_id=invoice.pk, actor=None, reason="wrong customer")
    assert _to_pay(admin_client, invoice) == "nothing (invalid); 0.30000000 LTC received, to become credit"
