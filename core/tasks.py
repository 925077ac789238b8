"""Queueing Celery tasks by name, so services import no tasks module (tasks
import services, never the other way round)."""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.db import transaction


def task_queue(name: str, *args: Any) -> None:
    """Queue the task registered as `name` now. A task whose module this
    process has loaded runs as that task (eagerly when CELERY_TASK_ALWAYS_EAGER);
    otherwise the message goes to the broker by name."""
    current_app.signature(name, args=args).delay()


def task_queue_on_commit(name: str, *args: Any, robust: bool = False) -> None:
    """Queue the task once the caller's transaction commits (never for a
    transaction that rolls back). `robust`: a failure to queue (a broker that
    is down) is logged instead of raised to a caller whose work has committed;
    use it where a periodic sweep makes up for a lost message."""
    transaction.on_commit(lambda: task_queue(name, *args), robust=robust)
