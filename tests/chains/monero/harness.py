"""Helpers of the Monero tests: XMR pointed at a regtest network, and what tests do with it."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from decimal import Decimal

from devtools.monero import MoneroRegtest

# The session wallet has Monero's default lookahead: the watcher creates subaddresses
# ahead of the invoices, as in production (a larger one makes every payment to a new
# highest index cost the wallet a pass over it).
LOOKAHEAD = 200
RATE_USD = 200  # XMR in USD: $35 is 0.175 XMR
# Every test takes its own subaddress indices: the database rolls back between
# tests but the session wallet remembers every transfer.
_indices = itertools.count(1, 20)


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
            payable=("test", 0),
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
