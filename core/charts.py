"""Charts for staff pages, drawn on the server as inline SVG: no script, no
library, nothing fetched from elsewhere (the admin works offline and under a
strict Content-Security-Policy). Each function returns escaped markup whose
bars carry a <title> (the figure on hover); pages put the same figures in a
table beside the chart for reading and for screen readers.

Sizes are in SVG user units; the chart scales to its box (`viewBox`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

Number = int | float | Decimal


@dataclass(frozen=True)
class Series:
    """One kind of bar segment: its name, colour and a value per category."""

    label: str
    color: str
    values: Sequence[Number]


def _nice_ceiling(value: Decimal) -> Decimal:
    """The smallest 1, 2, 2.5 or 5 times a power of ten at or above `value`
    (the axis maximum: gridlines at its quarters read as round figures)."""
    if value <= 0:
        return Decimal(1)
    magnitude = Decimal(10) ** (value.adjusted())
    for step in ("1", "2", "2.5", "5", "10"):
        if Decimal(step) * magnitude >= value:
            return Decimal(step) * magnitude
    return Decimal(10) * magnitude  # pragma: no cover - the loop ends at 10


def _fmt(value: Number) -> str:
    value = Decimal(value)
    return f"{value:,.0f}" if value >= 10 or value == value.to_integral_value() else f"{value:,.2f}"


def _c(value: float) -> str:
    """A coordinate, to the hundredth of a unit."""
    return f"{value:.2f}".rstrip("0").rstrip(".")


def legend(series: Sequence[Series]) -> SafeString:
    """The colour key under a chart."""
    items = format_html_join(
        "",
        '<li><svg width="12" height="12" aria-hidden="true"><rect width="12" height="12" fill="{}"/></svg>{}</li>',
        ((s.color, s.label) for s in series),
    )
    return format_html('<ul class="chart-legend">{}</ul>', items)


def stacked_columns(
    *,
    categories: Sequence[str],
    series: Sequence[Series],
    title: str,
    value_label: Callable[[Number], str] = _fmt,
    axis_label: Callable[[Number], str] = _fmt,
    tick_every: int = 1,
    tick_label: Callable[[str], str] = lambda c: c,
    width: int = 720,
    height: int = 240,
) -> SafeString:
    """Vertical columns, one per category (a day), each a stack of the series
    (currencies). The y axis starts at zero; gridlines at quarters of a round
    maximum, labelled by `axis_label`; a bar's own figure (on hover) by
    `value_label`."""
    left, right, top, bottom = 64, 8, 10, 28
    plot_w, plot_h = width - left - right, height - top - bottom
    # Figures stay Decimal; only coordinates are floats.
    totals = [sum((Decimal(s.values[i]) for s in series), Decimal(0)) for i in range(len(categories))]
    ymax = _nice_ceiling(max(totals, default=Decimal(0)))
    slot = plot_w / max(len(categories), 1)
    bar_w = max(slot * 0.8, 1.0)
    parts: list[SafeString] = []
    for q in range(5):
        value = ymax * q / 4
        y = top + plot_h - plot_h * q / 4
        parts.append(
            format_html(
                '<line class="axis" x1="{}" x2="{}" y1="{}" y2="{}"/>'
                '<text x="{}" y="{}" text-anchor="end" font-size="11">{}</text>',
                left,
                width - right,
                _c(y),
                _c(y),
                left - 6,
                _c(y + 4),
                axis_label(value),
            )
        )
    for i, category in enumerate(categories):
        x = left + i * slot + (slot - bar_w) / 2
        base: float = top + plot_h
        for s in series:
            value = Decimal(s.values[i])
            if value <= 0:
                continue
            h = plot_h * float(value / ymax)
            base -= h
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}: {} {}</title></rect>',
                    _c(x),
                    _c(base),
                    _c(bar_w),
                    _c(h),
                    s.color,
                    category,
                    s.label,
                    value_label(s.values[i]),
                )
            )
        if i % tick_every == 0:
            parts.append(
                format_html(
                    '<text x="{}" y="{}" text-anchor="middle" font-size="11">{}</text>',
                    _c(x + bar_w / 2),
                    height - 8,
                    tick_label(category),
                )
            )
    return _svg(title, width, height, parts)


def stacked_bars(
    *,
    categories: Sequence[str],
    series: Sequence[Series],
    title: str,
    value_label: Callable[[Number], str] = _fmt,
    width: int = 720,
    row_height: int = 22,
    label_width: int = 120,
) -> SafeString:
    """Horizontal bars, one per category (a card), each a stack of the series
    (rented, reserved, free, out of service), with the row's total at its end."""
    top, right = 4, 64
    height = top * 2 + row_height * max(len(categories), 1)
    plot_w = width - label_width - right
    totals = [sum((Decimal(s.values[i]) for s in series), Decimal(0)) for i in range(len(categories))]
    xmax = max(totals, default=Decimal(0)) or Decimal(1)
    parts: list[SafeString] = []
    for i, category in enumerate(categories):
        y = top + i * row_height
        parts.append(
            format_html(
                '<text x="{}" y="{}" text-anchor="end" font-size="12">{}</text>',
                label_width - 8,
                _c(y + row_height * 0.68),
                category,
            )
        )
        x = float(label_width)
        for s in series:
            value = Decimal(s.values[i])
            if value <= 0:
                continue
            w = plot_w * float(value / xmax)
            parts.append(
                format_html(
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"><title>{}: {} {}</title></rect>',
                    _c(x),
                    y + 3,
                    _c(w),
                    row_height - 6,
                    s.color,
                    category,
                    value_label(s.values[i]),
                    s.label,
                )
            )
            x += w
        parts.append(
            format_html(
                '<text x="{}" y="{}" font-size="11">{}</text>',
                _c(x + 6),
                _c(y + row_height * 0.68),
                value_label(totals[i]),
            )
        )
    return _svg(title, width, height, parts)


def _svg(title: str, width: int, height: int, parts: Sequence[SafeString]) -> SafeString:
    body = mark_safe("".join(parts))  # each part was built with format_html
    return format_html(
        '<svg class="chart" viewBox="0 0 {} {}" role="img" aria-label="{}" preserveAspectRatio="xMinYMin meet">'
        "<title>{}</title>{}</svg>",
        width,
        height,
        title,
        title,
        body,
    )
