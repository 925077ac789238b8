from collections.abc import Iterable

from django.apps import AppConfig
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

# The settings modules allowed to install devtools with DEBUG off: the test suite
# runs with DEBUG off, as production does, and needs the regtest harnesses.
TEST_SETTINGS_MODULES = frozenset({"config.settings_test"})


def devtools_refuse_in_production(*, installed_apps: Iterable[str], debug: bool, settings_module: str | None) -> None:
    """Refuse settings that install devtools with DEBUG off (outside the test
    settings): regtest nodes, the sandbox and its commands are for local runs
    and tests, never for production."""
    installed = any(app == "devtools" or app.startswith("devtools.") for app in installed_apps)
    if installed and not debug and settings_module not in TEST_SETTINGS_MODULES:
        raise ImproperlyConfigured(
            "devtools is installed with DEBUG off: it is for local runs and tests only. "
            "Remove it from INSTALLED_APPS (config.settings installs it only when DEBUG=1)."
        )


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "System"  # the audit trail and the leases: what staff look up, not what they run

    def ready(self) -> None:
        # Every process (web, worker, beat, manage.py) loads the apps before doing anything.
        devtools_refuse_in_production(
            installed_apps=settings.INSTALLED_APPS,
            debug=settings.DEBUG,
            settings_module=getattr(settings, "SETTINGS_MODULE", None),
        )
        # A weak or placeholder SECRET_KEY, ALLOWED_HOSTS='*' (core/checks.py, which
        # also registers them as `check --deploy` errors).
        from core.checks import production_refuse_unsafe

        production_refuse_unsafe(debug=settings.DEBUG)
