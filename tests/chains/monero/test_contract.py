"""The chain contract (tests/chains/contract.py) on monerod in regtest, through a view-only wallet."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chains.contract import *  # noqa: F403 - the contract's tests, run here
from tests.chains.contract import Family


@pytest.fixture
def family(xmr: Any, settings: Any) -> Family:
    return Family(
        name="monero",
        invoice=xmr.invoice,
        pay=lambda invoice, amount: xmr.pay(invoice, amount),
        final=lambda: xmr.net.mine(settings.CONFIRMATIONS["XMR"] + 1),
        scan=xmr.scan,
    )
