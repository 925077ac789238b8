"""Failed-attempt throttling for password logins and account recovery.

Failures are counted in the Django cache (Redis in production, so every web
process shares the counts) per username and per client address, each in a
fixed window that opens with the first failure. The window's end is stored
beside each count and is what decides; the cache's own expiry only clears
the keys away afterwards. Once either count reaches its
limit, attempts are refused with 429 and `Retry-After` until the window closes,
without checking the password: a throttled username answers the same whether
or not the account exists.

The per-username limit stops guessing, but must not let a stranger lock the
holder out: an address the username has logged in (or signed up) from before
is not held to it (only to the per-address limit), and account recovery with a
valid recovery code goes through it too.

Sign-ups are limited per address (SIGNUP_PER_ADDRESS in SIGNUP_WINDOW_SECONDS):
each one costs a password hash.

Right passwords are limited too: checking one costs an Argon2 hash (100 MiB of
memory, a quarter of a second of CPU), and an account's holder could otherwise
ask for that without end (a new token, the password confirmed again). Each
check is counted per address (PASSWORD_PROOFS_PER_ADDRESS) and, from an address
the username has proved itself from before, per username
(PASSWORD_PROOFS_PER_USERNAME), in PASSWORD_PROOF_WINDOW_SECONDS, before the
hash; it is given back when the password was wrong: failures have their own
limits, and a stranger's guesses must not use up the holder's proofs. A stranger
(a new address) is never answered by the username's count, which only the
holder can raise: that 429 would tell them the account exists.

Settings: AUTH_FAILURES_PER_USERNAME, AUTH_FAILURES_PER_ADDRESS,
AUTH_FAILURE_WINDOW_SECONDS, AUTH_KNOWN_ADDRESS_DAYS, PASSWORD_PROOFS_PER_USERNAME,
PASSWORD_PROOFS_PER_ADDRESS, PASSWORD_PROOF_WINDOW_SECONDS, SIGNUP_PER_ADDRESS,
SIGNUP_WINDOW_SECONDS, TRUSTED_PROXY_COUNT.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time

from django.conf import settings
from django.core.cache import cache

from core.errors import Throttled
from core.throttle import (
    address_bucket,
    client_address,  # noqa: F401  (the views import it from here)
)

_KEY_PREFIX = "authfail"


class AuthThrottled(Throttled):
    """Too many failed attempts (or sign-ups): 429 with `Retry-After`."""

    def __init__(self, *, retry_after: int, message: str = "Too many failed attempts.") -> None:
        super().__init__(retry_after=retry_after, message=message)


# --- Counters -----------------------------------------------------------------
# Every attempt is counted before the password is checked (an atomic INCR), so
# concurrent guesses cannot all pass the check before any failure is recorded:
# with a limit of 5, 40 guesses at once get 5 answers and 35 refusals. An
# attempt that is refused, or whose password proves right, gives its count back.


def _digest(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def _username_key(username: str) -> str:
    return f"{_KEY_PREFIX}:u:{_digest(username.strip().lower())}"


def _address_key(address: str) -> str:
    return f"{_KEY_PREFIX}:a:{_digest(address_bucket(address))}"


def _known_key(*, username: str, address: str) -> str:
    return f"authok:{_digest(username.strip().lower())}:{_digest(address_bucket(address))}"


def _count(key: str, *, window: int, now: float) -> tuple[int, float]:
    """Add one to a windowed counter, atomically; the new count and the end of its window."""
    reset = cache.get(f"{key}:reset")
    if reset is not None and reset <= now:  # the window has closed: its count no longer holds
        cache.delete_many([key, f"{key}:reset"])
        reset = None
    for _ in range(3):
        # The first attempt opens the window; later ones only count.
        if cache.add(key, 1, timeout=window):
            cache.set(f"{key}:reset", now + window, timeout=window)
            return 1, now + window
        try:
            count = cache.incr(key)
        except ValueError:  # the key expired between add and incr
            continue
        if reset is None:
            reset = cache.get(f"{key}:reset", now + window)
        return count, reset
    return 1, now + window  # pragma: no cover - the cache keeps losing the key


def _uncount(key: str) -> None:
    with contextlib.suppress(ValueError):  # gone meanwhile: nothing to give back
        cache.decr(key)


def address_known(*, username: str, address: str) -> bool:
    """Whether this username has logged in (or signed up) from this address
    (IPv6: its /64) within AUTH_KNOWN_ADDRESS_DAYS."""
    return bool(cache.get(_known_key(username=username, address=address)))


def address_remember(*, username: str, address: str) -> None:
    """Remember that the account's holder proved who they are from this address."""
    days = settings.AUTH_KNOWN_ADDRESS_DAYS
    if days > 0 and address:
        cache.set(_known_key(username=username, address=address), 1, timeout=days * 86400)


