"""The chain watchers, one per chain, and the one entry point that runs them.

Every family (billing.chains.spec.FAMILY_PACKAGES) brings its watchers
(`ChainFamily.watchers()`); this registry holds them by chain. A chain may
carry several currencies (ethereum: ETH, USDT, USDC): any of them names its
watcher, and one scan serves them all.

`chain_scan(currency=...)` is what the periodic task (`billing.chain_scan`)
and `python manage.py scan_chain <currency>` call. It takes the chain's lease
(`core.lease.single_flight`), so however many workers run, one chain is
scanned by one of them at a time; the others return at once with
`skipped="busy"`, and leave word (in the cache) for the holder, which runs the
chain once more when it is done (RESCANS_MAX), so a run asked for while one is in
progress (a node's push) is never lost until the next poll. The run itself is the shared machinery's
(billing.chains.machinery.chain_run).

Where a node publishes its news (ZMQ, a websocket), `ChainListener` (run by
`python manage.py listen_chain <currency>`) queues the same scan task as soon
as the node announces a block or a pool transaction; the periodic task stays
the safety net.

A chain is watched when the watch-only material of one of its currencies is
set (billing.chains.config) and its node's RPC URL is too. Each watched chain
reports its health to `/readyz` as a non-critical check named `chain:<chain>`.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.core.cache import cache

from billing.chains.config import families
from billing.chains.errors import ChainUnavailable
from billing.chains.interface import ScanReport, Watcher
from billing.currencies import CURRENCIES
from core.errors import DomainError
from core.health import CheckResult, register_check
from core.lease import lease_renew, single_flight

log = logging.getLogger(__name__)

# A run asked for while another runs is made by the holder right after (at most this many
# times in a row): a push that finds the chain busy is not lost until the next poll.
RESCANS_MAX = 3
AGAIN_TTL_SECONDS = 3600  # word left for the holder outlives any run (the next run clears a stale one)
# A run renews its lease after every block; a worker that dies loses it this long after.
LEASE_TTL = timedelta(minutes=2)

WATCHERS: dict[str, Watcher] = {}


def watcher_register(watcher: Watcher) -> None:
    WATCHERS[watcher.chain] = watcher


for _family in families():
    for _watcher in _family.watchers():
        watcher_register(_watcher)


def _names() -> list[str]:
    return [w.currency for w in WATCHERS.values()]


def watcher_for(*, currency: str) -> Watcher:
    """The watcher of a currency's chain (a currency code, or a chain name)."""
    value = str(currency).strip()
    code = value.upper()
    chain = CURRENCIES[code].chain if code in CURRENCIES else value.lower()
    watcher = WATCHERS.get(chain)
    if watcher is None:
        raise DomainError(
            "no_watcher",
            f"No chain watcher for {value!r}; there is one for {', '.join(_names())}.",
            details={"currency": value, "watchers": _names()},
        )
    return watcher


def watchers_enabled() -> list[Watcher]:
    return [w for w in WATCHERS.values() if w.watched()]


def chain_scan(
    *,
    currency: str,
    force: bool = False,
    max_blocks: int | None = None,
    progress: Callable[[str], None] | None = None,
    now: datetime | None = None,
) -> ScanReport:
    """Run the watcher of `currency`'s chain once, as a single flight."""
    from billing.chains.machinery import chain_run

    watcher = watcher_for(currency=currency)
    if not watcher.watched():
        return ScanReport(
            currency=watcher.currency, chain=watcher.chain, skipped="not_watched", currencies=list(watcher.currencies)
        )
    name, again = f"chain_scan:{watcher.chain}", f"chain_scan_again:{watcher.chain}"
    report: ScanReport | None = None
    for _ in range(1 + RESCANS_MAX):
        with single_flight(name=name, ttl=LEASE_TTL) as owner:
            if owner is None:
                # The holder runs the chain once more when it is done, so what asked for this
                # run (a node's push, most often) is not lost behind the run in progress.
                cache.set(again, True, timeout=AGAIN_TTL_SECONDS)
                return report or ScanReport(
                    currency=watcher.currency, chain=watcher.chain, skipped="busy", currencies=list(watcher.currencies)
                )
            cache.delete(again)  # asked before this run began: this run covers it
            report = chain_run(
                watcher,
                force=force,
                max_blocks=max_blocks,
                progress=progress,
                now=now,
                renew=functools.partial(lease_renew, name=name, owner=owner, ttl=LEASE_TTL),
            )
        if not cache.delete(again):
            break  # nobody asked while it ran
    else:
        scan_queue(currency=watcher.currency)  # asked again after the last run allowed here: a task of its own
    assert report is not None
    return report


