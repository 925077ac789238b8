"""Payments that leave the chain, on a regtest network of this module's own: a reorg
(`pop_blocks`, then other blocks) removing a confirmed payment, and a pool transaction
that vanishes. Rewriting the chain leaves monerod 0.18 answering the payer wallet's
ring selection badly for a while, so these tests do not share the session's network."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from billing.models import InvoiceException, InvoiceStatus, PaymentStatus
from devtools.monero import MoneroRegtest
from tests.chains.monero.harness import LOOKAHEAD, WatchedMonero, monero_configure

pytestmark = [pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db]

NEW, PROCESSING = InvoiceStatus.NEW, InvoiceStatus.PROCESSING
NONE = InvoiceException.NONE


@pytest.fixture(scope="module")
def rewritten_net() -> Iterator[MoneroRegtest]:
    net = MoneroRegtest.start(lookahead=LOOKAHEAD)
    try:
        yield net
    finally:
        net.stop()


@pytest.fixture
def xmr(settings, rewritten_net, customer) -> WatchedMonero:
    monero_configure(settings, rewritten_net)
    return WatchedMonero(rewritten_net, customer)


def test_a_reorg_removes_a_confirmed_payment(xmr):
    invoice = xmr.invoice()
    txid = xmr.pay(invoice, mine=True)
    xmr.scan()
    [payment] = xmr.payments(invoice)
    assert (payment.txid, payment.confirmations, xmr.status(invoice)) == (txid, 1, (PROCESSING, NONE))
    xmr.net.reorg(1)  # the block is replaced by others; the transaction is dropped
    report = xmr.scan()
    assert report.uncounted == 1
    payment.refresh_from_db()
    assert payment.status == PaymentStatus.REMOVED and "reorg" in payment.removal_reason
    assert xmr.status(invoice) == (NEW, NONE)
    assert xmr.scan().uncounted == 0


def test_a_pool_transaction_that_vanishes_is_uncounted(xmr):
    invoice = xmr.invoice()
    xmr.pay(invoice)
    assert xmr.scan().unconfirmed == 1
    assert xmr.status(invoice) == (PROCESSING, NONE)
    xmr.net.pool_flush()  # a double spend won, or the pool forgot it
    assert xmr.scan().uncounted == 1
    [payment] = xmr.payments(invoice)
    assert payment.status == PaymentStatus.REMOVED and "pool" in payment.removal_reason
    assert xmr.status(invoice) == (NEW, NONE)
