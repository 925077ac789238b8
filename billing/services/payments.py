"""Payments: a watcher's (or staff's) sighting recorded once per chain,
transaction and position, un-counted when the chain drops it, flagged for
staff; each moves its invoice through the state machine (billing.machine).
Strays (transfers nothing may credit) are recorded for staff."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_DOWN, Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from billing import machine, signals
from billing.currencies import CURRENCIES, currency_get
from billing.models import (
    CreditKind,
    Invoice,
    InvoiceException,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentRequest,
    PaymentStatus,
    StrayTransfer,
)
from billing.rates import rate_to_value_at
from billing.selectors import payment_share, payments_fraction
from billing.services.common import confirmations_required, invoice_lock, invoice_transition, log, tolerance
from billing.services.credit import credit_post, payment_value_as_buying_nothing
from core.audit import AuditAction, audit_record
from core.money import cents, cents_down


@dataclass(frozen=True)
class Observation:
    """A transfer a watcher (or staff) saw. `confirmations` is 0 in the mempool.

    A payment is identified by (chain, txid, position); `position` defaults to
    the output index (UTXO chains). `final` overrides the confirmation count
    for chains settled by a finality tag: True settles, False does not,
    whatever `confirmations` says; None applies CONFIRMATIONS_<currency>.
    `own_txid` is False where the watcher knows the transfer but not the
    transaction that made it (Ethereum's balance mode: the block's hash).
    `matures_at_height`: a coinbase output, unspendable until the tip reaches
    that height: not confirmed before, whatever `confirmations` says.
    """

    currency: str
    txid: str
    output_index: int
    match_key: str
    amount: int  # base units
    confirmations: int
    block_height: int | None = None
    block_hash: str = ""
    position: str = ""
    final: bool | None = None
    own_txid: bool = True
    matures_at_height: int | None = None

    @property
    def key(self) -> str:
        return self.position or str(self.output_index)


def _late_rate(
    *, request: PaymentRequest, invoice: Invoice, amount: int, now: datetime, exclude: int | None = None
) -> Decimal | None:
    """The rate a transfer of `amount` seen now counts at instead of its request's
    locked one, or None. A quote's locked rate buys what its invoice lacks, and
    only while the quote is live: the active request of an invoice still open
    (new, also past its expiry until the periodic job expires it or while it
    waits for a blind watcher; or paid and confirming), or expired less than
    RATE_LOCK_GRACE_SECONDS ago (a watcher sees a transfer some seconds after it
    was sent, and the job may have expired the invoice meanwhile). Everything else counts
    at the lower of the locked rate and the market's (rate_to_value_at): coins
    sent to an old quote, to a replaced one, to an invoice cancelled, expired or
    settled, and the part of a payment beyond what a live invoice lacks (an
    over-payment), whenever they come, inside the quote's time or after it. A
    closed quote is no option on the coin's price: what buys nothing is worth
    what it is worth now. The rate returned for a payment partly inside what a
    live invoice lacks is the blend. `exclude`: a payment already recorded,
    valued again (it is not what the invoice holds besides)."""
    live = Fraction(0)  # of this payment, the part the quote still holds at its rate
    if _quote_live(request=request, invoice=invoice, now=now):
        if invoice.status == InvoiceStatus.NEW and invoice.exception == InvoiceException.NONE and exclude is None:
            lacking = Fraction(1)  # nothing counted on it yet (else `paid_partial`): no query on the usual path
        else:
            held = invoice.payments.exclude(status=PaymentStatus.REMOVED).filter(disposition=PaymentDisposition.OPEN)
            if exclude is not None:
                held = held.exclude(pk=exclude)
            lacking = max(
                Fraction(0), 1 - payments_fraction(invoice=invoice, payments=list(held.select_related("request")))
            )
        own = machine.payment_fraction(
            amount=amount, amount_due=request.amount_due, request_usd=request.amount_usd, total_usd=invoice.total_usd
        )
        if own <= lacking:
            return None  # the usual case, and no rate to read
        live = lacking / own
    market = rate_to_value_at(currency=request.currency, now=now)
    if market is None or market >= request.rate_usd:
        return None
    if live:
        blended = live * Fraction(request.rate_usd) + (1 - live) * Fraction(market)
        market = Decimal(blended.numerator) / Decimal(blended.denominator)
    # Stored as the column keeps it (12 places), rounded down: the value is what is stored.
    return market.quantize(_RATE_PLACES, rounding=ROUND_DOWN)


def _quote_live(*, request: PaymentRequest, invoice: Invoice, now: datetime) -> bool:
    """Whether `request` still buys what its invoice lacks at its locked rate (_late_rate)."""
    grace = timedelta(seconds=settings.RATE_LOCK_GRACE_SECONDS)
    return request.is_active and (
        invoice.status in (InvoiceStatus.NEW, InvoiceStatus.PROCESSING)
        or (invoice.status == InvoiceStatus.EXPIRED and now < request.expires_at + grace)
    )


_RATE_PLACES = Decimal("1e-12")  # Payment.late_rate_usd's decimal places


def _payment_value_usd(request: PaymentRequest, amount: int, *, late_rate: Decimal | None = None) -> Decimal:
    """What a transfer is worth at its request's rate (or `late_rate`), in whole
    cents, rounded down (core.money.cents_down): it becomes credit when it pays nothing."""
    rate = request.rate_usd if late_rate is None else late_rate
    return cents_down(Decimal(amount) * rate / currency_get(request.currency).scale)


def payment_observe(
    *,
    observation: Observation,
    source: str = "watcher",
    actor: Any = None,
    reason: str = "",
    now: datetime | None = None,
) -> Payment | None:
    """Record a sighting of a transfer (once per chain, txid and index) and move
    its invoice through the state machine. Later sightings update confirmations;
    a payment un-counted by a reorg and seen again counts again."""
    now = now or timezone.now()
    obs = observation
    with transaction.atomic():
        # The request and its invoice, the invoice locked, in one statement: a block
        # pays many invoices, each payment in its own transaction, and this was two.
        request = (
            PaymentRequest.objects.select_related("invoice")
            .select_for_update(of=("invoice",))
            .filter(currency=obs.currency, match_key=obs.match_key)
            .first()
        )
        if request is None:
            log.warning("payment to unknown destination %s %s ignored", obs.currency, obs.match_key)
            return None
        if obs.amount <= 0:
            return None
        invoice = request.invoice
        chain = CURRENCIES[obs.currency].chain
        if obs.final is not None:
            confirmed = obs.final and obs.confirmations >= 1
        else:
            confirmed = obs.confirmations >= confirmations_required(currency=obs.currency)
        # The transaction's payments, read once: this position's, or one staff recorded by hand.
        recorded = list(Payment.objects.filter(chain=chain, txid=obs.txid))
        payment = next((p for p in recorded if p.position == obs.key), None)
        matures = obs.matures_at_height
        if matures is None and payment is not None:
            matures = payment.matures_at_height
        if matures is not None and confirmed:
            # A coinbase output: not before it can be spent, whatever the count.
            tip = (obs.block_height or 0) + obs.confirmations - 1
            confirmed = obs.block_height is not None and tip >= matures
        if payment is not None and source == "watcher" and _position_reused(payment=payment, request=request, obs=obs):
            payment = None
        if source == "watcher" and (payment is None or payment.source == "manual"):
            if payment is not None:
                recorded = [payment]
            elif not obs.own_txid:
                # Staff typed the real transaction id; this sighting cannot know it.
                recorded = list(Payment.objects.filter(request=request, source="manual", amount=obs.amount))
            payment = _recorded_by_hand(recorded=recorded, request=request, obs=obs, now=now) or payment
        if payment is None and source == "watcher" and obs.block_hash:
            payment = _moved_by_reorg(recorded=recorded, request=request, obs=obs)
        if payment is None:
            # Staff recording a payment by hand judge when it was sent (docs/billing.md).
            late_rate = (
                _late_rate(request=request, invoice=invoice, amount=obs.amount, now=now)
                if source == "watcher"
                else None
            )
            if late_rate is not None:
                log.info(
                    "payment %s %s to %s beyond what its live quote buys: valued at %s USD, not the locked %s",
                    obs.currency,
                    obs.txid,
                    invoice.number,
                    late_rate,
                    request.rate_usd,
                )
            payment = Payment.objects.create(
                request=request,
                invoice=invoice,
                chain=chain,
                currency=obs.currency,
                txid=obs.txid,
                output_index=obs.output_index,
                position=obs.key,
                amount=obs.amount,
                amount_usd=_payment_value_usd(request, obs.amount, late_rate=late_rate),
                late_rate_usd=late_rate,
                confirmations=obs.confirmations,
                block_height=obs.block_height,
                block_hash=obs.block_hash or "",
                matures_at_height=obs.matures_at_height,
                status=PaymentStatus.CONFIRMED if confirmed else PaymentStatus.PENDING,
                source=source,
                first_seen_at=now,
                confirmed_at=now if confirmed else None,
                recorded_by=actor if getattr(actor, "pk", None) else None,
                reason=reason,
            )
            if source != "watcher":
                audit_record(
                    actor=actor,
                    action=AuditAction.PAYMENT_RECORD,
                    obj=payment,
                    reason=reason,
                    changes={"txid": obs.txid, "amount": obs.amount, "confirmations": obs.confirmations},
                )
            if invoice.status == InvoiceStatus.SETTLED and invoice.exception == InvoiceException.MARKED:
                # Staff settled it as paid some other way (or by a payment they saw before a
                # watcher did): this one may be that payment, and its credit a second count.
                _flag(
                    payment=payment,
                    invoice=invoice,
                    reason="received after staff marked the invoice settled: the same money again?",
                    now=now,
                )
            transaction.on_commit(
                lambda: signals.payment_received.send(
                    sender=Payment,
                    invoice_id=invoice.pk,
                    payment_id=payment.pk,
                    subject_kind=invoice.subject_kind,
                    subject_id=invoice.subject_id,
                )
            )
        else:
            if int(payment.amount) != obs.amount or payment.request_id != request.pk:
                log.error("payment %s seen again with another amount or destination; kept the first", payment)
            if source == "watcher":
                # Recorded by hand and now seen, it is the watcher's (recorded_by and reason
                # stay): checked again as its own, and another output of its transaction to
                # the same quote is recorded beside it, not taken for it.
                payment.source = "watcher"
            if source == "watcher" and payment.disposition == PaymentDisposition.OPEN:
                _value_again_if_late(payment=payment, request=request, invoice=invoice, confirmed=confirmed, now=now)
            payment.confirmations = obs.confirmations
            if obs.matures_at_height is not None:
                payment.matures_at_height = obs.matures_at_height
            if source == "watcher" or obs.block_hash:
                # Staff updating a payment by hand know no block: where the watcher saw it stays.
                payment.block_height = obs.block_height
                payment.block_hash = obs.block_hash or ""
            payment.status = PaymentStatus.CONFIRMED if confirmed else PaymentStatus.PENDING
            if confirmed and payment.confirmed_at is None:
                payment.confirmed_at = now
            if payment.removed_at is not None:
                payment.removed_at, payment.removal_reason = None, ""
            payment.save()
        invoice_advance(invoice=invoice, now=now)
        return payment


def _recorded_by_hand(
    *, recorded: list[Payment], request: PaymentRequest, obs: Observation, now: datetime
) -> Payment | None:
    """Of the transaction's payments (`recorded`), the one staff recorded by hand
    for the transfer a watcher now sees at its own position: the same invoice
    and amount. It becomes the watcher's (its position, and its quote where
    staff chose another of the invoice's, are the watcher's from now on), so it
    counts once. Another amount is another transfer: None. Its invoice is
    locked already (the caller's), which serializes its updates."""
    manual = next(
        (
            p
            for p in recorded
            if p.source == "manual" and p.invoice_id == request.invoice_id and int(p.amount) == obs.amount
        ),
        None,
    )
    if manual is None:
        return None
    log.info("payment %s recorded by hand is the watcher's %s:%s", manual, obs.txid, obs.key)
    if not obs.own_txid:
        manual.reason = f"{manual.reason} (recorded by hand as {manual.txid})"[:500]
    manual.txid, manual.position, manual.output_index = obs.txid, obs.key, obs.output_index
    if manual.request_id != request.pk and manual.disposition == PaymentDisposition.OPEN:
        # Sent to another quote of the invoice than staff said (its currency, on a chain of
        # several tokens, may differ): valued as that quote values what reaches it, a replaced
        # quote at the lower of its rate and the market's.
        manual.request, manual.currency = request, request.currency
        late = _late_rate(
            request=request, invoice=request.invoice, amount=int(manual.amount), now=now, exclude=manual.pk
        )
        manual.late_rate_usd = late
        manual.amount_usd = _payment_value_usd(request, int(manual.amount), late_rate=late)
    return manual


def _position_reused(*, payment: Payment, request: PaymentRequest, obs: Observation) -> bool:
    """Whether the payment a watcher recorded at this position in another block
    is another transfer of the transaction: after a reorg its transfers can sit
    at other positions (a token log's index is the block's), one where another
    was, with another amount or destination. The payment then moves aside (its
    position named after its old block) and is found again by its own new
    sighting (`_moved_by_reorg`); taken for this one, it was kept with the wrong
    amount and its own transfer was recorded a second time."""
    if payment.source != "watcher" or not (obs.block_hash and payment.block_hash):
        return False
    if payment.block_hash == obs.block_hash:
        return False
    if int(payment.amount) == obs.amount and payment.request_id == request.pk:
        return False
    log.info(
        "%s of %s is another transfer than the one now at %s in block %s",
        payment,
        payment.block_hash,
        obs.key,
        obs.block_hash,
    )
    payment.position = f"{payment.position}@{payment.block_hash}"[: Payment._meta.get_field("position").max_length]
    payment.save(update_fields=["position"])
    return True


def _moved_by_reorg(*, recorded: list[Payment], request: PaymentRequest, obs: Observation) -> Payment | None:
    """Of the transaction's payments (`recorded`), the one a watcher recorded in
    another block for the same quote and amount: the transaction was mined again
    after a reorg, where its position (a token transfer's log index in the
    block) may differ. It takes the new position rather than count a second time
    beside the first, which the fork left counted since its transaction is in the
    new branch. Two transfers of one transaction in one block stay two."""
    moved = next(
        (
            p
            for p in recorded
            if p.source == "watcher"
            and p.request_id == request.pk
            and int(p.amount) == obs.amount
            and p.block_hash
            and p.block_hash != obs.block_hash
        ),
        None,
    )
    if moved is not None:
        log.info("payment %s mined again in block %s: now at %s", moved, obs.block_hash, obs.key)
        moved.position, moved.output_index = obs.key, obs.output_index
    return moved


def _value_again_if_late(
    *, payment: Payment, request: PaymentRequest, invoice: Invoice, confirmed: bool, now: datetime
) -> None:
    """A payment back after the chain dropped it (a transaction evicted, then
    broadcast again weeks later), or confirmed only once its invoice's monitoring
    window is over (it can then only become credit), is valued as if seen now,
    when that is lower: its first sighting held no rate for it beyond its quote."""
    back = payment.status == PaymentStatus.REMOVED
    confirmed_late = confirmed and payment.confirmed_at is None and now >= invoice.monitoring_until
    if not (back or confirmed_late):
        return
    late_rate = _late_rate(request=request, invoice=invoice, amount=int(payment.amount), now=now, exclude=payment.pk)
    if late_rate is None or late_rate >= (payment.late_rate_usd or request.rate_usd):
        return
    log.info("payment %s counted again after its rate lock: valued at %s USD a coin", payment, late_rate)
    payment.late_rate_usd = late_rate
    payment.amount_usd = _payment_value_usd(request, int(payment.amount), late_rate=late_rate)


def payment_uncount(
    *, chain: str, txid: str, position: str, reason: str, now: datetime | None = None, block_hash: str | None = None
) -> Payment | None:
    """A payment left the chain (orphaned block, replaced or dropped transaction):
    it no longer counts. Money already applied or credited is flagged for staff.
    `block_hash`: only while it is still recorded in that block (a run that
    overlapped may have moved it to the new branch meanwhile)."""
    now = now or timezone.now()
    found = Payment.objects.filter(chain=chain, txid=txid, position=position).first()
    if found is None or found.status == PaymentStatus.REMOVED:
        return found
    with transaction.atomic():
        invoice = invoice_lock(invoice_id=found.invoice_id)
        payment = Payment.objects.get(pk=found.pk)
        if payment.status == PaymentStatus.REMOVED or (block_hash is not None and payment.block_hash != block_hash):
            return payment
        payment.status = PaymentStatus.REMOVED
        payment.removed_at = now
        payment.removal_reason = reason[:200]
        payment.confirmations = 0
        payment.save()
        if payment.disposition != PaymentDisposition.OPEN:
            _before_staff(
                invoice=invoice,
                payment=payment,
                action=AuditAction.PAYMENT_UNCOUNTED_AFTER_USE,
                reason=reason,
                changes={"disposition": payment.disposition, "invoice": invoice.number},
            )
            log.error(
                "payment %s was %s and is now un-counted (%s): staff must look at %s",
                payment,
                payment.disposition,
                reason,
                invoice.number,
            )
        if payment.disposition == PaymentDisposition.OPEN:
            _value_again_after_uncount(invoice=invoice, now=now)
        invoice_advance(invoice=invoice, now=now)
        return payment


def _value_again_after_uncount(*, invoice: Invoice, now: datetime) -> None:
    """A payment valued beyond what its live quote lacked (part or all at the
    market's rate) when the one it replaces still counted: a fee-bumped
    replacement, recorded before the original is un-counted (watchers record
    what is new first). With the original gone, its quote lacks more again,
    and the replacement counts at the rate it would have had: the higher."""
    valued_late = invoice.payments.filter(
        disposition=PaymentDisposition.OPEN, late_rate_usd__isnull=False, source="watcher"
    ).exclude(status=PaymentStatus.REMOVED)
    for other in valued_late.select_related("request"):
        request = other.request
        if not _quote_live(request=request, invoice=invoice, now=now):
            continue  # a closed quote is no option: what reached it keeps the value it was given
        rate = _late_rate(request=request, invoice=invoice, amount=int(other.amount), now=now, exclude=other.pk)
        if (request.rate_usd if rate is None else rate) <= (other.late_rate_usd or request.rate_usd):
            continue
        log.info("payment %s valued again once the one it replaced left: %s USD a coin", other, rate or "locked")
        other.late_rate_usd = rate
        other.amount_usd = _payment_value_usd(request, int(other.amount), late_rate=rate)
        other.save(update_fields=["late_rate_usd", "amount_usd"])


def payment_flag(*, chain: str, txid: str, position: str, reason: str, now: datetime | None = None) -> bool:
    """Flag a payment's invoice for staff, once per payment (a Monero transfer
    locked by a non-zero unlock_time, ...): the payment's own `flagged_at`
    says it was. True when it was flagged now."""
    now = now or timezone.now()
    payment = Payment.objects.filter(chain=chain, txid=txid, position=position, flagged_at__isnull=True).first()
    if payment is None:
        return False
    with transaction.atomic():
        invoice = invoice_lock(invoice_id=payment.invoice_id)
        return _flag(payment=payment, invoice=invoice, reason=reason, now=now)


def _before_staff(
    *, invoice: Invoice, payment: Payment, action: AuditAction, reason: str, changes: dict[str, Any]
) -> None:
    """The locked `invoice` put before staff (`needs_attention`) for `payment`, audited as `action`."""
    invoice.needs_attention = True
    invoice.save(update_fields=["needs_attention"])
    audit_record(actor=None, action=action, obj=payment, reason=reason, changes=changes)


def _flag(*, payment: Payment, invoice: Invoice, reason: str, now: datetime) -> bool:
    """Flag `payment` on its locked `invoice` for staff (payment_flag); False when
    it was flagged already."""
    flagged = Payment.objects.filter(pk=payment.pk, flagged_at__isnull=True).update(
        flagged_at=now, flag_reason=reason[:200]
    )
    if not flagged:  # flagged meanwhile by another pass
        return False
    payment.flagged_at, payment.flag_reason = now, reason[:200]
    _before_staff(
        invoice=invoice,
        payment=payment,
        action=AuditAction.PAYMENT_FLAGGED,
        reason=reason,
        changes={"invoice": invoice.number},
    )
    log.warning("payment %s flagged for staff on %s: %s", payment, invoice.number, reason)
    return True


def invoice_advance(*, invoice: Invoice, now: datetime) -> None:
    """Run the state machine on a locked invoice and carry out its decision."""
    payments = {p.pk: p for p in invoice.payments.select_related("request")}
    total = Fraction(invoice.total_usd)
    facts = [
        machine.PaymentFacts(
            id=p.pk,
            fraction=payment_share(payment=p, request=p.request, total=total),
            confirmed=p.status == PaymentStatus.CONFIRMED,
            counted=p.counted,
            seen_at=p.first_seen_at,
            disposition=p.disposition,
        )
        for p in payments.values()
    ]
    decision = machine.invoice_evaluate(
        machine.InvoiceFacts(invoice.status, invoice.exception, invoice.expires_at, invoice.monitoring_until),
        facts,
        now=now,
        tolerance=tolerance(),
        over_min=machine.over_min_for(total_usd=total),
    )
    if decision.apply:
        Payment.objects.filter(pk__in=decision.apply).update(disposition=PaymentDisposition.APPLIED)
    markets: dict[tuple[str, datetime], Any] = {}
    for pid in decision.credit:
        payment = payments[pid]
        if decision.status != InvoiceStatus.SETTLED and invoice.exception != InvoiceException.MARKED:
            # Expired short, or voided by the system (a lapsed renewal whose usage moved on): it
            # bought nothing. An invoice staff marked invalid keeps its payments' rates.
            payment_value_as_buying_nothing(payment=payment, markets=markets)
        if payment.amount_usd == 0:
            # Worth less than a cent at its rate: no ledger row can hold it.
            log.info("payment %s on %s is worth 0.00 USD: closed without credit", payment, invoice.number)
            Payment.objects.filter(pk=pid).update(disposition=PaymentDisposition.CREDITED)
            continue
        credit_post(
            account_id=invoice.account_id,
            kind=CreditKind.LATE_PAYMENT if decision.late_credit else CreditKind.PAYMENT_CREDIT,
            amount_usd=payment.amount_usd,
            invoice=invoice,
            payment=payment,
            reason=f"{payment.currency} {payment.txid} on {invoice.number} ({invoice.status})",
        )
        Payment.objects.filter(pk=pid).update(disposition=PaymentDisposition.CREDITED)
    if decision.overpaid > 0:
        # One figure per invoice, its share of the invoice's total: rounded half up
        # (the amount due was rounded up to a base unit, so the share is a hair short).
        excess = cents(
            Decimal(decision.overpaid.numerator) / Decimal(decision.overpaid.denominator) * invoice.total_usd
        )
        if excess > 0:
            credit_post(
                account_id=invoice.account_id,
                kind=CreditKind.OVERPAYMENT,
                amount_usd=excess,
                invoice=invoice,
                reason=f"Paid over {invoice.number}",
            )
    invoice_transition(invoice=invoice, status=decision.status, exception=decision.exception, now=now, via="payment")


def invoices_advance_due(*, now: datetime | None = None) -> int:
    """The periodic job: expire invoices past their rate lock, invalidate
    unconfirmed ones past their window, credit what closed windows hold.
    Idempotent: a second run finds nothing to do."""
    now = now or timezone.now()
    due = (
        Invoice.objects.filter(
            Q(status=InvoiceStatus.NEW, expires_at__lte=now)
            | Q(status=InvoiceStatus.PROCESSING, monitoring_until__lte=now)
            | Q(
                status=InvoiceStatus.EXPIRED,
                monitoring_until__lte=now,
                payments__status=PaymentStatus.CONFIRMED,
                payments__disposition=PaymentDisposition.OPEN,
            )
            | Q(
                status__in=[InvoiceStatus.SETTLED, InvoiceStatus.INVALID],
                payments__status=PaymentStatus.CONFIRMED,
                payments__disposition=PaymentDisposition.OPEN,
            )
        )
        .values_list("pk", flat=True)
        .distinct()
    )
    blind = blind_currencies(now=now)
    changed = 0
    for invoice_id in list(due):
        try:
            with transaction.atomic(durable=True):  # one invoice a transaction, each committed on its own
                invoice = invoice_lock(invoice_id=invoice_id)
                if wait_for_watcher(invoice=invoice, blind=blind, now=now):
                    continue
                before = (invoice.status, invoice.exception)
                invoice_advance(invoice=invoice, now=now)
                changed += (invoice.status, invoice.exception) != before
        except Exception:
            # One invoice that fails (bad data, a bug) is tried again at the next run and
            # holds back none after it: they would never expire, settle late or credit.
            log.exception("invoice %s could not be advanced; it is tried again at the next run", invoice_id)
    return changed


def blind_currencies(*, now: datetime) -> set[str]:
    from billing.selectors import chain_health

    health: dict[str, bool] = {}
    for _code, cur in CURRENCIES.items():
        if cur.chain not in health:
            health[cur.chain] = chain_health(chain=cur.chain, now=now).ok
    return {code for code, cur in CURRENCIES.items() if not health[cur.chain]}


def wait_for_watcher(*, invoice: Invoice, blind: set[str], now: datetime) -> bool:
    """An invoice is not expired while the watcher of its currency is blind: a
    payment may be on chain unseen. The monitoring window bounds the wait."""
    if invoice.status != InvoiceStatus.NEW or now >= invoice.monitoring_until:
        return False
    request = invoice.active_request
    return request is not None and request.currency in blind


def stray_transfer_record(
    *,
    chain: str,
    txid: str,
    position: str,
    kind: str,
    address: str,
    amount: int,
    asset: str,
    currency: str = "",
    paid_currency: str = "",
    block_height: int | None = None,
    block_hash: str = "",
    note: str = "",
    now: datetime | None = None,
) -> tuple[StrayTransfer, bool]:
    """Record, once per (chain, txid, position), a transfer to a watched
    destination that nothing may credit (a token of another contract, one
    currency sent to another's address), flagged for staff. Seen again (a
    rescan, a block back after a reorg), it is updated, never duplicated.
    Returns the row and whether it is new."""
    now = now or timezone.now()
    request = PaymentRequest.objects.filter(match_key=address).order_by("-created_at", "-id").first()
    with transaction.atomic():
        stray = StrayTransfer.objects.select_for_update().filter(chain=chain, txid=txid, position=position).first()
        if stray is not None:
            stray.block_height, stray.block_hash, stray.removed_at = block_height, block_hash, None
            stray.save(update_fields=["block_height", "block_hash", "removed_at"])
            return stray, False
        stray = StrayTransfer.objects.create(
            chain=chain,
            txid=txid,
            position=position,
            kind=kind,
            address=address,
            asset=asset,
            currency=currency,
            paid_currency=paid_currency,
            amount=amount,
            request=request,
            invoice_id=request.invoice_id if request is not None else None,
            block_height=block_height,
            block_hash=block_hash,
            note=note[:300],
            first_seen_at=now,
        )
        audit_record(
            actor=None,
            action=AuditAction.STRAY_TRANSFER_RECORD,
            obj=stray,
            reason=note,
            changes={"txid": txid, "position": position, "asset": asset, "amount": str(amount)},
        )
    log.warning("%s %s %s: %s, recorded for staff", chain, txid, position, note or kind)
    return stray, True
