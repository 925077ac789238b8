"""Billing reads."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction
from typing import Any, TypedDict

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Case, Exists, F, Lookup, OuterRef, Prefetch, QuerySet, Subquery, Sum, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone
from django_stubs_ext import WithAnnotations

from billing import machine
from billing.chains.config import enabled_currencies, network_name, payment_uri
from billing.chains.interface import Destination
from billing.currencies import CURRENCIES
from billing.models import (
    ChainState,
    CreditBalance,
    CreditEntry,
    CreditKind,
    Invoice,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentRequest,
    PaymentStatus,
    StrayTransfer,
)
from core.db import related_all
from core.errors import NotFound
from core.money import ZERO, cents


def invoice_prefetches(prefix: str = "") -> list[Any]:
    """What rendering an invoice reads, for prefetch_related (`prefix` reaches
    invoices through a relation, e.g. "invoice__")."""
    return [
        f"{prefix}lines",
        Prefetch(f"{prefix}requests", queryset=PaymentRequest.objects.order_by("created_at", "id")),
        Prefetch(f"{prefix}payments", queryset=Payment.objects.order_by("first_seen_at", "id")),
        f"{prefix}credit_entries",
    ]


def _account_id(account: AbstractBaseUser | int) -> int:
    """The id of `account`, an account (settings.AUTH_USER_MODEL, which billing does not import) or its id."""
    return account if isinstance(account, int) else int(account.pk)


def invoices_for(*, account: AbstractBaseUser | int) -> QuerySet[Invoice]:
    return (
        Invoice.objects.filter(account_id=_account_id(account))
        .prefetch_related(*invoice_prefetches())
        .order_by("-created_at", "-id")
    )


def invoice_get(*, invoice_id: int, account: AbstractBaseUser | int) -> Invoice:
    """The caller's invoice; anyone else's is simply not found."""
    invoice = invoices_for(account=account).filter(pk=invoice_id).first()
    if invoice is None:
        raise NotFound("No such invoice.")
    return invoice


def invoice_has_payments(*, invoice: Invoice) -> bool:
    """Whether any payment still counts toward the invoice (un-counted ones do not)."""
    return invoice.payments.exclude(status=PaymentStatus.REMOVED).exists()


def payments_fraction(
    *, invoice: Invoice, payments: Collection[Payment], requests: dict[int, PaymentRequest] | None = None
) -> Fraction:
    """The part of `invoice` these payments pay, as the state machine counts it
    (billing.machine.payment_fraction); `requests` by id, else each payment's own."""
    total = Fraction(invoice.total_usd)
    out = Fraction(0)
    for p in payments:
        out += payment_share(
            payment=p, request=requests[p.request_id] if requests is not None else p.request, total=total
        )
    return out


def payment_share(*, payment: Payment, request: PaymentRequest, total: Fraction) -> Fraction:
    """The part of an invoice of `total` USD one payment to `request` pays, at the
    rate it counts at (billing.machine.payment_fraction, rate_ratio_for)."""
    return machine.payment_fraction(
        amount=payment.amount,
        amount_due=request.amount_due,
        request_usd=request.amount_usd,
        total_usd=total,
        rate_ratio=machine.rate_ratio_for(locked_rate=request.rate_usd, late_rate=payment.late_rate_usd),
    )


