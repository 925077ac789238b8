"""Billing writes: invoices and their payment requests, payments through the
state machine (billing.machine), and the account credit ledger.

Every top-level function runs in one transaction, locks the invoice row it
changes (so concurrent observations of one payment serialize and count once),
writes its audit row in the same transaction and sends signals on commit.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from billing import hooks, machine, signals
from billing.currencies import CURRENCIES, currency_get
from billing.models import (
    CreditBalance,
    CreditEntry,
    CreditKind,
    DerivationCounter,
    Invoice,
    InvoiceCounter,
    InvoiceException,
    InvoiceLine,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentRequest,
    PaymentStatus,
    StrayTransfer,
)
from billing.selectors import invoice_has_payments
from core.audit import AuditAction, audit_record
from core.db import locked_or_404, written_keep
from core.errors import Conflict, DomainError, NotFound
from core.money import CENT, ZERO, ceil_int, cents

log = logging.getLogger(__name__)

# Who the audit trail names when no account acts: the system's own jobs, and
# whoever holds an invoice's checkout link (the payer need not log in).
SYSTEM_ACTOR = "system"
CHECKOUT_ACTOR = "checkout page"


# --- Inputs -------------------------------------------------------------------


@dataclass(frozen=True)
class LineSpec:
    description: str
    quantity: Decimal
    unit_usd: Decimal
    amount_usd: Decimal  # after discount
    discount_usd: Decimal = ZERO
    code: str = ""


@dataclass(frozen=True)
class Observation:
    """A transfer a watcher (or staff) saw. `confirmations` is 0 in the mempool.

    A payment is identified by (chain, txid, position); `position` defaults to
    the output index (UTXO chains). `final` overrides the confirmation count
    for chains settled by a finality tag: True settles, False does not,
    whatever `confirmations` says; None applies CONFIRMATIONS_<currency>.
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

    @property
    def key(self) -> str:
        return self.position or str(self.output_index)


# --- Settings helpers -----------------------------------------------------------


def confirmations_required(*, currency: str) -> int:
    return int(settings.CONFIRMATIONS[currency])


def _tolerance() -> Fraction:
    return Fraction(str(settings.INVOICE_UNDERPAYMENT_TOLERANCE_PCT)) / 100


def _expiry_window() -> timedelta:
    return timedelta(minutes=settings.INVOICE_EXPIRY_MINUTES)


def _monitoring_window() -> timedelta:
    return timedelta(hours=settings.INVOICE_MONITORING_HOURS)


# --- Destinations and quotes -----------------------------------------------------


def _currency_enabled(currency: str) -> str:
    from billing.chains.config import currency_enabled_code

    return currency_enabled_code(currency)


def _counter_advance(model, key_field: str, key: str, value_field: str, default: int) -> int:
    """Advance a counter row by one in a single statement (UPDATE ... RETURNING)
    and return the value before; the row is created first when it is missing.
    The row stays locked to the end of the caller's transaction: take it last."""
    table = connection.ops.quote_name(model._meta.db_table)
    column = connection.ops.quote_name(value_field)
    sql = f"UPDATE {table} SET {column} = {column} + 1 WHERE {connection.ops.quote_name(key_field)} = %s RETURNING {column}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [key])
        row = cursor.fetchone()
        if row is None:
            _counter_create(model, key_field, key, value_field, default)
            cursor.execute(sql, [key])
            row = cursor.fetchone()
    return int(row[0]) - 1


def _counter_create(model, key_field: str, key: str, value_field: str, default: int) -> None:
    """A counter's row, made the first time it is asked for (or by a concurrent caller)."""
    try:
        with transaction.atomic():
            model.objects.get_or_create(**{key_field: key}, defaults={value_field: default})
    except IntegrityError:
        pass  # created concurrently


def _index_take(*, keyset: str, first: int) -> int:
    """The next derivation index of a watch-only key, never handed out twice."""
    return _counter_advance(DerivationCounter, "keyset", keyset, "next_index", first)


def amount_due_for(*, total_usd: Decimal, currency: str, rate_usd: Decimal) -> int:
    """USD -> base units, rounded up so the company is never short."""
    return ceil_int(total_usd * currency_get(currency).scale / rate_usd)


