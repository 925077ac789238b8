"""A chain scan logs at INFO when it found or changed something, and a warning when it
failed; a pass over empty blocks is DEBUG (docs/operations.md#logs)."""

from __future__ import annotations

import contextlib
import logging

import pytest

from billing.chains.errors import ChainUnavailable
from billing.chains.interface import Watcher
from billing.chains.machinery import chain_run
from billing.chains.watchers import WATCHERS

pytestmark = pytest.mark.django_db

LOGGER = "billing.chains.machinery"


class StubWatcher(Watcher):
    """The litecoin watcher's declarations, with a scan that reports what the test says."""

    def __init__(self, **report) -> None:
        self.spec = WATCHERS["litecoin"].spec
        self.outcome = report

    @contextlib.contextmanager
    def connect(self):
        yield None

    def node_check(self, run) -> None:
        if self.outcome.get("fail"):
            raise ChainUnavailable("node is in initial block download at height 5", reason="syncing")

    def scan(self, run) -> None:
        run.line("LTC: scanned to 110 of 110 (10 block(s), 0 payment(s) so far)")
        report = run.report
        report.height = report.tip_height = 110
        report.caught_up = True
        for field, value in self.outcome.items():
            if field != "fail":
                setattr(report, field, value)

    def cursor_set(self, *, height: int):
        raise NotImplementedError


def scanned(caplog, settings, **outcome) -> list[logging.LogRecord]:
    settings.LTC_RPC_URL = "http://127.0.0.1:1"
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    chain_run(StubWatcher(**outcome), force=True)
    return [r for r in caplog.records if r.name == LOGGER]


def test_a_pass_over_empty_blocks_writes_nothing_at_info(caplog, settings):
    records = scanned(caplog, settings, blocks=10)
    assert records, "the pass is still there at DEBUG"
    assert all(r.levelno == logging.DEBUG for r in records), [(r.levelname, r.getMessage()) for r in records]


@pytest.mark.parametrize("field", ["recorded", "unconfirmed", "uncounted", "confirmations_updated", "reorgs", "strays"])
def test_a_pass_that_found_or_changed_something_says_so(caplog, settings, field):
    records = scanned(caplog, settings, blocks=1, **{field: 1})
    info = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert len(info) == 1 and info[0].startswith("LTC: cursor at 110"), info


def test_a_failed_pass_is_a_warning_once(caplog, settings):
    records = scanned(caplog, settings, fail=True)
    loud = [(r.levelname, r.getMessage()) for r in records if r.levelno >= logging.INFO]
    assert loud == [("WARNING", "litecoin watcher: syncing: node is in initial block download at height 5")]
