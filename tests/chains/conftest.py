"""Fixtures for the chain tests: one litecoind regtest node for the session.

Every test here is marked `chain`. They are never skipped: without litecoind
the session fixture fails and says to run tests/ensure-chain-nodes.sh.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.litecoind import RegtestNode, WatchOnlyAccount, regtest_node_start, watch_only_account_generate
from tests.chains.harness import Destinations, WatchedChain, chain_configure


@pytest.fixture(scope="session")
def regtest_node() -> Iterator[RegtestNode]:
    """litecoind -regtest on free loopback ports, wallet created, 101 blocks mined."""
    node = regtest_node_start(mine=101)
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture
def node(regtest_node: RegtestNode) -> Iterator[RegtestNode]:
    """The session node, with the mempool mined empty after each test."""
    yield regtest_node
    if regtest_node.process.poll() is None and regtest_node.mempool():
        regtest_node.mine(1)


@pytest.fixture(scope="session")
def watch_account(regtest_node: RegtestNode) -> WatchOnlyAccount:
    """A BIP84 account generated for this run; only its public half exists."""
    return watch_only_account_generate(hrp=regtest_node.hrp)


@pytest.fixture(scope="session")
def destinations(watch_account: WatchOnlyAccount) -> Destinations:
    return Destinations(watch_account)


@pytest.fixture
def ltc(settings, node, customer) -> Iterator[WatchedChain]:
    """LTC enabled against the session node (fresh watch-only account, cursor at the tip)."""
    from billing.chains.utxo.watcher import process_state_clear

    yield chain_configure(settings, currency="LTC", node=node, customer=customer)
    process_state_clear()


@pytest.fixture
def btc(settings, node, customer) -> Iterator[WatchedChain]:
    """BTC (regtest keys) enabled against the same Litecoin node: matching is by script."""
    from billing.chains.utxo.watcher import process_state_clear

    yield chain_configure(settings, currency="BTC", node=node, customer=customer)
    process_state_clear()
