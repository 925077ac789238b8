"""The order's and the rental's status tables (rentals/machine.py): every status
has a row, illegal changes raise before anything is set, and no code in rentals
sets a status but through the table."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from rentals import machine
from rentals.models import OrderStatus, RentalStatus

ROOT = Path(__file__).resolve().parents[2]


def test_every_status_has_a_row_and_leads_only_to_statuses():
    assert set(machine.ORDER_TRANSITIONS) == set(OrderStatus.values)
    assert set(machine.RENTAL_TRANSITIONS) == set(RentalStatus.values)
    for table, statuses in ((machine.ORDER_TRANSITIONS, OrderStatus), (machine.RENTAL_TRANSITIONS, RentalStatus)):
        for targets in table.values():
            assert targets <= set(statuses.values)


@pytest.mark.parametrize(
    ("status", "to", "legal"),
    [
        (OrderStatus.AWAITING_PAYMENT, OrderStatus.PAID, True),
        (OrderStatus.EXPIRED, OrderStatus.AWAITING_PAYMENT, True),  # a fresh quote
        (OrderStatus.EXPIRED, OrderStatus.UNFULFILLED, True),  # paid late, sold out
        (OrderStatus.PAID, OrderStatus.CANCELLED, False),
        (OrderStatus.CANCELLED, OrderStatus.AWAITING_PAYMENT, False),
        (OrderStatus.AWAITING_PAYMENT, OrderStatus.UNFULFILLED, False),
    ],
)
def test_order_changes(status, to, legal):
    order = SimpleNamespace(pk=1, status=status)
    assert machine.order_may(status, to) is legal
    if legal:
        machine.order_to(order, to)
        assert order.status == to
    else:
        with pytest.raises(machine.IllegalTransition, match=f"{status} -> {to}"):
            machine.order_to(order, to)
        assert order.status == status  # nothing set


@pytest.mark.parametrize(
    ("status", "to", "legal"),
    [
        (RentalStatus.PROVISIONING, RentalStatus.ACTIVE, True),
        (RentalStatus.SUSPENDED, RentalStatus.ACTIVE, True),
        (RentalStatus.PROVISIONING, RentalStatus.TERMINATED, True),
        (RentalStatus.PROVISIONING, RentalStatus.SUSPENDED, False),
        (RentalStatus.TERMINATED, RentalStatus.ACTIVE, False),
        (RentalStatus.ACTIVE, RentalStatus.PROVISIONING, False),
    ],
)
def test_rental_changes(status, to, legal):
    rental = SimpleNamespace(pk=2, status=status)
    assert machine.rental_may(status, to) is legal
    if legal:
        machine.rental_to(rental, to)
        assert rental.status == to
    else:
        with pytest.raises(machine.IllegalTransition):
            machine.rental_to(rental, to)
        assert rental.status == status


def test_no_status_is_set_but_through_the_table():
    """An assignment `<anything>.status = ...` in rentals' code outside machine.py
    would step around the table."""
    found = []
    for path in sorted((ROOT / "rentals").rglob("*.py")):
        if "migrations" in path.parts or path.name == "machine.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                for item in target.elts if isinstance(target, ast.Tuple) else [target]:
                    if isinstance(item, ast.Attribute) and item.attr == "status":
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert found == []
