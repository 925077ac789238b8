"""The sandbox of `make run`: a Litecoin regtest node in the data folder, LTC
pointed at it for every process, and `sandbox_pay` to pay invoices from it."""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.core.management import CommandError, call_command

from billing.chains.utxo.watcher import bitcoin_cursor_set, process_state_clear
from billing.chains.watchers import watcher_for
from billing.models import InvoiceException, InvoiceStatus
from core.lease import lease_acquire, lease_release
from devtools import scanning
from devtools.litecoind import watch_only_account_from_key
from devtools.management.commands import serve_local
from devtools.sandbox import SANDBOX_MIN_HEIGHT, sandbox_pay_command, sandbox_start
from devtools.scanning import chain_scan_now
from tests.chains.harness import WatchedChain

pytestmark = pytest.mark.chain


@pytest.mark.slow
@pytest.mark.django_db
def test_sandbox_runs_a_persistent_node_and_pays_invoices(tmp_path, settings, customer):
    folder = tmp_path / "sandbox"
    sandbox = sandbox_start(folder=folder, manual_rates="BTC=95000")
    try:
        env = sandbox.env
        assert env["LTC_NETWORK"] == "regtest" and env["SANDBOX"] == "1"
        assert env["MANUAL_RATES_USD"] == "BTC=95000,LTC=90"
        assert env["LTC_RPC_URL"] == sandbox.node.url and env["LTC_XPUB"] == sandbox.vpub
        # Only the public key is kept.
        assert (folder / "ltc-vpub").read_text() == sandbox.vpub + "\n"
        assert sandbox.vpub.startswith("vpub")
        assert watch_only_account_from_key(sandbox.vpub, hrp="rltc").vpub == sandbox.vpub
        assert stat.S_IMODE(os.stat(sandbox.env_file).st_mode) == 0o600
        assert f"LTC_RPC_URL='{sandbox.node.url}'" in sandbox.env_file.read_text()
        assert sandbox.node.height() >= SANDBOX_MIN_HEIGHT

        for name, value in env.items():
            setattr(settings, name, value if name != "SANDBOX" else True)
        process_state_clear()
        bitcoin_cursor_set(currency="LTC", height=sandbox.node.height())
        ltc = WatchedChain("LTC", sandbox.node, watch_only_account_from_key(sandbox.vpub, hrp="rltc"), customer)
        invoice = ltc.invoice()

        out = _call("sandbox_pay", invoice.number, "--amount", "4000000")
        assert f"Paid 0.04000000 LTC (4000000 litoshi) to {invoice.active_request.address}" in out
        assert out.endswith(f"Invoice {invoice.number} is new (paid_partial).")
        out = _call("sandbox_pay", invoice.number, "--confirm")  # the rest, and 6 blocks
        assert "Paid 0.06000000 LTC (6000000 litoshi)" in out and "Mined 6 block(s)." in out
        assert out.endswith(f"Invoice {invoice.number} is settled (none).")
        assert (ltc.reload(invoice).status, ltc.reload(invoice).exception) == (
            InvoiceStatus.SETTLED,
            InvoiceException.NONE,
        )
        with pytest.raises(CommandError, match="already_paid: .* paid in full and confirmed"):
            _call("sandbox_pay", invoice.number)
        with pytest.raises(CommandError, match="not_found: No invoice GRH-1999-000001 in the database of DATA_DIR="):
            _call("sandbox_pay", "GRH-1999-000001")

        # Paid in full but not confirmed (processing): --confirm mines the blocks and it settles.
        second = ltc.invoice()
        out = _call("sandbox_pay", second.number)
        assert out.endswith(f"Invoice {second.number} is processing (none).")
        with pytest.raises(CommandError, match="waits for confirmations: give --confirm"):
            _call("sandbox_pay", second.number)
        out = _call("sandbox_pay", second.number, "--confirm")
        txid = ltc.payments(second)[0].txid
        assert f"Nothing left to pay: {txid} to {second.active_request.address} waits for confirmations." in out
        assert "Mined 6 block(s)." in out and out.endswith(f"Invoice {second.number} is settled (none).")
        assert ltc.reload(second).status == InvoiceStatus.SETTLED
        height = sandbox.node.height()
    finally:
        sandbox.stop()
    assert not sandbox.env_file.exists()

    again = sandbox_start(folder=folder)
    try:
        assert again.vpub == sandbox.vpub  # same key, same chain: the data folder persists
        assert again.node.height() == height
        assert again.env["MANUAL_RATES_USD"] == "LTC=90"
        assert again.node.url != sandbox.node.url  # fresh credentials each run
    finally:
        again.stop()


def _call(*args) -> str:
    from io import StringIO

    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue().strip()