def invoice_received_usd(*, invoice: Invoice, net_of_overpayment: bool = False) -> Decimal:
    """What an invoice received toward its total, in USD: what its applied
    payments pay of it as the state machine counts them (payments_fraction, each
    at the rate it counts at), rounded down to the cent, and the credit spent
    on it; at most its total (beyond it is the over-payment, credited on its own).
    `net_of_overpayment`: all its applied payments pay, less what was credited
    already as its over-payment (at the rate they counted at then): after they
    were valued again lower, the part of them not yet credited."""
    applied = invoice.payments.filter(disposition=PaymentDisposition.APPLIED).exclude(status=PaymentStatus.REMOVED)
    share = payments_fraction(invoice=invoice, payments=list(applied.select_related("request")))
    if not net_of_overpayment:
        share = min(Fraction(1), share)
    cents_paid = share * Fraction(invoice.total_usd) * 100
    paid = Decimal(cents_paid.numerator // cents_paid.denominator) / 100  # exact, rounded down to the cent
    kinds = [CreditKind.INVOICE_PAYMENT, CreditKind.OVERPAYMENT] if net_of_overpayment else [CreditKind.INVOICE_PAYMENT]
    # Credit spent on it is a debit (negative: taking it away adds it), an over-payment
    # credited a positive entry (taken away).
    less = sum((e.amount_usd for e in invoice.credit_entries.filter(kind__in=kinds)), Decimal(0))
    return min(invoice.total_usd, paid - less)


def invoice_paid_fraction(*, invoice: Invoice) -> Fraction:
    """The part of the invoice its counted payments still open (neither applied
    nor credited yet) pay: what a fresh quote need not ask for again."""
    open_ = invoice.payments.exclude(status=PaymentStatus.REMOVED).filter(disposition=PaymentDisposition.OPEN)
    return payments_fraction(invoice=invoice, payments=list(open_.select_related("request")))


def credit_balance_usd(*, account: AbstractBaseUser | int) -> Decimal:
    row = CreditBalance.objects.filter(account_id=_account_id(account)).values_list("balance_usd", flat=True).first()
    return row if row is not None else ZERO


def credit_entries(*, account: AbstractBaseUser | int) -> QuerySet[CreditEntry]:
    return (
        CreditEntry.objects.filter(account_id=_account_id(account))
        .select_related("invoice")
        .order_by("-created_at", "-id")
    )


class AnyOf(Lookup):
    """`field = ANY(%s)`: a field among any number of values, bound as ONE array
    parameter. A list in `__in=` binds one parameter per value, and a statement
    takes at most 65,535 on PostgreSQL (32,766 on SQLite): a watcher handing
    100,000 keys to `__in` fails outright. On SQLite (the local run) the values
    travel as one JSON parameter: `field IN (SELECT value FROM json_each(%s))`.

    Use it as a filter expression: `.filter(AnyOf(F("txid"), txids))`."""

    lookup_name = "any_of"
    prepare_rhs = False  # the values go to the database as they are, in one parameter

    def __init__(self, lhs: Any, rhs: Collection[str]) -> None:
        super().__init__(lhs, tuple(rhs))

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, params = self.process_lhs(compiler, connection)
        return f"{lhs} IN (SELECT value FROM json_each(%s))", (*params, json.dumps(list(self.rhs)))

    def as_postgresql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, params = self.process_lhs(compiler, connection)
        return f"{lhs} = ANY(%s)", (*params, list(self.rhs))


def watched_requests(*, currencies: Collection[str], now: datetime | None = None) -> QuerySet[PaymentRequest]:
    """The payment requests a watcher must match: those of invoices still open or
    inside their monitoring window, and of closed invoices for
    `WATCH_AFTER_CLOSE_DAYS` more (money sent late still becomes credit).

    A queryset, so that what depends on the watched set (the payments recorded
    to it, ...) is read through a subquery on this same criterion, never by
    sending the keys back as parameters."""
    now = now or timezone.now()
    horizon = now - timedelta(days=settings.WATCH_AFTER_CLOSE_DAYS)
    return PaymentRequest.objects.filter(currency__in=list(currencies), invoice__monitoring_until__gte=horizon)


def watched_match_keys(*, currencies: list[str], now: datetime | None = None) -> frozenset[str]:
    """What a watcher must match (scripts, addresses, references): the match keys
    of `watched_requests`. Plain strings: a watcher reads the whole set every run."""
    return frozenset(watched_requests(currencies=currencies, now=now).values_list("match_key", flat=True))


def monitored_match_keys(*, currencies: list[str], now: datetime | None = None) -> frozenset[str]:
    """The destinations of invoices still open or inside their monitoring window
    (`INVOICE_MONITORING_HOURS` after expiry): the narrower set a watcher that pays
    per destination and pass (Solana: one listing per reference) asks about."""
    now = now or timezone.now()
    rows = PaymentRequest.objects.filter(currency__in=currencies, invoice__monitoring_until__gte=now)
    return frozenset(rows.values_list("match_key", flat=True))


def known_match_keys(*, currency: str, keys: Collection[str]) -> frozenset[str]:
    """Which of `keys` (any number: one array parameter) are destinations of
    `currency`'s invoices, open or not (late money is credit)."""
    rows = PaymentRequest.objects.filter(AnyOf(F("match_key"), keys), currency=currency)
    return frozenset(rows.values_list("match_key", flat=True))


def txids_recorded_final(*, chain: str, txids: Collection[str]) -> frozenset[str]:
    """Which of `txids` (any number: one array parameter) are already recorded for
    good on `chain`: as confirmed payments, or as transfers for staff."""
    paid = Payment.objects.filter(AnyOf(F("txid"), txids), chain=chain, status=PaymentStatus.CONFIRMED)
    strays = StrayTransfer.objects.filter(AnyOf(F("txid"), txids), chain=chain)
    return frozenset(paid.values_list("txid", flat=True)) | frozenset(strays.values_list("txid", flat=True))


@dataclass(frozen=True)
class ChainHealth:
    chain: str
    ok: bool
    height: int | None
    tip_height: int | None
    last_ok_at: datetime | None
    error: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "height": self.height,
            "tip_height": self.tip_height,
            "last_ok_at": self.last_ok_at.isoformat() if self.last_ok_at else None,
            "error": self.error,
        }


