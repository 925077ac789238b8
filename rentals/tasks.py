"""Celery tasks of the rentals app (webhook delivery): thin callers of
rentals.webhooks."""

from celery import shared_task

from rentals import webhooks


@shared_task(name="rentals.webhook_delivery_attempt")
def webhook_delivery_attempt(delivery_id: int) -> bool:
    """The first attempt of a delivery, queued when its event commits. Does
    nothing when the sweep got there first."""
    return webhooks.delivery_attempt(delivery_id=delivery_id) is not None


@shared_task(name="rentals.webhook_deliveries_sweep")
def webhook_deliveries_sweep() -> int:
    """Every attempt that has come due (retries, and first attempts whose
    task was lost)."""
    return webhooks.deliveries_sweep()
