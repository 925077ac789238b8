"""The watcher of the UTXO family: BTC on Bitcoin Core, LTC on Litecoin Core.

It runs on the shared block walk (billing.chains.machinery.BlockWatcher),
which owns the cursor, the per-block transactions, forks and confirmations;
this module supplies the node-specific steps and the mempool:

1. Blocks. `chain_advance` (billing.chains.utxo.scanner) reports a fork, if
   the node left the stored chain, and the next blocks. A fork un-counts the
   payments of orphaned blocks, unless they are back in the node's mempool
   (then they count as unconfirmed) or in the new branch (then the block below
   records them again); a fork deeper than the stored blocks is walked back
   through the node's headers (`fork_walk`). Each new block records its
   payments (`payment_observe`, confirmations = the node's tip - height + 1)
   and un-counts the unconfirmed payments it made impossible, in the block's
   transaction with the cursor. Recording is idempotent on (chain, txid,
   output): a killed worker credits exactly once.
2. Confirmations. Payments in blocks that have not reached the policy yet are
   brought up to date with the node's tip.
3. The mempool, followed by its changes: each pass lists its txids with the
   node's mempool sequence (`getrawmempool false true`) and decodes only the
   txids not seen before. New transactions paying open destinations are
   recorded with 0 confirmations (the invoice moves to `processing` within
   one run); payments replaced (RBF), double spent or dropped are un-counted.

Unconfirmed payments are remembered in `ChainState.extra["mempool"]` with the
outpoints they spend, so whichever worker process runs next can still tell a
replaced payment from a mined one. The txids already decoded are stored as
rows of `MempoolSeen` (one per transaction in the mempool, deleted when it
leaves), with the sequence in `ChainState.extra["mempool_sequence"]`, so a
restarted worker decodes only what entered the mempool since. They are rows,
not a list in `extra`: the state row is read and locked with every block and
pass, and a mempool of 100,000 transactions would make it megabytes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from billing import services
from billing.chains.blocks import ChainStep
from billing.chains.errors import NodeMismatch
from billing.chains.interface import PushSource, ScanReport, setting_value
from billing.chains.machinery import (
    BlockWatcher,
    Recorder,
    ScanRun,
    chain_run,
    chain_state,
    cursor_store_at,
    watched_forget,
)
from billing.chains.spec import ChainSpec
from billing.chains.utxo import CHAINS, p2p
from billing.chains.utxo import family as utxo_family
from billing.chains.utxo.rpc import BitcoinRpc, RpcError
from billing.chains.utxo.scanner import (
    COINBASE_MATURITY,
    RPC_NOT_FOUND,
    BlockRef,
    BlockScan,
    ChainTip,
    Fork,
    GoneReason,
    MempoolWatcher,
    Observation,
    PaymentTx,
    chain_advance,
    chain_tip,
    fork_walk,
    height_at_time,
)
from core.errors import DomainError

__all__ = ["FAMILIES", "NodeMismatch", "ScanReport", "UtxoWatcher", "bitcoin_chain_scan", "bitcoin_cursor_set"]

log = logging.getLogger(__name__)

# Blocks fetched per `chain_advance` step (a run makes several steps).
STEP_BLOCKS = 25
# A first run (no cursor) starts at the first block whose median time is this
# much older than the oldest watched destination: median time lags the clock
# by about an hour, and block clocks may be off by up to two.
FIRST_SCAN_MARGIN = timedelta(hours=3)
# The node's `chain` (getblockchaininfo) each `*_NETWORK` setting accepts.
NODE_CHAINS = {
    "mainnet": frozenset({"main"}),
    "testnet": frozenset({"test", "testnet4", "signet"}),
    "regtest": frozenset({"regtest"}),
}


@dataclass(frozen=True)
class Family:
    currency: str  # "BTC"
    chain: str  # "bitcoin": Payment.chain, ChainState.chain
    node_name: str  # how the node's user agent (getnetworkinfo subversion) names it


FAMILIES = {
    "BTC": Family("BTC", "bitcoin", "Satoshi"),
    "LTC": Family("LTC", "litecoin", "LitecoinCore"),
}


# --- Per-process state ---------------------------------------------------------------
# Mempool watchers live as long as the worker process, so a transaction is
# decoded once, not once per run. A watcher is only a cache: its pending
# payments are reloaded from the database at the start of every run, and it is
# dropped after any failure. The RPC connection is not kept between runs: a node
# waits for idle keep-alive connections to close before it shuts down.

_lock = threading.Lock()
_mempools: dict[tuple[str, str], MempoolWatcher] = {}
_nodes_checked: set[tuple[str, str, str]] = set()


def _mempool(chain: str, rpc: BitcoinRpc) -> MempoolWatcher:
    """This process's watcher of the node's mempool, talking through `rpc` for this run."""
    with _lock:
        key = (chain, rpc.endpoint)
        watcher = _mempools.get(key)
        if watcher is None:
            watcher = _mempools[key] = MempoolWatcher(rpc)
        watcher.rpc = rpc
        return watcher


def process_state_clear(*, chain: str | None = None) -> None:
    """Forget this process's mempool watchers and watched sets (all, or one chain's) and node checks."""
    watched_forget(chain=chain)
    with _lock:
        for key in [k for k in _mempools if chain is None or k[0] == chain]:
            del _mempools[key]
        _nodes_checked.clear()


# --- Settings ---------------------------------------------------------------------------


def _family(currency: str) -> Family:
    code = str(currency).upper()
    if code not in FAMILIES:
        raise DomainError(
            "no_watcher",
            f"{currency} is not a Bitcoin-family currency.",
            details={"currency": str(currency), "watchers": list(FAMILIES)},
        )
    return FAMILIES[code]


def rpc_url(*, currency: str) -> str:
    return str(getattr(settings, f"{_family(currency).currency}_RPC_URL", "") or "").strip()


def _network(family: Family) -> str:
    return str(getattr(settings, f"{family.currency}_NETWORK", "mainnet") or "mainnet").strip().lower()


def _node_check(family: Family, rpc: BitcoinRpc) -> None:
    """Refuse a node on another network, or (outside regtest) of the other coin.

    BTC and LTC accounts may share keys, hence scripts: a Litecoin node
    watched as BTC would credit litoshi as satoshi. On regtest one Litecoin
    node serves both in the tests, so only the network is checked there.
    """
    network = _network(family)
    key = (family.currency, rpc.endpoint, network)
    if key in _nodes_checked:
        return
    chain_info, network_info = rpc.batch([("getblockchaininfo", ()), ("getnetworkinfo", ())])
    node_chain = str(chain_info.get("chain", ""))
    if node_chain not in NODE_CHAINS.get(network, ()):
        raise NodeMismatch(
            f"the node at {rpc.endpoint} follows {node_chain!r}, but {family.currency}_NETWORK is {network}"
        )
    agent = str(network_info.get("subversion", ""))
    other = [f.node_name for f in FAMILIES.values() if f is not family and f.node_name in agent]
    if network != "regtest" and other and family.node_name not in agent:
        raise NodeMismatch(
            f"the node at {rpc.endpoint} is {agent.strip('/')}, not a {family.chain} node: "
            f"check {family.currency}_RPC_URL"
        )
    _nodes_checked.add(key)


def _in_mempool(rpc: BitcoinRpc, txids: Iterable[str]) -> set[str]:
    txids = list(txids)
    results = rpc.batch([("getmempoolentry", (t,)) for t in txids], return_errors=True)
    found = set()
    for txid, result in zip(txids, results, strict=True):
        if isinstance(result, RpcError):
            if result.code != RPC_NOT_FOUND:
                raise result
        else:
            found.add(txid)
    return found


def _pending_json(mempool: MempoolWatcher) -> dict[str, Any]:
    return {tx.txid: tx.as_json() for tx in mempool.pending}


def _pending_load(extra: Mapping[str, Any]) -> list[PaymentTx]:
    stored: Mapping[str, Any] = (extra or {}).get("mempool", {})
    return [PaymentTx.from_json(txid, data) for txid, data in stored.items()]


def _payment_observation(family: Family, o: Observation, *, confirmations: int) -> services.Observation:
    return services.Observation(
        currency=family.currency,
        txid=o.txid,
        output_index=o.vout,
        match_key=o.script_hex,
        amount=o.amount,
        confirmations=confirmations,
        block_height=o.block_height,
        block_hash=o.block_hash or "",
        # A miner paid from a block's reward: not settled before it can be spent (an orphaned
        # block's coinbase never comes back, so counted earlier it could be gone for good).
        matures_at_height=(
            o.block_height + COINBASE_MATURITY - 1 if o.coinbase and o.block_height is not None else None
        ),
    )


# --- The watcher ---------------------------------------------------------------------------


class UtxoWatcher(BlockWatcher):
    """BTC's or LTC's watcher: the shared block walk, plus the node's mempool."""

    step_blocks = STEP_BLOCKS
    chain_family = utxo_family.FAMILY

    def __init__(self, spec: ChainSpec) -> None:
        self.spec = spec
        self.family = FAMILIES[spec.currency]

    @contextlib.contextmanager
    def connect(self) -> Iterator[BitcoinRpc]:
        with BitcoinRpc(self.rpc_url()) as rpc:
            yield rpc

    def node_check(self, run: ScanRun) -> None:
        _node_check(self.family, run.client)

    def process_state_clear(self) -> None:
        process_state_clear(chain=self.chain)

    def push_source(self, url: str = "") -> PushSource | None:
        """Where the node announces blocks and pool transactions. Its ZMQ
        publisher (`-zmqpubhashblock` and `-zmqpubrawtx` on one address, Bitcoin
        Core's doc/zmq.md) when BTC_ZMQ_URL / LTC_ZMQ_URL is set; otherwise its
        peer-to-peer port when BTC_P2P_PEER / LTC_P2P_PEER is (host:port; any
        build, ZMQ or not: `billing/chains/utxo/p2p.py`). `url` overrides either:
        tcp:// for ZMQ, p2p:// for a peer."""
        zmq_setting, peer_setting = f"{self.currency}_ZMQ_URL", f"{self.currency}_P2P_PEER"
        if not url:
            url = setting_value(zmq_setting)
            setting = zmq_setting
            if not url and setting_value(peer_setting):
                url, setting = f"p2p://{setting_value(peer_setting)}", peer_setting
        else:
            setting = peer_setting if url.startswith("p2p://") else zmq_setting
        if not url:
            return None
        if not url.startswith("p2p://"):
            return PushSource(url=url, topics=("hashblock", "rawtx"), setting=setting)
        host, _, port = url.removeprefix("p2p://").rstrip("/").rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ImproperlyConfigured(f"{peer_setting} is host:port (the node's P2P port), e.g. 127.0.0.1:9333.")
        return PushSource(
            url=url,
            topics=("inv",),
            setting=setting,
            feed=functools.partial(p2p.PeerFeed, host.strip("[]"), int(port), self._p2p_magic),
        )

    def _p2p_magic(self) -> bytes:
        """The P2P network magic of the network the node says it follows (its RPC)."""
        with self.connect() as rpc:
            return p2p.magic_for(self.chain, rpc.call("getblockchaininfo")["chain"])

    def scan(self, run: ScanRun) -> None:
        mempool = _mempool(self.chain, run.client)
        extra = chain_state(self.chain).extra or {}
        mempool.pending_replace(_pending_load(extra))
        stored_sequence = extra.get("mempool_sequence")
        if not mempool.loaded or stored_sequence != mempool.sequence:
            # A new process (a restart), or another process ran the passes since this one.
            mempool.seen_load(run.pool_seen(), sequence=stored_sequence)
        run.data["mempool"] = mempool
        run.data["mempool_sequence"] = stored_sequence
        run.data["scripts"] = self.watched_scripts(run)
        super().scan(run)

    def watched_scripts(self, run: ScanRun) -> frozenset[str]:
        """The scripts to match: this process's watched set brought up to date (a run
        at another time than the clock's, as tests make, reads them in full)."""
        if run.now is not None:
            if "newest" not in run.data:
                run.data["newest"] = run.newest_request_id([self.currency])
                return run.watched([self.currency])
            return frozenset(run.data["scripts"] | run.created_since(run.data["newest"] + 1, [self.currency]))
        return run.watched_kept(self.currency)

    # --- the block walk ------------------------------------------------------------------

    def tip(self, run: ScanRun) -> ChainTip:
        return chain_tip(run.client)

    def first_height(self, run: ScanRun, *, tip_height: int) -> int:
        """The first block that may hold a payment to a destination still watched,
        or the tip when there is none."""
        oldest = run.oldest_watched_at([self.currency])
        if oldest is None:
            return tip_height
        return height_at_time(run.client, at=int((oldest - FIRST_SCAN_MARGIN).timestamp()), tip_height=tip_height)

    def advance(self, run: ScanRun, *, recent: list[BlockRef], start_height: int | None, max_blocks: int) -> ChainStep:
        # The set brought up to date at each step: a long catch-up run takes minutes, and a
        # destination issued meanwhile, paid in a block a later step reads, was missed.
        run.data["scripts"] = self.watched_scripts(run)
        step = chain_advance(
            run.client, recent=recent, scripts=run.data["scripts"], start_height=start_height, max_blocks=max_blocks
        )
        run.data["tip_height"] = step.tip.height
        return step

    def fork_walk(self, run: ScanRun, fork: Fork) -> Fork | None:
        return fork_walk(run.client, fork=fork)

    def block_txids(self, scan: BlockScan) -> set[str]:
        return {o.txid for o in scan.observations}

    def unconfirmed(self, run: ScanRun, txids: list[str]) -> set[str]:
        return _in_mempool(run.client, txids)

    def forked(self, run: ScanRun, txids: list[str]) -> None:
        run.data["mempool"].forget(txids)

    def block_record(self, run: ScanRun, recorder: Recorder, scan: BlockScan) -> None:
        mempool: MempoolWatcher = run.data["mempool"]
        height = scan.block.height
        confirmations = max(1, run.data["tip_height"] - height + 1)
        for o in scan.observations:
            recorder.observe(_payment_observation(self.family, o, confirmations=confirmations))
        for gone in mempool.blocks_applied([scan]):
            if gone.reason != GoneReason.MINED:
                recorder.uncount_tx(txid=gone.txid, reason=f"{gone.txid} conflicted by {gone.by} in block {height}")
        recorder.extra["mempool"] = _pending_json(mempool)

    def blocks_done(self, run: ScanRun, *, tip: Any, recent: list[BlockRef]) -> None:
        run.confirmations_refresh(tip_height=tip.height)
        # Destinations created while the blocks were read are matched in the mempool too.
        scripts = self.watched_scripts(run)
        cursor = recent[-1].hash if recent else None
        self._mempool_pass(run, scripts=scripts, cursor=cursor)

    def _mempool_pass(self, run: ScanRun, *, scripts: frozenset[str], cursor: str | None) -> None:
        """New unconfirmed payments, then the ones gone, in one transaction (new
        first: a replacement paying the same destination never flips the invoice
        back to `new`)."""
        mempool: MempoolWatcher = run.data["mempool"]
        pool = mempool.scan(scripts=scripts, scanned_tip=cursor)
        run.data["mempool_scan"] = pool
        added, dropped = mempool.seen_changes()
        if not (pool.new or pool.gone or added or dropped or pool.sequence != run.data["mempool_sequence"]):
            return  # nothing entered or left that the database does not know: no transaction
        with run.atomic() as recorder:
            for tx in pool.new:
                for o in tx.observations:
                    recorder.observe(_payment_observation(self.family, o, confirmations=0))
            for gone in pool.gone:
                if gone.reason != GoneReason.MINED:
                    recorder.uncount_tx(
                        txid=gone.txid,
                        reason=f"{gone.txid} {gone.reason} from the mempool{' by ' + gone.by if gone.by else ''}",
                    )
            recorder.pool_seen_update(added=added, dropped=dropped)
            recorder.extra["mempool"] = _pending_json(mempool)
            recorder.extra["mempool_sequence"] = pool.sequence
        mempool.seen_stored()
        run.report.unconfirmed += recorder.recorded

    # --- operators -------------------------------------------------------------------------

    def cursor_set(self, *, height: int) -> BlockRef:
        """Put the cursor on the node's block at `height`: the next run scans from
        `height + 1`. Going back rescans (recording is idempotent); going forward
        skips blocks. Clears the stored recent blocks."""
        url = self.rpc_url()
        if not url:
            raise DomainError("chain_not_watched", f"{self.rpc_url_setting} is not set.")
        if height < 0:
            raise DomainError("invalid", "A height is 0 or more.", details={"height": height})
        try:
            with BitcoinRpc(url) as rpc:
                block_hash = rpc.call("getblockhash", height)
        except RpcError as exc:
            raise DomainError(
                "invalid",
                f"The node has no block at height {height}.",
                details={"height": height, "node": exc.message},
            ) from None
        block = BlockRef(height, block_hash)
        cursor_store_at(chain=self.chain, block=block)
        self.process_state_clear()
        return block