@pytest.mark.django_db
def test_sandbox_pay_is_refused_outside_the_sandbox_and_says_why(ltc, settings, tmp_path):
    invoice = ltc.invoice()
    settings.DEBUG, settings.SANDBOX = False, False
    settings.DATA_DIR, settings.SANDBOX_ENV_FILE = tmp_path, tmp_path / "sandbox" / "sandbox.env"
    with pytest.raises(CommandError) as refused:
        _call("sandbox_pay", invoice.number)
    message = str(refused.value)
    assert message.startswith("sandbox_off: This works only in the local sandbox")
    assert "DEBUG=1 is not set, so the sandbox's settings file is not read" in message
    assert f"there is no sandbox settings file at {tmp_path}/sandbox/sandbox.env" in message
    assert f"`make run` is not running with DATA_DIR={tmp_path.resolve()}" in message
    assert "SANDBOX is not set" in message
    settings.DEBUG, settings.SANDBOX = True, True
    settings.LTC_NETWORK = "mainnet"
    with pytest.raises(CommandError, match="sandbox_off: .*LTC_NETWORK is 'mainnet', not regtest"):
        _call("sandbox_pay", invoice.number)
    assert ltc.payments(invoice) == []


def test_the_banner_command_carries_the_data_dir_it_was_started_with(settings, tmp_path):
    assert sandbox_pay_command("GRH-2026-000001") == (
        "DEBUG=1 .venv/bin/python manage.py sandbox_pay GRH-2026-000001 --confirm"
    )
    settings.DATA_DIR = tmp_path / "my data"
    assert sandbox_pay_command() == (
        f"DATA_DIR='{tmp_path.resolve()}/my data' DEBUG=1 .venv/bin/python manage.py sandbox_pay "
        "<invoice-number> --confirm"
    )


@pytest.mark.django_db
def test_sandbox_handover_is_refused_outside_the_sandbox_and_says_why_elsewhere(settings):
    settings.SANDBOX = False
    with pytest.raises(CommandError, match="sandbox_off"):
        _call("sandbox_handover", "1")
    settings.SANDBOX = True
    with pytest.raises(CommandError, match="not_found"):
        _call("sandbox_handover", "999999")


