"""Failed-attempt throttling for password logins and account recovery.

Failures are counted in the Django cache (Redis in production, so every web
process shares the counts) per username and per client address, each in a
fixed window that opens with the first failure. The window's end is stored
beside each count and is what decides; the cache's own expiry only clears
the keys away afterwards. Once either count reaches its
limit, attempts are refused with 429 and `Retry-After` until the window closes,
without checking the password: a throttled username answers the same whether
or not the account exists.

Settings: AUTH_FAILURES_PER_USERNAME, AUTH_FAILURES_PER_ADDRESS,
AUTH_FAILURE_WINDOW_SECONDS, TRUSTED_PROXY_COUNT.
"""

from __future__ import annotations

import hashlib
import ipaddress
import math
import time

from django.conf import settings
from django.core.cache import cache

from core.errors import DomainError
from core.throttle import client_address  # noqa: F401  (the views import it from here)

_KEY_PREFIX = "authfail"


class AuthThrottled(DomainError):
    """Too many failed attempts. `retry_after` (seconds) goes into the
    `Retry-After` header."""

    status = 429

    def __init__(self, *, retry_after: int) -> None:
        super().__init__(
            "throttled",
            f"Too many failed attempts. Try again in {retry_after} seconds.",
            details={"retry_after_seconds": retry_after},
        )
        self.retry_after = retry_after


# --- The client's address -----------------------------------------------------


def _address_bucket(address: str) -> str:
    """IPv4 addresses count one by one; an IPv6 client usually holds a whole
    /64, so its failures count against the /64."""
    try:
        ip = ipaddress.ip_address(address.strip("[]"))
    except ValueError:
        return "unknown"
    if ip.version == 6:
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


# --- Counters -----------------------------------------------------------------


def _keys(*, username: str, address: str) -> list[tuple[str, int]]:
    user_digest = hashlib.sha256(username.strip().lower().encode()).hexdigest()
    addr_digest = hashlib.sha256(_address_bucket(address).encode()).hexdigest()
    return [
        (f"{_KEY_PREFIX}:u:{user_digest}", settings.AUTH_FAILURES_PER_USERNAME),
        (f"{_KEY_PREFIX}:a:{addr_digest}", settings.AUTH_FAILURES_PER_ADDRESS),
    ]


def auth_throttle_check(*, username: str, address: str) -> None:
    """Raise AuthThrottled when the username or the address has used up its
    failures in the current window."""
    keys = _keys(username=username, address=address)
    state = cache.get_many([k for k, _ in keys] + [f"{k}:reset" for k, _ in keys])
    now = time.time()
    window = settings.AUTH_FAILURE_WINDOW_SECONDS
    waits = [
        wait
        for key, limit in keys
        if int(state.get(key, 0)) >= limit and (wait := state.get(f"{key}:reset", now + window) - now) > 0
    ]
    if waits:
        raise AuthThrottled(retry_after=max(1, math.ceil(max(waits))))


def auth_failure_record(*, username: str, address: str) -> None:
    """Count one failed attempt against the username and the address."""
    window = settings.AUTH_FAILURE_WINDOW_SECONDS
    now = time.time()
    for key, _limit in _keys(username=username, address=address):
        reset = cache.get(f"{key}:reset")
        if reset is not None and reset <= now:  # the window has closed: its count no longer holds
            cache.delete_many([key, f"{key}:reset"])
        # The first failure opens the window; later ones only count.
        if cache.add(key, 1, timeout=window):
            cache.set(f"{key}:reset", now + window, timeout=window)
            continue
        try:
            cache.incr(key)
        except ValueError:  # the window closed between add and incr
            if cache.add(key, 1, timeout=window):
                cache.set(f"{key}:reset", now + window, timeout=window)


def auth_failures_clear(*, username: str) -> None:
    """Forget a username's failures after it proves its password. The address
    count stays: one good login must not reset a guesser's budget."""
    key = _keys(username=username, address="")[0][0]
    cache.delete_many([key, f"{key}:reset"])
