"""Periodic billing jobs: thin callers of services."""

from celery import shared_task

from billing import services
from billing.tasks_rates import rate_samples_prune_task, rates_refresh_task  # noqa: F401  (registers them)


@shared_task(name="billing.invoices_advance")
def invoices_advance() -> int:
    """Expire, invalidate and credit what time has decided."""
    return services.invoices_advance_due()
