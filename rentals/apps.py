from django.apps import AppConfig


class RentalsConfig(AppConfig):
    name = "rentals"
    verbose_name = "Accounts and rentals"

    def ready(self) -> None:
        from billing.hooks import requote_hook_register
        from rentals import signals  # noqa: F401  (connects the billing signal receivers)
        from rentals.services.lifecycle import renewal_requote_hook
        from rentals.services.orders import order_requote_hook

        requote_hook_register(prefix="order:", hook=order_requote_hook)
        requote_hook_register(prefix="rental:", hook=renewal_requote_hook)
