"""Edges of billing: a quote cannot be renewed for ever (same-currency switches,
the quote cap, the checkout page's POST throttle), revenue counts what was sold
once, an account holding credit is not closed, and invoices are locked by the
one shared helper."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
import time_machine
from django.core.cache import cache

from accounts.models import Account
from billing import selectors, services
from billing.models import CreditEntry, Invoice
from billing.services import LineSpec

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def make_invoice(account, total="250.00", currency="LTC", payable=("test", 1)):
    amount = Decimal(total)
    return services.invoice_create(
        account=account,
        payable=payable,
        description="Test invoice",
        lines=[LineSpec("Thing", Decimal(1), amount, amount)],
        currency=currency,
    )


def token_log_seen(request, txid: str, position: str, block: str, amount: int, confirmations: int):
    """A USDT watcher's sighting of a Transfer log at `position` ("log:N") in `block`."""
    from billing.services import Observation

    payment = services.payment_observe(
        observation=Observation(
            currency="USDT",
            txid=txid,
            output_index=int(position.split(":")[1]),
            position=position,
            match_key=request.match_key,
            amount=amount,
            confirmations=confirmations,
            block_height=100,
            block_hash=block,
        )
    )
    assert payment is not None
    return payment


def pay(invoice, amount: int, txid: str):
    return services.payment_record_manual(
        invoice_number=invoice.number, txid=txid, amount=amount, confirmations=6, reason="test", actor=None
    )


@pytest.fixture(autouse=True)
def _fresh_counts():
    cache.clear()
    yield
    cache.clear()


# --- Holding a quote ---------------------------------------------------------------------------


def test_a_switch_to_the_same_currency_is_refused_and_changes_nothing(chains, customer, customer_api):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    before = (invoice.active_request.address, invoice.expires_at)
    with time_machine.travel(START + timedelta(minutes=20), tick=False):
        resp = customer_api.post(f"/api/v1/invoices/{invoice.pk}/currency", {"currency": "LTC"}, format="json")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "currency_unchanged"
    assert resp.json()["error"]["details"] == {"currency": "LTC"}
    invoice.refresh_from_db()
    assert (invoice.active_request.address, invoice.expires_at) == before
    assert invoice.requests.count() == 1


def test_the_checkout_page_refuses_the_same_currency_too(chains, customer, client):
    invoice = make_invoice(customer)
    resp = client.post(f"/pay/{invoice.checkout_token}/currency", {"currency": "LTC"}, follow=True)
    assert "already in that currency" in resp.content.decode()
    assert invoice.requests.count() == 1


def test_quotes_are_capped_so_the_hold_ends(chains, customer, customer_api, settings):
    settings.INVOICE_MAX_QUOTES = 3
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)  # quote 1
    at = START + timedelta(minutes=10)
    for currency in ("BTC", "ETH"):  # quotes 2 and 3
        with time_machine.travel(at, tick=False):
            resp = customer_api.post(f"/api/v1/invoices/{invoice.pk}/currency", {"currency": currency}, format="json")
        assert resp.status_code == 200, resp.json()
        # Each switch keeps the first quote's expiry: it never restarts the hold.
        assert Invoice.objects.get(pk=invoice.pk).expires_at == START + timedelta(minutes=30)
        at += timedelta(minutes=5)
    with time_machine.travel(at, tick=False):
        refused = customer_api.post(f"/api/v1/invoices/{invoice.pk}/currency", {"currency": "SOL"}, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"] == {
        "code": "quote_limit_reached",
        "message": refused.json()["error"]["message"],
        "details": {"quotes": 3, "max_quotes": 3},
    }
    # Nor is it re-quoted once the last lock is over: the hold ends.
    last_lock = Invoice.objects.get(pk=invoice.pk).expires_at
    with time_machine.travel(last_lock + timedelta(minutes=1), tick=False):
        requote = customer_api.post(f"/api/v1/invoices/{invoice.pk}/requote", {}, format="json")
    assert requote.status_code == 409 and requote.json()["error"]["code"] == "quote_limit_reached"
    assert Invoice.objects.get(pk=invoice.pk).expires_at == last_lock == START + timedelta(minutes=30)


