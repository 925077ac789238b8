"""What the Monero family knows about its destinations: XMR.

One wallet, watch-only: its primary address (`XMR_ADDRESS`) and private view
key (`XMR_VIEW_KEY`). Destination i is subaddress (0, i), derived offline, so
the sequence starts at 1: (0, 0) is the primary address itself. The watcher
matches "major/minor" of the subaddress a transfer reached.

Settings of the watcher (all read at call time; docs/chains/monero.md):

    XMR_WALLET_RPC_URL          monero-wallet-rpc holding the view-only wallet (enables the watcher)
    XMR_WALLET_RPC_USER         its digest-auth login (--rpc-login), optional
    XMR_WALLET_RPC_PASSWORD
    XMR_DAEMON_URL              monerod (restricted RPC is enough): how far the wallet is behind
    XMR_SUBADDRESS_LOOKAHEAD    the wallet's minor subaddress lookahead (Monero's default: 200)
    XMR_SCAN_MARGIN_BLOCKS      transfers are read from the stored height minus this
    XMR_WALLET_MAX_LAG_BLOCKS   a wallet further behind its daemon makes the watcher blind
    XMR_RPC_TIMEOUT_SECONDS     per HTTP request (a refresh after downtime can be long)
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

from billing.chains import keys
from billing.chains.interface import ChainFamily, Destination, Watcher, setting_value
from billing.chains.monero import keys as monero_keys
from billing.chains.monero import uri
from billing.currencies import CURRENCIES

XMR_ACCOUNT = 0  # subaddresses (0, i) of the wallet's first account


@lru_cache(maxsize=8)
def _account_cached(address: str, view_key: str) -> monero_keys.MoneroAccount:
    return monero_keys.monero_account_parse(address=address, view_key=view_key)


def monero_account() -> monero_keys.MoneroAccount:
    address, view_key = setting_value("XMR_ADDRESS"), setting_value("XMR_VIEW_KEY")
    if not address or not view_key:
        missing = "XMR_VIEW_KEY" if address else "XMR_ADDRESS"
        raise ImproperlyConfigured(
            f"{missing} is not set: Monero needs both XMR_ADDRESS (primary address) and XMR_VIEW_KEY "
            "(private view key), or neither."
        )
    try:
        monero_keys.monero_address_parse(address)
    except keys.KeyMaterialError as exc:
        raise ImproperlyConfigured(f"XMR_ADDRESS {exc}") from None
    try:
        return _account_cached(address, view_key)
    except keys.KeyMaterialError as exc:
        raise ImproperlyConfigured(f"XMR_VIEW_KEY {exc}") from None


def _url_check(setting: str) -> str:
    from urllib.parse import urlsplit

    value = setting_value(setting)
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured(f"{setting} must be an http(s)://host:port URL (got something else).")
    return value


def _positive(setting: str) -> int:
    value = setting_value(setting, "200")
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise ImproperlyConfigured(f"{setting} is {value!r}; expected a positive whole number.")
    return number


class MoneroFamily(ChainFamily):
    name = "monero"
    currencies = ("XMR",)
    material_settings = ("XMR_ADDRESS", "XMR_VIEW_KEY")
    view_key_settings = frozenset({"XMR_VIEW_KEY"})

    def enabled(self, code: str) -> bool:
        return bool(setting_value("XMR_ADDRESS")) and bool(setting_value("XMR_VIEW_KEY"))

    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        found: list[tuple[str, Callable[[], object]]] = []
        # Half the pair set is a mistake too: say so.
        if setting_value("XMR_ADDRESS") or setting_value("XMR_VIEW_KEY"):
            found.append(("XMR_VIEW_KEY", monero_account))
        if setting_value("XMR_WALLET_RPC_URL"):
            found += [
                ("XMR_WALLET_RPC_URL", lambda: _url_check("XMR_WALLET_RPC_URL")),
                ("XMR_SUBADDRESS_LOOKAHEAD", lambda: _positive("XMR_SUBADDRESS_LOOKAHEAD")),
            ]
        if setting_value("XMR_DAEMON_URL"):
            found.append(("XMR_DAEMON_URL", lambda: _url_check("XMR_DAEMON_URL")))
        return found

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
        return uri.monero_uri(
            address=destination.address,
            amount=amount,
            decimals=CURRENCIES["XMR"].decimals,
            label=label,
            message=message,
        )

    def manual_position(self, code: str, index: int) -> str:
        # A Monero payment is one transaction to one subaddress: staff type its index.
        return f"{XMR_ACCOUNT}/{index}"

    def watchers(self) -> Sequence[Watcher]:
        from billing.chains.monero import CHAINS
        from billing.chains.monero.watcher import MoneroWatcher

        return (MoneroWatcher(CHAINS[0]),)

    def network(self, code: str) -> str:
        if setting_value("XMR_NETWORK") == "regtest":  # the sandbox: regtest addresses look like mainnet's
            return "monero-regtest"
        address = setting_value("XMR_ADDRESS")
        if not address:
            return "monero-mainnet"
        try:
            return f"monero-{monero_keys.MONERO_NETWORKS[monero_keys.monero_address_parse(address).net]}"
        except keys.KeyMaterialError as exc:
            raise ImproperlyConfigured(f"XMR_ADDRESS {exc}") from None


FAMILY = MoneroFamily()
