"""BTC through the same node, and what a blind watcher does: a stopped node is
reported (readiness, currencies, admin), runs back off, nothing expires."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from billing import services
from billing.chains import watchers
from billing.chains.utxo.watcher import bitcoin_chain_scan
from billing.models import ChainState, InvoiceStatus, PaymentStatus
from billing.selectors import chain_health
from core import health
from devtools.litecoind import regtest_node_start
from tests.chains.harness import chain_configure

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


def test_btc_destinations_are_matched_by_script_on_the_same_node(btc, node):
    invoice = btc.invoice("95.00")
    request = invoice.active_request
    assert request.address.startswith("bcrt1q") and request.network == "bitcoin-regtest"
    assert btc.due(invoice) == 100_000  # satoshi
    txid = btc.pay(invoice)
    report = btc.scan()
    assert (report.chain, report.unconfirmed) == ("bitcoin", 1)
    assert btc.reload(invoice).status == InvoiceStatus.PROCESSING
    node.mine(2)  # BTC's policy: 2 confirmations
    btc.scan()
    assert btc.reload(invoice).status == InvoiceStatus.SETTLED
    [payment] = btc.payments(invoice)
    assert (payment.chain, payment.currency, payment.txid) == ("bitcoin", "BTC", txid)
    assert (payment.status, payment.confirmations) == (PaymentStatus.CONFIRMED, 2)
    # The LTC watcher, not configured here, has no state; BTC's has its own cursor.
    assert list(ChainState.objects.values_list("chain", flat=True)) == ["bitcoin"]


def test_a_node_on_another_network_is_refused(ltc, settings):
    settings.LTC_NETWORK = "mainnet"
    settings.LTC_XPUB = ""  # mainnet needs a mainnet key: the scan runs without one here
    report = bitcoin_chain_scan(currency="LTC", force=True)
    assert report.error.startswith("wrong_node: the node at http://127.0.0.1:")
    assert "follows 'regtest', but LTC_NETWORK is mainnet" in report.error
    assert ltc.state().consecutive_failures == 1


@pytest.fixture
def readiness_checks():
    before = dict(health._checks)
    yield
    health._checks.clear()
    health._checks.update(before)


@pytest.mark.slow
def test_a_stopped_node_is_reported_backs_off_and_expires_nothing(
    settings, customer, django_user_model, readiness_checks
):
    own = regtest_node_start(mine=1)
    try:
        ltc = chain_configure(settings, currency="LTC", node=own, customer=customer)
        invoice = ltc.invoice()
        ltc.scan()
        assert chain_health(chain="litecoin").ok
        own.stop()

        later = timezone.now() + timedelta(minutes=31)  # past the invoice's rate lock
        blind = watchers.chain_scan(currency="LTC", now=later)
        assert blind.error.startswith("unreachable: ")
        state = ltc.state()
        assert (state.consecutive_failures, state.last_error_at) == (1, later)
        assert own.rpc_password not in state.last_error
        assert not chain_health(chain="litecoin", now=later).ok
        # Blind watcher: the invoice is not expired, a payment may be on chain unseen.
        assert services.invoices_advance_due(now=later) == 0
        assert ltc.reload(invoice).status == InvoiceStatus.NEW

        # Back-off: the first retry is immediate, then the wait doubles.
        assert watchers.chain_scan(currency="LTC", now=later + timedelta(seconds=1)).error
        assert ltc.state().consecutive_failures == 2
        skipped = watchers.chain_scan(currency="LTC", now=later + timedelta(seconds=4))
        assert skipped.skipped == "backoff" and ltc.state().consecutive_failures == 2
        assert watchers.chain_scan(currency="LTC", now=later + timedelta(seconds=6)).error
        assert ltc.state().consecutive_failures == 3
        assert watchers.chain_scan(currency="LTC", now=later + timedelta(seconds=20)).skipped == "backoff"
        # Operators (scan_chain) force a run whatever the back-off.
        assert watchers.chain_scan(currency="LTC", now=later + timedelta(seconds=20), force=True).error
        assert ltc.state().consecutive_failures == 4

        # The API, /readyz and the admin say so.
        [ltc_row] = Client().get("/api/v1/currencies").json()
        assert ltc_row["code"] == "LTC" and ltc_row["health"]["ok"] is False
        assert ltc_row["health"]["error"].startswith("unreachable: ")
        watchers.readiness_checks_register()
        ready = Client().get("/readyz")
        assert ready.status_code == 200  # a chain is not critical: the API keeps serving
        body = ready.json()
        assert body["status"] == "degraded"
        check = body["checks"]["chain:litecoin"]
        assert (check["ok"], check["currency"], check["consecutive_failures"]) == (False, "LTC", 4)
        staff = django_user_model.objects.create_superuser("operator", "a long staff passphrase")
        admin = Client()
        admin.force_login(staff)
        page = admin.get("/admin/billing/chainstate/").content.decode()
        assert "litecoin" in page and "icon-no.svg" in page
        detail = admin.get("/admin/billing/chainstate/litecoin/change/").content.decode()
        assert "unreachable" in detail
    finally:
        own.stop()


def test_readiness_reports_a_healthy_watcher(ltc, readiness_checks):
    ltc.scan()
    watchers.readiness_checks_register()
    check = Client().get("/readyz").json()["checks"]["chain:litecoin"]
    assert (check["ok"], check["blocks_behind"], check["consecutive_failures"]) == (True, 0, 0)


def test_beat_schedules_a_scan_for_each_watched_chain(monkeypatch):
    import importlib

    import config.settings as base

    monkeypatch.setenv("LTC_XPUB", "vpub-placeholder")
    monkeypatch.setenv("LTC_RPC_URL", "http://u:p@127.0.0.1:1")
    monkeypatch.setenv("CHAIN_SCAN_SECONDS", "7")
    monkeypatch.delenv("BTC_XPUB", raising=False)
    try:
        fresh = importlib.reload(base)
        entry = fresh.CELERY_BEAT_SCHEDULE["billing.chain_scan.LTC"]
        assert entry == {"task": "billing.chain_scan", "schedule": 7.0, "args": ("LTC",), "options": {"expires": 7.0}}
        assert "billing.chain_scan.BTC" not in fresh.CELERY_BEAT_SCHEDULE
    finally:
        monkeypatch.undo()
        importlib.reload(base)


class NodeReplies:
    """What a node answers to the identity calls (getblockchaininfo, getnetworkinfo)."""

    endpoint = "http://10.0.0.5:8332"

    def __init__(self, chain: str, agent: str):
        self.replies = [{"chain": chain}, {"subversion": agent}]

    def batch(self, calls):
        assert [method for method, _ in calls] == ["getblockchaininfo", "getnetworkinfo"]
        return self.replies


@pytest.mark.parametrize(
    ("currency", "network", "chain", "agent", "refused"),
    [
        ("BTC", "mainnet", "main", "/Satoshi:27.0.0/", ""),
        ("BTC", "mainnet", "main", "/Satoshi:27.1.0/Knots:20240801/", ""),
        ("BTC", "mainnet", "main", "/LitecoinCore:0.21.2.1/", "not a bitcoin node"),
        ("LTC", "testnet", "test", "/Satoshi:27.0.0/", "not a litecoin node"),
        ("LTC", "mainnet", "main", "/LitecoinCore:0.21.2.1/", ""),
        ("LTC", "mainnet", "test", "/LitecoinCore:0.21.2.1/", "follows 'test', but LTC_NETWORK is mainnet"),
        ("BTC", "testnet", "signet", "/Satoshi:27.0.0/", ""),
        ("BTC", "regtest", "regtest", "/LitecoinCore:0.21.2.1/", ""),  # the test harness's arrangement
    ],
)
def test_the_node_must_follow_the_configured_network_and_coin(settings, currency, network, chain, agent, refused):
    from billing.chains.utxo import watcher as bitcoin

    setattr(settings, f"{currency}_NETWORK", network)
    bitcoin.process_state_clear()
    check = lambda: bitcoin._node_check(bitcoin.FAMILIES[currency], NodeReplies(chain, agent))  # noqa: E731
    if refused:
        with pytest.raises(bitcoin.NodeMismatch, match=refused) as exc:
            check()
        assert exc.value.reason == "wrong_node"
    else:
        check()
