"""Settings production refuses to run with: a weak or placeholder SECRET_KEY,
and ALLOWED_HOSTS = '*'.

Django's own deployment checks (security.W009 and W020 in
django/core/checks/security/base.py) only warn, and only under
`manage.py check --deploy`, which neither gunicorn nor Celery runs: gunicorn
serves the WSGI application without any system check, and Celery's Django
fix-up (celery/fixups/django.py, DjangoWorkerFixup.validate_models) runs the
checks and drops what they find. So with DEBUG off every process refuses to
start when the apps load (core.apps.CoreConfig.ready: gunicorn's master loads
them before forking, a Celery worker and beat on start-up, every manage.py
command), and `check --deploy` reports the same problems as errors whatever
DEBUG says (a host checked with DEBUG=1 before it goes live).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

# Django's figures for a key it does not warn about are 50 characters of at least
# 5 distinct ones (django/core/checks/security/base.py, SECRET_KEY_MIN_LENGTH and
# SECRET_KEY_MIN_UNIQUE_CHARACTERS); a random key of that length (`secrets.
# token_urlsafe(50)`, `openssl rand -hex 32`) has far more than 10 distinct ones.
SECRET_KEY_MIN_LENGTH = 50
SECRET_KEY_MIN_DISTINCT = 10
# What startproject writes (django/core/management/utils.py, get_random_secret_key's
# callers prefix it): a key that was never meant to leave a laptop.
_INSECURE_PREFIX = "django-insecure-"
# Words of keys someone left as the example had them, compared on letters and
# digits only ("change-me", "CHANGE_ME" and "changeme" alike).
_PLACEHOLDER_WORDS = (
    "changeme",
    "replaceme",
    "placeholder",
    "insecure",
    "example",
    "yoursecret",
    "secretkeyhere",
    "longrandomstring",
)

E_SECRET_KEY = "core.E001"
E_ALLOWED_HOSTS = "core.E002"


def secret_key_problem(key: object) -> str | None:
    """Why `key` is not fit to sign production sessions and tokens, or None.
    The answer never contains the key."""
    if not isinstance(key, str) or not key:
        return "is empty"
    if key.startswith(_INSECURE_PREFIX):
        return f"starts with {_INSECURE_PREFIX!r}: it is a development key"
    letters = re.sub(r"[^a-z0-9]", "", key.lower())
    for word in _PLACEHOLDER_WORDS:
        if word in letters:
            return f"is a placeholder (it contains {word!r}), as in deploy/env.example"
    if len(key) < SECRET_KEY_MIN_LENGTH:
        return f"has {len(key)} characters; at least {SECRET_KEY_MIN_LENGTH} are needed"
    if len(set(key)) < SECRET_KEY_MIN_DISTINCT:
        return f"has {len(set(key))} distinct characters; at least {SECRET_KEY_MIN_DISTINCT} are needed"
    return None


def production_settings_errors(
    *, secret_key: object, secret_key_fallbacks: Iterable[object], allowed_hosts: Iterable[str]
) -> list[checks.Error]:
    """Every unsafe setting among these, as system check errors."""
    errors: list[checks.Error] = []
    hint = "Generate one: python3 -c 'import secrets; print(secrets.token_urlsafe(50))'"
    if problem := secret_key_problem(secret_key):
        errors.append(checks.Error(f"SECRET_KEY {problem}.", hint=hint, id=E_SECRET_KEY))
    for number, fallback in enumerate(secret_key_fallbacks, start=1):
        if problem := secret_key_problem(fallback):
            errors.append(checks.Error(f"SECRET_KEY_FALLBACKS[{number}] {problem}.", hint=hint, id=E_SECRET_KEY))
    if "*" in list(allowed_hosts):
        errors.append(
            checks.Error(
                "ALLOWED_HOSTS is '*': any Host header is answered (host-header poisoning of links and redirects).",
                hint="Name the site's host names, e.g. ALLOWED_HOSTS=api.example.com.",
                id=E_ALLOWED_HOSTS,
            )
        )
    return errors


def _configured_errors() -> list[checks.Error]:
    return production_settings_errors(
        secret_key=settings.SECRET_KEY,
        secret_key_fallbacks=getattr(settings, "SECRET_KEY_FALLBACKS", []),
        allowed_hosts=settings.ALLOWED_HOSTS,
    )


@checks.register(checks.Tags.security, deploy=True)
def unsafe_production_settings(app_configs: Sequence[AppConfig] | None = None, **kwargs: Any) -> list[checks.Error]:
    """`manage.py check --deploy`: the same refusals as errors, DEBUG or not."""
    return _configured_errors()


def production_refuse_unsafe(*, debug: bool, errors: list[checks.Error] | None = None) -> None:
    """With DEBUG off, raise ImproperlyConfigured naming every unsafe setting.
    A local run (DEBUG=1) keeps its generated key and may answer any host."""
    if debug:
        return
    errors = _configured_errors() if errors is None else errors
    if errors:
        lines = "\n".join(f"  {e.msg} ({e.hint})" for e in errors)
        raise ImproperlyConfigured(f"Unsafe production settings; the process does not start:\n{lines}")
