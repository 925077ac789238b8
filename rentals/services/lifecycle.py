"""A rental's life: paid order -> provisioning -> active -> renewals ->
(unpaid) grace -> suspended -> terminated, with its slots back in stock.

Every function here is idempotent: the periodic jobs call them again and
again, and a second run with nothing due changes nothing. A paid period is
never cut short: periods are only added, suspension only follows the end of
the last paid period plus the grace.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from accounts.models import Account
from billing import services as billing
from billing.models import CreditKind, Invoice, InvoiceStatus
from billing.payable import PayableRef
from billing.selectors import credit_balance_usd
from catalog import services as catalog
from catalog.models import TERM_HOURS, Addon
from core.audit import AuditAction, audit_record
from core.db import locked_or_404
from core.errors import Conflict, DomainError
from core.money import cents
from rentals import machine
from rentals.events import rental_event_emit
from rentals.models import (
    Order,
    OrderStatus,
    PeriodKind,
    ProvisioningAction,
    Renewal,
    RenewalKind,
    Rental,
    RentalPeriod,
    RentalStatus,
    UsageReport,
)
from rentals.services.orders import order_lines_for_terms
from rentals.services.provisioning import provisioning_job_complete, provisioning_job_create

log = logging.getLogger(__name__)


# --- Settings ----------------------------------------------------------------------


def renewal_lead(term: str) -> timedelta:
    days = settings.RENEWAL_LEAD_DAYS_WEEKLY if term == "weekly" else settings.RENEWAL_LEAD_DAYS_MONTHLY
    return timedelta(days=days)


def grace() -> timedelta:
    return timedelta(days=settings.RENTAL_GRACE_DAYS)


def terminate_after() -> timedelta:
    return timedelta(days=settings.RENTAL_TERMINATE_AFTER_DAYS)


def renewal_rate_lock(*, payable_until: datetime | None, now: datetime) -> timedelta:
    """How long a renewal invoice's quote holds: RENEWAL_RATE_LOCK_HOURS, never
    past the renewal's deadline, never less than an order's rate lock."""
    lock = timedelta(hours=settings.RENEWAL_RATE_LOCK_HOURS)
    if payable_until is not None:
        lock = min(lock, payable_until - now)
    return max(lock, timedelta(minutes=settings.INVOICE_EXPIRY_MINUTES))


def _term_length(term: str, terms: int) -> timedelta:
    return timedelta(hours=TERM_HOURS[term] * terms)


def _rental_lock(*, rental_id: int, account: Account | None = None) -> Rental:
    """The rental, locked; a customer's (`account`) own rentals only."""
    rentals = Rental.objects.all() if account is None else Rental.objects.filter(account=account)
    return locked_or_404(rentals, pk=rental_id, message="No such rental.")


def _emit_rental(rental: Rental, event: str) -> None:
    rental_event_emit(rental=rental, type=event)


# --- From a paid order to a rental ---------------------------------------------------


def rental_from_order(*, order_id: int, now: datetime | None = None) -> Rental | None:
    """The order's invoice settled: the order becomes a rental in provisioning.
    Paid after its reservation lapsed, it reserves again; when the stock is gone
    the payment becomes account credit (the order is `unfulfilled`)."""
    now = now or timezone.now()
    with transaction.atomic(durable=True):  # outermost: billing calls it after its commit
        # The invoice before the order, as a cancel and a re-quote take them (the sold-out
        # branch below credits the invoice, which locks it).
        invoice_id = Order.objects.filter(pk=order_id).values_list("invoice_id", flat=True).first()
        if invoice_id is not None:
            billing.invoice_lock(invoice_id=invoice_id)
        order = Order.objects.select_for_update().filter(pk=order_id).first()
        if order is None:
            return None
        existing = Rental.objects.filter(order=order).first()
        if existing is not None:
            return existing
        invoice = order.invoice
        if (
            invoice is None
            or invoice.status != InvoiceStatus.SETTLED
            or order.status in (OrderStatus.CANCELLED, OrderStatus.UNFULFILLED)
        ):
            return None
        if order.status == OrderStatus.EXPIRED:
            try:
                with transaction.atomic():
                    reservation = catalog.slots_reserve(
                        region=order.region, gpu=order.gpu, count=order.gpu_count, holder=order.holder
                    )
                order.host = reservation.host
            except Conflict:
                machine.order_to(order, OrderStatus.UNFULFILLED)
                order.closed_at = now
                order.close_reason = "paid after its reservation lapsed; no stock left: credited"
                order.save(update_fields=["status", "closed_at", "close_reason"])
                entry = billing.invoice_credit_unfulfilled(
                    invoice_id=invoice.pk, reason=f"Order {order.pk}: paid late, {order.gpu_name} sold out"
                )
                log.warning(
                    "order %s paid late without stock; %s USD credited",
                    order.pk,
                    entry.amount_usd if entry is not None else 0,
                )
                return None
        machine.order_to(order, OrderStatus.PAID)
        order.paid_at = invoice.settled_at or now
        order.closed_at, order.close_reason = None, ""
        order.save(update_fields=["status", "paid_at", "host", "closed_at", "close_reason"])
        request = invoice.active_request
        if order.host is None:  # its slots (or those reserved again above) are on one host
            raise RuntimeError(f"order {order.pk} is paid but holds no host")
        rental = Rental.objects.create(
            account=order.account,
            order=order,
            host=order.host,
            gpu=order.gpu,
            region_code=order.region_code,
            gpu_slug=order.gpu_slug,
            gpu_count=order.gpu_count,
            term=order.term,
            renewal_terms=order.terms,
            template_slug=order.template_slug,
            addons=order.addons,
            ssh_keys=order.ssh_keys,
            pay_currency=request.currency if request else order.pay_currency,
            status=RentalStatus.PROVISIONING,
            provisioner=settings.PROVISIONER,
            created_at=now,
            settled_at=invoice.settled_at or now,
        )
        catalog.slots_rehold(holder=order.holder, new_holder=rental.holder)
        catalog.slots_mark_rented(holder=rental.holder)
        job = provisioning_job_create(rental=rental, action=ProvisioningAction.PROVISION, now=now)
        rental.provision_job = job.pk
        rental.save(update_fields=["provision_job"])
        _emit_rental(rental, "rental.provisioning")
    log.info("rental %s created from order %s on %s", rental.pk, order.pk, rental.host.name)
    return rental


