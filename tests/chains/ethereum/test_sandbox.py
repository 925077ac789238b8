"""The Ethereum sandbox of `make run`: anvil with its chain kept in the data folder,
the test tokens deployed once, and paying ETH, USDT and USDC invoices from it."""

from __future__ import annotations

import pytest

from billing.models import InvoiceException, InvoiceStatus
from core.errors import DomainError
from devtools.ethereum_sandbox import eth_sandbox_invoice_pay, eth_sandbox_start

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@pytest.fixture
def sandbox(tmp_path):
    started = eth_sandbox_start(folder=tmp_path / "sandbox", manual_rates="BTC=95000,USDT=1")
    assert started is not None
    try:
        yield started
    finally:
        started.stop()


def test_the_chain_and_the_tokens_survive_a_restart(tmp_path):
    folder = tmp_path / "sandbox"
    first = eth_sandbox_start(folder=folder)
    try:
        assert first.env["MANUAL_RATES_USD"] == "ETH=3500,USDT=1,USDC=1"
        assert first.node.token_balance(first.usdt, first.node.payer) == 0
        first.node.token_mint(first.usdt, first.node.payer, 1234)
        first.node.mine()
    finally:
        first.stop()
    second = eth_sandbox_start(folder=folder)
    try:
        assert (second.xpub, second.usdt, second.usdc) == (first.xpub, first.usdt, first.usdc)
        assert second.node.token_balance(second.usdt, second.node.payer) == 1234
        assert second.env["USDT_CONTRACT"] == first.usdt and second.env["ETH_RPC_URL"] != ""
    finally:
        second.stop()
    assert not (folder / "eth-xpub").read_text().strip().startswith("xprv")