def _request_create(
    *,
    invoice: Invoice,
    currency: str,
    now: datetime,
    fresh: bool = False,
    numbered: bool = False,
    rate_lock: timedelta | None = None,
    amount_usd: Decimal | None = None,
    expires_cap: datetime | None = None,
) -> PaymentRequest:
    """A payment request for `amount_usd` (default: the invoice's total) at the
    current rate, locked for `rate_lock` (default INVOICE_EXPIRY_MINUTES) but
    never past `expires_cap`; `fresh`: the invoice has none yet (no earlier
    request to retire). `numbered`: the invoice is named here too, once the
    destination is derived (the payment URI carries the number): the number
    and the request are written by one statement, so the number's lock is
    held for it and the commit only."""
    from billing.chains.config import (
        derivation_first_index,
        derivation_keyset,
        destination_derive,
        network_name,
        payment_uri,
    )
    from billing.rates import rate_current

    code = _currency_enabled(currency)
    rate = rate_current(currency=code)
    keyset = derivation_keyset(currency=code)
    amount_usd = invoice.total_usd if amount_usd is None else amount_usd
    amount = amount_due_for(total_usd=amount_usd, currency=code, rate_usd=rate.usd)
    # The key's counter is locked from here to the commit: everything else first.
    index = _index_take(keyset=keyset, first=derivation_first_index(currency=code))
    destination = destination_derive(currency=code, index=index)
    expires_at = now + (rate_lock or _expiry_window())
    if expires_cap is not None:
        expires_at = min(expires_at, expires_cap)
    # A new quote is locked for its own window; the invoice follows it (callers
    # save it, or _number_write writes it with the number).
    invoice.expires_at, invoice.monitoring_until = expires_at, expires_at + _monitoring_window()
    if not fresh:
        invoice.requests.filter(is_active=True).update(is_active=False)

    def request(number: str) -> PaymentRequest:
        return PaymentRequest(
            invoice=invoice,
            currency=code,
            network=network_name(currency=code),
            address=destination.address,
            match_key=destination.match_key,
            reference=destination.reference,
            keyset=keyset,
            derivation_index=index,
            amount_due=amount,
            amount_usd=amount_usd,
            # As the column keeps it (an answer rendered from this object matches a later read).
            rate_usd=rate.usd.quantize(
                Decimal(1).scaleb(-PaymentRequest._meta.get_field("rate_usd").decimal_places), rounding=ROUND_HALF_UP
            ),
            rate_source=rate.source,
            rate_at=rate.at,
            payment_uri=payment_uri(
                destination=destination,
                amount=amount,
                label=settings.PAYMENT_LABEL,
                message=f"Invoice {number}",
            ),
            created_at=now,
            expires_at=expires_at,
        )

    if numbered:
        return _number_write(invoice=invoice, now=now, request=request)
    made = request(invoice.number)
    made.save(force_insert=True)
    return made


def _number_write(*, invoice: Invoice, now: datetime, request=None) -> PaymentRequest | None:
    """Give the invoice the next number of the year and write it with its
    expiry and monitoring window as they are now; with `request` (the payment
    request, made for a number), insert that too, its payment URI naming the
    number. The counter's lock, on which every invoice of the year queues
    until its transaction commits, is taken by the first of these three
    statements and held for the other two and the commit."""
    invoice.number = _number_take(now=now)
    Invoice.objects.filter(pk=invoice.pk).update(
        number=invoice.number, expires_at=invoice.expires_at, monitoring_until=invoice.monitoring_until
    )
    if request is None:
        return None
    made = request(invoice.number)
    made.save(force_insert=True)
    return made


def _number_take(*, now: datetime) -> str:
    """The next invoice number of the year. The counter row stays locked until
    the caller commits (a rolled-back invoice gives its number back, so numbers
    have no gaps): every invoice of the year queues on it, so it is taken in
    one statement as late as the transaction allows (only what carries the
    number, the invoice and its payment request, is written after it)."""
    series = f"{settings.INVOICE_NUMBER_PREFIX}-{now.year}"
    last = _counter_advance(InvoiceCounter, "series", series, "last", 0) + 1
    return f"{series}-{last:06d}"


@transaction.atomic
def invoice_create(
    *,
    account: Any,
    subject: str,
    description: str,
    lines: Sequence[LineSpec],
    currency: str | None,
    metadata: dict[str, Any] | None = None,
    payable_until: datetime | None = None,
    rate_lock: timedelta | None = None,
    now: datetime | None = None,
) -> Invoice:
    """Issue an invoice. With a currency, its first payment request is created at
    the current rate, locked for `rate_lock` (default INVOICE_EXPIRY_MINUTES),
    until the invoice expires; without one (a renewal whose currency is not
    available, chosen by the customer when paying, or paid from credit) it stays
    open until `payable_until` (default: the usual expiry)."""
    invoice = invoice_draft(
        account=account,
        subject=subject,
        description=description,
        lines=lines,
        currency=currency,
        metadata=metadata,
        payable_until=payable_until,
        rate_lock=rate_lock,
        now=now,
    )
    return invoice_issue(invoice=invoice)


