"""Receivers of billing's signals (billing never imports rentals).

They run after billing's transaction has committed. A receiver that fails is
logged and left to `orders_reconcile` (a periodic job), so a payment is never
lost between a commit and the work that follows it.
"""

from __future__ import annotations

import logging

from django.dispatch import receiver

from billing import signals as billing_signals
from billing.models import Invoice

log = logging.getLogger(__name__)


def _kind(subject: str) -> str:
    if subject.startswith("order:"):
        return "order"
    if subject.startswith("rental:"):
        return "renewal"
    return ""


def _invoice_webhook(invoice_id: int, event: str) -> None:
    from django.db import transaction

    from rentals.events import invoice_event_data, webhook_emit

    invoice = Invoice.objects.filter(pk=invoice_id).select_related("account").first()
    if invoice is not None:
        with transaction.atomic():
            webhook_emit(account=invoice.account, type=event, data=lambda: invoice_event_data(invoice))


def _attempt(what: str, fn, *args, **kwargs) -> None:
    """Each step on its own: a failing webhook never holds back fulfilment."""
    try:
        fn(*args, **kwargs)
    except Exception:
        log.exception("%s failed; orders_reconcile (or the webhook sweep) will retry", what)


@receiver(billing_signals.invoice_settled, dispatch_uid="rentals.invoice_settled")
def on_invoice_settled(sender, invoice_id: int, subject: str, **kwargs) -> None:
    from rentals.services import renewal_apply, rental_from_order

    _attempt(f"invoice.settled webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.settled")
    kind = _kind(subject)
    if kind == "order":
        _attempt(f"fulfilling {subject}", rental_from_order, order_id=int(subject.split(":")[1]))
    elif kind == "renewal":
        _attempt(f"applying renewal invoice {invoice_id}", renewal_apply, invoice_id=invoice_id)


@receiver(billing_signals.invoice_expired, dispatch_uid="rentals.invoice_expired")
def on_invoice_expired(sender, invoice_id: int, subject: str, **kwargs) -> None:
    from rentals.services import order_expire

    _attempt(f"invoice.expired webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.expired")
    if _kind(subject) == "order":
        _attempt(f"releasing {subject}", order_expire, order_id=int(subject.split(":")[1]))


@receiver(billing_signals.invoice_invalid, dispatch_uid="rentals.invoice_invalid")
def on_invoice_invalid(sender, invoice_id: int, subject: str, **kwargs) -> None:
    from rentals.services import order_expire

    if _kind(subject) == "order":
        _attempt(f"releasing {subject}", order_expire, order_id=int(subject.split(":")[1]))


@receiver(billing_signals.invoice_processing, dispatch_uid="rentals.invoice_processing")
def on_invoice_processing(sender, invoice_id: int, subject: str, **kwargs) -> None:
    _attempt(f"invoice.processing webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.processing")
