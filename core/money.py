"""USD arithmetic. Amounts are Decimal; rounding to cents is half up and happens
only where a figure is shown or billed."""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")
ZERO = Decimal("0.00")


def cents(amount: Decimal | int | str) -> Decimal:
    """Round a USD amount to cents, half up."""
    return Decimal(amount).quantize(CENT, rounding=ROUND_HALF_UP)


def usd_str(amount: Decimal) -> str:
    """The API's representation of a USD amount: a string with two decimals."""
    return f"{cents(amount):.2f}"


def ceil_int(amount: Decimal) -> int:
    """The smallest integer not below `amount` (for base units: never short)."""
    return int(amount.to_integral_value(rounding=ROUND_CEILING))
