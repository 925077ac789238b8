"""Production settings are safe by default, and `check --deploy` is clean."""

import os
from pathlib import Path

import pytest

from tests.warm_python import python_run

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = {
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "SECRET_KEY": "k" * 20 + "-production-like-secret-0123456789-abcdefghijklmnop",
    "ALLOWED_HOSTS": "api.example.com",
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/gpurenthub",
    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
    "CACHE_URL": "redis://127.0.0.1:6379/1",
    "SITE_URL": "https://api.example.com",
}


def manage(*args, env_extra=None, drop=()):
    env = {k: os.environ[k] for k in ("PATH", "HOME", "LANG") if k in os.environ}
    env.update(PRODUCTION)
    env.update(env_extra or {})
    for key in drop:
        env.pop(key, None)
    # A fresh process each time, forked from a Python that has the third-party libraries imported already.
    return python_run("manage.py", *args, cwd=ROOT, env=env, timeout=120)


@pytest.mark.slow
def test_check_deploy_is_clean_with_production_settings():
    result = manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


@pytest.mark.slow
def test_production_refuses_to_start_without_a_secret_key():
    result = manage("check", drop=("SECRET_KEY",))
    assert result.returncode != 0
    assert "SECRET_KEY is not set" in result.stderr


@pytest.mark.slow
def test_production_refuses_to_start_without_a_site_url(tmp_path):
    """With DEBUG off there is no default: checkout links would point at 127.0.0.1."""
    result = manage("check", drop=("SITE_URL",))
    assert result.returncode != 0
    assert "ImproperlyConfigured: SITE_URL is not set" in result.stderr
    local = manage(
        "shell",
        "-c",
        "from django.conf import settings; print(settings.SITE_URL)",
        env_extra={"DEBUG": "1", "DATA_DIR": str(tmp_path)},
        drop=("SITE_URL",),
    )
    assert local.returncode == 0, local.stderr
    assert local.stdout.splitlines()[-1] == "http://127.0.0.1:8000"


@pytest.mark.slow
@pytest.mark.parametrize("value", ["BTC=abc", "DOGE=1", "BTC:95000", "ETH=-3"])
def test_a_malformed_manual_rate_stops_the_start(value):
    """Refused when the apps load (web, worker, manage.py), not with a 500 on the first order."""
    result = manage("check", env_extra={"MANUAL_RATES_USD": value})
    assert result.returncode != 0
    assert "ImproperlyConfigured: MANUAL_RATES_USD" in result.stderr


@pytest.mark.slow
def test_a_confirmation_count_below_one_stops_the_start():
    """0 would count a transaction still in the mempool, one a double spend may replace, as paid."""
    result = manage("check", env_extra={"CONFIRMATIONS_BTC": "0"})
    assert result.returncode != 0
    assert "ImproperlyConfigured: CONFIRMATIONS_BTC: at least 1." in result.stderr


@pytest.mark.slow
def test_production_defaults_are_the_safe_ones():
    code = (
        "from django.conf import settings as s; "
        "print(s.DEBUG, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, "
        "s.SECURE_HSTS_SECONDS, s.ALLOWED_HOSTS)"
    )
    result = manage("shell", "-c", code, drop=("ALLOWED_HOSTS",))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].split() == ["False", "True", "True", "True", "31536000", "[]"]


@pytest.mark.slow
def test_admin_two_factor_is_required_for_superusers_in_production_and_checked(tmp_path):
    code = "from django.conf import settings as s; print(s.ADMIN_OTP_REQUIRED)"
    assert manage("shell", "-c", code).stdout.splitlines()[-1] == "superusers"
    local = manage("shell", "-c", code, env_extra={"DEBUG": "1", "DATA_DIR": str(tmp_path)})
    assert local.stdout.splitlines()[-1] == "off"
    wrong = manage("check", env_extra={"ADMIN_OTP_REQUIRED": "sometimes"})
    assert wrong.returncode != 0 and "ADMIN_OTP_REQUIRED is off, superusers or staff" in wrong.stderr


# --- devtools: local runs and tests only ----------------------------------------------

# Whether devtools is installed, and whether its commands exist.
DEVTOOLS = (
    "from django.apps import apps; from django.core.management import get_commands; "
    "print(apps.is_installed('devtools'), 'sandbox_pay' in get_commands(), 'serve_local' in get_commands())"
)


