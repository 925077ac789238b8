"""Request counting shared by the apps: who a request came from, and a fixed
window counter in the Django cache (Redis in production, so every web process
shares the counts; its increment is atomic)."""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time

from django.conf import settings
from django.core.cache import cache
from django.http import HttpRequest

from core.errors import Throttled


def client_address(request: HttpRequest) -> str:
    """The address the request came from. With TRUSTED_PROXY_COUNT = n > 0 the
    n-th entry from the right of X-Forwarded-For is the client (each trusted
    proxy appends the address it saw); entries further left are whatever the
    client chose to send and are ignored."""
    remote = request.META.get("REMOTE_ADDR", "") or ""
    proxies = settings.TRUSTED_PROXY_COUNT
    if proxies > 0:
        forwarded = [a.strip() for a in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",") if a.strip()]
        if forwarded:
            remote = forwarded[-min(proxies, len(forwarded))]
    return remote


UNKNOWN_ADDRESS = "unknown"


def address_bucket(address: str) -> str:
    """What a client address counts as: IPv4 addresses one by one (an
    IPv4-mapped IPv6 address as its IPv4 one); an IPv6 client usually holds a
    whole /64, so it counts as its /64. UNKNOWN_ADDRESS for one that does not
    parse."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return UNKNOWN_ADDRESS
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def _rate_key(*, scope: str, ident: str, slot: int) -> str:
    digest = hashlib.sha256(ident.encode()).hexdigest()[:32]
    return f"rate:{scope}:{digest}:{slot}"


def rate_hit(*, scope: str, ident: str, limit: int, window_seconds: int) -> int:
    """Count one request of `ident` in the current window of `scope`. Returns 0
    while the window holds at most `limit` of them, else the seconds until the
    window ends (for `Retry-After`)."""
    now = time.time()
    slot = int(now // window_seconds)
    key = _rate_key(scope=scope, ident=ident, slot=slot)
    cache.add(key, 0, timeout=window_seconds + 1)
    try:
        count = cache.incr(key)
    except ValueError:  # expired between add and incr
        cache.add(key, 1, timeout=window_seconds + 1)
        count = 1
    if count <= limit:
        return 0
    return max(1, math.ceil((slot + 1) * window_seconds - now))


def rate_give_back(*, scope: str, ident: str, window_seconds: int) -> None:
    """Take back one count of `ident` in the current window of `scope` (rate_hit):
    what it counted turned out to cost nothing."""
    key = _rate_key(scope=scope, ident=ident, slot=int(time.time() // window_seconds))
    try:
        if cache.decr(key) < 0:
            cache.set(key, 0, timeout=window_seconds + 1)
    except ValueError:  # the window ended meanwhile: nothing to give back
        pass


def rate_limit(*, scope: str, ident: str, limit: int, window_seconds: int, message: str) -> None:
    """rate_hit, refusing past `limit`: core.errors.Throttled (429 `throttled`,
    `Retry-After`) with `message`. A `limit` of 0 is no limit."""
    if not limit:
        return
    wait = rate_hit(scope=scope, ident=ident, limit=limit, window_seconds=window_seconds)
    if wait:
        raise Throttled(retry_after=wait, message=message)
