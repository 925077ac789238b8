"""Reads for orders and rentals."""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, QuerySet

from accounts.models import Account
from billing import selectors as billing_selectors
from core.errors import NotFound
from rentals.models import Order, Rental, RentalStatus


def orders_for(*, account: Account | int) -> QuerySet[Order]:
    """The account's orders (`account`: the account or its id), their invoices read along."""
    return (
        Order.objects.filter(account=account)
        .select_related("invoice", "rental")
        .prefetch_related("lines", *billing_selectors.invoice_prefetches("invoice__"))
        .order_by("-created_at", "-id")
    )


def order_get(*, account: Account, order_id: int) -> Order:
    order = orders_for(account=account).filter(pk=order_id).first()
    if order is None:
        raise NotFound("No such order.")
    return order


def rentals_for(*, account: Account | int) -> QuerySet[Rental]:
    """The account's rentals (`account`: the account or its id)."""
    return (
        Rental.objects.filter(account=account)
        .select_related("order")
        .prefetch_related("periods", "renewals__invoice__requests")
        .order_by("-created_at", "-id")
    )


def rental_get(*, account: Account, rental_id: int) -> Rental:
    rental = rentals_for(account=account).filter(pk=rental_id).first()
    if rental is None:
        raise NotFound("No such rental.")
    return rental


def provisioning_times(*, since: datetime) -> list[int]:
    """Seconds from payment (invoice settled) to hand-over (active) of the
    rentals handed over since `since`, shortest first."""
    seconds = (
        Rental.objects.filter(active_at__gte=since, provisioning_seconds__isnull=False)
        .order_by("provisioning_seconds")
        .values_list("provisioning_seconds", flat=True)
    )
    return [s for s in seconds if s is not None]  # none is: the filter says so, the type does not


def rentals_by_status() -> dict[str, int]:
    """How many rentals are in each status (statuses with none are absent)."""
    return dict(Rental.objects.values_list("status").annotate(n=Count("id")))


def provisioning_queue(*, limit: int = 50) -> list[Rental]:
    """Paid rentals waiting for hand-over, longest waiting first."""
    return list(
        Rental.objects.filter(status=RentalStatus.PROVISIONING)
        .select_related("account", "host")
        .order_by("settled_at")[:limit]
    )
