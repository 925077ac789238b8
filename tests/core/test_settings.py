"""Production settings are safe by default, and `check --deploy` is clean."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "SECRET_KEY": "k" * 20 + "-production-like-secret-0123456789-abcdefghijklmnop",
    "ALLOWED_HOSTS": "api.example.com",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/gpurenthub",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "CACHE_URL": "redis://127.0.0.1:6379/1",
}


def manage(*args, env_extra=None, drop=()):
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env.update(PRODUCTION)
    env.update(env_extra or {})
    for key in drop:
        env.pop(key, None)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_is_clean_with_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_to_start_without_a_secret_key():
    result = manage("check", drop=("SECRET_KEY",))
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


def test_production_defaults_are_the_safe_ones():
    code = (
        "from django.conf import settings as s; "
        "print(s.DEBUG, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, "
        "s.SECURE_HSTS_SECONDS, s.ALLOWED_HOSTS)"
    )
    result = manage("shell", "-c", code, drop=("ALLOWED_HOSTS",))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].split() == ["False", "True", "True", "True", "31536000", "[]"]


# --- devtools: local runs and tests only ----------------------------------------------

INSTALLED = "from django.apps import apps; print(apps.is_installed('devtools'))"


def test_devtools_is_installed_only_with_debug(tmp_path):
    production = manage("shell", "-c", INSTALLED)
    assert production.returncode == 0, production.stderr
    assert production.stdout.splitlines()[-1] == "False"
    # Without devtools, production has no sandbox commands at all.
    refused = manage("sandbox_pay", "GRH-2026-000001")
    assert refused.returncode != 0
    assert "Unknown command: 'sandbox_pay'" in refused.stderr

    local = manage("shell", "-c", INSTALLED, env_extra={"DEBUG": "1", "DATA_DIR": str(tmp_path)})
    assert local.returncode == 0, local.stderr
    assert local.stdout.splitlines()[-1] == "True"


def test_production_refuses_to_start_with_devtools_installed(tmp_path):
    # A production settings module that installs devtools anyway (DEBUG stays off).
    (tmp_path / "settings_with_devtools.py").write_text(
        "from config.settings import *  # noqa\n"
        'INSTALLED_APPS = [*(a for a in INSTALLED_APPS if a != "devtools"), "devtools.apps.DevtoolsConfig"]\n'
    )
    env = {"DJANGO_SETTINGS_MODULE": "settings_with_devtools", "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    for command in (("check",), ("shell", "-c", "print('started')")):
        result = manage(*command, env_extra=env)
        assert result.returncode != 0
        assert "devtools is installed with DEBUG off" in result.stderr
        assert "started" not in result.stdout
    # The same module with DEBUG on is a local run: allowed.
    local = manage("shell", "-c", INSTALLED, env_extra={**env, "DEBUG": "1", "DATA_DIR": str(tmp_path)})
    assert local.returncode == 0, local.stderr
    assert local.stdout.splitlines()[-1] == "True"


def test_the_test_settings_install_devtools_with_debug_off():
    from django.apps import apps
    from django.conf import settings

    assert apps.is_installed("devtools")
    assert settings.DEBUG is False
    assert settings.SETTINGS_MODULE == "config.settings_test"
