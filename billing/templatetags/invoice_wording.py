"""Invoice descriptions and lines in the page's language (billing/wording.py)."""

from __future__ import annotations

from typing import Any

from django import template

from billing import wording

register = template.Library()


@register.filter
def invoice_description(invoice: Any) -> str:
    return wording.invoice_description(invoice)


@register.filter
def line_description(line: Any, invoice: Any) -> str:
    return wording.line_description(line, invoice)
