"""What the exporter reads from the database at each scrape: one query per group.

Every figure here is state the database already holds (invoices, payments, the
watchers' chain states and leases, exchange-rate samples, webhook deliveries,
rentals waiting for provisioning), so it is the same whichever web or worker
process wrote it, and the same from every web process that is scraped.
`snapshot()` runs QUERIES queries (tests/observability/test_metrics.py holds it
to that budget).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import Count, F, Min, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from billing.currencies import CURRENCIES
from billing.models import ChainState, Invoice, Payment, RateSample
from billing.rates import SOURCE_MANUAL
from core.models import Lease
from rentals.models import Rental, RentalStatus
from webhooks.models import DeliveryStatus, WebhookDelivery

QUERIES = 7

# Rate samples are looked at this far back (and at least twice RATE_MAX_AGE_SECONDS):
# a currency with none in it reports an infinite age. Bounded so a scrape reads a
# few hundred rows, not the 30 days of samples kept.
RATE_LOOKBACK = timedelta(hours=1)
LEASE_PREFIX = "chain_scan:"


@dataclass(frozen=True)
class ChainRow:
    chain: str
    height: int | None
    tip_height: int | None
    last_ok_at: datetime | None
    last_scan_at: datetime | None
    failing_reason: str  # the reason word of the last failure when it is newer than the last success
    consecutive_failures: int


@dataclass(frozen=True)
class RateRow:
    currency: str
    source: str
    usd: Decimal
    observed_at: datetime


@dataclass
class Snapshot:
    now: datetime
    invoices: dict[str, int] = field(default_factory=dict)  # status -> count
    payments: dict[tuple[str, str], int] = field(default_factory=dict)  # (currency, status) -> count
    chains: list[ChainRow] = field(default_factory=list)
    leases: dict[str, str] = field(default_factory=dict)  # chain -> holder (host:pid)
    rates: list[RateRow] = field(default_factory=list)
    deliveries: dict[str, int] = field(default_factory=dict)  # status -> count
    oldest_pending_delivery: datetime | None = None
    provisioning_waiting: int = 0
    oldest_provisioning: datetime | None = None


def _failure_reason(state: ChainState) -> str:
    """The stable reason word (billing.chains.errors.ChainUnavailable.reason) of the
    last failure, when it is newer than the last success; "" when the watcher is fine."""
    if state.last_error_at is None or (state.last_ok_at is not None and state.last_ok_at >= state.last_error_at):
        return ""
    # billing.chains.machinery.chain_run stores "<reason>: <message>", or "internal: ..." for a bug.
    word = state.last_error.split(":", 1)[0].strip()
    return word if word.replace("_", "").isalpha() and len(word) <= 32 else "other"


def snapshot(*, now: datetime | None = None) -> Snapshot:
    now = now or timezone.now()
    snap = Snapshot(now=now)
    for row in Invoice.objects.order_by().values("status").annotate(n=Count("id")):
        snap.invoices[row["status"]] = row["n"]
    for row in Payment.objects.order_by().values("currency", "status").annotate(n=Count("id")):
        snap.payments[(row["currency"], row["status"])] = row["n"]
    snap.chains = [
        ChainRow(
            chain=s.chain,
            height=s.height,
            tip_height=s.tip_height,
            last_ok_at=s.last_ok_at,
            last_scan_at=s.last_scan_at,
            failing_reason=_failure_reason(s),
            consecutive_failures=s.consecutive_failures,
        )
        for s in ChainState.objects.order_by("chain").only(
            "chain",
            "height",
            "tip_height",
            "last_ok_at",
            "last_scan_at",
            "last_error",
            "last_error_at",
            "consecutive_failures",
        )
    ]
    for name, owner in Lease.objects.filter(
        name__startswith=LEASE_PREFIX, expires_at__gt=now, owner__gt=""
    ).values_list("name", "owner"):
        # The owner token is host:pid:nonce (core.lease._owner): the nonce says nothing to an operator.
        snap.leases[name.removeprefix(LEASE_PREFIX)] = ":".join(owner.split(":")[:2])
    lookback = max(RATE_LOOKBACK, timedelta(seconds=2 * int(settings.RATE_MAX_AGE_SECONDS)))
    # Currencies and sources named, so PostgreSQL reads the (currency, source, observed_at)
    # index: 1 ms over 600,000 samples (30 days of two sources), where the time range alone
    # scanned the table (50 ms).
    sources = sorted({p.strip().lower() for p in settings.RATE_PROVIDERS if p.strip()} | {SOURCE_MANUAL})
    latest = (
        RateSample.objects.filter(
            currency__in=list(CURRENCIES), source__in=sources, observed_at__gt=now - lookback, observed_at__lte=now
        )
        .annotate(
            rank=Window(
                RowNumber(),
                partition_by=[F("currency"), F("source")],
                order_by=[F("observed_at").desc(), F("id").desc()],
            )
        )
        .filter(rank=1)
        .values_list("currency", "source", "usd", "observed_at")
    )
    snap.rates = [RateRow(*row) for row in latest]
    for row in WebhookDelivery.objects.order_by().values("status").annotate(n=Count("id"), oldest=Min("created_at")):
        snap.deliveries[row["status"]] = row["n"]
        if row["status"] == DeliveryStatus.PENDING:
            snap.oldest_pending_delivery = row["oldest"]
    waiting = Rental.objects.filter(status=RentalStatus.PROVISIONING).aggregate(n=Count("id"), oldest=Min("settled_at"))
    snap.provisioning_waiting, snap.oldest_provisioning = waiting["n"], waiting["oldest"]
    return snap
