"""A quote's rate buys what its invoice lacks while the quote is live. Coins
that buy nothing (sent to an expired invoice's address weeks later, to the
address of a quote a re-quote replaced, to a cancelled or settled invoice, or
beyond what a live invoice lacks) count at the lower of the locked rate and the
market's then, whenever they come: after the coin's price fell they are worth
what they are worth now, never the old price (docs/billing.md, "After the rate lock")."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
import time_machine

from billing import selectors, services
from billing.models import CreditEntry, CreditKind, InvoiceStatus, Payment, RateSample
from billing.services import LineSpec, Observation

pytestmark = pytest.mark.django_db

START = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LTC = Decimal(10) ** 8  # litoshi per LTC


def make_invoice(account, total="90.00"):
    amount = Decimal(total)
    return services.invoice_create(
        account=account,
        payable=("test", 1),
        description="Test invoice",
        lines=[LineSpec("Thing", Decimal(1), amount, amount)],
        currency="LTC",
    )


def observe(request, amount: int, *, txid: str, now: datetime, confirmations: int = 6) -> Payment:
    payment = services.payment_observe(
        observation=Observation(
            currency=request.currency,
            txid=txid,
            output_index=0,
            match_key=request.match_key,
            amount=amount,
            confirmations=confirmations,
        ),
        now=now,
    )
    assert payment is not None
    return payment


@pytest.fixture
def ltc_at(settings):
    """Set the market's LTC rate (the test rates hold the others)."""

    def set_rate(usd: str) -> None:
        settings.MANUAL_RATES_USD = f"BTC=95000,ETH=3500,USDT=1,USDC=1,XMR=180,SOL=150,LTC={usd}"

    return set_rate


def test_coins_sent_to_an_expired_invoice_after_the_price_fell_are_credited_at_the_price_then(chains, customer, ltc_at):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)  # 90.00 USD at 90 USD/LTC: 1 LTC
    request = invoice.active_request
    assert request.amount_due == int(LTC)
    later = START + timedelta(days=10)  # long after the monitoring window
    with time_machine.travel(later, tick=False):
        services.invoices_advance_due(now=later)
        invoice.refresh_from_db()
        assert invoice.status == InvoiceStatus.EXPIRED
        ltc_at("45")  # the coin lost half its price
        payment = observe(request, int(LTC), txid="tx-late", now=later)
        services.invoices_advance_due(now=later)
    payment.refresh_from_db()
    assert payment.late_rate_usd == Decimal("45")
    assert payment.amount_usd == Decimal("45.00")
    entry = CreditEntry.objects.get(payment=payment)
    assert (entry.kind, entry.amount_usd) == (CreditKind.LATE_PAYMENT, Decimal("45.00"))
    assert selectors.credit_balance_usd(account=customer) == Decimal("45.00")


