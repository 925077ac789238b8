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


def test_admin_two_factor_is_required_for_superusers_in_production_and_checked(tmp_path):
    code = "from django.conf import settings as s; print(s.ADMIN_OTP_REQUIRED)"
    assert manage("shell", "-c", code).stdout.splitlines()[-1] == "superusers"
    local = manage("shell", "-c", code, env_extra={"DEBUG": "1", "DATA_DIR": str(tmp_path)})
    assert local.stdout.splitlines()[-1] == "off"
    wrong = manage("check", env_extra={"ADMIN_OTP_REQUIRED": "sometimes"})
    assert wrong.returncode != 0 and "ADMIN_OTP_REQUIRED is off, superusers or staff" in wrong.stderr
