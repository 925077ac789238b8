"""Single flight across processes and machines, through a row in the database.

`lease_acquire` takes the named lease when it is free or expired and returns a
token; `lease_renew` extends it while work goes on; `lease_release` frees it.
A crashed holder loses the lease when it expires, so nothing waits forever.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from core.models import Lease


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def lease_acquire(*, name: str, ttl: timedelta) -> str | None:
    """The owner token when the lease was taken, None when someone else holds it."""
    owner = _owner()
    now = timezone.now()
    try:
        with transaction.atomic():
            Lease.objects.get_or_create(name=name)
    except IntegrityError:
        pass  # created concurrently: fine, the update below decides
    taken = Lease.objects.filter(Q(expires_at__isnull=True) | Q(expires_at__lt=now), name=name).update(
        owner=owner, expires_at=now + ttl
    )
    return owner if taken == 1 else None


def lease_renew(*, name: str, owner: str, ttl: timedelta) -> bool:
    return Lease.objects.filter(name=name, owner=owner).update(expires_at=timezone.now() + ttl) == 1


def lease_release(*, name: str, owner: str) -> None:
    Lease.objects.filter(name=name, owner=owner).update(owner="", expires_at=None)


@contextlib.contextmanager
def single_flight(*, name: str, ttl: timedelta) -> Iterator[str | None]:
    """`with single_flight(name=..., ttl=...) as owner:` owner is None when busy."""
    owner = lease_acquire(name=name, ttl=ttl)
    try:
        yield owner
    finally:
        if owner is not None:
            lease_release(name=name, owner=owner)
