"""Invoices: issued with their lines, a number of the year without gaps and a
payment request (a fresh deposit destination at a locked rate); a new quote
in another currency, or after the rate lock ended."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import Model
from django.utils import timezone

from billing import signals
from billing.currencies import currency_get
from billing.models import (
    DerivationCounter,
    Invoice,
    InvoiceCounter,
    InvoiceException,
    InvoiceLine,
    InvoiceStatus,
    PaymentRequest,
)
from billing.payable import PayableRef, UnknownPayable, payable_get
from billing.services.common import (
    currency_enabled,
    expiry_window,
    invoice_lock,
    invoice_transition,
    monitoring_window,
    on_commit_send,
    tolerance,
)
from billing.services.payments import blind_currencies, invoice_advance, wait_for_watcher
from core.audit import AuditAction, audit_record
from core.db import written_keep
from core.errors import Conflict, DomainError
from core.money import CENT, ZERO, ceil_int, cents


@dataclass(frozen=True)
class LineSpec:
    description: str
    quantity: Decimal
    unit_usd: Decimal
    amount_usd: Decimal  # after discount
    discount_usd: Decimal = ZERO
    code: str = ""


def _counter_advance(model: type[Model], key_field: str, key: str, value_field: str, default: int) -> int:
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
    assert row is not None
    return int(row[0]) - 1


def _counter_create(model: type[Model], key_field: str, key: str, value_field: str, default: int) -> None:
    """A counter's row, made the first time it is asked for (or by a concurrent caller)."""
    try:
        with transaction.atomic():
            model._default_manager.get_or_create(**{key_field: key}, defaults={value_field: default})
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

    code = currency_enabled(currency)
    rate = rate_current(currency=code)
    keyset = derivation_keyset(currency=code)
    amount_usd = invoice.total_usd if amount_usd is None else amount_usd
    amount = amount_due_for(total_usd=amount_usd, currency=code, rate_usd=rate.usd)
    # The key's counter is locked from here to the commit: everything else first.
    index = _index_take(keyset=keyset, first=derivation_first_index(currency=code))
    destination = destination_derive(currency=code, index=index)
    expires_at = now + (rate_lock or expiry_window())
    if expires_cap is not None:
        expires_at = min(expires_at, expires_cap)
    # A new quote is locked for its own window; the invoice follows it (callers
    # save it, or _number_write writes it with the number).
    invoice.expires_at, invoice.monitoring_until = expires_at, expires_at + monitoring_window()
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
        # The number first: its counter's lock is held for the request's insert and the commit only.
        _number_write(invoice=invoice, now=now)
    made = request(invoice.number)
    made.save(force_insert=True)
    return made


def _number_write(*, invoice: Invoice, now: datetime) -> None:
    """Give the invoice the next number of the year and write it with its
    expiry and monitoring window as they are now. The counter's lock, on which
    every invoice of the year queues until its transaction commits, is taken
    here and held for what follows (the payment request naming the number)
    and the commit."""
    invoice.number = _number_take(now=now)
    Invoice.objects.filter(pk=invoice.pk).update(
        number=invoice.number, expires_at=invoice.expires_at, monitoring_until=invoice.monitoring_until
    )


def _number_take(*, now: datetime) -> str:
    """The next invoice number of the year. The counter row stays locked until
    the caller commits (a rolled-back invoice gives its number back, so numbers
    have no gaps): every invoice of the year queues on it, so it is taken in
    one statement as late as the transaction allows (only what carries the
    number, the invoice and its payment request, is written after it)."""
    series = f"{settings.INVOICE_NUMBER_PREFIX}-{now.year}"
    last = _counter_advance(InvoiceCounter, "series", series, "last", 0) + 1
    return f"{series}-{last:06d}"


@dataclass(frozen=True)
class InvoiceSpec:
    """What an invoice is for and how it is paid, as its issuer states it.

    `payable`: what it pays for, a kind registered with billing.payable (an
    unregistered kind is refused). With a `currency`, its first payment
    request is created at the current rate, locked for `rate_lock` (default
    INVOICE_EXPIRY_MINUTES); without one (a renewal whose currency is not
    available, chosen by the customer when paying, or paid from credit) it
    stays open until `payable_until` (default: the usual expiry)."""

    account: Any
    payable: PayableRef
    description: str
    lines: Sequence[LineSpec]
    currency: str | None
    metadata: dict[str, Any] = field(default_factory=dict)
    payable_until: datetime | None = None
    rate_lock: timedelta | None = None


