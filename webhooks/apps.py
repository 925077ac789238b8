from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "webhooks"
    verbose_name = "Customer webhooks"

    def ready(self) -> None:
        from webhooks import receivers, tasks  # noqa: F401  (signal receivers; the tasks, queued by name)
