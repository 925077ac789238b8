"""Periodic billing jobs: thin callers of services."""

from celery import shared_task

from billing import services


@shared_task(name="billing.invoices_advance")
def invoices_advance() -> int:
    """Expire, invalidate and credit what time has decided."""
    return services.invoices_advance_due()