def chain_health(*, chain: str, now: datetime | None = None) -> ChainHealth:
    """A watcher is healthy when its last successful scan is recent and the node
    it follows was reachable then. A chain with no watcher configured (manual
    payments only) reports ok with no heights."""
    now = now or timezone.now()
    state = ChainState.objects.filter(chain=chain).first()
    if state is None:
        return ChainHealth(chain, True, None, None, None, "")
    stale = state.last_ok_at is None or now - state.last_ok_at > timedelta(seconds=settings.CHAIN_STALE_SECONDS)
    failing = state.last_error_at is not None and (state.last_ok_at is None or state.last_error_at > state.last_ok_at)
    return ChainHealth(
        chain,
        not (stale or failing),
        state.height,
        state.tip_height,
        state.last_ok_at,
        state.last_error if failing else ("no successful scan recently" if stale else ""),
    )


def currencies_enabled() -> list[dict[str, Any]]:
    out = []
    health: dict[str, ChainHealth] = {}
    for code in enabled_currencies():
        cur = CURRENCIES[code]
        if cur.chain not in health:  # ETH, USDT and USDC share one chain
            health[cur.chain] = chain_health(chain=cur.chain)
        out.append(
            {
                "code": code,
                "name": cur.name,
                "decimals": cur.decimals,
                "unit": cur.unit,
                "chain": cur.chain,
                "network": network_name(currency=code),
                "confirmations": settings.CONFIRMATIONS[code],
                "health": health[cur.chain],
            }
        )
    return out


class _PaidIn(TypedDict):
    paid_in: str


