"""Invoice descriptions and lines in the reader's language.

An invoice's description and its lines are stored as issued, in English (they
are what the API returns, and issued invoices are never edited). The checkout
page, which speaks the payer's language, rebuilds them from what the issuer
recorded beside them: the invoice's metadata (cards, region, term, number of
terms, kind of renewal) and each line's code (`gpu`, `addon:<slug>`,
`usage:egress`) and quantity. A rebuilt text is used only when its English
reproduces the stored text exactly; anything else (a line code this module does
not know, wording an older release wrote) is shown as stored, so the page
never says something the issued invoice does not.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import Any

from django.utils import formats, translation
from django.utils.translation import gettext, ngettext

RENEWAL_KINDS = ("auto", "manual")


def _matching(stored: str, build: Callable[[], str | None]) -> str:
    """`build()` in the active language when, in English, it gives `stored`."""
    with translation.override("en"):
        english = build()
    if english is None or english != stored:
        return stored
    return build() or stored


def _cards(metadata: Mapping[str, Any]) -> dict[str, Any] | None:
    count, gpu, region = metadata.get("gpu_count"), metadata.get("gpu_name"), metadata.get("region")
    if not (isinstance(count, int) and isinstance(gpu, str) and isinstance(region, str)):
        return None
    return {"count": count, "gpu": gpu, "region": region}


def _order_description(metadata: Mapping[str, Any]) -> str | None:
    cards, term, terms = _cards(metadata), metadata.get("term"), metadata.get("terms")
    if cards is None or not isinstance(terms, int):
        return None
    if term == "weekly":
        text = ngettext(
            "%(count)sx %(gpu)s in %(region)s, %(terms)s week",
            "%(count)sx %(gpu)s in %(region)s, %(terms)s weeks",
            terms,
        )
    elif term == "monthly":
        text = ngettext(
            "%(count)sx %(gpu)s in %(region)s, %(terms)s month",
            "%(count)sx %(gpu)s in %(region)s, %(terms)s months",
            terms,
        )
    else:
        return None
    return text % {**cards, "terms": terms}


def _renewal_description(metadata: Mapping[str, Any]) -> str | None:
    cards, kind, term, terms = _cards(metadata), metadata.get("kind"), metadata.get("term"), metadata.get("terms")
    if cards is None:
        return None
    if kind == "usage":
        return gettext("%(count)sx %(gpu)s in %(region)s: usage") % cards
    if kind not in RENEWAL_KINDS or not isinstance(terms, int):
        return None
    if term == "weekly":
        text = ngettext(
            "%(count)sx %(gpu)s in %(region)s: renewal, %(terms)s weekly term",
            "%(count)sx %(gpu)s in %(region)s: renewal, %(terms)s weekly terms",
            terms,
        )
    elif term == "monthly":
        text = ngettext(
            "%(count)sx %(gpu)s in %(region)s: renewal, %(terms)s monthly term",
            "%(count)sx %(gpu)s in %(region)s: renewal, %(terms)s monthly terms",
            terms,
        )
    else:
        return None
    return text % {**cards, "terms": terms}


def invoice_description(invoice: Any) -> str:
    """What the invoice pays for, in the active language (as stored when it cannot be rebuilt)."""
    metadata = invoice.metadata if isinstance(invoice.metadata, Mapping) else {}
    build = _renewal_description if "rental" in metadata else _order_description
    return _matching(invoice.description, lambda: build(metadata))


# --- Lines ---------------------------------------------------------------------------

_TIMES = re.compile(r"^(?P<item>.*) x (?P<terms>[0-9]+)$")
_ADDON = re.compile(r"^(?P<name>.+), per (?:week|month)$")
_EGRESS = re.compile(r"^Egress beyond the included allowance, (?P<month>[0-9]{4}-[0-9]{2}): (?P<tb>[0-9.]+) TB$")


def _per_term(term: Any, *, week: str, month: str) -> str | None:
    return {"weekly": week, "monthly": month}.get(term)


def _times(item: str, terms: int) -> str:
    """A line that covers several terms: `H100 SXM GPU, per card and month x 3`."""
    return gettext("%(item)s x %(terms)s") % {"item": item, "terms": terms} if terms > 1 else item


def _gpu_line(line: Any, metadata: Mapping[str, Any]) -> str | None:
    gpu, count = metadata.get("gpu_name"), metadata.get("gpu_count")
    if not isinstance(gpu, str) or not isinstance(count, int) or count < 1:
        return None
    terms = Decimal(line.quantity) / count
    if terms != terms.to_integral_value() or terms < 1:
        return None
    item = _per_term(
        metadata.get("term"),
        week=gettext("%(gpu)s GPU, per card and week"),
        month=gettext("%(gpu)s GPU, per card and month"),
    )
    return _times(item % {"gpu": gpu}, int(terms)) if item else None


def _addon_line(line: Any, metadata: Mapping[str, Any]) -> str | None:
    times = _TIMES.match(line.description)
    single = times["item"] if times else line.description
    named = _ADDON.match(single)
    if named is None:
        return None
    item = _per_term(metadata.get("term"), week=gettext("%(addon)s, per week"), month=gettext("%(addon)s, per month"))
    if item is None:
        return None
    return _times(item % {"addon": named["name"]}, int(times["terms"]) if times else 1)


def _egress_line(line: Any, metadata: Mapping[str, Any]) -> str | None:
    found = _EGRESS.match(line.description)
    if found is None:
        return None
    try:
        tb = Decimal(found["tb"])
    except InvalidOperation:
        return None
    shown = formats.number_format(tb, use_l10n=True) if translation.get_language() != "en" else found["tb"]
    text = gettext("Egress beyond the included allowance, %(month)s: %(tb)s TB")
    return text % {"month": found["month"], "tb": shown}


def line_description(line: Any, invoice: Any) -> str:
    """One invoice line's description in the active language (as stored when it cannot be rebuilt)."""
    metadata = invoice.metadata if isinstance(invoice.metadata, Mapping) else {}
    code = line.code or ""
    if code == "gpu":
        build = _gpu_line
    elif code.startswith("addon:"):
        build = _addon_line
    elif code == "usage:egress":
        build = _egress_line
    else:
        return str(line.description)
    return _matching(line.description, lambda: build(line, metadata))
