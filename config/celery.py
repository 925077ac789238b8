"""The Celery application. Periodic jobs are declared here; their bodies live in
each app's tasks.py as thin callers of services."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("gpurenthub")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.beat_schedule = {
    "billing.invoices_advance": {"task": "billing.invoices_advance", "schedule": 30.0},
}
