"""Scanner core for Bitcoin-family chains (Bitcoin Core, Litecoin Core).

Nothing here touches the database: the functions read the node and return
plain values, and the watcher service that owns the cursor decides what to
store. One pass of such a service looks like this::

    step = chain_advance(rpc, recent=stored_blocks, scripts=open_scripts)
    if step.fork:                         # the chain we followed lost blocks
        un-count payments in step.fork.orphaned; drop them from the cursor;
        mempool.forget(their txids)
    for scan in step.blocks:              # one database transaction per block
        record scan.observations; append scan.block to the cursor;
        for gone in mempool.blocks_applied([scan]): un-count it unless MINED
    pool = mempool.scan(scripts=open_scripts, scanned_tip=step.tip_scanned.hash)
    record pool.new as unconfirmed; un-count pool.gone (except MINED)

The types:

- `BlockRef` (height, hash): one element of the cursor. The service keeps
  the last hundred or so, which is what `fork_find` compares with the node.
- `Outpoint` (txid, vout): a transaction output, as spent by an input.
- `Observation`: one output paying an open destination, with the amount in
  base units (an int, exact) and, once mined, the block it is in.
- `PaymentTx`: a transaction with at least one `Observation`, plus the
  outpoints it spends, which is how a conflicting transaction is recognised.
- `BlockScan`: what one block carried: its payments, every outpoint it
  spends and every txid it holds (to tell mined from replaced mempool txs).
- `Fork`: where a reorganisation left the stored chain, and what it orphaned.
- `ChainStep`: the result of one `chain_advance`: fork (if any), new blocks.
- `MempoolWatcher` / `MempoolScan` / `GoneTx`: the unconfirmed side.

Two node look-ups help the service around the cursor: `fork_walk` finds the
fork point of a reorg deeper than the stored blocks, and `height_at_time`
where a watcher without a cursor should start.

Matching is a set lookup of each output's scriptPubKey hex in the caller's
set of open destination scripts (lowercase hex): no query per output, so a
block of thousands of transactions against 100,000 open destinations costs
the same as against ten.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from billing.chains.blocks import BlockRef, ChainStep, Fork, resume_point
from billing.chains.blocks import fork_find as blocks_fork_find
from billing.chains.utxo.rpc import BitcoinRpc, ChainUnavailable, RpcError

__all__ = ["BlockRef", "ChainStep", "Fork"]  # shared types, named here too for the scanner's callers

log = logging.getLogger(__name__)

# Bitcoin Core and Litecoin Core both count in 1e-8 coins.
BITCOIN_DECIMALS = 8
# Error code for "no such transaction / block" (RPC_INVALID_ADDRESS_OR_KEY).
RPC_NOT_FOUND = -5
# Error code for "height out of range" (RPC_INVALID_PARAMETER).
RPC_INVALID_PARAMETER = -8


def coins_to_base_units(value: Decimal | int | str, *, decimals: int = BITCOIN_DECIMALS) -> int:
    """An amount in whole coins, as the node prints it, to exact base units.

    Refuses anything that is not a whole number of base units instead of
    rounding it: a node never prints such an amount, so it means a bug.
    """
    if isinstance(value, float):
        raise TypeError("amounts are never floats")
    amount = Decimal(value).scaleb(decimals)
    if amount != amount.to_integral_value():
        raise ValueError(f"{value} is not a whole number of base units")
    return int(amount)


# --- values ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outpoint:
    """A transaction output, named the way an input spends it."""

    txid: str
    vout: int


@dataclass(frozen=True, slots=True)
class Observation:
    """One output that pays an open destination.

    (txid, vout) is unique on a chain, which is what makes recording a
    payment idempotent. `block_height`/`block_hash` are None while the
    transaction is unconfirmed.
    """

    txid: str
    vout: int
    script_hex: str
    amount: int  # base units (satoshi, litoshi)
    block_height: int | None = None
    block_hash: str | None = None
    coinbase: bool = False  # an output of a block's coinbase: spendable only COINBASE_MATURITY blocks on

    @property
    def confirmed(self) -> bool:
        return self.block_hash is not None

    def confirmations(self, *, tip_height: int) -> int:
        """Confirmations with the chain's tip at `tip_height` (0 when unconfirmed)."""
        if self.block_height is None:
            return 0
        return max(0, tip_height - self.block_height + 1)


