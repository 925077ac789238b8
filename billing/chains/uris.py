"""Payment URIs a wallet opens (or scans from a QR code) to pay an invoice.

BIP21 for Bitcoin and Litecoin, EIP-681 for ether and ERC-20 tokens, the
Monero URI scheme, and Solana Pay transfer requests. Amounts arrive as integer
base units; where a scheme wants whole coins they are written exactly (no
float, no exponent, no trailing zeros). Free text is percent-encoded (a space
is %20, never "+", as BIP21 requires).
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


def _query(params: list[tuple[str, str]]) -> str:
    """Join parameters, percent-encoding values and leaving out empty ones."""
    parts = [f"{key}={quote(value, safe='')}" for key, value in params if value != ""]
    return "?" + "&".join(parts) if parts else ""


def bip21_uri(*, scheme: str, address: str, amount: int, decimals: int, label: str = "", message: str = "") -> str:
    """`bitcoin:<address>?amount=<coins>&label=..&message=..` (or `litecoin:`)."""
    return f"{scheme}:{address}" + _query(
        [("amount", coins_str(amount, decimals)), ("label", label), ("message", message)]
    )


def eip681_ether_uri(*, address: str, chain_id: int, wei: int) -> str:
    """`ethereum:<address>@<chainId>?value=<wei>` (EIP-681; value as a plain integer)."""
    return f"ethereum:{address}@{int(chain_id)}?value={base_units_check(wei)}"


def eip681_token_transfer_uri(*, token: str, chain_id: int, recipient: str, units: int) -> str:
    """`ethereum:<token>@<chainId>/transfer?address=<to>&uint256=<units>`: an ERC-20 transfer call."""
    return f"ethereum:{token}@{int(chain_id)}/transfer?address={recipient}&uint256={base_units_check(units)}"


def monero_uri(*, address: str, amount: int, decimals: int = 12, label: str = "", message: str = "") -> str:
    """`monero:<address>?tx_amount=<coins>&recipient_name=..&tx_description=..`."""
    return f"monero:{address}" + _query(
        [("tx_amount", coins_str(amount, decimals)), ("recipient_name", label), ("tx_description", message)]
    )


def solana_pay_uri(
    *, recipient: str, amount: int, reference: str, decimals: int = 9, label: str = "", message: str = ""
) -> str:
    """Solana Pay transfer request:
    `solana:<recipient>?amount=<coins>&reference=<ref>&label=..&message=..`."""
    if not reference:
        raise ValueError("a Solana Pay request needs its reference")
    return f"solana:{recipient}" + _query(
        [
            ("amount", coins_str(amount, decimals)),
            ("reference", reference),
            ("label", label),
            ("message", message),
        ]
    )
