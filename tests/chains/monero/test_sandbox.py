"""`manage.py sandbox_pay` pays an XMR invoice from the sandbox's payer wallet (here the
session's regtest network stands in for the one `make run` keeps in its data folder)."""

from __future__ import annotations

import re

import pytest
from django.core.management import CommandError, call_command

from devtools.monero_sandbox import PAYER_FILE

pytestmark = [pytest.mark.chain, pytest.mark.slow, pytest.mark.django_db]


@pytest.fixture
def sandbox(xmr, settings, tmp_path):
    folder = tmp_path / "monero"
    folder.mkdir()
    (folder / PAYER_FILE).write_text(f"{xmr.net.payer.url} {xmr.net.daemon_url}\n")
    settings.SANDBOX_ENV_FILE = tmp_path / "sandbox.env"
    settings.SANDBOX = True
    return xmr


def test_sandbox_pay_settles_an_xmr_invoice(sandbox, capsys):
    invoice = sandbox.invoice()
    call_command("sandbox_pay", invoice.number, "--confirm")
    out = capsys.readouterr().out
    assert f"Paid 0.175000000000 XMR (175000000000 piconero) to {sandbox.address(invoice)}" in out
    # Three confirmations; monerod may mine the transfer's own block one or two late (below).
    assert re.search(r"Mined [3-9] block\(s\)\.", out) and f"Invoice {invoice.number} is settled (none)." in out
    with pytest.raises(CommandError, match="already_paid"):
        call_command("sandbox_pay", invoice.number)


def test_sandbox_pay_refuses_outside_the_sandbox(xmr, settings):
    settings.SANDBOX = False
    invoice = xmr.invoice()
    with pytest.raises(CommandError, match="sandbox_off"):
        call_command("sandbox_pay", invoice.number)
    assert xmr.payments(invoice) == []


def test_sandbox_pay_confirm_mines_what_a_paid_but_unconfirmed_invoice_still_needs(sandbox, capsys):
    invoice = sandbox.invoice()
    call_command("sandbox_pay", invoice.number)  # paid in full, in a block: 1 confirmation of 3
    # monerod mines a fresh transfer once its Dandelion++ embargo is over: its block may be the second.
    assert re.search(r"Mined [1-9] block\(s\)\.", capsys.readouterr().out)
    invoice.refresh_from_db()
    assert invoice.status == "processing"
    assert [p.confirmations for p in sandbox.payments(invoice)] == [1]
    with pytest.raises(CommandError, match="already_paid: .* give --confirm"):
        call_command("sandbox_pay", invoice.number)
    call_command("sandbox_pay", invoice.number, "--confirm")
    out = capsys.readouterr().out
    assert "Nothing left to pay" in out and "Mined 2 block(s)." in out
    assert f"Invoice {invoice.number} is settled (none)." in out
    assert len(sandbox.payments(invoice)) == 1