@dataclass(frozen=True, slots=True)
class PaymentTx:
    """A transaction with outputs to open destinations.

    `inputs` are the outpoints it spends: another transaction spending any
    of them conflicts with it, and once such a conflict is mined this one can
    never be. `replaceable` is the BIP125 signal, known for mempool
    transactions (False for mined ones, where it no longer matters).
    """

    txid: str
    inputs: tuple[Outpoint, ...]
    observations: tuple[Observation, ...]
    replaceable: bool = False

    @property
    def amount(self) -> int:
        return sum(o.amount for o in self.observations)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready form, for a watcher that stores its unconfirmed payments."""
        return {
            "inputs": [[i.txid, i.vout] for i in self.inputs],
            "outputs": [[o.vout, o.script_hex, o.amount] for o in self.observations],
            "replaceable": self.replaceable,
        }

    @classmethod
    def from_json(cls, txid: str, data: Mapping[str, Any]) -> PaymentTx:
        return cls(
            txid=txid,
            inputs=tuple(Outpoint(t, int(v)) for t, v in data.get("inputs", ())),
            observations=tuple(
                Observation(txid, int(vout), script, int(amount)) for vout, script, amount in data["outputs"]
            ),
            replaceable=bool(data.get("replaceable", False)),
        )


@dataclass(frozen=True, slots=True)
class Conflict:
    """`txid` (a payment seen unconfirmed) is dead: `by` spent its inputs."""

    txid: str
    by: str
    outpoint: Outpoint


@dataclass(frozen=True)
class BlockScan:
    """What one block carried, for the watcher.

    `spent` maps every outpoint the block's inputs spend to the spending txid,
    and `txids` holds every transaction in it: with them the watcher tells a
    mempool payment that was mined from one that a conflicting transaction
    made impossible.
    """

    block: BlockRef
    previous_hash: str | None
    time: int  # block header time, seconds since the epoch (UTC)
    tx_count: int
    payments: tuple[PaymentTx, ...]
    spent: Mapping[Outpoint, str] = field(repr=False, compare=False)
    txids: frozenset[str] = field(repr=False, compare=False)

    @property
    def observations(self) -> tuple[Observation, ...]:
        return tuple(o for p in self.payments for o in p.observations)

    def conflicts(self, pending: Iterable[PaymentTx]) -> list[Conflict]:
        """Which of the `pending` (unconfirmed) payments this block makes impossible."""
        found: list[Conflict] = []
        for tx in pending:
            if tx.txid in self.txids:
                continue  # mined here: not a conflict, a confirmation
            hit = next((i for i in tx.inputs if i in self.spent), None)
            if hit is not None:
                found.append(Conflict(txid=tx.txid, by=self.spent[hit], outpoint=hit))
        return found


@dataclass(frozen=True, slots=True)
class ChainTip:
    height: int
    hash: str
    headers: int
    initial_block_download: bool
    chain: str  # "main", "test", "regtest"


# --- blocks ----------------------------------------------------------------------


# Confirmations a coinbase output needs before it can be spent: the network rule
# COINBASE_MATURITY = 100 (Litecoin Core's src/consensus/consensus.h, kept from Bitcoin Core).
COINBASE_MATURITY = 100


def _outputs(
    tx: dict[str, Any], scripts: Container[str], *, decimals: int, height: int | None, block_hash: str | None
) -> tuple[Observation, ...]:
    found: list[Observation] = []
    txid = tx["txid"]
    # `getblock <hash> 2` gives a coinbase transaction's input a "coinbase" field, no "txid".
    coinbase = any("coinbase" in i for i in tx.get("vin", ()))
    for out in tx.get("vout", ()):
        script = out.get("scriptPubKey", {}).get("hex")
        if script is not None and script in scripts:
            found.append(
                Observation(
                    txid=txid,
                    vout=int(out["n"]),
                    script_hex=script,
                    amount=coins_to_base_units(out["value"], decimals=decimals),
                    block_height=height,
                    block_hash=block_hash,
                    coinbase=coinbase,
                )
            )
    return tuple(found)


def _inputs(tx: dict[str, Any]) -> tuple[Outpoint, ...]:
    # Coinbase inputs (and Litecoin's MWEB peg-in/HogEx bookkeeping inputs)
    # spend no canonical outpoint and carry no "txid".
    return tuple(Outpoint(i["txid"], int(i["vout"])) for i in tx.get("vin", ()) if "txid" in i)


def block_parse(block: dict[str, Any], *, scripts: Container[str], decimals: int = BITCOIN_DECIMALS) -> BlockScan:
    """Match a block as returned by `getblock <hash> 2` against `scripts`."""
    height = int(block["height"])
    block_hash = block["hash"]
    payments: list[PaymentTx] = []
    spent: dict[Outpoint, str] = {}
    txids: set[str] = set()
    for tx in block["tx"]:
        txid = tx["txid"]
        txids.add(txid)
        inputs = _inputs(tx)
        for outpoint in inputs:
            spent[outpoint] = txid
        observations = _outputs(tx, scripts, decimals=decimals, height=height, block_hash=block_hash)
        if observations:
            payments.append(PaymentTx(txid=txid, inputs=inputs, observations=observations))
    return BlockScan(
        block=BlockRef(height, block_hash),
        previous_hash=block.get("previousblockhash"),
        time=int(block.get("time", 0)),
        tx_count=len(block["tx"]),
        payments=tuple(payments),
        spent=spent,
        txids=frozenset(txids),
    )


def block_scan(
    rpc: BitcoinRpc, *, block_hash: str, scripts: Container[str], decimals: int = BITCOIN_DECIMALS
) -> BlockScan:
    """Fetch one block (`getblock <hash> 2`) and match it."""
    return block_parse(rpc.call("getblock", block_hash, 2), scripts=scripts, decimals=decimals)


def blocks_scan(
    rpc: BitcoinRpc,
    *,
    block_hashes: Sequence[str],
    scripts: Container[str],
    decimals: int = BITCOIN_DECIMALS,
    blocks_per_request: int = 4,
) -> list[BlockScan]:
    """Fetch and match several blocks, a few per HTTP request."""
    scans: list[BlockScan] = []
    for start in range(0, len(block_hashes), blocks_per_request):
        chunk = block_hashes[start : start + blocks_per_request]
        blocks = rpc.batch([("getblock", (h, 2)) for h in chunk])
        scans.extend(block_parse(b, scripts=scripts, decimals=decimals) for b in blocks)
    return scans


def chain_tip(rpc: BitcoinRpc, *, max_header_lag: int = 2) -> ChainTip:
    """The node's best block; `ChainUnavailable` when the node is not in sync.

    A node still in initial block download, or that knows of headers more
    than `max_header_lag` blocks past its best block, is catching up: what it
    says about confirmations is not final, so the watcher counts as blind.
    """
    info = rpc.call("getblockchaininfo")
    tip = ChainTip(
        height=int(info["blocks"]),
        hash=info["bestblockhash"],
        headers=int(info.get("headers", info["blocks"])),
        initial_block_download=bool(info.get("initialblockdownload", False)),
        chain=str(info.get("chain", "")),
    )
    if tip.initial_block_download:
        raise ChainUnavailable(f"node is in initial block download at height {tip.height}", reason="syncing")
    if tip.headers - tip.height > max_header_lag:
        raise ChainUnavailable(
            f"node is {tip.headers - tip.height} blocks behind the headers it knows", reason="syncing"
        )
    return tip


def block_hashes(rpc: BitcoinRpc, *, heights: Sequence[int]) -> list[str | None]:
    """The node's best-chain hash at each height (None above its tip), one request."""
    results = rpc.batch([("getblockhash", (h,)) for h in heights], return_errors=True)
    hashes: list[str | None] = []
    for result in results:
        if isinstance(result, RpcError):
            if result.code != RPC_INVALID_PARAMETER:
                raise result
            hashes.append(None)
        else:
            hashes.append(result)
    return hashes


