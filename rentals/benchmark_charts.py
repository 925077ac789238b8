"""The staff page of measured against predicted (admin: Rentals > Measured vs
predicted): every uploaded benchmark, grouped by card and weight format, the
mean measured and predicted output tokens/s and their ratio. Reads only; the
chart is server-rendered SVG (core.charts) with its figures in a table."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db.models import Avg, Count

from core import charts
from rentals.dashboard import Chart
from rentals.models import BenchmarkRun

MEASURED_COLOR = "#417690"
PREDICTED_COLOR = "#bdbdbd"


def calibration_rows() -> list[dict[str, Any]]:
    """Per card and weight format: uploads, mean measured and predicted tokens/s, measured / predicted."""
    rows = (
        BenchmarkRun.objects.filter(predicted_output_tokens_per_s__isnull=False)
        .values("gpu_slug", "rental__gpu__name", "weight_format")
        .annotate(
            uploads=Count("id"),
            measured=Avg("output_tokens_per_s"),
            predicted=Avg("predicted_output_tokens_per_s"),
        )
        .order_by("rental__gpu__name", "weight_format")
    )
    out = []
    for row in rows:
        measured, predicted = Decimal(row["measured"]), Decimal(row["predicted"])
        out.append(
            {
                "label": f"{row['rental__gpu__name']} · {row['weight_format']}",
                "uploads": row["uploads"],
                "measured": measured,
                "predicted": predicted,
                "ratio": (measured / predicted).quantize(Decimal("0.01")) if predicted else None,
            }
        )
    return out


def calibration_context() -> dict[str, Any]:
    rows = calibration_rows()
    categories, measured, predicted = [], [], []
    for row in rows:
        categories += [f"{row['label']} measured", f"{row['label']} predicted"]
        measured += [row["measured"], 0]
        predicted += [0, row["predicted"]]
    series = [
        charts.Series("measured", MEASURED_COLOR, measured),
        charts.Series("predicted", PREDICTED_COLOR, predicted),
    ]
    chart = Chart(
        title="Output tokens/s, measured and predicted",
        svg=charts.stacked_bars(
            categories=categories,
            series=series,
            title="Mean output tokens/s per card and weight format, measured and predicted",
            label_width=220,
        ),
        legend=charts.legend(series),
        note=f"{sum(r['uploads'] for r in rows):,} uploads over all rentals; every trace counted.",
        head=["Card · format", "Uploads", "Measured tokens/s", "Predicted tokens/s", "Measured / predicted"],
        rows=[
            [
                r["label"],
                str(r["uploads"]),
                f"{r['measured']:,.1f}",
                f"{r['predicted']:,.1f}",
                "-" if r["ratio"] is None else str(r["ratio"]),
            ]
            for r in rows
        ],
    )
    return {"chart": chart, "rows": rows}
