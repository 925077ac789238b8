"""Periodic exchange-rate jobs: thin callers of billing.rates."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from celery import shared_task
from django.utils import timezone

from billing.rates import rate_samples_prune, rates_refresh

# Market samples are kept this long: enough to answer for any quote made in the
# last month, small enough that the table stays light.
SAMPLE_RETENTION_DAYS = 30


@shared_task(name="billing.rates_refresh")
def rates_refresh_task() -> dict[str, Any]:
    return rates_refresh()


@shared_task(name="billing.rate_samples_prune")
def rate_samples_prune_task(days: int = SAMPLE_RETENTION_DAYS) -> int:
    return rate_samples_prune(before=timezone.now() - timedelta(days=days))
