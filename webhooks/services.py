"""Customer webhooks: endpoints, emitting events, delivering them.

The rest of the system calls `event_emit` inside its own transaction; the
event and one delivery per subscribed endpoint commit with the caller's
change, and the first attempts are queued on commit. Every attempt after
that is made by `deliveries_sweep`, a periodic job that takes each due
delivery under a row lock (`SKIP LOCKED`), so a lost task message delays an
attempt by one sweep at most and two workers never send the same attempt.

Targets are checked against SSRF when a URL is registered and again at every
attempt (webhooks.targets, webhooks.transport). Deliveries are signed per the
Standard Webhooks specification (webhooks.signing); a rotated secret keeps
signing beside the new one for WEBHOOK_SECRET_ROTATION_OVERLAP.

Sections: constants; the request; endpoints; emitting; delivering.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.audit import AuditAction, audit_record
from core.db import locked_or_404
from core.errors import Conflict, DomainError, NotFound
from core.tasks import task_queue_on_commit
from core.throttle import rate_limit
from webhooks import transport
from webhooks.failures import Failure
from webhooks.models import (
    WEBHOOK_EVENTS,
    DeliveryStatus,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)
from webhooks.signing import secret_generate, signature_headers
from webhooks.targets import target_resolve
from webhooks.transport import ERROR_MAX, PostResult

log = logging.getLogger(__name__)

# =============================================================================
# Constants
# =============================================================================

PING_EVENT = "ping"
# Waits after failed attempt 1, 2, ... before the next one: 6 attempts at most.
RETRY_BACKOFF = (
    timedelta(seconds=10),
    timedelta(minutes=1),
    timedelta(minutes=10),
    timedelta(hours=1),
    timedelta(hours=6),
)
MAX_ATTEMPTS = len(RETRY_BACKOFF) + 1
USER_AGENT = "GPU-Rent-Hub-Webhooks/1"
SWEEP_BATCH = 100  # deliveries one sweep run attempts at most; the next run takes the rest
_DESCRIPTION_MAX = 200
# Task names (webhooks.tasks): queued by name, so this module imports no tasks module.
TASK_DELIVERY_ATTEMPT = "webhooks.delivery_attempt"

# =============================================================================
# The request
# =============================================================================


def _iso(value: datetime) -> str:
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def event_body(*, event: WebhookEvent) -> bytes:
    """The JSON a delivery posts: the same bytes on every attempt."""
    payload = {"id": str(event.id), "type": event.type, "created_at": _iso(event.created_at), "data": event.data}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()


def signing_secrets(*, endpoint: WebhookEndpoint, now: datetime) -> list[str]:
    """The secrets an attempt at `now` is signed with: the current one, and
    the one it replaced while that is in its overlap window."""
    valid = [endpoint.secret]
    if endpoint.previous_secret and endpoint.previous_secret_expires_at and now < endpoint.previous_secret_expires_at:
        valid.append(endpoint.previous_secret)
    return valid


def delivery_headers(*, event: WebhookEvent, secrets: list[str], timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        **signature_headers(msg_id=str(event.id), timestamp=timestamp, body=body, secrets=secrets),
    }


# =============================================================================
# Endpoints
# =============================================================================


@dataclass(frozen=True)
class EndpointWithSecret:
    endpoint: WebhookEndpoint
    secret: str  # shown to the customer once


def _events_normalize(events: Iterable[str]) -> list[str]:
    """The subscribed types in their canonical order, or `invalid_events`."""
    chosen = list(events) if not isinstance(events, str) else [events]
    unknown = sorted({str(e) for e in chosen} - set(WEBHOOK_EVENTS))
    if unknown or not chosen:
        raise DomainError(
            "invalid_events",
            "Choose one or more of the event types." if not unknown else f"Unknown event type: {unknown[0]}.",
            details={"unknown": unknown, "allowed": list(WEBHOOK_EVENTS)},
        )
    return [e for e in WEBHOOK_EVENTS if e in chosen]


def _description_check(description: str) -> str:
    description = description.strip()
    if len(description) > _DESCRIPTION_MAX:
        raise DomainError("invalid", f"A description has at most {_DESCRIPTION_MAX} characters.")
    return description


def _endpoint_locked(*, account: Any, endpoint_id: int, key: bool = False) -> WebhookEndpoint:
    # FOR NO KEY UPDATE for changes, so emitters holding FOR KEY SHARE are not
    # held up; FOR UPDATE (key=True) for deletion, which waits for them.
    return locked_or_404(
        WebhookEndpoint.objects.filter(account=account),
        pk=endpoint_id,
        no_key=not key,
        message="No such webhook endpoint.",
        code="webhook_not_found",
    )


def endpoint_create(
    *, account: Any, url: str, events: Iterable[str], description: str = "", is_active: bool = True
) -> EndpointWithSecret:
    """Register an endpoint; the secret is generated here and returned once."""
    target_resolve(url=url)
    chosen = _events_normalize(events)
    description = _description_check(description)
    with transaction.atomic():
        # One at a time per account, so the limit holds under concurrent requests.
        list(get_user_model().objects.select_for_update(no_key=True).filter(pk=account.pk).values_list("pk", flat=True))
        limit = settings.WEBHOOK_MAX_ENDPOINTS_PER_ACCOUNT
        if WebhookEndpoint.objects.filter(account=account).count() >= limit:
            raise Conflict(
                "webhook_limit_reached",
                f"An account has at most {limit} webhook endpoints.",
                details={"limit": limit},
            )
        secret = secret_generate()
        endpoint = WebhookEndpoint.objects.create(
            account=account, url=url, events=chosen, secret=secret, description=description, is_active=is_active
        )
        audit_record(
            actor=account,
            action=AuditAction.WEBHOOK_CREATE,
            obj=endpoint,
            changes={"url": url, "events": chosen, "is_active": is_active},
        )
    return EndpointWithSecret(endpoint=endpoint, secret=secret)


_UNSET: Any = object()


def endpoint_update(
    *,
    account: Any,
    endpoint_id: int,
    url: str = _UNSET,
    events: Iterable[str] = _UNSET,
    description: str = _UNSET,
    is_active: bool = _UNSET,
) -> WebhookEndpoint:
    """Change what is given. Pending deliveries go to the new URL (and are
    signed with the current secret) at their next attempt."""
    changes: dict[str, Any] = {}
    if url is not _UNSET:
        target_resolve(url=url)
        changes["url"] = url
    if events is not _UNSET:
        changes["events"] = _events_normalize(events)
    if description is not _UNSET:
        changes["description"] = _description_check(description)
    if is_active is not _UNSET:
        changes["is_active"] = bool(is_active)
    with transaction.atomic():
        endpoint = _endpoint_locked(account=account, endpoint_id=endpoint_id)
        diff = {k: [getattr(endpoint, k), v] for k, v in changes.items() if getattr(endpoint, k) != v}
        if diff:
            for name, (_old, new) in diff.items():
                setattr(endpoint, name, new)
            endpoint.save(update_fields=list(diff))
            audit_record(actor=account, action=AuditAction.WEBHOOK_UPDATE, obj=endpoint, changes=diff)
    return endpoint


def endpoint_delete(*, account: Any, endpoint_id: int) -> None:
    """Delete an endpoint with its delivery log. Waits for an attempt in
    flight and for transactions emitting to it, so neither sees it vanish."""
    with transaction.atomic():
        endpoint = _endpoint_locked(account=account, endpoint_id=endpoint_id, key=True)
        list(WebhookDelivery.objects.select_for_update().filter(endpoint=endpoint).values_list("pk", flat=True))
        audit_record(actor=account, action=AuditAction.WEBHOOK_DELETE, obj=endpoint, changes={"url": endpoint.url})
        endpoint.delete()


def endpoint_secret_rotate(
    *, account: Any, endpoint_id: int, overlap: timedelta | None = None, now: datetime | None = None
) -> EndpointWithSecret:
    """A new secret, returned once, that signs every attempt from now on. The
    secret it replaces keeps signing beside it for `overlap` (default
    WEBHOOK_SECRET_ROTATION_OVERLAP; zero ends it at once, for a leaked
    secret), so a receiver can switch without failing a delivery. A secret
    still in its overlap from an earlier rotation stops at once."""
    overlap = settings.WEBHOOK_SECRET_ROTATION_OVERLAP if overlap is None else overlap
    if overlap < timedelta(0) or overlap > settings.WEBHOOK_SECRET_ROTATION_OVERLAP:
        raise DomainError(
            "invalid_overlap",
            "The overlap is between zero and the configured maximum.",
            details={"max_seconds": int(settings.WEBHOOK_SECRET_ROTATION_OVERLAP.total_seconds())},
        )
    now = now or timezone.now()
    with transaction.atomic():
        endpoint = _endpoint_locked(account=account, endpoint_id=endpoint_id)
        if overlap > timedelta(0):
            endpoint.previous_secret, endpoint.previous_secret_expires_at = endpoint.secret, now + overlap
        else:
            endpoint.previous_secret, endpoint.previous_secret_expires_at = "", None
        endpoint.secret = secret = secret_generate()
        endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
        audit_record(
            actor=account,
            action=AuditAction.WEBHOOK_ROTATE_SECRET,
            obj=endpoint,
            changes={"previous_secret_expires_at": endpoint.previous_secret_expires_at},
        )
    return EndpointWithSecret(endpoint=endpoint, secret=secret)


def _endpoint_must_be_active(endpoint: WebhookEndpoint) -> None:
    if not endpoint.is_active:
        raise Conflict("webhook_inactive", "This endpoint is switched off; switch it on first.")


def _manual_delivery_counted(*, account: Any) -> None:
    """Count a delivery the account asks for by hand (a ping, a redelivery):
    each takes a worker for up to MAX_ATTEMPTS attempts of up to
    WEBHOOK_TIMEOUT_SECONDS, on the queue payments are watched from. Past
    WEBHOOK_MANUAL_PER_ACCOUNT in the window, 429 `throttled` with Retry-After."""
    rate_limit(
        scope="webhook-manual",
        ident=str(account.pk),
        limit=settings.WEBHOOK_MANUAL_PER_ACCOUNT,
        window_seconds=settings.WEBHOOK_MANUAL_WINDOW_SECONDS,
        message="Too many pings and redeliveries from this account.",
    )


def endpoint_ping(*, account: Any, endpoint_id: int) -> WebhookDelivery:
    """A `ping` event to this endpoint alone, subscribed or not; the attempt
    is queued on commit and retried like any other delivery. Counted by
    _manual_delivery_counted."""
    _manual_delivery_counted(account=account)
    with transaction.atomic():
        endpoint = _endpoint_locked(account=account, endpoint_id=endpoint_id)
        _endpoint_must_be_active(endpoint)
        now = timezone.now()
        event = WebhookEvent.objects.create(
            account=account, type=PING_EVENT, data={"endpoint_id": endpoint.pk}, created_at=now
        )
        delivery = WebhookDelivery.objects.create(event=event, endpoint=endpoint, created_at=now, next_attempt_at=now)
        audit_record(actor=account, action=AuditAction.WEBHOOK_PING, obj=endpoint, changes={"event": str(event.id)})
        _attempts_queue_on_commit([delivery.pk])
    return delivery


def delivery_redeliver(*, account: Any, endpoint_id: int, delivery_id: int) -> WebhookDelivery:
    """One more attempt now, whatever the delivery's state. It counts as an
    attempt: when it fails, retries follow the schedule while the delivery
    has had fewer than MAX_ATTEMPTS attempts, and it is `failed` after that.
    Counted by _manual_delivery_counted."""
    _manual_delivery_counted(account=account)
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.filter(account=account, pk=endpoint_id).first()
        if endpoint is None:
            raise NotFound("No such webhook endpoint.", code="webhook_not_found")
        # Waits for an attempt in flight, then makes the delivery due now.
        delivery = locked_or_404(
            WebhookDelivery.objects.filter(endpoint=endpoint),
            pk=delivery_id,
            message="No such delivery.",
            code="delivery_not_found",
        )
        _endpoint_must_be_active(endpoint)
        before = delivery.status
        delivery.status = DeliveryStatus.PENDING
        delivery.next_attempt_at = timezone.now()
        delivery.save(update_fields=["status", "next_attempt_at"])
        audit_record(
            actor=account,
            action=AuditAction.WEBHOOK_REDELIVER,
            obj=delivery,
            changes={"status": [before, delivery.status]},
        )
        _attempts_queue_on_commit([delivery.pk])
    return delivery


# =============================================================================
# Emitting
# =============================================================================


def event_subscribers_hold(*, account: Any) -> list[int]:
    """Ids of the account's active endpoints. On PostgreSQL they are held
    FOR KEY SHARE until the caller commits: deleting an endpoint waits for
    this transaction instead of failing its commit on the new deliveries'
    foreign key, and emitters do not block one another. A caller that emits
    while it holds a busy lock reads them before it takes the lock and hands
    them to event_emit (`subscribers`)."""
    if connection.vendor != "postgresql":
        return list(
            WebhookEndpoint.objects.filter(account=account, is_active=True).order_by("pk").values_list("pk", flat=True)
        )
    table = WebhookEndpoint._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f'SELECT "id" FROM "{table}" WHERE "account_id" = %s AND "is_active" ORDER BY "id" FOR KEY SHARE',
            [account.pk],
        )
        return [row[0] for row in cursor.fetchall()]


def _json_plain(data: dict) -> dict:
    """`data` as stored and sent: Decimals and UUIDs become strings,
    datetimes ISO 8601."""
    return json.loads(json.dumps(data, cls=DjangoJSONEncoder))


def event_emit(
    *,
    account: Any,
    type: str,
    data: dict | Callable[[], dict],
    subscribers: list[int] | None = None,
) -> WebhookEvent | None:
    """Record event `type` for `account` inside the caller's transaction, with
    one delivery per active endpoint subscribed to it; the first attempts are
    queued when the caller commits (and the sweep makes them if that queueing
    is lost). Returns None, recording nothing, when no endpoint subscribes.
    `data` may be a callable: it is built only when someone subscribes.
    `subscribers`: the account's endpoints as event_subscribers_hold read them
    earlier in this transaction (read here otherwise).
    An unknown type is a programming error: ValueError."""
    if type not in WEBHOOK_EVENTS:
        raise ValueError(f"Unknown webhook event type {type!r}; known: {', '.join(WEBHOOK_EVENTS)}")
    # Part of the caller's transaction, without a savepoint of its own: an order
    # emits while it holds the invoice number's lock, and a savepoint is two
    # more round trips under it. An error here fails the caller's transaction.
    with transaction.atomic(savepoint=False):
        ids = event_subscribers_hold(account=account) if subscribers is None else subscribers
        if not ids:
            return None
        endpoints = [e for e in WebhookEndpoint.objects.filter(pk__in=ids).order_by("pk") if type in e.events]
        if not endpoints:
            return None
        if callable(data):
            data = data()
        if not isinstance(data, dict):
            raise ValueError("Webhook event data is a dict.")
        payload = _json_plain(data)
        now = timezone.now()
        event = WebhookEvent.objects.create(account=account, type=type, data=payload, created_at=now)
        deliveries = WebhookDelivery.objects.bulk_create(
            [WebhookDelivery(event=event, endpoint=e, created_at=now, next_attempt_at=now) for e in endpoints]
        )
        _attempts_queue_on_commit([d.pk for d in deliveries])
    return event


def _attempts_queue_on_commit(delivery_ids: list[int]) -> None:
    # robust: a broker that is down must not fail the caller after its commit;
    # the deliveries are due now, so the next sweep attempts them instead.
    for delivery_id in delivery_ids:
        task_queue_on_commit(TASK_DELIVERY_ATTEMPT, delivery_id, robust=True)


# =============================================================================
# Delivering
# =============================================================================


def _due(now: datetime) -> QuerySet[WebhookDelivery]:
    return WebhookDelivery.objects.filter(
        status=DeliveryStatus.PENDING, next_attempt_at__lte=now, endpoint__is_active=True
    )


def _attempt(delivery: WebhookDelivery) -> WebhookAttempt:
    """Send one attempt of a delivery the caller holds locked, log it, and
    decide what comes next."""
    endpoint, event = delivery.endpoint, delivery.event
    at = timezone.now()
    timestamp = int(at.timestamp())
    started = time.monotonic()
    try:
        body = event_body(event=event)
        secrets = signing_secrets(endpoint=endpoint, now=at)
        headers = delivery_headers(event=event, secrets=secrets, timestamp=timestamp, body=body)
        result = transport.post(url=endpoint.url, headers=headers, body=body, timeout=settings.WEBHOOK_TIMEOUT_SECONDS)
    except Exception as exc:  # a bug must not leave the delivery at the head of the queue forever
        log.exception("webhook delivery %s: unexpected error", delivery.pk)
        result = PostResult(None, "Internal error; it has been logged.", Failure.INTERNAL_ERROR, type(exc).__name__)
    duration_ms = int((time.monotonic() - started) * 1000)
    if result.detail:  # the raw error, for operators: the customer reads the category
        log.info("webhook delivery %s: %s (%s)", delivery.pk, result.category, result.detail)
    attempt = WebhookAttempt.objects.create(
        delivery=delivery,
        at=at,
        status_code=result.status_code,
        error_category=result.category,
        error=result.error[:ERROR_MAX],
        duration_ms=duration_ms,
    )
    delivery.attempts += 1
    if result.ok:
        delivery.status = DeliveryStatus.SUCCEEDED
        delivery.delivered_at = at
        delivery.next_attempt_at = None
    elif delivery.attempts >= MAX_ATTEMPTS:
        delivery.status = DeliveryStatus.FAILED
        delivery.next_attempt_at = None
    else:
        delivery.status = DeliveryStatus.PENDING
        # Counted from the end of this attempt, so a slow failure is never retried at once.
        delivery.next_attempt_at = timezone.now() + RETRY_BACKOFF[delivery.attempts - 1]
    delivery.save(update_fields=["status", "attempts", "delivered_at", "next_attempt_at"])
    return attempt


def _locked(queryset: QuerySet[WebhookDelivery]) -> QuerySet[WebhookDelivery]:
    return queryset.select_related("event", "endpoint").select_for_update(skip_locked=True, of=("self",))


def delivery_attempt(*, delivery_id: int) -> WebhookAttempt | None:
    """Attempt the delivery if it is due and no one else is attempting it
    (the task queued on commit). None when there was nothing to do."""
    with transaction.atomic():
        delivery = _locked(_due(timezone.now()).filter(pk=delivery_id)).first()
        if delivery is None:
            return None
        return _attempt(delivery)


def deliveries_sweep(*, limit: int = SWEEP_BATCH) -> int:
    """Attempt every due delivery (up to `limit`), oldest due first, each in
    its own transaction under a row lock that other sweeps skip. Returns the
    number of attempts made; a run with nothing due changes nothing."""
    made = 0
    while made < limit:
        with transaction.atomic():
            delivery = _locked(_due(timezone.now()).order_by("next_attempt_at", "pk")).first()
            if delivery is None:
                break
            _attempt(delivery)
        made += 1
    return made
