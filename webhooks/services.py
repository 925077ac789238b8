"""Customer webhooks: endpoints, emitting events, signing and delivering them.

The rest of the system calls `event_emit` inside its own transaction; the
event and one delivery per subscribed endpoint commit with the caller's
change, and the first attempts are queued on commit. Every attempt after
that is made by `deliveries_sweep`, a periodic job that takes each due
delivery under a row lock (`SKIP LOCKED`), so a lost task message delays an
attempt by one sweep at most and two workers never send the same attempt.

Targets are checked against SSRF twice: when a URL is registered, and at
every attempt, where the name is resolved, every address is checked and the
connection goes to a checked address (never to a second lookup), while the
Host header and TLS (SNI and certificate checks) stay on the name.

Sections: constants; targets (SSRF); signing and the request body; endpoints;
reads; emitting; delivering.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import secrets
import socket
import ssl
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import certifi
import httpcore
import httpx
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from core.audit import audit_record
from core.errors import Conflict, DomainError, NotFound
from core.signing import signature_header
from rentals.models import (
    WEBHOOK_EVENTS,
    Account,
    DeliveryStatus,
    WebhookAttempt,
    WebhookDelivery,
    WebhookEndpoint,
    WebhookEvent,
)

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
SIGNATURE_HEADER = "GRH-Signature"
USER_AGENT = "GPU-Rent-Hub-Webhooks/1"
SECRET_PREFIX = "whsec_"
SWEEP_BATCH = 100  # deliveries one sweep run attempts at most; the next run takes the rest
DELIVERY_LIST_MAX = 200
_ERROR_MAX = 300  # WebhookAttempt.error
_URL_MAX = 500  # WebhookEndpoint.url
_DESCRIPTION_MAX = 200

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# =============================================================================
# Targets (SSRF)
# =============================================================================

_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")


@dataclass(frozen=True)
class WebhookTarget:
    """A checked URL: where to connect (the addresses) and what to ask for
    (scheme, name, port, path), kept apart so a second DNS answer never
    decides where a request goes."""

    scheme: str
    host: str  # ASCII (IDNA) name or literal address, without brackets
    port: int
    netloc: str  # the Host header: name[:port] as written, IPv6 in brackets
    path: str  # path and query
    addresses: tuple[IpAddress, ...]


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address carries to an IPv4 host, if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_refusal(ip: IpAddress) -> str | None:
    """Why a request may not go to `ip` (a word: loopback, private,
    link_local, multicast, reserved, unspecified, not_global), or None.
    Unspecified and multicast addresses are never targets; the rest are
    allowed when WEBHOOK_ALLOW_PRIVATE_TARGETS is on (local runs, tests)."""
    if isinstance(ip, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(ip)
        if embedded is not None and (reason := address_refusal(embedded)):
            return reason
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if settings.WEBHOOK_ALLOW_PRIVATE_TARGETS:
        return None
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link_local"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private or (ip.version == 6 and (ip.is_site_local or ip in _NAT64_LOCAL)):
        return "private"
    if not ip.is_global:  # e.g. the carrier-grade NAT range 100.64.0.0/10
        return "not_global"
    return None


def _invalid_url(message: str, reason: str) -> DomainError:
    return DomainError("invalid_url", message, details={"reason": reason})


def _resolve(host: str, port: int) -> tuple[IpAddress, ...]:
    try:
        return (ipaddress.ip_address(host),)
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        raise DomainError("unresolvable_host", f"The name {host} does not resolve.", details={"host": host}) from exc
    addresses: list[IpAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        ip = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise DomainError("unresolvable_host", f"The name {host} does not resolve.", details={"host": host})
    return tuple(addresses)


def target_resolve(*, url: str) -> WebhookTarget:
    """Parse `url`, resolve its host and check every address it resolves to.
    DomainError `invalid_url`, `https_required`, `unresolvable_host` or
    `target_not_allowed` (details: address and reason)."""
    if not isinstance(url, str) or not url or len(url) > _URL_MAX:
        raise _invalid_url(f"A webhook URL has 1 to {_URL_MAX} characters.", "length")
    if url != url.strip() or any(ord(c) < 0x21 or ord(c) == 0x7F for c in url):
        raise _invalid_url("A webhook URL has no spaces or control characters.", "characters")
    try:
        parsed = httpx.URL(url)
        host = parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError, ValueError) as exc:
        raise _invalid_url("This is not a valid URL.", "syntax") from exc
    if parsed.scheme not in ("https", "http"):
        raise _invalid_url("A webhook URL starts with https://.", "scheme")
    if parsed.scheme != "https" and not settings.WEBHOOK_ALLOW_PRIVATE_TARGETS:
        raise DomainError("https_required", "Webhooks are delivered over HTTPS only.")
    if parsed.userinfo:
        raise _invalid_url("A webhook URL may not carry a user name or password.", "credentials")
    if not host:
        raise _invalid_url("A webhook URL names a host.", "host")
    port = parsed.port if parsed.port is not None else (443 if parsed.scheme == "https" else 80)
    if not 0 < port < 65536:
        raise _invalid_url("A port is a number from 1 to 65535.", "port")
    addresses = _resolve(host, port)
    for ip in addresses:
        reason = address_refusal(ip)
        if reason is not None:
            raise DomainError(
                "target_not_allowed",
                f"Webhooks are not sent to {reason.replace('_', '-')} addresses ({ip}).",
                details={"address": str(ip), "reason": reason},
            )
    return WebhookTarget(
        scheme=parsed.scheme,
        host=host,
        port=port,
        netloc=parsed.netloc.decode("ascii"),
        path=parsed.raw_path.decode("ascii"),
        addresses=addresses,
    )


# =============================================================================
# Signing and the request body
# =============================================================================


def secret_generate() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def _iso(value: datetime) -> str:
    text = value.astimezone(UTC).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def event_body(*, event: WebhookEvent) -> bytes:
    """The JSON a delivery posts: the same bytes on every attempt."""
    payload = {"id": str(event.id), "type": event.type, "created_at": _iso(event.created_at), "data": event.data}
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False, sort_keys=True).encode()


def delivery_headers(*, event: WebhookEvent, secret: str, timestamp: int, body: bytes) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Webhook-Id": str(event.id),
        "Webhook-Timestamp": str(timestamp),
        SIGNATURE_HEADER: signature_header(secret=secret, body=body, timestamp=timestamp),
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


def _endpoint_locked(*, account: Account, endpoint_id: int, key: bool = False) -> WebhookEndpoint:
    # FOR NO KEY UPDATE for changes, so emitters holding FOR KEY SHARE are not
    # held up; FOR UPDATE (key=True) for deletion, which waits for them.
    endpoint = WebhookEndpoint.objects.select_for_update(no_key=not key).filter(account=account, pk=endpoint_id).first()
    if endpoint is None:
        raise NotFound("No such webhook endpoint.", code="webhook_not_found")
    return endpoint


def endpoint_create(
    *, account: Account, url: str, events: Iterable[str], description: str = "", is_active: bool = True
) -> EndpointWithSecret:
    """Register an endpoint; the secret is generated here and returned once."""
    target_resolve(url=url)
    chosen = _events_normalize(events)
    description = _description_check(description)
    with transaction.atomic():
        # One at a time per account, so the limit holds under concurrent requests.
        list(Account.objects.select_for_update(no_key=True).filter(pk=account.pk).values_list("pk", flat=True))
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
            action="webhook.create",
            obj=endpoint,
            changes={"url": url, "events": chosen, "is_active": is_active},
        )
    return EndpointWithSecret(endpoint=endpoint, secret=secret)


_UNSET: Any = object()


def endpoint_update(
    *,
    account: Account,
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
            audit_record(actor=account, action="webhook.update", obj=endpoint, changes=diff)
    return endpoint


def endpoint_delete(*, account: Account, endpoint_id: int) -> None:
    """Delete an endpoint with its delivery log. Waits for an attempt in
    flight and for transactions emitting to it, so neither sees it vanish."""
    with transaction.atomic():
        endpoint = _endpoint_locked(account=account, endpoint_id=endpoint_id, key=True)
        list(WebhookDelivery.objects.select_for_update().filter(endpoint=endpoint).values_list("pk", flat=True))
        audit_record(actor=account, action="webhook.delete", obj=endpoint, changes={"url": endpoint.url})
        endpoint.delete()


def endpoint_secret_rotate(*, account: Account, endpoint_id: int) -> EndpointWithSecret:
    """A new secret, effective at once (attempts from now on are signed with
    it); returned once."""
    with transaction.atomic():
        endpoint = _endpoint_locked(account=account, endpoint_id=endpoint_id)
        endpoint.secret = secret = secret_generate()
        endpoint.save(update_fields=["secret"])
        audit_record(actor=account, action="webhook.rotate_secret", obj=endpoint)
    return EndpointWithSecret(endpoint=endpoint, secret=secret)


def _endpoint_must_be_active(endpoint: WebhookEndpoint) -> None:
    if not endpoint.is_active:
        raise Conflict("webhook_inactive", "This endpoint is switched off; switch it on first.")


def endpoint_ping(*, account: Account, endpoint_id: int) -> WebhookDelivery:
    """A `ping` event to this endpoint alone, subscribed or not; the attempt
    is queued on commit and retried like any other delivery."""
    with transaction.atomic():
        endpoint = _endpoint_locked(account=account, endpoint_id=endpoint_id)
        _endpoint_must_be_active(endpoint)
        now = timezone.now()
        event = WebhookEvent.objects.create(
            account=account, type=PING_EVENT, data={"endpoint_id": endpoint.pk}, created_at=now
        )
        delivery = WebhookDelivery.objects.create(event=event, endpoint=endpoint, created_at=now, next_attempt_at=now)
        audit_record(actor=account, action="webhook.ping", obj=endpoint, changes={"event": str(event.id)})
        _attempts_queue_on_commit([delivery.pk])
    return delivery


def delivery_redeliver(*, account: Account, endpoint_id: int, delivery_id: int) -> WebhookDelivery:
    """One more attempt now, whatever the delivery's state. It counts as an
    attempt: when it fails, retries follow the schedule while the delivery
    has had fewer than MAX_ATTEMPTS attempts, and it is `failed` after that."""
    with transaction.atomic():
        endpoint = WebhookEndpoint.objects.filter(account=account, pk=endpoint_id).first()
        if endpoint is None:
            raise NotFound("No such webhook endpoint.", code="webhook_not_found")
        # Waits for an attempt in flight, then makes the delivery due now.
        delivery = (
            WebhookDelivery.objects.select_for_update(of=("self",)).filter(endpoint=endpoint, pk=delivery_id).first()
        )
        if delivery is None:
            raise NotFound("No such delivery.", code="delivery_not_found")
        _endpoint_must_be_active(endpoint)
        before = delivery.status
        delivery.status = DeliveryStatus.PENDING
        delivery.next_attempt_at = timezone.now()
        delivery.save(update_fields=["status", "next_attempt_at"])
        audit_record(
            actor=account, action="webhook.redeliver", obj=delivery, changes={"status": [before, delivery.status]}
        )
        _attempts_queue_on_commit([delivery.pk])
    return delivery


# =============================================================================
# Reads
# =============================================================================


def endpoint_list(*, account: Account) -> QuerySet[WebhookEndpoint]:
    return WebhookEndpoint.objects.filter(account=account).order_by("created_at", "id")


def endpoint_get(*, account: Account, endpoint_id: int) -> WebhookEndpoint | None:
    return WebhookEndpoint.objects.filter(account=account, pk=endpoint_id).first()


def _deliveries(*, account: Account, endpoint_id: int) -> QuerySet[WebhookDelivery]:
    return (
        WebhookDelivery.objects.filter(endpoint__account=account, endpoint_id=endpoint_id)
        .select_related("event")
        .prefetch_related(Prefetch("attempt_log", queryset=WebhookAttempt.objects.order_by("at", "id")))
    )


def delivery_list(
    *,
    account: Account,
    endpoint_id: int,
    status: str | None = None,
    before: int | None = None,
    limit: int = 50,
) -> list[WebhookDelivery]:
    """The endpoint's delivery log, newest first, each with its attempts.
    `before` is a delivery id: only older deliveries (the next page)."""
    queryset = _deliveries(account=account, endpoint_id=endpoint_id).order_by("-id")
    if status:
        queryset = queryset.filter(status=status)
    if before is not None:
        queryset = queryset.filter(pk__lt=before)
    return list(queryset[: max(1, min(limit, DELIVERY_LIST_MAX))])


def delivery_get(*, account: Account, endpoint_id: int, delivery_id: int) -> WebhookDelivery | None:
    return _deliveries(account=account, endpoint_id=endpoint_id).filter(pk=delivery_id).first()


# =============================================================================
# Emitting
# =============================================================================


def _subscribed_endpoint_ids(*, account: Account) -> list[int]:
    """Ids of the account's active endpoints. On PostgreSQL they are held
    FOR KEY SHARE until the caller commits: deleting an endpoint waits for
    this transaction instead of failing its commit on the new deliveries'
    foreign key, and emitters do not block one another."""
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
    account: Account,
    type: str,
    data: dict | Callable[[], dict],
) -> WebhookEvent | None:
    """Record event `type` for `account` inside the caller's transaction, with
    one delivery per active endpoint subscribed to it; the first attempts are
    queued when the caller commits (and the sweep makes them if that queueing
    is lost). Returns None, recording nothing, when no endpoint subscribes.
    `data` may be a callable: it is built only when someone subscribes.
    An unknown type is a programming error: ValueError."""
    if type not in WEBHOOK_EVENTS:
        raise ValueError(f"Unknown webhook event type {type!r}; known: {', '.join(WEBHOOK_EVENTS)}")
    with transaction.atomic():
        ids = _subscribed_endpoint_ids(account=account)
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
    def queue() -> None:
        from rentals.tasks import webhook_delivery_attempt

        for delivery_id in delivery_ids:
            webhook_delivery_attempt.delay(delivery_id)

    # robust: a broker that is down must not fail the caller after its commit;
    # the deliveries are due now, so the next sweep attempts them instead.
    transaction.on_commit(queue, robust=True)


# =============================================================================
# Delivering
# =============================================================================


class _DeadlineStream(httpcore.NetworkStream):
    """A connection whose every read, write and TLS handshake ends by one
    deadline, so a slow receiver cannot hold a worker past the timeout."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float) -> None:
        self._stream = stream
        self._deadline = deadline

    def _left(self, timeout: float | None, error: type[Exception]) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise error("timed out")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        stream = self._stream.start_tls(ssl_context, server_hostname, self._left(timeout, httpcore.ConnectTimeout))
        return _DeadlineStream(stream, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.NetworkBackend):
    """Connects to the checked addresses, whatever host name httpcore asks
    for (the name still goes into the Host header and the TLS handshake)."""

    def __init__(self, addresses: tuple[IpAddress, ...], deadline: float) -> None:
        self._addresses = addresses
        self._deadline = deadline
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        failures = []
        for address in self._addresses:
            left = self._deadline - time.monotonic()
            if left <= 0:
                raise httpcore.ConnectTimeout("timed out")
            try:
                stream = self._backend.connect_tcp(
                    str(address),
                    port,
                    timeout=left if timeout is None else min(timeout, left),
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failures.append(f"{address}: {exc}")
                continue
            return _DeadlineStream(stream, self._deadline)
        raise httpcore.ConnectError("; ".join(failures) or "no address")

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        raise httpcore.ConnectError("Webhooks are not sent to local sockets.")


def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context(cafile=certifi.where())


@dataclass(frozen=True)
class PostResult:
    status_code: int | None
    error: str

    @property
    def ok(self) -> bool:
        return self.status_code is not None and 200 <= self.status_code < 300


def _post(*, url: str, headers: dict[str, str], body: bytes, timeout: float) -> PostResult:
    """POST `body` to `url` once: resolve and check the target, connect to a
    checked address, follow no redirect, read no response body."""
    deadline = time.monotonic() + timeout
    try:
        target = target_resolve(url=url)
    except DomainError as exc:
        return PostResult(None, exc.message)
    request_url = httpcore.URL(
        scheme=target.scheme.encode(), host=target.host.encode(), port=target.port, target=target.path.encode()
    )
    request_headers = [(b"Host", target.netloc.encode())] + [(k.encode(), v.encode()) for k, v in headers.items()]
    extensions = {"timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}}
    try:
        with httpcore.ConnectionPool(
            ssl_context=_tls_context(),
            max_connections=1,
            network_backend=_PinnedBackend(target.addresses, deadline),
        ) as pool:
            with pool.stream("POST", request_url, headers=request_headers, content=body, extensions=extensions) as rsp:
                status = rsp.status
    except httpcore.TimeoutException:
        return PostResult(None, f"Timed out after {timeout:g} s.")
    except httpcore.ConnectError as exc:
        return PostResult(None, f"Could not connect: {exc}"[:_ERROR_MAX])
    except (httpcore.NetworkError, httpcore.ProtocolError, httpcore.UnsupportedProtocol) as exc:
        return PostResult(None, f"{type(exc).__name__}: {exc}"[:_ERROR_MAX])
    if 300 <= status < 400:
        return PostResult(status, "Redirects are not followed.")
    return PostResult(status, "")


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
    body = event_body(event=event)
    headers = delivery_headers(event=event, secret=endpoint.secret, timestamp=timestamp, body=body)
    started = time.monotonic()
    try:
        result = _post(url=endpoint.url, headers=headers, body=body, timeout=settings.WEBHOOK_TIMEOUT_SECONDS)
    except Exception as exc:  # a bug must not leave the delivery at the head of the queue forever
        log.exception("webhook delivery %s: unexpected error", delivery.pk)
        result = PostResult(None, f"Internal error ({type(exc).__name__}).")
    duration_ms = int((time.monotonic() - started) * 1000)
    attempt = WebhookAttempt.objects.create(
        delivery=delivery,
        at=at,
        status_code=result.status_code,
        error=result.error[:_ERROR_MAX],
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
