"""The Solana watcher: SOL invoices found by their Solana Pay reference.

A run is one pass of billing.chains.solana.scan (list the recipient, and with
SOL_SCAN_REFERENCES the references of open invoices too; fetch what is new,
validate it as Solana Pay's `validateTransfer` does, the references matched
locally), then one database transaction that records what the pass found and
stores the cursors:

- a part received for an invoice's reference is a payment at (signature,
  position of the reference among the account keys): `processing` at
  `confirmed`, settled at `finalized` (`final=True`);
- a transaction seen at `confirmed` that never became `finalized` and whose
  blockhash expired (it can never land), or that finalized paying nothing,
  is un-counted;
- what the recipient received for no known reference is recorded for staff
  once finalized (a stray of kind `no_reference`), never credited.

The cursors (per address: how far its signatures were handled) and the
pending transactions (recorded at `confirmed`, not yet final) live in
`ChainState.extra`, written in the same transaction as the payments, so a
worker killed mid-run recorded all of a pass or nothing of it. The node must
follow `SOL_CLUSTER` (its genesis hash, or `SOL_GENESIS_HASH`), or the run
fails with `wrong_cluster` and /readyz says so.

With `SOL_WS_URL` (the node's PubSub websocket), `manage.py listen_chain SOL`
queues a run as soon as the node announces a transfer to the recipient
(`push_source`: logsSubscribe mentioning it, at confirmed and at finalized);
the periodic run stays the safety net.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable, Iterator

from django.conf import settings

from billing import services
from billing.chains.blocks import BlockRef
from billing.chains.interface import PushSource, Watcher, setting_value
from billing.chains.machinery import Recorder, ScanRun, state_extra_replace
from billing.chains.solana import family
from billing.chains.solana.cluster import cluster_check
from billing.chains.solana.rpc import SolanaRpc
from billing.chains.solana.scan import AddressCursor, FinalMemory, PendingTx, ScanOutcome, solana_scan
from billing.chains.spec import ChainSpec

CURRENCY = "SOL"
PUSH_SETTING = "SOL_WS_URL"
# A transfer to the recipient is announced when its block is confirmed (the payment is
# `processing`) and again when it is finalized (settled): each queues a scan.
PUSH_COMMITMENTS = ("confirmed", "finalized")
STRAY_KIND = "no_reference"
# The recipient's first listing reaches this far before the oldest watched invoice (a
# block's time is the validators' estimate, seconds off the server's clock).
START_MARGIN_SECONDS = 600

_lock = threading.Lock()
# Per process: signatures seen finalized that paid nothing (so they are not fetched again). A cache.
_memory = FinalMemory()


class SolanaWatcher(Watcher):
    chain_family = family.FAMILY
    # Waits between retries of the RPC client (429s, transport failures): tests record them instead.
    sleep: Callable[[float], object] = staticmethod(time.sleep)

    def __init__(self, spec: ChainSpec) -> None:
        self.spec = spec

    # --- the node --------------------------------------------------------------------------

    @contextlib.contextmanager
    def connect(self) -> Iterator[SolanaRpc]:
        with SolanaRpc(
            self.rpc_url(),
            timeout=float(getattr(settings, "SOL_RPC_TIMEOUT_SECONDS", 30.0)),
            batch_size=int(getattr(settings, "SOL_RPC_BATCH_SIZE", 100) or 100),
            max_calls_per_second=float(getattr(settings, "SOL_RPC_MAX_RPS", 0.0) or 0.0),
            sleep=self.sleep,
        ) as rpc:
            yield rpc

    def push_source(self, url: str = "") -> PushSource | None:
        """The node's PubSub websocket (SOL_WS_URL; a validator serves it on its RPC
        port + 1): `logsSubscribe` with `mentions` of the recipient, at `confirmed`
        and at `finalized`. Every Solana Pay transfer names the recipient (the
        references ride on the same instruction), so one address covers every
        invoice: a node takes one address per `mentions` subscription."""
        url = url or setting_value(PUSH_SETTING)
        if not url:
            return None
        recipient = family.solana_recipient().address
        topics = tuple(
            "logsSubscribe:" + json.dumps([{"mentions": [recipient]}, {"commitment": commitment}])
            for commitment in PUSH_COMMITMENTS
        )
        return PushSource(url=url, topics=topics, setting=PUSH_SETTING)

    def node_check(self, run: ScanRun) -> None:
        rpc: SolanaRpc = run.client
        rpc.on_request = run.renew  # a long pass keeps the lease
        cluster_check(rpc, cluster=family.sol_cluster(), pinned=setting_value("SOL_GENESIS_HASH"))

    def process_state_clear(self) -> None:
        with _lock:
            _memory.clear()

    # --- the pass ----------------------------------------------------------------------------

    def scan(self, run: ScanRun) -> None:
        rpc: SolanaRpc = run.client
        recipient = family.solana_recipient().address
        extra = run.state().extra or {}
        cursors = {a: AddressCursor.from_json(c) for a, c in (extra.get("cursors") or {}).items()}
        pending = {s: PendingTx.from_json(s, p) for s, p in (extra.get("pending") or {}).items()}
        # The references of invoices open or in their monitoring window; later money
        # (credit) reaches the recipient, whose own listing finds it with its reference.
        references = []
        since: int | None = None
        if getattr(settings, "SOL_SCAN_REFERENCES", False):
            references = sorted(run.monitored([CURRENCY]))
        elif recipient not in cursors:
            # The recipient's listing is all there is: its first one reaches back to the oldest watched invoice.
            oldest = run.oldest_watched_at([CURRENCY])
            since = int(oldest.timestamp()) - START_MARGIN_SECONDS if oldest is not None else None
        outcome = solana_scan(
            rpc,
            recipient=recipient,
            references=references,
            cursors=cursors,
            pending=pending,
            known_references=lambda keys: run.issued(keys, [CURRENCY]),
            known_final=run.recorded_final,
            memory=_memory,
            max_pages=max(1, int(getattr(settings, "SOL_SCAN_MAX_PAGES", 5) or 5)),
            recipient_since=since,
        )
        with run.atomic() as recorder:
            self._record(recorder, outcome, recipient=recipient)
            state = recorder.state
            state.height = state.tip_height = outcome.confirmed_slot
            state.save(update_fields=["height", "tip_height"])
            recorder.extra = {
                # An address with nothing listed yet needs no cursor (the recipient always keeps its own).
                "cursors": {a: c.as_json() for a, c in outcome.cursors.items() if c.as_json() or a == recipient},
                "pending": {s: p.as_json() for s, p in outcome.pending.items()},
                "finalized_slot": outcome.finalized_slot,
            }
        report = run.report
        report.recorded += recorder.recorded
        report.height = report.tip_height = outcome.confirmed_slot
        report.caught_up = outcome.caught_up
        eventful = outcome.fetched or outcome.gone or not outcome.caught_up
        if eventful or run.progress is not None:  # a quiet periodic pass logs nothing
            run.line(
                f"{CURRENCY}: {outcome.addresses} address(es) listed ({outcome.listed} signature(s)), "
                f"{outcome.fetched} transaction(s) fetched, {len(outcome.sightings)} part(s) for invoices, "
                f"{len(outcome.gone)} gone; slots confirmed {outcome.confirmed_slot}, finalized {outcome.finalized_slot}"
            )

    def _record(self, recorder: Recorder, outcome: ScanOutcome, *, recipient: str) -> None:
        for part in outcome.sightings:
            recorder.observe(
                services.Observation(
                    currency=CURRENCY,
                    txid=part.signature,
                    output_index=part.position,
                    position=str(part.position),
                    match_key=part.reference,
                    amount=part.amount,
                    confirmations=1,
                    block_height=part.slot,
                    final=part.finalized,
                )
            )
        for gone in outcome.gone:
            recorder.uncount_tx(txid=gone.signature, reason=gone.reason)
        for stray in outcome.unmatched:
            if not stray.finalized:
                continue  # recorded once final: a dropped fork leaves nothing for staff to look at
            recorder.stray(
                txid=stray.signature,
                position=str(stray.position),
                kind=STRAY_KIND,
                address=recipient,
                amount=stray.amount,
                asset=CURRENCY,
                paid_currency=CURRENCY,
                block_height=stray.slot,
                note="a transfer to the recipient carrying no invoice's reference",
            )

    # --- the operator's move ------------------------------------------------------------------

    def cursor_set(self, *, height: int) -> BlockRef:
        """Forget the listing cursors: the next pass lists every watched reference
        from its first transaction again (recording is idempotent) and the
        recipient from its newest finalized one. Solana is followed by address,
        not by block, so `height` is not a starting point; pending payments are kept."""
        state_extra_replace(
            chain=self.chain,
            key="cursors",
            value={},
            reason="listing cursors forgotten by an operator: every watched reference is listed again",
        )
        self.process_state_clear()
        return BlockRef(height, "")

    def cursor_set_line(self, block: BlockRef) -> str:
        return "SOL listing cursors forgotten: every watched reference is listed again from its first transaction."
