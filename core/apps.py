from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "System"  # the audit trail and the leases: what staff look up, not what they run
