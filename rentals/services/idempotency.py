"""Idempotency-Key: the same key with the same body returns the first
response; the same key with another body is refused; keys live 24 hours.

The key row is inserted in the same transaction as the work it guards, so a
second request with the same key waits on the unique index until the first
commits, then answers with the stored response: one order, however many
retries race each other.

A request refused as it was sent (400: a field, a rule between fields, a
workload that does not fit) or for its rate (429) did nothing: it is not
remembered, and the key may be sent again, with that body or a corrected one.
So a key costs a stored row only for work that began, and a refusal that
quotes what the client sent (DRF's "is not a valid choice" repeats the value)
is never stored however large it was. New keys are counted per account
(IDEMPOTENCY_KEYS_PER_HOUR): past it, 429, and no row.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Account
from core.api import error_body
from core.errors import DomainError
from core.throttle import rate_give_back, rate_limit
from rentals.models import IdempotencyKey

MAX_KEY_LENGTH = 255
# Refusals that are not remembered: nothing was done (module docstring).
NOT_REMEMBERED = frozenset({400, 429})
KEYS_SCOPE = "idempotency-keys"  # new keys counted per account (IDEMPOTENCY_KEYS_PER_HOUR)


# What no jsonb string holds: NUL and the lone surrogates (a JSON escape like "\udc80" reads as one).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(value: Any) -> Any:
    """`value` as JSON PostgreSQL's jsonb accepts: it stores no NUL (\\u0000) and
    no lone surrogate (\\udc80) in a string, which a client may send (and a
    refusal quote); each is kept as U+FFFD."""
    if isinstance(value, str):
        return _UNSTORABLE.sub("\ufffd", value)
    if isinstance(value, list):
        return [storable(item) for item in value]
    if isinstance(value, dict):
        return {storable(key): storable(item) for key, item in value.items()}
    return value


def _request_hash(body: Any) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def idempotent_call(
    *,
    account: Account,
    key: str,
    scope: str,
    body: Any,
    run: Callable[[], tuple[int, dict[str, Any]]],
    now: datetime | None = None,
) -> tuple[int, dict[str, Any], bool]:
    """(status, body, replayed). `run` does the work and returns its response;
    a DomainError it raises is answered (and remembered) like any response, but
    for a refusal of the request as sent or of its rate (NOT_REMEMBERED), which
    is raised on with the key let go."""
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise DomainError(
            "invalid_idempotency_key", f"An Idempotency-Key is 1 to {MAX_KEY_LENGTH} printable characters."
        )
    now = now or timezone.now()
    digest = _request_hash(body)
    with transaction.atomic():
        IdempotencyKey.objects.filter(
            account=account, scope=scope, key=key, created_at__lt=now - timedelta(hours=settings.IDEMPOTENCY_KEY_HOURS)
        ).delete()
        try:
            with transaction.atomic():
                record = IdempotencyKey.objects.create(
                    account=account, scope=scope, key=key, request_hash=digest, created_at=now
                )
            # A new key is a stored row for IDEMPOTENCY_KEY_HOURS, refusals too: a client
            # sending a fresh key with each of many refused requests would store rows
            # without end. Counted per account; past the limit, 429 (not remembered).
            rate_limit(
                scope=KEYS_SCOPE,
                ident=str(account.pk),
                limit=settings.IDEMPOTENCY_KEYS_PER_HOUR,
                window_seconds=3600,
                message="Too many new Idempotency-Keys from this account in an hour: reuse a key to retry a request.",
            )
        except IntegrityError:
            record = IdempotencyKey.objects.get(account=account, scope=scope, key=key)
            if record.request_hash != digest:
                raise DomainError(
                    "idempotency_key_reused",
                    "This Idempotency-Key was used with a different request body.",
                    status=422,
                    details={"key": key},
                ) from None
            # Written with its response in the transaction that inserted it, which this one waited for.
            assert record.response_status is not None and record.response_body is not None
            return record.response_status, record.response_body, True
        try:
            with transaction.atomic():
                status, response = run()
        except DomainError as exc:
            if exc.status in NOT_REMEMBERED:
                # Leaving the block rolls the key's row back: it stored nothing, so it is not counted.
                if settings.IDEMPOTENCY_KEYS_PER_HOUR:
                    rate_give_back(scope=KEYS_SCOPE, ident=str(account.pk), window_seconds=3600)
                raise
            status, response = exc.status, error_body(exc.code, exc.message, exc.details)
        record.response_status = status
        record.response_body = storable(json.loads(json.dumps(response, default=str)))
        record.save(update_fields=["response_status", "response_body"])
    return status, response, False


def idempotency_keys_prune(*, now: datetime | None = None) -> int:
    now = now or timezone.now()
    deleted, _ = IdempotencyKey.objects.filter(
        created_at__lt=now - timedelta(hours=settings.IDEMPOTENCY_KEY_HOURS)
    ).delete()
    return deleted
