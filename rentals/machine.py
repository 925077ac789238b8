"""The order's and the rental's legal status changes, as pure tables (no
database, no clock), beside billing/machine.py for the invoice. Every status
change in rentals goes through `order_to` or `rental_to`: a change the table
does not list is a bug, raised as IllegalTransition before anything is saved.

Orders:

    awaiting_payment -> paid         its invoice settled
                     -> expired      its invoice expired or became invalid unpaid; slots released
                     -> cancelled    the customer or staff cancelled it unpaid
    expired          -> awaiting_payment   a fresh quote reserved the slots again
                     -> paid         paid late, and the stock was still there
                     -> unfulfilled  paid late, no stock left: the money became credit
    paid, cancelled, unfulfilled: final

Rentals:

    provisioning -> active       staff (or the operators' system) handed the server over
    active       -> suspended    unpaid past the grace, or staff
    suspended    -> active       a renewal was paid, or staff lifted the suspension
    provisioning, active, suspended -> terminated   the end (cancelled and over, unpaid too long, staff)
    terminated: final
"""

from __future__ import annotations

from typing import Any

from rentals.models import OrderStatus, RentalStatus

ORDER_TRANSITIONS: dict[str, frozenset[str]] = {
    OrderStatus.AWAITING_PAYMENT: frozenset({OrderStatus.PAID, OrderStatus.EXPIRED, OrderStatus.CANCELLED}),
    OrderStatus.EXPIRED: frozenset(
        {OrderStatus.AWAITING_PAYMENT, OrderStatus.PAID, OrderStatus.UNFULFILLED, OrderStatus.CANCELLED}
    ),
    OrderStatus.PAID: frozenset(),
    OrderStatus.CANCELLED: frozenset(),
    OrderStatus.UNFULFILLED: frozenset(),
}

RENTAL_TRANSITIONS: dict[str, frozenset[str]] = {
    RentalStatus.PROVISIONING: frozenset({RentalStatus.ACTIVE, RentalStatus.TERMINATED}),
    RentalStatus.ACTIVE: frozenset({RentalStatus.SUSPENDED, RentalStatus.TERMINATED}),
    RentalStatus.SUSPENDED: frozenset({RentalStatus.ACTIVE, RentalStatus.TERMINATED}),
    RentalStatus.TERMINATED: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A status change the table does not allow: a bug in the caller, never a client's error."""


def _move(table: dict[str, frozenset[str]], obj: Any, to: str) -> None:
    if to not in table.get(obj.status, frozenset()):
        raise IllegalTransition(f"{type(obj).__name__} {obj.pk}: {obj.status} -> {to} is not a legal change")
    obj.status = to


def order_may(status: str, to: str) -> bool:
    return to in ORDER_TRANSITIONS.get(status, frozenset())


def rental_may(status: str, to: str) -> bool:
    return to in RENTAL_TRANSITIONS.get(status, frozenset())


def order_to(order: Any, to: str) -> None:
    """Set `order.status` to `to` if the table allows it (the caller saves)."""
    _move(ORDER_TRANSITIONS, order, to)


def rental_to(rental: Any, to: str) -> None:
    """Set `rental.status` to `to` if the table allows it (the caller saves)."""
    _move(RENTAL_TRANSITIONS, rental, to)