def _addresses_validate(ipv4: str, ipv6_prefix: str) -> tuple[str, str]:
    try:
        v4 = ipaddress.IPv4Address(ipv4)
        v6 = ipaddress.IPv6Network(ipv6_prefix, strict=True)
    except ValueError as exc:
        raise DomainError("invalid_address", f"Not an IPv4 address and an IPv6 /64: {exc}") from None
    if v6.prefixlen != 64:
        raise DomainError("invalid_address", "The IPv6 assignment is a /64.", details={"ipv6_prefix": ipv6_prefix})
    return str(v4), str(v6)


def rental_activate(
    *, rental_id: int, ipv4: str, ipv6_prefix: str, actor: Any, reason: str = "", now: datetime | None = None
) -> Rental:
    """The server is handed over: the first paid period starts now."""
    now = now or timezone.now()
    ipv4, ipv6_prefix = _addresses_validate(ipv4, ipv6_prefix)
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id)
        if rental.status == RentalStatus.ACTIVE and (rental.ipv4, rental.ipv6_prefix) == (ipv4, ipv6_prefix):
            return rental  # the operator repeated the call
        if rental.status != RentalStatus.PROVISIONING:
            raise Conflict(
                "rental_not_provisioning", f"This rental is {rental.status}.", details={"status": rental.status}
            )
        order = rental.order
        period = RentalPeriod.objects.create(
            rental=rental,
            kind=PeriodKind.INITIAL,
            starts_at=now,
            ends_at=now + _term_length(rental.term, order.terms),
            invoice_id=order.invoice_id,
            created_at=now,
        )
        machine.rental_to(rental, RentalStatus.ACTIVE)
        rental.ipv4, rental.ipv6_prefix = ipv4, ipv6_prefix
        rental.active_at = now
        rental.provisioning_seconds = max(0, int((now - rental.settled_at).total_seconds()))
        rental.paid_until = period.ends_at
        rental.save()
        provisioning_job_complete(rental=rental, action=ProvisioningAction.PROVISION, now=now)
        audit_record(
            actor=actor,
            action=AuditAction.RENTAL_ACTIVATE,
            obj=rental,
            reason=reason,
            changes={"ipv4": ipv4, "ipv6_prefix": ipv6_prefix, "paid_until": period.ends_at},
        )
        _emit_rental(rental, "rental.active")
    log.info(
        "rental %s active (%ss after payment), paid until %s", rental.pk, rental.provisioning_seconds, rental.paid_until
    )
    return rental


# --- Renewals --------------------------------------------------------------------------


def _month_end(month: date) -> datetime:
    """The first instant after `month` (a first of the month), UTC."""
    year, index = divmod(month.month, 12)
    return datetime(month.year + year, index + 1, 1, tzinfo=UTC)


def usage_correction_window() -> timedelta:
    return timedelta(days=settings.USAGE_CORRECTION_DAYS)


def _usage_unbilled(*, now: datetime, lapsed_too: bool = False) -> Q:
    """Usage not billed yet, or billed on a renewal that will never be paid: one
    voided since (by a cancel or a termination), or one that expired unpaid and
    whose monitoring window has closed (no payment settles it any more;
    _renewal_invoice voids it so that it cannot be re-quoted either). The egress
    was used all the same, so it is billed again, on the next invoice that bills
    usage: the customer's next renewal, or a usage invoice of its own when the
    rental is ending. A usage invoice of its own that lapses keeps it (it may be
    re-quoted and paid): billing it again would issue one after another.
    `lapsed_too`: a renewal that expired unpaid counts whether its monitoring
    window has closed or not (_usage_lines says when)."""
    lapsed = Q(
        billed_invoice__status=InvoiceStatus.EXPIRED,
        billed_invoice__renewal__kind__in=[RenewalKind.AUTO, RenewalKind.MANUAL],
    )
    if not lapsed_too:
        lapsed &= Q(billed_invoice__monitoring_until__lte=now)
    return Q(billed_invoice__isnull=True) | Q(billed_invoice__status=InvoiceStatus.INVALID) | lapsed


