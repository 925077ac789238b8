"""The Celery application. The periodic jobs are CELERY_BEAT_SCHEDULE in
config/settings.py; their bodies live in each app's tasks.py as thin callers
of services."""

import os

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("gpurenthub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.setup_logging.connect
def _logging_from_settings(**_kwargs) -> None:
    """Worker and beat log through LOGGING in config/settings.py (JSON lines in
    production, request ids, secrets masked) instead of celery's own handler
    (celery/app/log.py: a receiver of setup_logging leaves the logging alone)."""
    from logging.config import dictConfig

    from django.conf import settings

    dictConfig(settings.LOGGING)