def test_a_price_that_rose_since_leaves_the_locked_rate(chains, customer, ltc_at):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    later = START + timedelta(days=3)
    with time_machine.travel(later, tick=False):
        services.invoices_advance_due(now=later)
        ltc_at("180")
        payment = observe(request, int(LTC) // 2, txid="tx-late", now=later)
        services.invoices_advance_due(now=later)
    payment.refresh_from_db()
    assert payment.late_rate_usd is None
    assert payment.amount_usd == Decimal("45.00")  # half a coin at the locked 90, not at 180
    assert selectors.credit_balance_usd(account=customer) == Decimal("45.00")


def test_inside_the_window_a_full_old_amount_after_a_fall_settles_only_with_the_rest(chains, customer, ltc_at):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    after_lock = START + timedelta(hours=1)  # the lock (30 minutes) is over; the window (24 hours) is not
    with time_machine.travel(after_lock, tick=False):
        services.invoices_advance_due(now=after_lock)
        ltc_at("72")  # 20 % down
        observe(request, int(LTC), txid="tx-old-amount", now=after_lock)
        invoice.refresh_from_db()
        # The old amount is worth 72.00 of 90.00 now: 80 %, not the whole invoice.
        assert (invoice.status, invoice.exception) == (InvoiceStatus.EXPIRED, "paid_late")
        assert selectors.invoice_paid_fraction(invoice=invoice) == Fraction(4, 5)
        # A quarter of a coin more, at 72 USD, is the 18.00 USD left: settled.
        observe(request, int(LTC) // 4, txid="tx-rest", now=after_lock)
        invoice.refresh_from_db()
    assert (invoice.status, invoice.exception) == (InvoiceStatus.SETTLED, "paid_late")
    assert not CreditEntry.objects.filter(account=customer).exists()


def test_a_quote_replaced_by_a_requote_is_not_held_at_its_old_rate(chains, customer, customer_api, client, ltc_at):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    first = invoice.active_request
    at = START + timedelta(hours=1)
    with time_machine.travel(at, tick=False):
        services.invoices_advance_due(now=at)
        ltc_at("60")
        resp = customer_api.post(f"/api/v1/invoices/{invoice.pk}/requote", {}, format="json")
        assert resp.status_code == 200, resp.content
        invoice.refresh_from_db()
        second = invoice.active_request
        assert second.pk != first.pk
        assert second.amount_due == int(Decimal("1.5") * LTC)  # 90.00 at 60
        # The old quote's 1 LTC, sent now, is 60.00 USD: two thirds of the invoice.
        payment = observe(first, int(LTC), txid="tx-old-quote", now=at)
        invoice.refresh_from_db()
        assert invoice.status == InvoiceStatus.NEW
        assert payment.late_rate_usd == Decimal("60")
        detail = customer_api.get(f"/api/v1/invoices/{invoice.pk}").json()
        page = client.get(f"/pay/{invoice.checkout_token}/status").json()
    assert detail["payment_summary"]["counted_usd"] == "60.00"
    assert detail["payment_summary"]["due_usd"] == "30.00"
    # The page asks for the rest at the live quote's 60 USD, not the whole 1.5 LTC it was made for,
    # and so does the admin's "to pay".
    assert (page["due"], page["due_usd"]) == (str(int(LTC) // 2), "30.00")
    from billing.admin import to_pay_text
    from billing.models import Invoice
    from billing.selectors import invoice_prefetches

    with time_machine.travel(at, tick=False):
        loaded = Invoice.objects.prefetch_related(*invoice_prefetches()).get(pk=invoice.pk)
        assert to_pay_text(loaded, credited_usd=None) == "0.50000000 LTC of 1.50000000 LTC (part paid)"
    [shown] = detail["payments"]
    assert (shown["amount_usd"], Decimal(shown["late_rate_usd"])) == ("60.00", Decimal("60"))


def test_a_quote_still_open_after_its_lock_keeps_its_rate_until_the_job_expires_it(chains, customer, ltc_at):
    # The periodic job runs every 30 seconds (and waits while a watcher is blind): until
    # it expires the invoice, the active quote holds for what the invoice lacks.
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    at = START + timedelta(minutes=40)  # past the lock (30) and its grace (5)
    with time_machine.travel(at, tick=False):
        ltc_at("45")
        payment = observe(invoice.active_request, int(LTC), txid="tx-just-late", now=at)
        invoice.refresh_from_db()
    assert payment.late_rate_usd is None
    assert payment.amount_usd == Decimal("90.00")
    assert invoice.status == InvoiceStatus.SETTLED


def test_without_a_rate_in_force_the_median_of_the_days_latest_samples_values_it(chains, customer, settings):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    later = START + timedelta(days=5)
    with time_machine.travel(later, tick=False):
        services.invoices_advance_due(now=later)
        settings.MANUAL_RATES_USD = ""  # only market samples now, and every one is stale
        samples = (("kraken", "50", 3), ("coingecko", "53", 2), ("kraken", "70", 5), ("bitstamp", "20", 30))
        for source, usd, age in samples:
            RateSample.objects.create(
                currency="LTC", source=source, usd=Decimal(usd), observed_at=later - timedelta(hours=age)
            )
        payment = observe(request, int(LTC), txid="tx-stale", now=later)
    # kraken's latest (50) and coingecko's (53); bitstamp's is more than a day old.
    assert payment.late_rate_usd == Decimal("51.5")
    assert payment.amount_usd == Decimal("51.50")


def test_with_no_market_rate_ever_known_the_locked_rate_stands(chains, customer, settings):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    later = START + timedelta(days=5)
    with time_machine.travel(later, tick=False):
        services.invoices_advance_due(now=later)
        settings.MANUAL_RATES_USD = ""
        payment = observe(invoice.active_request, int(LTC), txid="tx-no-rate", now=later)
    assert payment.late_rate_usd is None
    assert payment.amount_usd == Decimal("90.00")


def test_a_payment_staff_record_by_hand_keeps_the_locked_rate(chains, customer, ltc_at):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    later = START + timedelta(days=2)
    with time_machine.travel(later, tick=False):
        services.invoices_advance_due(now=later)
        ltc_at("45")
        payment = services.payment_record_manual(
            invoice_number=invoice.number,
            txid="tx-by-hand",
            amount=int(LTC),
            confirmations=6,
            reason="sent inside the lock; the node was down",
            actor=None,
            now=later,
        )
    assert payment.late_rate_usd is None
    assert payment.amount_usd == Decimal("90.00")


def test_a_payment_seen_within_the_grace_after_the_lock_keeps_its_rate(chains, customer, ltc_at):
    # Sent in time, seen a little after (an Ethereum block, a wallet's refresh), and after the
    # periodic job expired the invoice.
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    at = START + timedelta(minutes=34)
    with time_machine.travel(at, tick=False):
        services.invoices_advance_due(now=at)
        ltc_at("45")
        payment = observe(invoice.active_request, int(LTC), txid="tx-in-grace", now=at)
        invoice.refresh_from_db()
    assert payment.late_rate_usd is None
    assert (invoice.status, invoice.exception) == (InvoiceStatus.SETTLED, "paid_late")


def test_past_the_lock_what_completes_a_live_quote_keeps_its_rate_and_the_rest_does_not(chains, customer, ltc_at):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    at = START + timedelta(minutes=40)
    with time_machine.travel(at, tick=False):
        ltc_at("45")
        # 3 LTC: the first pays the invoice at the quote's 90 USD, the other two are 45 USD each.
        payment = observe(invoice.active_request, 3 * int(LTC), txid="tx-over", now=at)
        invoice.refresh_from_db()
    assert payment.late_rate_usd == Decimal("60")  # (90 + 45 + 45) / 3
    assert payment.amount_usd == Decimal("180.00")
    assert (invoice.status, invoice.exception) == (InvoiceStatus.SETTLED, "paid_over")
    entry = CreditEntry.objects.get(account=customer)
    assert (entry.kind, entry.amount_usd) == (CreditKind.OVERPAYMENT, Decimal("90.00"))


def test_a_top_up_to_a_paid_confirming_invoice_after_the_price_fell_is_worth_the_price_then(chains, customer, ltc_at):
    # A stuck transaction keeps the invoice confirming (it does not expire): money sent on
    # top of it hours later is not credited at the old quote's price.
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    with time_machine.travel(START + timedelta(minutes=1), tick=False):
        observe(request, int(LTC), txid="tx-stuck", now=START + timedelta(minutes=1), confirmations=0)
        invoice.refresh_from_db()
        assert invoice.status == InvoiceStatus.PROCESSING
    at = START + timedelta(hours=8)
    with time_machine.travel(at, tick=False):
        ltc_at("72")
        top_up = observe(request, 10 * int(LTC), txid="tx-top-up", now=at)
        invoice.refresh_from_db()
    assert top_up.late_rate_usd == Decimal("72")  # the invoice lacked nothing: all of it at 72
    assert invoice.status == InvoiceStatus.SETTLED
    # 720.00 USD arrived: 90.00 pays the invoice, 630.00 is credit (not 10 x 90 - 90 = 810.00).
    assert selectors.credit_balance_usd(account=customer) == Decimal("630.00")


def test_a_dropped_transaction_broadcast_again_later_is_valued_then(chains, customer, ltc_at):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    seen = START + timedelta(minutes=5)
    with time_machine.travel(seen, tick=False):
        first = observe(request, int(LTC), txid="tx-evicted", now=seen, confirmations=0)
    assert first.amount_usd == Decimal("90.00")
    closed = START + timedelta(hours=25)  # never confirmed inside the window: invalid
    with time_machine.travel(closed, tick=False):
        services.invoices_advance_due(now=closed)
        services.payment_uncount(chain="LTC", txid="tx-evicted", position="0", reason="evicted", now=closed)
    later = START + timedelta(days=20)
    with time_machine.travel(later, tick=False):
        ltc_at("60")
        back = observe(request, int(LTC), txid="tx-evicted", now=later)
        services.invoices_advance_due(now=later)
    back.refresh_from_db()
    assert back.pk == first.pk and back.status == "confirmed"
    assert (back.late_rate_usd, back.amount_usd) == (Decimal("60"), Decimal("60.00"))
    assert selectors.credit_balance_usd(account=customer) == Decimal("60.00")


def test_a_transaction_confirmed_only_after_the_window_is_valued_then(chains, customer, ltc_at):
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    seen = START + timedelta(minutes=5)
    with time_machine.travel(seen, tick=False):
        observe(request, int(LTC), txid="tx-slow", now=seen, confirmations=0)
    later = START + timedelta(days=3)
    with time_machine.travel(later, tick=False):
        services.invoices_advance_due(now=later)
        invoice.refresh_from_db()
        assert invoice.status == InvoiceStatus.INVALID
        ltc_at("60")
        payment = observe(request, int(LTC), txid="tx-slow", now=later)
    assert (payment.late_rate_usd, payment.amount_usd) == (Decimal("60"), Decimal("60.00"))
    assert selectors.credit_balance_usd(account=customer) == Decimal("60.00")


def test_coins_to_a_cancelled_invoice_inside_its_quote_are_worth_the_price_then(chains, customer, ltc_at):
    """The free option: an order cancelled, then coins sent to its address while
    its quote still ran, after the price fell (had it risen, nothing would have
    been sent). They buy nothing: credited at what they are worth, not at the
    price of the hour the quote was made."""
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)  # 90.00 USD at 90 USD/LTC
        services.invoice_void(invoice_id=invoice.pk, reason="order cancelled")
    request = invoice.active_request
    inside = START + timedelta(minutes=20)  # the quote's 30 minutes are not over
    with time_machine.travel(inside, tick=False):
        ltc_at("85.5")  # 5 % down
        payment = observe(request, 100 * int(LTC), txid="tx-option", now=inside)
    payment.refresh_from_db()
    assert payment.late_rate_usd == Decimal("85.5")
    assert payment.amount_usd == Decimal("8550.00")
    assert selectors.credit_balance_usd(account=customer) == Decimal("8550.00")


def test_an_over_payment_inside_the_quote_counts_its_excess_at_the_price_then(chains, customer, ltc_at):
    """What the invoice lacks keeps the locked rate; the rest of the transfer is
    no purchase at that price."""
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    inside = START + timedelta(minutes=10)
    with time_machine.travel(inside, tick=False):
        ltc_at("45")
        payment = observe(request, 3 * int(LTC), txid="tx-thrice", now=inside)
        invoice.refresh_from_db()
    assert invoice.status == InvoiceStatus.SETTLED
    payment.refresh_from_db()
    # One coin at the locked 90, two at 45: a blended 60 a coin, 180.00 in all; 90.00 of it is credit.
    assert payment.late_rate_usd == Decimal("60")
    assert payment.amount_usd == Decimal("180.00")
    assert selectors.credit_balance_usd(account=customer) == Decimal("90.00")
    # A second transfer to the settled invoice, still inside the quote: all at the price then.
    with time_machine.travel(inside, tick=False):
        again = observe(request, int(LTC), txid="tx-again", now=inside)
    again.refresh_from_db()
    assert (again.late_rate_usd, again.amount_usd) == (Decimal("45"), Decimal("45.00"))
    assert selectors.credit_balance_usd(account=customer) == Decimal("135.00")


def test_a_transfer_seen_just_after_the_job_expired_the_invoice_keeps_its_quote(chains, customer, ltc_at, settings):
    """Sent in the quote's last seconds, seen inside RATE_LOCK_GRACE_SECONDS after
    it ended, the periodic job having expired the invoice meanwhile: it pays what
    the invoice lacks at the locked rate."""
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    just_after = request.expires_at + timedelta(seconds=settings.RATE_LOCK_GRACE_SECONDS - 60)
    with time_machine.travel(just_after, tick=False):
        services.invoices_advance_due(now=just_after)
        invoice.refresh_from_db()
        assert invoice.status == InvoiceStatus.EXPIRED
        ltc_at("72")
        payment = observe(request, int(LTC), txid="tx-last-second", now=just_after)
        invoice.refresh_from_db()
    payment.refresh_from_db()
    assert payment.late_rate_usd is None and payment.amount_usd == Decimal("90.00")
    assert invoice.status == InvoiceStatus.SETTLED


def test_a_fee_bumped_replacement_inside_the_quote_keeps_the_locked_rate(chains, customer, ltc_at):
    """A watcher records the replacement of a stuck transaction before it
    un-counts the original: while the original still counts the quote lacks
    nothing, so the replacement is valued at the market's rate; once the
    original is gone it counts at the locked rate again, and the invoice is
    paid, not short by the price's fall."""
    from billing.currencies import CURRENCIES

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)  # 90.00 USD at 90: 1 LTC
    request = invoice.active_request
    inside = START + timedelta(minutes=5)
    with time_machine.travel(inside, tick=False):
        ltc_at("72")
        observe(request, int(LTC), txid="tx-stuck", now=inside, confirmations=0)
        bumped = observe(request, int(LTC), txid="tx-bumped", now=inside, confirmations=0)
        bumped.refresh_from_db()
        assert bumped.late_rate_usd == Decimal("72")  # the original still counted
        services.payment_uncount(
            chain=CURRENCIES["LTC"].chain, txid="tx-stuck", position="0", reason="replaced", now=inside
        )
        bumped.refresh_from_db()
        invoice.refresh_from_db()
    assert (bumped.late_rate_usd, bumped.amount_usd) == (None, Decimal("90.00"))
    assert invoice.status == InvoiceStatus.PROCESSING and invoice.exception == "none"


def test_a_replacement_un_counted_gives_no_closed_quote_its_old_rate_back(chains, customer, ltc_at):
    """Coins sent to an expired invoice after the price fell were valued at the
    market's; a small transfer sent later and replaced (un-counted) is no way to
    have them valued again at the locked rate once the price is back."""
    from billing.currencies import CURRENCIES

    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)
    request = invoice.active_request
    later = START + timedelta(hours=2)
    with time_machine.travel(later, tick=False):
        services.invoices_advance_due(now=later)
        ltc_at("72")
        late = observe(request, int(LTC), txid="tx-late", now=later, confirmations=0)
        ltc_at("90")  # back up
        observe(request, int(LTC) // 100, txid="tx-small", now=later, confirmations=0)
        services.payment_uncount(
            chain=CURRENCIES["LTC"].chain, txid="tx-small", position="0", reason="replaced", now=later
        )
        late.refresh_from_db()
    assert (late.late_rate_usd, late.amount_usd) == (Decimal("72"), Decimal("72.00"))


@pytest.mark.parametrize(("market", "credited", "late_rate"), [("72", "36.00", "72"), ("100", "45.00", None)])
def test_a_short_payment_to_an_invoice_that_expires_is_credited_as_buying_nothing(
    chains, customer, market, credited, late_rate
):
    """Half the invoice sent inside the lock, once the market had fallen below
    the locked rate, and the invoice left to expire: the half bought nothing,
    so it is credited at the lower of the locked rate and the market's when it
    was seen (a renewal's 24-hour lock was otherwise a free option: sent short
    after a fall, credit at the old price). A market above the lock keeps the
    locked rate."""
    with time_machine.travel(START, tick=False):
        invoice = make_invoice(customer)  # 90.00 USD at 90 USD/LTC: 1 LTC
    request = invoice.active_request
    sent = START + timedelta(minutes=20)
    for source in ("kraken", "coingecko"):
        RateSample.objects.create(
            currency="LTC", source=source, usd=Decimal(market), observed_at=sent - timedelta(seconds=40)
        )
    with time_machine.travel(sent, tick=False):
        payment = observe(request, int(LTC) // 2, txid="tx-half", now=sent)
        assert payment.amount_usd == Decimal("45.00") and payment.late_rate_usd is None  # inside the lock
    closed = START + timedelta(days=2)
    with time_machine.travel(closed, tick=False):
        services.invoices_advance_due(now=closed)
        services.invoices_advance_due(now=closed)
    invoice.refresh_from_db()
    payment.refresh_from_db()
    assert invoice.status == InvoiceStatus.EXPIRED
    assert payment.late_rate_usd == (Decimal(late_rate) if late_rate else None)
    entry = CreditEntry.objects.get(payment=payment)
    assert entry.amount_usd == Decimal(credited)
    assert selectors.credit_balance_usd(account=customer) == Decimal(credited)


def test_a_short_payment_on_an_invoice_the_system_voids_is_credited_as_buying_nothing(chains, customer):
    """The same short payment, on a lapsed invoice closed by the system (its
    renewal's usage moved to a new one) before the periodic job credited it:
    voided, it bought nothing all the same. One staff mark invalid keeps its
    rate (their judgment)."""
    with time_machine.travel(START, tick=False):
        invoice, marked = make_invoice(customer), make_invoice(customer)
    sent = START + timedelta(minutes=20)
    for source in ("kraken", "coingecko"):
        RateSample.objects.create(
            currency="LTC", source=source, usd=Decimal("72"), observed_at=sent - timedelta(seconds=40)
        )
    with time_machine.travel(sent, tick=False):
        half = observe(invoice.active_request, int(LTC) // 2, txid="tx-half-voided", now=sent)
        other = observe(marked.active_request, int(LTC) // 2, txid="tx-half-marked", now=sent)
    expired = START + timedelta(hours=1)
    with time_machine.travel(expired, tick=False):
        services.invoices_advance_due(now=expired)
    closed = START + timedelta(days=2)  # its window over, the periodic job not run yet
    with time_machine.travel(closed, tick=False):
        services.invoice_void_lapsed(invoice_id=invoice.pk, reason="its usage is billed again", now=closed)
        services.invoice_mark_invalid(invoice_id=marked.pk, actor=None, reason="wrong customer", now=closed)
    assert CreditEntry.objects.get(payment=half).amount_usd == Decimal("36.00")
    assert CreditEntry.objects.get(payment=other).amount_usd == Decimal("45.00")
