"""Celery tasks of customer webhooks: thin callers of webhooks.services."""

from celery import shared_task

from webhooks import services


@shared_task(name="webhooks.delivery_attempt")
def delivery_attempt(delivery_id: int) -> bool:
    """The first attempt of a delivery, queued when its event commits. Does
    nothing when the sweep got there first."""
    return services.delivery_attempt(delivery_id=delivery_id) is not None


@shared_task(name="webhooks.deliveries_sweep")
def deliveries_sweep() -> int:
    """Every attempt that has come due (retries, and first attempts whose
    task was lost)."""
    return services.deliveries_sweep()