def test_checkout_posts_are_throttled_per_page(chains, customer, client, settings):
    settings.CHECKOUT_POSTS_PER_TOKEN = 3
    invoice = make_invoice(customer)
    path = f"/pay/{invoice.checkout_token}/currency"
    answers = [client.post(path, {"currency": c}, HTTP_ACCEPT="application/json") for c in ("BTC", "ETH", "SOL")]
    assert [r.status_code for r in answers] == [303, 303, 303]
    throttled = client.post(path, {"currency": "XMR"}, HTTP_ACCEPT="application/json")
    assert throttled.status_code == 429
    assert throttled.json()["error"]["code"] == "throttled"
    assert 1 <= int(throttled["Retry-After"]) <= settings.CHECKOUT_POST_WINDOW_SECONDS
    assert Invoice.objects.get(pk=invoice.pk).active_request.currency == "SOL"
    # Another invoice's page is not held up by this one's count.
    other = make_invoice(customer, payable=("test", 2))
    assert client.post(f"/pay/{other.checkout_token}/currency", {"currency": "BTC"}).status_code == 303


def test_checkout_posts_are_throttled_per_address(chains, customer, client, settings):
    settings.CHECKOUT_POSTS_PER_ADDRESS = 2
    tokens = [make_invoice(customer, payable=("test", i)).checkout_token for i in range(3)]
    codes = [
        client.post(f"/pay/{t}/requote", {}, REMOTE_ADDR="198.51.100.9").status_code for t in tokens
    ]  # each refused inside (not expired), but counted
    assert codes == [303, 303, 429]
    assert client.post(f"/pay/{tokens[2]}/requote", {}, REMOTE_ADDR="198.51.100.10").status_code == 303


def test_checkout_posts_of_one_ipv6_client_are_counted_by_its_64(chains, customer, client, settings):
    # A subscriber holds a whole /64: a new address in it for each POST is still the same client.
    settings.CHECKOUT_POSTS_PER_ADDRESS = 2
    tokens = [make_invoice(customer, payable=("test", i)).checkout_token for i in range(3)]
    codes = [
        client.post(f"/pay/{t}/requote", {}, REMOTE_ADDR=f"2001:db8:5:7::{i + 1:x}").status_code
        for i, t in enumerate(tokens)
    ]
    assert codes == [303, 303, 429]
    assert client.post(f"/pay/{tokens[2]}/requote", {}, REMOTE_ADDR="2001:db8:5:8::1").status_code == 303


# --- Revenue ------------------------------------------------------------------------------------


def test_a_payment_split_into_outputs_of_half_a_cent_is_not_credited_twice_its_worth(chains, customer):
    # Each output is a payment valued on its own: rounded half up, an output worth 0.6 cent
    # became a cent of credit, and a transaction of many such outputs twice what it sent.
    from tests.billing.helpers import observe

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        pay(invoice, int(invoice.active_request.amount_due), txid="tx-paid")
        invoice.refresh_from_db()
        request = invoice.active_request
        scale = Decimal(10) ** 8  # litoshi
        piece = int(Decimal("0.006") * scale / request.rate_usd)  # 0.6 cent at the quote's rate
        for index in range(5):
            observe(invoice, piece, confirmations=6, txid="tx-split", index=index)
        whole = piece * 5  # 3 cents sent in all
        observe(invoice, whole, confirmations=6, txid="tx-whole")
    worth = Decimal(whole) * request.rate_usd / scale
    assert Decimal("0.029") < worth < Decimal("0.031")
    # The five outputs are worth under a cent each: closed without credit; the whole one is 2 cents.
    assert selectors.credit_balance_usd(account=customer) == Decimal("0.02")
    assert selectors.credit_balance_usd(account=customer) <= worth


