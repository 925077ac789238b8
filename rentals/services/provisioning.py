"""Telling the operators' systems what to do with a server.

`PROVISIONER=manual`: jobs are recorded; staff act on them in admin (mark
provisioned with the addresses). `PROVISIONER=webhook`: each job is POSTed as
signed JSON to `PROVISIONER_URL`; the operator's system calls
`POST /api/v1/ops/rentals/{id}/ready` when the server is handed over. Jobs are
delivered after commit and retried by a periodic sweep until accepted.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta
from typing import Any

import httpx
from django.conf import settings
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.signing import signature_header
from core.tasks import task_queue_on_commit
from rentals.models import ProvisioningAction, ProvisioningJob, Rental

log = logging.getLogger(__name__)

# The task that delivers a job (rentals.tasks), queued by name.
TASK_PROVISIONING_DELIVER = "rentals.provisioning_deliver"
# Delay before retry n (n = attempts so far); the last value repeats.
RETRY_DELAYS = (timedelta(seconds=10), timedelta(minutes=1), timedelta(minutes=10), timedelta(hours=1))


def provisioner_name() -> str:
    return str(settings.PROVISIONER)


# What a new job makes moot among the rental's jobs not yet delivered: a power-on
# after a power-off still unsent (a renewal paid while the operators' endpoint was
# down), and the reverse; a deprovision anything before it. A job sent late would
# otherwise undo the newer one (a paid server switched off, a terminated rental set
# up on cards sold again).
SUPERSEDES: dict[str, tuple[str, ...]] = {
    ProvisioningAction.POWER_ON: (ProvisioningAction.POWER_OFF,),
    ProvisioningAction.POWER_OFF: (ProvisioningAction.POWER_ON,),
    ProvisioningAction.DEPROVISION: (
        ProvisioningAction.PROVISION,
        ProvisioningAction.POWER_ON,
        ProvisioningAction.POWER_OFF,
    ),
}


def _payload(job_id: str, rental: Rental, action: str, created_at: datetime) -> dict[str, Any]:
    return {
        "job": job_id,
        "action": action,
        # The operators' system applies a rental's jobs in this order (they are sent in it too).
        "created_at": created_at.isoformat().replace("+00:00", "Z"),
        "rental": {
            "id": rental.pk,
            "host": rental.host.name,
            "slots": sorted(rental.host.slots.filter(holder=rental.holder).values_list("index", flat=True)),
            "region": rental.region_code,
            "gpu": rental.gpu_slug,
            "gpu_count": rental.gpu_count,
            "template": rental.template_slug,
            "addons": rental.addons,
            "ssh_keys": [k["public_key"] for k in rental.ssh_keys],
        },
        "ready_url": f"{settings.SITE_URL.rstrip('/')}/api/v1/ops/rentals/{rental.pk}/ready",
    }


def provisioning_job_create(*, rental: Rental, action: str, now: datetime | None = None) -> ProvisioningJob:
    """Record a job inside the caller's transaction (call it while the rental's
    slots still name it: the payload lists them); with the webhook provisioner
    it is sent once the transaction commits. Jobs of the rental it makes moot
    and not yet delivered are superseded (SUPERSEDES): never sent."""
    now = now or timezone.now()
    ProvisioningJob.objects.filter(
        rental=rental, action__in=SUPERSEDES.get(action, ()), delivered_at__isnull=True, superseded_at__isnull=True
    ).update(superseded_at=now)
    job = ProvisioningJob(rental=rental, action=action, created_at=now, payload={})
    job.payload = _payload(str(job.id), rental, action, now)
    job.save()
    if provisioner_name() == "webhook":
        task_queue_on_commit(TASK_PROVISIONING_DELIVER, str(job.pk))
    log.info("rental %s: %s job %s (%s)", rental.pk, action, job.pk, provisioner_name())
    return job


def _unsent() -> QuerySet[ProvisioningJob]:
    """Jobs still to send: not accepted, not superseded, and not reported done
    (staff mark a rental provisioned by hand: its job was recorded, never sent)."""
    return ProvisioningJob.objects.filter(
        delivered_at__isnull=True, superseded_at__isnull=True, completed_at__isnull=True
    )


def provisioning_job_deliver(*, job_id: str, now: datetime | None = None) -> bool:
    """POST one job to the operators' URL. True once accepted (2xx), or
    superseded (nothing to send). A rental's jobs go out in the order they were
    made: one waits (False, retried by the sweep) while an earlier one is
    still undelivered."""
    with transaction.atomic():
        job = ProvisioningJob.objects.select_for_update(skip_locked=True).filter(pk=job_id).first()
        if job is None or job.delivered_at is not None or job.superseded_at is not None:
            return job is not None
        earlier = _unsent().filter(rental_id=job.rental_id, created_at__lt=job.created_at).exists()
        if earlier:
            job.last_error = "waiting for an earlier job of this rental"
            job.save(update_fields=["last_error"])
            return False
        body = json.dumps(job.payload, sort_keys=True).encode()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "GPU-Rent-Hub-Provisioning/1",
            "GRH-Job": str(job.pk),
            "GRH-Signature": signature_header(secret=settings.PROVISIONER_SECRET, body=body),
        }
        job.attempts += 1
        try:
            resp = httpx.post(
                settings.PROVISIONER_URL,
                content=body,
                headers=headers,
                timeout=settings.PROVISIONER_TIMEOUT_SECONDS,
                follow_redirects=False,
            )
            ok = 200 <= resp.status_code < 300
            job.last_error = "" if ok else f"HTTP {resp.status_code}"
        except httpx.HTTPError as exc:
            ok = False
            job.last_error = f"{exc.__class__.__name__}: {exc}"[:500]
        if ok:
            job.delivered_at = now or timezone.now()
        job.save(update_fields=["attempts", "last_error", "delivered_at"])
    if not ok:
        log.warning("provisioning job %s (%s) not accepted: %s", job_id, job.action, job.last_error)
    return ok


def provisioning_jobs_due(*, now: datetime | None = None) -> list[str]:
    """Webhook jobs not yet accepted whose next retry has come."""
    if provisioner_name() != "webhook":
        return []
    now = now or timezone.now()
    due = []
    for job in _unsent().order_by("created_at").only("id", "attempts", "created_at"):
        delay = sum(RETRY_DELAYS[min(i, len(RETRY_DELAYS) - 1)].total_seconds() for i in range(job.attempts))
        if job.created_at + timedelta(seconds=delay) <= now:
            due.append(str(job.pk))
    return due


def provisioning_job_complete(*, rental: Rental, action: str, now: datetime | None = None) -> None:
    ProvisioningJob.objects.filter(rental=rental, action=action, completed_at__isnull=True).update(
        completed_at=now or timezone.now()
    )


__all__ = [
    "ProvisioningAction",
    "provisioner_name",
    "provisioning_job_complete",
    "provisioning_job_create",
    "provisioning_job_deliver",
    "provisioning_jobs_due",
]
