"""Scanning a chain right away from a sandbox command (`sandbox_pay`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from billing.chains.interface import ScanReport
from billing.chains.watchers import chain_scan


@dataclass(frozen=True)
class SandboxPayment:
    """What `sandbox_pay` did to an invoice, whichever sandbox chain paid it."""

    invoice_number: str
    currency: str
    address: str
    amount: int  # base units
    txid: str
    blocks_mined: int
    status: str  # the invoice's, after the scan
    exception: str
    scan: ScanReport


def chain_scan_now(*, currency: str, timeout: float = 60.0) -> ScanReport:
    """Scan `currency`'s chain now. While the worker's own run holds the chain's
    lease (`skipped="busy"`), wait and try again: that run may have begun before
    the payment was mined, so it is no substitute. At most `timeout` seconds;
    then the last report (busy) is returned, and the worker's next run picks the
    payment up."""
    give_up = time.monotonic() + timeout
    report = chain_scan(currency=currency, force=True)
    while report.skipped == "busy" and time.monotonic() < give_up:
        time.sleep(0.2)
        report = chain_scan(currency=currency, force=True)
    return report
