"""The catalog's change feed: what a web process knows of the catalog version and
of stock changes without asking the database on every request.

Every write that changes the catalog moves its version and every write that
changes a host's free slots changes stock, each in the writing transaction, by
the triggers of catalog/triggers.py. Those triggers also send a PostgreSQL
notification (`NOTIFY`), delivered when the transaction commits, once per
transaction and channel. A web worker runs one thread that holds its own
connection, `LISTEN`s on both channels and keeps:

- the catalog version and when it changed, read again on every catalog
  notification;
- a stock generation, a number of this process that moves on every stock
  notification.

The hot public reads (catalog lists, stock, quote, recommend) then key their
answers on these two instead of querying the version on every request: a
request that finds its answer kept costs no query at all. The data a
notification announces is committed before it is delivered, so an answer built
after the feed moved reads it; between a commit and its notification (well
under a millisecond on one machine) a request may still be answered from the
state just before, as if it had arrived that much earlier.

While the feed is not connected (starting, a lost connection, a database
restart), `state()` answers None and callers query as they would without it.
Every HEARTBEAT seconds the thread reads the version again and moves the stock
generation, so even a notification lost by the network is made good within
that time. Only PostgreSQL has it; it is started in web workers
(deploy/gunicorn.conf.py) when CATALOG_CHANGE_FEED is on, and nowhere else.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connections

from catalog.triggers import CATALOG_CHANNEL, STOCK_CHANNEL

log = logging.getLogger(__name__)

RETRY_MAX_SECONDS = 30.0


@dataclass(frozen=True)
class FeedState:
    version: int
    changed_at: datetime
    stock_generation: int


class ChangeFeed:
    def __init__(self, *, heartbeat: float, alias: str = "default") -> None:
        self.heartbeat = heartbeat
        self.alias = alias
        self._state: FeedState | None = None
        self._changed = threading.Condition()
        self._stock_generation = 0
        self._stop = threading.Event()
        self.backend_pid: int | None = None  # the listening connection's server process
        self.thread = threading.Thread(target=self._run, name="catalog-change-feed", daemon=True)

    # --- what requests read ---------------------------------------------------------

    def state(self) -> FeedState | None:
        """The catalog version and stock generation as of the last notification,
        or None while the feed is not connected (callers query instead)."""
        return self._state

    def wait_for(self, predicate, timeout: float) -> FeedState | None:
        """Waits until `predicate(state)` holds (state may be None), at most
        `timeout` seconds; returns the state then. For tests and tools."""
        with self._changed:
            self._changed.wait_for(lambda: predicate(self._state), timeout)
            return self._state

    def _set(self, state: FeedState | None) -> None:
        with self._changed:
            self._state = state
            self._changed.notify_all()

    # --- the thread -----------------------------------------------------------------

    def start(self) -> ChangeFeed:
        self.thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self.thread.join(timeout)

    def _connect(self):
        import psycopg

        params = connections[self.alias].get_connection_params()
        params.pop("cursor_factory", None)
        return psycopg.connect(autocommit=True, **params)

    def _read(self, conn) -> None:
        """Reads the version row and moves the stock generation: a fresh state."""
        from catalog.selectors import catalog_version

        version = catalog_version(conn)
        self._stock_generation += 1
        if version is None:  # no version row (a flushed database): nothing can be kept
            self._set(None)
            return
        self._set(FeedState(version.version, version.changed_at, self._stock_generation))

    def _run(self) -> None:
        delay = 1.0
        while not self._stop.is_set():
            try:
                with self._connect() as conn:
                    self.backend_pid = conn.info.backend_pid
                    conn.execute(f"LISTEN {CATALOG_CHANNEL}")
                    conn.execute(f"LISTEN {STOCK_CHANNEL}")
                    # Listening first, reading second: nothing committed after the
                    # read can go unnoticed.
                    self._read(conn)
                    log.info("catalog change feed connected (version %s)", self._state and self._state.version)
                    delay = 1.0
                    while not self._stop.is_set():
                        self._listen(conn)
                        self._read(conn)  # the heartbeat: also mends a lost notification
            except Exception as exc:
                self._set(None)
                if self._stop.is_set():
                    break
                log.warning("catalog change feed lost (%s); answering from queries, retrying in %.0f s", exc, delay)
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_SECONDS)
        self._set(None)

    def _listen(self, conn) -> None:
        """Applies notifications as they come, for HEARTBEAT seconds. Waits at
        most a second at a time, so that stop() is heard."""
        deadline = time.monotonic() + self.heartbeat
        while not self._stop.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            # Collected first: the connection cannot run a query while it yields them.
            notes = list(conn.notifies(timeout=min(left, 1.0), stop_after=1))
            if not notes:
                continue
            if any(note.channel == CATALOG_CHANNEL for note in notes):
                self._read(conn)
                continue
            state = self._state
            self._stock_generation += 1
            if state is not None:
                self._set(FeedState(state.version, state.changed_at, self._stock_generation))


_feed: ChangeFeed | None = None
_feed_pid: int | None = None
_feed_lock = threading.Lock()


def start() -> ChangeFeed | None:
    """Starts this process's feed (once; again in a forked child) when
    CATALOG_CHANGE_FEED is on and the database is PostgreSQL. Called by the web
    workers when they start (deploy/gunicorn.conf.py)."""
    global _feed, _feed_pid
    if not settings.CATALOG_CHANGE_FEED or connections["default"].vendor != "postgresql":
        return None
    with _feed_lock:
        if _feed is None or _feed_pid != os.getpid():
            _feed = ChangeFeed(heartbeat=settings.CATALOG_FEED_HEARTBEAT_SECONDS).start()
            _feed_pid = os.getpid()
        return _feed


def stop() -> None:
    """Stops this process's feed, if it runs (tests; a worker shutting down)."""
    global _feed, _feed_pid
    with _feed_lock:
        feed, _feed, _feed_pid = _feed, None, None
    if feed is not None:
        feed.stop()


def current() -> FeedState | None:
    """This process's feed state, or None when there is no live feed (query instead)."""
    feed = _feed
    if feed is None or _feed_pid != os.getpid():
        return None
    return feed.state()
