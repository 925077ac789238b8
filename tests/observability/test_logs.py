"""Logs: one JSON object a line in production, a request id on every line of a
request and of the Celery tasks it started, and no secret in any line."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.http import HttpResponse
from django.test import RequestFactory
from rest_framework.test import APIClient

from config.celery import app
from observability import logs
from observability.middleware import ObservabilityMiddleware

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_ENV = {
    "PATH": os.environ.get("PATH", "/usr/bin"),
    "DJANGO_SETTINGS_MODULE": "config.settings",
    "SECRET_KEY": "a-production-like-secret-key-for-tests-AbCdEfGhIjKlMnOpQrStUvWxYz-0123456789",
    "SITE_URL": "https://api.example.com",
    "ALLOWED_HOSTS": "api.example.com",
    "DATABASE_URL": os.environ.get("DATABASE_URL", ""),
}


@contextlib.contextmanager
def capturing():
    """Everything logged at DEBUG and above, written as production writes it (JSON)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.JsonFormatter())
    handler.addFilter(logs.RequestIdFilter())
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.fixture
def captured():
    with capturing() as stream:
        yield stream


def lines(stream: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_production_writes_one_json_object_a_line():
    script = (
        "import django, logging; django.setup(); "
        "log = logging.getLogger('billing.services'); "
        "log.info('invoice %s settled', 'GRH-2026-000001'); "
        "log.warning('second line\\nwith a line break')"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=PRODUCTION_ENV, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""  # stdout is left to commands' own output
    out = result.stderr.splitlines()
    assert len(out) == 2
    first, second = (json.loads(line) for line in out)
    assert first["message"] == "invoice GRH-2026-000001 settled"
    assert first["level"] == "INFO" and first["logger"] == "billing.services"
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d", first["time"])
    assert first["request_id"] is None
    assert second["message"] == "second line\nwith a line break"


def test_a_local_run_writes_lines_of_text():
    script = "import django, logging; django.setup(); logging.getLogger('x').info('hello')"
    env = {**PRODUCTION_ENV, "DEBUG": "1", "DATA_DIR": "/nonexistent-not-written"}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert re.match(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ INFO x hello$", result.stderr.strip())


def test_the_per_task_chatter_of_celery_is_below_the_default_level():
    from django.conf import settings

    for name in ("celery.worker.strategy", "celery.app.trace", "celery.beat"):
        assert settings.LOGGING["loggers"][name]["level"] == "WARNING"


# --- Request ids ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_request_gets_an_id_that_its_lines_and_its_answer_carry(captured):
    resp = APIClient().get("/healthz", HTTP_X_REQUEST_ID="edge-4f2a9c1b")
    assert resp["X-Request-ID"] == "edge-4f2a9c1b"
    access = [line for line in lines(captured) if line["logger"] == "gpurenthub.access"]
    assert access[-1]["request_id"] == "edge-4f2a9c1b"
    assert access[-1]["status"] == 200 and access[-1]["route"] == "healthz"

    made = APIClient().get("/healthz")["X-Request-ID"]
    assert re.fullmatch(r"[0-9a-f]{32}", made)
    for unfit in ("short", "a b c d e f g h", "x" * 65, "<script>alert(1)</script>"):
        answered = APIClient().get("/healthz", HTTP_X_REQUEST_ID=unfit)["X-Request-ID"]
        assert answered != unfit and re.fullmatch(r"[0-9a-f]{32}", answered)
    assert logs.request_id_get() is None  # nothing leaks past the request


@app.task(name="tests.observability.log_a_line")
def log_a_line(marker: str) -> None:
    logging.getLogger("tests.observability").info("task line %s", marker)
    _done.set()


_done = threading.Event()


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_task_a_request_started_logs_the_request_id(settings):
    """The request queues a task on the real broker; a worker (in this process,
    another thread) runs it; the task's line carries the request's id."""
    from celery.contrib.testing.worker import start_worker

    settings.CELERY_TASK_ALWAYS_EAGER = False
    app.conf.task_always_eager = False
    _done.clear()

    def view(request):
        log_a_line.delay("from-a-request")
        logging.getLogger("tests.observability").info("view line")
        return HttpResponse("queued")

    try:
        with app.connection_for_write() as conn:
            conn.default_channel.queue_purge("celery")
        with start_worker(app, pool="solo", perform_ping_check=False, loglevel="WARNING", shutdown_timeout=30):
            # Captured from here: the worker's start sets logging up anew (config/celery.py).
            with capturing() as captured:
                response = ObservabilityMiddleware(view)(RequestFactory().get("/queue"))
                assert _done.wait(60), "the worker did not run the task"
    finally:
        app.conf.task_always_eager = True
    rid = response["X-Request-ID"]
    found = lines(captured)
    view_line = next(line for line in found if line["message"] == "view line")
    task_line = next(line for line in found if line["message"] == "task line from-a-request")
    assert view_line["request_id"] == rid
    assert task_line["request_id"] == rid
    assert task_line["task_id"] and task_line["task_id"] != rid


def test_a_task_queued_outside_a_request_carries_no_id():
    headers: dict = {}
    logs._before_publish(headers=headers)
    assert headers == {}
    token = logs.request_id_set("req-12345678")
    try:
        logs._before_publish(headers=headers)
    finally:
        logs.request_id_reset(token)
    assert headers == {"request_id": "req-12345678"}


# --- Secrets --------------------------------------------------------------------------------------

SECRETS = {
    "bearer": "Yq3vT0kEn5ecretVa1ue0123456789abcdef",
    "password": "correct-horse-battery-staple-77",
    "url_password": "n0de-Passw0rd",
    "checkout": "Dk60iQqQxm-Kj0LEgVPOR8YVpVtOAtJAmvJwPEmrjYs",
    "api_key": "AbCdEf0123456789AbCdEf0123456789",
}


def test_no_secret_reaches_a_line(captured):
    log = logging.getLogger("tests.observability")
    log.info("calling with Authorization: Bearer %s", SECRETS["bearer"])
    log.info("headers %s", {"Authorization": f"Bearer {SECRETS['bearer']}", "Accept": "application/json"})
    log.warning("login failed: password=%s", SECRETS["password"])
    log.warning('payload {"username": "alice", "password": "%s"}', SECRETS["password"])
    log.error("node http://rpcuser:%s@127.0.0.1:9332 unreachable", SECRETS["url_password"])
    log.info("GET /pay/%s 200", SECRETS["checkout"])
    log.info("provider https://eth-mainnet.example/v2/%s answered 429", SECRETS["api_key"])
    log.info("signed", extra={"secret": SECRETS["password"], "token": SECRETS["bearer"]})
    try:
        raise RuntimeError(f"connect failed: redis://:{SECRETS['url_password']}@cache:6379/0")
    except RuntimeError:
        log.exception("cache down")

    text = captured.getvalue()
    for name, secret in SECRETS.items():
        assert secret not in text, name
    found = lines(captured)
    assert len(found) == 9
    assert found[0]["message"] == f"calling with Authorization: Bearer {logs.MASK}"
    assert found[4]["message"] == "node http://rpcuser:********************@127.0.0.1:9332 unreachable"
    assert "RuntimeError" in found[-1]["exception"]


def test_the_text_lines_of_a_local_run_are_masked_too():
    formatter = logs.PlainFormatter("%(levelname)s %(name)s%(rid)s %(message)s")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "Bearer %s", (SECRETS["bearer"],), None)
    record.request_id = "0123456789abcdef"
    assert formatter.format(record) == f"INFO x [01234567] Bearer {logs.MASK}"


@pytest.mark.django_db
def test_requests_with_credentials_leave_none_in_the_logs(captured, customer):
    from accounts.services import token_create

    token = token_create(account=customer, name="t").raw
    client = APIClient()
    client.post("/api/v1/auth/token", {"username": "alice", "password": SECRETS["password"]}, format="json")
    client.post("/api/v1/auth/token", {"username": "alice", "password": "correct horse battery staple"}, format="json")
    client.get("/api/v1/account", HTTP_AUTHORIZATION=f"Bearer {token}")
    client.get("/api/v1/account", HTTP_AUTHORIZATION=f"Bearer {SECRETS['bearer']}")
    client.get(f"/pay/{SECRETS['checkout']}")
    text = captured.getvalue()
    assert "gpurenthub.access" in text  # the requests were logged
    for secret in (*SECRETS.values(), token, "correct horse battery staple"):
        assert secret not in text


def test_gunicorn_writes_its_own_lines_as_json_and_no_access_line(capfd):
    """deploy/gunicorn.conf.py's logconfig_dict, as gunicorn applies it (gunicorn.glogging.Logger)."""
    from gunicorn.app.base import Application
    from gunicorn.config import Config
    from gunicorn.glogging import Logger

    class _App(Application):
        def init(self, parser, opts, args):
            return None

        def load(self):
            return None

    app_ = _App.__new__(_App)
    app_.cfg = Config()
    app_.load_config_from_file(str(ROOT / "deploy" / "gunicorn.conf.py"))
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        logger = Logger(app_.cfg)
        logger.info("Listening at: %s (%s)", "http://127.0.0.1:8000", 4242)
        logger.access_log.info("an access line")
    finally:
        root.handlers, root.level = handlers, level
    err = capfd.readouterr().err.strip().splitlines()
    assert [json.loads(line)["message"] for line in err] == ["Listening at: http://127.0.0.1:8000 (4242)"]
    assert json.loads(err[0])["logger"] == "gunicorn.error"
