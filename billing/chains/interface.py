"""The plug-in interface of a chain family.

A family (billing/chains/<family>/) brings two things:

- one `ChainFamily` object, what it knows about its destinations: which
  settings hold its watch-only material and how to check them, the deposit
  destination number i of a currency, the payment URI a wallet opens, the
  network name, built on the family's own `keys` (its watch-only material
  parsed) and `uri` (its payment URI scheme) modules. billing.chains.config
  routes every currency to its family.
- a `Watcher` per chain it watches, implementing three things: `node_check`
  (refuse a node on the wrong network or chain), `scan` (from the cursor, as
  far as one run goes) and `cursor_set` (an operator moves the cursor). Block
  chains (UTXO, EVM) subclass `billing.chains.machinery.BlockWatcher`, which
  walks blocks for them; a wallet-based watcher (Monero: transfers since a
  height) or a reference-based one (Solana: signatures per reference)
  implements `scan` itself.

Everything else is shared and concrete (billing.chains.machinery): the lease
(one scan per chain at a time), the ChainState row (cursor, health,
back-off), one database transaction per block with the cursor in it, fork
walk-back, confirmation refresh, un-counting, and the calls into billing's
services. A watcher talks to the run through `ScanRun`, never to billing's
models or services directly.
"""

from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from django.conf import settings

from billing.chains.blocks import BlockRef
from billing.chains.spec import ChainSpec

# A transaction id in hex, as staff may type it (with or without 0x, in either case).
HEX_TXID = re.compile(r"(0[xX])?[0-9a-fA-F]{16,}")

if TYPE_CHECKING:
    from billing.chains.machinery import ScanRun


@dataclass(frozen=True)
class Destination:
    currency: str  # "BTC" ...
    address: str  # what the customer pays to (for SOL: the recipient)
    index: int  # derivation index (SOL: the sequence number; the reference is random)
    match_key: str  # what a watcher matches on: BTC/LTC scriptPubKey hex; ETH/USDT/USDC lowercase
    # 0x address; XMR "major/minor" of the subaddress; SOL the reference public key (Base58)
    reference: str = ""  # Solana Pay reference (SOL only)


def setting_value(name: str, default: str = "") -> str:
    value = getattr(settings, name, default)
    return "" if value is None else str(value).strip()


class ChainFamily(ABC):
    """What a family knows about its destinations (see the module docstring)."""

    name: str  # "utxo", "ethereum", ...
    currencies: tuple[str, ...]
    # Settings holding watch-only material: checked for spending keys at start-up,
    # whether or not their currency is enabled.
    material_settings: tuple[str, ...] = ()
    # Of those, the ones where 32 bytes of hex are a view key (not a spend key).
    view_key_settings: frozenset[str] = frozenset()

    @abstractmethod
    def enabled(self, code: str) -> bool:
        """Whether `code`'s watch-only material is set (it may still be malformed)."""

    @abstractmethod
    def checks(self, enabled: Collection[str]) -> list[tuple[str, Callable[[], object]]]:
        """(setting, check) pairs validating the material of the `enabled` codes;
        each check raises ImproperlyConfigured starting with the setting's name."""

    @abstractmethod
    def keyset(self, code: str) -> str:
        """A stable id of the key material behind `code`'s index sequence."""

    def first_index(self, code: str) -> int:
        return 0

    @abstractmethod
    def destination(self, code: str, index: int) -> Destination: ...

    @abstractmethod
    def payment_uri(self, *, destination: Destination, amount: int, label: str, message: str) -> str: ...

    @abstractmethod
    def network(self, code: str) -> str:
        """e.g. "bitcoin-mainnet", "ethereum-1"."""

    def manual_position(self, code: str, index: int) -> str:
        """The payment position a staff-recorded payment of `code` takes, given
        the output or log index staff typed: the one the watcher would give it."""
        return str(index)

    def manual_txid(self, code: str, txid: str) -> str:
        """A transaction id staff typed, written as the watcher writes it: hex in
        lower case without a `0x` (Bitcoin Core's and Monero's way); other ids
        (Solana's base58 signatures) as typed."""
        txid = txid.strip()
        if HEX_TXID.fullmatch(txid):
            return txid.lower().removeprefix("0x")
        return txid

    def watchers(self) -> Sequence[Watcher]:
        return ()


