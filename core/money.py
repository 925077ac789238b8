"""USD arithmetic. Amounts are Decimal; rounding to cents is half up and happens
only where a figure is shown or billed, and down where money received becomes
a USD value the customer may spend (cents_down)."""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_DOWN, ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
ZERO = Decimal("0.00")


def cents(amount: Decimal | int | str) -> Decimal:
    """Round a USD amount to cents, half up."""
    return Decimal(amount).quantize(CENT, rounding=ROUND_HALF_UP)


def cents_down(amount: Decimal | int | str) -> Decimal:
    """Round a USD amount down to cents: the value of money received. Each
    transfer is valued on its own (an output, a token transfer), so rounding
    half up would value a transfer worth half a cent at a whole one, and a
    payment split into many such transfers at twice what was sent."""
    return Decimal(amount).quantize(CENT, rounding=ROUND_DOWN)


def usd_str(amount: Decimal) -> str:
    """The API's representation of a USD amount: a string with two decimals."""
    return f"{cents(amount):.2f}"


def ceil_int(amount: Decimal) -> int:
    """The smallest integer not below `amount` (for base units: never short)."""
    return int(amount.to_integral_value(rounding=ROUND_CEILING))
