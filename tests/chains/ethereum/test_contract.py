"""The chain contract (tests/chains/contract.py) on anvil: in ether, and in a token."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chains.contract import *  # noqa: F403 - the contract's tests, run here
from tests.chains.contract import Family


@pytest.fixture(params=["ETH", "USDT"])
def family(request: Any, eth: Any, settings: Any) -> Family:
    currency = request.param
    return Family(
        name=f"ethereum-{currency}",
        invoice=lambda total="35.00", now=None: eth.invoice(currency, total, now=now),
        pay=lambda invoice, amount: eth.pay(invoice, amount, mine=False),
        final=lambda: eth.node.mine(settings.CONFIRMATIONS[currency]),
        scan=eth.scan,
    )