@pytest.mark.slow
def test_production_refuses_the_sandbox_setting():
    env = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SANDBOX")}
    env.update(SANDBOX="1", SECRET_KEY="x" * 50, DATABASE_URL="sqlite:///:memory:")
    result = subprocess.run(
        [sys.executable, "-c", "import config.settings"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "SANDBOX is for local runs only: it needs DEBUG=1" in result.stderr
    env["DEBUG"] = "1"
    assert subprocess.run([sys.executable, "-c", "import config.settings"], env=env, timeout=60).returncode == 0


class FakeProcess:
    started: list = []

    def __init__(self, cmd, env=None):
        self.cmd, self.env, self.returncode = cmd, env, 0
        FakeProcess.started.append(self)

    def poll(self):
        return 0  # exits at once: serve_local stops the rest and shuts down

    def send_signal(self, sig):
        pass

    def wait(self, timeout=None):
        return 0


def test_serve_local_passes_the_sandbox_settings_to_web_worker_and_beat(monkeypatch, tmp_path):
    stopped = []
    env_file = tmp_path / "sandbox.env"
    env_file.write_text("SANDBOX='1'\n")
    sandbox = SimpleNamespace(
        env={"LTC_RPC_URL": "http://u:p@127.0.0.1:1", "SANDBOX": "1"},
        env_file=env_file,
        node=SimpleNamespace(rpc_port=1, datadir="data/sandbox/litecoind"),
        stop=lambda: stopped.append(True),
    )
    FakeProcess.started = []
    demo_env = []
    monkeypatch.setattr(serve_local.subprocess, "Popen", FakeProcess)
    monkeypatch.setattr("devtools.sandbox.serve_start", lambda **kw: sandbox)
    monkeypatch.setattr(
        serve_local.Command,
        "_sandbox_demo_invoice",
        lambda self, env: (
            demo_env.append(env) or {"page": "http://127.0.0.1:8000/pay/T0k3n", "number": "GRH-2026-000007"}
        ),
    )
    monkeypatch.setattr(serve_local.signal, "signal", lambda *a: None)
    monkeypatch.delenv("SITE_URL", raising=False)
    out = io.StringIO()
    serve_local.Command(stdout=out, stderr=io.StringIO())._serve("127.0.0.1", 8000)
    assert len(FakeProcess.started) == 3
    for process in [*FakeProcess.started, SimpleNamespace(env=demo_env[0])]:
        assert process.env["LTC_RPC_URL"] == "http://u:p@127.0.0.1:1" and process.env["SANDBOX"] == "1"
        assert process.env["PATH"] == os.environ["PATH"]
        assert process.env["SITE_URL"] == "http://127.0.0.1:8000"  # checkout links point at this server
    assert stopped == [True]
    banner = out.getvalue()
    assert "Checkout:  http://127.0.0.1:8000/pay/<token>" in banner
    assert "Try paying: http://127.0.0.1:8000/pay/T0k3n  (invoice GRH-2026-000007)" in banner
    assert "manage.py sandbox_pay GRH-2026-000007 --confirm" in banner
    assert f"    {sandbox_pay_command('GRH-2026-000007')}\n" in banner  # the exact command, DATA_DIR included
    # Commands in another shell read the sandbox's settings file: they name this server too.
    assert env_file.read_text() == "SANDBOX='1'\nSITE_URL='http://127.0.0.1:8000'\n"


def test_serve_local_starts_no_sandbox_when_ltc_is_configured_or_in_production(settings, monkeypatch, tmp_path):
    command = serve_local.Command(stdout=io.StringIO())
    monkeypatch.setattr("devtools.sandbox.sandbox_start", lambda **kw: pytest.fail("no sandbox expected"))
    settings.DEBUG = False
    assert command._sandbox_start("LTC") is None
    settings.DEBUG = True
    settings.LTC_RPC_URL = "http://u:p@10.0.0.6:9332"
    settings.SANDBOX = False
    assert command._sandbox_start("LTC") is None
    settings.LTC_RPC_URL = ""
    monkeypatch.setenv("SANDBOX", "0")
    assert command._sandbox_start("LTC") is None
    monkeypatch.delenv("SANDBOX")
    started = []
    monkeypatch.setattr("devtools.sandbox.sandbox_start", lambda **kw: started.append(kw) or "sandbox")
    settings.SANDBOX_ENV_FILE = tmp_path / "sandbox" / "sandbox.env"
    settings.MANUAL_RATES_USD = "BTC=1"
    assert command._sandbox_start("LTC") == "sandbox"
    assert started == [{"folder": tmp_path / "sandbox", "manual_rates": "BTC=1"}]


def test_serve_local_on_a_wildcard_address_allows_this_machine_and_warns(settings, monkeypatch):
    """HOST=0.0.0.0 make run: other machines reach it by this machine's name or
    address, which must be in ALLOWED_HOSTS (else DisallowedHost and, with
    DEBUG, the settings on a debug page); a warning says DEBUG must not face a network."""
    import socket

    settings.DEBUG = True
    settings.ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]
    FakeProcess.started = []
    monkeypatch.setattr(serve_local.subprocess, "Popen", FakeProcess)
    monkeypatch.setattr(serve_local.Command, "_sandbox_start", lambda self, code: None)
    monkeypatch.setattr(serve_local.signal, "signal", lambda *a: None)
    err = io.StringIO()
    serve_local.Command(stdout=io.StringIO(), stderr=err)._serve("0.0.0.0", 8000)
    allowed = FakeProcess.started[0].env["ALLOWED_HOSTS"].split(",")
    assert socket.gethostname() in allowed and "127.0.0.1" in allowed
    assert "DEBUG pages must not face a network" in err.getvalue()

    FakeProcess.started = []
    err = io.StringIO()
    serve_local.Command(stdout=io.StringIO(), stderr=err)._serve("192.0.2.10", 8000)
    assert "192.0.2.10" in FakeProcess.started[0].env["ALLOWED_HOSTS"].split(",")
    assert "DEBUG pages must not face a network" in err.getvalue()

    FakeProcess.started = []
    err = io.StringIO()
    serve_local.Command(stdout=io.StringIO(), stderr=err)._serve("127.0.0.1", 8000)
    assert FakeProcess.started[0].env["ALLOWED_HOSTS"].split(",") == ["localhost", "127.0.0.1", "[::1]"]
    assert "must not face a network" not in err.getvalue()


@pytest.mark.django_db
def test_sandbox_scan_waits_out_the_workers_run_of_the_chain(ltc, monkeypatch):
    """sandbox_pay scans right after paying; when the worker's own run holds the
    chain's lease (it may have begun before the payment was mined), the scan waits
    for it and runs, instead of reporting "busy" and leaving the invoice unpaid."""
    name = f"chain_scan:{watcher_for(currency='LTC').chain}"
    owner = lease_acquire(name=name, ttl=timedelta(minutes=2))
    assert owner is not None
    assert chain_scan_now(currency="LTC", timeout=0).skipped == "busy"  # no time to wait: says so

    seen = []
    real = scanning.chain_scan

    def worker_finishes_after_one_try(**kwargs):
        report = real(**kwargs)
        seen.append(report.skipped)
        if report.skipped == "busy":
            lease_release(name=name, owner=owner)
        return report

    monkeypatch.setattr(scanning, "chain_scan", worker_finishes_after_one_try)
    invoice = ltc.invoice()
    ltc.pay(invoice, 100_000)
    report = chain_scan_now(currency="LTC")
    assert seen == ["busy", ""] and not report.skipped
    assert [int(p.amount) for p in ltc.payments(invoice)] == [100_000]