def _settled_in(*, since: datetime, until: datetime) -> QuerySet[WithAnnotations[Invoice, _PaidIn]]:
    """Invoices settled in [since, until), each with `paid_in`: the currency
    its applied payments came in, `credit` when paid from account credit, else
    the currency of its quote (settled by staff), else `marked`. An invoice
    whose whole value went back as credit (its subject could not be delivered)
    is left out: that money is counted when the credit pays for something."""
    applied = (
        Payment.objects.filter(invoice=OuterRef("pk"), disposition=PaymentDisposition.APPLIED)
        .order_by("id")
        .values("currency")[:1]
    )
    quoted = PaymentRequest.objects.filter(invoice=OuterRef("pk"), is_active=True).values("currency")[:1]
    returned = CreditEntry.objects.filter(invoice=OuterRef("pk"), kind=CreditKind.UNFULFILLED)
    settled = Invoice.objects.filter(status=InvoiceStatus.SETTLED, settled_at__gte=since, settled_at__lt=until)
    return settled.exclude(Exists(returned)).annotate(
        paid_in=Case(
            When(settled_via="credit", then=Value("credit")),
            default=Coalesce(Subquery(applied), Subquery(quoted), Value("marked")),
        )
    )


def _revenue_order(currency: str) -> tuple[int, str]:
    return (list(CURRENCIES).index(currency) if currency in CURRENCIES else len(CURRENCIES), currency)