class _NodeHashes:
    def __init__(self, rpc: BitcoinRpc) -> None:
        self.rpc = rpc

    def block_hashes(self, *, heights: Sequence[int]) -> list[str | None]:
        return block_hashes(self.rpc, heights=heights)


def fork_find(rpc: BitcoinRpc, *, recent: Sequence[BlockRef]) -> Fork | None:
    """Compare the stored blocks with the node's chain; None when all still match
    (billing.chains.blocks.fork_find, asking this node)."""
    return blocks_fork_find(_NodeHashes(rpc), recent=recent)


def fork_walk(rpc: BitcoinRpc, *, fork: Fork, max_depth: int = 10_000) -> Fork | None:
    """Complete a fork deeper than the stored blocks (`fork.common` is None).

    The node keeps the headers of blocks that left its best chain, so walking
    back from the lowest orphaned block through `previousblockhash` reaches
    the last block both chains share (the first whose `confirmations` is not
    -1). Returns the fork with that common block and every orphaned block down
    to it, lowest first; None when the node does not know the orphaned blocks
    (e.g. it was resynced) or the walk is deeper than `max_depth`.
    """
    if fork.common is not None or not fork.orphaned:
        return fork
    walked: list[BlockRef] = []
    block_hash = min(fork.orphaned).hash
    for _ in range(max_depth):
        try:
            header = rpc.call("getblockheader", block_hash)
        except RpcError as exc:
            if exc.code == RPC_NOT_FOUND:
                return None
            raise
        ref = BlockRef(int(header["height"]), header["hash"])
        if int(header.get("confirmations", -1)) >= 0:
            below = [b for b in walked if b not in fork.orphaned]
            log.warning(
                "deep reorg: fork above height %d, %d block(s) orphaned", ref.height, len(below) + len(fork.orphaned)
            )
            return Fork(common=ref, orphaned=tuple(sorted({*below, *fork.orphaned})))
        walked.append(ref)
        if "previousblockhash" not in header:
            return None
        block_hash = header["previousblockhash"]
    return None


