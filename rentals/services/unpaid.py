"""What an account may hold unpaid, and letting it go.

An unpaid order holds its GPUs for as long as its invoice can be paid (the
rate lock). Without a cap one fresh account could reserve a region's whole
stock of a card and keep others from it for free, so an account may hold at
most UNPAID_ORDERS_MAX orders and UNPAID_GPUS_MAX GPUs unpaid at once; an
account that has paid for an order before gets the higher
UNPAID_ORDERS_MAX_PAID and UNPAID_GPUS_MAX_PAID. Over the cap the order is
refused with 409 `unpaid_limit`, whose details carry the numbers. A closed or
deactivated account's unpaid orders are cancelled at once, so their GPUs go
back to stock.
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import connection, transaction

from accounts.models import Account
from core.errors import Conflict
from rentals.models import Order, OrderStatus

log = logging.getLogger(__name__)


def _held(*, account: Any, lock: bool, besides: int | None = None) -> tuple[int, int, bool]:
    """(unpaid orders, their GPUs, whether it has paid before) of the account.
    `lock`: the account row is locked first (FOR UPDATE), so concurrent orders of
    one account are counted one after the other. Two statements, not one: a
    statement that waited for the lock reads the orders as they were when it
    began, and would miss the order of the transaction it waited for.
    `besides`: an order not to count (the one being placed)."""
    accounts = connection.ops.quote_name(Account._meta.db_table)
    orders = connection.ops.quote_name(Order._meta.db_table)
    with connection.cursor() as cursor:
        if lock and connection.features.has_select_for_update:
            cursor.execute(f"SELECT id FROM {accounts} WHERE id = %s FOR UPDATE", [account.pk])
        # Both halves read the (account, status) index for what they need only:
        # the unpaid orders (at most the cap) and whether one paid order exists,
        # never the account's whole history of orders.
        cursor.execute(
            f"SELECT count(*), sum(gpu_count), EXISTS (SELECT 1 FROM {orders} WHERE account_id = %s "
            f"AND status IN (%s, %s)) FROM {orders} WHERE account_id = %s AND status = %s AND id <> %s",
            [
                account.pk,
                OrderStatus.PAID,
                OrderStatus.UNFULFILLED,
                account.pk,
                OrderStatus.AWAITING_PAYMENT,
                besides or 0,
            ],
        )
        unpaid, gpus, paid = cursor.fetchone()
    return unpaid or 0, int(gpus or 0), bool(paid)


def unpaid_limits(*, account: Any, lock: bool = False, besides: int | None = None) -> dict[str, Any]:
    """The caps that apply to the account, and what it holds unpaid now (leaving
    out the order `besides`)."""
    unpaid, gpus, paid_history = _held(account=account, lock=lock, besides=besides)
    return {
        "unpaid_orders": unpaid,
        "unpaid_gpus": gpus,
        "max_unpaid_orders": settings.UNPAID_ORDERS_MAX_PAID if paid_history else settings.UNPAID_ORDERS_MAX,
        "max_unpaid_gpus": settings.UNPAID_GPUS_MAX_PAID if paid_history else settings.UNPAID_GPUS_MAX,
        "paid_history": paid_history,
    }


def unpaid_limit_check(*, account: Any, gpu_count: int, placing: int | None = None) -> None:
    """Refuse (`unpaid_limit`, 409) an order of `gpu_count` GPUs that would take
    the account over what it may hold unpaid. Call inside the order's
    transaction: the account row is locked to its end, so concurrent orders of
    one account are counted one after the other. `placing`: the order being
    placed, when it is already written (it is not counted twice); a caller that
    checks late holds the account's lock for less of its transaction."""
    limits = unpaid_limits(account=account, lock=True, besides=placing)
    orders_over = limits["unpaid_orders"] + 1 > limits["max_unpaid_orders"]
    gpus_over = limits["unpaid_gpus"] + gpu_count > limits["max_unpaid_gpus"]
    if orders_over or gpus_over:
        what = (
            f"{limits['max_unpaid_orders']} unpaid orders"
            if orders_over
            else f"{limits['max_unpaid_gpus']} unpaid GPUs"
        )
        raise Conflict(
            "unpaid_limit",
            f"An account may hold at most {what} at once: pay or cancel an open order first.",
            details={**limits, "requested_gpus": gpu_count},
        )


def account_unpaid_orders_release(*, account: Any, reason: str, actor: Any = None) -> int:
    """Cancel the account's unpaid orders (their GPUs go back to stock, their
    invoices are voided). An order whose payment has been seen is left to
    become a rental. Returns how many were cancelled."""
    from rentals.services.orders import order_cancel

    cancelled = 0
    ids = list(Order.objects.filter(account=account, status=OrderStatus.AWAITING_PAYMENT).values_list("pk", flat=True))
    for order_id in ids:
        try:
            with transaction.atomic():
                order_cancel(order_id=order_id, actor=actor or account, reason=reason)
        except Conflict as exc:  # paid meanwhile: it will become a rental
            log.info("order %s of a closing account kept: %s", order_id, exc.code)
            continue
        cancelled += 1
    return cancelled
