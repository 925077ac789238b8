"""BIP21 payment URIs, for Bitcoin and Litecoin (billing.chains.uris holds what schemes share)."""

from __future__ import annotations

from billing.chains.uris import coins_str, query_string


def bip21_uri(*, scheme: str, address: str, amount: int, decimals: int, label: str = "", message: str = "") -> str:
    """`bitcoin:<address>?amount=<coins>&label=..&message=..` (or `litecoin:`)."""
    return f"{scheme}:{address}" + query_string(
        [("amount", coins_str(amount, decimals)), ("label", label), ("message", message)]
    )