def height_at_time(rpc: BitcoinRpc, *, at: int, tip_height: int) -> int:
    """The lowest height whose median time past is at or after `at` (epoch seconds).

    Median time past never decreases along the chain, so a binary search over
    heights finds it in about log2(tip) header reads. A transaction made at
    `at` can only be in a block at or above the returned height, give or take
    the hour or so median time lags behind the clock: callers subtract a margin
    from `at`. Returns `tip_height` when even the tip is older.
    """
    low, high = 0, tip_height
    while low < high:
        middle = (low + high) // 2
        header = rpc.call("getblockheader", rpc.call("getblockhash", middle))
        if int(header["mediantime"]) >= at:
            high = middle
        else:
            low = middle + 1
    return low


def chain_advance(
    rpc: BitcoinRpc,
    *,
    recent: Sequence[BlockRef],
    scripts: Container[str],
    start_height: int | None = None,
    max_blocks: int = 100,
    max_header_lag: int = 2,
    decimals: int = BITCOIN_DECIMALS,
    blocks_per_request: int = 4,
) -> ChainStep:
    """Follow the node's chain from the stored cursor, at most `max_blocks` at a time.

    `recent` are the stored blocks (the last one is the cursor); when it is
    empty the scan starts at `start_height` (default: the node's tip). A
    reorganisation is reported as `fork` and scanning resumes above its
    common block. Blocks are fetched by hash and must chain onto each other:
    if the node reorganises while we fetch, the step ends early at the last
    block that still links, and the next step sees the fork.
    """
    tip = chain_tip(rpc, max_header_lag=max_header_lag)
    fork = fork_find(rpc, recent=recent)
    base, next_height = resume_point(fork=fork, recent=recent, tip_height=tip.height, start_height=start_height)
    stop = min(tip.height, next_height + max_blocks - 1)
    heights = list(range(next_height, stop + 1))
    hashes = block_hashes(rpc, heights=heights) if heights else []
    wanted = [h for h in hashes if h is not None]
    scans = blocks_scan(
        rpc, block_hashes=wanted, scripts=scripts, decimals=decimals, blocks_per_request=blocks_per_request
    )
    linked: list[BlockScan] = []
    previous = base
    for scan in scans:
        if previous is not None and scan.previous_hash != previous.hash:
            log.info("chain moved while scanning at height %d; resuming next pass", scan.block.height)
            break
        linked.append(scan)
        previous = scan.block
    tip_scanned = linked[-1].block if linked else base
    caught_up = tip_scanned is not None and tip_scanned.hash == tip.hash
    return ChainStep(tip=tip, fork=fork, blocks=tuple(linked), tip_scanned=tip_scanned, caught_up=caught_up)