def invoice_draft(
    *,
    account: Any,
    subject: str,
    description: str,
    lines: Sequence[LineSpec],
    currency: str | None,
    metadata: dict[str, Any] | None = None,
    payable_until: datetime | None = None,
    rate_lock: timedelta | None = None,
    now: datetime | None = None,
) -> Invoice:
    """The first half of `invoice_create`, for a caller that has more to write
    in its transaction: the invoice and its lines, under a placeholder number.
    `invoice_issue` must follow in the same transaction, as its last write (it
    takes the locked counters). Must run inside the caller's transaction."""
    now = now or timezone.now()
    expires_at = now + _expiry_window()
    if currency is None and payable_until is not None:
        expires_at = max(payable_until, expires_at)
    if not lines:
        raise ValueError("an invoice needs lines")
    total = sum((ln.amount_usd for ln in lines), ZERO)
    if total <= 0:
        raise DomainError("invalid", "An invoice must be for a positive amount.")
    if currency is not None:
        currency = _currency_enabled(currency)
    invoice = Invoice(
        # A unique placeholder until invoice_issue takes the number.
        number=f"~{uuid.uuid4().hex}",
        account=account,
        subject=subject,
        description=description[:200],
        total_usd=cents(total),
        created_at=now,
        expires_at=expires_at,
        monitoring_until=expires_at + _monitoring_window(),
        metadata=metadata or {},
    )
    invoice.save(force_insert=True)
    invoice_lines = InvoiceLine.objects.bulk_create(
        [
            InvoiceLine(
                invoice=invoice,
                position=i,
                code=ln.code,
                description=ln.description[:200],
                quantity=ln.quantity,
                unit_usd=ln.unit_usd,
                discount_usd=ln.discount_usd,
                amount_usd=ln.amount_usd,
            )
            for i, ln in enumerate(lines, start=1)
        ],
    )
    invoice._draft = (currency, now, invoice_lines, rate_lock)  # what invoice_issue needs
    return invoice


def invoice_issue(*, invoice: Invoice, attach: bool = False) -> Invoice:
    """Give a drafted invoice its number and, with a currency, its payment
    request (a fresh deposit destination at the current rate): the two counters
    every invoice queues on are taken here, last, and held only to the commit.
    `attach`: the invoice comes back with its lines, requests and payments
    attached as if prefetched, so rendering it right away reads nothing."""
    currency, now, invoice_lines, rate_lock = invoice._draft
    del invoice._draft
    requests = []
    if currency is None:
        _number_write(invoice=invoice, now=now)
    else:
        requests.append(
            _request_create(invoice=invoice, currency=currency, now=now, fresh=True, numbered=True, rate_lock=rate_lock)
        )
    _on_commit_send(signals.invoice_created, invoice)
    if attach:
        written_keep(invoice, lines=invoice_lines, requests=requests, payments=[], credit_entries=[])
    return invoice


def _invoice_lock(*, invoice_id: int, account: Any = None) -> Invoice:
    """The invoice, locked; a customer's (`account`) own invoices only."""
    invoices = Invoice.objects.all() if account is None else Invoice.objects.filter(account=account)
    return locked_or_404(invoices, pk=invoice_id, message="No such invoice.")


@transaction.atomic
def _quoted(
    *,
    invoice: Invoice,
    request: PaymentRequest,
    was: PaymentRequest | None,
    action: AuditAction,
    actor: Any,
    reason: str,
) -> None:
    """The audit row of a new quote (a switch or a re-quote) and, on commit,
    `invoice_quoted` (the order follows its invoice's currency)."""
    audit_record(
        actor=actor,
        action=action,
        obj=invoice,
        reason=reason,
        changes={
            "currency": [was.currency if was else None, request.currency],
            "amount": int(request.amount_due),
            "amount_usd": request.amount_usd,
            "rate_usd": request.rate_usd,
            "expires_at": invoice.expires_at,
        },
    )
    _on_commit_send(signals.invoice_quoted, invoice, currency=request.currency)


@transaction.atomic
def invoice_switch_currency(
    *,
    invoice_id: int,
    account: Any,
    currency: str,
    actor: Any = None,
    reason: str = "",
    now: datetime | None = None,
) -> Invoice:
    """A new payment request in another currency at a fresh rate, for what is
    left to pay (all of it, or the rest after a partial payment, which keeps
    counting); the old destination stays watched, so nothing sent there is lost.
    The new quote ends when the current one would have: a switch never
    extends how long the invoice (and what it reserves) is held. `actor`: who
    asked, for the audit trail (default: `account`)."""
    now = now or timezone.now()
    invoice = _invoice_lock(invoice_id=invoice_id, account=account)
    if invoice.status != InvoiceStatus.NEW or now >= invoice.expires_at:
        raise Conflict(
            "invoice_not_open", "Only an open, unpaid invoice can change currency.", details={"status": invoice.status}
        )
    code = _currency_enabled(currency)
    active = invoice.active_request
    if active is not None and active.currency == code:
        # A "switch" to the same currency would only hand out a new address and
        # a new rate lock: a way to hold what the invoice reserves for ever.
        raise Conflict("currency_unchanged", f"This invoice is already quoted in {code}.", details={"currency": code})
    remaining_usd = _remaining_usd(invoice=invoice)
    _quotes_left(invoice=invoice)
    request = _request_create(
        invoice=invoice, currency=code, now=now, amount_usd=remaining_usd, expires_cap=invoice.expires_at
    )
    invoice.save(update_fields=["expires_at", "monitoring_until"])
    _quoted(
        invoice=invoice,
        request=request,
        was=active,
        action=AuditAction.INVOICE_SWITCH_CURRENCY,
        actor=account if actor is None else actor,
        reason=reason,
    )
    return invoice