@pytest.mark.slow
def test_devtools_is_installed_only_with_debug(tmp_path):
    production = manage("shell", "-c", DEVTOOLS)
    assert production.returncode == 0, production.stderr
    assert production.stdout.splitlines()[-1].split() == ["False", "False", "False"]  # no sandbox commands at all

    local = manage("shell", "-c", DEVTOOLS, env_extra={"DEBUG": "1", "DATA_DIR": str(tmp_path)})
    assert local.returncode == 0, local.stderr
    assert local.stdout.splitlines()[-1].split() == ["True", "True", "True"]


@pytest.mark.slow
def test_production_refuses_to_start_with_devtools_installed(tmp_path):
    # A production settings module that installs devtools anyway (DEBUG stays off).
    (tmp_path / "settings_with_devtools.py").write_text(
        "from config.settings import *  # noqa\n"
        'INSTALLED_APPS = [*(a for a in INSTALLED_APPS if a != "devtools"), "devtools.apps.DevtoolsConfig"]\n'
    )
    env = {"DJANGO_SETTINGS_MODULE": "settings_with_devtools", "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    refused = manage("shell", "-c", "print('started')", env_extra=env)
    assert refused.returncode != 0
    assert "ImproperlyConfigured: devtools is installed with DEBUG off" in refused.stderr
    assert "started" not in refused.stdout
    # With DEBUG on it is a local run and starts: test_devtools_is_installed_only_with_debug.


def test_the_test_settings_install_devtools_with_debug_off():
    from django.apps import apps
    from django.conf import settings

    assert apps.is_installed("devtools")
    assert settings.DEBUG is False
    assert settings.SETTINGS_MODULE == "config.settings_test"


def test_core_refuses_devtools_without_debug_outside_the_test_settings():
    from django.core.exceptions import ImproperlyConfigured

    from core.apps import devtools_refuse_in_production

    with_devtools = ["core", "billing", "devtools"]
    for apps, debug, module in (
        (with_devtools, False, "config.settings_test"),  # the test suite
        (with_devtools, True, "config.settings"),  # a local run
        (["core", "billing"], False, "config.settings"),  # production
    ):
        devtools_refuse_in_production(installed_apps=apps, debug=debug, settings_module=module)
    for apps in (with_devtools, ["core", "devtools.apps.DevtoolsConfig"]):
        for module in ("config.settings", "config.settings_production", None):
            with pytest.raises(ImproperlyConfigured, match="devtools is installed with DEBUG off"):
                devtools_refuse_in_production(installed_apps=apps, debug=False, settings_module=module)


# --- xdist: each worker its own Redis databases -----------------------------------------------


def test_each_xdist_worker_gets_its_own_redis_databases():
    from config.settings_test import redis_url_for_worker

    assert redis_url_for_worker("redis://127.0.0.1:6379/12", "gw0") == "redis://127.0.0.1:6379/12"
    assert redis_url_for_worker("redis://127.0.0.1:6379/12", "gw1") == "redis://127.0.0.1:6379/14"
    assert redis_url_for_worker("redis://127.0.0.1:6379/13", "gw1") == "redis://127.0.0.1:6379/15"
    assert redis_url_for_worker("redis://127.0.0.1:6379/20", "gw3") == "redis://127.0.0.1:6379/26"
    assert redis_url_for_worker("redis://:secret@cache.internal:6380", "gw2") == "redis://:secret@cache.internal:6380/4"
    assert redis_url_for_worker("rediss://cache/1?ssl_cert_reqs=none", "gw1") == "rediss://cache/3?ssl_cert_reqs=none"
    # Outside xdist, and for caches that are not Redis, nothing changes.
    assert redis_url_for_worker("redis://127.0.0.1:6379/12", "") == "redis://127.0.0.1:6379/12"
    assert redis_url_for_worker("locmemcache://", "gw1") == "locmemcache://"


def test_this_process_uses_its_workers_redis_databases():
    from django.conf import settings

    from config.settings_test import redis_url_for_worker

    configured = settings.REDIS_URLS_CONFIGURED
    assert settings.CACHES["default"]["LOCATION"] == redis_url_for_worker(
        configured["CACHE_URL"], settings.XDIST_WORKER
    )
    assert redis_url_for_worker(configured["CELERY_BROKER_URL"], settings.XDIST_WORKER) == settings.CELERY_BROKER_URL