def auth_attempt_begin(*, username: str, address: str, per_username: bool = True) -> list[str]:
    """Count one attempt against the address and (unless `per_username` is
    False, or the username has succeeded from this address before) the
    username, before the secret is checked. Raises AuthThrottled (giving the
    counts back) when either has used up its failures in the current window.
    Returns the keys counted: pass them to `auth_attempt_succeeded`."""
    keys = [(_address_key(address), settings.AUTH_FAILURES_PER_ADDRESS)]
    if per_username and not address_known(username=username, address=address):
        keys.append((_username_key(username), settings.AUTH_FAILURES_PER_USERNAME))
    return _count_all(keys, window=settings.AUTH_FAILURE_WINDOW_SECONDS)


def _count_all(limits: list[tuple[str, int]], *, window: int, message: str = "Too many failed attempts.") -> list[str]:
    """Count one in each (key, limit) of `limits`; AuthThrottled (giving every
    count back) when any is past its limit. Returns the keys counted."""
    now = time.time()
    counted: list[str] = []
    waits: list[float] = []
    for key, limit in limits:
        count, reset = _count(key, window=window, now=now)
        counted.append(key)
        if count > limit:
            waits.append(reset - now)
    if waits:
        counts_give_back(counted)
        raise AuthThrottled(retry_after=max(1, math.ceil(max(waits))), message=message)
    return counted


def auth_username_attempt_begin(*, username: str) -> str | None:
    """Count one attempt against the username alone (its address was counted
    already), before a second secret is checked: AuthThrottled (giving it
    back) when the username has used up its failures. Returns the key counted,
    for `auth_username_attempt_give_back` when the attempt guessed nothing."""
    now = time.time()
    key = _username_key(username)
    count, reset = _count(key, window=settings.AUTH_FAILURE_WINDOW_SECONDS, now=now)
    if count > settings.AUTH_FAILURES_PER_USERNAME:
        _uncount(key)
        raise AuthThrottled(retry_after=max(1, math.ceil(reset - now)))
    return key


def auth_username_attempt_give_back(*, key: str) -> None:
    _uncount(key)


def auth_username_failure(*, username: str) -> None:
    """Count a failure against the username alone (its address was counted up
    front); AuthThrottled when the username was locked already."""
    now = time.time()
    count, reset = _count(_username_key(username), window=settings.AUTH_FAILURE_WINDOW_SECONDS, now=now)
    if count > settings.AUTH_FAILURES_PER_USERNAME:
        raise AuthThrottled(retry_after=max(1, math.ceil(reset - now)))


def auth_attempt_succeeded(*, username: str, address: str, counted: list[str]) -> None:
    """The secret was right: forget the username's failures, give the
    address its count back (one good login must not reset a guesser's
    budget, nor cost one) and remember the address for this username."""
    user_key = _username_key(username)
    cache.delete_many([user_key, f"{user_key}:reset"])
    for key in counted:
        if key != user_key:
            _uncount(key)
    address_remember(username=username, address=address)


def signup_attempt_count(*, address: str) -> None:
    """Count one sign-up from this address; AuthThrottled once the address has
    used up SIGNUP_PER_ADDRESS in the window (counted before the work, so a
    flood of concurrent sign-ups cannot slip past)."""
    limit = settings.SIGNUP_PER_ADDRESS
    if limit <= 0:
        return
    now = time.time()
    key = f"signup:a:{_digest(address_bucket(address))}"
    count, reset = _count(key, window=settings.SIGNUP_WINDOW_SECONDS, now=now)
    if count > limit:
        _uncount(key)
        raise AuthThrottled(retry_after=max(1, math.ceil(reset - now)), message="Too many sign-ups from this address.")


def password_proof_begin(*, username: str, address: str) -> list[str]:
    """Count a password about to be checked against the address's proofs in the
    window and, from an address the username has proved itself from before
    (address_known), the username's, before it is hashed: AuthThrottled (giving
    them back) past PASSWORD_PROOFS_PER_ADDRESS or PASSWORD_PROOFS_PER_USERNAME.
    Returns the keys counted: pass them to `counts_give_back` when the
    password was wrong (or was not checked after all)."""
    limits = [(f"pwproof:a:{_digest(address_bucket(address))}", settings.PASSWORD_PROOFS_PER_ADDRESS)]
    if address_known(username=username, address=address):
        limits.append((f"pwproof:u:{_digest(username.strip().lower())}", settings.PASSWORD_PROOFS_PER_USERNAME))
    return _count_all(
        [(key, limit) for key, limit in limits if limit > 0],  # 0: that limit is off
        window=settings.PASSWORD_PROOF_WINDOW_SECONDS,
        message="Too many password checks for this account or address.",
    )


def counts_give_back(counted: list[str]) -> None:
    """Give back the counts auth_attempt_begin or password_proof_begin took: for
    a proof, the password was wrong; for either, it was not checked after all."""
    for key in counted:
        _uncount(key)
