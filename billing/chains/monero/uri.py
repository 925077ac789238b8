"""Monero payment URIs (billing.chains.uris holds what schemes share)."""

from __future__ import annotations

from billing.chains.uris import coins_str, query_string


def monero_uri(*, address: str, amount: int, decimals: int = 12, label: str = "", message: str = "") -> str:
    """`monero:<address>?tx_amount=<coins>&recipient_name=..&tx_description=..`."""
    return f"monero:{address}" + query_string(
        [("tx_amount", coins_str(amount, decimals)), ("recipient_name", label), ("tx_description", message)]
    )
