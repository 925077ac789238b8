from django.apps import AppConfig


class RentalsConfig(AppConfig):
    name = "rentals"
    verbose_name = "Rentals"

    def ready(self) -> None:
        from billing.hooks import requote_hook_register
        from rentals import events, payloads, receivers, tasks  # noqa: F401  (receivers connect; tasks register)
        from rentals.services.lifecycle import renewal_requote_hook
        from rentals.services.orders import order_requote_hook

        requote_hook_register(prefix="order:", hook=order_requote_hook)
        requote_hook_register(prefix="rental:", hook=renewal_requote_hook)
        events.renderers_register(
            order=payloads.order_payload, rental=payloads.rental_payload, invoice=payloads.invoice_payload
        )