def _remaining_usd(*, invoice: Invoice) -> Decimal:
    """What a fresh quote of a (locked) invoice asks for: the USD of the part
    its counted payments do not pay yet, rounded up to the cent. Refused when
    they pay it all already (it settles as they confirm)."""
    from billing.selectors import invoice_paid_fraction

    remaining = 1 - invoice_paid_fraction(invoice=invoice)
    if remaining <= _tolerance():
        raise Conflict(
            "invoice_has_payments",
            "The payments sent to this invoice pay it in full; it settles as they confirm.",
            details={"status": invoice.status},
        )
    usd = Decimal(remaining.numerator) * invoice.total_usd / Decimal(remaining.denominator)
    return min(invoice.total_usd, usd.quantize(CENT, rounding=ROUND_CEILING))


def _quotes_left(*, invoice: Invoice) -> None:
    """Each quote (the first, a currency switch, a re-quote) holds what the
    invoice pays for one more rate lock: INVOICE_MAX_QUOTES bounds the hold."""
    quotes = invoice.requests.count()
    if quotes >= settings.INVOICE_MAX_QUOTES:
        raise Conflict(
            "quote_limit_reached",
            f"This invoice has had its {quotes} quotes; place a new order (or ask for a new renewal).",
            details={"quotes": quotes, "max_quotes": settings.INVOICE_MAX_QUOTES},
        )


@transaction.atomic
def invoice_requote(
    *,
    invoice_id: int,
    account: Any,
    currency: str | None = None,
    actor: Any = None,
    reason: str = "",
    now: datetime | None = None,
) -> Invoice:
    """Re-open an expired invoice at a fresh rate, if what it pays for still
    holds (its owner's re-quote hook decides, e.g. re-reserving slots). A partly
    paid invoice is quoted for the rest: what arrived keeps counting toward it
    (and becomes credit only if the invoice closes unpaid).

    A new invoice whose rate lock has ended, but which the periodic job has not
    expired yet, is re-quoted as well (it never leaves `new`), unless the
    watcher of its currency is blind: a payment may then be on its way.
    `actor`: who asked, for the audit trail (default: `account`)."""
    now = now or timezone.now()
    invoice = _invoice_lock(invoice_id=invoice_id, account=account)
    lapsed = invoice.status == InvoiceStatus.NEW and now >= invoice.expires_at
    if invoice.status != InvoiceStatus.EXPIRED and not lapsed:
        raise Conflict(
            "invoice_not_expired", "Only an expired invoice can be re-quoted.", details={"status": invoice.status}
        )
    if lapsed and _wait_for_watcher(invoice=invoice, blind=_blind_currencies(now=now), now=now):
        raise Conflict(
            "payment_check_pending",
            "The chain watcher of this invoice's currency is catching up, so a payment may already be on its "
            "way; try again in a few minutes.",
            details={"currency": invoice.active_request.currency},
        )
    previous = invoice.active_request
    code = currency or (previous.currency if previous else None)
    if code is None:
        raise DomainError("invalid", "Choose a currency.", details={"field": "currency"})
    remaining_usd = _remaining_usd(invoice=invoice)
    _quotes_left(invoice=invoice)
    hooks.requote_hook_run(invoice=invoice)
    request = _request_create(invoice=invoice, currency=code, now=now, amount_usd=remaining_usd)
    invoice.save(update_fields=["expires_at", "monitoring_until"])
    _invoice_transition(invoice=invoice, status=InvoiceStatus.NEW, exception=InvoiceException.NONE, now=now, via="")
    _invoice_advance(invoice=invoice, now=now)  # what arrived counts again: paid_partial
    _quoted(
        invoice=invoice,
        request=request,
        was=previous,
        action=AuditAction.INVOICE_REQUOTE,
        actor=account if actor is None else actor,
        reason=reason,
    )
    return invoice


# --- Payments -----------------------------------------------------------------


