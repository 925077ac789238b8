"""What the UTXO family knows about its destinations: BTC and LTC.

Each currency has its own account extended public key (`BTC_XPUB`,
`LTC_XPUB`; xpub/ypub/zpub or their test-network forms), network
(`*_NETWORK`: mainnet, testnet, regtest) and script type (`*_SCRIPT_TYPE`,
for keys whose version does not say it). Destination i is the receive
address m/.../0/i; the watcher matches its scriptPubKey.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import lru_cache, partial

from django.core.exceptions import ImproperlyConfigured

from billing.chains import keys
from billing.chains.interface import ChainFamily, Destination, Watcher, setting_value
from billing.chains.utxo import CHAINS, uri
from billing.chains.utxo import keys as utxo_keys
from billing.currencies import CURRENCIES

CHAIN_OF = {spec.currency: spec.chain for spec in CHAINS}


@lru_cache(maxsize=16)
def _account_cached(chain: str, value: str, network: str, script_type: str) -> utxo_keys.UtxoAccount:
    return utxo_keys.utxo_account_parse(chain=chain, value=value, network=network, script_type=script_type)


def utxo_network(code: str) -> str:
    setting = f"{code}_NETWORK"
    network = setting_value(setting, "mainnet").lower()
    chain = CHAIN_OF[code]
    names = [n for c, n in utxo_keys.UTXO_NETWORKS if c == chain]
    if network not in names:
        raise ImproperlyConfigured(f"{setting} is {network!r}; expected one of {', '.join(names)}.")
    return network


def utxo_account(code: str) -> utxo_keys.UtxoAccount:
    network = utxo_network(code)
    script_setting = f"{code}_SCRIPT_TYPE"
    script_type = setting_value(script_setting, "p2wpkh").lower()
    if script_type not in utxo_keys.SCRIPT_TYPES:
        raise ImproperlyConfigured(
            f"{script_setting} is {script_type!r}; expected one of {', '.join(utxo_keys.SCRIPT_TYPES)}."
        )
    setting = f"{code}_XPUB"
    try:
        return _account_cached(CHAIN_OF[code], setting_value(setting), network, script_type)
    except keys.KeyMaterialError as exc:
        raise ImproperlyConfigured(
            f"{setting} {exc} ({code}_NETWORK={network}, {script_setting}={script_type})"
        ) from None


class UtxoFamily(ChainFamily):
    name = "utxo"
    currencies = ("BTC", "LTC")
    material_settings = ("BTC_XPUB", "LTC_XPUB")

    def enabled(self, code: str) -> bool:
        return bool(setting_value(f"{code}_XPUB"))

    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        return [(f"{code}_XPUB", partial(utxo_account, code)) for code in self.currencies if code in enabled]

    def keyset(self, code: str) -> str:
        return f"{CHAIN_OF[code]}:{utxo_account(code).key.fingerprint}"

    def destination(self, code: str, index: int) -> Destination:
        address, script = utxo_account(code).destination(index)
        return Destination(currency=code, address=address, index=index, match_key=script)

    def payment_uri(self, *, destination: Destination, amount: int, label: str, message: str) -> str:
        return uri.bip21_uri(
            scheme=CHAIN_OF[destination.currency],
            address=destination.address,
            amount=amount,
            decimals=CURRENCIES[destination.currency].decimals,
            label=label,
            message=message,
        )

    def network(self, code: str) -> str:
        return f"{CHAIN_OF[code]}-{utxo_network(code)}"

    def watchers(self) -> Sequence[Watcher]:
        from billing.chains.utxo.watcher import WATCHERS

        return tuple(WATCHERS.values())


FAMILY = UtxoFamily()
