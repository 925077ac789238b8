"""How figures and structured values read on staff pages: money with two
decimals and thousands separators, exchange rates as prices, and JSON
snapshots (a workload, a sizing result, SSH keys, metadata) as tables.

Everything here returns text or escaped HTML; nothing parses or rounds what
is stored (rounding to cents, half up, happens only in what is shown).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from core.money import cents

EMPTY = "\u2013"  # an en dash: nothing to show


def usd(value: Decimal | int | str | None) -> str:
    """A USD amount as staff read it: `1,715.00` (half up to the cent)."""
    if value is None or value == "":
        return EMPTY
    return f"{cents(value):,.2f}"


def price(value: Decimal | int | str | None) -> str:
    """A price in USD per unit (an exchange rate): two decimals (`90.00`), or
    four below one dollar, where cents would hide a stablecoin's drift
    (`0.9987`)."""
    if value is None or value == "":
        return EMPTY
    amount = Decimal(value)
    places = Decimal("0.01") if abs(amount) >= 1 else Decimal("0.0001")
    return f"{amount.quantize(places, rounding=ROUND_HALF_UP):,}"


def percent(value: Decimal | int | str | None) -> str:
    """A percentage without noise: `5 %`, `2.5 %`."""
    if value is None or value == "":
        return EMPTY
    amount = Decimal(value).normalize()
    return f"{amount:f} %"


# --- JSON as tables ---------------------------------------------------------------

_MAX_DEPTH = 6
LONG_TOKEN = 24  # characters without a space, beyond which a value may break anywhere


def _scalar(value: Any) -> str:
    if value is None or value == "":
        return EMPTY
    if value is True:
        return "yes"
    if value is False:
        return "no"
    return str(value)


def _is_record_list(value: Any) -> bool:
    return bool(value) and isinstance(value, list) and all(isinstance(item, Mapping) for item in value)


def _cell(value: Any, depth: int) -> SafeString:
    if depth >= _MAX_DEPTH:
        return format_html("<code>{}</code>", str(value))
    if isinstance(value, Mapping):
        return _mapping_table(value, depth + 1) if value else mark_safe(EMPTY)
    if _is_record_list(value):
        return _records_table(value, depth + 1)
    if isinstance(value, list | tuple):
        if not value:
            return mark_safe(EMPTY)
        if all(not isinstance(item, Mapping | list | tuple) for item in value):
            return format_html("{}", ", ".join(_scalar(item) for item in value))
        return format_html_join("", "<div>{}</div>", ((_cell(item, depth + 1),) for item in value))
    text = _scalar(value)
    if any(len(part) > LONG_TOKEN for part in text.split()):
        # A key, a hash, an address: no word to break at, so it may break anywhere.
        return format_html('<span class="long-token">{}</span>', text)
    return format_html("{}", text)


def _nested(value: Any) -> bool:
    return (isinstance(value, Mapping) and bool(value)) or _is_record_list(value)


def _mapping_table(value: Mapping[str, Any], depth: int) -> SafeString:
    # Plain values first, then the nested tables: the summary reads before the
    # details (PostgreSQL's jsonb keeps keys by length, not as they were written).
    value = dict(sorted(value.items(), key=lambda item: _nested(item[1])))
    rows = format_html_join(
        "", '<tr><th scope="row">{}</th><td>{}</td></tr>', ((k, _cell(v, depth)) for k, v in value.items())
    )
    return format_html('<table class="json-table">{}</table>', rows)


def _records_table(records: Sequence[Mapping[str, Any]], depth: int) -> SafeString:
    columns: list[str] = []
    for record in records:
        columns.extend(key for key in record if key not in columns)
    head = format_html_join("", '<th scope="col">{}</th>', ((c,) for c in columns))
    body = format_html_join(
        "",
        "<tr>{}</tr>",
        ((format_html_join("", "<td>{}</td>", ((_cell(r.get(c), depth),) for c in columns)),) for r in records),
    )
    return format_html(
        '<table class="json-table json-records"><thead><tr>{}</tr></thead><tbody>{}</tbody></table>', head, body
    )


def json_table(value: Any) -> SafeString:
    """A JSON value as HTML a person can read: an object as a two-column table
    (nested objects as tables inside it), a list of objects as a table with a
    column per key, a list of plain values as a comma-separated line. Every
    key and value is escaped."""
    return _cell(value, 0)
