"""Periodic billing jobs: thin callers of services."""

from typing import Any

from celery import shared_task

from billing import services
from billing.tasks_rates import rate_samples_prune_task, rates_refresh_task  # noqa: F401  (registers them)


@shared_task(name="billing.invoices_advance")
def invoices_advance() -> int:
    """Expire, invalidate and credit what time has decided."""
    return services.invoices_advance_due()


@shared_task(name="billing.chain_scan")
def chain_scan(currency: str) -> dict[str, Any]:
    """One run of a chain's watcher (a single flight per chain; see billing.chains.watchers)."""
    from billing.chains.watchers import chain_scan as scan

    return scan(currency=currency).as_dict()
