"""What the Solana family knows about its destinations: SOL.

One recipient address (`SOL_RECIPIENT`) for every invoice; each invoice's
Solana Pay transfer request carries a fresh random `reference` public key,
which is what the watcher matches. Index i is only a sequence number.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

from billing.chains import keys, uris
from billing.chains.interface import ChainFamily, Destination, Watcher, setting_value
from billing.currencies import CURRENCIES

SOL_CLUSTERS = ("mainnet-beta", "devnet", "testnet", "localnet")


@lru_cache(maxsize=8)
def _recipient_cached(value: str) -> keys.SolanaRecipient:
    return keys.solana_recipient_parse(value=value)


def solana_recipient() -> keys.SolanaRecipient:
    try:
        return _recipient_cached(setting_value("SOL_RECIPIENT"))
    except keys.KeyMaterialError as exc:
        raise ImproperlyConfigured(f"SOL_RECIPIENT {exc}") from None


def sol_cluster() -> str:
    cluster = setting_value("SOL_CLUSTER", "mainnet-beta").lower()
    if cluster not in SOL_CLUSTERS:
        raise ImproperlyConfigured(f"SOL_CLUSTER is {cluster!r}; expected one of {', '.join(SOL_CLUSTERS)}.")
    return cluster


class SolanaFamily(ChainFamily):
    name = "solana"
    currencies = ("SOL",)
    material_settings = ("SOL_RECIPIENT",)

    def enabled(self, code: str) -> bool:
        return bool(setting_value("SOL_RECIPIENT"))

    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        if "SOL" in enabled:
            return [("SOL_RECIPIENT", solana_recipient), ("SOL_CLUSTER", sol_cluster)]
        return []

    def keyset(self, code: str) -> str:
        return f"solana:{solana_recipient().fingerprint}"

    def destination(self, code: str, index: int) -> Destination:
        # One recipient; the reference (fresh random on each call: the caller stores it) tells payments apart.
        reference = keys.solana_reference_new()
        return Destination(
            currency=code,
            address=solana_recipient().address,
            index=index,
            match_key=reference,
            reference=reference,
        )

    def payment_uri(self, *, destination: Destination, amount: int, label: str, message: str) -> str:
        return uris.solana_pay_uri(
            recipient=destination.address,
            amount=amount,
            reference=destination.reference,
            decimals=CURRENCIES["SOL"].decimals,
            label=label,
            message=message,
        )

    def network(self, code: str) -> str:
        return f"solana-{sol_cluster()}"

    def watchers(self) -> Sequence[Watcher]:
        from billing.chains.solana import CHAINS
        from billing.chains.solana.watcher import SolanaWatcher

        return (SolanaWatcher(CHAINS[0]),)


FAMILY = SolanaFamily()
