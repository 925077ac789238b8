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
from dataclasses import dataclass

import httpx
import pytest
from solders.keypair import Keypair

from billing.chains.solana.rpc import SolanaRpc
from devtools.solana_rpc import LAMPORTS_PER_SOL, SolanaLedger, SolanaRpcServer
from tests.chains.solana.support import Waits
from tests.keys import TEST_RATES


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


# --- SOL watched through the billing engine (billing.chains.solana.watcher) -------------------------


@dataclass
class WatchedSolana:
    """SOL enabled against a loopback node: invoices, payments with their
    references, scans through the real watcher, and what billing recorded."""

    ledger: SolanaLedger
    node: SolanaRpcServer
    merchant: Keypair
    payer: Keypair
    customer: object
    waits: Waits

    @property
    def recipient(self) -> str:
        return str(self.merchant.pubkey())

    def invoice(self, total: str = "35.00", *, now=None):
        from decimal import Decimal

        from billing import services

        amount = Decimal(total)
        return services.invoice_create(
            account=self.customer,
            payable=("test", 0),
            description="Chain test",
            lines=[services.LineSpec("GPU time", Decimal(1), amount, amount)],
            currency="SOL",
            now=now,
        )

    @staticmethod
    def due(invoice) -> int:
        return int(invoice.active_request.amount_due)

    @staticmethod
    def reference(invoice) -> str:
        return invoice.active_request.reference

    def pay(self, invoice, amount: int | None = None, **kwargs) -> str:
        """A Solana Pay transfer for the invoice, as a wallet makes it (legacy unless `version=0`)."""
        lamports = self.due(invoice) if amount is None else amount
        return self.ledger.pay(
            self.payer, self.merchant.pubkey(), lamports, references=[self.reference(invoice)], **kwargs
        )

    def scan(self, **kwargs):
        from billing.chains.watchers import chain_scan

        kwargs.setdefault("force", True)
        report = chain_scan(currency="SOL", **kwargs)
        assert not report.error and not report.skipped, report.summary()
        return report

    @staticmethod
    def status(invoice) -> tuple[str, str]:
        from billing.models import Invoice

        fresh = Invoice.objects.get(pk=invoice.pk)
        return fresh.status, fresh.exception

    @staticmethod
    def payments(invoice) -> list:
        from billing.models import Payment

        return list(Payment.objects.filter(invoice=invoice).order_by("id"))

    @staticmethod
    def state():
        from billing.models import ChainState

        return ChainState.objects.get(chain="solana")


def solana_configure(settings, *, recipient: str, url: str) -> None:
    """Point SOL at a loopback node (a test validator: `localnet`, its genesis hash not pinned)."""
    settings.SOL_RECIPIENT = recipient
    settings.SOL_RPC_URL = url
    settings.SOL_CLUSTER = "localnet"
    settings.SOL_GENESIS_HASH = ""
    settings.MANUAL_RATES_USD = TEST_RATES  # SOL at $150


@pytest.fixture
def sol(settings, sol_ledger, sol_node, merchant, payer, customer, waits) -> Iterator[WatchedSolana]:
    """SOL watched on a fresh loopback node; the watcher's waits recorded, never slept."""
    from billing.chains.watchers import watcher_for

    solana_configure(settings, recipient=str(merchant.pubkey()), url=sol_node.url)
    watcher = watcher_for(currency="SOL")
    watcher.process_state_clear()
    watcher.sleep = waits
    try:
        yield WatchedSolana(sol_ledger, sol_node, merchant, payer, customer, waits)
    finally:
        del watcher.sleep
        watcher.process_state_clear()


@pytest.fixture
def readiness_checks():
    """Readiness checks registered by a test are dropped after it."""
    from core import health

    before = dict(health._checks)
    yield
    health._checks.clear()
    health._checks.update(before)
