"""Push on a real anvil: its JSON-RPC websocket announces each new block
(`eth_subscribe newHeads`), and the listener queues the watcher's scan task at once
(the test settings run Celery tasks eagerly, here), so a payment is found and
settled with no poll and no scan called by the test."""

from __future__ import annotations

import pytest

from billing.chains.watchers import ChainListener, watcher_for
from billing.models import InvoiceException, InvoiceStatus

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def test_a_payment_is_found_and_settled_by_pushed_heads(eth, node, settings):
    settings.ETH_WS_URL = node.url.replace("http://", "ws://", 1)  # anvil serves both on one port
    invoice = eth.invoice()
    with ChainListener(watcher_for(currency="ETH"), debounce=0.0) as listener:
        assert listener.topics == ("newHeads",)  # subscribed: the node answered eth_subscribe
        txid = eth.pay(invoice)  # mined: anvil announces the head
        while not eth.payments(invoice):
            assert listener.run(max_scans=1, timeout=60.0) == 1, "no head announced"
        assert listener.messages >= 1
        assert eth.status(invoice) == (InvoiceStatus.PROCESSING, InvoiceException.NONE)
        [payment] = eth.payments(invoice)
        assert (payment.txid, payment.confirmations) == (txid, 1)

        node.mine(2)  # the 3rd confirmation, announced
        while eth.status(invoice)[0] != InvoiceStatus.SETTLED:
            assert listener.run(max_scans=1, timeout=60.0) == 1, "no head announced"
        payment.refresh_from_db()
        assert (payment.confirmations, payment.status) == (3, "confirmed")
