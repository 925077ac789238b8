from django.apps import AppConfig


class ObservabilityConfig(AppConfig):
    """/metrics (Prometheus), request ids in logs and Celery tasks (docs/operations.md#observability)."""

    name = "observability"
    verbose_name = "Observability"

    def ready(self) -> None:
        from observability import logs

        logs.celery_signals_connect()