def _usage_lines(
    rental: Rental, *, now: datetime, lapsed_too: bool = False
) -> tuple[list[billing.LineSpec], list[UsageReport]]:
    """Unbilled egress overage of the months whose correction window is over
    (USAGE_CORRECTION_DAYS after the month ended), at the price of when it was
    reported."""
    # `lapsed_too` (a renewal being issued): usage a renewal billed that lapsed unpaid comes
    # along, its monitoring window over or not (unless a payment to it is confirming): left
    # on it while a late payment could still settle it, a customer who let each automatic
    # renewal lapse and asked for a new one at once paid for egress never (each renewal
    # paid carried none, the next automatic one all of it).
    reports = [
        r
        for r in rental.usage_reports.filter(
            _usage_unbilled(now=now, lapsed_too=lapsed_too), overage_usd__gt=0
        ).order_by("month")
        if _month_end(r.month) + usage_correction_window() <= now
    ]
    # A lapsed renewal that billed some of it is closed first, before the new invoice
    # takes its counters: paid late it would bill the usage twice (an invalid invoice can
    # be neither re-quoted nor settled). One re-quoted or paid meanwhile keeps its usage.
    kept: set[int] = set()
    for lapsed in sorted({r.billed_invoice_id for r in reports if r.billed_invoice_id is not None}):
        try:
            billing.invoice_void_lapsed(
                invoice_id=lapsed, reason="its usage is billed again", now=now, inside_window=lapsed_too
            )
        except Conflict as exc:
            log.info("rental %s: usage on invoice %s left there (%s)", rental.pk, lapsed, exc.code)
            kept.add(lapsed)
    reports = [r for r in reports if r.billed_invoice_id not in kept]
    lines = [
        billing.LineSpec(
            description=f"Egress beyond the included allowance, {r.month:%Y-%m}: {r.overage_tb} TB",
            quantity=r.overage_tb,
            unit_usd=cents(r.overage_usd / r.overage_tb),
            amount_usd=r.overage_usd,
            code="usage:egress",
        )
        for r in reports
    ]
    return lines, reports


def _open_renewal(rental: Rental) -> Invoice | None:
    """An unpaid invoice that already renews the rental (automatic or asked for)."""
    return Invoice.objects.filter(
        renewal__rental=rental,
        status__in=[InvoiceStatus.NEW, InvoiceStatus.PROCESSING],
        renewal__kind__in=[RenewalKind.AUTO, RenewalKind.MANUAL],
    ).first()


def _resume(rental: Rental, *, now: datetime) -> None:
    """A suspended rental is active again (the caller saves it); the server powers on."""
    machine.rental_to(rental, RentalStatus.ACTIVE)
    rental.suspended_at = None
    rental.end_reason = ""
    provisioning_job_create(rental=rental, action=ProvisioningAction.POWER_ON, now=now)


def _renewal_invoice(
    *,
    rental: Rental,
    kind: str,
    terms: int,
    lines: list[billing.LineSpec],
    reports: list[UsageReport],
    currency: str | None,
    payable_until: datetime | None,
    for_period_end: datetime | None,
    now: datetime,
) -> Renewal:
    """Issue the invoice, quoted in `currency` (the one the customer named) or
    else in the rental's pay currency (that of its last paid invoice), with a
    fresh destination and rate, so it can be paid as issued. When the rental's
    currency is no longer available it is issued without one (the customer
    picks when paying). Unless the customer named a currency, credit that
    covers it pays it at once."""
    what = "usage" if kind == RenewalKind.USAGE else f"renewal, {terms} {rental.term} term{'s' if terms > 1 else ''}"

    def issue(code: str | None) -> Invoice:
        return billing.invoice_create(
            account=rental.account,
            payable=PayableRef("usage" if kind == RenewalKind.USAGE else "renewal", rental.pk),
            description=f"{rental.gpu_count}x {rental.order.gpu_name} in {rental.region_code}: {what}",
            lines=lines,
            currency=code,
            payable_until=payable_until,
            rate_lock=renewal_rate_lock(payable_until=payable_until, now=now),
            metadata={
                "rental": rental.pk,
                "kind": kind,
                "terms": terms,
                "region": rental.region_code,
                "gpu": rental.gpu_slug,
                "gpu_name": rental.order.gpu_name,
                "gpu_count": rental.gpu_count,
                # A usage invoice bills egress, not a term.
                **({} if kind == RenewalKind.USAGE else {"term": rental.term}),
            },
            now=now,
        )

    total = cents(sum((ln.amount_usd for ln in lines), Decimal(0)))
    from_credit = currency is None and credit_balance_usd(account=rental.account) >= total
    if currency is not None or from_credit:
        invoice = issue(currency)  # paid from credit below: no address to hand out
    else:
        try:
            with transaction.atomic():
                invoice = issue(rental.pay_currency or None)
        except DomainError as exc:
            log.warning(
                "rental %s: renewal not quoted in %s (%s); issued without a currency",
                rental.pk,
                rental.pay_currency,
                exc.code,
            )
            invoice = issue(None)
    for r in reports:
        r.billed_invoice = invoice
        r.save(update_fields=["billed_invoice"])
    renewal = Renewal.objects.create(
        rental=rental, invoice=invoice, kind=kind, terms=terms, for_period_end=for_period_end, created_at=now
    )
    # Paid from credit at once when the credit covers it (not when the customer named a currency).
    if from_credit:
        try:
            with transaction.atomic():
                billing.invoice_pay_with_credit(invoice_id=invoice.pk, account=rental.account, now=now)
        except Conflict as exc:
            # The credit was read before its lock: spent meanwhile (a renewal of
            # another rental, an invoice paid from credit). The renewal stays
            # open, its currency chosen when paying, as when none is available.
            log.info("rental %s: renewal %s not paid from credit (%s)", rental.pk, invoice.number, exc.code)
        invoice.refresh_from_db()
    if kind != RenewalKind.USAGE:
        rental_event_emit(rental=rental, type="rental.renewal_due", invoice=invoice)
    return renewal


