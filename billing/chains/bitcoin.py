"""The watcher of the Bitcoin family: BTC on Bitcoin Core, LTC on Litecoin Core.

One run (`bitcoin_chain_scan`) follows the node from the stored cursor and
hands what it finds to the billing state machine:

1. Blocks. `chain_advance` (billing.chains.bitcoin_scan) reports a fork, if
   the node left the stored chain, and the next blocks. A fork is applied in
   one transaction: payments of orphaned blocks are un-counted, unless they
   are back in the node's mempool (then they count as unconfirmed) or in the
   new branch (then the block below records them again), and the cursor goes
   back to the fork point. Each new block is then recorded in one
   transaction of its own: its payments (`payment_observe`, confirmations =
   the node's tip - height + 1), the unconfirmed payments it made impossible
   (`payment_uncount`), and the cursor moved onto it. A worker killed at any
   point either committed the block, cursor included, or nothing of it, and
   recording is idempotent on (chain, txid, output): it credits exactly once.
2. Confirmations. Payments in blocks that have not reached the policy yet are
   brought up to date with the node's tip.
3. The mempool. New transactions paying open destinations are recorded with
   0 confirmations (the invoice moves to `processing` within one run);
   payments replaced (RBF), double spent or dropped are un-counted.

A run reads at most `CHAIN_SCAN_MAX_BLOCKS` blocks; catching up after
downtime goes on at the next run, however far back the cursor is. When the
node cannot answer (down, warming up, still syncing, on another network) the
run records the failure on the chain's `ChainState`, which `/readyz`,
`GET /api/v1/currencies`, the admin and the expiry job read; the periodic
task then backs off exponentially.

Unconfirmed payments are remembered in `ChainState.extra["mempool"]` with the
outpoints they spend, so whichever worker process runs next can still tell a
replaced payment from a mined one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Max, Min
from django.utils import timezone

from billing import services
from billing.chains.bitcoin_scan import (
    RPC_NOT_FOUND,
    BlockRef,
    BlockScan,
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
from billing.chains.bitcoind import BitcoinRpc, ChainUnavailable, RpcError
from billing.models import ChainBlock, ChainState, Payment, PaymentRequest, PaymentStatus
from billing.selectors import watched_match_keys
from core.errors import DomainError

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


class NodeMismatch(ChainUnavailable):
    """The node follows another network or another coin than the settings say."""

    def __init__(self, message: str) -> None:
        super().__init__(message, reason="wrong_node")


class CursorMoved(Exception):
    """Another scanner moved the cursor under this one: stop, it is doing the work."""


@dataclass
class ScanReport:
    """What one run did. `skipped` says why it did nothing ("busy": another
    worker holds the chain's lease; "backoff": the node failed recently;
    "not_watched"); `error` is the node's failure, when the run failed."""

    currency: str
    chain: str
    skipped: str = ""
    error: str = ""
    height: int | None = None  # the cursor after the run
    tip_height: int | None = None  # the node's tip
    blocks: int = 0
    recorded: int = 0  # payments recorded or updated from blocks
    unconfirmed: int = 0  # new payments seen in the mempool
    confirmations_updated: int = 0
    uncounted: int = 0  # payments un-counted: orphaned, replaced, double spent, dropped
    reorgs: int = 0
    caught_up: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.error and not self.skipped

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        if self.skipped:
            return f"{self.currency}: skipped ({self.skipped}){': ' + self.error if self.error else ''}"
        if self.error:
            return f"{self.currency}: failed: {self.error}"
        behind = (self.tip_height or 0) - (self.height if self.height is not None else -1)
        lag = "" if self.caught_up else f", {behind} block(s) behind"
        return (
            f"{self.currency}: cursor at {self.height} (node tip {self.tip_height}{lag}); "
            f"{self.blocks} block(s), {self.recorded} payment(s) from blocks, {self.unconfirmed} unconfirmed, "
            f"{self.confirmations_updated} confirmation update(s), {self.uncounted} un-counted, "
            f"{self.reorgs} reorg(s) in {self.seconds:.2f}s"
        )


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
    """Forget this process's mempool watchers (all, or one chain's) and node checks."""
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


# --- Cursor -------------------------------------------------------------------------------


def _state(chain: str) -> ChainState:
    state, _ = ChainState.objects.get_or_create(chain=chain)
    return state


