from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self) -> None:
        # Refuse to start with a key that can spend, or with malformed watch-only
        # material, rather than fail on the first invoice.
        from billing.chains.config import chain_config_validate

        chain_config_validate()
