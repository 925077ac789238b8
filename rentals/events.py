"""What customers' webhooks carry: the data of each event, built from the
same output serializers as the API, so a webhook body and a GET agree. Data
is built only when the account has an endpoint subscribed to the event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from billing.models import Invoice
from rentals.models import Order, Rental


def webhook_emit(*, account: Any, type: str, data: Callable[[], dict[str, Any]]) -> None:
    from rentals.webhooks import event_emit

    event_emit(account=account, type=type, data=data)


def order_event_data(order: Order) -> dict[str, Any]:
    from rentals.order_serializers import OrderOutput
    from rentals.selectors import orders_for

    return {"order": OrderOutput(orders_for(account=order.account_id).get(pk=order.pk)).data}


def invoice_event_data(invoice: Invoice) -> dict[str, Any]:
    from billing.selectors import invoice_get
    from billing.serializers import InvoiceOutput

    return {"invoice": InvoiceOutput(invoice_get(invoice_id=invoice.pk, account=invoice.account_id)).data}


def rental_event_data(rental: Rental, **extra: Any) -> dict[str, Any]:
    from rentals.order_serializers import RentalOutput
    from rentals.selectors import rentals_for

    return {"rental": RentalOutput(rentals_for(account=rental.account_id).get(pk=rental.pk)).data, **extra}
