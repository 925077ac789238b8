"""The watched sets at scale, on PostgreSQL: more destinations than a statement
takes parameters (65,535). Reading the watched set, the payments recorded to it,
and which of a node's keys or txids are known each stay one statement with a
handful of parameters, and a payment among them is still found."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing import services
from billing.chains.interface import ScanReport
from billing.chains.machinery import ScanRun
from billing.chains.watchers import watcher_for
from billing.models import Payment, PaymentStatus
from billing.selectors import known_match_keys, txids_recorded_final, watched_match_keys
from tests.chains.harness import xmr_destinations_bulk_create

pytestmark = [pytest.mark.chain, pytest.mark.django_db]

MANY = 70_000  # past PostgreSQL's 65,535 parameters per statement
FIRST = 1_000  # subaddress indices of the extra destinations: (0, 1000) on


@pytest.fixture
def many_xmr(chains, customer):
    """One XMR invoice with MANY + 1 watched destinations: its quote, and MANY
    earlier quotes (inactive requests), each a subaddress of its own."""
    invoice = services.invoice_create(
        account=customer,
        payable=("test", 0),
        description="Chain test",
        lines=[services.LineSpec("GPU time", Decimal(1), Decimal("35.00"), Decimal("35.00"))],
        currency="XMR",
    )
    assert invoice.active_request.derivation_index < FIRST
    xmr_destinations_bulk_create(invoice, first=FIRST, count=MANY)
    return invoice


def _pay(match_key: str, amount: int, txid: str, *, confirmations: int) -> Payment:
    payment = services.payment_observe(
        observation=services.Observation(
            currency="XMR",
            txid=txid,
            output_index=int(match_key.split("/")[1]),
            position=match_key,
            match_key=match_key,
            amount=amount,
            confirmations=confirmations,
            block_height=100 if confirmations else None,
        )
    )
    assert payment is not None
    return payment


def test_more_watched_destinations_than_a_statement_takes_parameters(many_xmr):
    watched = watched_match_keys(currencies=["XMR"])
    assert len(watched) == MANY + 1
    assert {"0/1000", f"0/{FIRST + MANY - 1}", many_xmr.active_request.match_key} <= watched

    # A payment to one of them, deep in the set, is among the payments recorded to it.
    key = f"0/{FIRST + MANY // 2}"
    amount = int(many_xmr.active_request.amount_due)
    pending = _pay(key, amount // 3, "aa" * 32, confirmations=0)
    settled = _pay(key, amount, "bb" * 32, confirmations=20)
    run = ScanRun(watcher_for(currency="XMR"), report=ScanReport(currency="XMR", chain="monero"), max_blocks=1)
    with CaptureQueriesContext(connection) as queries:
        counted = run.counted()
    assert sorted((c.txid, c.position, c.confirmed) for c in counted) == [
        (pending.txid, key, False),
        (settled.txid, key, True),
    ]
    assert len(queries) == 1 and "match_key" not in queries[0]["sql"]  # a subquery on the criterion

    # What a node hands back (every key of the transactions it listed): any number, one parameter.
    asked = [f"0/{index}" for index in range(FIRST + MANY + 1_000)]
    with CaptureQueriesContext(connection) as queries:
        known = known_match_keys(currency="XMR", keys=asked)
    assert known == watched
    assert len(queries) == 1 and "ANY(" in queries[0]["sql"]

    txids = [f"{n:064x}" for n in range(MANY)] + [pending.txid, settled.txid]
    assert txids_recorded_final(chain="monero", txids=txids) == {settled.txid}
    pending.refresh_from_db()
    assert pending.status == PaymentStatus.PENDING
