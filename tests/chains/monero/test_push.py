"""Push on a real monerod: its ZMQ publisher announces each block joining the main
chain, and the listener queues the watcher's scan task at once (the test settings
run Celery tasks eagerly, here), so a payment is found and settled with no poll and
no scan called by the test.

monerod announces a pool transaction (`json-minimal-txpool_add`) once it is
broadcast to peers; the regtest daemon here is offline, so pool announcements are
not exercised (the watcher's poll and its `pool` reading cover them)."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from billing.chains.watchers import ChainListener, watcher_for
from billing.models import InvoiceException, InvoiceStatus

pytestmark = [pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db]


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