def renewal_issue(*, rental_id: int, now: datetime | None = None) -> Renewal | None:
    """The automatic renewal of the current period, issued once per period end
    (the database refuses a second), `RENEWAL_LEAD_DAYS_*` before it ends, unless
    the customer already asked for one. Returns the renewal it created, if any."""
    now = now or timezone.now()
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id)
        if (
            rental.status != RentalStatus.ACTIVE
            or not rental.auto_renew
            or rental.cancelled_at
            or rental.paid_until is None
            or now < rental.paid_until - renewal_lead(rental.term)
        ):
            return None
        if Renewal.objects.filter(rental=rental, kind=RenewalKind.AUTO, for_period_end=rental.paid_until).exists():
            return None
        if _open_renewal(rental) is not None:
            return None
        lines = order_lines_for_terms(order=rental.order, terms=rental.renewal_terms)
        usage, reports = _usage_lines(rental, now=now, lapsed_too=True)
        return _renewal_invoice(
            rental=rental,
            kind=RenewalKind.AUTO,
            terms=rental.renewal_terms,
            lines=lines + usage,
            reports=reports,
            currency=None,
            payable_until=rental.paid_until + grace(),
            for_period_end=rental.paid_until,
            now=now,
        )


def rental_renew_now(
    *,
    rental_id: int,
    account: Account,
    terms: int | None = None,
    currency: str | None = None,
    now: datetime | None = None,
) -> Renewal:
    """A renewal invoice the customer asks for now (also to resume a suspended
    rental): `terms` (default: the rental's renewal terms) more terms at the
    prices on the order. Audited (`rental.renew`) with the customer as actor."""
    now = now or timezone.now()
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id, account=account)
        if rental.status not in (RentalStatus.ACTIVE, RentalStatus.SUSPENDED):
            raise Conflict(
                "rental_not_renewable",
                f"A {rental.status} rental cannot be renewed.",
                details={"status": rental.status},
            )
        if rental.cancelled_at is not None:
            raise Conflict(
                "rental_cancelled",
                "This rental is cancelled: it runs to the end of its paid period and is not renewed.",
                details={"cancelled_at": rental.cancelled_at.isoformat()},
            )
        terms = terms or rental.renewal_terms
        open_invoice = _open_renewal(rental)
        if open_invoice is not None:
            raise Conflict(
                "renewal_open",
                f"Invoice {open_invoice.number} already renews this rental: pay it first.",
                details={"invoice": open_invoice.pk, "number": open_invoice.number},
            )
        lines = order_lines_for_terms(order=rental.order, terms=terms)
        usage, reports = _usage_lines(rental, now=now, lapsed_too=True)
        deadline = rental.paid_until + grace() if rental.paid_until and rental.status == RentalStatus.ACTIVE else None
        renewal = _renewal_invoice(
            rental=rental,
            kind=RenewalKind.MANUAL,
            terms=terms,
            lines=lines + usage,
            reports=reports,
            currency=currency,
            payable_until=deadline,
            for_period_end=None,
            now=now,
        )
        audit_record(
            actor=account,
            action=AuditAction.RENTAL_RENEW,
            obj=rental,
            reason="renewal asked for by the customer",
            changes={
                "invoice": renewal.invoice.number,
                "terms": terms,
                "pay_currency": currency,
                "invoice_status": renewal.invoice.status,
            },
        )
        return renewal


def renewal_apply(*, invoice_id: int, now: datetime | None = None) -> RentalPeriod | None:
    """A renewal invoice settled: the rental gains its period (from the end of
    the last one; from now when it was suspended, which resumes it)."""
    now = now or timezone.now()
    with transaction.atomic(durable=True):  # outermost: billing calls it after its commit
        renewal = Renewal.objects.select_related("invoice").filter(invoice_id=invoice_id).first()
        if renewal is None or renewal.invoice.status != InvoiceStatus.SETTLED or renewal.kind == RenewalKind.USAGE:
            return None
        rental = _rental_lock(rental_id=renewal.rental_id)
        existing = RentalPeriod.objects.filter(invoice_id=invoice_id).first()
        if existing is not None:
            return existing
        if rental.status == RentalStatus.TERMINATED or rental.cancelled_at is not None:
            # A cancelled rental is not extended: money for a renewal (one that was
            # voided on cancel, or paid while in flight) becomes credit.
            ended = "terminated" if rental.status == RentalStatus.TERMINATED else "cancelled"
            # The egress it billed was used all the same: that part of the money pays for it.
            used = sum((ln.amount_usd for ln in renewal.invoice.lines.filter(code="usage:egress")), start=Decimal(0))
            billing.invoice_credit_unfulfilled(
                invoice_id=invoice_id,
                reason=f"Rental {rental.pk} was {ended} before this renewal was paid",
                keep_usd=used,
                # The customer's own doing when they cancelled; a termination may be the shop's.
                bought_nothing=rental.cancelled_at is not None,
            )
            return None
        resumed = rental.status == RentalStatus.SUSPENDED
        # Continuous from the last paid period. A suspended rental resumes now, and
        # its new period counts the grace days it ran past its paid time before it
        # was suspended (paid during the grace, they would have been in it too), not
        # the days it was off; suspended early by staff, it keeps the paid time it had.
        start = rental.paid_until or now
        if resumed:
            ran_unpaid = timedelta(0)
            if rental.paid_until is not None and rental.suspended_at is not None:
                ran_unpaid = max(timedelta(0), rental.suspended_at - rental.paid_until)
            start = max(start, now - ran_unpaid)
        period = RentalPeriod.objects.create(
            rental=rental,
            kind=PeriodKind.RESUME if resumed else PeriodKind.RENEWAL,
            starts_at=start,
            ends_at=start + _term_length(rental.term, renewal.terms),
            invoice_id=invoice_id,
            created_at=now,
        )
        rental.paid_until = period.ends_at
        request = renewal.invoice.active_request
        if request is not None:
            rental.pay_currency = request.currency
        if resumed:
            _resume(rental, now=now)
        rental.save()
        if resumed:
            _emit_rental(rental, "rental.active")
    log.info("rental %s %s until %s", rental.pk, "resumed" if resumed else "renewed", rental.paid_until)
    return period


