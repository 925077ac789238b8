"""Shared pieces of the rentals tests (no tests here): the moment orders are
placed, running on_commit callbacks as a commit would, the periodic jobs,
recording a payment, and SSH keys generated in the test run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from django.core.management import call_command
from django.test import TestCase

from billing import services as billing
from rentals import services

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
MONTH = timedelta(hours=720)


def new_key_line() -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    return key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def committed():
    """Run on_commit callbacks (billing's signals) as a real commit would."""
    return TestCase.captureOnCommitCallbacks(execute=True)


def run_jobs_twice(now) -> list[int]:
    """Each periodic job twice; returns what the second round changed (all zero)."""
    jobs = (
        services.orders_reconcile,
        services.rentals_renewals_issue,
        services.rentals_suspend_due,
        services.rentals_terminate_due,
        billing.invoices_advance_due,
    )
    for _ in range(2):
        with committed():
            second = [job(now=now) for job in jobs]
    return second


def pay(invoice_number: str, amount: int, confirmations: int = 6, txid: str = "tx-order"):
    with committed():
        call_command(
            "record_payment",
            invoice_number,
            "--txid",
            txid,
            "--amount",
            str(amount),
            "--confirmations",
            str(confirmations),
            "--reason",
            "verified on the node by hand",
        )
