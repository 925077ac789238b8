"""Fixtures for the Monero tests: one regtest network per session (per xdist
worker): monerod, a mined payer wallet and the merchant's view-only wallet,
whose address and view key are generated for the run.

Every test here is marked `chain` and `slow`. They are never skipped: without
monerod the session fixture fails and says to run tests/ensure-chain-nodes.sh.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.monero import MoneroRegtest, NodeNotInstalled
from tests.chains.monero.harness import LOOKAHEAD, WatchedMonero, monero_configure


@pytest.fixture(scope="session")
def monero_net() -> Iterator[MoneroRegtest]:
    try:
        net = MoneroRegtest.start(lookahead=LOOKAHEAD)
    except NodeNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        yield net
    finally:
        net.stop()


@pytest.fixture
def xmr(settings, monero_net, customer) -> Iterator[WatchedMonero]:
    """XMR watched through the session's view-only wallet (3 confirmations, fresh subaddresses);
    whatever a test leaves in the pool is mined after it."""
    monero_configure(settings, monero_net)
    yield WatchedMonero(monero_net, customer)
    if monero_net.running and monero_net.pool():
        monero_net.mine(1)


@pytest.fixture
def readiness_checks():
    """Readiness checks registered by a test are dropped after it."""
    from core import health

    before = dict(health._checks)
    yield
    health._checks.clear()
    health._checks.update(before)
