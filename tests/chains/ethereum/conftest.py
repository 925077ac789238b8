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


def watch_only_xpub() -> str:
    """A fresh Ethereum account xpub (m/44'/60'/0'); its mnemonic is dropped at once."""
    from bip_utils import Bip39MnemonicGenerator, Bip39SeedGenerator, Bip44, Bip44Coins

    seed = Bip39SeedGenerator(Bip39MnemonicGenerator().FromWordsNumber(12)).Generate()
    return Bip44.FromSeed(seed, Bip44Coins.ETHEREUM).Purpose().Coin().Account(0).PublicKey().ToExtended()


@dataclass
class WatchedEthereum:
    """ETH, USDT and USDC enabled against the session's anvil, for tests through the billing engine."""

    evm: Evm
    customer: object

    @property
    def node(self) -> AnvilNode:
        return self.evm.node

    def invoice(self, currency: str = "ETH", total: str = "35.00", *, now=None):
        from decimal import Decimal

        from billing import services

        amount = Decimal(total)
        return services.invoice_create(
            account=self.customer,
            payable=("test", 0),
            description="Chain test",
            lines=[services.LineSpec("GPU time", Decimal(1), amount, amount)],
            currency=currency,
            now=now,
        )

    @staticmethod
    def due(invoice) -> int:
        return int(invoice.active_request.amount_due)

    @staticmethod
    def address(invoice) -> str:
        return invoice.active_request.address

    def token(self, currency: str) -> str:
        return {"USDT": self.evm.usdt, "USDC": self.evm.usdc}[currency]

    def pay(self, invoice, amount: int | None = None, *, mine: bool = True) -> str:
        """Pay the invoice in its currency from an account (a plain transaction or a token transfer)."""
        request = invoice.active_request
        amount = int(request.amount_due) if amount is None else amount
        if request.currency == "ETH":
            txid = self.node.send_eth(request.address, amount)
        else:
            txid = self.node.token_transfer(self.token(request.currency), request.address, amount)
        if mine:
            self.node.mine()
        return txid

    def pay_through_contract(self, invoice, amount: int | None = None, *, mine: bool = True) -> str:
        from web3 import Web3

        amount = self.due(invoice) if amount is None else amount
        txid = self.node.transact(
            self.evm.forwarder, "forward", Web3.to_checksum_address(self.address(invoice)), value=amount
        )
        if mine:
            self.node.mine()
        return txid

    def scan(self, **kwargs):
        from billing.chains.watchers import chain_scan

        kwargs.setdefault("force", True)
        report = chain_scan(currency="ETH", **kwargs)
        assert not report.error, report.error
        return report

    @staticmethod
    def reload(invoice):
        from billing.models import Invoice

        return Invoice.objects.get(pk=invoice.pk)

    def status(self, invoice) -> tuple[str, str]:
        fresh = self.reload(invoice)
        return fresh.status, fresh.exception

    @staticmethod
    def payments(invoice) -> list:
        from billing.models import Payment

        return list(Payment.objects.filter(invoice=invoice).order_by("id"))

    @staticmethod
    def state():
        from billing.models import ChainState

        return ChainState.objects.get(chain="ethereum")


def ethereum_configure(settings, evm: Evm, *, url: str | None = None) -> None:
    """Point ETH, USDT and USDC at the session's anvil with a fresh watch-only account."""
    settings.ETH_XPUB = watch_only_xpub()
    settings.ETH_CHAIN_ID = evm.node.chain_id
    settings.ETH_RPC_URL = url or evm.node.url
    settings.USDT_CONTRACT = evm.usdt
    settings.USDC_CONTRACT = evm.usdc
    settings.ETH_FINALITY = "confirmations"
    settings.ETH_INTERNAL_TRANSFERS = "trace_block"
    settings.CONFIRMATIONS = {**settings.CONFIRMATIONS, "ETH": 3, "USDT": 3, "USDC": 3}
    settings.MANUAL_RATES_USD = "ETH=3500,USDT=1,USDC=1"


@pytest.fixture
def eth(settings, evm, node, customer) -> Iterator[WatchedEthereum]:
    """ETH, USDT and USDC watched on the session's anvil (fresh account, cursor at the tip,
    trace_block mode, 3 confirmations)."""
    from billing.chains.watchers import watcher_for

    ethereum_configure(settings, evm)
    watcher = watcher_for(currency="ETH")
    watcher.process_state_clear()
    watcher.cursor_set(height=node.height())
    yield WatchedEthereum(evm, customer)
    watcher.process_state_clear()


@pytest.fixture
def readiness_checks():
    """Readiness checks registered by a test are dropped after it."""
    from core import health

    before = dict(health._checks)
    yield
    health._checks.clear()
    health._checks.update(before)
