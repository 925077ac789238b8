"""Staff corrections, each with a reason and an audit row: a payment recorded
by hand, an invoice marked settled or invalid, an unpaid invoice voided, a
stray transfer reviewed."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from fractions import Fraction
from typing import Any

from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from billing import machine
from billing.currencies import currency_get
from billing.models import (
    Invoice,
    InvoiceException,
    InvoiceStatus,
    Payment,
    PaymentDisposition,
    PaymentStatus,
    StrayTransfer,
)
from billing.selectors import invoice_has_payments, payments_fraction
from billing.services.common import SYSTEM_ACTOR, invoice_lock, invoice_transition, reason_required
from billing.services.payments import Observation, invoice_advance, payment_observe
from core.audit import AuditAction, audit_record
from core.errors import Conflict, DomainError, NotFound
from core.fields import BaseUnitsModelField

# A payment's USD value is numeric(14, 2): what is worth this much or more cannot be stored.
PAYMENT_USD_LIMIT = Decimal(10) ** 12


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
    reason = reason_required(reason)
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
    if amount <= 0 or amount > BaseUnitsModelField.MAX or confirmations < 0 or not txid.strip():
        raise DomainError(
            "invalid", "A payment needs a transaction id, a positive amount (below 2^256) and confirmations >= 0."
        )
    if Decimal(amount) * request.rate_usd / currency_get(request.currency).scale >= PAYMENT_USD_LIMIT:
        raise DomainError(
            "invalid", f"{amount} is worth more than any payment can hold: check the amount and its unit."
        )
    from billing.chains.config import manual_position, manual_txid

    # As the currency's watcher writes it (hex: lower case, 0x on Ethereum only; base58 as typed).
    txid = manual_txid(currency=request.currency, txid=txid)
    position = manual_position(currency=request.currency, index=output_index)
    with transaction.atomic():
        invoice_lock(invoice_id=invoice.pk)  # as a watcher recording the same transaction would
        # The same transaction to the same quote for the same amount at another position
        # (another output index typed, or what the watcher recorded as a call or a balance)
        # is that transfer again, and would count twice.
        elsewhere = sorted(
            Payment.objects.filter(invoice=invoice, txid=txid, request=request, amount=amount)
            .exclude(position=position)
            .values_list("position", flat=True)
        )
        if elsewhere:
            raise Conflict(
                "payment_recorded_already",
                f"Transaction {txid} is recorded on {invoice_number} already, at {', '.join(elsewhere)}: "
                "record it at that position to update it.",
                details={"txid": txid, "positions": elsewhere},
            )
        # A watcher that saw this quote receive the amount without knowing the transaction
        # (Ethereum's balance mode: its txid is the block's hash) recorded this transfer
        # already; the other way round, its sighting takes over the one staff recorded.
        seen = (
            Payment.objects.filter(request=request, amount=amount, source="watcher", txid=F("block_hash"))
            .exclude(status=PaymentStatus.REMOVED)
            .exclude(txid=txid)
            .order_by("id")
            .first()
        )
        if seen is not None:
            raise Conflict(
                "payment_recorded_already",
                f"The watcher recorded {amount} to this quote of {invoice_number} already, seen as a balance change in "
                f"block {seen.block_hash} (it does not know the transaction): that is this transfer, and it "
                "confirms there.",
                details={"txid": seen.txid, "positions": [seen.position]},
            )
        # The transfer recorded already at this position: staff update it, on its own invoice,
        # audited; one the chain dropped (replaced, double spent, orphaned) is not theirs to revive.
        existing = Payment.objects.filter(
            chain=currency_get(request.currency).chain, txid=txid, position=position
        ).first()
        if existing is not None and existing.invoice_id != invoice.pk:
            raise Conflict(
                "payment_recorded_already",
                f"Transaction {txid} at {position} is recorded on invoice {existing.invoice.number}, not on "
                f"{invoice_number}.",
                details={"txid": txid, "positions": [position], "invoice": existing.invoice.number},
            )
        if existing is not None and existing.status == PaymentStatus.REMOVED:
            raise Conflict(
                "payment_removed",
                f"Transaction {txid} was un-counted: {existing.removal_reason or 'it left the chain'}. A watcher counts "
                "it again if it comes back; check the chain.",
                details={"txid": txid, "positions": [position], "removal_reason": existing.removal_reason},
            )
        payment = payment_observe(
            observation=Observation(
                currency=request.currency,
                txid=txid,
                output_index=output_index,
                position=position,
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
        if existing is not None:
            audit_record(
                actor=actor,
                action=AuditAction.PAYMENT_RECORD,
                obj=payment,
                reason=reason,
                changes={"txid": txid, "amount": amount, "confirmations": [existing.confirmations, confirmations]},
            )
    return payment


@transaction.atomic
def invoice_mark_settled(*, invoice_id: int, actor: Any, reason: str, now: datetime | None = None) -> Invoice:
    reason = reason_required(reason)
    now = now or timezone.now()
    invoice = invoice_lock(invoice_id=invoice_id)
    if invoice.status == InvoiceStatus.SETTLED:
        raise Conflict("invoice_settled", "This invoice is settled already.")
    before = invoice.status
    credited = (
        invoice.payments.exclude(status=PaymentStatus.REMOVED)
        .filter(disposition=PaymentDisposition.CREDITED)
        .aggregate(total=Sum("amount_usd"))["total"]
    )
    if credited:
        # Paid after its window (or on an invoice closed), its money is the customer's
        # credit already: settled now, it would be delivered and kept as credit too.
        raise Conflict(
            "payments_credited",
            f"What this invoice received became the customer's credit ({credited} USD): marked settled, it "
            "would be paid for twice. The customer can order again and pay with that credit.",
            details={"credited_usd": str(credited)},
        )
    # What it received is taken as its payment, confirmed or still confirming: one confirming
    # now, credited whole when it confirms, would be paid out on top of what staff settled.
    held = invoice.payments.exclude(status=PaymentStatus.REMOVED).filter(disposition=PaymentDisposition.OPEN)
    excess = payments_fraction(invoice=invoice, payments=list(held.select_related("request"))) - 1
    can_settle = invoice.status in (InvoiceStatus.NEW, InvoiceStatus.PROCESSING) or (
        invoice.status == InvoiceStatus.EXPIRED and now < invoice.monitoring_until
    )
    if can_settle and excess >= machine.over_min_for(total_usd=Fraction(invoice.total_usd)):
        # More than the total sent, while the invoice can still settle by itself: taken as
        # its payment, the excess would be lost; credited now, it would be spendable out of
        # a transaction that may still be replaced. Once confirmed, the invoice settles by
        # itself and credits the excess. (Past its window it cannot: staff may mark it.)
        raise Conflict(
            "overpayment_confirming",
            "More than the invoice was sent and it is still confirming: wait for its confirmations "
            "(the invoice then settles by itself and credits the excess).",
        )
    held.update(disposition=PaymentDisposition.APPLIED)
    invoice_transition(
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
    reason = reason_required(reason)
    now = now or timezone.now()
    invoice = invoice_lock(invoice_id=invoice_id)
    if invoice.status in (InvoiceStatus.SETTLED, InvoiceStatus.INVALID):
        raise Conflict("invoice_closed", f"This invoice is {invoice.status} already.")
    before = invoice.status
    invoice_transition(
        invoice=invoice, status=InvoiceStatus.INVALID, exception=InvoiceException.MARKED, now=now, via="staff"
    )
    invoice_advance(invoice=invoice, now=now)  # confirmed money on it becomes credit
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
    reason = reason_required(reason)
    now = now or timezone.now()
    invoice = invoice_lock(invoice_id=invoice_id)
    if invoice.status not in (InvoiceStatus.NEW, InvoiceStatus.EXPIRED):
        raise Conflict("invoice_not_open", f"This invoice is {invoice.status}.", details={"status": invoice.status})
    if invoice_has_payments(invoice=invoice):
        raise Conflict("invoice_has_payments", "This invoice received a payment; it cannot be voided.")
    return _void(invoice=invoice, reason=reason, actor=actor, now=now)


def _void(*, invoice: Invoice, reason: str, actor: Any, now: datetime) -> Invoice:
    """A locked invoice made invalid, audited (`invoice.void`); anything confirmed
    and still open on it becomes credit, as on any invalid invoice."""
    before = invoice.status
    invoice_transition(invoice=invoice, status=InvoiceStatus.INVALID, exception=invoice.exception, now=now, via="")
    if before == InvoiceStatus.EXPIRED:
        invoice_advance(invoice=invoice, now=now)
    audit_record(
        actor=actor if actor is not None else SYSTEM_ACTOR,
        action=AuditAction.INVOICE_VOID,
        obj=invoice,
        reason=reason,
        changes={"status": [before, invoice.status]},
    )
    return invoice


@transaction.atomic
def invoice_void_lapsed(
    *, invoice_id: int, reason: str, now: datetime | None = None, inside_window: bool = False
) -> Invoice:
    """Close an expired invoice whose monitoring window has ended, paid or not
    (what arrived became credit when the window closed), so that it can no
    longer be re-quoted: what it billed is being billed again on another
    invoice (a renewal's egress usage). `inside_window`: also while its window
    is open (what arrived and confirmed becomes credit now, what arrives later
    is credited as on any invalid invoice). One already invalid is left as it
    is; any other state is refused (`invoice_not_lapsed`: paid or re-quoted
    meanwhile, or a payment to it seen inside its window and still open: it
    may yet settle it)."""
    reason = reason_required(reason)
    now = now or timezone.now()
    invoice = invoice_lock(invoice_id=invoice_id)
    if invoice.status == InvoiceStatus.INVALID:
        return invoice
    confirming = (
        now < invoice.monitoring_until
        and invoice.payments.exclude(status=PaymentStatus.REMOVED).filter(disposition=PaymentDisposition.OPEN).exists()
    )
    if invoice.status != InvoiceStatus.EXPIRED or (now < invoice.monitoring_until and not inside_window) or confirming:
        raise Conflict(
            "invoice_not_lapsed",
            f"{invoice.number} is {invoice.status} and may still be paid.",
            details={"status": invoice.status, "monitoring_until": invoice.monitoring_until.isoformat()},
        )
    return _void(invoice=invoice, reason=reason, actor=None, now=now)


@transaction.atomic
def stray_transfer_review(*, stray_id: int, actor: Any, reason: str, now: datetime | None = None) -> StrayTransfer:
    """Staff looked at a stray (refunded it from outside, or decided to keep it): say so, with why."""
    reason = reason_required(reason)
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
