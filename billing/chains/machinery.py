"""The shared run machinery of every chain watcher.

`chain_run(watcher, ...)` is one run of one chain's watcher, under the
caller's lease (billing.chains.watchers takes it):

1. Back-off: after failures, periodic runs wait exponentially longer
   (`force` skips the wait: operators, tests).
2. The run: the watcher opens its node client, checks the node
   (`node_check`), then `scan`s from the cursor through a `ScanRun`.
3. Health: success or failure is recorded on the chain's `ChainState`, which
   `/readyz`, `GET /api/v1/currencies`, the admin and the expiry job read. A
   node failure (ChainUnavailable, RpcError) fails the run cleanly; any other
   exception is recorded and raised.

`ScanRun` is what a watcher writes through:

- `run.block(ref, previous_hash=...)`: one database transaction recording a
  block's payments and moving the cursor onto it; a worker killed at any
  point committed the block, cursor included, or nothing of it. Recording is
  idempotent on (chain, txid, position): a rerun credits nothing twice.
- `run.atomic()`: the same without a block, for watchers that keep their
  cursor elsewhere than in blocks (a wallet's height, per-reference marks).
- `run.fork_apply(fork, ...)`: payments of orphaned blocks un-counted (unless
  the new branch or the node's pool still holds them) and the cursor moved
  back to the fork point, in one transaction; the transaction of the new
  branch's block that ends the fork step (in this run or the next) un-counts a
  payment left to those blocks that they did not record again (its transaction
  no longer made the transfer).
- `run.confirmations_refresh(tip_height=..., final_height=...)`: payments in
  blocks brought up to date with the tip (and the finalized block, for a
  finality-tag policy); a payment, confirming or confirmed, whose block left
  the chain and whose transfer the new branch's block does not carry, un-counted
  once the new branch's blocks that could carry it are recorded (a run that
  stopped inside a fork step leaves it to the next).

`BlockWatcher` is the block walk block chains share (UTXO, EVM): follow the
node from the stored cursor a step of blocks at a time, apply forks (walking
back past the stored window when needed), record each block, then refresh
confirmations. A family supplies the node-specific steps.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Exists, F, Max, Min, OuterRef, Q, Subquery
from django.utils import timezone

from billing import services
from billing.chains.blocks import BlockRef, ChainStep, Fork
from billing.chains.errors import ChainUnavailable, RpcError
from billing.chains.interface import ScanReport, Watcher
from billing.models import (
    ChainBlock,
    ChainState,
    DerivationCounter,
    MempoolSeen,
    Payment,
    PaymentDisposition,
    PaymentRequest,
    PaymentStatus,
    StrayTransfer,
)
from billing.selectors import (
    AnyOf,
    known_match_keys,
    monitored_match_keys,
    txids_recorded_final,
    watched_match_keys,
    watched_requests,
)
from core.audit import AuditAction, audit_record

log = logging.getLogger(__name__)


class CursorMoved(Exception):
    """Another scanner moved the cursor under this one: stop, it is doing the work."""


class LeaseLost(Exception):
    """The run's lease ran out and another run took the chain (this one stalled longer
    than the lease: a slow node, a long pause): stop before the next step, the other
    run is doing the work."""


# --- ChainState -------------------------------------------------------------------------


# ChainState.extra: the orphaned blocks a fork left payments in, to the new branch's
# blocks up to a height (`ScanRun.fork_apply`, settled by the block at that height).
FORK_LEFT = "fork_left"


def chain_state(chain: str) -> ChainState:
    state, _ = ChainState.objects.get_or_create(chain=chain)
    return state


def _state_lock(chain: str) -> ChainState:
    return ChainState.objects.select_for_update().get(chain=chain)


def recent_blocks(chain: str) -> list[BlockRef]:
    """The stored blocks (the last CHAIN_REORG_WINDOW scanned), lowest first."""
    rows = ChainBlock.objects.filter(chain=chain).order_by("-height").values_list("height", "block_hash")
    return sorted(BlockRef(h, b) for h, b in rows[: settings.CHAIN_REORG_WINDOW])


def _cursor_store(*, state: ChainState, block: BlockRef, extra: dict[str, Any] | None = None) -> None:
    """Move the cursor onto `block` (inside the block's transaction)."""
    chain = state.chain
    ChainBlock.objects.update_or_create(chain=chain, height=block.height, defaults={"block_hash": block.hash})
    ChainBlock.objects.filter(chain=chain, height__lte=block.height - settings.CHAIN_REORG_WINDOW).delete()
    state.height, state.block_hash = block.height, block.hash
    fields = ["height", "block_hash"]
    if extra:
        state.extra = {**(state.extra or {}), **extra}
        fields.append("extra")
    state.save(update_fields=fields)


def state_extra_replace(*, chain: str, key: str, value: Any, reason: str) -> Any:
    """An operator's move on a chain that keeps its place in `ChainState.extra[key]`
    (Solana's listing cursors): replace it, audited; the value it had."""
    chain_state(chain)
    with transaction.atomic():
        state = _state_lock(chain)
        before = (state.extra or {}).get(key)
        state.extra = {**(state.extra or {}), key: value}
        state.save(update_fields=["extra"])
        audit_record(
            actor=None,
            action=AuditAction.CHAIN_CURSOR_SET,
            obj=state,
            reason=reason,
            changes={key: [len(before or {}), len(value or {})]},
        )
    return before


def _seen_again(p: Payment, *, confirmations: int, now: datetime | None = None, **where: Any) -> None:
    """`p` seen again (its request loaded) at `confirmations`, in the block `where`
    names (block_height, block_hash, final, matures_at_height), or in none."""
    services.payment_observe(
        observation=services.Observation(
            currency=p.currency,
            txid=p.txid,
            output_index=p.output_index,
            position=p.position,
            match_key=p.request.match_key,
            amount=int(p.amount),
            confirmations=confirmations,
            **where,
        ),
        now=now,
    )


def cursor_store_at(*, chain: str, block: BlockRef, reason: str = "cursor set by an operator") -> None:
    """Put the cursor on `block`, forgetting the stored blocks (an operator's move), with an audit row."""
    chain_state(chain)
    with transaction.atomic():
        state = _state_lock(chain)
        before = (state.height, state.block_hash)
        ChainBlock.objects.filter(chain=chain).delete()
        ChainBlock.objects.create(chain=chain, height=block.height, block_hash=block.hash)
        state.height, state.block_hash = block.height, block.hash
        fields = ["height", "block_hash"]
        left = (state.extra or {}).get(FORK_LEFT)
        if left:
            # A fork's payments left to the new branch's blocks before they were all recorded:
            # from a cursor moved by hand nothing says those blocks will be read, so none is
            # un-counted for it; each is put before staff, still naming its orphaned block.
            for p in (
                Payment.objects.filter(chain=chain, block_hash__in=left["hashes"])
                .exclude(status=PaymentStatus.REMOVED)
                .select_related("request")
            ):
                if p.status == PaymentStatus.PENDING:
                    # Not counted up on a block the chain no longer has: unconfirmed again,
                    # until a block records it (or staff settle it).
                    _seen_again(p, confirmations=0)
                services.payment_flag(
                    chain=chain,
                    txid=p.txid,
                    position=p.position,
                    reason=(
                        f"reorg: block {p.block_height} {p.block_hash} left the chain and the cursor was "
                        "moved by hand before the new branch's blocks that could carry it again were read"
                    ),
                )
            state.extra = {k: v for k, v in state.extra.items() if k != FORK_LEFT}
            fields.append("extra")
        state.save(update_fields=fields)
        audit_record(
            actor=None,
            action=AuditAction.CHAIN_CURSOR_SET,
            obj=state,
            reason=reason,
            changes={"height": [before[0], block.height], "block_hash": [before[1], block.hash]},
        )
    log.warning("%s cursor set to height %d (%s)", chain, block.height, block.hash)


# --- Health and back-off ------------------------------------------------------------------


def backoff_delay(failures: int) -> timedelta:
    """Wait before the next periodic run: none after one failure, then growing
    exponentially (1, 3, 7, 15... scan intervals) up to CHAIN_BACKOFF_MAX_SECONDS."""
    if failures <= 1:
        return timedelta(0)
    seconds = float(settings.CHAIN_SCAN_SECONDS) * (2 ** min(failures - 1, 20) - 1)
    return timedelta(seconds=min(seconds, float(settings.CHAIN_BACKOFF_MAX_SECONDS)))


def backing_off(state: ChainState, now: datetime) -> bool:
    if not state.consecutive_failures or state.last_error_at is None:
        return False
    if state.last_ok_at is not None and state.last_ok_at >= state.last_error_at:
        return False
    return now < state.last_error_at + backoff_delay(state.consecutive_failures)


def health_ok(chain: str, *, tip_height: int | None, now: datetime) -> None:
    ChainState.objects.filter(chain=chain).update(
        tip_height=tip_height, last_scan_at=now, last_ok_at=now, consecutive_failures=0
    )


def health_failed(chain: str, *, error: str, now: datetime) -> None:
    ChainState.objects.filter(chain=chain).update(
        last_scan_at=now,
        last_error=error[:1000],
        last_error_at=now,
        consecutive_failures=F("consecutive_failures") + 1,
    )


# --- Watched sets kept by a process ------------------------------------------------------

# The watched destinations are read in full at most every WATCHED_RELOAD_SECONDS (which
# is also when destinations past their watch drop out); in between, a run reads only the
# destinations issued since (by primary key), so its database work grows with the new
# invoices, not with the open ones. An id below the newest read that is not there yet
# (an insert not committed yet, or rolled back) is asked for again on every run for
# GAP_SECONDS; at a full read, the GAP_WINDOW ids below the newest are checked for gaps.
WATCHED_RELOAD_SECONDS = 300.0
GAP_SECONDS = 600.0
GAP_WINDOW = 1_000


@dataclass(frozen=True)
class WatchedSet:
    keys: frozenset[str]
    newest: int  # the highest PaymentRequest id read
    gaps: Mapping[int, float]  # ids below `newest` not read yet -> when first missed (monotonic)
    loaded_at: float  # when read in full (monotonic)


_watched: dict[tuple[str, str], WatchedSet] = {}  # by (chain, currency)
_watched_lock = threading.Lock()


def _watched_load(currency: str) -> WatchedSet:
    """Every watched destination of `currency`, and where to read new ones from."""
    # In this order, each read its own snapshot: a destination committed after `present`
    # was read is a gap (asked for again); one committed before is in `keys`, read last.
    newest: int = PaymentRequest.objects.aggregate(newest=Max("id"))["newest"] or 0
    lowest = max(1, newest - GAP_WINDOW + 1)
    present = set(PaymentRequest.objects.filter(id__gte=lowest, id__lte=newest).values_list("id", flat=True))
    keys = watched_match_keys(currencies=[currency])
    clock = time.monotonic()
    return WatchedSet(keys, newest, {i: clock for i in range(lowest, newest + 1) if i not in present}, clock)


def _watched_update(watched: WatchedSet, currency: str) -> WatchedSet:
    """`watched` with the destinations issued since it was read (any currency's ids
    are read, so that another currency's row is no gap; `currency`'s keys are kept)."""
    clock = time.monotonic()
    gaps = {i: at for i, at in watched.gaps.items() if clock - at < GAP_SECONDS}
    rows = list(
        PaymentRequest.objects.filter(Q(id__gt=watched.newest) | Q(id__in=list(gaps))).values_list(
            "id", "currency", "match_key"
        )
    )
    if not rows:
        return WatchedSet(watched.keys, watched.newest, gaps, watched.loaded_at)
    found = {row[0] for row in rows}
    newest = max(watched.newest, *found)
    for i in found:
        gaps.pop(i, None)
    # As a full read: the GAP_WINDOW ids below the newest, however far the ids jumped (a
    # sequence moved on, many inserts rolled back); older ones wait for the next full read.
    # Unbounded, a jump of more ids than PostgreSQL takes parameters (65,535) made every run's
    # query fail until the next full read.
    lowest = max(watched.newest + 1, newest - GAP_WINDOW + 1)
    gaps = {i: at for i, at in gaps.items() if i >= newest - GAP_WINDOW + 1}
    gaps.update({i: clock for i in range(lowest, newest + 1) if i not in found})
    keys = watched.keys | {key for _, code, key in rows if code == currency}
    return WatchedSet(keys, newest, gaps, watched.loaded_at)


def _watched_kept(*, chain: str, currency: str) -> frozenset[str]:
    """The watched destinations of `currency` (see WATCHED_RELOAD_SECONDS): a superset of
    `watched_match_keys` for at most that long, never missing one issued and committed."""
    with _watched_lock:
        watched = _watched.get((chain, currency))
    if watched is None or time.monotonic() - watched.loaded_at >= WATCHED_RELOAD_SECONDS:
        watched = _watched_load(currency)
    else:
        watched = _watched_update(watched, currency)
    with _watched_lock:
        _watched[(chain, currency)] = watched
    return watched.keys


def watched_forget(*, chain: str | None = None) -> None:
    """Forget this process's kept watched sets (all, or one chain's)."""
    with _watched_lock:
        for key in [k for k in _watched if chain is None or k[0] == chain]:
            del _watched[key]


# --- Writing through a run -------------------------------------------------------------------


@dataclass
class Recorder:
    """Writes of one transaction of a run: payments, un-counts, strays, cursor data."""

    run: ScanRun
    state: ChainState
    extra: dict[str, Any] = field(default_factory=dict)  # merged into ChainState.extra with the cursor
    recorded: int = 0
    uncounted: int = 0

    def observe(self, observation: services.Observation) -> Any:
        """Record a sighting of a payment (idempotent); the Payment, or None when it matches nothing."""
        payment = services.payment_observe(observation=observation, now=self.run.now)
        if payment is not None:
            self.recorded += 1
        return payment

    def uncount(self, *, txid: str, position: str, reason: str) -> bool:
        payment = Payment.objects.filter(chain=self.run.chain, txid=txid, position=position).first()
        if payment is None or payment.status == PaymentStatus.REMOVED:
            return False
        services.payment_uncount(chain=self.run.chain, txid=txid, position=position, reason=reason, now=self.run.now)
        self.uncounted += 1
        return True

    def uncount_tx(self, *, txid: str, reason: str) -> int:
        """Un-count every payment `txid` carried on this chain; how many were counted."""
        positions = Payment.objects.filter(chain=self.run.chain, txid=txid).exclude(status=PaymentStatus.REMOVED)
        count = 0
        for position in list(positions.values_list("position", flat=True)):
            count += self.uncount(txid=txid, position=position, reason=reason)
        if count:
            log.warning("%s %s un-counted: %s", self.run.chain, txid, reason)
        return count

    def flag(self, *, txid: str, position: str, reason: str) -> bool:
        """Flag a recorded payment's invoice for staff, once (see services.payment_flag)."""
        return services.payment_flag(
            chain=self.run.chain, txid=txid, position=position, reason=reason, now=self.run.now
        )

    def pool_seen_update(self, *, added: Collection[str], dropped: Collection[str]) -> None:
        """Bring the chain's stored seen-set of its pool up to date: rows for the txids
        first decoded, none for those that left the pool (see ScanRun.pool_seen)."""
        if dropped:
            MempoolSeen.objects.filter(AnyOf(F("txid"), dropped), chain=self.run.chain).delete()
        if added:
            MempoolSeen.objects.bulk_create(
                (MempoolSeen(chain=self.run.chain, txid=txid) for txid in added),
                batch_size=5_000,
                ignore_conflicts=True,
            )

    def stray(self, **fields: Any) -> Any:
        """Record a transfer for staff that is never credited (see services.stray_transfer_record)."""
        stray, created = services.stray_transfer_record(chain=self.run.chain, now=self.run.now, **fields)
        if created:
            self.run.report.strays += 1
        return stray


@dataclass(frozen=True)
class CountedPayment:
    txid: str
    position: str
    block_height: int | None
    confirmed: bool


class ScanRun:
    """One run of one watcher: what the watcher reads and writes through."""

    def __init__(
        self,
        watcher: Watcher,
        *,
        report: ScanReport,
        max_blocks: int,
        progress: Callable[[str], None] | None = None,
        renew: Callable[[], object] | None = None,
        now: datetime | None = None,
    ) -> None:
        self.watcher = watcher
        self.chain = watcher.chain
        self.report = report
        self.max_blocks = max(1, max_blocks)
        self.progress = progress
        self._renew = renew
        self.now = now  # None: the clock (tests pass a time)
        self.client: Any = None  # the watcher's node client (Watcher.connect)
        self.data: dict[str, Any] = {}  # what the watcher keeps between steps of this run

    @property
    def clock(self) -> datetime:
        return self.now or timezone.now()

    def state(self) -> ChainState:
        return chain_state(self.chain)

    def renew(self) -> None:
        """Keep the lease: called after every block and every long step, and before each
        write of a long step. LeaseLost when another run holds it now (the renewal
        answered False): what this run committed stands, nothing more is written."""
        if self._renew is not None and self._renew() is False:
            raise LeaseLost(f"{self.chain}: the run's lease was taken by another run; stopping")

    def line(self, text: str) -> None:
        # A step's progress: for the operator watching `scan_chain`, not the log of every pass.
        log.debug("%s", text)
        if self.progress is not None:
            self.progress(text)

    # --- what to match ---------------------------------------------------------------------

    def currencies(self) -> list[str]:
        return self.watcher.watched_currencies() or list(self.watcher.currencies)

    def watched(self, currencies: Collection[str] | None = None) -> frozenset[str]:
        """Match keys of the destinations to watch (open, or closed recently: late money is credit)."""
        return watched_match_keys(currencies=list(currencies or self.currencies()), now=self.now)

    def newest_request_id(self, currencies: Collection[str] | None = None) -> int:
        rows = PaymentRequest.objects.filter(currency__in=list(currencies or self.currencies()))
        return rows.aggregate(newest=Max("id"))["newest"] or 0

    def created_since(self, first_id: int, currencies: Collection[str] | None = None) -> frozenset[str]:
        """Match keys of destinations created since `newest_request_id` was read (a few, by primary key)."""
        rows = PaymentRequest.objects.filter(currency__in=list(currencies or self.currencies()), id__gte=first_id)
        return frozenset(rows.values_list("match_key", flat=True))

    def watched_among(self, keys: Collection[str], currencies: Collection[str] | None = None) -> frozenset[str]:
        """Which of `keys` are watched destinations (`watched`'s criterion; one array
        parameter, however many keys)."""
        if not keys:
            return frozenset()
        rows = watched_requests(currencies=list(currencies or self.currencies()), now=self.now)
        return frozenset(rows.filter(AnyOf(F("match_key"), list(keys))).values_list("match_key", flat=True))

    def monitored(self, currencies: Collection[str] | None = None) -> frozenset[str]:
        """Match keys of invoices still open or inside their monitoring window: the narrower
        set a watcher that pays per destination and pass asks about."""
        return monitored_match_keys(currencies=list(currencies or self.currencies()), now=self.now)

    def recorded_final(self, txids: Collection[str]) -> frozenset[str]:
        """Which of `txids` are recorded for good on the chain (confirmed payments, strays)."""
        return txids_recorded_final(chain=self.chain, txids=txids)

    def highest_issued_index(self, currency: str) -> int | None:
        """The highest destination index ever issued for `currency`'s key material (its
        derivation counter's last); None before the first."""
        from billing.chains.config import derivation_keyset  # the config imports the watchers

        counter = DerivationCounter.objects.filter(keyset=derivation_keyset(currency=currency)).first()
        return None if counter is None or counter.next_index < 1 else int(counter.next_index) - 1

    def watched_kept(self, currency: str) -> frozenset[str]:
        """`watched([currency])` as this process keeps it between runs: read in full
        every WATCHED_RELOAD_SECONDS, in between only the destinations issued since
        (by primary key), so an idle run's database work does not grow with the
        open invoices."""
        return _watched_kept(chain=self.chain, currency=currency)

    def pool_seen(self) -> list[str]:
        """The txids of the chain's pool a watcher has already decoded (stored by
        Recorder.pool_seen_update), so a restarted worker decodes only what is new."""
        return list(MempoolSeen.objects.filter(chain=self.chain).values_list("txid", flat=True))

    def issued(self, keys: Collection[str], currencies: Collection[str] | None = None) -> frozenset[str]:
        """Which of `keys` are destinations ever issued for the chain's currencies,
        watched or not (one array parameter, however many keys)."""
        found: frozenset[str] = frozenset()
        for code in currencies or self.currencies():
            found |= known_match_keys(currency=code, keys=keys)
        return found

    def strays_recorded(self, txids: Collection[str]) -> set[tuple[str, str]]:
        """(txid, position) of the transfers of `txids` recorded for staff on this chain."""
        rows = StrayTransfer.objects.filter(AnyOf(F("txid"), txids), chain=self.chain)
        return set(rows.values_list("txid", "position"))

    def oldest_watched_at(self, currencies: Collection[str] | None = None) -> datetime | None:
        """When the oldest still-watched destination was made (where a first scan starts), or None."""
        horizon = self.clock - timedelta(days=settings.WATCH_AFTER_CLOSE_DAYS)
        rows = PaymentRequest.objects.filter(
            currency__in=list(currencies or self.currencies()), invoice__monitoring_until__gte=horizon
        )
        at: datetime | None = rows.aggregate(at=Min("created_at"))["at"]
        return at

    def counted(self, currencies: Collection[str] | None = None) -> list[CountedPayment]:
        """Payments the watcher recorded to the watched destinations (`watched`'s
        criterion, read as a subquery: no parameter per key) that still count:
        what a wallet-based watcher checks against what its wallet still holds."""
        requests = watched_requests(currencies=list(currencies or self.currencies()), now=self.now)
        rows = (
            Payment.objects.filter(chain=self.chain, source="watcher", request__in=requests.values("pk"))
            .exclude(status=PaymentStatus.REMOVED)
            .values_list("txid", "position", "block_height", "status")
        )
        return [CountedPayment(t, p, h, s == PaymentStatus.CONFIRMED) for t, p, h, s in rows]

    def recent(self) -> list[BlockRef]:
        return recent_blocks(self.chain)

    # --- writing --------------------------------------------------------------------------

    @contextlib.contextmanager
    def atomic(self) -> Iterator[Recorder]:
        """A transaction of the run, the chain's state row locked; `extra` is stored at the end."""
        chain_state(self.chain)
        with transaction.atomic():
            recorder = Recorder(self, _state_lock(self.chain))
            yield recorder
            if recorder.extra:
                recorder.state.extra = {**(recorder.state.extra or {}), **recorder.extra}
                recorder.state.save(update_fields=["extra"])
        self.report.uncounted += recorder.uncounted

    @contextlib.contextmanager
    def block(self, block: BlockRef, *, previous_hash: str | None) -> Iterator[Recorder]:
        """One block in one transaction: what the caller records in it, then the cursor onto it.

        CursorMoved when the stored cursor is not the block's parent (another
        scanner got there first).
        """
        chain_state(self.chain)
        with transaction.atomic():
            state = _state_lock(self.chain)
            if state.block_hash and previous_hash != state.block_hash:
                raise CursorMoved(f"{self.chain} cursor is at {state.height}, not below block {block.height}")
            recorder = Recorder(self, state)
            yield recorder
            _cursor_store(state=state, block=block, extra=recorder.extra)
            left = (state.extra or {}).get(FORK_LEFT)
            if left and block.height >= left["until"]:
                self._fork_left_settle(left["hashes"])
                state.extra = {k: v for k, v in state.extra.items() if k != FORK_LEFT}
                state.save(update_fields=["extra"])
        self.report.blocks += 1
        self.report.recorded += recorder.recorded
        self.report.uncounted += recorder.uncounted
        self.renew()

    def fork_apply(
        self,
        fork: Fork,
        *,
        again: Collection[str] = (),
        until: int | None = None,
        unconfirmed: Callable[[list[str]], set[str]] | None = None,
    ) -> list[str]:
        """Un-count what the orphaned blocks carried and move the cursor back to the
        fork point, in one transaction. Returns the txids of every payment the
        orphaned blocks carried (un-counted, unconfirmed again, or left to the
        new branch), for the watcher's caches.

        `again`: txids the new branch's blocks up to height `until` (about to be
        recorded) carry: left alone, their block records them next. Which orphaned
        blocks such payments name is kept with the cursor (`ChainState.extra`,
        FORK_LEFT) until the block at `until` is recorded, in whichever run: one of
        them that block's transaction finds still naming an orphaned block is
        un-counted there (`_fork_left_settle`). `unconfirmed(txids)`: which of the
        others the node holds unconfirmed again (they count with 0 confirmations
        instead of being un-counted).
        """
        self.renew()  # before the fork's writes, as before each block's
        orphaned = {b.hash: b for b in fork.orphaned}
        # An earlier fork's payments not settled yet (their branch's step not recorded to
        # its end) are in blocks that left the chain too: this fork judges them again.
        earlier = ((chain_state(self.chain).extra or {}).get(FORK_LEFT) or {}).get("hashes", [])
        hit = list(
            Payment.objects.filter(chain=self.chain, block_hash__in=[*orphaned, *earlier])
            .exclude(status=PaymentStatus.REMOVED)
            .select_related("request")
        )
        candidates = sorted({p.txid for p in hit if p.txid not in again})
        in_pool = unconfirmed(candidates) if unconfirmed is not None and candidates else set()
        gone: list[str] = []
        chain_state(self.chain)
        with transaction.atomic():
            state = _state_lock(self.chain)
            for p in hit:
                if p.txid in again:
                    continue  # mined again in the new branch: its block records it next
                block = orphaned.get(p.block_hash) or BlockRef(p.block_height or 0, p.block_hash)
                if p.txid in in_pool:
                    _seen_again(p, confirmations=0, now=self.now)
                    log.warning(
                        "%s %s: block %d orphaned, the payment is unconfirmed again", self.chain, p.txid, block.height
                    )
                    if p.disposition != PaymentDisposition.OPEN:
                        # Already applied or credited, and now at 0 confirmations: it may yet be
                        # double spent. Staff look, as when a used payment is un-counted.
                        services.payment_flag(
                            chain=self.chain,
                            txid=p.txid,
                            position=p.position,
                            reason=(
                                f"reorg: block {block.height} {block.hash} orphaned after the payment was "
                                f"{p.disposition}; it is unconfirmed again"
                            ),
                            now=self.now,
                        )
                elif p.block_hash not in orphaned:
                    # An earlier fork's, its transaction in neither this branch's step nor the
                    # pool: un-counted as one that branch dropped, unless its destination is no
                    # longer watched (then the transaction may well still pay it).
                    self._left_uncount(p, renew=False)
                else:
                    services.payment_uncount(
                        chain=self.chain,
                        txid=p.txid,
                        position=p.position,
                        reason=f"reorg: block {block.height} {block.hash} orphaned",
                        now=self.now,
                    )
                    gone.append(p.txid)
            StrayTransfer.objects.filter(chain=self.chain, block_hash__in=list(orphaned), removed_at=None).exclude(
                txid__in=list(again)
            ).update(removed_at=self.clock)
            lowest = min(b.height for b in fork.orphaned)
            ChainBlock.objects.filter(chain=self.chain, height__gte=lowest).delete()
            if fork.common is not None:
                state.height, state.block_hash = fork.common.height, fork.common.hash
                ChainBlock.objects.update_or_create(
                    chain=self.chain, height=fork.common.height, defaults={"block_hash": fork.common.hash}
                )
            else:
                state.height, state.block_hash = None, ""
                log.error(
                    "%s: reorg deeper than the %d stored blocks, and the node cannot say where it forked; "
                    "rescanning from height %d. Payments in blocks below it are not re-checked: look at them.",
                    self.chain,
                    len(orphaned),
                    lowest,
                )
            fields = ["height", "block_hash"]
            left = sorted({p.block_hash for p in hit if p.txid in again})
            extra = {k: v for k, v in (state.extra or {}).items() if k != FORK_LEFT}
            if left and until is not None:
                extra[FORK_LEFT] = {"hashes": left, "until": until}
            if extra != (state.extra or {}):
                state.extra = extra
                fields.append("extra")
            state.save(update_fields=fields)
        self.report.reorgs += 1
        self.report.uncounted += len(gone)
        return sorted({p.txid for p in hit})

    def confirmations_refresh(self, *, tip_height: int, final_height: int | None = None) -> int:
        """Bring payments in blocks that have not reached the policy up to the tip.

        `final_height`: with a finality-tag policy, the node's finalized block:
        a payment at or below it is settled whatever its count.
        """
        updated = 0
        pending = list(
            Payment.objects.filter(
                chain=self.chain, status=PaymentStatus.PENDING, block_height__isnull=False
            ).select_related("request")
        )
        # A payment whose block left the chain is un-counted once the new branch's blocks
        # that could carry its transaction again are recorded (`left_below`): a run that
        # stopped inside a fork step leaves it as it is for the run that gets there.
        below = self.left_below()
        # The chain's block at each height, where one is stored (the last CHAIN_REORG_WINDOW).
        heights = {p.block_height for p in pending if p.block_height is not None}
        stored = (
            dict(ChainBlock.objects.filter(chain=self.chain, height__in=heights).values_list("height", "block_hash"))
            if heights
            else {}
        )
        for p in pending:
            height = p.block_height
            if height is None:  # the filter leaves none out; the type does not know
                continue
            if self.report.height is not None and height > self.report.height:
                # Above the cursor a fork moved back: its block is not recorded again yet.
                continue
            if p.block_hash and stored.get(height, p.block_hash) != p.block_hash:
                # Its block left the chain and the block now at that height was recorded without
                # it: its transaction, mined again in the new branch (so the reorg left it to that
                # branch), no longer made this transfer (a contract that pays only before a time).
                if height <= below:
                    self._left_uncount(p)
                continue
            confirmations = tip_height - height + 1
            final = None if final_height is None else height <= final_height
            if confirmations < 1 or (confirmations == p.confirmations and not final):
                continue
            self.renew()
            _seen_again(
                p,
                confirmations=confirmations,
                now=self.now,
                block_height=height,
                block_hash=p.block_hash,
                final=final,
                matures_at_height=p.matures_at_height,
            )
            updated += 1
        if self.report.blocks or self.report.reorgs:
            # Only blocks recorded can leave a confirmed payment in a block the chain no
            # longer has.
            self._confirmed_left_uncount(below=below)
        self.report.confirmations_updated += updated
        return updated

    def left_below(self) -> float:
        """The highest block a payment left to a new branch can be in and be known gone
        when that branch's block at its height does not record it: every height once the
        run recorded the chain up to the tip; otherwise those a fork step's blocks
        (`BlockWatcher.step_blocks`, where `fork_apply`'s `again` comes from) below the
        cursor, which the new branch's blocks of that step all lie under."""
        if self.report.caught_up:
            return math.inf
        if self.report.height is None:  # the cursor this run's blocks reached
            return -math.inf
        return self.report.height - getattr(self.watcher, "step_blocks", 0)

    def _fork_left_settle(self, hashes: list[str]) -> None:
        """Inside the transaction of the block at a fork's `until`: un-count the payments
        `fork_apply` left to the new branch's blocks (their transaction is in one) that
        they did not record again, still naming an orphaned block (`hashes`): the
        transaction no longer made the transfer (a contract that pays only up to a block
        or a time). The block's own renewal follows its commit."""
        back = set(
            ChainBlock.objects.filter(chain=self.chain, block_hash__in=hashes).values_list("block_hash", flat=True)
        )
        gone = (
            # A block the chain came back to (recorded again since) names no orphan.
            Payment.objects.filter(chain=self.chain, block_hash__in=[h for h in hashes if h not in back])
            .exclude(status=PaymentStatus.REMOVED)
            .only("txid", "position", "block_height", "block_hash", "status", "currency", "request_id")
        )
        for p in gone:
            after = " after the payment was confirmed" if p.status == PaymentStatus.CONFIRMED else ""
            self._left_uncount(p, when=after, renew=False)

    def _confirmed_left_uncount(self, *, below: float) -> None:
        """Un-count confirmed payments whose block a reorg deeper than the policy took
        and whose transaction the new branch mined again without the transfer it made.

        The reorg left them to the new branch (`fork_apply`'s `again`), whose blocks up to
        `below` are recorded: a transfer still made is recorded again there with its new
        block, so what still names another block than the stored one at its height is gone.
        The block that ends the fork step finds them as a rule (`_fork_left_settle`);
        this finds any other whose stored block says so. Read
        for the stored heights only (the last CHAIN_REORG_WINDOW), through the
        (chain, block_height) index; none, as a rule. Money already applied or credited
        is put before staff (`payment_uncount`)."""
        if below == -math.inf:
            return
        stored = ChainBlock.objects.filter(chain=self.chain)
        left = (
            # Driven from the stored blocks (at most CHAIN_REORG_WINDOW rows): the heights
            # as a subquery, not a range, so the plan does not depend on guessing how many
            # of the chain's confirmed payments lie above the lowest one.
            Payment.objects.filter(
                chain=self.chain,
                status=PaymentStatus.CONFIRMED,
                block_height__in=Subquery(stored.values("height")),
            )
            .exclude(block_hash="")
            .filter(Exists(stored.filter(height=OuterRef("block_height")).exclude(block_hash=OuterRef("block_hash"))))
            .order_by()
        )
        if below != math.inf:
            left = left.filter(block_height__lte=int(below))
        for p in left.only("txid", "position", "block_height", "block_hash", "currency", "request_id"):
            self._left_uncount(p, when=" after the payment was confirmed")

    def _left_uncount(self, p: Payment, *, when: str = "", renew: bool = True) -> None:
        """Un-count `p`, recorded in a block that left the chain and not in the new
        branch's block at its height (while it is still recorded there), the lease
        renewed before the write as the blocks' steps renew after each block. Only a payment
        to a destination still watched: the blocks record no transfer to any other, so
        one that is not is left as it is (on a UTXO chain the transaction mined again
        pays what it paid)."""
        if not watched_requests(currencies=[p.currency], now=self.now).filter(pk=p.request_id).exists():
            return
        if renew:
            self.renew()
        gone = services.payment_uncount(
            chain=self.chain,
            txid=p.txid,
            position=p.position,
            reason=f"reorg: block {p.block_height} {p.block_hash} left the chain{when}; not in the new branch's block",
            now=self.now,
            block_hash=p.block_hash,
        )
        if gone is not None and gone.status == PaymentStatus.REMOVED:
            self.report.uncounted += 1


# --- One run ------------------------------------------------------------------------------------


def chain_run(
    watcher: Watcher,
    *,
    max_blocks: int | None = None,
    force: bool = False,
    progress: Callable[[str], None] | None = None,
    renew: Callable[[], object] | None = None,
    now: datetime | None = None,
) -> ScanReport:
    """One run of `watcher` (see the module docstring).

    `force` ignores the back-off after failures (operators, tests); `progress`
    receives a line per step; `renew` is called after every block (the
    caller's lease); `now` stands in for the clock in tests (it is passed to
    the state machine and the health fields).
    """
    started = time.monotonic()
    clock = now or timezone.now()
    report = ScanReport(currency=watcher.currency, chain=watcher.chain, currencies=list(watcher.currencies))
    state = chain_state(watcher.chain)
    if not force and backing_off(state, clock):
        report.skipped, report.error = "backoff", state.last_error
        return report
    if not watcher.rpc_url():
        report.skipped = "not_watched"
        return report
    run = ScanRun(
        watcher,
        report=report,
        max_blocks=max_blocks or settings.CHAIN_SCAN_MAX_BLOCKS,
        progress=progress,
        renew=renew,
        now=now,
    )
    try:
        with watcher.connect() as client:
            run.client = client
            watcher.node_check(run)
            watcher.scan(run)
    except CursorMoved as exc:
        watcher.process_state_clear()
        report.skipped = "busy"
        log.warning("%s", exc)
    except LeaseLost as exc:
        watcher.process_state_clear()
        report.skipped = "lease_lost"
        log.warning("%s", exc)
    except (ChainUnavailable, RpcError) as exc:
        watcher.process_state_clear()
        report.error = f"{getattr(exc, 'reason', 'refused')}: {exc}"
        health_failed(watcher.chain, error=report.error, now=now or timezone.now())
        log.warning("%s watcher: %s", watcher.chain, report.error)
    except BaseException as exc:
        watcher.process_state_clear()
        health_failed(watcher.chain, error=f"internal: {exc.__class__.__name__}: {exc}", now=now or timezone.now())
        raise
    else:
        health_ok(watcher.chain, tip_height=report.tip_height, now=now or timezone.now())
    report.seconds = time.monotonic() - started
    # A pass logs when it found or changed something (its failure is logged above); a
    # pass over empty blocks is DEBUG, so an idle chain writes nothing at INFO.
    eventful = (
        report.recorded
        or report.unconfirmed
        or report.uncounted
        or report.confirmations_updated
        or report.reorgs
        or report.strays
    )
    if eventful and not report.error:
        log.info("%s", report.summary())
    else:
        log.debug("%s", report.summary())
    return report


# --- The block walk -------------------------------------------------------------------------------


class BlockWatcher(Watcher):
    """A watcher that follows a chain of blocks (see the module docstring).

    A family implements `tip`, `advance` (the node's next step from the
    stored blocks), `first_height` (where a watcher without a cursor starts) and
    `block_record` (one block's payments, inside its transaction); and may
    override `fork_walk` (a fork deeper than the stored blocks), `unconfirmed`
    (orphaned payments the node holds unconfirmed again), `forked` and
    `blocks_done` (what follows the blocks: confirmations, a mempool).
    """

    step_blocks = 25  # blocks per `advance`; a run makes several steps
    deep_walks = 3  # deep fork walks per run, at most

    @abstractmethod
    def tip(self, run: ScanRun) -> Any:
        """The node's best block (`.height`, `.hash`); ChainUnavailable while it is not in sync."""

    @abstractmethod
    def advance(
        self, run: ScanRun, *, recent: list[BlockRef], start_height: int | None, max_blocks: int
    ) -> ChainStep: ...

    @abstractmethod
    def first_height(self, run: ScanRun, *, tip_height: int) -> int: ...

    @abstractmethod
    def block_record(self, run: ScanRun, recorder: Recorder, scan: Any) -> None: ...

    def block_txids(self, scan: Any) -> set[str]:
        """The txids a block scan will record (a fork leaves their payments to it)."""
        return set()

    def fork_walk(self, run: ScanRun, fork: Fork) -> Fork | None:
        """Complete a fork deeper than the stored blocks (`fork.common` is None); None when the node cannot."""
        return None

    def unconfirmed(self, run: ScanRun, txids: list[str]) -> set[str]:
        """Which of `txids` (payments of orphaned blocks) the node holds unconfirmed again."""
        return set()

    def forked(self, run: ScanRun, txids: list[str]) -> None:
        """After a fork: `txids` are the payments the orphaned blocks carried (e.g. forget them in caches)."""

    def blocks_done(self, run: ScanRun, *, tip: Any, recent: list[BlockRef]) -> None:
        """After the blocks of a run: bring confirmations up to the tip."""
        run.confirmations_refresh(tip_height=tip.height)

    def scan(self, run: ScanRun) -> None:
        report = run.report
        recent = run.recent()
        start_height: int | None = None
        budget = run.max_blocks
        walks = 0
        tip: Any = None
        while True:
            if not recent and start_height is None:
                # No cursor yet: start where a payment to a watched destination may be.
                start_height = self.first_height(run, tip_height=self.tip(run).height)
            step = self.advance(run, recent=recent, start_height=start_height, max_blocks=min(self.step_blocks, budget))
            tip = step.tip
            report.tip_height = tip.height
            if step.fork is not None and step.fork.common is None and walks < self.deep_walks:
                # Deeper than the stored blocks: find the real fork point, then scan from it.
                walks += 1
                deep = self.fork_walk(run, step.fork)
                if deep is not None:
                    self.forked(run, run.fork_apply(deep, unconfirmed=lambda t: self.unconfirmed(run, t)))
                    recent = run.recent()
                    continue
            if step.fork is not None:
                again = set().union(*(self.block_txids(b) for b in step.blocks)) if step.blocks else set()
                until = step.blocks[-1].block.height if step.blocks else None
                self.forked(
                    run,
                    run.fork_apply(step.fork, again=again, until=until, unconfirmed=lambda t: self.unconfirmed(run, t)),
                )
            for block in step.blocks:
                with run.block(block.block, previous_hash=block.previous_hash) as recorder:
                    self.block_record(run, recorder, block)
            budget -= len(step.blocks)
            report.height = step.tip_scanned.height if step.tip_scanned else None
            report.caught_up = step.caught_up
            if step.blocks or step.fork:
                run.line(
                    f"{report.currency}: scanned to {report.height} of {tip.height}"
                    f" ({report.blocks} block(s), {report.recorded} payment(s) so far)"
                )
            recent = run.recent()
            if step.caught_up or budget <= 0 or not step.blocks:
                break
        self.blocks_done(run, tip=tip, recent=recent)
