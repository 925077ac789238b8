"""Fixtures for the Solana tests: a loopback JSON-RPC node (devtools.solana_rpc)
over a LiteSVM ledger, started on a free loopback port for each test.

No Solana validator can be installed from the package registries, so the node
is this server: its transactions are real (signed with solders, executed by
LiteSVM) and its answers have the shapes of a real cluster's (see
test_loopback_node.py and fixtures/). Nothing here sleeps: the RPC client's
waits are recorded by `Waits` instead of slept.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from solders.keypair import Keypair

from billing.chains.solana.rpc import SolanaRpc
from devtools.solana_rpc import LAMPORTS_PER_SOL, SolanaLedger, SolanaRpcServer
from tests.chains.solana.support import Waits


@pytest.fixture(scope="session")
def sol_http() -> Iterator[httpx.Client]:
    """One HTTP client for the raw requests of the tests (a client is slow to make)."""
    with httpx.Client() as client:
        yield client


@pytest.fixture
def sol_ledger() -> SolanaLedger:
    return SolanaLedger()


@pytest.fixture
def sol_node(sol_ledger: SolanaLedger) -> Iterator[SolanaRpcServer]:
    server = SolanaRpcServer(sol_ledger).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def waits() -> Waits:
    return Waits()


@pytest.fixture
def sol_rpc(sol_node: SolanaRpcServer, waits: Waits) -> Iterator[SolanaRpc]:
    rpc = SolanaRpc(sol_node.url, sleep=waits)
    try:
        yield rpc
    finally:
        rpc.close()


@pytest.fixture
def merchant(sol_ledger: SolanaLedger) -> Keypair:
    """The recipient: an existing wallet with 1 SOL (so small transfers to it are rent-exempt)."""
    return sol_ledger.keypair_funded(LAMPORTS_PER_SOL)


@pytest.fixture
def payer(sol_ledger: SolanaLedger) -> Keypair:
    """A customer's wallet with 100 SOL."""
    return sol_ledger.keypair_funded(100 * LAMPORTS_PER_SOL)
