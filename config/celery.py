"""The Celery application. The periodic jobs are CELERY_BEAT_SCHEDULE in
config/settings.py; their bodies live in each app's tasks.py as thin callers
of services."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("gpurenthub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
