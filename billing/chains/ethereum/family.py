"""What the Ethereum family knows about its destinations: ETH, USDT and USDC.

The three share one account: the xpub at m/44'/60'/0' (`ETH_XPUB`) and one
index sequence, so an address belongs to exactly one invoice whichever of the
three it asks for. Token invoices also need the token's contract
(`USDT_CONTRACT`, `USDC_CONTRACT`, the mainnet contracts by default).

Settings of the watcher (all read at call time):

    ETH_RPC_URL               HTTP JSON-RPC of an execution client or provider (enables the watcher)
    ETH_CHAIN_ID              the chain the node must be on (1: mainnet)
    ETH_FINALITY              confirmations (settle at CONFIRMATIONS_ETH/_USDT/_USDC) or finalized
    ETH_INTERNAL_TRANSFERS    auto, trace_block, debug_trace or balance (see billing.chains.ethereum.scanner)
    ETH_MULTICALL3_ADDRESS    Multicall3 for the balance mode ("" to read balances one by one)
    ETH_STRAY_TOKENS          read every token's Transfer logs, to tell staff about tokens nobody credits
    ETH_LOG_BLOCK_RANGE       the widest eth_getLogs range asked at first (halved when refused)
    ETH_RPC_BATCH_SIZE        calls per JSON-RPC batch
    ETH_RPC_TIMEOUT_SECONDS   per HTTP request
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from functools import lru_cache, partial

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from billing.chains import keys
from billing.chains.ethereum import CHAINS, uri
from billing.chains.ethereum import keys as ethereum_keys
from billing.chains.interface import HEX_TXID, ChainFamily, Destination, Watcher, setting_value

TOKEN_SETTINGS = {"USDT": "USDT_CONTRACT", "USDC": "USDC_CONTRACT"}
FINALITY_POLICIES = ("confirmations", "finalized")
INTERNAL_MODES = ("auto", "trace_block", "debug_trace", "balance")


@lru_cache(maxsize=8)
def _account_cached(value: str) -> ethereum_keys.EthereumAccount:
    return ethereum_keys.ethereum_account_parse(value=value)


def _refused(setting: str, exc: Exception) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"{setting} {exc}")


def eth_account() -> ethereum_keys.EthereumAccount:
    try:
        return _account_cached(setting_value("ETH_XPUB"))
    except keys.KeyMaterialError as exc:
        raise _refused("ETH_XPUB", exc) from None


def eth_chain_id() -> int:
    value = getattr(settings, "ETH_CHAIN_ID", 1)
    try:
        chain_id = int(value)
    except (TypeError, ValueError):
        chain_id = 0
    if isinstance(value, bool) or chain_id <= 0:
        raise ImproperlyConfigured(f"ETH_CHAIN_ID is {value!r}; expected a positive integer (1 is Ethereum mainnet).")
    return chain_id


def token_contract(code: str) -> str:
    """The EIP-55 address of USDT's or USDC's contract."""
    setting = TOKEN_SETTINGS[code]
    try:
        return ethereum_keys.eth_address_parse(setting_value(setting))
    except keys.KeyMaterialError as exc:
        raise _refused(setting, exc) from None


def finality_policy() -> str:
    policy = setting_value("ETH_FINALITY", "confirmations").lower()
    if policy not in FINALITY_POLICIES:
        raise ImproperlyConfigured(f"ETH_FINALITY is {policy!r}; expected one of {', '.join(FINALITY_POLICIES)}.")
    return policy


def internal_mode() -> str:
    mode = setting_value("ETH_INTERNAL_TRANSFERS", "auto").lower()
    if mode not in INTERNAL_MODES:
        raise ImproperlyConfigured(f"ETH_INTERNAL_TRANSFERS is {mode!r}; expected one of {', '.join(INTERNAL_MODES)}.")
    return mode


def multicall_address() -> str | None:
    value = setting_value("ETH_MULTICALL3_ADDRESS", "0xcA11bde05977b3631167028862bE2a173976CA11")
    if not value:
        return None
    try:
        return ethereum_keys.eth_address_parse(value)
    except keys.KeyMaterialError as exc:
        raise _refused("ETH_MULTICALL3_ADDRESS", exc) from None


class EthereumFamily(ChainFamily):
    name = "ethereum"
    currencies = ("ETH", "USDT", "USDC")
    material_settings = ("ETH_XPUB", "USDT_CONTRACT", "USDC_CONTRACT")

    def enabled(self, code: str) -> bool:
        if not setting_value("ETH_XPUB"):
            return False
        return code == "ETH" or bool(setting_value(TOKEN_SETTINGS[code]))

    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        found: list[tuple[str, Callable[[], object]]] = []
        if "ETH" in enabled:
            found += [("ETH_XPUB", eth_account), ("ETH_CHAIN_ID", eth_chain_id)]
        for code, setting in TOKEN_SETTINGS.items():
            if code in enabled:
                found.append((setting, partial(token_contract, code)))
        if setting_value("ETH_RPC_URL"):
            found += [
                ("ETH_FINALITY", finality_policy),
                ("ETH_INTERNAL_TRANSFERS", internal_mode),
                ("ETH_MULTICALL3_ADDRESS", multicall_address),
            ]
        return found

    def keyset(self, code: str) -> str:
        # ETH, USDT and USDC share one index sequence: one address, one invoice.
        return f"ethereum:{eth_account().key.fingerprint}"

    def destination(self, code: str, index: int) -> Destination:
        address = eth_account().address(index)
        return Destination(currency=code, address=address, index=index, match_key=address.lower())

    def payment_uri(self, *, destination: Destination, amount: int, label: str, message: str) -> str:
        # EIP-681 has no label or message.
        if destination.currency == "ETH":
            return uri.eip681_ether_uri(address=destination.address, chain_id=eth_chain_id(), wei=amount)
        return uri.eip681_token_transfer_uri(
            token=token_contract(destination.currency),
            chain_id=eth_chain_id(),
            recipient=destination.address,
            units=amount,
        )

    def network(self, code: str) -> str:
        return f"ethereum-{eth_chain_id()}"

    def manual_position(self, code: str, index: int) -> str:
        # Staff recording a plain ether transaction, or a token transfer by its log index.
        return "tx" if code == "ETH" else f"log:{index}"

    def manual_txid(self, code: str, txid: str) -> str:
        # The node's way: 0x and lower case.
        txid = txid.strip()
        return "0x" + txid.lower().removeprefix("0x") if HEX_TXID.fullmatch(txid) else txid

    def watchers(self) -> Sequence[Watcher]:
        from billing.chains.ethereum.watcher import EthereumWatcher

        return (EthereumWatcher(CHAINS[0]),)


FAMILY = EthereumFamily()
