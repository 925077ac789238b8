"""Push on the loopback Solana node: its PubSub websocket (the RPC port + 1, as a
validator serves it) announces a transfer to the recipient through
`logsSubscribe` (`mentions`), at `confirmed` and again at `finalized`, and the
listener queues the watcher's scan task at once (the test settings run Celery
tasks eagerly; nothing polls), so a payment is found and settled with no scan
called by the test."""

from __future__ import annotations

import json

import pytest

from billing.chains.solana.watcher import PUSH_SETTING
from billing.chains.watchers import ChainListener, _SubscriptionFeed, watcher_for
from billing.models import InvoiceException, InvoiceStatus
from core.errors import DomainError

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def test_the_listener_subscribes_to_logs_mentioning_the_recipient(sol, settings):
    settings.SOL_WS_URL = ""
    with pytest.raises(DomainError) as refused:
        ChainListener(watcher_for(currency="SOL"))
    assert refused.value.code == "no_push_source"
    settings.SOL_WS_URL = sol.node.ws_url
    listener = ChainListener(watcher_for(currency="SOL"), debounce=0.0)
    assert listener.setting == PUSH_SETTING
    requests = [_SubscriptionFeed.request(n, t) for n, t in enumerate(listener.topics, 1)]
    assert [(r["method"], r["params"]) for r in requests] == [
        ("logsSubscribe", [{"mentions": [sol.recipient]}, {"commitment": "confirmed"}]),
        ("logsSubscribe", [{"mentions": [sol.recipient]}, {"commitment": "finalized"}]),
    ]
    with listener:
        subs = sol.node.pubsub.subscriptions
        assert sorted((s.kind, s.key, s.commitment) for s in subs) == [
            ("logsSubscribe", sol.recipient, "confirmed"),
            ("logsSubscribe", sol.recipient, "finalized"),
        ]
    assert json.loads(json.dumps(requests))  # plain JSON-RPC requests


def test_a_payment_is_found_and_settled_by_pushed_logs(sol, settings):
    settings.SOL_WS_URL = sol.node.ws_url
    invoice = sol.invoice()
    calls_before = sol.node.stats.calls["getSignaturesForAddress"]
    with ChainListener(watcher_for(currency="SOL"), debounce=0.0) as listener:
        signature = sol.pay(invoice)  # confirmed: the node announces it
        assert listener.run(max_scans=1, timeout=30.0) == 1, "no logsNotification"
        assert sol.status(invoice) == (InvoiceStatus.PROCESSING, InvoiceException.NONE)
        [payment] = sol.payments(invoice)
        assert payment.txid == signature
        assert sol.node.stats.calls["getSignaturesForAddress"] > calls_before  # the pushed scan listed the recipient

        sol.ledger.finalize()  # rooted: announced at `finalized`
        while sol.status(invoice)[0] != InvoiceStatus.SETTLED:
            assert listener.run(max_scans=1, timeout=30.0) == 1, "no logsNotification at finalized"
        payment.refresh_from_db()
        assert payment.status == "confirmed"
        assert listener.messages >= 2


def test_a_transfer_to_another_address_is_not_announced(sol, settings):
    settings.SOL_WS_URL = sol.node.ws_url
    other = sol.ledger.keypair_funded(10**9)
    with ChainListener(watcher_for(currency="SOL"), debounce=0.0) as listener:
        sol.ledger.pay(sol.payer, other.pubkey(), 1_000_000)
        sol.ledger.finalize()
        assert listener.run(max_scans=1, timeout=0.5) == 0
        assert listener.messages == 0


def test_listen_chain_refuses_sol_without_its_websocket(sol, settings):
    from django.core.management import call_command
    from django.core.management.base import CommandError

    settings.SOL_WS_URL = ""
    with pytest.raises(CommandError, match="SOL_WS_URL"):
        call_command("listen_chain", "SOL")
