"""Fixtures for the Monero tests: one regtest network per session (per xdist
worker): monerod, a mined payer wallet and the merchant's view-only wallet,
whose address and view key are generated for the run.

Every test here is marked `chain` and `slow`. They are never skipped: without
monerod the session fixture fails and says to run tests/ensure-chain-nodes.sh.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

import pytest

from devtools.monero import MoneroRegtest, NodeNotInstalled

# The session wallet recognises subaddresses up to here without creating them (a
# payment to (0, 50000) is among the cases).
LOOKAHEAD = 51_200
RATE_USD = 200  # XMR in USD: $35 is 0.175 XMR
# Every test takes its own subaddress indices: the database rolls back between
# tests but the session wallet remembers every transfer.
_indices = itertools.count(1, 20)


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


@dataclass
class WatchedMonero:
    """XMR enabled against the session's network, for tests through the billing engine."""

    net: MoneroRegtest
    customer: object

    def invoice(self, total: str = "35.00", *, now=None):
        from billing import services

        amount = Decimal(total)
        return services.invoice_create(
            account=self.customer,
            subject="test:chain",
            description="Chain test",
            lines=[services.LineSpec("GPU time", Decimal(1), amount, amount)],
            currency="XMR",
            now=now,
        )

    @staticmethod
    def due(invoice) -> int:
        return int(invoice.active_request.amount_due)

    @staticmethod
    def address(invoice) -> str:
        return invoice.active_request.address

    def pay(self, invoice, amount: int | None = None, *, mine: bool = False, unlock_time: int = 0) -> str:
        amount = self.due(invoice) if amount is None else amount
        return self.net.pay([(self.address(invoice), amount)], mine=mine, unlock_time=unlock_time)

    def scan(self, **kwargs):
        from billing.chains.watchers import chain_scan

        kwargs.setdefault("force", True)
        report = chain_scan(currency="XMR", **kwargs)
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

        return ChainState.objects.get(chain="monero")


def monero_configure(settings, net: MoneroRegtest, *, wallet_url: str | None = None) -> None:
    """Point XMR at the session's view-only wallet; its subaddress sequence at fresh indices."""
    from billing.chains.config import derivation_keyset
    from billing.models import DerivationCounter

    settings.XMR_ADDRESS = net.address
    settings.XMR_VIEW_KEY = net.view_key
    settings.XMR_WALLET_RPC_URL = wallet_url or net.wallet_url
    settings.XMR_DAEMON_URL = net.daemon_url
    settings.XMR_SUBADDRESS_LOOKAHEAD = LOOKAHEAD
    settings.CONFIRMATIONS = {**settings.CONFIRMATIONS, "XMR": 3}
    settings.MANUAL_RATES_USD = f"XMR={RATE_USD}"
    DerivationCounter.objects.update_or_create(
        keyset=derivation_keyset(currency="XMR"), defaults={"next_index": next(_indices)}
    )


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