def renewal_requote_check(*, invoice_id: int) -> None:
    """Billing asks before re-quoting an expired renewal or usage invoice
    (rentals.payables): a terminated rental's can no longer be paid."""
    renewal = Renewal.objects.filter(invoice_id=invoice_id).select_related("rental").first()
    if renewal is not None and renewal.rental.status == RentalStatus.TERMINATED:
        raise Conflict("rental_terminated", "This rental has ended; its renewal can no longer be paid.")


# --- Unpaid: grace, suspension, termination ------------------------------------------


def rental_suspend(*, rental_id: int, actor: Any = None, reason: str, now: datetime | None = None) -> Rental:
    now = now or timezone.now()
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id)
        if rental.status == RentalStatus.SUSPENDED:
            return rental
        if rental.status != RentalStatus.ACTIVE:
            raise Conflict("rental_not_active", f"This rental is {rental.status}.", details={"status": rental.status})
        machine.rental_to(rental, RentalStatus.SUSPENDED)
        rental.suspended_at = now
        rental.end_reason = reason
        rental.save(update_fields=["status", "suspended_at", "end_reason"])
        provisioning_job_create(rental=rental, action=ProvisioningAction.POWER_OFF, now=now)
        audit_record(actor=actor, action=AuditAction.RENTAL_SUSPEND, obj=rental, reason=reason)
        _emit_rental(rental, "rental.suspended")
    log.info("rental %s suspended: %s", rental.pk, reason)
    return rental


def rental_unsuspend(*, rental_id: int, actor: Any, reason: str, now: datetime | None = None) -> Rental:
    """Staff lift a suspension (e.g. after arranging payment). It adds no paid
    time: extend the period too when that is the intent."""
    now = now or timezone.now()
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id)
        if rental.status != RentalStatus.SUSPENDED:
            raise Conflict(
                "rental_not_suspended", f"This rental is {rental.status}.", details={"status": rental.status}
            )
        _resume(rental, now=now)
        rental.save(update_fields=["status", "suspended_at", "end_reason"])
        audit_record(actor=actor, action=AuditAction.RENTAL_UNSUSPEND, obj=rental, reason=reason)
        _emit_rental(rental, "rental.active")
    return rental


def rental_terminate(*, rental_id: int, actor: Any = None, reason: str, now: datetime | None = None) -> Rental:
    """The end: slots back in stock, the server wiped, open renewal invoices
    voided, unbilled usage invoiced. A paid period still running is not cut
    short by the jobs (they only terminate what is unpaid or cancelled); staff
    may, with a reason."""
    now = now or timezone.now()
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id)
        if rental.status == RentalStatus.TERMINATED:
            return rental
        machine.rental_to(rental, RentalStatus.TERMINATED)
        rental.terminated_at = now
        rental.end_reason = reason
        rental.auto_renew = False
        rental.save(update_fields=["status", "terminated_at", "end_reason", "auto_renew"])
        # The job first: its payload lists the slots to wipe, which still name the rental.
        provisioning_job_create(rental=rental, action=ProvisioningAction.DEPROVISION, now=now)
        released = catalog.slots_release(holder=rental.holder)
        # Renewals no longer buy anything; a usage invoice still bills what was used.
        _renewals_void(rental, reason=f"rental {rental.pk} terminated", actor=actor)
        usage, reports = _usage_lines(rental, now=now)
        if usage:
            _renewal_invoice(
                rental=rental,
                kind=RenewalKind.USAGE,
                terms=0,
                lines=usage,
                reports=reports,
                currency=None,
                payable_until=now + grace(),
                for_period_end=None,
                now=now,
            )
        audit_record(
            actor=actor,
            action=AuditAction.RENTAL_TERMINATE,
            obj=rental,
            reason=reason,
            changes={"slots_released": released},
        )
        _emit_rental(rental, "rental.terminated")
    log.info("rental %s terminated (%s); %s slots back in stock", rental.pk, reason, released)
    return rental


def rental_extend(*, rental_id: int, days: int, actor: Any, reason: str, now: datetime | None = None) -> RentalPeriod:
    """Staff add paid time (compensation, a deal): a period from the end of the
    last one; a suspended rental whose paid time now reaches past now resumes."""
    if not 1 <= days <= 366:
        raise DomainError("invalid", "Extend by 1 to 366 days.", details={"days": days})
    if not reason.strip():
        raise DomainError("reason_required", "Say why: a reason is required.")
    now = now or timezone.now()
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id)
        if rental.status not in (RentalStatus.ACTIVE, RentalStatus.SUSPENDED) or rental.paid_until is None:
            raise Conflict("rental_not_extendable", f"A {rental.status} rental cannot be extended.")
        start = max(rental.paid_until, now) if rental.status == RentalStatus.SUSPENDED else rental.paid_until
        period = RentalPeriod.objects.create(
            rental=rental,
            kind=PeriodKind.EXTENSION,
            starts_at=start,
            ends_at=start + timedelta(days=days),
            created_at=now,
            created_by=actor if getattr(actor, "pk", None) else None,
            reason=reason,
        )
        rental.paid_until = period.ends_at
        resumed = rental.status == RentalStatus.SUSPENDED
        if resumed:
            _resume(rental, now=now)
        rental.save(update_fields=["paid_until", "status", "suspended_at", "end_reason"])
        audit_record(
            actor=actor,
            action=AuditAction.RENTAL_EXTEND,
            obj=rental,
            reason=reason,
            changes={"days": days, "paid_until": period.ends_at, "resumed": resumed},
        )
        if resumed:
            _emit_rental(rental, "rental.active")
    return period


