"""What the Solana family knows about its destinations: SOL.

One recipient address (`SOL_RECIPIENT`) for every invoice; each invoice's
Solana Pay transfer request carries a fresh random `reference` public key,
which is what the watcher matches. Index i is only a sequence number.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

from billing.chains import keys
from billing.chains.interface import ChainFamily, Destination, Watcher, setting_value
from billing.chains.solana import keys as solana_keys
from billing.chains.solana import uri
from billing.currencies import CURRENCIES

SOL_CLUSTERS = ("mainnet-beta", "devnet", "testnet", "localnet")


@lru_cache(maxsize=8)
def _recipient_cached(value: str) -> solana_keys.SolanaRecipient:
    return solana_keys.solana_recipient_parse(value=value)


def solana_recipient() -> solana_keys.SolanaRecipient:
    try:
        return _recipient_cached(setting_value("SOL_RECIPIENT"))
    except keys.KeyMaterialError as exc:
        raise ImproperlyConfigured(f"SOL_RECIPIENT {exc}") from None


def sol_cluster() -> str:
    cluster = setting_value("SOL_CLUSTER", "mainnet-beta").lower()
    if cluster not in SOL_CLUSTERS:
        raise ImproperlyConfigured(f"SOL_CLUSTER is {cluster!r}; expected one of {', '.join(SOL_CLUSTERS)}.")
    return cluster


def sol_rpc_url() -> str:
    """SOL_RPC_URL, checked for its shape (the message never repeats it: it may hold an API key)."""
    from urllib.parse import urlsplit

    value = setting_value("SOL_RPC_URL")
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ImproperlyConfigured("SOL_RPC_URL must look like https://host[:port]/[path][?query].")
    return value


def sol_genesis_hash() -> str:
    """SOL_GENESIS_HASH: empty, or a Base58 hash of 32 bytes."""
    value = setting_value("SOL_GENESIS_HASH")
    if value:
        from bip_utils import Base58Decoder

        try:
            size = len(Base58Decoder.Decode(value))
        except ValueError:
            size = -1
        if size != 32:
            raise ImproperlyConfigured(f"SOL_GENESIS_HASH is {value!r}; expected a Base58 hash of 32 bytes.")
    return value


class SolanaFamily(ChainFamily):
    name = "solana"
    currencies = ("SOL",)
    material_settings = ("SOL_RECIPIENT",)

    def enabled(self, code: str) -> bool:
        return bool(setting_value("SOL_RECIPIENT"))

    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        if "SOL" not in enabled:
            return []
        found: list[tuple[str, Callable[[], object]]] = [
            ("SOL_RECIPIENT", solana_recipient),
            ("SOL_CLUSTER", sol_cluster),
        ]
        if setting_value("SOL_RPC_URL"):
            found += [("SOL_RPC_URL", sol_rpc_url), ("SOL_GENESIS_HASH", sol_genesis_hash)]
        return found

    def keyset(self, code: str) -> str:
        return f"solana:{solana_recipient().fingerprint}"

    def destination(self, code: str, index: int) -> Destination:
        # One recipient; the reference (fresh random on each call: the caller stores it) tells payments apart.
        reference = solana_keys.solana_reference_new()
        return Destination(
            currency=code,
            address=solana_recipient().address,
            index=index,
            match_key=reference,
            reference=reference,
        )

    def payment_uri(self, *, destination: Destination, amount: int, label: str, message: str) -> str:
        return uri.solana_pay_uri(
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