@transaction.atomic
def invoice_create(
    *,
    account: Any,
    payable: PayableRef | tuple[str, int],
    description: str,
    lines: Sequence[LineSpec],
    currency: str | None,
    metadata: dict[str, Any] | None = None,
    payable_until: datetime | None = None,
    rate_lock: timedelta | None = None,
    now: datetime | None = None,
) -> Invoice:
    """Issue an invoice, with nothing of the caller's to write beside it (see
    InvoiceSpec for the arguments; invoice_issuing for a caller that has)."""
    spec = InvoiceSpec(
        account=account,
        payable=PayableRef(*payable),
        description=description,
        lines=lines,
        currency=currency,
        metadata=metadata or {},
        payable_until=payable_until,
        rate_lock=rate_lock,
    )
    with invoice_issuing(spec=spec, now=now) as invoice:
        pass
    return invoice


# How the release before this one wrote a subject, which its processes still parse during an
# upgrade: a rental's renewal and usage as "rental:<id>:...", anything else as "<kind>:<id>".
# Goes with the `subject` column, in the release after.
_LEGACY_SUBJECT = {"renewal": "rental:{id}:renewal", "usage": "rental:{id}:usage"}


def legacy_subject(ref: PayableRef) -> str:
    return _LEGACY_SUBJECT.get(ref.kind, "{kind}:{id}").format(kind=ref.kind, id=ref.id)


def subject_parse(subject: str) -> tuple[str, int]:
    """(kind, id) of a subject as the release before wrote it (billing/0009 fills the rows
    that existed then with the same rule)."""
    parts = subject.split(":")
    kind = parts[0][:16]
    number = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    if kind == "rental":
        kind = "usage" if parts[-1] == "usage" else "renewal"
    return kind, number


def invoice_subjects_fill(*, batch: int = 1000) -> int:
    """Fill (subject_kind, subject_id) of the invoices a process of the release before
    wrote after billing/0009 ran (their kind is empty), a batch a transaction; how many."""
    filled, last = 0, 0
    while True:
        rows = list(
            Invoice.objects.filter(subject_kind="", pk__gt=last).order_by("pk").values_list("pk", "subject")[:batch]
        )
        if not rows:
            return filled
        with transaction.atomic():
            for pk, subject in rows:
                kind, number = subject_parse(subject)
                filled += Invoice.objects.filter(pk=pk, subject_kind="").update(subject_kind=kind, subject_id=number)
        last = rows[-1][0]


@contextmanager
def invoice_issuing(*, spec: InvoiceSpec, now: datetime | None = None, attach: bool = False) -> Iterator[Invoice]:
    """Issue an invoice around the caller's own writes, in the caller's transaction:

        with billing.invoice_issuing(spec=spec) as invoice:
            order.invoice = invoice
            order.save(update_fields=["invoice"])

    On entry the invoice and its lines are written under a placeholder number
    (the caller's rows may point at it). On a clean exit the two counters every
    invoice queues on (the number of the year, the deposit key's index) are
    taken, last, with the payment request (a fresh destination at the current
    rate) written after them: their locks are held for the commit only. An
    exception inside the block issues nothing (the caller's transaction rolls
    the draft back). `attach`: the invoice comes back with its lines, requests
    and payments attached as if prefetched, so rendering it reads nothing."""
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("invoice_issuing runs inside the caller's transaction")
    payable_get(spec.payable.kind)  # refuses a kind nobody registered
    now = now or timezone.now()
    currency = None if spec.currency is None else currency_enabled(spec.currency)
    invoice, invoice_lines = _invoice_draft_write(spec=spec, now=now)
    yield invoice
    requests: list[PaymentRequest] = []
    if currency is None:
        _number_write(invoice=invoice, now=now)
    else:
        requests.append(
            _request_create(
                invoice=invoice, currency=currency, now=now, fresh=True, numbered=True, rate_lock=spec.rate_lock
            )
        )
    on_commit_send(signals.invoice_created, invoice)
    if attach:
        written_keep(invoice, lines=invoice_lines, requests=requests, payments=[], credit_entries=[])


