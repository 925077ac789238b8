"""Waiting on a condition in tests (never on a fixed sleep)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(condition: Callable[[], object], *, timeout: float = 30.0, what: str = "the condition") -> None:
    """Return as soon as `condition()` is true; fail the test if it is still
    false after `timeout` seconds (a bound for a hung test, not a measure)."""
    give_up = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > give_up:
            raise AssertionError(f"Timed out waiting for {what}.")
        time.sleep(0.005)
