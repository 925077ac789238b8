"""Payment URIs a wallet opens (or scans from a QR code) to pay an invoice:
what every family's scheme shares.

Each family writes its own scheme (billing/chains/<family>/uri.py: BIP21 for
Bitcoin and Litecoin, EIP-681 for ether and ERC-20 tokens, the Monero URI
scheme, Solana Pay transfer requests) with what is here. Amounts arrive as
integer base units; where a scheme wants whole coins they are written exactly
(`coins_str`: no float, no exponent, no trailing zeros). Free text is
percent-encoded (`query_string`: a space is %20, never "+", as BIP21 requires).
"""

from __future__ import annotations

from decimal import Decimal
from urllib.parse import quote


def base_units_check(amount: int | Decimal) -> int:
    """`amount` as a positive int; a Decimal is accepted when it is integral
    (base units come out of a DecimalField with no decimal places)."""
    if isinstance(amount, bool) or not isinstance(amount, (int, Decimal)):
        raise TypeError(f"amount must be an integer number of base units, not {type(amount).__name__}")
    if isinstance(amount, Decimal):
        if not amount.is_finite() or amount != amount.to_integral_value():
            raise ValueError(f"amount {amount} is not a whole number of base units")
        amount = int(amount)
    if amount <= 0:
        raise ValueError(f"amount must be positive, got {amount}")
    return amount


def coins_str(amount: int, decimals: int) -> str:
    """Base units as whole coins: exact, plain digits, no trailing zeros.

    390000 satoshi -> "0.0039"; 100000000 -> "1"; 1 wei -> "0.000000000000000001".
    """
    units = base_units_check(amount)
    whole, frac = divmod(units, 10**decimals)
    if not frac:
        return str(whole)
    return f"{whole}.{frac:0{decimals}d}".rstrip("0")


def query_string(params: list[tuple[str, str]]) -> str:
    """Join parameters, percent-encoding values and leaving out empty ones."""
    parts = [f"{key}={quote(value, safe='')}" for key, value in params if value != ""]
    return "?" + "&".join(parts) if parts else ""
