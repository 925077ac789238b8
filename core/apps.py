from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# The settings modules allowed to install devtools with DEBUG off: the test suite
# runs with DEBUG off, as production does, and needs the regtest harnesses.
TEST_SETTINGS_MODULES = frozenset({"config.settings_test"})


def devtools_refuse_in_production() -> None:
    """Refuse to start a process (web, worker, beat, manage.py) whose settings
    install devtools with DEBUG off: regtest nodes, the sandbox and its commands
    are for local runs and tests, never for production."""
    installed = any(app == "devtools" or app.startswith("devtools.") for app in settings.INSTALLED_APPS)
    if installed and not settings.DEBUG and getattr(settings, "SETTINGS_MODULE", None) not in TEST_SETTINGS_MODULES:
        raise ImproperlyConfigured(
            "devtools is installed with DEBUG off: it is for local runs and tests only. "
            "Remove it from INSTALLED_APPS (config.settings installs it only when DEBUG=1)."
        )


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self) -> None:
        devtools_refuse_in_production()
