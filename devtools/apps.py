from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    name = "devtools"
    verbose_name = "Development tools"

    def ready(self) -> None:
        from billing.payable import NOTHING, payable_register

        # The sandbox's demo invoice pays for nothing; every process that may settle or
        # re-quote it (web, worker, commands) knows the kind, not only the one that issued it.
        payable_register(kind="sandbox", payable=NOTHING)