def test_revenue_counts_an_over_payment_once(chains, customer):
    with time_machine.travel(START, tick=False):
        first = make_invoice(customer, total="250.00")
        due = int(first.active_request.amount_due)
        pay(first, due + due // 10, txid="tx-over")  # 10 % over: 25.00 becomes credit
        assert selectors.credit_balance_usd(account=customer) == Decimal("25.00")
        second = make_invoice(customer, total="25.00", payable=("test", 2))
        services.invoice_pay_with_credit(invoice_id=second.pk, account=customer)

    since, until = START - timedelta(days=1), START + timedelta(days=1)
    rows = {r["currency"]: r for r in selectors.revenue_by_currency(since=since, until=until)}
    assert {code: (r["usd"], r["invoices"]) for code, r in rows.items()} == {
        "LTC": (Decimal("250.00"), 1),
        "credit": (Decimal("25.00"), 1),
    }
    assert rows["LTC"]["amount"] == due + due // 10  # the coins that came in
    by_day = selectors.revenue_by_day(since=since, until=until)
    assert [(r["day"], r["currency"], r["usd"]) for r in by_day] == [
        (date(2026, 11, 30), "LTC", Decimal("250.00")),
        (date(2026, 11, 30), "credit", Decimal("25.00")),
    ]
    assert sum(r["usd"] for r in by_day) == Decimal("275.00")  # what was sold, once


def test_revenue_leaves_out_an_invoice_whose_value_went_back_as_credit(chains, customer):
    # A renewal paid for a rental cancelled meanwhile: its whole value became
    # credit; it is revenue once, when the credit pays for something.
    with time_machine.travel(START, tick=False):
        undelivered = make_invoice(customer, total="250.00")
        pay(undelivered, int(undelivered.active_request.amount_due), txid="tx-undelivered")
        services.invoice_credit_unfulfilled(invoice_id=undelivered.pk, reason="the rental was cancelled")
        spent = make_invoice(customer, total="250.00", payable=("test", 2))
        services.invoice_pay_with_credit(invoice_id=spent.pk, account=customer)

    since, until = START - timedelta(days=1), START + timedelta(days=1)
    rows = selectors.revenue_by_currency(since=since, until=until)
    assert [(r["currency"], r["usd"], r["invoices"]) for r in rows] == [("credit", Decimal("250.00"), 1)]
    by_day = selectors.revenue_by_day(since=since, until=until)
    assert [(r["currency"], r["usd"]) for r in by_day] == [("credit", Decimal("250.00"))]


# --- Crediting back what cannot be delivered ---------------------------------------------------


def test_what_cannot_be_delivered_is_credited_as_received_not_its_total(chains, customer):
    # Settled inside the under-payment tolerance (0.5 %): 99.6 % of 250.00 arrived.
    with time_machine.travel(START, tick=False):
        short = make_invoice(customer)
        payment = pay(short, int(short.active_request.amount_due) * 996 // 1000, txid="tx-short")
        short.refresh_from_db()
        assert short.status == "settled"
        entry = services.invoice_credit_unfulfilled(invoice_id=short.pk, reason="sold out")
    # 99.6 % of the coins, a litoshi under 249.00 USD: its value rounded down.
    assert entry is not None and entry.amount_usd == payment.amount_usd == Decimal("248.99")
    assert selectors.credit_balance_usd(account=customer) == Decimal("248.99")
    # Asked again (a redelivered signal): the same entry, nothing more.
    assert services.invoice_credit_unfulfilled(invoice_id=short.pk, reason="sold out").pk == entry.pk
    assert selectors.credit_balance_usd(account=customer) == Decimal("248.99")


def test_an_overpaid_invoice_credits_back_its_total_beside_the_excess(chains, customer):
    with time_machine.travel(START, tick=False):
        over = make_invoice(customer)
        due = int(over.active_request.amount_due)
        pay(over, due + due // 10, txid="tx-over")  # 25.00 over: credited as it came
        services.invoice_credit_unfulfilled(invoice_id=over.pk, reason="sold out")
    kinds = sorted(CreditEntry.objects.filter(account=customer).values_list("kind", "amount_usd"))
    assert kinds == [("overpayment", Decimal("25.00")), ("unfulfilled", Decimal("250.00"))]


def test_an_invoice_paid_from_credit_gives_the_credit_back(chains, customer):
    services.credit_post(account_id=customer.pk, kind="adjustment", amount_usd=Decimal("300.00"), reason="goodwill")
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        services.invoice_pay_with_credit(invoice_id=invoice.pk, account=customer)
        assert selectors.credit_balance_usd(account=customer) == Decimal("50.00")
        services.invoice_credit_unfulfilled(invoice_id=invoice.pk, reason="sold out")
    assert selectors.credit_balance_usd(account=customer) == Decimal("300.00")


def test_an_invoice_staff_marked_settled_with_nothing_received_credits_nothing(chains, customer):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        services.invoice_mark_settled(invoice_id=invoice.pk, actor=None, reason="paid by bank transfer")
        assert services.invoice_credit_unfulfilled(invoice_id=invoice.pk, reason="sold out") is None
    assert selectors.credit_balance_usd(account=customer) == Decimal("0")
    assert not CreditEntry.objects.filter(account=customer).exists()


def test_marking_an_invoice_settled_takes_a_confirming_payment_as_its_payment(chains, customer):
    # Settled by staff while its payment confirms: when it confirms it is not credited on top.
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        due = int(invoice.active_request.amount_due)
        services.payment_record_manual(
            invoice_number=invoice.number, txid="tx-slow", amount=due, confirmations=1, reason="seen", actor=None
        )
        invoice.refresh_from_db()
        assert invoice.status == "processing"
        services.invoice_mark_settled(invoice_id=invoice.pk, actor=None, reason="customer in a hurry")
        pay(invoice, due, txid="tx-slow")  # now 6 confirmations
    invoice.refresh_from_db()
    assert (invoice.status, invoice.exception) == ("settled", "marked")
    assert selectors.credit_balance_usd(account=customer) == Decimal("0")
    assert not CreditEntry.objects.filter(account=customer).exists()


def test_an_invoice_paid_over_and_confirming_is_not_marked_settled(chains, customer):
    """Twice the amount sent, still confirming: marked settled, its excess was
    lost (the payment became applied, nothing stayed open to credit). Refused
    (credited at once, it would be spendable out of a transaction that may still
    be replaced); once confirmed, the invoice settles by itself and credits it."""
    from core.errors import Conflict

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        due = int(invoice.active_request.amount_due)
        services.payment_record_manual(
            invoice_number=invoice.number, txid="tx-twice", amount=2 * due, confirmations=1, reason="seen", actor=None
        )
        with pytest.raises(Conflict) as refused:
            services.invoice_mark_settled(invoice_id=invoice.pk, actor=None, reason="customer in a hurry")
        assert refused.value.code == "overpayment_confirming"
        invoice.refresh_from_db()
        assert invoice.status == "processing"
        pay(invoice, 2 * due, txid="tx-twice")  # confirmed
    invoice.refresh_from_db()
    assert (invoice.status, invoice.exception) == ("settled", "paid_over")
    entry = CreditEntry.objects.get(account=customer)
    assert (entry.kind, entry.amount_usd) == ("overpayment", Decimal("250.00"))


def test_an_invoice_past_its_window_may_be_marked_settled_with_more_received(chains, customer):
    """Past its monitoring window an invoice no longer settles by itself: staff
    are not held off by the over-payment refusal there."""
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        due = int(invoice.active_request.amount_due)
        services.payment_record_manual(
            invoice_number=invoice.number, txid="tx-stuck", amount=2 * due, confirmations=1, reason="seen", actor=None
        )
    after = START + timedelta(days=2)
    with time_machine.travel(after, tick=False):
        services.invoices_advance_due(now=after)
        invoice.refresh_from_db()
        assert invoice.status == "invalid"  # paid, never confirmed inside its window
        services.invoice_mark_settled(invoice_id=invoice.pk, actor=None, reason="paid, we checked")
        invoice.refresh_from_db()
    assert invoice.status == "settled"


def test_an_invoice_whose_money_became_credit_is_not_marked_settled(chains, customer):
    """Paid after its monitoring window, its money became the customer's credit:
    marked settled on top, the order was delivered and the credit kept."""
    from core.errors import Conflict

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        due = int(invoice.active_request.amount_due)
    after = START + timedelta(days=2)
    with time_machine.travel(after, tick=False):
        services.invoices_advance_due(now=after)
        pay(invoice, due, txid="tx-late")
        services.invoices_advance_due(now=after)
        assert selectors.credit_balance_usd(account=customer) == Decimal("250.00")
        with pytest.raises(Conflict) as refused:
            services.invoice_mark_settled(invoice_id=invoice.pk, actor=None, reason="customer asked for the server")
    assert refused.value.code == "payments_credited"
    assert refused.value.details == {"credited_usd": "250.00"}
    invoice.refresh_from_db()
    assert invoice.status != "settled"


def test_staff_recording_a_recorded_transfer_again_updates_it_on_its_invoice_only(chains, customer):
    """By hand, the same transfer: its confirmations raised, audited, where the
    watcher saw it kept; one the chain dropped is not revived (it settled the
    invoice on money that was double spent, with no audit row); one on another
    invoice is not touched through this one."""
    from billing.models import Payment
    from billing.services import Observation
    from core.errors import Conflict
    from core.models import AuditEntry

    def seen(invoice, txid: str, amount: int, confirmations: int = 1):
        return services.payment_observe(
            observation=Observation(
                currency="LTC",
                txid=txid,
                output_index=0,
                match_key=invoice.active_request.match_key,
                amount=amount,
                confirmations=confirmations,
                block_height=500,
                block_hash="0x" + "bb" * 32,
            )
        )

    with time_machine.travel(START, tick=False):
        invoice, other = make_invoice(customer), make_invoice(customer)
        due = int(invoice.active_request.amount_due)
        watched = seen(invoice, "aa" * 32, due)
        updated = pay(invoice, due, txid="aa" * 32)
        assert updated.pk == watched.pk and (updated.confirmations, updated.block_height) == (6, 500)
        entry = AuditEntry.objects.get(action="payment.record", object_id=str(watched.pk))
        assert entry.changes["confirmations"] == [1, 6]

        dropped = seen(other, "cc" * 32, due)
        services.payment_uncount(chain="litecoin", txid="cc" * 32, position="0", reason="replaced by a conflicting tx")
        with pytest.raises(Conflict) as refused:
            pay(other, due, txid="cc" * 32)
        assert refused.value.code == "payment_removed"
        dropped.refresh_from_db()
        assert dropped.status == "removed"

        with pytest.raises(Conflict) as elsewhere:
            pay(other, due, txid="aa" * 32)
        assert elsewhere.value.code == "payment_recorded_already"
        assert elsewhere.value.details["invoice"] == invoice.number
    assert Payment.objects.filter(invoice=other).count() == 1
    other.refresh_from_db()
    assert other.status == "new"


def test_a_payment_after_staff_marked_the_invoice_settled_is_flagged(chains, customer):
    """Staff settled it on what an explorer showed, before the watcher saw the
    payment; when it is recorded, it is credited as any payment to a settled
    invoice is, and flagged for staff: it may be the same money twice."""
    from billing.models import Payment

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        due = int(invoice.active_request.amount_due)
        services.invoice_mark_settled(invoice_id=invoice.pk, actor=None, reason="seen on an explorer")
        pay(invoice, due, txid="tx-seen-before")
    payment = Payment.objects.get(invoice=invoice)
    invoice.refresh_from_db()
    assert invoice.needs_attention and payment.flagged_at is not None
    assert "after staff marked the invoice settled" in payment.flag_reason


def test_one_invoice_that_fails_holds_back_none_after_it(chains, customer, monkeypatch):
    from billing.services import payments

    with time_machine.travel(START, tick=False):
        broken, fine = make_invoice(customer), make_invoice(customer, payable=("test", 2))
    real = payments.invoice_advance

    def advance(*, invoice, now):
        if invoice.pk == broken.pk:
            raise RuntimeError("bad data")
        real(invoice=invoice, now=now)

    monkeypatch.setattr(payments, "invoice_advance", advance)
    later = START + timedelta(hours=1)
    assert services.invoices_advance_due(now=later) == 1
    assert Invoice.objects.get(pk=fine.pk).status == "expired"
    assert Invoice.objects.get(pk=broken.pk).status == "new"  # tried again at the next run
    monkeypatch.setattr(payments, "invoice_advance", real)
    assert services.invoices_advance_due(now=later) == 1
    assert Invoice.objects.get(pk=broken.pk).status == "expired"


def test_a_transaction_recorded_by_hand_counts_once(chains, customer):
    from billing.models import Payment
    from billing.services import Observation
    from core.errors import Conflict

    txid = "ABCDEF01" * 8  # typed by staff in capitals; the node writes it in lower case
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        request = invoice.active_request
        due = int(request.amount_due)
        pay(invoice, due, txid=txid)  # at output 0, as typed
        # At another output index, the same transaction is refused, whatever its case.
        with pytest.raises(Conflict) as refused:
            services.payment_record_manual(
                invoice_number=invoice.number,
                txid=txid.lower(),
                amount=due,
                confirmations=6,
                reason="again",
                actor=None,
                output_index=1,
            )
        assert refused.value.code == "payment_recorded_already"
        assert refused.value.details["positions"] == ["0"]
        # The watcher sees it at its real output, 1: the same payment, not a second one.
        seen = services.payment_observe(
            observation=Observation(
                currency="LTC",
                txid=txid.lower(),
                output_index=1,
                match_key=request.match_key,
                amount=due,
                confirmations=7,
            )
        )
    assert Payment.objects.count() == 1
    # The watcher's from now on: it checks it again as its own; who recorded it stays.
    assert (seen.position, seen.txid, seen.source, seen.confirmations) == ("1", txid.lower(), "watcher", 7)
    assert seen.reason == "test"
    invoice.refresh_from_db()
    assert (invoice.status, invoice.exception) == ("settled", "none")
    assert not CreditEntry.objects.filter(account=customer).exists()


def test_a_second_output_of_a_transaction_recorded_by_hand_is_its_own_payment(chains, customer):
    from billing.models import Payment
    from billing.services import Observation

    txid = "0f" * 32
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        request = invoice.active_request
        half = int(request.amount_due) // 2 + 1
        pay(invoice, half, txid=txid)  # output 0, by hand

        def watcher_sees(index: int) -> Payment:
            payment = services.payment_observe(
                observation=Observation(
                    currency="LTC",
                    txid=txid,
                    output_index=index,
                    match_key=request.match_key,
                    amount=half,
                    confirmations=6,
                )
            )
            assert payment is not None
            return payment

        first, second = watcher_sees(0), watcher_sees(1)
        assert watcher_sees(0).pk == first.pk  # seen again: the same one, where it was
    assert first.pk != second.pk and Payment.objects.count() == 2
    assert sorted(Payment.objects.values_list("position", "source")) == [("0", "watcher"), ("1", "watcher")]
    invoice.refresh_from_db()
    assert invoice.status == "settled"


def test_an_ether_transaction_typed_without_0x_is_the_one_the_watcher_sees(chains, customer):
    """Staff type an Ethereum transaction id as an explorer may show it (no 0x,
    capitals); the node writes 0x and lower case. It is one payment, not two."""
    from billing.models import Payment
    from billing.services import Observation

    typed = "5F3A" * 16
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer, currency="ETH")
        request = invoice.active_request
        due = int(request.amount_due)
        recorded = pay(invoice, due, txid=typed)
        assert recorded.txid == "0x" + typed.lower()
        seen = services.payment_observe(
            observation=Observation(
                currency="ETH",
                txid="0x" + typed.lower(),
                output_index=0,
                position="tx",
                match_key=request.match_key,
                amount=due,
                confirmations=20,
            )
        )
    assert Payment.objects.count() == 1 and seen.pk == recorded.pk and seen.source == "watcher"
    assert not CreditEntry.objects.filter(account=customer).exists()


def balance_sighting(request, amount: int, *, block: str, confirmations: int, **seen):
    """An Ethereum watcher's balance-mode sighting at `request`'s address: the block's
    hash for a txid, since the transfer was made inside a contract."""
    from billing.services import Observation

    payment = services.payment_observe(
        observation=Observation(
            currency="ETH",
            txid=block,
            output_index=0,
            position=f"balance:{request.match_key}",
            match_key=request.match_key,
            amount=amount,
            confirmations=confirmations,
            own_txid=False,
            **seen,
        )
    )
    assert payment is not None
    return payment


def test_ether_a_balance_reading_watcher_finds_is_the_payment_staff_recorded(chains, customer):
    """A transfer made inside a contract, found by reading balances, carries the
    block's hash, not its transaction's: staff recorded it by the transaction's
    id, the watcher's sighting is that payment (same quote, same amount), not a
    second one credited on top."""
    from billing.models import Payment

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer, currency="ETH")
        request = invoice.active_request
        due = int(request.amount_due)
        recorded = pay(invoice, due, txid="0x" + "ab" * 32)
        block = "0x" + "cd" * 32
        seen = balance_sighting(request, due, block=block, confirmations=3)
        again = balance_sighting(request, due, block=block, confirmations=12)
    assert Payment.objects.count() == 1 and seen.pk == again.pk == recorded.pk
    assert (again.txid, again.position, again.confirmations) == (block, f"balance:{request.match_key}", 12)
    assert ("0x" + "ab" * 32) in again.reason
    invoice.refresh_from_db()
    assert invoice.status == "settled"
    assert not CreditEntry.objects.filter(account=customer).exists()


def test_staff_recording_what_a_balance_reading_watcher_found_is_refused(chains, customer):
    """The other way round: the watcher found the ether by its balance (the
    block's hash for a txid) and staff then record the transaction by its own
    id, same quote, same amount: refused as that transfer again, not a second
    payment credited on top. Another amount is another transfer."""
    from billing.models import Payment
    from core.errors import Conflict

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer, currency="ETH")
        request = invoice.active_request
        due = int(request.amount_due)
        block = "0x" + "cd" * 32
        balance_sighting(request, due, block=block, confirmations=3, block_height=120, block_hash=block)
        with pytest.raises(Conflict) as refused:
            pay(invoice, due, txid="0x" + "ab" * 32)
        assert refused.value.code == "payment_recorded_already"
        assert refused.value.details == {"txid": block, "positions": [f"balance:{request.match_key}"]}
        assert block in refused.value.message
        assert Payment.objects.count() == 1
        other = pay(invoice, 1000, txid="0x" + "ab" * 32)
    assert Payment.objects.count() == 2 and other.amount == 1000


