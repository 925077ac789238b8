"""Receivers of other apps' signals (billing and accounts never import rentals).

Billing's run after billing's transaction has committed. A receiver that
fails is logged and left to `orders_reconcile` (a periodic job), so a payment
is never lost between a commit and the work that follows it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.dispatch import receiver

from accounts.models import Account
from accounts.signals import account_closing, account_deactivated
from billing import selectors as billing_selectors
from billing import services as billing_services
from billing import signals as billing_signals
from billing.models import Invoice
from core.money import usd_str
from rentals.events import invoice_event_emit
from rentals.models import IdempotencyKey, Order, OrderStatus
from rentals.services import (
    account_unpaid_orders_release,
    order_expire,
    renewal_apply,
    rental_from_order,
    rentals_auto_renew_off,
)

log = logging.getLogger(__name__)


def _kind(subject: str) -> str:
    if subject.startswith("order:"):
        return "order"
    if subject.startswith("rental:"):
        return "renewal"
    return ""


def _invoice_webhook(invoice_id: int, event: str) -> None:
    invoice = Invoice.objects.filter(pk=invoice_id).select_related("account").first()
    if invoice is not None:
        with transaction.atomic():
            invoice_event_emit(invoice=invoice, type=event)


def _attempt(what: str, fn: Callable[..., object], *args: Any, **kwargs: Any) -> None:
    """Each step on its own: a failing webhook never holds back fulfilment."""
    try:
        fn(*args, **kwargs)
    except Exception:
        log.exception("%s failed; orders_reconcile (or the webhook sweep) will retry", what)


@receiver(billing_signals.invoice_settled, dispatch_uid="rentals.invoice_settled")
def on_invoice_settled(sender: Any, invoice_id: int, subject: str, **kwargs: Any) -> None:
    _attempt(f"invoice.settled webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.settled")
    kind = _kind(subject)
    if kind == "order":
        _attempt(f"fulfilling {subject}", rental_from_order, order_id=int(subject.split(":")[1]))
    elif kind == "renewal":
        _attempt(f"applying renewal invoice {invoice_id}", renewal_apply, invoice_id=invoice_id)


def _close_reason(invoice: Invoice) -> str:
    """Why an order closed with its invoice, saying what arrived when something did."""
    progress = billing_selectors.invoice_progress(invoice=invoice)
    arrived = progress["counted_usd"] + progress["credited_usd"]
    if arrived <= 0:
        return f"invoice {invoice.status} unpaid"
    paid = f"invoice {invoice.status} with {usd_str(arrived)} of {usd_str(invoice.total_usd)} USD paid"
    if progress["credit_at"] is not None:
        return (
            f"{paid}; what arrived becomes account credit at {progress['credit_at']:%Y-%m-%d %H:%M} UTC "
            "unless a fresh quote for the rest is paid"
        )
    return f"{paid}; what arrived becomes (or became) account credit"


def _order_release(order_id: int, invoice_id: int) -> None:
    """The order's slots go back to stock; its close reason says what arrived."""
    order = order_expire(order_id=order_id)
    if order is None or order.status != OrderStatus.EXPIRED or order.invoice_id != invoice_id:
        return
    invoice = Invoice.objects.filter(pk=invoice_id).prefetch_related(*billing_selectors.invoice_prefetches()).first()
    if invoice is not None:
        reason = _close_reason(invoice)[:200]
        Order.objects.filter(pk=order_id, status=OrderStatus.EXPIRED).exclude(close_reason=reason).update(
            close_reason=reason
        )


@receiver(billing_signals.invoice_expired, dispatch_uid="rentals.invoice_expired")
def on_invoice_expired(sender: Any, invoice_id: int, subject: str, **kwargs: Any) -> None:
    _attempt(f"invoice.expired webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.expired")
    if _kind(subject) == "order":
        _attempt(f"releasing {subject}", _order_release, int(subject.split(":")[1]), invoice_id)


@receiver(billing_signals.invoice_invalid, dispatch_uid="rentals.invoice_invalid")
def on_invoice_invalid(sender: Any, invoice_id: int, subject: str, **kwargs: Any) -> None:
    if _kind(subject) == "order":
        _attempt(f"releasing {subject}", _order_release, int(subject.split(":")[1]), invoice_id)


@receiver(billing_signals.invoice_quoted, dispatch_uid="rentals.invoice_quoted")
def on_invoice_quoted(sender: Any, invoice_id: int, subject: str, currency: str, **kwargs: Any) -> None:
    """An order shows the currency its invoice is quoted in now (a currency
    switch or a fresh quote changes it); renewals read it from the invoice."""
    if _kind(subject) == "order":
        _attempt(
            f"the pay currency of {subject}", _order_currency_follow, int(subject.split(":")[1]), invoice_id, currency
        )


def _order_currency_follow(order_id: int, invoice_id: int, currency: str) -> None:
    Order.objects.filter(pk=order_id, invoice_id=invoice_id).exclude(pay_currency=currency).update(
        pay_currency=currency
    )


@receiver(billing_signals.invoice_processing, dispatch_uid="rentals.invoice_processing")
def on_invoice_processing(sender: Any, invoice_id: int, subject: str, **kwargs: Any) -> None:
    _attempt(f"invoice.processing webhook of {invoice_id}", _invoice_webhook, invoice_id, "invoice.processing")


@receiver(account_closing, dispatch_uid="rentals.account_closing")
def on_account_closing(sender: Any, account: Account, **kwargs: Any) -> None:
    """Billing refuses while the account holds credit (account_has_credit).
    Otherwise remembered responses to Idempotency-Key requests go with the
    account, its rentals stop renewing (each runs to the end of its paid
    period) and its unpaid orders are cancelled, so the GPUs they hold go back
    to stock at once. Orders and rentals stay: they name the account, which is
    then kept (deactivated) rather than deleted."""
    billing_services.account_closing_check(account_id=account.pk)
    IdempotencyKey.objects.filter(account=account).delete()
    rentals_auto_renew_off(account=account, reason="account closed")
    account_unpaid_orders_release(account=account, reason="account closed")


@receiver(account_deactivated, dispatch_uid="rentals.account_deactivated")
def on_account_deactivated(sender: Any, account: Account, actor: Any, **kwargs: Any) -> None:
    """Staff switched the account off: its unpaid orders let their GPUs go."""
    account_unpaid_orders_release(account=account, reason="account deactivated", actor=actor)