# --- mempool ----------------------------------------------------------------------


class GoneReason(enum.StrEnum):
    MINED = "mined"  # confirmed in a block the watcher has scanned
    CONFLICTED = "conflicted"  # its inputs are spent by another transaction (RBF, double spend)
    DROPPED = "dropped"  # left the mempool with its inputs unspent (evicted, expired)


@dataclass(frozen=True, slots=True)
class GoneTx:
    """A payment reported earlier as unconfirmed that is no longer in the mempool.

    Anything but MINED means the payment no longer counts. A DROPPED one may
    come back if someone re-broadcasts it: it is then reported as new again.
    """

    txid: str
    reason: GoneReason
    by: str = ""  # the conflicting txid, when known


@dataclass(frozen=True)
class MempoolScan:
    new: tuple[PaymentTx, ...]  # payments first seen in this pass
    gone: tuple[GoneTx, ...]  # payments reported before, now gone
    size: int  # transactions in the node's mempool
    fetched: int  # transactions decoded in this pass (the new ones)
    deferred: bool  # the node has blocks the caller has not scanned: gone ones wait
    sequence: int | None = None  # the node's mempool sequence at the listing (None: the node has none)
    unchanged: bool = False  # same sequence and best block as the pass before: nothing to look at

    @property
    def observations(self) -> tuple[Observation, ...]:
        return tuple(o for p in self.new for o in p.observations)


def mempool_listing(reply: Any) -> tuple[list[str], int | None]:
    """The txids and mempool sequence of `getrawmempool false true`.

    Bitcoin Core and Litecoin Core 0.21 on answer `{"txids": [...],
    "mempool_sequence": n}` (src/rpc/blockchain.cpp, `getrawmempool`; Litecoin
    Core v0.21.2.1's `help getrawmempool` says the same); a plain list (an
    older node, or a stand-in) has no sequence.
    """
    if isinstance(reply, Mapping):
        return list(reply["txids"]), int(reply["mempool_sequence"])
    return list(reply), None


