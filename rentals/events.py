"""What customers' webhooks carry: the data of each event, built from the
same output serializers as the API, so a webhook body and a GET agree."""

from __future__ import annotations

from typing import Any

from billing.models import Invoice
from rentals.models import Order, Rental


def webhook_emit(*, account: Any, type: str, data: dict[str, Any]) -> None:
    from rentals.webhooks import event_emit

    event_emit(account=account, type=type, data=data)


def order_event_data(order: Order) -> dict[str, Any]:
    from rentals.order_serializers import OrderOutput

    return {"order": OrderOutput(order).data}


def invoice_event_data(invoice: Invoice) -> dict[str, Any]:
    from billing.serializers import InvoiceOutput

    return {"invoice": InvoiceOutput(invoice).data}


def rental_event_data(rental: Rental, **extra: Any) -> dict[str, Any]:
    from rentals.order_serializers import RentalOutput

    return {"rental": RentalOutput(rental).data, **extra}
