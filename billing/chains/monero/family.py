"""What the Monero family knows about its destinations: XMR.

One wallet, watch-only: its primary address (`XMR_ADDRESS`) and private view
key (`XMR_VIEW_KEY`). Destination i is subaddress (0, i), derived offline, so
the sequence starts at 1: (0, 0) is the primary address itself. The watcher
matches "major/minor" of the subaddress a transfer reached.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

from billing.chains import keys, uris
from billing.chains.interface import ChainFamily, Destination, setting_value
from billing.currencies import CURRENCIES

XMR_ACCOUNT = 0  # subaddresses (0, i) of the wallet's first account


@lru_cache(maxsize=8)
def _account_cached(address: str, view_key: str) -> keys.MoneroAccount:
    return keys.monero_account_parse(address=address, view_key=view_key)


def monero_account() -> keys.MoneroAccount:
    address, view_key = setting_value("XMR_ADDRESS"), setting_value("XMR_VIEW_KEY")
    if not address or not view_key:
        missing = "XMR_VIEW_KEY" if address else "XMR_ADDRESS"
        raise ImproperlyConfigured(
            f"{missing} is not set: Monero needs both XMR_ADDRESS (primary address) and XMR_VIEW_KEY "
            "(private view key), or neither."
        )
    try:
        keys.monero_address_parse(address)
    except keys.KeyMaterialError as exc:
        raise ImproperlyConfigured(f"XMR_ADDRESS {exc}") from None
    try:
        return _account_cached(address, view_key)
    except keys.KeyMaterialError as exc:
        raise ImproperlyConfigured(f"XMR_VIEW_KEY {exc}") from None


class MoneroFamily(ChainFamily):
    name = "monero"
    currencies = ("XMR",)
    material_settings = ("XMR_ADDRESS", "XMR_VIEW_KEY")
    view_key_settings = frozenset({"XMR_VIEW_KEY"})

    def enabled(self, code: str) -> bool:
        return bool(setting_value("XMR_ADDRESS")) and bool(setting_value("XMR_VIEW_KEY"))

    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        # Half the pair set is a mistake too: say so.
        if setting_value("XMR_ADDRESS") or setting_value("XMR_VIEW_KEY"):
            return [("XMR_VIEW_KEY", monero_account)]
        return []

    def keyset(self, code: str) -> str:
        return f"monero:{monero_account().fingerprint}"

    def first_index(self, code: str) -> int:
        return 1

    def destination(self, code: str, index: int) -> Destination:
        if not 1 <= index < 2**32:
            raise ValueError(f"XMR index must be in 1..{2**32 - 1} (subaddress (0, index)), got {index}")
        address = monero_account().subaddress(major=XMR_ACCOUNT, minor=index)
        return Destination(currency=code, address=address, index=index, match_key=f"{XMR_ACCOUNT}/{index}")

    def payment_uri(self, *, destination: Destination, amount: int, label: str, message: str) -> str:
        return uris.monero_uri(
            address=destination.address,
            amount=amount,
            decimals=CURRENCIES["XMR"].decimals,
            label=label,
            message=message,
        )

    def network(self, code: str) -> str:
        address = setting_value("XMR_ADDRESS")
        if not address:
            return "monero-mainnet"
        try:
            return f"monero-{keys.MONERO_NETWORKS[keys.monero_address_parse(address).net]}"
        except keys.KeyMaterialError as exc:
            raise ImproperlyConfigured(f"XMR_ADDRESS {exc}") from None


FAMILY = MoneroFamily()