def _recent(chain: str) -> list[BlockRef]:
    rows = ChainBlock.objects.filter(chain=chain).order_by("-height").values_list("height", "block_hash")
    return sorted(BlockRef(h, b) for h, b in rows[: settings.CHAIN_REORG_WINDOW])


def _pending_json(mempool: MempoolWatcher) -> dict:
    return {tx.txid: tx.as_json() for tx in mempool.pending}


def _pending_load(state: ChainState) -> list[PaymentTx]:
    stored: Mapping = (state.extra or {}).get("mempool", {})
    return [PaymentTx.from_json(txid, data) for txid, data in stored.items()]


def _cursor_store(*, state: ChainState, block: BlockRef, mempool: MempoolWatcher) -> None:
    """Move the cursor onto `block` (inside the block's transaction)."""
    chain = state.chain
    ChainBlock.objects.update_or_create(chain=chain, height=block.height, defaults={"block_hash": block.hash})
    ChainBlock.objects.filter(chain=chain, height__lte=block.height - settings.CHAIN_REORG_WINDOW).delete()
    state.height, state.block_hash = block.height, block.hash
    state.extra = {**(state.extra or {}), "mempool": _pending_json(mempool)}
    state.save(update_fields=["height", "block_hash", "extra"])


def _state_lock(chain: str) -> ChainState:
    return ChainState.objects.select_for_update().get(chain=chain)


def bitcoin_cursor_set(*, currency: str, height: int) -> BlockRef:
    """Put the cursor on the node's block at `height`: the next run scans from
    `height + 1`. Going back rescans (recording is idempotent); going forward
    skips blocks. Clears the stored recent blocks."""
    family = _family(currency)
    url = rpc_url(currency=family.currency)
    if not url:
        raise DomainError("chain_not_watched", f"{family.currency}_RPC_URL is not set.")
    if height < 0:
        raise DomainError("invalid", "A height is 0 or more.", details={"height": height})
    try:
        with BitcoinRpc(url) as rpc:
            block_hash = rpc.call("getblockhash", height)
    except RpcError as exc:
        raise DomainError(
            "invalid", f"The node has no block at height {height}.", details={"height": height, "node": exc.message}
        ) from None
    _state(family.chain)
    with transaction.atomic():
        state = _state_lock(family.chain)
        before = (state.height, state.block_hash)
        ChainBlock.objects.filter(chain=family.chain).delete()
        ChainBlock.objects.create(chain=family.chain, height=height, block_hash=block_hash)
        state.height, state.block_hash = height, block_hash
        state.save(update_fields=["height", "block_hash"])
        from core.audit import audit_record

        audit_record(
            actor=None,
            action="chain.cursor_set",
            obj=state,
            reason="cursor set by an operator",
            changes={"height": [before[0], height], "block_hash": [before[1], block_hash]},
        )
    process_state_clear(chain=family.chain)
    log.warning("%s cursor set to height %d (%s)", family.chain, height, block_hash)
    return BlockRef(height, block_hash)


def _first_height(family: Family, rpc: BitcoinRpc, *, tip_height: int, now: datetime) -> int:
    """Where a watcher without a cursor starts: the first block that may hold a
    payment to a destination still watched, or the tip when there is none."""
    horizon = now - timedelta(days=settings.WATCH_AFTER_CLOSE_DAYS)
    oldest = PaymentRequest.objects.filter(currency=family.currency, invoice__monitoring_until__gte=horizon).aggregate(
        at=Min("created_at")
    )["at"]
    if oldest is None:
        return tip_height
    return height_at_time(rpc, at=int((oldest - FIRST_SCAN_MARGIN).timestamp()), tip_height=tip_height)


# --- Recording ------------------------------------------------------------------------------


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
    )


def _tx_uncount(family: Family, txid: str, *, reason: str, now: datetime | None) -> int:
    """Un-count every output of `txid` that pays us; how many were counted."""
    outputs = Payment.objects.filter(chain=family.chain, txid=txid).exclude(status=PaymentStatus.REMOVED)
    count = 0
    for index in list(outputs.values_list("output_index", flat=True)):
        services.payment_uncount(chain=family.chain, txid=txid, output_index=index, reason=reason, now=now)
        count += 1
    if count:
        log.warning("%s %s un-counted: %s", family.chain, txid, reason)
    return count


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


