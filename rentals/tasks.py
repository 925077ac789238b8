"""Celery tasks of the rentals app: thin callers of services. The periodic
ones are idempotent (a run with nothing due changes nothing)."""

from celery import shared_task

from rentals import services
from rentals.services.idempotency import idempotency_keys_prune

# --- Lifecycle ----------------------------------------------------------------


@shared_task(name="rentals.orders_reconcile")
def orders_reconcile() -> int:
    return services.orders_reconcile()


@shared_task(name="rentals.renewals_issue")
def renewals_issue() -> int:
    return services.rentals_renewals_issue()


@shared_task(name="rentals.suspend_due")
def suspend_due() -> int:
    return services.rentals_suspend_due()


@shared_task(name="rentals.terminate_due")
def terminate_due() -> int:
    return services.rentals_terminate_due()


@shared_task(name="rentals.provisioning_deliver")
def provisioning_deliver(job_id: str) -> bool:
    return services.provisioning_job_deliver(job_id=job_id)


@shared_task(name="rentals.provisioning_retry")
def provisioning_retry() -> int:
    due = services.provisioning_jobs_due()
    return sum(services.provisioning_job_deliver(job_id=job_id) for job_id in due)


@shared_task(name="rentals.idempotency_keys_prune")
def idempotency_keys_prune_task() -> int:
    return idempotency_keys_prune()