@pytest.mark.parametrize(("ltc_then", "late_rate", "worth"), [(None, None, "250.00"), ("72", "72", "200.00")])
def test_a_transfer_staff_put_on_the_wrong_quote_is_the_one_the_watcher_sees(
    chains, customer, settings, ltc_then, late_rate, worth
):
    """The customer paid an earlier quote of the invoice; staff recorded the
    transaction against the current one. The watcher sees it at the earlier
    quote's address: the same payment, moved to that quote and valued as it
    values what reaches it: at its rate, or, the coin down 20 % since (the quote
    was replaced), at the market's."""
    from billing.models import Payment
    from billing.services import Observation

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
        first = invoice.active_request
    later = START + timedelta(hours=1)
    with time_machine.travel(later, tick=False):
        services.invoices_advance_due(now=later)
        if ltc_then:
            settings.MANUAL_RATES_USD = f"BTC=95000,ETH=3500,USDT=1,USDC=1,XMR=180,SOL=150,LTC={ltc_then}"
        invoice = services.invoice_requote(invoice_id=invoice.pk, account=customer)
        assert invoice.active_request.pk != first.pk
        txid = "1e" * 32
        due = int(first.amount_due)
        services.payment_record_manual(
            invoice_number=invoice.number, txid=txid, amount=due, confirmations=1, reason="test", actor=None
        )
        seen = services.payment_observe(
            observation=Observation(
                currency="LTC", txid=txid, output_index=0, match_key=first.match_key, amount=due, confirmations=6
            )
        )
    assert Payment.objects.count() == 1
    assert (seen.request_id, seen.source) == (first.pk, "watcher")
    assert seen.late_rate_usd == (Decimal(late_rate) if late_rate else None)
    assert seen.amount_usd == Decimal(worth)


