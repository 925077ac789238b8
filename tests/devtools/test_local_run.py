"""What `make run` (serve_local) gives its children: fixed sandbox rates and no market
source asked, the XMR sandbox labelled regtest, and an SQLite broker that starts clean."""

from __future__ import annotations

import io
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from billing.chains.config import network_name
from billing.currencies import CURRENCIES
from billing.rates import rate_current, rates_refresh
from devtools.management.commands import serve_local
from devtools.processes import free_port

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.django_db
def test_rates_fixed_by_the_setting_ask_no_provider(settings):
    closed = f"http://127.0.0.1:{free_port()}"  # a provider asked here would fail and be reported
    settings.KRAKEN_API_URL = settings.COINGECKO_API_URL = closed
    settings.RATE_HTTP_ATTEMPTS = 1
    settings.MANUAL_RATES_USD = ",".join(f"{code}=2" for code in CURRENCIES)
    assert rates_refresh() == {}
    assert rate_current(currency="BTC").usd == 2
    settings.MANUAL_RATES_USD = ",".join(f"{code}=2" for code in CURRENCIES if code != "BTC")
    report = rates_refresh()  # BTC is not fixed: the providers are asked (and fail here)
    assert set(report) == set(settings.RATE_PROVIDERS) and not any(r["ok"] for r in report.values())


def test_the_children_of_make_run_quote_the_sandbox_rates_and_ask_no_market(settings, monkeypatch):
    monkeypatch.delenv("RATE_PROVIDERS", raising=False)
    settings.MANUAL_RATES_USD = "BTC=95000"
    command = serve_local.Command(stdout=io.StringIO())
    up = {
        "LTC": SimpleNamespace(env={"LTC_RPC_URL": "http://u:p@127.0.0.1:1", "MANUAL_RATES_USD": "BTC=95000,LTC=90"}),
        "SOL": SimpleNamespace(env={"SOL_RPC_URL": "http://127.0.0.1:2", "MANUAL_RATES_USD": "BTC=1,SOL=150"}),
    }
    env = command._children_env("http://127.0.0.1:8000", "127.0.0.1", up, any_sandbox=True)
    assert env["RATE_PROVIDERS"] == "" and env["SANDBOX"] == "1"
    assert env["MANUAL_RATES_USD"] == "BTC=95000,LTC=90,SOL=150"  # the setting's BTC first
    monkeypatch.setenv("RATE_PROVIDERS", "kraken")  # asked for: kept
    env = command._children_env("http://127.0.0.1:8000", "127.0.0.1", up, any_sandbox=True)
    assert env["RATE_PROVIDERS"] == "kraken"
    monkeypatch.delenv("RATE_PROVIDERS")
    env = command._children_env("http://127.0.0.1:8000", "127.0.0.1", {}, any_sandbox=False)
    assert "RATE_PROVIDERS" not in env  # no sandbox: the market is asked


def test_the_xmr_sandbox_is_labelled_regtest(settings):
    settings.XMR_NETWORK = "regtest"
    assert network_name(currency="XMR") == "monero-regtest"
    settings.XMR_NETWORK = ""
    settings.XMR_ADDRESS = ""
    assert network_name(currency="XMR") == "monero-mainnet"


def test_make_run_deletes_the_messages_delivered_in_earlier_runs(tmp_path):
    path = tmp_path / "broker.sqlite3"
    url = f"sqla+sqlite:///{path}"
    assert serve_local.broker_delivered_prune(url) == 0  # no file yet
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE kombu_message (id INTEGER PRIMARY KEY, visible BOOLEAN, payload TEXT)")
        db.executemany("INSERT INTO kombu_message (visible, payload) VALUES (?, ?)", [(0, "a"), (0, "b"), (1, "c")])
    assert serve_local.broker_delivered_prune(url) == 2
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT payload FROM kombu_message").fetchall() == [("c",)]
    assert serve_local.broker_delivered_prune("redis://127.0.0.1:6379/0") == 0


@pytest.mark.slow
@pytest.mark.parametrize("command", ["sandbox_pay", "sandbox_handover"])
def test_a_sandbox_command_without_debug_says_sandbox_off_in_one_line(command):
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    done = subprocess.run(
        [sys.executable, "manage.py", command, "GRH-2026-000001"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("CommandError: sandbox_off: ") and "DEBUG=1" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


@pytest.mark.slow
def test_sandbox_pay_where_make_run_never_ran_says_sandbox_off_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "SECRET_KEY", "DJANGO_SETTINGS_MODULE")}
    done = subprocess.run(
        [sys.executable, "manage.py", "sandbox_pay", "GRH-2026-000001"],
        cwd=ROOT,
        env=env | {"DEBUG": "1", "DATA_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1
    assert done.stderr.startswith("CommandError: sandbox_off: ") and "make run" in done.stderr
    assert f"DATA_DIR={tmp_path}" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1


def test_a_second_make_run_on_the_same_data_dir_is_refused(settings, tmp_path):
    """One run holds its DATA_DIR: a second one there would start sandboxes of its own and,
    stopping, remove the settings file the first one's sandbox_pay reads. It stops before
    starting anything, and says why; another DATA_DIR is free to run."""
    import fcntl

    from django.core.management import call_command
    from django.core.management.base import CommandError

    settings.DATA_DIR = tmp_path
    with open(tmp_path / "serve_local.lock", "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what the first run holds
        with pytest.raises(CommandError, match=f"already running with DATA_DIR={tmp_path}"):
            call_command("serve_local")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["serve_local.lock"]  # nothing else started
