"""What every billing service module shares: who acts when no account does,
the settings that shape an invoice's windows, the invoice's lock and its
state write (with the signal on commit)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db import transaction
from django.dispatch import Signal

from billing import signals
from billing.models import Invoice, InvoiceException, InvoiceStatus
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
    invoice_id, subject = invoice.pk, invoice.subject
    transaction.on_commit(lambda: signal.send(sender=Invoice, invoice_id=invoice_id, subject=subject, **extra))
