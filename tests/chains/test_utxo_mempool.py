"""The LTC watcher follows the mempool by its changes, on the real regtest node:
a txid is decoded once, even across a worker restart (the seen-set is stored),
and a pass in which nothing changed opens no locked transaction, neither for
the mempool nor for the pending payments (only a payment whose confirmations
change is written)."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from billing.chains.utxo import watcher as utxo_watcher
from billing.chains.utxo.rpc import BitcoinRpc
from billing.models import InvoiceStatus, MempoolSeen, Payment, PaymentStatus

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@contextlib.contextmanager
def node_calls(monkeypatch) -> Iterator[Counter]:
    """Count the node calls (by method; a batch counts each of its calls) made inside."""
    counted: Counter = Counter()
    call, batch = BitcoinRpc.call, BitcoinRpc.batch

    def counting_call(self, method, *params):
        counted[method] += 1
        return call(self, method, *params)

    def counting_batch(self, calls, **kwargs):
        calls = list(calls)
        counted.update(method for method, _ in calls)
        return batch(self, calls, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(BitcoinRpc, "call", counting_call)
        patch.setattr(BitcoinRpc, "batch", counting_batch)
        yield counted


def locks(queries: CaptureQueriesContext, table: str = "") -> int:
    """Statements locking rows (SELECT ... FOR UPDATE) among the captured queries: of
    `table` (read from it, or locked as `FOR UPDATE OF` it beside the table read) or any."""
    return sum(
        "FOR UPDATE" in q["sql"]
        and (q["sql"].startswith(f'SELECT "{table}') or (bool(table) and f'FOR UPDATE OF "{table}"' in q["sql"]))
        for q in queries.captured_queries
    )


def test_a_restarted_worker_does_not_decode_the_mempool_again(ltc, node, monkeypatch):
    # What the node says about its listing (Litecoin Core 0.21: `getrawmempool false true`).
    listing = node.rpc.call("getrawmempool", False, True)
    assert set(listing) == {"txids", "mempool_sequence"} and isinstance(listing["mempool_sequence"], int)

    others = node.send_many_transactions(30)  # mines the block they spend, then sends them
    with node_calls(monkeypatch) as calls:
        first = ltc.scan()
    assert calls["getrawtransaction"] == 30 and (first.blocks, first.unconfirmed) == (1, 0)
    stored = set(MempoolSeen.objects.filter(chain="litecoin").values_list("txid", flat=True))
    assert stored == set(node.mempool()) >= set(others)
    assert ltc.state().extra["mempool_sequence"] == node.rpc.call("getrawmempool", False, True)["mempool_sequence"]

    # A pass with nothing new decodes nothing and opens no transaction.
    with node_calls(monkeypatch) as calls, CaptureQueriesContext(connection) as queries:
        idle = ltc.scan()
    assert calls["getrawtransaction"] == 0 and calls["getrawmempool"] == 1
    assert (idle.unconfirmed, idle.blocks, locks(queries)) == (0, 0, 0)

    # A restart: the process's watchers are gone (a new worker), the stored seen-set is not.
    utxo_watcher.process_state_clear()
    invoice = ltc.invoice()
    with node_calls(monkeypatch) as calls:
        after_restart = ltc.scan()
    assert calls["getrawtransaction"] == 0 and after_restart.unconfirmed == 0

    # A new payment is the only transaction decoded, and is found.
    txid = ltc.pay(invoice)
    with node_calls(monkeypatch) as calls:
        found = ltc.scan()
    assert calls["getrawtransaction"] == 1 and found.unconfirmed == 1
    assert ltc.reload(invoice).status == InvoiceStatus.PROCESSING
    [payment] = ltc.payments(invoice)
    assert (payment.txid, payment.confirmations) == (txid, 0)
    assert MempoolSeen.objects.filter(chain="litecoin", txid=txid).exists()

    # Restarted again, then the payment is mined: recorded from its block, and the
    # seen-set is pruned to the (now empty) mempool.
    utxo_watcher.process_state_clear()
    node.mine(1)
    with node_calls(monkeypatch) as calls:
        mined = ltc.scan()
    assert calls["getrawtransaction"] == 0 and mined.blocks == 1
    payment.refresh_from_db()
    assert payment.confirmations == 1 and payment.block_height == node.height()
    assert not MempoolSeen.objects.filter(chain="litecoin").exists()


def test_a_transaction_that_entered_while_the_worker_was_down_is_decoded_once(ltc, node, monkeypatch):
    invoice = ltc.invoice()
    ltc.scan()
    utxo_watcher.process_state_clear()
    txid = ltc.pay(invoice)  # while no worker runs
    with node_calls(monkeypatch) as calls:
        assert ltc.scan().unconfirmed == 1
    assert calls["getrawtransaction"] == 1
    utxo_watcher.process_state_clear()
    with node_calls(monkeypatch) as calls:
        assert ltc.scan().unconfirmed == 0
    assert calls["getrawtransaction"] == 0
    assert [p.txid for p in ltc.payments(invoice)] == [txid]


def test_pending_payments_are_written_only_when_their_confirmations_change(ltc, node, monkeypatch):
    invoices = [ltc.invoice() for _ in range(5)]
    for invoice in invoices[:3]:
        ltc.pay(invoice)
    node.mine(1)  # three payments at 1 confirmation of LTC's 6
    for invoice in invoices[3:]:
        ltc.pay(invoice)  # two more in the mempool
    ltc.scan()
    pending = Payment.objects.filter(chain="litecoin", status=PaymentStatus.PENDING)
    assert pending.count() == 5 and pending.filter(block_height__isnull=True).count() == 2

    # Nothing changed: five pending payments, no transaction for any of them.
    for _ in range(2):
        with CaptureQueriesContext(connection) as queries:
            report = ltc.scan()
        assert (report.confirmations_updated, report.unconfirmed, report.blocks) == (0, 0, 0)
        assert locks(queries) == 0

    # A block: it mines the two and adds a confirmation to the three; each payment
    # is written once, in the block's transaction or as its confirmations change.
    node.mine(1)
    with CaptureQueriesContext(connection) as queries:
        report = ltc.scan()
    assert (report.blocks, report.recorded, report.confirmations_updated) == (1, 2, 3)
    # An invoice is locked per payment written: the two in the block's transaction
    # (with the state row and the stored block), then one per changed confirmation.
    assert locks(queries, "billing_invoice") == 2 + 3
    assert sorted(pending.values_list("confirmations", flat=True)) == [1, 1, 2, 2, 2]


def test_the_scanner_follows_the_mempool_sequence(node, destinations, monkeypatch):
    from billing.chains.utxo.scanner import MempoolWatcher

    paid = destinations.new()
    node.send_many_transactions(5)
    watcher = MempoolWatcher(node.rpc)
    first = watcher.scan(scripts={paid.script_hex})
    assert first.fetched >= 5 and not first.unchanged and first.sequence is not None
    with node_calls(monkeypatch) as calls:
        idle = watcher.scan(scripts={paid.script_hex})
    assert idle.unchanged and (idle.sequence, idle.fetched) == (first.sequence, 0)
    assert dict(calls) == {"getrawmempool": 1, "getbestblockhash": 1}

    txid = node.send(paid.address, 150_000)
    found = watcher.scan(scripts={paid.script_hex})
    assert not found.unchanged and found.sequence > first.sequence
    assert found.fetched == 1 and [o.txid for o in found.observations] == [txid]

    # What the watcher would store now: everything it decoded, and nothing left the mempool.
    added, dropped = watcher.seen_changes()
    assert added == set(node.mempool()) and not dropped
    watcher.seen_stored()
    assert watcher.seen_changes() == (set(), set())
    # A new watcher handed the stored seen-set decodes nothing; one without it decodes all.
    again = MempoolWatcher(node.rpc)
    again.seen_load(added, sequence=found.sequence)
    assert again.scan(scripts={paid.script_hex}).fetched == 0
    assert MempoolWatcher(node.rpc).scan(scripts={paid.script_hex}).fetched == len(node.mempool())
