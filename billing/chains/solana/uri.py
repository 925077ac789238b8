"""Solana Pay transfer requests (billing.chains.uris holds what schemes share)."""

from __future__ import annotations

from billing.chains.uris import coins_str, query_string


def solana_pay_uri(
    *, recipient: str, amount: int, reference: str, decimals: int = 9, label: str = "", message: str = ""
) -> str:
    """Solana Pay transfer request:
    `solana:<recipient>?amount=<coins>&reference=<ref>&label=..&message=..`."""
    if not reference:
        raise ValueError("a Solana Pay request needs its reference")
    return f"solana:{recipient}" + query_string(
        [
            ("amount", coins_str(amount, decimals)),
            ("reference", reference),
            ("label", label),
            ("message", message),
        ]
    )
