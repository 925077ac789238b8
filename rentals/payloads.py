"""The data of rentals' webhook events, rendered by the same output
serializers as the API (registered with rentals.events by rentals.apps)."""

from __future__ import annotations

from typing import Any

from billing.models import Invoice
from billing.selectors import invoice_get
from billing.serializers import InvoiceOutput
from rentals.models import Order, Rental
from rentals.selectors import orders_for, rentals_for
from rentals.serializers import OrderOutput, RentalOutput


def order_payload(order: Order) -> dict[str, Any]:
    return OrderOutput(orders_for(account=order.account_id).get(pk=order.pk)).data


def rental_payload(rental: Rental) -> dict[str, Any]:
    return RentalOutput(rentals_for(account=rental.account_id).get(pk=rental.pk)).data


def invoice_payload(invoice: Invoice) -> dict[str, Any]:
    return InvoiceOutput(invoice_get(invoice_id=invoice.pk, account=invoice.account_id)).data
