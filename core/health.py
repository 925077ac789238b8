"""Liveness and readiness.

Apps register extra readiness reports (e.g. each chain watcher's lag) with
`register_check`; a report whose `critical` is False degrades readiness
without failing it, so the API keeps serving while a chain node is away.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    detail: dict[str, Any]
    critical: bool = True


_checks: dict[str, Callable[[], CheckResult]] = {}


def register_check(name: str, fn: Callable[[], CheckResult]) -> None:
    _checks[name] = fn


def check_database() -> CheckResult:
    try:
        with connection.cursor() as cur:
            cur.execute("SELECT 1")
            cur.fetchone()
        return CheckResult(True, {"vendor": connection.vendor})
    except Exception as exc:  # any driver error means "not ready"
        return CheckResult(False, {"error": exc.__class__.__name__})


def check_broker() -> CheckResult:
    from celery import current_app as app

    url = settings.CELERY_BROKER_URL
    scheme = url.split(":", 1)[0]
    try:
        with app.connection_for_write(url) as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
        return CheckResult(True, {"transport": scheme})
    except Exception as exc:
        return CheckResult(False, {"transport": scheme, "error": exc.__class__.__name__})


def readiness() -> tuple[bool, dict[str, Any]]:
    results: dict[str, CheckResult] = {"database": check_database(), "broker": check_broker()}
    for name, fn in _checks.items():
        try:
            results[name] = fn()
        except Exception as exc:
            log.exception("readiness check %s failed", name)
            results[name] = CheckResult(False, {"error": exc.__class__.__name__}, critical=False)
    ready = all(r.ok for r in results.values() if r.critical)
    degraded = any(not r.ok for r in results.values() if not r.critical)
    body = {
        "status": "ok" if ready and not degraded else ("degraded" if ready else "unavailable"),
        "checks": {name: {"ok": r.ok, **r.detail} for name, r in results.items()},
    }
    return ready, body
