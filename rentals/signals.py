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
            webhook_emit(account=invoice.account, type=event, data=invoice_event_data(invoice))


@receiver(billing_signals.invoice_settled, dispatch_uid="rentals.invoice_settled")
def on_invoice_settled(sender, invoice_id: int, subject: str, **kwargs) -> None:
    from rentals.services import rental_from_order, renewal_apply

    try:
        _invoice_webhook(invoice_id, "invoice.settled")
        kind = _kind(subject)
        if kind == "order":
            rental_from_order(order_id=int(subject.split(":")[1]))
        elif kind == "renewal":
            renewal_apply(invoice_id=invoice_id)
    except Exception:
        log.exception("after invoice %s settled (%s); orders_reconcile will retry", invoice_id, subject)


@receiver(billing_signals.invoice_expired, dispatch_uid="rentals.invoice_expired")
def on_invoice_expired(sender, invoice_id: int, subject: str, **kwargs) -> None:
    from rentals.services import order_expire

    try:
        _invoice_webhook(invoice_id, "invoice.expired")
        if _kind(subject) == "order":
            order_expire(order_id=int(subject.split(":")[1]))
    except Exception:
        log.exception("after invoice %s expired (%s); orders_reconcile will retry", invoice_id, subject)


@receiver(billing_signals.invoice_processing, dispatch_uid="rentals.invoice_processing")
def on_invoice_processing(sender, invoice_id: int, subject: str, **kwargs) -> None:
    try:
        _invoice_webhook(invoice_id, "invoice.processing")
    except Exception:
        log.exception("webhook for invoice %s processing failed", invoice_id)