def _fork_apply(
    family: Family,
    rpc: BitcoinRpc,
    mempool: MempoolWatcher,
    fork: Fork,
    new_blocks: Iterable[BlockScan],
    *,
    now: datetime | None,
) -> int:
    """Un-count what the orphaned blocks carried and move the cursor back to the
    fork point, in one transaction. Returns how many payments were un-counted."""
    orphaned = {b.hash: b for b in fork.orphaned}
    hit = list(
        Payment.objects.filter(chain=family.chain, block_hash__in=list(orphaned))
        .exclude(status=PaymentStatus.REMOVED)
        .select_related("request")
    )
    again = {o.txid for scan in new_blocks for o in scan.observations}
    in_pool = _in_mempool(rpc, sorted({p.txid for p in hit if p.txid not in again}))
    uncounted = 0
    with transaction.atomic():
        state = _state_lock(family.chain)
        for p in hit:
            if p.txid in again:
                continue  # mined again in the new branch: its block records it next
            block = orphaned[p.block_hash]
            if p.txid in in_pool:
                services.payment_observe(
                    observation=services.Observation(
                        currency=p.currency,
                        txid=p.txid,
                        output_index=p.output_index,
                        match_key=p.request.match_key,
                        amount=int(p.amount),
                        confirmations=0,
                    ),
                    now=now,
                )
                log.warning(
                    "%s %s: block %d orphaned, the payment is unconfirmed again", family.chain, p.txid, block.height
                )
            else:
                services.payment_uncount(
                    chain=family.chain,
                    txid=p.txid,
                    output_index=p.output_index,
                    reason=f"reorg: block {block.height} {block.hash} orphaned",
                    now=now,
                )
                uncounted += 1
        lowest = min(b.height for b in fork.orphaned)
        ChainBlock.objects.filter(chain=family.chain, height__gte=lowest).delete()
        if fork.common is not None:
            state.height, state.block_hash = fork.common.height, fork.common.hash
            ChainBlock.objects.update_or_create(
                chain=family.chain, height=fork.common.height, defaults={"block_hash": fork.common.hash}
            )
        else:
            state.height, state.block_hash = None, ""
            log.error(
                "%s: reorg deeper than the %d stored blocks, and the node cannot say where it forked; "
                "rescanning from height %d. Payments in blocks below it are not re-checked: look at them.",
                family.chain,
                len(orphaned),
                lowest,
            )
        state.save(update_fields=["height", "block_hash"])
    mempool.forget({p.txid for p in hit})
    return uncounted


def _block_record(
    family: Family, mempool: MempoolWatcher, scan: BlockScan, *, tip_height: int, now: datetime | None
) -> tuple[int, int]:
    """One block, in one transaction: its payments, the unconfirmed payments it
    made impossible, and the cursor. Returns (recorded, un-counted)."""
    height = scan.block.height
    with transaction.atomic():
        state = _state_lock(family.chain)
        if state.block_hash and scan.previous_hash != state.block_hash:
            raise CursorMoved(f"{family.chain} cursor is at {state.height}, not below block {height}")
        recorded = 0
        for o in scan.observations:
            observation = _payment_observation(family, o, confirmations=max(1, tip_height - height + 1))
            if services.payment_observe(observation=observation, now=now) is not None:
                recorded += 1
        uncounted = 0
        for gone in mempool.blocks_applied([scan]):
            if gone.reason != GoneReason.MINED:
                uncounted += _tx_uncount(
                    family, gone.txid, now=now, reason=f"{gone.txid} conflicted by {gone.by} in block {height}"
                )
        _cursor_store(state=state, block=scan.block, mempool=mempool)
    return recorded, uncounted


def _confirmations_refresh(family: Family, *, tip_height: int, now: datetime | None) -> int:
    """Bring payments in blocks that have not reached the policy up to the tip."""
    updated = 0
    pending = Payment.objects.filter(
        chain=family.chain, status=PaymentStatus.PENDING, block_height__isnull=False
    ).select_related("request")
    for p in pending:
        confirmations = tip_height - int(p.block_height) + 1
        if confirmations < 1 or confirmations == p.confirmations:
            continue
        services.payment_observe(
            observation=services.Observation(
                currency=p.currency,
                txid=p.txid,
                output_index=p.output_index,
                match_key=p.request.match_key,
                amount=int(p.amount),
                confirmations=confirmations,
                block_height=int(p.block_height),
                block_hash=p.block_hash,
            ),
            now=now,
        )
        updated += 1
    return updated