def _invoice_draft_write(*, spec: InvoiceSpec, now: datetime) -> tuple[Invoice, list[InvoiceLine]]:
    """The invoice and its lines, under a unique placeholder number until it is issued."""
    expires_at = now + expiry_window()
    if spec.currency is None and spec.payable_until is not None:
        expires_at = max(spec.payable_until, expires_at)
    if not spec.lines:
        raise ValueError("an invoice needs lines")
    total = sum((ln.amount_usd for ln in spec.lines), ZERO)
    if total <= 0:
        raise DomainError("invalid", "An invoice must be for a positive amount.")
    invoice = Invoice(
        number=f"~{uuid.uuid4().hex}",
        account=spec.account,
        subject_kind=spec.payable.kind,
        subject_id=spec.payable.id,
        subject=legacy_subject(spec.payable),  # for the release before this one, during an upgrade
        description=spec.description[:200],
        total_usd=cents(total),
        created_at=now,
        expires_at=expires_at,
        monitoring_until=expires_at + monitoring_window(),
        metadata=spec.metadata,
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
            for i, ln in enumerate(spec.lines, start=1)
        ],
    )
    return invoice, invoice_lines


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
    on_commit_send(signals.invoice_quoted, invoice, currency=request.currency)


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
    invoice = invoice_lock(invoice_id=invoice_id, account=account)
    if invoice.status != InvoiceStatus.NEW or now >= invoice.expires_at:
        raise Conflict(
            "invoice_not_open", "Only an open, unpaid invoice can change currency.", details={"status": invoice.status}
        )
    code = currency_enabled(currency)
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


def payable_requote_check(*, invoice: Invoice) -> None:
    """Ask the owner of what a (locked) invoice pays for whether it can be
    quoted again (billing.payable.Payable.requote_check)."""
    try:
        payable = payable_get(invoice.subject_kind)
    except UnknownPayable:
        raise Conflict(
            "invoice_subject_unknown",
            "What this invoice paid for is no longer sold; place a new order.",
            details={"subject_kind": invoice.subject_kind},
        ) from None
    payable.requote_check(invoice_id=invoice.pk, subject_id=invoice.subject_id)


def _remaining_usd(*, invoice: Invoice) -> Decimal:
    """What a fresh quote of a (locked) invoice asks for: the USD of the part
    its counted payments do not pay yet, rounded up to the cent. Refused when
    they pay it all already (it settles as they confirm)."""
    from billing.selectors import invoice_paid_fraction

    remaining = 1 - invoice_paid_fraction(invoice=invoice)
    if remaining <= tolerance():
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
    invoice = invoice_lock(invoice_id=invoice_id, account=account)
    lapsed = invoice.status == InvoiceStatus.NEW and now >= invoice.expires_at
    if invoice.status != InvoiceStatus.EXPIRED and not lapsed:
        raise Conflict(
            "invoice_not_expired", "Only an expired invoice can be re-quoted.", details={"status": invoice.status}
        )
    if lapsed and wait_for_watcher(invoice=invoice, blind=blind_currencies(now=now), now=now):
        raise Conflict(
            "payment_check_pending",
            "The chain watcher of this invoice's currency is catching up, so a payment may already be on its "
            "way; try again in a few minutes.",
            details={"currency": invoice.active_request.currency if invoice.active_request else None},
        )
    previous = invoice.active_request
    code = currency or (previous.currency if previous else None)
    if code is None:
        raise DomainError("invalid", "Choose a currency.", details={"field": "currency"})
    remaining_usd = _remaining_usd(invoice=invoice)
    _quotes_left(invoice=invoice)
    payable_requote_check(invoice=invoice)
    request = _request_create(invoice=invoice, currency=code, now=now, amount_usd=remaining_usd)
    invoice.save(update_fields=["expires_at", "monitoring_until"])
    invoice_transition(invoice=invoice, status=InvoiceStatus.NEW, exception=InvoiceException.NONE, now=now, via="")
    invoice_advance(invoice=invoice, now=now)  # what arrived counts again: paid_partial
    _quoted(
        invoice=invoice,
        request=request,
        was=previous,
        action=AuditAction.INVOICE_REQUOTE,
        actor=account if actor is None else actor,
        reason=reason,
    )
    return invoice