def _renewals_void(rental: Rental, *, reason: str, actor: Any = None) -> None:
    """Void the rental's open renewal invoices that nobody has paid. Whether one
    has a payment is decided under the invoice's lock (in invoice_void): a
    payment the watcher records between this listing and that lock keeps its
    invoice open, and the money becomes credit when it settles (renewal_apply),
    instead of failing the cancel or the termination."""
    for invoice in Invoice.objects.filter(
        renewal__rental=rental,
        renewal__kind__in=[RenewalKind.AUTO, RenewalKind.MANUAL],
        status__in=[InvoiceStatus.NEW, InvoiceStatus.EXPIRED],
    ):
        try:
            billing.invoice_void(invoice_id=invoice.pk, reason=reason, actor=actor)
        except Conflict as exc:  # invoice_has_payments, invoice_not_open: paid meanwhile
            log.info("rental %s: renewal invoice %s left open (%s)", rental.pk, invoice.number, exc.code)


def rental_cancel(*, rental_id: int, account: Account, now: datetime | None = None) -> Rental:
    """No more renewals: the rental runs to the end of its paid period, then ends.
    Audited (`rental.cancel`, and each voided renewal invoice) with the customer as actor."""
    now = now or timezone.now()
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id, account=account)
        if rental.status == RentalStatus.TERMINATED:
            raise Conflict("rental_terminated", "This rental has ended already.")
        if rental.cancelled_at is None:
            reason = "rental cancelled by the customer"
            auto_renew = rental.auto_renew
            rental.cancelled_at = now
            rental.auto_renew = False
            rental.save(update_fields=["cancelled_at", "auto_renew"])
            # Every open renewal is voided (money that still arrives becomes credit).
            _renewals_void(rental, reason=reason, actor=account)
            audit_record(
                actor=account,
                action=AuditAction.RENTAL_CANCEL,
                obj=rental,
                reason=reason,
                changes={"cancelled_at": [None, now], "auto_renew": [auto_renew, False]},
            )
    return rental


def rental_auto_renew_set(*, rental_id: int, account: Account, auto_renew: bool) -> Rental:
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id, account=account)
        if auto_renew and (rental.cancelled_at or rental.status == RentalStatus.TERMINATED):
            raise Conflict("rental_cancelled", "A cancelled or ended rental does not renew.")
        if rental.auto_renew != auto_renew:
            audit_record(
                actor=account,
                action=AuditAction.RENTAL_AUTO_RENEW_ON if auto_renew else AuditAction.RENTAL_AUTO_RENEW_OFF,
                obj=rental,
                reason="set by the customer",
                changes={"auto_renew": [rental.auto_renew, auto_renew]},
            )
        rental.auto_renew = auto_renew
        rental.save(update_fields=["auto_renew"])
    return rental


def rentals_auto_renew_off(*, account: Account, reason: str) -> int:
    """Every rental of the account stops renewing (inside the caller's
    transaction: the account is closing). Returns how many changed."""
    changed = 0
    for rental in Rental.objects.select_for_update().filter(account=account, auto_renew=True):
        rental.auto_renew = False
        rental.save(update_fields=["auto_renew"])
        audit_record(actor=account, action=AuditAction.RENTAL_AUTO_RENEW_OFF, obj=rental, reason=reason)
        changed += 1
    return changed


# --- Egress usage ------------------------------------------------------------------------


def _egress_price() -> tuple[int, Decimal]:
    addon = Addon.objects.filter(slug="egress-overage").first()
    if addon is None:
        return 20, Decimal("4.00")
    return addon.included_units, addon.monthly_usd


def usage_report(
    *, rental_id: int, month: date, egress_tb: Decimal, actor: Any, now: datetime | None = None
) -> UsageReport:
    """An operator reports a month's egress, once the month has ended, for a
    month the rental was handed over in (from its first hand-over to its end).
    Beyond the included allowance it is billed per TB once the month's
    correction window (USAGE_CORRECTION_DAYS) is over: on the next renewal
    invoice, or on its own invoice when the rental is ending. Until it is
    billed a report may be corrected."""
    now = now or timezone.now()
    month = month.replace(day=1)
    if egress_tb < 0:
        raise DomainError("invalid", "Egress cannot be negative.", details={"egress_tb": str(egress_tb)})
    included, price = _egress_price()
    overage_tb = max(Decimal(0), egress_tb - included)
    month_start, month_end = datetime(month.year, month.month, 1, tzinfo=UTC), _month_end(month)
    if month_end > now:
        raise Conflict(
            "usage_month_not_ended",
            f"{month:%Y-%m} has not ended: report its egress once it has.",
            details={"month": f"{month:%Y-%m}", "ends_at": month_end.isoformat()},
        )
    with transaction.atomic():
        rental = _rental_lock(rental_id=rental_id)
        if rental.active_at is None or not (
            month_start < (rental.terminated_at or now) and rental.active_at < month_end
        ):
            raise DomainError(
                "usage_month_outside_rental",
                f"Rental {rental.pk} was not running in {month:%Y-%m}.",
                details={
                    "month": f"{month:%Y-%m}",
                    "active_at": rental.active_at.isoformat() if rental.active_at else None,
                    "terminated_at": rental.terminated_at.isoformat() if rental.terminated_at else None,
                },
            )
        report = UsageReport.objects.select_for_update().filter(rental=rental, month=month).first()
        # Billed on an invoice that will never be paid: not billed (see _usage_unbilled), so still correctable.
        if (
            report is not None
            and report.billed_invoice_id
            and not UsageReport.objects.filter(_usage_unbilled(now=now), pk=report.pk).exists()
        ):
            raise Conflict(
                "usage_already_billed",
                "This month's usage is billed already.",
                details={"invoice": report.billed_invoice_id},
            )
        report = report or UsageReport(rental=rental, month=month)
        report.egress_tb = egress_tb
        report.overage_tb = overage_tb
        report.overage_usd = cents(overage_tb * price)
        report.reported_at = now
        report.reported_by = actor if getattr(actor, "pk", None) else None
        report.save()
        audit_record(
            actor=actor,
            action=AuditAction.RENTAL_USAGE,
            obj=rental,
            changes={"month": month.isoformat(), "egress_tb": str(egress_tb), "overage_usd": str(report.overage_usd)},
        )
        if report.overage_usd > 0 and _usage_invoice_if_ending(rental, now=now) is not None:
            report.refresh_from_db()
    return report


