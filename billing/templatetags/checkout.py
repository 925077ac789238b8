"""Template helpers of the checkout page."""

from __future__ import annotations

from decimal import Decimal

from django import template
from django.template import Context
from django.utils import formats

register = template.Library()


@register.filter
def usd(amount: Decimal | str | None) -> str:
    """A USD amount with the active language's separators: "12,168.00 USD" in
    English, "12.168,00 USD" in Spanish."""
    if amount in (None, ""):
        return ""
    return f"{formats.number_format(Decimal(amount), 2, use_l10n=True, force_grouping=True)} USD"


@register.filter
def countdown(seconds: int | None) -> str:
    """Seconds as the page's countdown shows them: "29:58", "1:05:09", "3d 04:00:00"."""
    seconds = max(0, int(seconds or 0))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d {hours:02d}:{minutes:02d}:{secs:02d}"
    if hours:
        return f"{hours}:{minutes:02d}:{secs:02d}"
    return f"{minutes:02d}:{secs:02d}"


@register.simple_tag(takes_context=True)
def shown(context: Context, states: str = "", flag: str = "") -> str:
    """` hidden` unless the page's state is one of `states` (space separated)
    and, when given, the status flag `flag` is true. The page's script applies
    the same rule (data-show, data-if) whenever the status changes."""
    live = context["live"]
    if states and live["state"] not in states.split():
        return " hidden"
    if flag and not live.get(flag):
        return " hidden"
    return ""