def chain_readiness(*, chain: str) -> CheckResult:
    """The `/readyz` report of one chain's watcher: never critical (the API keeps
    serving while a node is away), not ok while the watcher is blind."""
    from billing.models import ChainState
    from billing.selectors import chain_health

    watcher = WATCHERS[chain]
    if not watcher.watched():
        return CheckResult(True, {"watched": False}, critical=False)
    health = chain_health(chain=chain)
    state = ChainState.objects.filter(chain=chain).first()
    detail = {
        "currency": watcher.currency,
        "currencies": watcher.watched_currencies(),
        **health.as_dict(),
        "consecutive_failures": state.consecutive_failures if state else 0,
        "blocks_behind": (
            state.tip_height - state.height
            if state and state.tip_height is not None and state.height is not None
            else None
        ),
    }
    if state is None:
        detail["error"] = "no scan yet"
    return CheckResult(health.ok and state is not None, detail, critical=False)


def readiness_checks_register() -> None:
    """Register `chain:<chain>` in /readyz for every watched chain (at start-up)."""
    for watcher in watchers_enabled():
        register_check(f"chain:{watcher.chain}", functools.partial(chain_readiness, chain=watcher.chain))


# --- Push: the node says when to scan -------------------------------------------------------


def scan_queue(*, currency: str) -> None:
    """Queue one run of the chain's watcher (the task the periodic poll queues)."""
    from billing.tasks import chain_scan as chain_scan_task

    chain_scan_task.delay(currency)


class _ZmqFeed:
    """A node's ZMQ publisher (PUB): a SUB socket subscribed to the topics. It
    reconnects by itself when the node comes back."""

    def __init__(self, url: str, topics: tuple[str, ...]) -> None:
        self.url, self.topics = url, topics
        self._context: Any = None
        self._socket: Any = None

    def open(self) -> None:
        import zmq

        self._context = zmq.Context()
        self._socket = self._context.socket(zmq.SUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.RCVHWM, 0)  # never drop news on this side; the node's HWM still applies
        for topic in self.topics:
            self._socket.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self._socket.connect(self.url)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(0)
            self._socket = None
        if self._context is not None:
            self._context.term()
            self._context = None

    def wait(self, timeout: float) -> int:
        """How many messages arrived within `timeout` seconds (all of a burst, at once)."""
        import zmq

        if not self._socket.poll(int(timeout * 1000)):
            return 0
        count = 0
        while True:
            try:
                self._socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return count
            count += 1


class _SubscriptionFeed:
    """A node's JSON-RPC websocket with a subscription per topic: a bare name is
    `eth_subscribe` to it (`newHeads`); `method:params` calls that method with
    those JSON params (Solana: `logsSubscribe:[{"mentions": [...]}, ...]`). A
    dropped connection is opened again, and counts as news (what was announced
    meanwhile is lost: a scan finds it)."""

    @staticmethod
    def request(number: int, topic: str) -> dict[str, Any]:
        method, sep, params = topic.partition(":")
        if not sep:
            return {"jsonrpc": "2.0", "id": number, "method": "eth_subscribe", "params": [topic]}
        return {"jsonrpc": "2.0", "id": number, "method": method, "params": json.loads(params)}

    def __init__(self, url: str, topics: tuple[str, ...]) -> None:
        self.url, self.topics = url, topics
        self._stack = contextlib.ExitStack()
        self._ws: Any = None

    def open(self) -> None:
        from websockets.sync.client import connect

        self._stack = contextlib.ExitStack()
        self._ws = self._stack.enter_context(connect(self.url, open_timeout=30, max_size=None))
        for number, topic in enumerate(self.topics, 1):
            self._ws.send(json.dumps(self.request(number, topic)))
        answered = 0
        while answered < len(self.topics):
            message = json.loads(self._ws.recv(timeout=30))
            if "id" not in message:
                continue  # news already: the scan after subscribing covers it
            if "error" in message:
                raise ChainUnavailable(f"the node refused a subscription: {message['error']}", reason="bad_response")
            answered += 1

    def close(self) -> None:
        if self._ws is not None:
            self._stack.close()
            self._ws = None

    def wait(self, timeout: float) -> int:
        from websockets.exceptions import ConnectionClosed

        try:
            self._ws.recv(timeout=timeout)
        except TimeoutError:
            return 0
        except (ConnectionClosed, OSError) as exc:
            log.warning("the node's websocket closed (%s); opening it again", exc.__class__.__name__)
            self.close()
            time.sleep(1.0)
            self.open()
            return 1
        count = 1
        while True:
            try:
                self._ws.recv(timeout=0)
            except TimeoutError:
                return count
            count += 1