def _ending(rental: Rental) -> bool:
    return rental.cancelled_at is not None or rental.status in (RentalStatus.SUSPENDED, RentalStatus.TERMINATED)


def _usage_invoice_if_ending(rental: Rental, *, now: datetime) -> Renewal | None:
    """A rental that gets no more renewals has its due usage on its own invoice."""
    if not _ending(rental):
        return None
    lines, reports = _usage_lines(rental, now=now)
    if not lines:
        return None
    return _renewal_invoice(
        rental=rental,
        kind=RenewalKind.USAGE,
        terms=0,
        lines=lines,
        reports=reports,
        currency=None,
        payable_until=now + grace(),
        for_period_end=None,
        now=now,
    )


def rentals_usage_bill_due(*, now: datetime | None = None) -> int:
    """Usage of ending rentals whose correction window has closed since it was
    reported: each on its own invoice. Idempotent."""
    now = now or timezone.now()
    ids = (
        UsageReport.objects.filter(_usage_unbilled(now=now), overage_usd__gt=0)
        .filter(Q(rental__cancelled_at__isnull=False) | ~Q(rental__status=RentalStatus.ACTIVE))
        .values_list("rental_id", flat=True)
        .distinct()
    )

    def bill(rental_id: int) -> bool:
        with transaction.atomic():
            return _usage_invoice_if_ending(_rental_lock(rental_id=rental_id), now=now) is not None

    return _each_rental(ids, bill, job="usage billing")


# --- The periodic jobs ---------------------------------------------------------------------


def _each(ids: Iterable[int], step: Callable[[int], object], *, job: str, what: str = "row") -> int:
    """`step` for each id, each in its own transaction: one that fails (bad data,
    a bug) is logged and tried again at the next run, and never holds back the
    ones after it. How many steps did something."""
    done = 0
    for pk in list(ids):
        try:
            done += bool(step(pk))
        except Exception:
            log.exception("%s: %s %s failed; it is tried again at the next run", job, what, pk)
    return done


def _each_rental(ids: Iterable[int], step: Callable[[int], object], *, job: str) -> int:
    """_each over rentals: one that fails never holds back the rentals after it
    (whose renewals would otherwise not be issued, and which would then be
    suspended for an invoice they never got)."""
    return _each(ids, step, job=job, what="rental")


def rentals_renewals_issue(*, now: datetime | None = None) -> int:
    """Issue every automatic renewal that is due, and the usage invoices of
    ending rentals. Idempotent."""
    now = now or timezone.now()
    longest = max(renewal_lead("weekly"), renewal_lead("monthly"))
    ids = Rental.objects.filter(
        status=RentalStatus.ACTIVE,
        auto_renew=True,
        cancelled_at__isnull=True,
        paid_until__lte=now + longest,
    ).values_list("pk", flat=True)
    issued = _each_rental(
        ids, lambda rental_id: renewal_issue(rental_id=rental_id, now=now) is not None, job="renewals"
    )
    return issued + rentals_usage_bill_due(now=now)


def _ending_due(now: datetime) -> Q:
    """Cancelled, and its paid period over: it ends."""
    return Q(status__in=[RentalStatus.ACTIVE, RentalStatus.SUSPENDED], cancelled_at__isnull=False, paid_until__lte=now)


def _suspension_due(now: datetime) -> Q:
    """Unpaid past the end of its paid period plus the grace: suspended."""
    return Q(status=RentalStatus.ACTIVE, cancelled_at__isnull=True, paid_until__lte=now - grace())


def _termination_due(now: datetime) -> Q:
    """Suspended for too long (and, suspended early by staff, its paid time over): terminated."""
    return (Q(paid_until__isnull=True) | Q(paid_until__lte=now)) & Q(
        status=RentalStatus.SUSPENDED, suspended_at__lte=now - terminate_after()
    )


def _still_due(rental_id: int, due: Q) -> Rental | None:
    """The rental locked, if it is still due. The jobs list what is due, then act on
    each under its lock: a renewal paid between the two has moved `paid_until` on."""
    rental = _rental_lock(rental_id=rental_id)
    return rental if Rental.objects.filter(due, pk=rental_id).exists() else None


def rentals_suspend_due(*, now: datetime | None = None) -> int:
    """Unpaid past the end of the paid period plus the grace: suspended. A
    cancelled rental simply ends at the end of its paid period."""
    now = now or timezone.now()
    count = _each_rental(
        Rental.objects.filter(_ending_due(now)).values_list("pk", flat=True),
        lambda rental_id: _end_if_due(rental_id=rental_id, now=now),
        job="ending cancelled rentals",
    )
    return count + _each_rental(
        Rental.objects.filter(_suspension_due(now)).values_list("pk", flat=True),
        lambda rental_id: _suspend_if_due(rental_id=rental_id, now=now),
        job="suspensions",
    )


def _end_if_due(*, rental_id: int, now: datetime) -> Rental | None:
    with transaction.atomic():
        if _still_due(rental_id, _ending_due(now)) is None:
            return None
        return rental_terminate(rental_id=rental_id, reason="cancelled by the customer; paid period over", now=now)


