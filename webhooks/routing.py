"""Where webhook deliveries are queued: on a queue of their own when WEBHOOK_QUEUE
names one (CELERY_TASK_ROUTES in config/settings.py names this router).

A delivery attempt may wait WEBHOOK_TIMEOUT_SECONDS on an endpoint that accepts the
connection and never answers, and is tried up to six times: on the queue the chain
watchers and the invoice jobs use, a few slow endpoints would hold its workers and
delay payments for everyone. Production runs the deliveries on their own workers
(deploy/systemd/gpurenthub-webhooks.service, with WEBHOOK_QUEUE=webhooks as
deploy/env.example sets it); a single worker (`make run`, the tests) leaves it empty
and runs everything."""

from __future__ import annotations

from typing import Any

from django.conf import settings


def route(name: str, args: Any, kwargs: Any, options: Any, task: Any = None, **kw: Any) -> dict[str, str] | None:
    """Celery's router signature: {"queue": WEBHOOK_QUEUE} for the webhooks app's
    tasks when it is set; None (the default queue) for everything else."""
    queue: str = settings.WEBHOOK_QUEUE
    if queue and name.startswith("webhooks."):
        return {"queue": queue}
    return None
