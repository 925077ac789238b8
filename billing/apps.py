from django.apps import AppConfig


class BillingConfig(AppConfig):
    name = "billing"

    def ready(self) -> None:
        # Refuse to start with a key that can spend, or with malformed watch-only
        # material, rather than fail on the first invoice.
        from billing.chains.config import chain_config_validate

        chain_config_validate()

        # A malformed MANUAL_RATES_USD stops every process at start-up (ImproperlyConfigured),
        # not the first order that needs a rate.
        from billing.rates import manual_rates_from_setting

        manual_rates_from_setting()

        # Each watched chain's health in /readyz (non-critical: the API keeps
        # serving while a node is away).
        from billing.chains.watchers import readiness_checks_register

        readiness_checks_register()
