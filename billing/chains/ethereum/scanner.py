"""Scanner core of the Ethereum family: reads blocks and finds transfers to watched addresses.

Nothing here touches the database: `EvmScanner` reads the node and returns
plain values (`EvmBlockScan`, `EvmTip`); the watcher that owns the cursor
decides what to store. For a run of consecutive blocks, `blocks_read`:

1. fetches the blocks with their transactions (`eth_getBlockByNumber`, full,
   a few per JSON-RPC batch) and keeps only those that chain onto each other
   and onto the block below (`parentHash`): if the node reorganises while we
   read, the run ends at the last block that still links, and the next run's
   fork check sees the rest;
2. matches each transaction's `to` against the watched set (a set lookup: a
   thousand transactions against 100,000 open addresses costs what it costs
   against ten) and fetches receipts only for those that match: a payment
   counts only with receipt status 1;
3. reads the range's ERC-20 `Transfer` logs in one `eth_getLogs` (split in
   half when the provider refuses a range; `tokens.LogReader`) and matches
   their `to` topic;
4. finds internal transfers (ether moved by contract calls) with the node's
   trace API, or without one by balance checks (`balances`), per the mode:

       trace_block   `trace_block` per block (parity-style traces)
       debug_trace   `debug_traceBlockByNumber` with the callTracer
       balance       balances of the watched ether addresses at every block
       auto          the first of these the node answers (probed once)

Every answer is checked against the block hash read in step 1 (receipts, logs
and parity traces carry it; callTracer results are checked against the
block's transaction list), so a transfer is always reported with the block
that really holds it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Collection, Container, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from billing.chains.blocks import BlockRef
from billing.chains.errors import ChainUnavailable, NodeMismatch, RpcError
from billing.chains.ethereum.abi import MULTICALL3_ADDRESS, hex_int
from billing.chains.ethereum.balances import BalanceReader, balance_transfers
from billing.chains.ethereum.rpc import EthRpc
from billing.chains.ethereum.tokens import LogReader, token_decimals, transfer_logs_parse
from billing.chains.ethereum.traces import DEBUG_TRACE, TRACE_BLOCK, call_traces_parse, parity_traces_parse
from billing.chains.ethereum.transfers import NATIVE, EvmBlockScan, Transfer

log = logging.getLogger(__name__)

BALANCE_MODE = "balance"
AUTO = "auto"
INTERNAL_MODES = (AUTO, TRACE_BLOCK, DEBUG_TRACE, BALANCE_MODE)
CALL_TRACER = {"tracer": "callTracer"}


@dataclass(frozen=True, slots=True)
class EvmTip:
    height: int
    hash: str
    finalized: int | None = None  # the node's `finalized` block, when asked


class ChainMoved(Exception):
    """An answer belongs to another block than the one read at that height."""


class Untraceable(Exception):
    """The node cannot trace a transaction of the first block read, run after run."""


# Runs in a row on which the node cannot trace a transaction of the block the scan is at
# (a tracer's timeout on a heavy transaction) before that block's ether moved by
# contracts is read from the watched addresses' balances instead (the balance mode, for
# that block alone). Until then the watcher is blind, and says so.
UNTRACEABLE_RUNS = 3

# Block hash -> runs in a row its trace failed at a scan's start, in this process. Kept
# outside the scanner: a failed run drops the process's scanners (`process_state_clear`),
# and the count would start again at every run.
_untraceable: dict[str, int] = {}


class EvmScanner:
    """Reads one EVM node for the watcher. Keep one per node for the life of the
    process: it remembers the trace mode found, the log span the provider
    accepts and the last balances read."""

    def __init__(
        self,
        rpc: EthRpc,
        *,
        internal: str = AUTO,
        blocks_per_request: int = 10,
        log_span: int = 1000,
        token_contracts: Sequence[str] | None = None,
        multicall: str | None = MULTICALL3_ADDRESS,
        balances_per_call: int = 500,
    ) -> None:
        if internal not in INTERNAL_MODES:
            raise ValueError(f"internal transfer mode {internal!r} is not one of {', '.join(INTERNAL_MODES)}")
        self.rpc = rpc
        self.internal_setting = internal
        self._internal: str | None = None if internal == AUTO else internal
        self.blocks_per_request = max(1, blocks_per_request)
        # None: every contract's Transfer logs (strays included); else only these contracts'.
        self.token_contracts = [c.lower() for c in token_contracts] if token_contracts is not None else None
        self.logs = LogReader(rpc, span=log_span)
        self.balances = BalanceReader(rpc, multicall=multicall, per_call=balances_per_call)

    def use(self, rpc: EthRpc) -> None:
        """Talk through `rpc` from now on (a run's connection), keeping what was learnt."""
        self.rpc = self.logs.rpc = self.balances.rpc = rpc

    # --- the node ----------------------------------------------------------------

    def chain_id_check(self, *, expected: int) -> None:
        """Refuse a node on another chain than `expected` (ETH_CHAIN_ID)."""
        chain_id = hex_int(self.rpc.call("eth_chainId"))
        if chain_id != expected:
            raise NodeMismatch(
                f"the node at {self.rpc.endpoint} is on chain id {chain_id}, but ETH_CHAIN_ID is {expected}"
            )

    def sync_check(self) -> None:
        """ChainUnavailable while the node is still syncing: what it says is not final."""
        syncing = self.rpc.call("eth_syncing")
        if syncing:
            current = hex_int(syncing.get("currentBlock")) if isinstance(syncing, dict) else None
            highest = hex_int(syncing.get("highestBlock")) if isinstance(syncing, dict) else None
            raise ChainUnavailable(f"the node is syncing (block {current} of {highest})", reason="syncing")

    def decimals_check(self, expected: Mapping[str, tuple[str, int]]) -> None:
        """Each token contract's `decimals()` must be what its currency says.

        `expected` maps a contract address to (setting name, decimals); a
        contract that answers otherwise (or is not a contract on this chain)
        stops the watcher: crediting it would misread every amount.
        """
        for contract, (setting, decimals) in expected.items():
            found = token_decimals(self.rpc, contract=contract)
            if found != decimals:
                what = "no decimals() (is it a token on this chain?)" if found is None else f"{found} decimals"
                raise ChainUnavailable(f"{setting} {contract} has {what}; expected {decimals}", reason="misconfigured")

    def tip(self, *, finalized: bool = False) -> EvmTip:
        """The node's newest block, and with `finalized` its `finalized` block height."""
        calls: list[tuple[str, Sequence[Any]]] = [("eth_getBlockByNumber", ("latest", False))]
        if finalized:
            calls.append(("eth_getBlockByNumber", ("finalized", False)))
        results = self.rpc.batch(calls, return_errors=True)
        latest = results[0]
        if isinstance(latest, RpcError):
            raise latest
        if not latest:
            raise ChainUnavailable("the node has no latest block", reason="bad_response")
        final: int | None = None
        if finalized:
            answer = results[1]
            if isinstance(answer, RpcError) or not answer:
                raise ChainUnavailable(
                    f"the node at {self.rpc.endpoint} has no `finalized` block (ETH_FINALITY=finalized needs a "
                    "post-merge execution client)",
                    reason="bad_response",
                )
            final = hex_int(answer["number"])
        return EvmTip(height=hex_int(latest["number"]), hash=latest["hash"], finalized=final)

    def block_hashes(self, *, heights: Sequence[int]) -> list[str | None]:
        """The node's best-chain hash at each height (None above its tip)."""
        blocks = self.rpc.batch([("eth_getBlockByNumber", (hex(h), False)) for h in heights])
        return [b["hash"] if b else None for b in blocks]

    def block_time(self, *, height: int) -> int:
        block = self.rpc.call("eth_getBlockByNumber", hex(height), False)
        if not block:
            raise RpcError(0, f"no block at height {height}", method="eth_getBlockByNumber")
        return hex_int(block["timestamp"])

    def height_at_time(self, *, at: int, tip_height: int) -> int:
        """The lowest height whose timestamp is at or after `at` (epoch seconds);
        `tip_height` when even the tip is older. Timestamps only grow along the chain."""
        low, high = 0, tip_height
        while low < high:
            middle = (low + high) // 2
            if self.block_time(height=middle) >= at:
                high = middle
            else:
                low = middle + 1
        return low

    @property
    def mode(self) -> str:
        """The internal-transfer mode in use ("" until `auto` has probed the node)."""
        return self._internal or ""

    def internal_mode(self, *, probe_height: int) -> str:
        """How internal transfers are found on this node (probed once in `auto`)."""
        if self._internal is None:
            self._internal = self._probe(probe_height)
            log.info("%s: internal transfers found by %s", self.rpc.endpoint, self._internal)
        return self._internal

    def _probe(self, height: int) -> str:
        for mode, call in (
            (TRACE_BLOCK, ("trace_block", (hex(height),))),
            (DEBUG_TRACE, ("debug_traceBlockByNumber", (hex(height), CALL_TRACER))),
        ):
            try:
                self.rpc.call(call[0], *call[1])
            except RpcError as exc:
                log.info("%s does not answer %s (%s)", self.rpc.endpoint, call[0], exc.message)
                continue
            return mode
        return BALANCE_MODE

    # --- blocks ------------------------------------------------------------------

    def blocks_read(
        self,
        *,
        heights: Sequence[int],
        watched: Container[str],
        base: BlockRef | None,
        balance_watched: Collection[str] = (),
    ) -> list[EvmBlockScan]:
        """Read and match consecutive blocks (see the module docstring).

        `watched`: lowercase addresses any transfer to which is reported;
        `base`: the block below the first (the cursor), to link onto;
        `balance_watched`: the addresses whose balances are checked in the
        balance mode (the open ether destinations). Returns the blocks that
        link, lowest first; fewer than asked when the node's chain moved or
        ends below the last height.
        """
        if not heights:
            return []
        blocks = self._blocks_fetch(heights, base)
        if not blocks:
            return []
        mode = self.internal_mode(probe_height=hex_int(blocks[0]["number"]))
        by_height: defaultdict[int, list[Transfer]] = defaultdict(list)
        refs = [BlockRef(hex_int(b["number"]), b["hash"]) for b in blocks]
        limit = len(blocks)  # blocks that are consistent so far
        try:
            limit = self._natives(blocks, watched, by_height, limit)
            limit = self._tokens(blocks, refs, watched, by_height, limit)
            if mode == BALANCE_MODE:
                limit = self._balance(blocks, refs, base, balance_watched, by_height, limit)
            else:
                try:
                    limit = self._traces(mode, blocks, refs, watched, by_height, limit)
                except Untraceable as exc:
                    log.warning("%s; reading its ether moved by contracts from balances instead", exc)
                    limit = self._balance(blocks, refs, base, balance_watched, by_height, 1)
                    _untraceable.pop(refs[0].hash, None)
        except ChainMoved as exc:
            log.info("chain moved while reading blocks: %s", exc)
            self.balances.forget()
        scans: list[EvmBlockScan] = []
        for block, ref in zip(blocks[:limit], refs[:limit], strict=True):
            scans.append(
                EvmBlockScan(
                    block=ref,
                    parent_hash=block["parentHash"],
                    time=hex_int(block["timestamp"]),
                    tx_count=len(block["transactions"]),
                    transfers=tuple(by_height.get(ref.height, ())),
                )
            )
        return scans

    def _blocks_fetch(self, heights: Sequence[int], base: BlockRef | None) -> list[dict[str, Any]]:
        linked: list[dict[str, Any]] = []
        previous = base.hash if base is not None else None
        for start in range(0, len(heights), self.blocks_per_request):
            chunk = heights[start : start + self.blocks_per_request]
            for block in self.rpc.batch([("eth_getBlockByNumber", (hex(h), True)) for h in chunk]):
                if not block:
                    return linked  # above the node's tip
                if previous is not None and block["parentHash"] != previous:
                    log.info("chain moved while scanning at height %d; resuming next pass", hex_int(block["number"]))
                    return linked
                linked.append(block)
                previous = block["hash"]
        return linked

    def _natives(
        self, blocks: list[dict[str, Any]], watched: Container[str], found: dict[int, list[Transfer]], limit: int
    ) -> int:
        """Top-level transactions to watched addresses with value, receipt status 1."""
        candidates: list[tuple[int, dict[str, Any]]] = []
        for position, block in enumerate(blocks):
            for tx in block["transactions"]:
                to = tx.get("to")
                if to and to.lower() in watched and hex_int(tx.get("value")) > 0:
                    candidates.append((position, tx))
        if not candidates:
            return limit
        receipts = self.rpc.batch([("eth_getTransactionReceipt", (tx["hash"],)) for _, tx in candidates])
        for (position, tx), receipt in zip(candidates, receipts, strict=True):
            block = blocks[position]
            if not receipt or receipt.get("blockHash") != block["hash"]:
                limit = min(limit, position)
                continue
            if position >= limit or hex_int(receipt.get("status")) != 1:
                continue
            height = hex_int(block["number"])
            found[height].append(
                Transfer(
                    txid=tx["hash"],
                    position="tx",
                    kind=NATIVE,
                    to=tx["to"].lower(),
                    amount=hex_int(tx["value"]),
                    sender=(tx.get("from") or "").lower(),
                    block_height=height,
                    block_hash=block["hash"],
                )
            )
        return limit

    def _tokens(
        self,
        blocks: list[dict[str, Any]],
        refs: list[BlockRef],
        watched: Container[str],
        found: dict[int, list[Transfer]],
        limit: int,
    ) -> int:
        if limit == 0:
            return 0
        first, last = refs[0].height, refs[limit - 1].height
        logs = self.logs.logs(first=first, last=last, contracts=self.token_contracts)
        # A range answered by a node behind the one that served the blocks lacks their logs.
        missed, unknown = self.logs.missed(blocks=blocks[:limit], logs=logs, contracts=self.token_contracts)
        logs.extend(missed)
        if unknown is not None:
            limit = unknown
        hashes = {r.height: r.hash for r in refs[:limit]}
        for entry in logs:
            height = hex_int(entry["blockNumber"])
            if hashes.get(height) != entry.get("blockHash"):
                limit = min(limit, height - first)
        for transfer in transfer_logs_parse(logs, watched=watched):
            if transfer.block_height is not None and transfer.block_height - first < limit:
                found[transfer.block_height].append(transfer)
        return limit

    def _traces(
        self,
        mode: str,
        blocks: list[dict[str, Any]],
        refs: list[BlockRef],
        watched: Container[str],
        found: dict[int, list[Transfer]],
        limit: int,
    ) -> int:
        if limit == 0:
            return 0
        calls: list[tuple[str, tuple[Any, ...]]]
        if mode == TRACE_BLOCK:
            calls = [("trace_block", (hex(r.height),)) for r in refs[:limit]]
        else:
            calls = [("debug_traceBlockByNumber", (hex(r.height), CALL_TRACER)) for r in refs[:limit]]
        results = self.rpc.batch(calls)
        for position, (block, ref, traces) in enumerate(zip(blocks[:limit], refs[:limit], results, strict=True)):
            txids = [tx["hash"] for tx in block["transactions"]]
            if mode == TRACE_BLOCK:
                if any(t.get("blockHash") not in (None, ref.hash) for t in traces):
                    return min(limit, position)
                transfers = parity_traces_parse(traces, watched=watched, height=ref.height, block_hash=ref.hash)
            else:
                traced = [t.get("txHash") for t in traces]
                if len(traces) != len(txids) or any(
                    t is not None and t != x for t, x in zip(traced, txids, strict=True)
                ):
                    return min(limit, position)
                try:
                    transfers = call_traces_parse(
                        traces, txids=txids, watched=watched, height=ref.height, block_hash=ref.hash
                    )
                except ValueError as exc:  # a transaction the node could not trace (a tracer timeout)
                    if position > 0:
                        return position  # the blocks below it; the next step starts at it
                    runs = _untraceable.get(ref.hash, 0) + 1
                    _untraceable.clear()  # one block at a time: the one the scan is stuck at
                    _untraceable[ref.hash] = runs
                    if runs >= UNTRACEABLE_RUNS:
                        raise Untraceable(f"block {ref.height}: {exc} ({runs} runs)") from exc
                    # Blind, and said so (health, back-off), rather than a crash on every run.
                    raise ChainUnavailable(f"block {ref.height}: {exc}", reason="bad_response") from exc
            order = {txid: i for i, txid in enumerate(txids)}
            found[ref.height].extend(sorted(transfers, key=lambda t: (order.get(t.txid, 0), t.position)))
        return limit

    def _balance(
        self,
        blocks: list[dict[str, Any]],
        refs: list[BlockRef],
        base: BlockRef | None,
        addresses: Collection[str],
        found: dict[int, list[Transfer]],
        limit: int,
    ) -> int:
        """Balance rises the blocks' own transactions do not explain (see `balances`)."""
        watched = sorted(addresses)
        if not watched or limit == 0:
            return limit
        watched_set = frozenset(watched)
        # Transactions sent from a watched address: their value and fees leave it.
        spenders: list[tuple[int, dict[str, Any]]] = [
            (i, tx)
            for i, block in enumerate(blocks[:limit])
            for tx in block["transactions"]
            if (tx.get("from") or "").lower() in watched_set
        ]
        receipts = (
            self.rpc.batch([("eth_getTransactionReceipt", (tx["hash"],)) for _, tx in spenders]) if spenders else []
        )
        spent: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        for (i, tx), receipt in zip(spenders, receipts, strict=True):
            if not receipt or receipt.get("blockHash") != blocks[i]["hash"]:
                raise ChainMoved(f"receipt of {tx['hash']} is not in block {refs[i].height}")
            fee = hex_int(receipt.get("gasUsed")) * hex_int(receipt.get("effectiveGasPrice"))
            fee += hex_int(receipt.get("blobGasUsed")) * hex_int(receipt.get("blobGasPrice"))
            value = hex_int(tx.get("value")) if hex_int(receipt.get("status")) == 1 else 0
            spent[i][tx["from"].lower()] += fee + value
        parent = base if base is not None else BlockRef(refs[0].height - 1, blocks[0]["parentHash"])
        before = self.balances.before(watched, parent=parent)
        for i, ref in enumerate(refs[:limit]):
            after = self.balances.read(watched, block=ref)
            received: dict[str, int] = defaultdict(int)
            for t in found.get(ref.height, ()):
                if t.kind == NATIVE:
                    received[t.to] += t.amount
            found[ref.height].extend(
                balance_transfers(block=ref, before=before, after=after, received=received, spent=spent.get(i, {}))
            )
            self.balances.remember(after, block=ref)
            before = after
        return limit