@pytest.mark.parametrize("currency", ["ETH", "USDT", "USDC"])
def test_sandbox_pay(sandbox, settings, customer, currency):
    from decimal import Decimal

    from billing import services
    from billing.chains.watchers import watcher_for

    for name, value in sandbox.env.items():
        setattr(settings, name, value)
    settings.ETH_CHAIN_ID = int(sandbox.env["ETH_CHAIN_ID"])
    settings.SANDBOX = True
    watcher = watcher_for(currency="ETH")
    watcher.process_state_clear()
    watcher.cursor_set(height=sandbox.node.height())
    invoice = services.invoice_create(
        account=customer,
        payable=("test", 0),
        description="Sandbox",
        lines=[services.LineSpec("GPU time", Decimal(1), Decimal("35.00"), Decimal("35.00"))],
        currency=currency,
    )
    partial = eth_sandbox_invoice_pay(invoice_number=invoice.number, amount=int(invoice.active_request.amount_due) // 2)
    assert (partial.currency, partial.blocks_mined, partial.status) == (currency, 1, InvoiceStatus.NEW)
    assert partial.exception == InvoiceException.PAID_PARTIAL
    rest = eth_sandbox_invoice_pay(invoice_number=invoice.number, confirm=True)
    assert rest.amount == int(invoice.active_request.amount_due) - partial.amount
    assert (rest.status, rest.exception, rest.blocks_mined) == (InvoiceStatus.SETTLED, InvoiceException.NONE, 12)
    with pytest.raises(DomainError, match="paid in full"):
        eth_sandbox_invoice_pay(invoice_number=invoice.number)
    watcher.process_state_clear()


def test_sandbox_pay_confirms_an_invoice_already_processing(sandbox, settings, customer):
    from decimal import Decimal

    from billing import services
    from billing.chains.watchers import watcher_for

    for name, value in sandbox.env.items():
        setattr(settings, name, value)
    settings.ETH_CHAIN_ID = int(sandbox.env["ETH_CHAIN_ID"])
    settings.SANDBOX = True
    watcher = watcher_for(currency="ETH")
    watcher.process_state_clear()
    watcher.cursor_set(height=sandbox.node.height())
    invoice = services.invoice_create(
        account=customer,
        payable=("test", 0),
        description="Sandbox",
        lines=[services.LineSpec("GPU time", Decimal(1), Decimal("35.00"), Decimal("35.00"))],
        currency="ETH",
    )
    paid = eth_sandbox_invoice_pay(invoice_number=invoice.number)
    assert paid.status == InvoiceStatus.PROCESSING
    confirmed = eth_sandbox_invoice_pay(invoice_number=invoice.number, confirm=True)
    assert (confirmed.amount, confirmed.txid) == (0, paid.txid)  # nothing sent again
    assert (confirmed.status, confirmed.exception) == (InvoiceStatus.SETTLED, InvoiceException.NONE)
    watcher.process_state_clear()


def test_sandbox_pay_refuses_outside_the_sandbox(settings, customer, evm):
    settings.SANDBOX = False
    settings.ETH_RPC_URL = evm.node.url
    with pytest.raises(DomainError) as refused:
        eth_sandbox_invoice_pay(invoice_number="GRH-2026-000001")
    assert refused.value.code in ("sandbox_off", "not_found")


def test_sandbox_pay_command_pays_a_token_invoice(sandbox, settings, customer):
    import io
    from decimal import Decimal

    from django.core.management import call_command

    from billing import services
    from billing.chains.watchers import watcher_for

    for name, value in sandbox.env.items():
        setattr(settings, name, value)
    settings.ETH_CHAIN_ID = int(sandbox.env["ETH_CHAIN_ID"])
    settings.SANDBOX = True
    watcher = watcher_for(currency="ETH")
    watcher.process_state_clear()
    watcher.cursor_set(height=sandbox.node.height())
    invoice = services.invoice_create(
        account=customer,
        payable=("test", 0),
        description="Sandbox",
        lines=[services.LineSpec("GPU time", Decimal(1), Decimal("25.00"), Decimal("25.00"))],
        currency="USDT",
    )
    out = io.StringIO()
    call_command("sandbox_pay", invoice.number, "--confirm", stdout=out)
    text = out.getvalue()
    assert f"Paid 25.000000 USDT (25000000 token units) to {invoice.active_request.address}" in text
    assert "Mined 12 block(s)." in text and f"Invoice {invoice.number} is settled (none)." in text
    watcher.process_state_clear()


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


def test_serve_local_runs_the_eth_sandbox_alone(monkeypatch, settings, tmp_path):
    import io
    import os
    from types import SimpleNamespace

    from devtools.management.commands import serve_local

    stopped = []
    eth_sandbox = SimpleNamespace(
        env={"ETH_XPUB": "xpub-of-the-sandbox", "ETH_RPC_URL": "http://127.0.0.1:1", "ETH_CHAIN_ID": "31337"},
        node=SimpleNamespace(url="http://127.0.0.1:1"),
        usdt="0xUSDT",
        usdc="0xUSDC",
        stop=lambda: stopped.append(True),
    )
    settings.SANDBOX_ENV_FILE = tmp_path / "sandbox" / "sandbox.env"
    env_file_while_running = []

    def start(cmd, env=None):
        env_file_while_running.append(settings.SANDBOX_ENV_FILE.read_text())
        return FakeProcess(cmd, env)

    FakeProcess.started = []
    monkeypatch.setattr(serve_local.subprocess, "Popen", start)
    monkeypatch.setattr("devtools.sandbox.serve_start", lambda **kw: None)
    monkeypatch.setattr("devtools.ethereum_sandbox.serve_start", lambda **kw: eth_sandbox)
    monkeypatch.setattr(serve_local.signal, "signal", lambda *a: None)
    monkeypatch.delenv("SITE_URL", raising=False)
    out = io.StringIO()
    serve_local.Command(stdout=out, stderr=io.StringIO())._serve("127.0.0.1", 8000)
    assert len(FakeProcess.started) == 3
    for process in FakeProcess.started:
        assert process.env["ETH_RPC_URL"] == "http://127.0.0.1:1" and process.env["SANDBOX"] == "1"
        assert process.env["PATH"] == os.environ["PATH"]
    assert stopped == [True]
    assert "ETH sandbox: an anvil node at http://127.0.0.1:1" in out.getvalue()
    # Commands in another shell (sandbox_pay) read the settings file while it runs.
    written = env_file_while_running[0]
    assert "ETH_RPC_URL='http://127.0.0.1:1'" in written and "SANDBOX='1'" in written
    assert "SITE_URL='http://127.0.0.1:8000'" in written
    assert not settings.SANDBOX_ENV_FILE.exists()  # retracted when it stops


def test_no_eth_sandbox_when_eth_is_configured_or_in_production(settings, monkeypatch, tmp_path):
    import io

    from devtools.management.commands import serve_local

    command = serve_local.Command(stdout=io.StringIO())
    monkeypatch.setattr("devtools.ethereum_sandbox.eth_sandbox_start", lambda **kw: pytest.fail("no sandbox"))
    settings.DEBUG = False
    assert command._sandbox_start("ETH") is None
    settings.DEBUG = True
    settings.ETH_RPC_URL = "http://10.0.0.7:8545"
    settings.SANDBOX = False
    assert command._sandbox_start("ETH") is None
    settings.ETH_RPC_URL = ""
    monkeypatch.setenv("SANDBOX", "0")
    assert command._sandbox_start("ETH") is None
    monkeypatch.delenv("SANDBOX")
    started = []
    monkeypatch.setattr("devtools.ethereum_sandbox.eth_sandbox_start", lambda **kw: started.append(kw) or "eth")
    settings.SANDBOX_ENV_FILE = tmp_path / "sandbox" / "sandbox.env"
    settings.MANUAL_RATES_USD = "LTC=90"
    assert command._sandbox_start("ETH") == "eth"
    assert started == [{"folder": tmp_path / "sandbox", "manual_rates": "LTC=90"}]
