"""Logs: a request id on every line, one JSON object a line, no secrets.

- A request id is taken from a sane incoming `X-Request-ID` (nginx sends its own,
  deploy/nginx/gpurenthub.conf) or made up, held in a context variable for the
  request (observability.middleware), returned in the response's `X-Request-ID`,
  and sent with every Celery task the request queues (a message header, set in
  `before_task_publish`); the worker puts it back while the task runs
  (`task_prerun` / `task_postrun`), so the task's lines carry the same id.
- `RequestIdFilter` copies it (and the task's id) onto every record.
- `JsonFormatter` (python-json-logger) and `PlainFormatter` mask secrets in
  whatever they write: credentials in URLs (core.reporting), `Bearer` tokens,
  `Authorization` values, `password=`, `secret=`, `token=`, `key=` values and
  checkout tokens in /pay/ paths. LOG_FORMAT in config/settings.py picks one.
"""

from __future__ import annotations

import contextvars
import logging
import re
import uuid
from typing import Any

from pythonjsonlogger.json import JsonFormatter as _JsonFormatter

REQUEST_ID_HEADER = "X-Request-ID"
_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
_task_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("task_id", default=None)
# An incoming id is kept when it is short and plain (a UUID, nginx's 32 hex digits);
# anything else is replaced, so a client cannot write what it likes into the logs.
_SANE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{7,63}$")


def request_id_get() -> str | None:
    return _request_id.get()


def request_id_from(incoming: str | None) -> str:
    incoming = (incoming or "").strip()
    return incoming if _SANE_ID.match(incoming) else uuid.uuid4().hex


def request_id_set(value: str | None) -> contextvars.Token:
    return _request_id.set(value)


def request_id_reset(token: contextvars.Token) -> None:
    _request_id.reset(token)


class RequestIdFilter(logging.Filter):
    """Puts `request_id` and `task_id` on every record (None outside a request or task)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = _request_id.get()
        if not hasattr(record, "task_id"):
            record.task_id = _task_id.get()
        return True


# --- Secrets ------------------------------------------------------------------------------

MASK = "********"
# Each pattern with a cheap test of the text (lower-cased) that must pass before the
# pattern runs: most lines hold none of these words, and a line is written per request.
_PATTERNS: list[tuple[tuple[str, ...], re.Pattern[str], str]] = [
    # Authorization: Bearer <token> / Basic <b64>, and a bare "Bearer <token>".
    (
        ("authorization",),
        re.compile(r"(?i)\b(authorization\b[\"']?\s*[:=]\s*[\"']?)(?:(bearer|basic|digest|token)\s+)?[^\s\"',;}]+"),
        r"\1\2 " + MASK,
    ),
    (("bearer", "basic"), re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + MASK),
    # name=value and "name": "value" where the name says it is a secret.
    (
        ("pass", "secret", "token", "key", "signature", "recovery", "prv", "mnemonic"),
        re.compile(
            r"(?i)\b([\w-]*(?:password|passwd|secret|token|api[_-]?key|private[_-]?key|view[_-]?key|"
            r"spend[_-]?key|signature|recovery[_-]?codes?|xprv|mnemonic)[\w-]*)"
            r"(\\?[\"']?\s*[:=]\s*\\?[\"']?)([^\s\"'\\,;&}\]]+)"
        ),
        r"\1\2" + MASK,
    ),
    # A checkout page's path is its key (billing: /pay/<token>).
    (("/pay/",), re.compile(r"(/pay/)[A-Za-z0-9_-]{16,}"), r"\1" + MASK),
    # Extended private keys, whatever they are called.
    (("prv",), re.compile(r"\b[xyztuv]prv[1-9A-HJ-NP-Za-km-z]{50,}"), MASK),
]


def mask_secrets(text: str) -> str:
    if not text:
        return text
    if "://" in text:
        from core.reporting import CredentialsMaskingFilter

        text = CredentialsMaskingFilter().mask(text)
    lowered = text.lower()
    for words, pattern, replacement in _PATTERNS:
        if any(word in lowered for word in words):
            text = pattern.sub(replacement, text)
    return text


# Fields the formatter writes itself, never from user input: not searched for secrets.
_PLAIN_FIELDS = frozenset(
    {"time", "level", "logger", "request_id", "task_id", "route", "method", "status", "duration_ms"}
)


def _masked(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return mask_secrets(value)
    if depth > 4:
        return value
    if isinstance(value, dict):
        return {k: (MASK if _secret_name(k) else _masked(v, depth + 1)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_masked(v, depth + 1) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return mask_secrets(str(value))


_SECRET_NAME = re.compile(r"(?i)password|passwd|secret|token|authorization|api[_-]?key|private|view[_-]?key|cookie")


def _secret_name(name: Any) -> bool:
    return isinstance(name, str) and name not in ("request_id", "task_id") and bool(_SECRET_NAME.search(name))


class JsonFormatter(_JsonFormatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message,
    request_id, task_id, the exception when there is one, and any `extra` fields;
    secrets masked (above). A `request` extra (django.request) is written as its
    method and masked path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if not args:
            kwargs.setdefault("fmt", "%(levelname)s %(name)s %(message)s %(request_id)s %(task_id)s")
        kwargs.setdefault("timestamp", "time")
        kwargs.setdefault("rename_fields", {"levelname": "level", "name": "logger", "exc_info": "exception"})
        super().__init__(*args, **kwargs)

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        request = log_data.pop("request", None)
        if request is not None and hasattr(request, "path"):
            log_data["method"], log_data["path"] = getattr(request, "method", ""), request.path
        out = {}
        stamp = log_data.get("time")
        if stamp is not None and hasattr(stamp, "isoformat"):
            log_data["time"] = stamp.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        for key, value in log_data.items():
            if key in _PLAIN_FIELDS and (value is None or isinstance(value, str | int | float)):
                out[key] = value
            else:
                out[key] = MASK if _secret_name(key) else _masked(value)
        return out


class PlainFormatter(logging.Formatter):
    """A line of text (make run, DEBUG): time, level, logger, [request id], message; secrets masked."""

    def format(self, record: logging.LogRecord) -> str:
        rid = getattr(record, "request_id", None)
        record.rid = f" [{rid[:8]}]" if rid else ""
        return mask_secrets(super().format(record))


# --- Celery: the id travels with the task --------------------------------------------------

HEADER = "request_id"


def _before_publish(sender: Any = None, headers: dict | None = None, **_: Any) -> None:
    rid = _request_id.get()
    if rid and headers is not None and HEADER not in headers:
        headers[HEADER] = rid


def _prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    rid = getattr(task.request, HEADER, None) if task is not None else None
    if rid is None and task is not None:
        rid = (getattr(task.request, "headers", None) or {}).get(HEADER)
    # An eager task runs inside the request that queued it: keep that id.
    if rid is not None or not getattr(task.request, "is_eager", False):
        _request_id.set(rid)
    _task_id.set(task_id)


def _postrun(task: Any = None, **_: Any) -> None:
    if task is None or not getattr(task.request, "is_eager", False):
        _request_id.set(None)
    _task_id.set(None)


def celery_signals_connect() -> None:
    from celery import signals

    signals.before_task_publish.connect(_before_publish, weak=False, dispatch_uid="observability.request_id")
    signals.task_prerun.connect(_prerun, weak=False, dispatch_uid="observability.request_id")
    signals.task_postrun.connect(_postrun, weak=False, dispatch_uid="observability.request_id")