def _payment_value_usd(request: PaymentRequest, amount: int) -> Decimal:
    return cents(Decimal(amount) * request.rate_usd / currency_get(request.currency).scale)


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
    request = PaymentRequest.objects.filter(currency=obs.currency, match_key=obs.match_key).first()
    if request is None:
        log.warning("payment to unknown destination %s %s ignored", obs.currency, obs.match_key)
        return None
    if obs.amount <= 0:
        return None
    chain = CURRENCIES[obs.currency].chain
    with transaction.atomic():
        invoice = _invoice_lock(invoice_id=request.invoice_id)
        if obs.final is not None:
            confirmed = obs.final and obs.confirmations >= 1
        else:
            confirmed = obs.confirmations >= confirmations_required(currency=obs.currency)
        payment = Payment.objects.filter(chain=chain, txid=obs.txid, position=obs.key).first()
        if payment is None:
            payment = Payment.objects.create(
                request=request,
                invoice=invoice,
                chain=chain,
                currency=obs.currency,
                txid=obs.txid,
                output_index=obs.output_index,
                position=obs.key,
                amount=obs.amount,
                amount_usd=_payment_value_usd(request, obs.amount),
                confirmations=obs.confirmations,
                block_height=obs.block_height,
                block_hash=obs.block_hash or "",
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
            transaction.on_commit(
                lambda: signals.payment_received.send(
                    sender=Payment, invoice_id=invoice.pk, payment_id=payment.pk, subject=invoice.subject
                )
            )
        else:
            if int(payment.amount) != obs.amount or payment.request_id != request.pk:
                log.error("payment %s seen again with another amount or destination; kept the first", payment)
            payment.confirmations = obs.confirmations
            payment.block_height = obs.block_height
            payment.block_hash = obs.block_hash or ""
            payment.status = PaymentStatus.CONFIRMED if confirmed else PaymentStatus.PENDING
            if confirmed and payment.confirmed_at is None:
                payment.confirmed_at = now
            if payment.removed_at is not None:
                payment.removed_at, payment.removal_reason = None, ""
            payment.save()
        _invoice_advance(invoice=invoice, now=now)
        return payment


def payment_uncount(
    *, chain: str, txid: str, position: str, reason: str, now: datetime | None = None
) -> Payment | None:
    """A payment left the chain (orphaned block, replaced or dropped transaction):
    it no longer counts. Money already applied or credited is flagged for staff."""
    now = now or timezone.now()
    found = Payment.objects.filter(chain=chain, txid=txid, position=position).first()
    if found is None or found.status == PaymentStatus.REMOVED:
        return found
    with transaction.atomic():
        invoice = _invoice_lock(invoice_id=found.invoice_id)
        payment = Payment.objects.get(pk=found.pk)
        if payment.status == PaymentStatus.REMOVED:
            return payment
        payment.status = PaymentStatus.REMOVED
        payment.removed_at = now
        payment.removal_reason = reason[:200]
        payment.confirmations = 0
        payment.save()
        if payment.disposition != PaymentDisposition.OPEN:
            invoice.needs_attention = True
            invoice.save(update_fields=["needs_attention"])
            audit_record(
                actor=None,
                action=AuditAction.PAYMENT_UNCOUNTED_AFTER_USE,
                obj=payment,
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
        _invoice_advance(invoice=invoice, now=now)
        return payment


def payment_flag(*, chain: str, txid: str, position: str, reason: str, now: datetime | None = None) -> bool:
    """Flag a payment's invoice for staff, once per payment (a Monero transfer
    locked by a non-zero unlock_time, ...): the payment's own `flagged_at`
    says it was. True when it was flagged now."""
    now = now or timezone.now()
    payment = Payment.objects.filter(chain=chain, txid=txid, position=position, flagged_at__isnull=True).first()
    if payment is None:
        return False
    with transaction.atomic():
        invoice = _invoice_lock(invoice_id=payment.invoice_id)
        flagged = Payment.objects.filter(pk=payment.pk, flagged_at__isnull=True).update(
            flagged_at=now, flag_reason=reason[:200]
        )
        if not flagged:  # flagged meanwhile by another pass
            return False
        invoice.needs_attention = True
        invoice.save(update_fields=["needs_attention"])
        audit_record(
            actor=None,
            action=AuditAction.PAYMENT_FLAGGED,
            obj=payment,
            reason=reason,
            changes={"invoice": invoice.number},
        )
    log.warning("payment %s flagged for staff on %s: %s", payment, invoice.number, reason)
    return True


def _invoice_advance(*, invoice: Invoice, now: datetime) -> None:
    """Run the state machine on a locked invoice and carry out its decision."""
    payments = {p.pk: p for p in invoice.payments.select_related("request")}
    total = Fraction(invoice.total_usd)
    facts = [
        machine.PaymentFacts(
            id=p.pk,
            fraction=machine.payment_fraction(
                amount=p.amount, amount_due=p.request.amount_due, request_usd=p.request.amount_usd, total_usd=total
            ),
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
        tolerance=_tolerance(),
        over_min=machine.over_min_for(total_usd=total),
    )
    if decision.apply:
        Payment.objects.filter(pk__in=decision.apply).update(disposition=PaymentDisposition.APPLIED)
    for pid in decision.credit:
        payment = payments[pid]
        if payment.amount_usd == 0:
            # Worth less than half a cent at its rate: no ledger row can hold it.
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
    _invoice_transition(invoice=invoice, status=decision.status, exception=decision.exception, now=now, via="payment")


def _invoice_transition(*, invoice: Invoice, status: str, exception: str, now: datetime, via: str) -> None:
    old = invoice.status
    if (status, exception) == (old, invoice.exception):
        return
    invoice.status, invoice.exception = status, exception
    fields = ["status", "exception"]
    if status == InvoiceStatus.SETTLED and old != InvoiceStatus.SETTLED:
        invoice.settled_at, invoice.settled_via = now, via
        fields += ["settled_at", "settled_via"]
    invoice.save(update_fields=fields)
    if status != old:
        log.info("invoice %s: %s -> %s (%s)", invoice.number, old, status, exception)
        signal = signals.BY_STATUS.get(status)
        if signal is not None:
            _on_commit_send(signal, invoice, late=exception == InvoiceException.PAID_LATE)


def _on_commit_send(signal, invoice: Invoice, **extra: Any) -> None:
    invoice_id, subject = invoice.pk, invoice.subject
    transaction.on_commit(lambda: signal.send(sender=Invoice, invoice_id=invoice_id, subject=subject, **extra))


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
    blind = _blind_currencies(now=now)
    changed = 0
    for invoice_id in list(due):
        with transaction.atomic():
            invoice = _invoice_lock(invoice_id=invoice_id)
            if _wait_for_watcher(invoice=invoice, blind=blind, now=now):
                continue
            before = (invoice.status, invoice.exception)
            _invoice_advance(invoice=invoice, now=now)
            changed += (invoice.status, invoice.exception) != before
    return changed


def _blind_currencies(*, now: datetime) -> set[str]:
    from billing.selectors import chain_health

    health: dict[str, bool] = {}
    for _code, cur in CURRENCIES.items():
        if cur.chain not in health:
            health[cur.chain] = chain_health(chain=cur.chain, now=now).ok
    return {code for code, cur in CURRENCIES.items() if not health[cur.chain]}


def _wait_for_watcher(*, invoice: Invoice, blind: set[str], now: datetime) -> bool:
    """An invoice is not expired while the watcher of its currency is blind: a
    payment may be on chain unseen. The monitoring window bounds the wait."""
    if invoice.status != InvoiceStatus.NEW or now >= invoice.monitoring_until:
        return False
    request = invoice.active_request
    return request is not None and request.currency in blind


# --- Strays: transfers for staff, never credited -------------------------------------


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


@transaction.atomic
def stray_transfer_review(*, stray_id: int, actor: Any, reason: str, now: datetime | None = None) -> StrayTransfer:
    """Staff looked at a stray (refunded it from outside, or decided to keep it): say so, with why."""
    reason = _reason_required(reason)
    stray = StrayTransfer.objects.select_for_update().filter(pk=stray_id).first()
    if stray is None:
        raise NotFound("No such stray transfer.")
    if not stray.needs_review:
        raise Conflict("stray_reviewed", "This transfer was reviewed already.")
    stray.needs_review = False
    stray.reviewed_at = now or timezone.now()
    stray.reviewed_by = actor if getattr(actor, "pk", None) else None
    stray.review_note = reason
    stray.save(update_fields=["needs_review", "reviewed_at", "reviewed_by", "review_note"])
    audit_record(
        actor=actor, action=AuditAction.STRAY_TRANSFER_REVIEW, obj=stray, reason=reason, changes={"needs_review": False}
    )
    return stray


# --- Staff corrections ------------------------------------------------------------


def _reason_required(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("reason_required", "Say why: a reason is required.")
    return reason


def payment_record_manual(
    *,
    invoice_number: str,
    txid: str,
    amount: int,
    confirmations: int,
    reason: str,
    actor: Any,
    output_index: int = 0,
    currency: str | None = None,
    now: datetime | None = None,
) -> Payment:
    """Staff record a payment they verified themselves (the manual adapter). It
    goes through the same state machine as a watcher's sighting."""
    reason = _reason_required(reason)
    invoice = Invoice.objects.filter(number=invoice_number).first()
    if invoice is None:
        raise NotFound(f"No invoice {invoice_number}.")
    requests = invoice.requests.all()
    if currency:
        request = requests.filter(currency=currency.upper()).order_by("-created_at").first()
    else:
        request = invoice.active_request or requests.order_by("-created_at").first()
    if request is None:
        raise DomainError("no_payment_request", f"{invoice_number} has no payment request in that currency.")
    if amount <= 0 or confirmations < 0 or not txid.strip():
        raise DomainError("invalid", "A payment needs a transaction id, a positive amount and confirmations >= 0.")
    from billing.chains.config import manual_position

    payment = payment_observe(
        observation=Observation(
            currency=request.currency,
            txid=txid.strip(),
            output_index=output_index,
            position=manual_position(currency=request.currency, index=output_index),
            match_key=request.match_key,
            amount=amount,
            confirmations=confirmations,
        ),
        source="manual",
        actor=actor,
        reason=reason,
        now=now,
    )
    assert payment is not None
    return payment


@transaction.atomic
def invoice_mark_settled(*, invoice_id: int, actor: Any, reason: str, now: datetime | None = None) -> Invoice:
    reason = _reason_required(reason)
    now = now or timezone.now()
    invoice = _invoice_lock(invoice_id=invoice_id)
    if invoice.status == InvoiceStatus.SETTLED:
        raise Conflict("invoice_settled", "This invoice is settled already.")
    before = invoice.status
    invoice.payments.filter(status=PaymentStatus.CONFIRMED, disposition=PaymentDisposition.OPEN).update(
        disposition=PaymentDisposition.APPLIED
    )
    _invoice_transition(
        invoice=invoice, status=InvoiceStatus.SETTLED, exception=InvoiceException.MARKED, now=now, via="staff"
    )
    audit_record(
        actor=actor,
        action=AuditAction.INVOICE_MARK_SETTLED,
        obj=invoice,
        reason=reason,
        changes={"status": [before, invoice.status]},
    )
    return invoice


@transaction.atomic
def invoice_mark_invalid(*, invoice_id: int, actor: Any, reason: str, now: datetime | None = None) -> Invoice:
    reason = _reason_required(reason)
    now = now or timezone.now()
    invoice = _invoice_lock(invoice_id=invoice_id)
    if invoice.status in (InvoiceStatus.SETTLED, InvoiceStatus.INVALID):
        raise Conflict("invoice_closed", f"This invoice is {invoice.status} already.")
    before = invoice.status
    _invoice_transition(
        invoice=invoice, status=InvoiceStatus.INVALID, exception=InvoiceException.MARKED, now=now, via="staff"
    )
    _invoice_advance(invoice=invoice, now=now)  # confirmed money on it becomes credit
    audit_record(
        actor=actor,
        action=AuditAction.INVOICE_MARK_INVALID,
        obj=invoice,
        reason=reason,
        changes={"status": [before, invoice.status]},
    )
    return invoice


@transaction.atomic
def invoice_void(*, invoice_id: int, reason: str, actor: Any = None, now: datetime | None = None) -> Invoice:
    """Close an open invoice nobody has paid (its order was cancelled). Money
    that still arrives becomes credit (an invalid invoice credits what confirms)."""
    reason = _reason_required(reason)
    now = now or timezone.now()
    invoice = _invoice_lock(invoice_id=invoice_id)
    if invoice.status not in (InvoiceStatus.NEW, InvoiceStatus.EXPIRED):
        raise Conflict("invoice_not_open", f"This invoice is {invoice.status}.", details={"status": invoice.status})
    if invoice_has_payments(invoice=invoice):
        raise Conflict("invoice_has_payments", "This invoice received a payment; it cannot be voided.")
    before = invoice.status
    _invoice_transition(invoice=invoice, status=InvoiceStatus.INVALID, exception=invoice.exception, now=now, via="")
    audit_record(
        actor=actor if actor is not None else SYSTEM_ACTOR,
        action=AuditAction.INVOICE_VOID,
        obj=invoice,
        reason=reason,
        changes={"status": [before, invoice.status]},
    )
    return invoice


@transaction.atomic
def invoice_credit_unfulfilled(*, invoice_id: int, reason: str) -> CreditEntry:
    """A settled invoice whose subject can no longer be delivered (paid too late
    for stock that is gone): its whole value becomes account credit, once."""
    invoice = _invoice_lock(invoice_id=invoice_id)
    if invoice.status != InvoiceStatus.SETTLED:
        raise Conflict("invoice_not_settled", "Only a settled invoice can be credited back.")
    existing = invoice.credit_entries.filter(kind=CreditKind.UNFULFILLED).first()
    if existing is not None:
        return existing
    entry = credit_post(
        account_id=invoice.account_id,
        kind=CreditKind.UNFULFILLED,
        amount_usd=invoice.total_usd,
        invoice=invoice,
        reason=reason,
    )
    audit_record(
        actor=None,
        action=AuditAction.INVOICE_CREDIT_UNFULFILLED,
        obj=invoice,
        reason=reason,
        changes={"amount_usd": str(invoice.total_usd)},
    )
    return entry


# --- Credit ledger ----------------------------------------------------------------


def _balance_lock(account_id: int) -> CreditBalance:
    try:
        with transaction.atomic():
            CreditBalance.objects.get_or_create(account_id=account_id)
    except IntegrityError:
        pass
    return CreditBalance.objects.select_for_update().get(account_id=account_id)


def credit_post(
    *,
    account_id: int,
    kind: str,
    amount_usd: Decimal,
    invoice: Invoice | None = None,
    payment: Payment | None = None,
    actor: Any = None,
    reason: str = "",
    refund: dict[str, Any] | None = None,
) -> CreditEntry:
    """Append one ledger row and move the balance, under the balance row's lock.
    A debit larger than the balance is refused: the balance never goes negative."""
    amount = cents(amount_usd)
    if amount == 0:
        raise DomainError("invalid", "A ledger entry moves a non-zero amount.")
    with transaction.atomic():
        balance = _balance_lock(account_id)
        after = balance.balance_usd + amount
        if after < 0:
            raise Conflict(
                "insufficient_credit",
                f"The account has {balance.balance_usd} USD of credit; {-amount} USD is needed.",
                details={"credit_usd": f"{balance.balance_usd:.2f}", "needed_usd": f"{-amount:.2f}"},
            )
        balance.balance_usd = after
        balance.save(update_fields=["balance_usd", "updated_at"])
        refund = refund or {}
        entry = CreditEntry.objects.create(
            account_id=account_id,
            kind=kind,
            amount_usd=amount,
            balance_after_usd=after,
            invoice=invoice,
            payment=payment,
            created_by=actor if getattr(actor, "pk", None) else None,
            reason=reason,
            refund_currency=refund.get("currency", ""),
            refund_destination=refund.get("destination", ""),
            refund_amount=refund.get("amount"),
            refund_txid=refund.get("txid", ""),
        )
    transaction.on_commit(
        lambda: signals.credit_changed.send(sender=CreditEntry, account_id=account_id, balance_usd=after)
    )
    return entry


@transaction.atomic
def invoice_pay_with_credit(
    *, invoice_id: int, account: Any, actor: Any = None, now: datetime | None = None
) -> Invoice:
    """Settle an open invoice from account credit when the credit covers it all.
    `actor`: who asked, for the audit trail (default: `account`)."""
    now = now or timezone.now()
    invoice = _invoice_lock(invoice_id=invoice_id, account=account)
    if invoice.status != InvoiceStatus.NEW:
        raise Conflict("invoice_not_open", f"This invoice is {invoice.status}.", details={"status": invoice.status})
    if invoice_has_payments(invoice=invoice):
        raise Conflict("invoice_has_payments", "This invoice already received a payment; pay the rest on chain.")
    entry = credit_post(
        account_id=invoice.account_id,
        kind=CreditKind.INVOICE_PAYMENT,
        amount_usd=-invoice.total_usd,
        invoice=invoice,
        reason=f"Paid {invoice.number} from credit",
    )
    _invoice_transition(
        invoice=invoice, status=InvoiceStatus.SETTLED, exception=InvoiceException.NONE, now=now, via="credit"
    )
    audit_record(
        actor=account if actor is None else actor,
        action=AuditAction.INVOICE_PAY_WITH_CREDIT,
        obj=invoice,
        reason=f"Paid {invoice.number} from credit",
        changes={"amount_usd": invoice.total_usd, "credit_after_usd": entry.balance_after_usd},
    )
    return invoice


def account_closing_check(*, account_id: int) -> None:
    """An account is not closed while it holds credit: the money is the
    customer's, and a closed account can neither spend it nor ask for it. Staff
    refund it first (credit_refund_record); then the account may close."""
    balance = CreditBalance.objects.select_for_update().filter(account_id=account_id).first()
    if balance is not None and balance.balance_usd > 0:
        raise Conflict(
            "account_has_credit",
            f"This account holds {balance.balance_usd:.2f} USD of credit. Spend it, or ask staff to refund it, "
            "before closing the account.",
            details={"credit_usd": f"{balance.balance_usd:.2f}"},
        )


@transaction.atomic
def credit_adjust(*, account_id: int, amount_usd: Decimal, reason: str, actor: Any) -> CreditEntry:
    """A staff correction of an account's credit, up or down, with a reason."""
    reason = _reason_required(reason)
    entry = credit_post(
        account_id=account_id, kind=CreditKind.ADJUSTMENT, amount_usd=amount_usd, actor=actor, reason=reason
    )
    audit_record(
        actor=actor,
        action=AuditAction.CREDIT_ADJUST,
        obj=entry,
        reason=reason,
        changes={"amount_usd": str(entry.amount_usd), "balance_after_usd": str(entry.balance_after_usd)},
    )
    return entry


@transaction.atomic
def credit_refund_record(
    *,
    account_id: int,
    amount_usd: Decimal,
    currency: str,
    destination: str,
    amount: int,
    txid: str,
    reason: str,
    actor: Any,
) -> CreditEntry:
    """Staff sent a refund from outside the system (the server holds no spending
    key): record it against the credit, with where it went and its txid."""
    reason = _reason_required(reason)
    if currency.upper() not in CURRENCIES:
        raise DomainError(
            "invalid",
            "Say in which currency the refund was sent.",
            details={"currency": currency, "currencies": list(CURRENCIES)},
        )
    if amount_usd <= 0 or amount <= 0 or not destination or not txid:
        raise DomainError("invalid", "A refund needs a positive amount, a destination and a transaction id.")
    entry = credit_post(
        account_id=account_id,
        kind=CreditKind.REFUND,
        amount_usd=-amount_usd,
        actor=actor,
        reason=reason,
        refund={"currency": currency.upper(), "destination": destination, "amount": amount, "txid": txid},
    )
    audit_record(
        actor=actor,
        action=AuditAction.CREDIT_REFUND,
        obj=entry,
        reason=reason,
        changes={"amount_usd": str(amount_usd), "currency": currency, "txid": txid},
    )
    return entry


# --- Checkout page ------------------------------------------------------------------
# The page at /pay/<token> acts for whoever holds the token (the payer need not
# log in): the same services as the API, found by token, with an audit row.


@transaction.atomic
def checkout_currency_switch(*, token: str, currency: str, now: datetime | None = None) -> Invoice:
    """Pay the invoice a checkout token opens in another currency."""
    from billing.selectors import invoice_by_checkout_token

    found = invoice_by_checkout_token(token=token)
    return invoice_switch_currency(
        invoice_id=found.pk,
        account=found.account_id,
        currency=currency,
        actor=CHECKOUT_ACTOR,
        reason="checkout page",
        now=now,
    )


@transaction.atomic
def checkout_requote(*, token: str, currency: str | None = None, now: datetime | None = None) -> Invoice:
    """A fresh quote for the expired invoice a checkout token opens."""
    from billing.selectors import invoice_by_checkout_token

    found = invoice_by_checkout_token(token=token)
    return invoice_requote(
        invoice_id=found.pk,
        account=found.account_id,
        currency=currency,
        actor=CHECKOUT_ACTOR,
        reason="checkout page",
        now=now,
    )
