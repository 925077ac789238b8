"""What every billing service module shares: who acts when no account does,
the settings that shape an invoice's windows, the invoice's lock and its
state write (with the signal on commit)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal

from billing import signals
from billing.models import Invoice, InvoiceException, InvoiceStatus
from billing.payable import Payable, payable_notify
from core.db import locked_or_404
from core.errors import DomainError

log = logging.getLogger("billing.services")

# Who the audit trail names when no account acts: the system's own jobs, and
# whoever holds an invoice's checkout link (the payer need not log in).
SYSTEM_ACTOR = "system"
CHECKOUT_ACTOR = "checkout page"


def confirmations_required(*, currency: str) -> int:
    return int(settings.CONFIRMATIONS[currency])


def tolerance() -> Fraction:
    return Fraction(str(settings.INVOICE_UNDERPAYMENT_TOLERANCE_PCT)) / 100


def expiry_window() -> timedelta:
    return timedelta(minutes=settings.INVOICE_EXPIRY_MINUTES)


def monitoring_window() -> timedelta:
    return timedelta(hours=settings.INVOICE_MONITORING_HOURS)


def currency_enabled(currency: str) -> str:
    from billing.chains.config import currency_enabled_code

    return currency_enabled_code(currency)


def reason_required(reason: str) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise DomainError("reason_required", "Say why: a reason is required.")
    return reason


def invoice_lock(*, invoice_id: int, account: Any = None) -> Invoice:
    """The invoice, locked; a customer's (`account`) own invoices only."""
    invoices = Invoice.objects.all() if account is None else Invoice.objects.filter(account=account)
    return locked_or_404(invoices, pk=invoice_id, message="No such invoice.")


def invoice_transition(*, invoice: Invoice, status: str, exception: str, now: datetime, via: str) -> None:
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
            on_commit_send(signal, invoice, late=exception == InvoiceException.PAID_LATE)


def on_commit_send(signal: Signal, invoice: Invoice, **extra: Any) -> None:
    """After the commit: `signal` (its receivers: the invoice's webhooks), then
    the callback of the invoice's Payable that the change calls for (settled,
    closed unpaid, quoted anew), each on its own (billing.payable.payable_notify)."""
    invoice_id, kind, subject_id = invoice.pk, invoice.subject_kind, invoice.subject_id
    call = _payable_call(signal, invoice_id=invoice_id, subject_id=subject_id, **extra)

    def deliver() -> None:
        # A receiver that raises is logged and holds back neither the others, nor what the
        # invoice pays for, nor the other callbacks of the commit (robust: the caller's work
        # is committed already and must not answer an error for it).
        for receiver, result in signal.send_robust(
            sender=Invoice, invoice_id=invoice_id, subject_kind=kind, subject_id=subject_id, **extra
        ):
            if isinstance(result, Exception):
                log.error("invoice %s: %s receiver %r failed: %r", invoice_id, signal, receiver, result)
        if call is not None:
            payable_notify(call[0], call[1], invoice_id=invoice_id, kind=kind)

    transaction.on_commit(deliver, robust=True)


def _payable_call(
    signal: Signal, *, invoice_id: int, subject_id: int, **extra: Any
) -> tuple[str, Callable[[Payable], None]] | None:
    """Which callback of the Payable a signal calls for, with its arguments."""
    if signal is signals.invoice_settled:
        late = bool(extra.get("late"))
        return "on_settled", lambda p: p.on_settled(invoice_id=invoice_id, subject_id=subject_id, late=late)
    if signal is signals.invoice_expired or signal is signals.invoice_invalid:
        status = InvoiceStatus.EXPIRED if signal is signals.invoice_expired else InvoiceStatus.INVALID
        return "on_expired", lambda p: p.on_expired(invoice_id=invoice_id, subject_id=subject_id, status=status)
    if signal is signals.invoice_quoted:
        currency = str(extra["currency"])
        return "on_quoted", lambda p: p.on_quoted(invoice_id=invoice_id, subject_id=subject_id, currency=currency)
    return None
