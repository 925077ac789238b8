"""The staff dashboard's figures and charts (admin: Rentals > Dashboard).

Reads only, through each app's selectors; the charts are server-rendered SVG
(core.charts). Every chart comes with the figures it draws, in a table.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from billing.currencies import CURRENCIES, amount_label
from billing.models import InvoiceStatus
from billing.selectors import invoices_by_status, revenue_by_currency, revenue_by_day
from catalog.models import SlotStatus
from catalog.selectors import slots_by_status
from core import charts, display
from core.money import ZERO
from rentals.models import RentalStatus
from rentals.selectors import provisioning_queue, provisioning_times, rentals_by_status

REVENUE_DAYS = 90

# Colours: each currency's own, as its chain family declares it; `credit` grey.
CURRENCY_COLORS = {**{code: c.colour for code, c in CURRENCIES.items()}, "credit": "#9e9e9e"}
SLOT_COLORS = {
    SlotStatus.RENTED: "#417690",
    SlotStatus.RESERVED: "#e0a800",
    SlotStatus.FREE: "#8bc34a",
    SlotStatus.OUT_OF_SERVICE: "#bdbdbd",
}
INVOICE_COLORS = {
    InvoiceStatus.NEW: "#79aec8",
    InvoiceStatus.PROCESSING: "#e0a800",
    InvoiceStatus.SETTLED: "#2e7d32",
    InvoiceStatus.EXPIRED: "#bdbdbd",
    InvoiceStatus.INVALID: "#c62828",
}
# Time from payment to hand-over, in buckets staff think in (upper bounds in seconds).
PROVISIONING_BUCKETS = (
    ("under 2 min", 120),
    ("2-5 min", 300),
    ("5-15 min", 900),
    ("15-60 min", 3600),
    ("1-4 h", 4 * 3600),
    ("4-24 h", 24 * 3600),
    ("over a day", None),
)


def month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def _duration(seconds: int | None) -> str:
    """`11 min 40 s`, `2 h 05 min`, `3 d 14 h`."""
    if seconds is None:
        return display.EMPTY
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


@dataclass(frozen=True)
class Chart:
    title: str
    svg: Any
    legend: Any
    note: str
    head: list[str]
    rows: list[list[str]]


def revenue_chart(*, today: date) -> tuple[Chart, Decimal]:
    """Revenue per day and currency over the last REVENUE_DAYS days (today included)."""
    first = today - timedelta(days=REVENUE_DAYS - 1)
    since = datetime(first.year, first.month, first.day, tzinfo=UTC)
    until = datetime(today.year, today.month, today.day, tzinfo=UTC) + timedelta(days=1)
    rows = revenue_by_day(since=since, until=until)
    days = [first + timedelta(days=i) for i in range(REVENUE_DAYS)]
    per_currency: dict[str, dict[date, Decimal]] = defaultdict(dict)
    for row in rows:
        per_currency[row["currency"]][row["day"]] = row["usd"]
    currencies = [c for c in [*CURRENCIES, "credit", "marked"] if c in per_currency]
    series = [
        charts.Series(c, CURRENCY_COLORS.get(c, "#607d8b"), [per_currency[c].get(d, ZERO) for d in days])
        for c in currencies
    ]
    total = sum((row["usd"] for row in rows), ZERO)
    svg = charts.stacked_columns(
        categories=[d.isoformat() for d in days],
        series=series,
        title=f"Revenue per day, USD, last {REVENUE_DAYS} days",
        value_label=lambda v: display.usd(Decimal(v)),
        axis_label=lambda v: f"{v:,.0f}",
        tick_every=15,
        tick_label=lambda iso: date.fromisoformat(iso).strftime("%b %d"),
    )
    table = [[c, display.usd(sum(per_currency[c].values(), ZERO))] for c in currencies]
    chart = Chart(
        title=f"Revenue per day, last {REVENUE_DAYS} days",
        svg=svg,
        legend=charts.legend(series),
        note=f"USD of invoices settled each day (UTC), by the currency paid: {display.usd(total)} in all.",
        head=["Currency", "USD"],
        rows=table,
    )
    return chart, total


def stock_charts() -> list[Chart]:
    """GPUs rented, reserved, free and out of service per card, one chart per region."""
    cells: dict[str, dict[tuple[str, str], dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for row in slots_by_status():
        cells[row["region"]][(row["gpu"], row["gpu_name"])][row["status"]] = row["n"]
    out = []
    for region, cards in sorted(cells.items()):
        names = [name for (_slug, name) in cards]
        series = [
            charts.Series(
                status.label.split(" (")[0], SLOT_COLORS[status], [c.get(status.value, 0) for c in cards.values()]
            )
            for status in (SlotStatus.RENTED, SlotStatus.RESERVED, SlotStatus.FREE, SlotStatus.OUT_OF_SERVICE)
        ]
        rented = sum(c.get(SlotStatus.RENTED.value, 0) for c in cards.values())
        total = sum(sum(c.values()) for c in cards.values())
        out.append(
            Chart(
                title=f"GPUs in {region}",
                svg=charts.stacked_bars(
                    categories=names, series=series, title=f"GPUs rented and free per card in {region}"
                ),
                legend=charts.legend(series),
                note=f"{rented:,} of {total:,} GPUs rented ({(Decimal(rented * 100) / total if total else ZERO):.0f} %).",
                head=["Card", *[s.label for s in series], "All"],
                rows=[
                    [name, *[str(s.values[i]) for s in series], str(sum(s.values[i] for s in series))]
                    for i, name in enumerate(names)
                ],
            )
        )
    return out


def invoices_chart(*, now: datetime) -> Chart:
    counts = invoices_by_status(since=now - timedelta(days=REVENUE_DAYS))
    statuses = list(InvoiceStatus)
    series = [
        charts.Series(s.label, INVOICE_COLORS[s], [counts[s.value] if t == s else 0 for t in statuses])
        for s in statuses
    ]
    return Chart(
        title="Invoices by state",
        svg=charts.stacked_bars(
            categories=[s.value for s in statuses], series=series, title="Invoices by state", label_width=100
        ),
        legend=None,
        note=f"Invoices issued in the last {REVENUE_DAYS} days, by their state now.",
        head=["State", "Invoices"],
        rows=[[s.label, str(counts[s.value])] for s in statuses],
    )


def provisioning_chart(*, now: datetime) -> tuple[Chart, int | None]:
    seconds = provisioning_times(since=now - timedelta(days=REVENUE_DAYS))
    counts = []
    lower = 0
    for _label, upper in PROVISIONING_BUCKETS:
        counts.append(sum(1 for s in seconds if s >= lower and (upper is None or s < upper)))
        lower = upper or lower
    median = seconds[(len(seconds) - 1) // 2] if seconds else None
    p90 = seconds[max(0, -(-len(seconds) * 9 // 10) - 1)] if seconds else None
    series = [charts.Series("rentals", "#417690", counts)]
    return (
        Chart(
            title="Time from payment to hand-over",
            svg=charts.stacked_columns(
                categories=[label for label, _ in PROVISIONING_BUCKETS],
                series=series,
                title="Rentals by time from settled invoice to active",
                height=200,
            ),
            legend=None,
            note=(
                f"{len(seconds)} rentals handed over in the last {REVENUE_DAYS} days: median {_duration(median)}, "
                f"90 % within {_duration(p90)}."
                if seconds
                else f"No rental handed over in the last {REVENUE_DAYS} days."
            ),
            head=["Settled to active", "Rentals"],
            rows=[[label, str(n)] for (label, _), n in zip(PROVISIONING_BUCKETS, counts, strict=True)],
        ),
        median,
    )


def dashboard_context(*, now: datetime) -> dict[str, Any]:
    """Everything the dashboard page shows, at `now`."""
    start = month_start(now)
    end = start.replace(year=start.year + 1, month=1) if start.month == 12 else start.replace(month=start.month + 1)
    revenue, revenue_90 = revenue_chart(today=now.astimezone(UTC).date())
    provisioning, median = provisioning_chart(now=now)
    by_status = rentals_by_status()
    month_rows = revenue_by_currency(since=start, until=end)
    stock = stock_charts()
    rented = sum(int(row[1]) for chart in stock for row in chart.rows)
    all_gpus = sum(int(row[-1]) for chart in stock for row in chart.rows)
    return {
        "kpis": [
            (f"last {REVENUE_DAYS} days, USD", display.usd(revenue_90)),
            (f"{start:%B} so far, USD", display.usd(sum((r["usd"] for r in month_rows), ZERO))),
            ("GPUs rented", f"{rented:,} of {all_gpus:,}"),
            ("waiting for hand-over", str(by_status.get(RentalStatus.PROVISIONING, 0))),
            ("median time to hand-over", _duration(median)),
        ],
        "charts": [revenue, invoices_chart(now=now), provisioning],
        "stock_charts": stock,
        "by_status": [(s.label, by_status.get(s.value, 0)) for s in RentalStatus],
        "queue": [
            {"rental": r, "waiting": _duration(max(0, int((now - r.settled_at).total_seconds())))}
            for r in provisioning_queue()
        ],
        "month": start,
        "revenue": [
            {
                **row,
                "usd_display": display.usd(row["usd"]),
                "amount_display": amount_label(row["currency"], row["amount"]) if row["amount"] is not None else "",
            }
            for row in month_rows
        ],
        "revenue_usd": display.usd(sum((row["usd"] for row in month_rows), ZERO)),
    }
