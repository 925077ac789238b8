"""Fixtures for the Ethereum tests: one anvil node for the session, with the test
contracts deployed, and fresh watched addresses for each test.

Every test here is marked `chain`. They are never skipped: without anvil the
session fixture fails and says to run tests/ensure-chain-nodes.sh.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from billing.chains.ethereum.rpc import EthRpc
from devtools.anvil import AnvilNode, NodeNotInstalled
from tests.chains.ethereum.rpc_proxy import RpcProxy


def anvil_start(**kwargs) -> AnvilNode:
    """Start anvil for tests; a missing anvil fails the run with the fix."""
    try:
        return AnvilNode.start(**kwargs)
    except NodeNotInstalled as exc:
        pytest.fail(str(exc), pytrace=False)


@dataclass(frozen=True)
class Evm:
    """The session's anvil node and its contracts (checksummed addresses)."""

    node: AnvilNode
    usdt: str  # 6 decimals
    usdc: str  # 6 decimals
    other: str  # an 18-decimal token nobody credits
    forwarder: str
    relay: str  # a second forwarder, for transfers two calls deep

    def address(self) -> str:
        """A fresh address nobody has used (lowercase), as a deposit destination is."""
        return "0x" + secrets.token_hex(20)

    def fund_tokens(self, amount: int = 10**24) -> None:
        payer = self.node.payer
        for token in (self.usdt, self.usdc, self.other):
            self.node.token_mint(token, payer, amount)
        self.node.mine()


@pytest.fixture(scope="session")
def anvil() -> Iterator[AnvilNode]:
    node = anvil_start(slots_in_an_epoch=2)
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="session")
def evm(anvil: AnvilNode) -> Evm:
    world = Evm(
        node=anvil,
        usdt=anvil.token_deploy("USDT", 6, name="Test Tether"),
        usdc=anvil.token_deploy("USDC", 6, name="Test USD Coin"),
        other=anvil.token_deploy("DAI", 18, name="Test Dai"),
        forwarder=anvil.deploy("Forwarder"),
        relay=anvil.deploy("Forwarder"),
    )
    anvil.multicall_install()
    world.fund_tokens()
    return world


@pytest.fixture
def node(evm: Evm) -> Iterator[AnvilNode]:
    """The session node, with anything left pending mined after each test."""
    yield evm.node
    if evm.node.running and evm.node.mempool():
        evm.node.mine()


@pytest.fixture
def rpc(node: AnvilNode) -> Iterator[EthRpc]:
    with EthRpc(node.url) as client:
        yield client


@pytest.fixture
def proxy(node: AnvilNode) -> Iterator[RpcProxy]:
    """A misbehaving-on-request proxy in front of the session node."""
    server = RpcProxy(node.url).start()
    try:
        yield server
    finally:
        server.stop()
