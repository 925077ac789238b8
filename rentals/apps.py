from django.apps import AppConfig


class RentalsConfig(AppConfig):
    name = "rentals"
    verbose_name = "Accounts and rentals"

    def ready(self) -> None:
        from rentals import signals  # noqa: F401  (connects billing signal receivers)
