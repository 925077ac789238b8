"""The Solana sandbox of `make run`: the loopback node with a clock, in the
server's process; `sandbox_pay` pays a SOL invoice from another process the way
a wallet pays a Solana Pay request (`sendTransaction`), and the watcher settles it."""

from __future__ import annotations

import io
from decimal import Decimal

import pytest
from django.core.management import call_command

from billing import services
from billing.chains.watchers import watcher_for
from billing.models import InvoiceException, InvoiceStatus, Payment
from core.errors import DomainError
from devtools.solana_sandbox import sol_sandbox_invoice_pay, sol_sandbox_start

pytestmark = [pytest.mark.chain, pytest.mark.django_db]


@pytest.fixture
def sandbox(tmp_path, settings):
    started = sol_sandbox_start(folder=tmp_path / "sandbox", manual_rates="BTC=95000", slot_seconds=0.01)
    settings.SANDBOX_ENV_FILE = tmp_path / "sandbox" / "sandbox.env"
    for name, value in started.env.items():
        setattr(settings, name, value)
    settings.SANDBOX = True
    watcher_for(currency="SOL").process_state_clear()
    try:
        yield started
    finally:
        started.stop()


def invoice_in_sol(customer, total: str = "30.00"):
    amount = Decimal(total)
    return services.invoice_create(
        account=customer,
        payable=("test", 0),
        description="Sandbox test",
        lines=[services.LineSpec("GPU time", Decimal(1), amount, amount)],
        currency="SOL",
    )


def test_the_sandbox_keeps_its_recipient_and_wallet_and_starts_a_new_cluster(tmp_path):
    folder = tmp_path / "sandbox"
    first = sol_sandbox_start(folder=folder)
    first.stop()
    second = sol_sandbox_start(folder=folder)
    second.stop()
    assert first.env["MANUAL_RATES_USD"] == "SOL=150"
    assert first.recipient == second.recipient == second.env["SOL_RECIPIENT"]
    assert (first.env["SOL_CLUSTER"], second.env["SOL_CLUSTER"]) == ("localnet", "localnet")
    assert first.env["SOL_GENESIS_HASH"] != second.env["SOL_GENESIS_HASH"]  # a reset test validator
    assert (folder / "sol-wallet.json").stat().st_mode & 0o077 == 0


def test_sandbox_pay_settles_a_sol_invoice(sandbox, customer):
    invoice = invoice_in_sol(customer)
    out = io.StringIO()
    call_command("sandbox_pay", invoice.number, "--confirm", stdout=out)
    text = out.getvalue()
    assert f"Paid 0.200000000 SOL (200000000 lamports) to {sandbox.recipient}" in text  # $30 at $150
    assert f"Invoice {invoice.number} is settled (none)." in text
    [payment] = Payment.objects.filter(invoice=invoice)
    tx = sandbox.server.ledger.transaction(payment.txid)
    assert invoice.active_request.reference in [str(k) for k in tx.account_keys]  # a Solana Pay transfer
    with pytest.raises(DomainError, match="paid in full"):
        sol_sandbox_invoice_pay(invoice_number=invoice.number)


def test_sandbox_pay_without_confirm_is_processing_then_partial_and_top_up(sandbox, customer):
    invoice = invoice_in_sol(customer)
    paid = sol_sandbox_invoice_pay(invoice_number=invoice.number, amount=50_000_000)
    assert (paid.status, paid.exception) in {
        (InvoiceStatus.NEW, InvoiceException.PAID_PARTIAL),  # finalized already (a fast clock)
        (InvoiceStatus.NEW, InvoiceException.NONE),  # still confirmed: a partial amount moves nothing yet
    }
    done = sol_sandbox_invoice_pay(invoice_number=invoice.number, confirm=True)
    assert done.amount == 150_000_000 and (done.status, done.exception) == (InvoiceStatus.SETTLED, "none")


def test_sandbox_pay_refuses_a_node_that_is_not_the_sandbox(sandbox, customer, settings):
    invoice = invoice_in_sol(customer)
    settings.SOL_GENESIS_HASH = "5eykt4UsFv8P8NJdTREpY1vzqKqZKvdpKuc147dw2N9d"
    with pytest.raises(DomainError, match="not the sandbox's"):
        sol_sandbox_invoice_pay(invoice_number=invoice.number)
    settings.SANDBOX = False
    with pytest.raises(DomainError, match="sandbox_off|only in the local sandbox"):
        sol_sandbox_invoice_pay(invoice_number=invoice.number)
    assert not Payment.objects.exists()


def test_sandbox_pay_confirm_waits_out_an_invoice_already_processing(sandbox, customer):
    invoice = invoice_in_sol(customer)
    paid = sol_sandbox_invoice_pay(invoice_number=invoice.number)
    if paid.status == InvoiceStatus.SETTLED:  # finalized already (a fast clock): nothing left to confirm
        with pytest.raises(DomainError, match="paid in full and confirmed"):
            sol_sandbox_invoice_pay(invoice_number=invoice.number, confirm=True)
        return
    assert paid.status == InvoiceStatus.PROCESSING
    done = sol_sandbox_invoice_pay(invoice_number=invoice.number, confirm=True)
    assert (done.amount, done.txid) == (0, paid.txid)  # nothing sent again
    assert (done.status, done.exception) == (InvoiceStatus.SETTLED, "none")