def _mempool_pass(
    family: Family, mempool: MempoolWatcher, *, scripts: Container[str], cursor: str | None, now: datetime | None
) -> tuple[int, int]:
    """New unconfirmed payments, then the ones gone, in one transaction (new
    first: a replacement paying the same destination never flips the invoice
    back to `new`). Returns (new, un-counted)."""
    pool = mempool.scan(scripts=scripts, scanned_tip=cursor)
    with transaction.atomic():
        state = _state_lock(family.chain)
        new = 0
        for tx in pool.new:
            for o in tx.observations:
                if (
                    services.payment_observe(observation=_payment_observation(family, o, confirmations=0), now=now)
                    is not None
                ):
                    new += 1
        uncounted = 0
        for gone in pool.gone:
            if gone.reason != GoneReason.MINED:
                uncounted += _tx_uncount(
                    family,
                    gone.txid,
                    now=now,
                    reason=f"{gone.txid} {gone.reason} from the mempool{' by ' + gone.by if gone.by else ''}",
                )
        state.extra = {**(state.extra or {}), "mempool": _pending_json(mempool)}
        state.save(update_fields=["extra"])
    return new, uncounted


# --- Health -------------------------------------------------------------------------------


def _backoff_delay(failures: int) -> timedelta:
    """Wait before the next periodic run: none after one failure, then growing
    exponentially (1, 3, 7, 15... scan intervals) up to CHAIN_BACKOFF_MAX_SECONDS."""
    if failures <= 1:
        return timedelta(0)
    seconds = float(settings.CHAIN_SCAN_SECONDS) * (2 ** min(failures - 1, 20) - 1)
    return timedelta(seconds=min(seconds, float(settings.CHAIN_BACKOFF_MAX_SECONDS)))


def _backing_off(state: ChainState, now: datetime) -> bool:
    if not state.consecutive_failures or state.last_error_at is None:
        return False
    if state.last_ok_at is not None and state.last_ok_at >= state.last_error_at:
        return False
    return now < state.last_error_at + _backoff_delay(state.consecutive_failures)


def _health_ok(chain: str, *, tip_height: int, now: datetime) -> None:
    ChainState.objects.filter(chain=chain).update(
        tip_height=tip_height, last_scan_at=now, last_ok_at=now, consecutive_failures=0
    )


def _health_failed(chain: str, *, error: str, now: datetime) -> None:
    ChainState.objects.filter(chain=chain).update(
        last_scan_at=now,
        last_error=error[:1000],
        last_error_at=now,
        consecutive_failures=F("consecutive_failures") + 1,
    )


# --- The run -----------------------------------------------------------------------------------


def bitcoin_chain_scan(
    *,
    currency: str,
    max_blocks: int | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    renew: Callable[[], object] | None = None,
    now: datetime | None = None,
) -> ScanReport:
    """One run of the BTC or LTC watcher (see the module docstring).

    `force` ignores the back-off after failures (operators, tests); `progress`
    receives a line per step; `renew` is called after every block (the
    caller's lease); `now` stands in for the clock in tests (it is passed to
    the state machine and the health fields).
    """
    family = _family(currency)
    started = time.monotonic()
    clock = now or timezone.now()
    report = ScanReport(currency=family.currency, chain=family.chain)
    state = _state(family.chain)
    if not force and _backing_off(state, clock):
        report.skipped, report.error = "backoff", state.last_error
        return report
    url = rpc_url(currency=family.currency)
    if not url:
        report.skipped = "not_watched"
        return report
    try:
        with BitcoinRpc(url) as rpc:
            _run(
                family,
                rpc,
                report,
                max_blocks=max_blocks or settings.CHAIN_SCAN_MAX_BLOCKS,
                progress=progress,
                renew=renew,
                now=now,
            )
    except CursorMoved as exc:
        process_state_clear(chain=family.chain)
        report.skipped = "busy"
        log.warning("%s", exc)
    except (ChainUnavailable, RpcError) as exc:
        process_state_clear(chain=family.chain)
        report.error = f"{getattr(exc, 'reason', 'refused')}: {exc}"
        _health_failed(family.chain, error=report.error, now=now or timezone.now())
        log.warning("%s watcher: %s", family.chain, report.error)
    except BaseException as exc:
        process_state_clear(chain=family.chain)
        _health_failed(family.chain, error=f"internal: {exc.__class__.__name__}: {exc}", now=now or timezone.now())
        raise
    else:
        _health_ok(family.chain, tip_height=report.tip_height, now=now or timezone.now())
    report.seconds = time.monotonic() - started
    if report.error or report.blocks or report.unconfirmed or report.uncounted or report.recorded:
        log.info("%s", report.summary())
    return report


