"""The watched destinations a process keeps between runs (ScanRun.watched_kept), as the LTC watcher uses them: read in full once in a while, and in
between only the destinations issued since (by primary key), so that a run's
database work does not grow with the open invoices; an id skipped because its
insert had not committed yet is read once it has."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.chains import machinery
from billing.chains.utxo import watcher as utxo_watcher
from billing.models import InvoiceStatus

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def full_reads(queries: CaptureQueriesContext) -> int:
    """Reads of the whole watched set (its criterion: the invoices' monitoring window,
    in the WHERE clause; a payment's own read lists the column among the invoice's)."""
    return sum(
        '"billing_invoice"."monitoring_until" >=' in q["sql"] and "match_key" in q["sql"]
        for q in queries.captured_queries
    )


def test_a_run_reads_only_the_destinations_issued_since_the_last(ltc, node):
    ltc.invoice()
    with CaptureQueriesContext(connection) as queries:
        ltc.scan()
    assert full_reads(queries) == 1

    with CaptureQueriesContext(connection) as queries:
        ltc.scan()
    assert full_reads(queries) == 0

    invoice = ltc.invoice()  # issued after the set was read: found by its id
    ltc.pay(invoice)
    with CaptureQueriesContext(connection) as queries:
        assert ltc.scan().unconfirmed == 1
    assert full_reads(queries) == 0
    assert ltc.reload(invoice).status == InvoiceStatus.PROCESSING

    node.mine(1)
    assert ltc.scan().blocks == 1
    [payment] = ltc.payments(invoice)
    assert payment.confirmations == 1


def test_the_set_is_read_in_full_again_after_the_reload_interval(ltc):
    ltc.invoice()
    ltc.scan()
    read = machinery._watched["litecoin", "LTC"]
    machinery._watched["litecoin", "LTC"] = replace(read, loaded_at=read.loaded_at - machinery.WATCHED_RELOAD_SECONDS)
    with CaptureQueriesContext(connection) as queries:
        ltc.scan()
    assert full_reads(queries) == 1


def test_an_id_not_committed_when_read_is_read_later(ltc):
    early, late = ltc.invoice(), ltc.invoice()
    early_id, late_id = early.active_request.pk, late.active_request.pk
    assert early_id < late_id
    # As if `early`'s insert had not committed when the set was read: its id is a gap.
    keys = utxo_watcher.watched_scripts(currency="LTC") - {early.active_request.match_key}
    clock = time.monotonic()
    seen = machinery.WatchedSet(keys, late_id, {early_id: clock}, clock)
    updated = machinery._watched_update(seen, "LTC")
    assert early.active_request.match_key in updated.keys and not updated.gaps

    # A gap older than GAP_SECONDS (a rolled-back insert) is no longer asked for.
    stale = machinery.WatchedSet(keys, late_id, {early_id: clock - machinery.GAP_SECONDS - 1}, clock)
    assert machinery._watched_update(stale, "LTC").keys == keys

    # Ids above the newest read that are not there (yet) become gaps; another currency's are none.
    behind = machinery.WatchedSet(keys, early_id - 1, {}, clock)
    updated = machinery._watched_update(behind, "LTC")
    assert updated.newest == late_id and not updated.gaps
    assert {early.active_request.match_key, late.active_request.match_key} <= updated.keys


def test_ids_that_jumped_far_ahead_are_gaps_only_within_the_window(ltc):
    """Ids far above the newest read (a sequence moved on; many inserts rolled back)
    are asked for again only within GAP_WINDOW below the newest, as a full read
    does: one gap each made a run's query of more parameters than PostgreSQL takes,
    and every run failed until the next full read."""
    from billing.models import PaymentRequest

    invoice = ltc.invoice()
    newest = invoice.active_request.pk
    far, clock = newest - 100_000, time.monotonic()
    updated = machinery._watched_update(machinery.WatchedSet(frozenset(), far, {far: clock}, clock), "LTC")
    assert updated.newest == newest and invoice.active_request.match_key in updated.keys
    present = set(PaymentRequest.objects.values_list("id", flat=True))
    window = range(newest - machinery.GAP_WINDOW + 1, newest)
    assert sorted(updated.gaps) == [i for i in window if i not in present]  # the old gap at `far` dropped
    machinery._watched_update(updated, "LTC")  # the next run asks for them, in one query


def test_a_destination_issued_during_a_long_run_is_matched_in_its_later_steps(ltc, node, monkeypatch):
    """A catch-up run reads its blocks in steps, minutes apart: an invoice issued
    after the first step and paid in a block a later step reads is seen (the
    scripts were read once per run, and the payment was missed for good)."""
    from billing.chains.utxo import watcher as module

    ltc.invoice()
    ltc.scan()
    node.mine(2)  # the run's first step reads these
    monkeypatch.setattr(module.UtxoWatcher, "step_blocks", 1)
    real = module.chain_advance
    issued: list = []

    def advance(*args, **kwargs):
        step = real(*args, **kwargs)
        if not issued:  # between the first step and the next: an invoice issued, paid and mined
            issued.append(ltc.invoice())
            ltc.pay(issued[0])
            node.mine(1)
        return step

    monkeypatch.setattr(module, "chain_advance", advance)
    report = ltc.scan()
    assert report.blocks == 3
    [payment] = ltc.payments(issued[0])
    assert payment.confirmations == 1