@dataclass
class ScanReport:
    """What one run did. `skipped` says why it did nothing ("busy": another
    worker holds the chain's lease; "backoff": the node failed recently;
    "not_watched"), or why it stopped early ("lease_lost": it stalled past its
    lease and another run took the chain; what it committed stands); `error` is
    the node's failure, when the run failed."""

    currency: str
    chain: str
    skipped: str = ""
    error: str = ""
    height: int | None = None  # the cursor after the run
    tip_height: int | None = None  # the node's tip
    blocks: int = 0
    recorded: int = 0  # payments recorded or updated from blocks
    unconfirmed: int = 0  # new payments seen unconfirmed (mempool, pool)
    confirmations_updated: int = 0
    uncounted: int = 0  # payments un-counted: orphaned, replaced, double spent, dropped
    reorgs: int = 0
    strays: int = 0  # transfers recorded for staff, never credited
    caught_up: bool = False
    seconds: float = 0.0
    currencies: list[str] = field(default_factory=list)
    mode: str = ""  # how the watcher reads the chain, when it has a choice (e.g. "trace_block")

    @property
    def ok(self) -> bool:
        return not self.error and not self.skipped

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        name = "/".join(self.currencies) if len(self.currencies) > 1 else self.currency
        if self.skipped:
            return f"{name}: skipped ({self.skipped}){': ' + self.error if self.error else ''}"
        if self.error:
            return f"{name}: failed: {self.error}"
        behind = (self.tip_height or 0) - (self.height if self.height is not None else -1)
        lag = "" if self.caught_up else f", {behind} block(s) behind"
        strays = f", {self.strays} for staff" if self.strays else ""
        return (
            f"{name}: cursor at {self.height} (node tip {self.tip_height}{lag}); "
            f"{self.blocks} block(s), {self.recorded} payment(s) from blocks, {self.unconfirmed} unconfirmed, "
            f"{self.confirmations_updated} confirmation update(s), {self.uncounted} un-counted, "
            f"{self.reorgs} reorg(s){strays} in {self.seconds:.2f}s"
        )


@dataclass(frozen=True)
class PushSource:
    """Where a chain's node publishes news (a ZMQ PUB socket, tcp://; a JSON-RPC
    websocket, ws://; or what the family's own `feed` reads): any message on one of
    `topics` (a new block, a new pool transaction) means "scan now"
    (billing.chains.watchers.ChainListener)."""

    url: str  # tcp://host:port, ws://host:port, or the family's own (p2p://host:port)
    topics: tuple[str, ...]  # subscription prefixes
    setting: str  # the setting that gave `url`
    # A family that reads its node another way gives the feed itself: an object with
    # open(), close() and wait(timeout) -> the number of messages of news received.
    feed: Callable[[], Any] | None = None


class Watcher(ABC):
    """One chain's watcher (see the module docstring)."""

    spec: ChainSpec
    chain_family: ChainFamily  # the family that serves the chain's currencies

    @property
    def chain(self) -> str:
        return self.spec.chain

    @property
    def currencies(self) -> tuple[str, ...]:
        return self.spec.currencies

    @property
    def currency(self) -> str:
        return self.spec.currency

    @property
    def rpc_url_setting(self) -> str:
        return self.spec.rpc_url_setting

    def rpc_url(self) -> str:
        return setting_value(self.rpc_url_setting)

    def watched_currencies(self) -> list[str]:
        # Its currencies that are enabled: their family says (billing.chains.config.enabled_currencies asks it too).
        return [c for c in self.currencies if self.chain_family.enabled(c)]

    def watched(self) -> bool:
        return bool(self.rpc_url()) and bool(self.watched_currencies())

    def not_watched_hint(self) -> str:
        return f"set {' and '.join((*self.spec.material_settings, self.rpc_url_setting))}"

    @contextlib.contextmanager
    def connect(self) -> Iterator[Any]:
        """The node client for one run (closed after it); `run.client` holds it."""
        yield None

    @abstractmethod
    def node_check(self, run: ScanRun) -> None:
        """Raise ChainUnavailable (NodeMismatch) when the node cannot be trusted for this chain."""

    @abstractmethod
    def scan(self, run: ScanRun) -> None:
        """Follow the chain from the stored cursor, recording through `run`."""

    @abstractmethod
    def cursor_set(self, *, height: int) -> BlockRef:
        """Put the cursor on the node's block at `height`: the next run scans from `height + 1`."""

    def cursor_set_line(self, block: BlockRef) -> str:
        """What `scan_chain --from-height` says after `cursor_set`."""
        return f"Cursor set to block {block.height} {block.hash}."

    def push_source(self, url: str = "") -> PushSource | None:
        """Where the node pushes news of blocks and pool transactions (`url`, else
        the chain's setting), when it can; None: the periodic poll alone finds payments."""
        return None

    def process_state_clear(self) -> None:  # noqa: B027 - optional: most watchers cache nothing
        """Forget what this process caches about the node (after a failure, or a cursor move)."""
