"""GET /metrics: who may read it, what it says, and how many queries a scrape costs."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import time_machine
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from accounts.services import ssh_key_add
from billing.models import ChainState, RateSample
from core.models import Lease
from observability import selectors
from observability.views import registry_build
from rentals.models import Rental
from tests.rentals.helpers import T0, new_key_line, pay
from webhooks.models import DeliveryStatus, WebhookDelivery, WebhookEndpoint, WebhookEvent

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "metrics-token-for-tests-0123456789abcdef"

pytestmark = pytest.mark.django_db


def scrape(client=None, token: str | None = TOKEN, **headers) -> dict[tuple[str, tuple], float]:
    client = client or APIClient()
    if token is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    resp = client.get("/metrics", **headers)
    assert resp.status_code == 200, resp.content[:300]
    assert resp["Content-Type"].startswith("text/plain; version=0.0.4")
    return samples(resp.content.decode())


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(found: dict, name: str, **labels) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


@pytest.fixture
def token(settings):
    settings.METRICS_TOKEN = TOKEN
    return TOKEN


def order_body(key_id: int, **overrides) -> dict:
    body = {
        "region": "DFW-1",
        "gpu": "l4",
        "gpu_count": 1,
        "term": "monthly",
        "terms": 1,
        "template": "ollama-ubuntu-24.04",
        "addons": [],
        "ssh_keys": [key_id],
        "pay_currency": "LTC",
    }
    return body | overrides


# --- Who may read it ---------------------------------------------------------------------------


def test_without_a_token_setting_the_endpoint_is_off(settings):
    settings.METRICS_TOKEN = ""
    settings.DEBUG = False
    resp = APIClient().get("/metrics", HTTP_AUTHORIZATION="Bearer anything")
    assert resp.status_code == 404
    assert resp.json()["error"]["code"] == "not_found"


def test_a_local_run_serves_it_to_this_machine_alone(settings):
    settings.METRICS_TOKEN = ""
    settings.DEBUG = True
    assert APIClient().get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 200
    assert APIClient().get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 404


def test_a_scrape_without_the_token_is_refused(token):
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong"}, {"HTTP_AUTHORIZATION": f"Basic {token}"}):
        resp = APIClient().get("/metrics", **headers)
        assert resp.status_code == 401, headers
        assert resp.json()["error"]["code"] == "not_authenticated"
        assert resp["WWW-Authenticate"].startswith("Bearer")
        assert b"gpurenthub_" not in resp.content


def test_the_token_opens_it(token):
    found = scrape()
    assert value(found, "gpurenthub_exporter_database_up") == 1
    assert value(found, "gpurenthub_exporter_broker_up") == 1


def test_a_short_token_stops_the_settings():
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={"DJANGO_SETTINGS_MODULE": "config.settings", "DEBUG": "1", "METRICS_TOKEN": "short", "PATH": "/usr/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "METRICS_TOKEN is at least 32 characters" in result.stderr


# --- What it says ------------------------------------------------------------------------------


def test_requests_orders_invoices_payments_and_provisioning(token, chains, catalog, customer, customer_api):
    before = scrape()
    key = ssh_key_add(account=customer, public_key=new_key_line(), name="k")
    with time_machine.travel(T0, tick=False):
        placed = customer_api.post("/api/v1/orders", order_body(key.pk), format="json")
        assert placed.status_code == 201, placed.json()
        refused = customer_api.post("/api/v1/orders", order_body(key.pk, gpu_count=3), format="json")
        assert refused.status_code == 400
        code = refused.json()["error"]["code"]
    found = scrape()

    assert value(found, "gpurenthub_orders_placed_total") - value(before, "gpurenthub_orders_placed_total") == 1
    assert (
        value(found, "gpurenthub_orders_refused_total", code=code)
        - value(before, "gpurenthub_orders_refused_total", code=code)
        == 1
    )
    requests = {"route": "api/v1/orders", "method": "POST", "status": "201"}
    assert (
        value(found, "gpurenthub_http_requests_total", **requests)
        - value(before, "gpurenthub_http_requests_total", **requests)
        == 1
    )
    latency = {"route": "api/v1/orders", "method": "POST"}
    assert (
        value(found, "gpurenthub_http_request_duration_seconds_count", **latency)
        - value(before, "gpurenthub_http_request_duration_seconds_count", **latency)
        == 2
    )
    assert value(found, "gpurenthub_invoices", status="new") == 1
    assert value(found, "gpurenthub_payments_seen_total", currency="LTC") == 0

    with time_machine.travel(T0 + timedelta(minutes=5), tick=False):
        pay(placed.json()["invoice"]["number"], 277_777_778)
    rental = Rental.objects.get(order_id=placed.json()["id"])
    with time_machine.travel(rental.settled_at + timedelta(seconds=150), tick=False):
        found = scrape()
    assert value(found, "gpurenthub_invoices", status="new") == 0
    assert value(found, "gpurenthub_invoices", status="settled") == 1
    assert value(found, "gpurenthub_payments_seen_total", currency="LTC") == 1
    assert value(found, "gpurenthub_payments", currency="LTC", status="confirmed") == 1
    assert value(found, "gpurenthub_provisioning_waiting") == 1
    assert value(found, "gpurenthub_provisioning_oldest_wait_seconds") == 150


def test_watchers_leases_rates_and_webhooks(token, customer):
    now = timezone.now()
    ChainState.objects.create(
        chain="litecoin", height=90, tip_height=100, last_ok_at=now - timedelta(seconds=40), last_scan_at=now
    )
    ChainState.objects.create(
        chain="bitcoin",
        height=5,
        tip_height=5,
        last_ok_at=now - timedelta(minutes=10),
        last_error="syncing: node is in initial block download at height 5",
        last_error_at=now - timedelta(seconds=5),
        consecutive_failures=3,
    )
    Lease.objects.create(name="chain_scan:litecoin", owner="web-1:4242:0a1b2c3d", expires_at=now + timedelta(minutes=1))
    Lease.objects.create(name="chain_scan:bitcoin", owner="", expires_at=None)
    RateSample.objects.create(
        currency="BTC", source="kraken", usd=Decimal("95000"), observed_at=now - timedelta(seconds=300)
    )
    RateSample.objects.create(
        currency="BTC", source="kraken", usd=Decimal("96000"), observed_at=now - timedelta(seconds=120)
    )
    RateSample.objects.create(
        currency="USDT", source="kraken", usd=Decimal("0.95"), observed_at=now - timedelta(seconds=30)
    )
    endpoint = WebhookEndpoint.objects.create(account=customer, url="https://example.com/h", events=["*"], secret="s")
    for i, status in enumerate([DeliveryStatus.PENDING, DeliveryStatus.PENDING, DeliveryStatus.FAILED]):
        event = WebhookEvent.objects.create(account=customer, type="order.created", data={}, created_at=now)
        WebhookDelivery.objects.create(
            event=event, endpoint=endpoint, status=status, created_at=now - timedelta(seconds=60 * (i + 1))
        )

    with time_machine.travel(now, tick=False):
        found = scrape()

    assert value(found, "gpurenthub_chain_scanned_height", chain="litecoin") == 90
    assert value(found, "gpurenthub_chain_node_height", chain="litecoin") == 100
    assert value(found, "gpurenthub_chain_lag_blocks", chain="litecoin") == 10
    assert value(found, "gpurenthub_chain_last_success_age_seconds", chain="litecoin") == 40
    assert value(found, "gpurenthub_chain_last_success_timestamp_seconds", chain="litecoin") == pytest.approx(
        (now - timedelta(seconds=40)).timestamp()
    )
    assert value(found, "gpurenthub_chain_failing", chain="bitcoin", reason="syncing") == 1
    assert ("gpurenthub_chain_failing", (("chain", "litecoin"), ("reason", ""))) not in found
    assert value(found, "gpurenthub_chain_consecutive_failures", chain="bitcoin") == 3
    assert value(found, "gpurenthub_chain_lease_held", chain="litecoin", holder="web-1:4242") == 1
    assert not any(name == "gpurenthub_chain_lease_held" and ("chain", "bitcoin") in labels for name, labels in found)

    assert value(found, "gpurenthub_rate_age_seconds", currency="BTC", source="kraken") == 120
    assert value(found, "gpurenthub_rate_usd", currency="BTC", source="kraken") == 96000
    assert value(found, "gpurenthub_stablecoin_peg_distance_pct", currency="USDT", source="kraken") == pytest.approx(5)

    assert value(found, "gpurenthub_webhook_deliveries", status="pending") == 2
    assert value(found, "gpurenthub_webhook_deliveries", status="failed") == 1
    assert value(found, "gpurenthub_webhook_deliveries", status="succeeded") == 0
    assert value(found, "gpurenthub_webhook_oldest_pending_age_seconds") == 120
    assert ("gpurenthub_celery_queue_length", (("queue", "celery"),)) in found


def test_the_webhook_deliveries_queue_is_measured_when_it_is_their_own(token, settings):
    """With WEBHOOK_QUEUE set its backlog is a series of its own, for CeleryQueueBacklog."""
    assert ("gpurenthub_celery_queue_length", (("queue", "webhooks"),)) not in scrape()
    settings.WEBHOOK_QUEUE = "webhooks"
    found = scrape()
    assert ("gpurenthub_celery_queue_length", (("queue", "webhooks"),)) in found
    assert ("gpurenthub_celery_queue_length", (("queue", "celery"),)) in found


def test_an_enabled_currency_without_a_rate_is_infinitely_old(token, chains, settings):
    settings.MANUAL_RATES_USD = "BTC=95000"
    found = scrape()
    assert value(found, "gpurenthub_rate_newest_age_seconds", currency="BTC") == 0
    assert math.isinf(value(found, "gpurenthub_rate_newest_age_seconds", currency="LTC"))


def test_a_scrape_makes_the_same_few_queries_whatever_the_data(token, customer):
    now = timezone.now()
    for chain in ("bitcoin", "litecoin", "ethereum"):
        ChainState.objects.create(chain=chain, height=1, tip_height=2, last_ok_at=now)
        Lease.objects.create(name=f"chain_scan:{chain}", owner="h:1:x", expires_at=now + timedelta(minutes=1))
    for minutes in range(20):
        for code in ("BTC", "ETH", "USDC"):
            RateSample.objects.create(
                currency=code, source="kraken", usd=1, observed_at=now - timedelta(minutes=minutes)
            )
    with CaptureQueriesContext(connection) as ctx:
        scrape()
    assert len(ctx.captured_queries) == selectors.QUERIES
    with CaptureQueriesContext(connection) as ctx:
        selectors.snapshot()
    assert len(ctx.captured_queries) == selectors.QUERIES == 7


def test_the_database_down_is_said_not_raised(token, monkeypatch):
    def broken(**_):
        raise RuntimeError("no database")

    monkeypatch.setattr(selectors, "snapshot", broken)
    found = scrape()
    assert value(found, "gpurenthub_exporter_database_up") == 0
    assert ("gpurenthub_invoices", (("status", "new"),)) not in found


# --- Several processes ---------------------------------------------------------------------------


def test_counts_of_several_processes_add_up_in_multiprocess_mode(tmp_path, monkeypatch, token):
    """Two processes count in PROMETHEUS_MULTIPROC_DIR (as gunicorn's workers do); a
    scrape from a third reads both."""
    script = textwrap.dedent(
        """
        import sys
        from observability.metrics import ORDERS_PLACED, REQUESTS
        for _ in range(int(sys.argv[1])):
            ORDERS_PLACED.inc()
            REQUESTS.labels("api/v1/orders", "POST", "201").inc()
        """
    )
    for n in (2, 3):
        subprocess.run(
            [sys.executable, "-c", script, str(n)],
            cwd=ROOT,
            env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PYTHONPATH": str(ROOT)},
            check=True,
            timeout=60,
        )
    assert len(list(tmp_path.glob("counter_*.db"))) == 2  # one file per process
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    from prometheus_client import generate_latest

    found = samples(generate_latest(registry_build()).decode())
    assert value(found, "gpurenthub_orders_placed_total") == 5
    assert value(found, "gpurenthub_http_requests_total", route="api/v1/orders", method="POST", status="201") == 5
    assert value(found, "gpurenthub_exporter_database_up") == 1