def _run(
    family: Family,
    rpc: BitcoinRpc,
    report: ScanReport,
    *,
    max_blocks: int,
    progress: Callable[[str], None] | None,
    renew: Callable[[], object] | None,
    now: datetime | None,
) -> None:
    _node_check(family, rpc)
    mempool = _mempool(family.chain, rpc)
    mempool.pending_replace(_pending_load(_state(family.chain)))
    newest = _newest_request_id(family)
    scripts = _watched(family, now=now)
    recent = _recent(family.chain)
    start_height: int | None = None
    budget = max(1, max_blocks)
    deep_walks = 0
    while True:
        if not recent and start_height is None:
            tip = chain_tip(rpc)
            start_height = _first_height(family, rpc, tip_height=tip.height, now=now or timezone.now())
        step = chain_advance(
            rpc, recent=recent, scripts=scripts, start_height=start_height, max_blocks=min(STEP_BLOCKS, budget)
        )
        report.tip_height = step.tip.height
        if step.fork is not None and step.fork.common is None and deep_walks < 3:
            # Deeper than the stored blocks: find the real fork point, then scan from it.
            deep_walks += 1
            deep = fork_walk(rpc, fork=step.fork)
            if deep is not None:
                report.reorgs += 1
                report.uncounted += _fork_apply(family, rpc, mempool, deep, (), now=now)
                recent = _recent(family.chain)
                continue
        if step.fork is not None:
            report.reorgs += 1
            report.uncounted += _fork_apply(family, rpc, mempool, step.fork, step.blocks, now=now)
        for scan in step.blocks:
            recorded, uncounted = _block_record(family, mempool, scan, tip_height=step.tip.height, now=now)
            report.blocks += 1
            report.recorded += recorded
            report.uncounted += uncounted
            if renew is not None:
                renew()
        budget -= len(step.blocks)
        report.height = step.tip_scanned.height if step.tip_scanned else None
        report.caught_up = step.caught_up
        if step.blocks or step.fork:
            line = (
                f"{family.currency}: scanned to {report.height} of {step.tip.height}"
                f" ({report.blocks} block(s), {report.recorded} payment(s) so far)"
            )
            log.info("%s", line)
            if progress is not None:
                progress(line)
        recent = _recent(family.chain)
        if step.caught_up or budget <= 0 or not step.blocks:
            break
    report.confirmations_updated = _confirmations_refresh(family, tip_height=report.tip_height, now=now)
    # Destinations created while the blocks were read are matched in the mempool too.
    scripts = scripts | _created_since(family, first_id=newest + 1)
    cursor = recent[-1].hash if recent else None
    report.unconfirmed, uncounted = _mempool_pass(family, mempool, scripts=scripts, cursor=cursor, now=now)
    report.uncounted += uncounted


def watched_scripts(*, currency: str, now: datetime | None = None) -> frozenset[str]:
    """The scriptPubKeys (hex) of the destinations `currency`'s watcher matches."""
    return watched_match_keys(currencies=[_family(currency).currency], now=now)


def _watched(family: Family, *, now: datetime | None) -> frozenset[str]:
    return watched_scripts(currency=family.currency, now=now)


def _newest_request_id(family: Family) -> int:
    return PaymentRequest.objects.filter(currency=family.currency).aggregate(newest=Max("id"))["newest"] or 0


def _created_since(family: Family, *, first_id: int) -> frozenset[str]:
    """Destinations created since `_newest_request_id` was read (a few, by primary key)."""
    rows = PaymentRequest.objects.filter(currency=family.currency, id__gte=first_id)
    return frozenset(rows.values_list("match_key", flat=True))
