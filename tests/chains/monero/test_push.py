"""Push on a real monerod: its ZMQ publisher announces each block joining the main
chain, and the listener queues the watcher's scan task at once (the test settings
run Celery tasks eagerly, here), so a payment is found and settled with no poll and
no scan called by the test.

monerod announces a pool transaction (`json-minimal-txpool_add`) once it is
broadcast to peers; the regtest daemon here is offline and never does. The pool is
pushed by the wallet instead: monero-wallet-rpc's `--tx-notify` runs
billing/chains/monero/notify.py when its refresh finds an incoming transaction,
which puts the scan task on the Celery broker; the test takes it from there as a
worker would."""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path

import pytest
import redis
from django.core.management import CommandError, call_command

from billing.chains.watchers import ChainListener, watcher_for
from billing.models import InvoiceException, InvoiceStatus
from tests.chains.monero.harness import LOOKAHEAD

pytestmark = [pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db]

NOTIFY = Path(__file__).resolve().parents[3] / "billing" / "chains" / "monero" / "notify.py"
QUEUE = "celery"  # Celery's default queue: a list of that name on the Redis broker


def _subscribed(listener: ChainListener, net) -> None:
    """ZMQ's PUB drops what it sends before a new subscriber's subscription reaches it:
    mine until a block's announcement comes through (each one queues a scan too)."""
    for _ in range(30):
        net.mine(1)
        if listener.run(max_scans=1, timeout=2.0):
            return
    pytest.fail("monerod's ZMQ publisher never announced a block")


def test_a_payment_is_found_and_settled_by_pushed_blocks(xmr, settings):
    settings.XMR_ZMQ_URL = xmr.net.zmq_url
    invoice = xmr.invoice()
    with ChainListener(watcher_for(currency="XMR"), debounce=0.0) as listener:
        assert listener.topics == ("json-minimal-chain_main", "json-minimal-txpool_add")
        _subscribed(listener, xmr.net)
        assert xmr.payments(invoice) == []

        txid = xmr.pay(invoice, mine=True)  # in a block: monerod publishes json-minimal-chain_main
        messages, scans = listener.messages, listener.scans
        while not xmr.payments(invoice):
            assert listener.run(max_scans=1, timeout=60.0) == 1, "no block announced"
        assert (listener.messages > messages, listener.scans > scans) == (True, True)
        assert xmr.status(invoice) == (InvoiceStatus.PROCESSING, InvoiceException.NONE)
        [payment] = xmr.payments(invoice)
        assert (payment.txid, payment.confirmations) == (txid, 1)

        xmr.net.mine(2)  # the payment's 3rd confirmation, announced
        while xmr.status(invoice)[0] != InvoiceStatus.SETTLED:
            assert listener.run(max_scans=1, timeout=60.0) == 1, "no block announced"
        payment.refresh_from_db()
        assert (payment.confirmations, payment.status) == (3, "confirmed")


def test_listen_chain_refuses_a_chain_without_a_publisher(xmr, settings):
    settings.XMR_ZMQ_URL = ""
    with pytest.raises(CommandError, match="no_push_source"):
        call_command("listen_chain", "XMR")


def _task_taken(broker: redis.Redis, timeout: float) -> tuple[str, list]:
    """What a worker would take from the broker: the task's name and its arguments."""
    give_up = time.monotonic() + timeout
    while (popped := broker.lpop(QUEUE)) is None:
        assert time.monotonic() < give_up, "nothing was queued"
        time.sleep(0.05)
    assert isinstance(popped, bytes | str)
    message = json.loads(popped)
    args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    return message["headers"]["task"], args


def test_a_pool_payment_is_found_through_the_wallets_tx_notify(xmr, settings, tmp_path):
    """The periodic poll is off (nothing runs it here): the wallet's own refresh sees the
    payment in the pool, its --tx-notify queues the scan, and that scan records it."""
    from billing.tasks import chain_scan as chain_scan_task

    broker_url = str(settings.CELERY_BROKER_URL)
    assert broker_url.startswith("redis://"), broker_url
    broker = redis.Redis.from_url(broker_url)
    broker_file = tmp_path / "broker.url"  # the hook runs with an empty environment
    broker_file.write_text(f"{broker_url}\n")
    wallet = xmr.net.view_only_wallet_start(
        lookahead=LOOKAHEAD, tx_notify=f"{sys.executable} {NOTIFY} --broker-file {broker_file} XMR %s"
    )
    try:
        settings.XMR_WALLET_RPC_URL = wallet.url
        settings.XMR_WALLET_REFRESH_SECONDS = 1
        invoice = xmr.invoice()
        xmr.scan()  # grows the new wallet's table to the invoice and sets its refresh period
        broker.delete(QUEUE)

        paid_at = time.monotonic()
        txid = xmr.pay(invoice)  # in the pool, never mined here
        assert txid in xmr.net.pool()
        task, args = _task_taken(broker, timeout=60)
        queued_after = time.monotonic() - paid_at
        assert (task, args) == ("billing.chain_scan", ["XMR"])
        assert queued_after < 30, queued_after

        chain_scan_task(*args)  # the worker runs what was queued
        assert xmr.status(invoice) == (InvoiceStatus.PROCESSING, InvoiceException.NONE)
        [payment] = xmr.payments(invoice)
        assert (payment.txid, payment.confirmations) == (txid, 0)
    finally:
        wallet.stop()
        broker.delete(QUEUE)
