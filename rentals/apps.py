from django.apps import AppConfig


class RentalsConfig(AppConfig):
    name = "rentals"
    verbose_name = "Rentals"

    def ready(self) -> None:
        from billing.payable import payable_register
        from rentals import events, payables, payloads, receivers, tasks  # noqa: F401  (receivers connect; tasks register)

        # What billing invoices for rentals, one kind each (billing.payable).
        payable_register(kind="order", payable=payables.ORDER)
        payable_register(kind="renewal", payable=payables.RENEWAL)
        payable_register(kind="usage", payable=payables.USAGE)
        events.renderers_register(
            order=payloads.order_payload, rental=payloads.rental_payload, invoice=payloads.invoice_payload
        )
