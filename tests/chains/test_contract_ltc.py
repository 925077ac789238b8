"""The chain contract (tests/chains/contract.py) on Litecoin Core in regtest."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chains.contract import *  # noqa: F403 - the contract's tests, run here
from tests.chains.contract import Family


@pytest.fixture
def family(ltc: Any, node: Any, settings: Any) -> Family:
    return Family(
        name="ltc",
        invoice=ltc.invoice,
        pay=ltc.pay,
        final=lambda: node.mine(settings.CONFIRMATIONS["LTC"]),
        scan=ltc.scan,
    )
