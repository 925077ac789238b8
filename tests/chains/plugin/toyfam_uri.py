"""TOY's payment URI (copied as toyfam/uri.py): `toycoin:<address>?amount=<coins>&message=..`,
written with what billing.chains.uris shares."""

from __future__ import annotations

from billing.chains.uris import coins_str, query_string


def toy_uri(*, address: str, amount: int, decimals: int, message: str = "") -> str:
    return f"toycoin:{address}" + query_string([("amount", coins_str(amount, decimals)), ("message", message)])
