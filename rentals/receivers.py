"""Receivers of other apps' signals (billing and accounts never import rentals).

Billing's send the invoices' webhooks, after billing's transaction has
committed; what an invoice pays for is told through its Payable
(rentals.payables), not here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.dispatch import receiver

from accounts.models import Account
from accounts.signals import account_closing, account_deactivated
from billing import signals as billing_signals
from billing.models import Invoice
from rentals.events import invoice_event_emit
from rentals.models import IdempotencyKey
from rentals.services import account_unpaid_orders_release, rentals_auto_renew_off

log = logging.getLogger(__name__)


def _invoice_webhook(invoice_id: int, event: str) -> None:
    invoice = Invoice.objects.filter(pk=invoice_id).select_related("account").first()
    if invoice is not None:
        with transaction.atomic():
            invoice_event_emit(invoice=invoice, type=event)


def _attempt(what: str, fn: Callable[..., object], *args: Any, **kwargs: Any) -> None:
    """A failing webhook never holds back fulfilment (billing calls the
    invoice's Payable after these receivers)."""
    try:
        fn(*args, **kwargs)
    except Exception:
        log.exception("%s failed; the webhook sweep will retry", what)


@receiver(billing_signals.invoice_settled, dispatch_uid="rentals.invoice_settled")
def on_invoice_settled(sender: Any, invoice_id: int, **kwargs: Any) -> None:
    _attempt(f"invoice.settled webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.settled")


@receiver(billing_signals.invoice_expired, dispatch_uid="rentals.invoice_expired")
def on_invoice_expired(sender: Any, invoice_id: int, **kwargs: Any) -> None:
    _attempt(f"invoice.expired webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.expired")


@receiver(billing_signals.invoice_processing, dispatch_uid="rentals.invoice_processing")
def on_invoice_processing(sender: Any, invoice_id: int, **kwargs: Any) -> None:
    _attempt(f"invoice.processing webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.processing")


@receiver(account_closing, dispatch_uid="rentals.account_closing")
def on_account_closing(sender: Any, account: Account, **kwargs: Any) -> None:
    """Remembered responses to Idempotency-Key requests go with the
    account, its rentals stop renewing (each runs to the end of its paid
    period) and its unpaid orders are cancelled, so the GPUs they hold go back
    to stock at once. Orders and rentals stay: they name the account, which is
    then kept (deactivated) rather than deleted."""
    IdempotencyKey.objects.filter(account=account).delete()
    rentals_auto_renew_off(account=account, reason="account closed")
    account_unpaid_orders_release(account=account, reason="account closed")


@receiver(account_deactivated, dispatch_uid="rentals.account_deactivated")
def on_account_deactivated(sender: Any, account: Account, actor: Any, **kwargs: Any) -> None:
    """Staff switched the account off: its unpaid orders let their GPUs go."""
    account_unpaid_orders_release(account=account, reason="account deactivated", actor=actor)
