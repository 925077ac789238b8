"""Push on the real litecoind, over its peer-to-peer port: the Debian node is built
without ZMQ, but every build announces new blocks and pool transactions to its
peers (`billing/chains/utxo/p2p.py`). The listener connects as a peer, and each
announcement queues the watcher's scan task (run eagerly by the test settings), so
a pool payment is found and its block settles it with no poll and no scan called
by the test."""

from __future__ import annotations

import socket
import threading

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError

from billing.chains.utxo import p2p
from billing.chains.watchers import ChainListener, watcher_for
from billing.models import InvoiceStatus

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def test_a_pool_payment_and_its_block_are_announced_over_p2p(ltc, node, settings):
    settings.LTC_P2P_PEER = f"127.0.0.1:{node.p2p_port}"
    settings.CONFIRMATIONS = {**settings.CONFIRMATIONS, "LTC": 1}
    invoice = ltc.invoice()
    with ChainListener(watcher_for(currency="LTC"), debounce=0.0) as listener:
        assert (listener.setting, listener.topics) == ("LTC_P2P_PEER", ("inv",))
        txid = ltc.pay(invoice)  # the node announces it to its peers (no delay: the listener is noban)
        while not ltc.payments(invoice):
            assert listener.run(max_scans=1, timeout=30.0) == 1, "no transaction announced"
        [payment] = ltc.payments(invoice)
        assert (payment.txid, payment.confirmations) == (txid, 0)
        assert ltc.reload(invoice).status == InvoiceStatus.PROCESSING

        node.mine(1)  # announced as an inv of the block
        while ltc.reload(invoice).status != InvoiceStatus.SETTLED:
            assert listener.run(max_scans=1, timeout=30.0) == 1, "no block announced"
        payment.refresh_from_db()
        assert payment.confirmations == 1
        assert listener.messages >= 2


def test_a_zmq_url_is_preferred_and_a_bad_peer_setting_is_refused(ltc, settings):
    watcher = watcher_for(currency="LTC")
    settings.LTC_P2P_PEER = "127.0.0.1:19444"
    source = watcher.push_source()
    assert source is not None and source.url == "p2p://127.0.0.1:19444" and source.feed is not None
    settings.LTC_ZMQ_URL = "tcp://127.0.0.1:28332"
    source = watcher.push_source()
    assert source is not None and (source.url, source.feed, source.setting) == (
        "tcp://127.0.0.1:28332",
        None,
        "LTC_ZMQ_URL",
    )
    settings.LTC_ZMQ_URL = ""
    settings.LTC_P2P_PEER = "127.0.0.1"  # no port
    with pytest.raises(ImproperlyConfigured, match="LTC_P2P_PEER is host:port"):
        watcher.push_source()


def test_the_feed_refuses_a_peer_of_another_network(node):
    """Mainnet's magic bytes against the regtest node: the node drops the peer, and
    the feed says so rather than waiting for ever."""
    feed = p2p.PeerFeed("127.0.0.1", node.p2p_port, p2p.MAGIC[("litecoin", "main")], handshake_timeout=10.0)
    with pytest.raises(OSError):
        feed.open()
    assert not feed.connected  # closed on the way out
    with pytest.raises(p2p.P2PError, match="custom signet"):
        p2p.magic_for("bitcoin", "mysignet")


def test_a_peer_that_sends_garbage_is_an_error_not_a_hang():
    """A server that answers the version message with bytes of another protocol."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n" + bytes(64))

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    feed = p2p.PeerFeed("127.0.0.1", server.getsockname()[1], p2p.MAGIC[("litecoin", "regtest")], handshake_timeout=5)
    with pytest.raises(p2p.P2PError, match="another network"):
        feed.open()
    thread.join(5)
    server.close()


def test_the_wire_format_matches_bitcoin_core():
    """The empty `verack` on regtest, byte for byte: magic, command padded to 12, length 0,
    and the first four bytes of SHA-256d of nothing (5df6e0e2)."""
    assert p2p.message(p2p.MAGIC[("bitcoin", "regtest")], b"verack").hex() == (
        "fabfb5da" + b"verack".hex() + "00" * 6 + "00000000" + "5df6e0e2"
    )
    payload = p2p.version_payload(port=18444, nonce=1)
    assert len(payload) == 4 + 8 + 8 + 26 + 26 + 8 + 1 + len(p2p.USER_AGENT) + 4 + 1
    assert payload[-1:] == b"\x01"  # relay: announce transactions to us (BIP37)


def test_listen_chain_says_what_is_wrong_without_a_traceback(ltc, node, settings):
    """A peer setting that is not host:port, and a port nobody listens on: a one-line
    refusal naming the setting (never the address: a provider's key may ride in it)."""
    settings.LTC_P2P_PEER = "127.0.0.1"
    with pytest.raises(CommandError, match=r"^invalid: LTC_P2P_PEER is host:port"):
        call_command("listen_chain", "LTC")
    with socket.socket() as spare:  # a port that was free a moment ago and is closed now
        spare.bind(("127.0.0.1", 0))
        port = spare.getsockname()[1]
    settings.LTC_P2P_PEER = f"127.0.0.1:{port}"
    with pytest.raises(CommandError, match=r"unreachable: LTC's node at LTC_P2P_PEER .*ConnectionRefusedError") as err:
        call_command("listen_chain", "LTC")
    assert str(port) not in str(err.value)