def _suspend_if_due(*, rental_id: int, now: datetime) -> Rental | None:
    """Unpaid past its grace: suspended (powered off), unless a renewal of it is
    settled and about to be applied, or paid and confirming: then for at most
    ORDER_CONFIRMING_HOLD_MINUTES after the suspension was due (a transaction
    with too low a fee buys no day of unpaid running; a late confirmation
    resumes the rental, its lost time given back)."""
    with transaction.atomic():
        rental = _still_due(rental_id, _suspension_due(now))
        if rental is None:
            return None
        paying = _renewal_in_flight(rental)
        hold = timedelta(minutes=settings.ORDER_CONFIRMING_HOLD_MINUTES)
        assert rental.paid_until is not None  # _suspension_due lists paid periods only
        if paying is not None and (paying.status == InvoiceStatus.SETTLED or now < rental.paid_until + grace() + hold):
            log.info("rental %s not suspended: renewal %s is paid and %s", rental.pk, paying.number, paying.status)
            return None
        return rental_suspend(rental_id=rental_id, reason="unpaid: the paid period and its grace are over", now=now)


def _renewal_in_flight(rental: Rental) -> Invoice | None:
    """A renewal of `rental` that has been paid and is confirming, or settled and
    not applied yet (renewal_apply runs after the commit; the reconcile job
    behind it): the rental is about to be paid for."""
    applied = RentalPeriod.objects.filter(rental=rental, invoice__isnull=False).values("invoice_id")
    return (
        Invoice.objects.filter(renewal__rental=rental, renewal__kind__in=[RenewalKind.AUTO, RenewalKind.MANUAL])
        .filter(
            Q(status=InvoiceStatus.PROCESSING)
            | (Q(status=InvoiceStatus.SETTLED) & ~Q(pk__in=applied) & ~Q(credit_entries__kind=CreditKind.UNFULFILLED))
        )
        .first()
    )


def _terminate_if_due(*, rental_id: int, now: datetime) -> Rental | None:
    """Suspended unpaid for too long: terminated (wiped), unless a renewal of it
    is settled and about to be applied, or paid and confirming: then for at most
    ORDER_CONFIRMING_HOLD_MINUTES after the termination was due. Held for as long
    as a payment confirmed, renewals paid with too low a fee, one after another,
    kept the host's GPUs out of stock for good; a payment that confirms after the
    termination is credited back."""
    with transaction.atomic():
        rental = _still_due(rental_id, _termination_due(now))
        if rental is None:
            return None
        paying = _renewal_in_flight(rental)
        hold = timedelta(minutes=settings.ORDER_CONFIRMING_HOLD_MINUTES)
        assert rental.suspended_at is not None  # _termination_due lists suspended rentals only
        due_at = max(rental.suspended_at + terminate_after(), rental.paid_until or rental.suspended_at)
        if paying is not None and (paying.status == InvoiceStatus.SETTLED or now < due_at + hold):
            log.info("rental %s not terminated: renewal %s is paid and %s", rental.pk, paying.number, paying.status)
            return None
        return rental_terminate(rental_id=rental_id, reason="unpaid: suspended for too long", now=now)


def rentals_terminate_due(*, now: datetime | None = None) -> int:
    now = now or timezone.now()
    # A rental staff suspended while it still had paid time ends only once that time is over.
    return _each_rental(
        Rental.objects.filter(_termination_due(now)).values_list("pk", flat=True),
        lambda rental_id: _terminate_if_due(rental_id=rental_id, now=now),
        job="terminations",
    )


def orders_reconcile(*, now: datetime | None = None) -> int:
    """What signals may have missed (a worker died between a commit and its
    receiver): expired reservations released, settled orders and renewals
    fulfilled; and the GPUs of orders whose payment is still unconfirmed
    ORDER_CONFIRMING_HOLD_MINUTES after the quote ended, released. Idempotent."""
    from rentals.services.orders import order_expire, order_release_confirming

    now = now or timezone.now()
    lapsed = Order.objects.filter(
        status=OrderStatus.AWAITING_PAYMENT, invoice__status__in=[InvoiceStatus.EXPIRED, InvoiceStatus.INVALID]
    )
    confirming = Order.objects.filter(
        status=OrderStatus.AWAITING_PAYMENT,
        invoice__status=InvoiceStatus.PROCESSING,
        invoice__expires_at__lte=now - timedelta(minutes=settings.ORDER_CONFIRMING_HOLD_MINUTES),
    )
    settled = Order.objects.filter(
        Q(status=OrderStatus.AWAITING_PAYMENT) | Q(status=OrderStatus.EXPIRED), invoice__status=InvoiceStatus.SETTLED
    )
    renewals = (
        Renewal.objects.filter(invoice__status=InvoiceStatus.SETTLED)
        .exclude(kind=RenewalKind.USAGE)
        .exclude(invoice__credit_entries__kind=CreditKind.UNFULFILLED)
        .exclude(invoice_id__in=RentalPeriod.objects.filter(invoice__isnull=False).values("invoice_id"))
    )
    # Each row on its own (_each): one that fails is logged and holds back none after it.
    return (
        _each(lapsed.values_list("pk", flat=True), lambda pk: order_expire(order_id=pk, now=now), job="expiry")
        + _each(
            confirming.values_list("pk", flat=True),
            lambda pk: order_release_confirming(order_id=pk, now=now),
            job="holds of unconfirmed payments",
        )
        + _each(
            settled.values_list("pk", flat=True),
            lambda pk: rental_from_order(order_id=pk, now=now),
            job="rentals from settled orders",
        )
        + _each(
            renewals.values_list("invoice_id", flat=True),
            lambda pk: renewal_apply(invoice_id=pk, now=now),
            job="settled renewals",
        )
    )