class MempoolWatcher:
    """Follows the node's mempool by its changes, decoding each txid once.

    Keep one instance per node for the life of the worker. Each pass lists the
    mempool's txids with its sequence (`getrawmempool false true`): an
    unchanged sequence and best block means nothing entered or left; otherwise
    only the txids not seen before are decoded (`getrawtransaction`), so the
    node calls grow with new transactions, not with the mempool. The seen-set
    is pruned to the current mempool each pass; `seen_load` hands it back after
    a restart (the watcher stores it, see `seen_changes`), and `track` the
    unconfirmed payments recorded earlier, so a payment that vanished while
    the worker was down is still reported gone.
    """

    def __init__(self, rpc: BitcoinRpc, *, decimals: int = BITCOIN_DECIMALS, fetch_batch: int = 500) -> None:
        self.rpc = rpc
        self.decimals = decimals
        self.fetch_batch = fetch_batch
        self._seen: set[str] = set()
        self._payments: dict[str, PaymentTx] = {}
        self._stored: set[str] | None = None  # the seen-set as last stored; None: never loaded
        self.sequence: int | None = None  # the node's mempool sequence at the last pass
        self._best: str | None = None  # the node's best block at the last pass
        self._size = -1  # transactions in the mempool at the last pass

    @property
    def pending(self) -> tuple[PaymentTx, ...]:
        """Payments reported as new and not yet reported gone or mined."""
        return tuple(self._payments.values())

    @property
    def loaded(self) -> bool:
        """Whether the stored seen-set was handed back (`seen_load`) since this watcher was made."""
        return self._stored is not None

    def seen_load(self, txids: Iterable[str], *, sequence: int | None = None) -> None:
        """Take the seen-set a watcher stored (e.g. before a restart): these txids
        are not decoded again while they stay in the mempool."""
        stored = set(txids)
        self._stored = set(stored)
        self._seen = stored | set(self._payments)
        self.sequence, self._best = sequence, None

    def seen_changes(self) -> tuple[set[str], set[str]]:
        """(added, dropped): how the seen-set differs from what was stored last."""
        stored = self._stored or set()
        return self._seen - stored, stored - self._seen

    def seen_stored(self) -> None:
        """The caller stored the seen-set as it stands (`seen_changes` applied)."""
        self._stored = set(self._seen)

    def track(self, payments: Iterable[PaymentTx]) -> None:
        """Watch payments recorded earlier (e.g. by a previous worker)."""
        for tx in payments:
            self._payments[tx.txid] = tx
            self._seen.add(tx.txid)

    def pending_replace(self, payments: Iterable[PaymentTx]) -> None:
        """Make `payments` exactly the pending set (e.g. what the database says,
        when another worker process ran the previous passes)."""
        wanted = {tx.txid: tx for tx in payments}
        if wanted.keys() != self._payments.keys():
            self._best = None  # another process's passes: look again even if the node did not move
        self.forget([txid for txid in self._payments if txid not in wanted])
        self.track(wanted.values())

    def forget(self, txids: Iterable[str]) -> None:
        """Look at these txids afresh on the next pass.

        Call it with the payments a reorg un-counted: back in the mempool,
        they are reported as new (unconfirmed) again.
        """
        for txid in txids:
            self._seen.discard(txid)
            self._payments.pop(txid, None)
            self._best = None

    def blocks_applied(self, scans: Iterable[BlockScan]) -> list[GoneTx]:
        """Tell the watcher which blocks the caller recorded.

        Returns the pending payments these blocks settle one way or the other:
        MINED (the block holds them) or CONFLICTED (the block spends one of
        their inputs in another transaction, `by`). They stop being tracked,
        and the block's transactions are forgotten, so one that a reorg puts
        back in the mempool is looked at again.
        """
        gone: list[GoneTx] = []
        for scan in scans:
            self._seen -= scan.txids
            for txid in [t for t in self._payments if t in scan.txids]:
                del self._payments[txid]
                gone.append(GoneTx(txid, GoneReason.MINED))
            for conflict in scan.conflicts(self._payments.values()):
                del self._payments[conflict.txid]
                gone.append(GoneTx(conflict.txid, GoneReason.CONFLICTED, by=conflict.by))
        return gone

    def scan(self, *, scripts: Container[str], scanned_tip: str | None = None) -> MempoolScan:
        """One pass over the mempool's changes since the last.

        `scanned_tip` is the hash of the block the caller's cursor stands on.
        When the node's best block differs, a payment that left the mempool may
        simply have been mined in a block the caller has not scanned yet, so
        gone payments are held back (`deferred`) until the cursor catches up.
        """
        # Mempool first, then the best block: a block connected between the two
        # shows up as a moved tip (defer), never as a silently emptied mempool.
        listing, best = self.rpc.batch([("getrawmempool", (False, True)), ("getbestblockhash", ())])
        txids, sequence = mempool_listing(listing)
        deferred = scanned_tip is not None and best != scanned_tip
        same = (sequence, best, len(txids)) == (self.sequence, self._best, self._size)
        if sequence is not None and same and not deferred:
            # Nothing entered or left the mempool (each bumps the sequence) and no block came; the
            # size guards against a restarted node whose new sequence happens to be the same.
            return MempoolScan(
                new=(), gone=(), size=len(txids), fetched=0, deferred=False, sequence=sequence, unchanged=True
            )
        current = set(txids)
        fresh = [t for t in txids if t not in self._seen]
        new: list[PaymentTx] = []
        fetched = 0
        for start in range(0, len(fresh), self.fetch_batch):
            chunk = fresh[start : start + self.fetch_batch]
            calls = [("getrawtransaction", (t, True)) for t in chunk]
            for txid, tx in zip(chunk, self.rpc.batch(calls, return_errors=True), strict=True):
                if isinstance(tx, RpcError):
                    if tx.code != RPC_NOT_FOUND:
                        raise tx
                    current.discard(txid)  # left the mempool since the listing
                    continue
                fetched += 1
                self._seen.add(txid)
                observations = _outputs(tx, scripts, decimals=self.decimals, height=None, block_hash=None)
                if observations:
                    payment = PaymentTx(
                        txid=txid,
                        inputs=_inputs(tx),
                        observations=observations,
                        replaceable=any(int(i.get("sequence", 0xFFFFFFFF)) < 0xFFFFFFFE for i in tx["vin"]),
                    )
                    self._payments[txid] = payment
                    new.append(payment)
        gone: list[GoneTx] = []
        missing = [tx for txid, tx in self._payments.items() if txid not in current]
        if missing and not deferred:
            gone = self._classify(missing)
            for g in gone:
                del self._payments[g.txid]
        self._seen &= current | set(self._payments)
        # A deferred pass has gone payments left to classify: the next one looks again.
        self.sequence, self._best, self._size = sequence, (None if deferred else best), len(txids)
        return MempoolScan(
            new=tuple(new), gone=tuple(gone), size=len(txids), fetched=fetched, deferred=deferred, sequence=sequence
        )

    def _classify(self, missing: Collection[PaymentTx]) -> list[GoneTx]:
        """Why each payment left the mempool, asking the node (one request).

        Its own output in the chain's UTXO set means it was mined (in a block
        the caller has scanned, or the tip check would have deferred us). An
        input no longer unspent, in the chain or the mempool, was taken by
        another transaction: CONFLICTED. Inputs all unspent again: DROPPED.
        """
        calls: list[tuple[str, tuple[Any, ...]]] = []
        for tx in missing:
            first = tx.observations[0]
            calls.append(("gettxout", (tx.txid, first.vout, False)))
            calls.extend(("gettxout", (i.txid, i.vout, True)) for i in tx.inputs)
        results = iter(self.rpc.batch(calls))
        gone: list[GoneTx] = []
        for tx in missing:
            mined = next(results) is not None
            inputs_unspent = [next(results) is not None for _ in tx.inputs]
            if mined:
                reason = GoneReason.MINED
            elif not all(inputs_unspent):
                reason = GoneReason.CONFLICTED
            else:
                reason = GoneReason.DROPPED
            gone.append(GoneTx(tx.txid, reason))
        return gone
