"""The chain contract (tests/chains/contract.py) on the loopback Solana node."""

from __future__ import annotations

from typing import Any

import pytest

from tests.chains.contract import *  # noqa: F403 - the contract's tests, run here
from tests.chains.contract import Family


@pytest.fixture
def family(sol: Any, settings: Any) -> Family:
    def list_each_reference() -> None:
        settings.SOL_SCAN_REFERENCES = True  # past its window a reference is found by the recipient's listing

    return Family(
        name="solana",
        invoice=sol.invoice,
        pay=lambda invoice, amount: sol.pay(invoice, amount),
        final=sol.ledger.finalize,
        scan=sol.scan,
        before_late=list_each_reference,
    )
