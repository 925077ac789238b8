"""The events rentals sends to customers' webhooks.

The data of an event is what the API answers for the same object (a webhook
body and a GET agree), so it is rendered by the API layer's output
serializers. Services never import the API layer: the renderers are handed
to this module when the app starts (rentals.apps -> rentals.payloads), and
data is built only when the account has an endpoint subscribed to the event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accounts.models import Account
from webhooks.services import event_emit, event_subscribers_hold

Renderer = Callable[[Any], dict[str, Any]]
_renderers: dict[str, Renderer] = {}


def renderers_register(*, order: Renderer, rental: Renderer, invoice: Renderer) -> None:
    """Set how an order, a rental and an invoice are rendered into event data."""
    _renderers.update(order=order, rental=rental, invoice=invoice)


def _render(kind: str, obj: Any) -> dict[str, Any]:
    try:
        renderer = _renderers[kind]
    except KeyError:
        raise RuntimeError(f"No {kind} renderer: rentals.apps registers them when the app starts.") from None
    return renderer(obj)


def subscribers_hold(*, account: Account) -> list[int]:
    """The account's webhook endpoints, read (and held) now: for an emitter
    about to take a lock others queue on (webhooks.event_subscribers_hold)."""
    return event_subscribers_hold(account=account)


def order_event_emit(*, order: Any, type: str, subscribers: list[int] | None = None) -> None:
    """`type` for the order's account, with {"order": <the order as GET /orders/{id}>}.
    `subscribers`: the account's endpoints as subscribers_hold read them."""
    event_emit(
        account=order.account, type=type, data=lambda: {"order": _render("order", order)}, subscribers=subscribers
    )


def invoice_event_emit(*, invoice: Any, type: str) -> None:
    """`type` for the invoice's account, with {"invoice": <the invoice as GET /invoices/{id}>}."""
    event_emit(account=invoice.account, type=type, data=lambda: {"invoice": _render("invoice", invoice)})


def rental_event_emit(*, rental: Any, type: str, invoice: Any = None) -> None:
    """`type` for the rental's account, with {"rental": ...} and, for a
    renewal, the invoice that renews it."""

    def data() -> dict[str, Any]:
        out = {"rental": _render("rental", rental)}
        if invoice is not None:
            out["invoice"] = _render("invoice", invoice)
        return out

    event_emit(account=rental.account, type=type, data=data)