def test_a_token_transfer_mined_again_at_another_log_index_counts_once(chains, customer):
    """A reorg: the transaction that paid 250 USDT was mined again in the new
    branch, its Transfer log at index 3 where it was at 7. The fork left the old
    sighting counted (its transaction is in the new branch); the new one is that
    payment, moved, not a second one credited as an over-payment."""
    from billing.models import Payment

    def seen(position: str, block: str, amount: int, confirmations: int = 1) -> Payment:
        return token_log_seen(request, "0x" + "7a" * 32, position, block, amount, confirmations)

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer, currency="USDT")
        request = invoice.active_request
        due = int(request.amount_due)
        first = seen("log:7", "0x" + "aa" * 32, due)
        again = seen("log:3", "0x" + "bb" * 32, due, confirmations=12)
        # Two transfers of one transaction in one block are two payments.
        other = seen("log:4", "0x" + "bb" * 32, due, confirmations=12)
    assert again.pk == first.pk and (again.position, again.block_hash) == ("log:3", "0x" + "bb" * 32)
    assert other.pk != first.pk and Payment.objects.count() == 2
    invoice.refresh_from_db()
    assert invoice.status == "settled"
    assert sum(e.amount_usd for e in CreditEntry.objects.filter(account=customer)) == Decimal("250.00")  # the second