def revenue_by_currency(*, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """What invoices settled in [since, until) brought in, per currency: their
    totals (what was sold: an over-payment is credit, counted once when the
    credit pays an invoice), with the base units applied to them on chain; a
    `credit` row for invoices paid from account credit."""
    from django.db.models import Count

    settled = _settled_in(since=since, until=until)
    totals = settled.values("paid_in").annotate(usd=Sum("total_usd"), invoices=Count("id"))
    # Summed here, not in SQL: on SQLite base units are text (core.fields.BaseUnitsModelField).
    received: dict[str, int] = {}
    applied = Payment.objects.filter(invoice__in=settled.values("pk"), disposition=PaymentDisposition.APPLIED)
    for code, amount in applied.values_list("currency", "amount").iterator():
        received[code] = received.get(code, 0) + amount
    out = []
    for r in sorted(totals, key=lambda r: _revenue_order(r["paid_in"])):
        code = r["paid_in"]
        units = int(received[code]) if code in received else None
        out.append(
            {
                "currency": code,
                "amount": units,
                "amount_display": CURRENCIES[code].coins_str(units) if units is not None else "",
                "usd": r["usd"],
                "invoices": r["invoices"],
            }
        )
    return out


# --- Checkout page ------------------------------------------------------------

# What the checkout page shows, from the invoice's status and the clock:
# new (waiting for money), seen (paid, confirming), paid (settled), expired
# (the rate lock ended: a fresh quote, or credit for what arrived), invalid.
CHECKOUT_STATES = ("new", "seen", "paid", "expired", "invalid")
CHECKOUT_TOKEN_MAX_LENGTH = 64
_CREDIT_FROM_PAYMENTS = ("overpayment", "late_payment", "payment_credit", "unfulfilled")


def invoice_by_checkout_token(*, token: str) -> Invoice:
    """The invoice a checkout token opens. Any other string is simply not found:
    the answer says nothing about which invoices exist."""
    if not token or len(token) > CHECKOUT_TOKEN_MAX_LENGTH:
        raise NotFound("No such payment page.")
    invoice = Invoice.objects.filter(checkout_token=token).prefetch_related(*invoice_prefetches()).first()
    if invoice is None:
        raise NotFound("No such payment page.")
    return invoice


@dataclass(frozen=True)
class CheckoutStatus:
    """Everything the checkout page shows that changes while it is open."""

    invoice: Invoice
    state: str  # one of CHECKOUT_STATES
    request: PaymentRequest | None  # the active payment request
    amount_due: int  # of the active request, base units (0 without one)
    paid: int  # counted so far to the active request, base units
    due: int  # still to pay in the active request's currency, base units
    due_usd: Decimal  # what is still to pay is worth, in USD (0 once nothing is due)
    counted_usd: Decimal  # what payments counting toward the invoice pay of it, in USD
    pay_uri: str  # the payment URI for `due` ("" without a request or nothing due)
    confirmations: int | None  # of the least-confirmed payment still confirming
    confirmations_required: int | None
    seconds_left: int  # on the rate lock (0 once it ended)
    credited_usd: Decimal  # what became account credit from payments to this invoice
    credit_at: datetime | None  # when what arrived becomes credit unless the rest is paid (expired, partly paid)
    can_switch_currency: bool
    can_requote: bool

    @property
    def currency(self) -> str | None:
        return self.request.currency if self.request else None

    def coins(self, base_units: int) -> str:
        return CURRENCIES[self.request.currency].coins_str(base_units) if self.request else ""


def _pay_uri_for(request: PaymentRequest, amount: int, *, number: str) -> str:
    """The request's URI, or the same destination asking for `amount` (what is
    still due after a partial payment)."""
    if amount == request.amount_due:
        return request.payment_uri
    destination = Destination(
        currency=request.currency,
        address=request.address,
        index=int(request.derivation_index),
        match_key=request.match_key,
        reference=request.reference,
    )
    return payment_uri(
        destination=destination,
        amount=amount,
        label=settings.PAYMENT_LABEL,
        message=f"Invoice {number}",
    )


def _usd_of(fraction: Fraction, total_usd: Decimal) -> Decimal:
    return cents(Decimal(fraction.numerator) * total_usd / Decimal(fraction.denominator))


def invoice_progress(*, invoice: Invoice, now: datetime | None = None) -> dict[str, Any]:
    """What happened to what was paid to an invoice (loaded with
    `invoice_prefetches`), for the API and the checkout page: `counted_usd`,
    what counting payments (seen, or applied) pay of it; `due_usd`, what is
    left to pay while it can still be paid (new or expired); `credited_usd`,
    what payments to it became account credit (over-payments, money that came
    too late or was left when it closed); `credit_at`, when money waiting on an
    expired invoice becomes credit unless the rest is paid first."""
    now = now or timezone.now()
    expired = invoice.status == InvoiceStatus.EXPIRED or (
        invoice.status == InvoiceStatus.NEW and now >= invoice.expires_at
    )
    requests = {r.pk: r for r in related_all(invoice, "requests")}
    counted = [
        p for p in related_all(invoice, "payments") if p.counted and p.disposition != PaymentDisposition.CREDITED
    ]
    open_ = [p for p in counted if p.disposition == PaymentDisposition.OPEN]
    paid = payments_fraction(invoice=invoice, payments=counted, requests=requests)
    seen = payments_fraction(invoice=invoice, payments=open_, requests=requests)
    payable = invoice.status in (InvoiceStatus.NEW, InvoiceStatus.EXPIRED)
    credited = sum(
        (
            e.amount_usd
            for e in related_all(invoice, "credit_entries")
            if e.kind in _CREDIT_FROM_PAYMENTS and e.amount_usd > 0
        ),
        ZERO,
    )
    return {
        "seen": seen,
        "counted_usd": _usd_of(min(paid, Fraction(1)), invoice.total_usd),
        "due_usd": _usd_of(max(Fraction(0), 1 - seen), invoice.total_usd) if payable else ZERO,
        "credited_usd": credited,
        "credit_at": invoice.monitoring_until if expired and open_ and now < invoice.monitoring_until else None,
    }


def quote_rest(*, invoice: Invoice, request: PaymentRequest, seen: Fraction, counted: Collection[Payment]) -> int:
    """What `request` (the active quote) still asks for, in its base units, when
    its open payments pay `seen` of the invoice: exactly its amount while
    nothing has come since it was made (it asked for what was left, rounded up
    to the cent), else the rest (it asks for amount_usd of the total), rounded
    up to a base unit, at most its amount."""
    amount_due = int(request.amount_due)
    rest_usd = max(Fraction(0), 1 - seen) * Fraction(invoice.total_usd)
    untouched = not any(p.request_id == request.pk for p in counted)
    if untouched and Fraction(request.amount_usd) - rest_usd < Fraction(1, 100):
        return amount_due
    rest = rest_usd / Fraction(request.amount_usd) * amount_due
    return min(amount_due, -(-rest.numerator // rest.denominator))


def checkout_status(*, invoice: Invoice, now: datetime | None = None) -> CheckoutStatus:
    """The checkout page's view of an invoice (loaded with `invoice_prefetches`)."""
    now = now or timezone.now()
    request = invoice.active_request
    counted = [p for p in related_all(invoice, "payments") if p.counted]
    progress = invoice_progress(invoice=invoice, now=now)
    seen = progress["seen"]

    status = invoice.status
    if status == InvoiceStatus.SETTLED:
        state = "paid"
    elif status == InvoiceStatus.PROCESSING:
        state = "seen"
    elif status == InvoiceStatus.INVALID:
        state = "invalid"
    elif status == InvoiceStatus.EXPIRED or now >= invoice.expires_at:
        # A new invoice past its rate lock is expired for the payer even before
        # the periodic job says so.
        state = "expired"
    else:
        state = "new"

    amount_due = request.amount_due if request else 0
    paid = sum(p.amount for p in counted if request and p.request_id == request.pk)
    remaining = max(Fraction(0), 1 - seen)
    due = 0
    if request is not None and state in ("new", "expired"):
        due = quote_rest(invoice=invoice, request=request, seen=seen, counted=counted)
    pay_uri = ""
    if request is not None:
        pay_uri = _pay_uri_for(request, due, number=invoice.number) if due > 0 else request.payment_uri

    confirming = [p for p in counted if p.status == PaymentStatus.PENDING]
    confirmations = min((p.confirmations for p in confirming), default=None)
    required = None
    if confirming:
        least = min(confirming, key=lambda p: p.confirmations)
        required = int(settings.CONFIRMATIONS[least.currency])

    due_usd = progress["due_usd"] if state in ("new", "expired") else ZERO
    return CheckoutStatus(
        invoice=invoice,
        state=state,
        request=request,
        amount_due=amount_due,
        paid=paid,
        due=due,
        due_usd=due_usd,
        counted_usd=progress["counted_usd"],
        pay_uri=pay_uri,
        confirmations=confirmations,
        confirmations_required=required,
        seconds_left=max(0, int((invoice.expires_at - now).total_seconds())) if state == "new" else 0,
        credited_usd=progress["credited_usd"],
        credit_at=progress["credit_at"] if state == "expired" else None,
        can_switch_currency=state == "new" and bool(set(enabled_currencies()) - {request and request.currency}),
        can_requote=state == "expired" and remaining > Fraction(str(settings.INVOICE_UNDERPAYMENT_TOLERANCE_PCT)) / 100,
    )


# --- Reports (the staff dashboard) ------------------------------------------------


def revenue_by_day(*, since: datetime, until: datetime) -> list[dict[str, Any]]:
    """Revenue per UTC day and currency, as `revenue_by_currency` counts it
    (the totals of the invoices settled that day, per currency they were paid
    in, `credit` for those paid from credit). Rows `{day, currency, usd}`, by
    day then currency."""
    from datetime import UTC

    from django.db.models.functions import TruncDate

    rows = (
        _settled_in(since=since, until=until)
        .annotate(day=TruncDate("settled_at", tzinfo=UTC))
        .values("day", "paid_in")
        .annotate(usd=Sum("total_usd"))
    )
    return sorted(
        ({"day": r["day"], "currency": r["paid_in"], "usd": r["usd"]} for r in rows),
        key=lambda r: (r["day"], r["currency"]),
    )


def invoices_by_status(*, since: datetime) -> dict[str, int]:
    """How many invoices issued since `since` are in each state now."""
    from django.db.models import Count

    counts = dict(Invoice.objects.filter(created_at__gte=since).values_list("status").annotate(n=Count("id")))
    return {status.value: counts.get(status.value, 0) for status in InvoiceStatus}
