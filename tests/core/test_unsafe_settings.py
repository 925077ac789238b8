"""Production refuses to start unsafe: a weak or placeholder SECRET_KEY (the
one in deploy/env.example included) and ALLOWED_HOSTS='*' stop gunicorn, the
Celery worker and beat and every manage.py command when DEBUG is off;
`check --deploy` reports them as errors; local runs and the tests start."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from core.checks import production_refuse_unsafe, production_settings_errors, secret_key_problem
from tests.warm_python import python_run

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
GOOD_KEY = secrets.token_urlsafe(50)


def env_example_key() -> str:
    for line in (ROOT / "deploy" / "env.example").read_text().splitlines():
        if line.startswith("SECRET_KEY="):
            return line.split("=", 1)[1]
    raise AssertionError("deploy/env.example sets no SECRET_KEY")


# =============================================================================
# The rules
# =============================================================================


@pytest.mark.parametrize(
    ("key", "why"),
    [
        (env_example_key(), "is a placeholder"),
        ("change-me-" + "x9" * 40, "is a placeholder (it contains 'changeme')"),  # long is not enough
        ("CHANGE_ME_{good}", "is a placeholder"),
        ("replace-me-with-{good}", "is a placeholder"),
        ("django-insecure-{good}", "starts with 'django-insecure-'"),
        ("{good49}", "has 49 characters; at least 50 are needed"),
        ("ab" * 40, "has 2 distinct characters; at least 10 are needed"),
        ("0123456789" * 4 + "abcdefgh", "has 48 characters"),
        ("", "is empty"),
    ],
)
def test_weak_and_placeholder_keys_are_refused(key, why):
    # Keys made in the run are filled in here, not in the parameters: every
    # xdist worker must collect the same test ids.
    key = key.replace("{good}", GOOD_KEY).replace("{good49}", GOOD_KEY[:49])
    problem = secret_key_problem(key)
    assert problem is not None and why in problem
    if key:
        assert key not in problem  # the answer never repeats the key


@pytest.mark.parametrize(
    "make_key",
    [
        lambda: GOOD_KEY,  # secrets.token_urlsafe(50), as deploy/install.sh makes one
        lambda: secrets.token_hex(32),  # openssl rand -hex 32
        lambda: "test-only-secret-key-not-used-anywhere-else-0123456789",  # config/settings_test.py
    ],
    ids=["token_urlsafe", "token_hex", "settings_test"],
)
def test_random_keys_pass(make_key):
    assert secret_key_problem(make_key()) is None


def test_allowed_hosts_star_and_weak_fallbacks_are_errors():
    errors = production_settings_errors(
        secret_key=GOOD_KEY, secret_key_fallbacks=[GOOD_KEY, "old"], allowed_hosts=["api.example.com", "*"]
    )
    assert [(e.id, e.msg.split(" ")[0]) for e in errors] == [
        ("core.E001", "SECRET_KEY_FALLBACKS[2]"),
        ("core.E002", "ALLOWED_HOSTS"),
    ]
    assert all(e.is_serious() for e in errors)  # Error level: check --deploy fails on them
    assert production_settings_errors(secret_key=GOOD_KEY, secret_key_fallbacks=[], allowed_hosts=["a.example"]) == []


def test_debug_off_raises_with_every_problem_and_debug_on_does_not():
    errors = production_settings_errors(secret_key="short", secret_key_fallbacks=[], allowed_hosts=["*"])
    with pytest.raises(ImproperlyConfigured) as refused:
        production_refuse_unsafe(debug=False, errors=errors)
    text = str(refused.value)
    assert "SECRET_KEY has 5 characters" in text and "ALLOWED_HOSTS is '*'" in text
    production_refuse_unsafe(debug=True, errors=errors)  # a local run


def test_the_test_settings_are_safe_and_started():
    from django.conf import settings

    assert settings.DEBUG is False
    assert (
        production_settings_errors(
            secret_key=settings.SECRET_KEY,
            secret_key_fallbacks=settings.SECRET_KEY_FALLBACKS,
            allowed_hosts=settings.ALLOWED_HOSTS,
        )
        == []
    )


# =============================================================================
# The processes deploy/ starts
# =============================================================================

PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "SECRET_KEY": GOOD_KEY,
    "ALLOWED_HOSTS": "api.example.com",
    "DATABASE_URL": os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/gpurenthub"),
    "CELERY_BROKER_URL": os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/13"),
    "CACHE_URL": os.environ.get("CACHE_URL", "redis://127.0.0.1:6379/12"),
    "SITE_URL": "https://api.example.com",
}


def _env(tmp_path, **extra: str) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env.update(PRODUCTION, DATA_DIR=str(tmp_path), **extra)
    return env


def _refused(result, *words: str) -> None:
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "ImproperlyConfigured: Unsafe production settings; the process does not start" in output
    for word in words:
        assert word in output


@pytest.mark.slow
def test_manage_py_refuses_the_env_example_key_and_a_star_host(tmp_path):
    key = env_example_key()
    result = python_run("manage.py", "check", cwd=ROOT, env=_env(tmp_path, SECRET_KEY=key), timeout=120)
    _refused(result, "SECRET_KEY is a placeholder")
    assert key not in result.stdout + result.stderr
    result = python_run("manage.py", "migrate", "--check", cwd=ROOT, env=_env(tmp_path, ALLOWED_HOSTS="*"), timeout=120)
    _refused(result, "ALLOWED_HOSTS is '*'")
    fine = python_run("manage.py", "check", "--deploy", "--fail-level", "ERROR", cwd=ROOT, env=_env(tmp_path))
    assert fine.returncode == 0, fine.stderr


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        # deploy/systemd/gpurenthub-web.service (preload_app: the master loads the apps)
        ["gunicorn", "config.wsgi:application", "-c", "deploy/gunicorn.conf.py", "--bind", "127.0.0.1:0"],
        # gpurenthub-worker.service and gpurenthub-beat.service
        ["celery", "-A", "config", "worker", "--loglevel", "INFO", "--pool", "solo"],
        ["celery", "-A", "config", "beat", "--loglevel", "INFO", "--schedule", "{tmp}/celerybeat-schedule"],
    ],
    ids=["gunicorn", "worker", "beat"],
)
def test_gunicorn_and_celery_do_not_start_with_a_weak_key(tmp_path, command):
    argv = [str(BIN / command[0]), *(part.format(tmp=tmp_path) for part in command[1:])]
    result = subprocess.run(
        argv, cwd=ROOT, env=_env(tmp_path, SECRET_KEY="k" * 60), capture_output=True, text=True, timeout=120
    )
    _refused(result, "SECRET_KEY has 1 distinct characters")


@pytest.mark.slow
def test_a_local_run_starts_and_check_deploy_names_the_errors(tmp_path):
    """make run (DEBUG=1) starts with its generated key and any host; `check --deploy`
    still says what production would refuse."""
    local = _env(tmp_path, DEBUG="1", ALLOWED_HOSTS="*", DATABASE_URL=f"sqlite:///{tmp_path / 'db.sqlite3'}")
    local.pop("SECRET_KEY")
    started = python_run("manage.py", "check", cwd=ROOT, env=local, timeout=120)
    assert started.returncode == 0, started.stderr
    local["SECRET_KEY"] = env_example_key()
    deploy = python_run("manage.py", "check", "--deploy", cwd=ROOT, env=local, timeout=120)
    assert deploy.returncode != 0
    assert "(core.E001) SECRET_KEY is a placeholder" in deploy.stderr
    assert "(core.E002) ALLOWED_HOSTS is '*'" in deploy.stderr