def test_a_reorg_that_shifts_two_transfers_of_one_transaction_counts_each_once(chains, customer):
    """One transaction sent two USDT transfers to the invoice, logs 5 and 6 of
    its block. A reorg mined it again where its logs are 6 and 7: the first
    transfer's new index is the old index of the second. Each is the payment
    recorded before, moved (the second first steps aside); before, the first
    sighting was taken for the second (another amount, kept as it was) and the
    second's own was recorded again: 30 USDT counted three times as 20 + 10 + 10."""
    from billing.models import Payment

    old_block, new_block = "0x" + "aa" * 32, "0x" + "bb" * 32

    def seen(position: str, block: str, amount: int, confirmations: int = 1) -> Payment:
        return token_log_seen(request, "0x" + "7c" * 32, position, block, amount, confirmations)

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer, currency="USDT")
        request = invoice.active_request
        first = seen("log:5", old_block, 20_000_000)
        second = seen("log:6", old_block, 10_000_000)
        first_again = seen("log:6", new_block, 20_000_000, confirmations=12)
        second_again = seen("log:7", new_block, 10_000_000, confirmations=12)
        # Seen once more at the same places: nothing moves.
        assert seen("log:6", new_block, 20_000_000, confirmations=13).pk == first.pk
        assert seen("log:7", new_block, 10_000_000, confirmations=13).pk == second.pk
        assert (first_again.pk, second_again.pk) == (first.pk, second.pk)
        rows = sorted(Payment.objects.values_list("position", "amount", "block_hash"))
        assert rows == [("log:6", 20_000_000, new_block), ("log:7", 10_000_000, new_block)]
        # And back to the first branch, the second transfer seen first this time.
        assert seen("log:6", old_block, 10_000_000, confirmations=14).pk == second.pk
        assert seen("log:5", old_block, 20_000_000, confirmations=14).pk == first.pk
    rows = sorted(Payment.objects.values_list("position", "amount", "block_hash"))
    assert rows == [("log:5", 20_000_000, old_block), ("log:6", 10_000_000, old_block)]