class ChainListener:
    """Follows what a chain's node publishes (`Watcher.push_source`: a ZMQ PUB
    socket, tcp://; a JSON-RPC websocket with eth_subscribe or Solana's logsSubscribe, ws:// or wss://;
    or the family's own feed, such as a Bitcoin Core node's P2P announcements)
    and queues the chain's scan task when the node announces a block or a pool
    transaction, so a payment is found as soon as the node knows it instead of at
    the next poll. The poll stays the safety net: a message lost (the listener or
    the node restarting; a ZMQ PUB drops what no connected subscriber takes) is
    found by the next periodic run, and the scan itself is the same either way.

    Messages are coalesced: after a scan is queued, more news within `debounce`
    seconds queues one more scan at the end of that window, never one each.

    `python manage.py listen_chain <currency>` runs one (deploy/systemd/gpurenthub-listen@.service).
    """

    def __init__(
        self,
        watcher: Watcher,
        *,
        url: str = "",
        action: Callable[[], object] | None = None,
        debounce: float | None = None,
    ) -> None:
        from django.conf import settings

        source = watcher.push_source(url=url)
        if source is None:
            raise DomainError(
                "no_push_source",
                f"{watcher.currency}'s node publishes nothing to listen to: set {watcher.currency}_ZMQ_URL "
                "(BTC, LTC: or BTC_P2P_PEER, LTC_P2P_PEER; ETH: ETH_WS_URL; SOL: SOL_WS_URL).",
                details={"currency": watcher.currency},
            )
        self.watcher = watcher
        self.url, self.topics, self.setting = source.url, source.topics, source.setting
        scheme = self.url.split(":", 1)[0].lower()
        self._feed: Any
        if source.feed is not None:
            self._feed = source.feed()  # the family reads its node its own way (UTXO: the P2P port)
        elif scheme in ("ws", "wss"):
            self._feed = _SubscriptionFeed(self.url, self.topics)
        elif scheme in ("tcp", "ipc"):
            self._feed = _ZmqFeed(self.url, self.topics)
        else:
            raise DomainError(
                "invalid",
                f"{source.setting} must be a tcp:// (ZMQ) or ws(s):// URL.",
                details={"setting": source.setting},
            )
        self.action = action or functools.partial(scan_queue, currency=watcher.currency)
        self.debounce = float(getattr(settings, "CHAIN_PUSH_DEBOUNCE_SECONDS", 0.5) if debounce is None else debounce)
        self.messages = 0  # received so far
        self.scans = 0  # queued so far

    def __enter__(self) -> ChainListener:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def connect(self) -> None:
        self._feed.open()
        log.info("%s: listening to %s (%s)", self.watcher.currency, self.setting, ", ".join(self.topics))

    def close(self) -> None:
        self._feed.close()

    def run(
        self,
        *,
        max_scans: int | None = None,
        timeout: float | None = None,
        stop: threading.Event | None = None,
    ) -> int:
        """Listen, queueing scans, until `max_scans` were queued, `timeout` seconds
        passed with none due, or `stop` is set (None, None, None: for ever). Returns
        how many scans this call queued."""
        queued = 0
        pending = False
        last_scan = float("-inf")
        deadline = None if timeout is None else time.monotonic() + timeout
        while stop is None or not stop.is_set():
            now = time.monotonic()
            if pending and now >= last_scan + self.debounce:
                pending = False
                last_scan = now
                self.action()
                self.scans += 1
                queued += 1
                if max_scans is not None and queued >= max_scans:
                    return queued
                continue
            wait = 1.0 if not pending else max(0.0, last_scan + self.debounce - now)
            if deadline is not None and not pending:  # news received is always acted on
                if now >= deadline:
                    return queued
                wait = min(wait, deadline - now)
            received = self._feed.wait(wait)
            self.messages += received
            pending = pending or received > 0
        return queued