WATCHERS = {spec.currency: UtxoWatcher(spec) for spec in CHAINS}


def bitcoin_cursor_set(*, currency: str, height: int) -> BlockRef:
    """Put BTC's or LTC's cursor on the node's block at `height` (see UtxoWatcher.cursor_set)."""
    return WATCHERS[_family(currency).currency].cursor_set(height=height)


def bitcoin_chain_scan(
    *,
    currency: str,
    max_blocks: int | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    renew: Callable[[], object] | None = None,
    now: datetime | None = None,
) -> ScanReport:
    """One run of the BTC or LTC watcher, without the lease (watchers.chain_scan takes it)."""
    watcher = WATCHERS[_family(currency).currency]
    return chain_run(watcher, max_blocks=max_blocks, force=force, progress=progress, renew=renew, now=now)


def watched_scripts(*, currency: str, now: datetime | None = None) -> frozenset[str]:
    """The scriptPubKeys (hex) of the destinations `currency`'s watcher matches,
    read through a ScanRun as a scan reads them (outside any run: no lease, nothing written)."""
    watcher = WATCHERS[_family(currency).currency]
    run = ScanRun(watcher, report=ScanReport(currency=watcher.currency, chain=watcher.chain), max_blocks=1, now=now)
    return run.watched([watcher.currency])
