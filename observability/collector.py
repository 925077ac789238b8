"""The state gauges of /metrics, read from the database when Prometheus scrapes.

A custom collector (prometheus_client.registry.Collector): `collect()` runs
observability.selectors.snapshot() (a fixed number of queries, whatever the
data) and asks the broker how many messages wait, and yields metric families.
Registered on the view's own CollectorRegistry, never on the global one.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator

from django.conf import settings
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from observability import selectors

log = logging.getLogger(__name__)


def _age(now, then) -> float:
    return math.inf if then is None else max(0.0, (now - then).total_seconds())


def _ts(value) -> float:
    return value.timestamp() if value is not None else 0.0


def queue_lengths() -> dict[str, int]:
    """Messages waiting in each Celery queue, asked of the broker with a passive
    queue_declare (kombu: every transport answers it; Redis sums its priority lists)."""
    from celery import current_app as app

    queues = {app.conf.task_default_queue or "celery"}
    queues.update(q.name for q in (app.conf.task_queues or ()))
    if settings.WEBHOOK_QUEUE:  # the webhook deliveries' own (webhooks/routing.py)
        queues.add(settings.WEBHOOK_QUEUE)
    out: dict[str, int] = {}
    with app.connection_for_read() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        channel = conn.default_channel
        for name in sorted(queues):
            try:
                # kombu's Redis channel (kombu/transport/virtual/base.py, Channel.queue_declare); the
                # stubs type default_channel as the abstract StdChannel, which does not name it.
                out[name] = channel.queue_declare(queue=name, passive=True).message_count  # type: ignore[attr-defined]
            except Exception as exc:  # a queue nobody declared yet: nothing waits in it
                log.debug("queue %s: %s", name, exc.__class__.__name__)
                out[name] = 0
    return out


class DatabaseCollector(Collector):
    def collect(self) -> Iterator:
        up = GaugeMetricFamily(
            "gpurenthub_exporter_database_up", "1 when the exporter could read the database at this scrape."
        )
        try:
            snap = selectors.snapshot()
        except Exception as exc:
            log.warning("metrics: database not readable (%s)", exc.__class__.__name__)
            up.add_metric([], 0)
            yield up
        else:
            up.add_metric([], 1)
            yield up
            yield from self._families(snap)
        broker = GaugeMetricFamily("gpurenthub_exporter_broker_up", "1 when the broker answered at this scrape.")
        queue = GaugeMetricFamily(
            "gpurenthub_celery_queue_length", "Messages waiting in a Celery queue.", labels=["queue"]
        )
        try:
            for name, length in queue_lengths().items():
                queue.add_metric([name], length)
            broker.add_metric([], 1)
        except Exception as exc:
            log.warning("metrics: broker not readable (%s)", exc.__class__.__name__)
            broker.add_metric([], 0)
        yield broker
        yield queue

    def _families(self, snap: selectors.Snapshot) -> Iterator:
        from billing.chains.watchers import WATCHERS
        from billing.currencies import CURRENCIES
        from billing.models import InvoiceStatus, PaymentStatus
        from webhooks.models import DeliveryStatus

        now = snap.now
        invoices = GaugeMetricFamily("gpurenthub_invoices", "Invoices by state.", labels=["status"])
        for status in InvoiceStatus.values:
            invoices.add_metric([status], snap.invoices.get(status, 0))
        yield invoices

        seen = CounterMetricFamily(
            "gpurenthub_payments_seen",
            "Payments ever recorded (by watchers or staff), by currency.",
            labels=["currency"],
        )
        payments = GaugeMetricFamily(
            "gpurenthub_payments", "Payments by currency and status.", labels=["currency", "status"]
        )
        for code in CURRENCIES:
            seen.add_metric([code], sum(n for (c, _), n in snap.payments.items() if c == code))
            for status in PaymentStatus.values:
                payments.add_metric([code, status], snap.payments.get((code, status), 0))
        yield seen
        yield payments

        watched = GaugeMetricFamily(
            "gpurenthub_chain_watched",
            "1 when the chain's watcher is configured (key and node URL set).",
            labels=["chain"],
        )
        for chain, watcher in sorted(WATCHERS.items()):
            watched.add_metric([chain], 1 if watcher.watched() else 0)
        yield watched
        height = GaugeMetricFamily(
            "gpurenthub_chain_scanned_height", "Last block the watcher fully scanned.", labels=["chain"]
        )
        tip = GaugeMetricFamily(
            "gpurenthub_chain_node_height", "The node's tip when the watcher last asked.", labels=["chain"]
        )
        lag = GaugeMetricFamily(
            "gpurenthub_chain_lag_blocks", "Blocks between the node's tip and the watcher.", labels=["chain"]
        )
        last_ok = GaugeMetricFamily(
            "gpurenthub_chain_last_success_timestamp_seconds",
            "Unix time of the watcher's last good scan.",
            labels=["chain"],
        )
        ok_age = GaugeMetricFamily(
            "gpurenthub_chain_last_success_age_seconds",
            "Seconds since the watcher's last good scan (+Inf: never).",
            labels=["chain"],
        )
        failures = GaugeMetricFamily(
            "gpurenthub_chain_consecutive_failures", "Failed scans in a row.", labels=["chain"]
        )
        failing = GaugeMetricFamily(
            "gpurenthub_chain_failing",
            "1 while the last scan failed, labelled with its reason: syncing (the node is behind the network), "
            "wrong_node (another network or coin than configured), unreachable, timeout, ...",
            labels=["chain", "reason"],
        )
        for row in snap.chains:
            if row.height is not None:
                height.add_metric([row.chain], row.height)
            if row.tip_height is not None:
                tip.add_metric([row.chain], row.tip_height)
            if row.height is not None and row.tip_height is not None:
                lag.add_metric([row.chain], max(0, row.tip_height - row.height))
            last_ok.add_metric([row.chain], _ts(row.last_ok_at))
            ok_age.add_metric([row.chain], _age(now, row.last_ok_at))
            failures.add_metric([row.chain], row.consecutive_failures)
            if row.failing_reason:
                failing.add_metric([row.chain, row.failing_reason], 1)
        yield from (height, tip, lag, last_ok, ok_age, failures, failing)
        lease = GaugeMetricFamily(
            "gpurenthub_chain_lease_held",
            "1 while a process holds the chain's scan lease; holder is host:pid.",
            labels=["chain", "holder"],
        )
        for chain, holder in sorted(snap.leases.items()):
            lease.add_metric([chain, holder], 1)
        yield lease

        rate_age = GaugeMetricFamily(
            "gpurenthub_rate_age_seconds",
            "Age of the newest exchange-rate sample per currency and source (setting: MANUAL_RATES_USD, age 0).",
            labels=["currency", "source"],
        )
        rate_usd = GaugeMetricFamily(
            "gpurenthub_rate_usd",
            "USD per coin of that newest sample (a reading, not money).",
            labels=["currency", "source"],
        )
        newest = GaugeMetricFamily(
            "gpurenthub_rate_newest_age_seconds",
            "Age of the newest sample of any source per currency (+Inf: none in the last hour).",
            labels=["currency"],
        )
        from billing.chains.config import enabled_currencies
        from billing.rates import manual_rates_from_setting

        fixed = manual_rates_from_setting()
        best: dict[str, float] = {}
        for sample in snap.rates:
            age = _age(now, sample.observed_at)
            rate_age.add_metric([sample.currency, sample.source], age)
            rate_usd.add_metric([sample.currency, sample.source], float(sample.usd))
            best[sample.currency] = min(best.get(sample.currency, math.inf), age)
        for code, usd in fixed.items():
            rate_age.add_metric([code, "setting"], 0)
            rate_usd.add_metric([code, "setting"], float(usd))
            best[code] = 0.0
        for code in enabled_currencies():
            newest.add_metric([code], best.get(code, math.inf))
        yield from (rate_age, rate_usd, newest)
        stable = GaugeMetricFamily(
            "gpurenthub_stablecoin_peg_distance_pct",
            "How far the newest market sample of a stablecoin is from 1 USD, in percent (orders in it are refused "
            "beyond STABLECOIN_DEPEG_PCT).",
            labels=["currency", "source"],
        )
        for sample in snap.rates:
            if CURRENCIES.get(sample.currency) and CURRENCIES[sample.currency].stable and sample.source != "manual":
                stable.add_metric([sample.currency, sample.source], float(abs(sample.usd - 1) * 100))
        yield stable

        deliveries = GaugeMetricFamily(
            "gpurenthub_webhook_deliveries",
            "Webhook deliveries by outcome (pending is the backlog).",
            labels=["status"],
        )
        for status in DeliveryStatus.values:
            deliveries.add_metric([status], snap.deliveries.get(status, 0))
        yield deliveries
        yield GaugeMetricFamily(
            "gpurenthub_webhook_oldest_pending_age_seconds",
            "Age of the oldest webhook delivery still pending (0: none).",
            value=0 if snap.oldest_pending_delivery is None else _age(now, snap.oldest_pending_delivery),
        )

        yield GaugeMetricFamily(
            "gpurenthub_provisioning_waiting",
            "Paid rentals waiting to be handed over.",
            value=snap.provisioning_waiting,
        )
        yield GaugeMetricFamily(
            "gpurenthub_provisioning_oldest_wait_seconds",
            "Seconds the oldest paid rental has waited for provisioning since its invoice settled (0: none waits).",
            value=0 if snap.oldest_provisioning is None else _age(now, snap.oldest_provisioning),
        )
