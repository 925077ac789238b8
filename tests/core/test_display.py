"""core.display and core.charts: figures as staff read them, JSON as tables,
and server-drawn SVG charts."""

from __future__ import annotations

from decimal import Decimal

import pytest

from core import charts, display


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Decimal("1715"), "1,715.00"),  # SQLite's SUM loses the places: still two decimals
        (Decimal("12168.00"), "12,168.00"),
        (Decimal("0.005"), "0.01"),  # half up
        (Decimal("-100.5"), "-100.50"),
        (None, "\u2013"),
    ],
)
def test_usd(value, shown):
    assert display.usd(value) == shown


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (Decimal("90.000000000000"), "90.00"),
        (Decimal("95000.125"), "95,000.13"),
        (Decimal("0.998712000000"), "0.9987"),
        (Decimal("1.0004"), "1.00"),
    ],
)
def test_rates_read_as_prices(value, shown):
    assert display.price(value) == shown


def test_percent():
    assert display.percent(Decimal("5.00")) == "5 %"
    assert display.percent(Decimal("2.50")) == "2.5 %"
    assert display.percent(Decimal("10.00")) == "10 %"


def test_json_table_objects_lists_and_escaping():
    html = str(
        display.json_table(
            {
                "model": {"slug": "llama-3.1-8b", "layers": 32},
                "fits": True,
                "reasons": [],
                "keys": [{"name": "<laptop>", "fingerprint": "SHA256:abc"}, {"name": "ci", "comment": None}],
                "addons": ["private-vlan", "dedicated-100g"],
            }
        )
    )
    assert html.startswith('<table class="json-table">')
    assert (
        '<th scope="row">model</th><td><table class="json-table"><tr><th scope="row">slug</th><td>llama-3.1-8b</td>'
        in html
    )
    assert '<th scope="row">fits</th><td>yes</td>' in html
    assert '<th scope="row">reasons</th><td>\u2013</td>' in html
    # A list of objects: one column per key seen, a dash where a row lacks one.
    assert '<th scope="col">name</th><th scope="col">fingerprint</th><th scope="col">comment</th>' in html
    assert "<td>&lt;laptop&gt;</td>" in html and "<laptop>" not in html
    assert "<td>private-vlan, dedicated-100g</td>" in html


def test_json_table_long_tokens_may_break_anywhere():
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl alice@laptop"
    assert str(display.json_table({"public_key": key})).count('<span class="long-token">') == 1
    assert "long-token" not in str(display.json_table({"name": "laptop"}))


def test_stacked_columns_scale_titles_and_gridlines():
    svg = str(
        charts.stacked_columns(
            categories=["2026-11-29", "2026-11-30"],
            series=[
                charts.Series("LTC", "#345d9d", [Decimal("0"), Decimal("1715.00")]),
                charts.Series("BTC", "#f7931a", [Decimal("250.00"), Decimal("100.00")]),
            ],
            title="Revenue <per day>",
            value_label=display.usd,
            axis_label=lambda v: f"{v:,.0f}",
        )
    )
    assert svg.startswith('<svg class="chart" viewBox="0 0 720 240" role="img" aria-label="Revenue &lt;per day&gt;"')
    # Bars carry their figure; a zero draws nothing.
    assert "<title>2026-11-30: LTC 1,715.00</title>" in svg and "2026-11-29: LTC" not in svg
    assert "<title>2026-11-29: BTC 250.00</title>" in svg
    # The axis tops out at a round figure above the tallest stack (1,815): 2,000, with quarters.
    for tick in ("0", "500", "1,000", "1,500", "2,000"):
        assert f">{tick}</text>" in svg
    # 1,715 of 2,000 is 85.75 % of the 202-unit plot height (173.215, to the hundredth).
    assert 'height="173.22"' in svg


def test_stacked_bars_put_each_row_total_at_its_end():
    svg = str(
        charts.stacked_bars(
            categories=["H100 SXM", "L4"],
            series=[charts.Series("Rented", "#417690", [60, 0]), charts.Series("Free", "#8bc34a", [20, 8])],
            title="GPUs",
        )
    )
    assert "<title>H100 SXM: 60 Rented</title>" in svg and "<title>H100 SXM: 20 Free</title>" in svg
    assert "<title>L4: 0 Rented</title>" not in svg
    assert ">80</text>" in svg and ">8</text>" in svg


def test_legend_lists_each_series_with_its_colour():
    html = str(charts.legend([charts.Series("BTC", "#f7931a", [1]), charts.Series("credit", "#9e9e9e", [1])]))
    assert html.count("<li>") == 2 and 'fill="#f7931a"' in html and "credit</li>" in html
