"""billing/chains/monero/notify.py, the program a node's notify hook runs: what it reads
and what it puts on the broker (the run through monero-wallet-rpc is in test_push.py)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
import redis
from django.conf import settings

NOTIFY = Path(__file__).resolve().parents[3] / "billing" / "chains" / "monero" / "notify.py"
QUEUE = "celery"


def _run(*args: str) -> subprocess.CompletedProcess:
    # As wallet-rpc starts it: no environment at all.
    return subprocess.run([sys.executable, str(NOTIFY), *args], env={}, capture_output=True, text=True, timeout=60)


def test_it_queues_the_chain_scan_on_the_broker_named_in_its_file(tmp_path):
    broker_url = str(settings.CELERY_BROKER_URL)
    if not broker_url.startswith("redis://"):
        pytest.skip("the test settings' broker is not Redis")
    broker = redis.Redis.from_url(broker_url)
    broker.delete(QUEUE)
    (tmp_path / "broker.url").write_text(f"{broker_url}\n")
    try:
        done = _run("--broker-file", str(tmp_path / "broker.url"), "xmr", "ab" * 32)
        assert done.returncode == 0, done.stderr
        [raw] = broker.lrange(QUEUE, 0, -1)
    finally:
        broker.delete(QUEUE)
    message = json.loads(raw)
    args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
    assert (message["headers"]["task"], args, kwargs) == ("billing.chain_scan", ["XMR"], {})


def test_without_a_broker_it_queues_nothing_and_says_why(tmp_path):
    done = _run("XMR", "ab" * 32)
    assert done.returncode == 2
    assert "no broker URL" in done.stderr
    done = _run("--broker-file", str(tmp_path / "missing"), "XMR")
    assert (done.returncode, "cannot read --broker-file" in done.stderr) == (2, True)


def test_a_broker_that_does_not_answer_is_given_up_on(tmp_path):
    (tmp_path / "broker.url").write_text("redis://127.0.0.1:1/0\n")
    done = _run("--broker-file", str(tmp_path / "broker.url"), "XMR")
    assert done.returncode == 1
    assert "could not queue the scan" in done.stderr


def test_it_refuses_what_is_no_currency_code():
    done = _run("--broker-file", "/dev/null", "X; rm")
    assert done.returncode == 2