def test_a_payment_un_counted_for_a_block_is_left_alone_once_recorded_in_another(chains, customer):
    """The confirmation refresh un-counts a payment whose block left the chain;
    a run that overlapped may have recorded it in the new branch meanwhile: the
    un-count names the block it read and leaves a payment recorded elsewhere."""
    from billing.services import Observation

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer, currency="USDT")
        request = invoice.active_request
        payment = services.payment_observe(
            observation=Observation(
                currency="USDT",
                txid="0x" + "7d" * 32,
                output_index=2,
                position="log:2",
                match_key=request.match_key,
                amount=int(request.amount_due),
                confirmations=1,
                block_height=100,
                block_hash="0x" + "bb" * 32,
            )
        )
        kept = services.payment_uncount(
            chain="ethereum", txid=payment.txid, position="log:2", reason="reorg", block_hash="0x" + "aa" * 32
        )
        assert kept.status == "pending"
        gone = services.payment_uncount(
            chain="ethereum", txid=payment.txid, position="log:2", reason="reorg", block_hash="0x" + "bb" * 32
        )
    assert gone.status == "removed"


# --- Closing an account that holds credit -------------------------------------------------------
# --- Closing an account that holds credit -------------------------------------------------------


def test_an_account_with_credit_is_not_closed_until_staff_refund_it(chains, customer, customer_api, staff_user):
    services.credit_post(account_id=customer.pk, kind="adjustment", amount_usd=Decimal("40.00"), reason="goodwill")
    password = {"password": "correct horse battery staple"}

    refused = customer_api.delete("/api/v1/account", password, format="json")
    assert refused.status_code == 409
    assert refused.json()["error"]["code"] == "account_has_credit"
    assert refused.json()["error"]["details"] == {"credit_usd": "40.00"}
    assert Account.objects.get(pk=customer.pk).is_active

    services.credit_refund_record(
        account_id=customer.pk,
        amount_usd=Decimal("40.00"),
        currency="LTC",
        destination="rltc1qrefund",
        amount=44_444_445,
        txid="refund-tx",
        reason="asked to close the account",
        actor=staff_user,
    )
    assert customer_api.delete("/api/v1/account", password, format="json").status_code == 204
    closed = Account.objects.get(pk=customer.pk)  # kept: its ledger names it
    assert not closed.is_active
    assert [e.kind for e in CreditEntry.objects.filter(account=closed).order_by("id")] == ["adjustment", "refund"]


@pytest.fixture
def staff_user(django_user_model):
    return django_user_model.objects.create_superuser("staffer", "a-long-staff-password")


# --- One lock helper -----------------------------------------------------------------------------


def test_invoices_are_locked_with_the_shared_helper(chains, customer, other_customer, monkeypatch):
    from billing.services import common
    from core import db
    from core.errors import NotFound

    calls = []

    def recording(queryset, **kwargs):
        calls.append(kwargs)
        return db.locked_or_404(queryset, **kwargs)

    monkeypatch.setattr(common, "locked_or_404", recording)
    invoice = make_invoice(customer)
    with pytest.raises(NotFound) as refused:
        services.invoice_switch_currency(invoice_id=invoice.pk, account=other_customer, currency="BTC")
    assert refused.value.code == "not_found" and refused.value.message == "No such invoice."
    services.invoice_switch_currency(invoice_id=invoice.pk, account=customer, currency="BTC")
    assert calls == [{"pk": invoice.pk, "message": "No such invoice."}] * 2
