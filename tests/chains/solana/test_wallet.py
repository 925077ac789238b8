"""A Solana Pay wallet pays a SOL invoice of the sandbox of `make run`.

The sandbox's loopback node (devtools.solana_sandbox, with its clock) is paid
by tests/chains/solana/solana_pay_wallet.js, run with node and the npm packages
a wallet uses (@solana/pay's `parseURL` and `createTransfer`, @solana/web3.js's
`sendAndConfirmTransaction`, pinned in devtools/node/package-lock.json and
installed into .tools/ by tests/ensure-chain-nodes.sh): it reads the invoice's
`solana:` URI, funds a new keypair with `requestAirdrop`, builds, simulates,
sends and confirms the transfer through the node's HTTP and websocket APIs.
The watcher, woken by `listen_chain`'s subscription, then finds the invoice
paid and settles it once the sandbox's clock finalizes the block.

Never skipped: without node or the packages the test fails with the fix.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from decimal import Decimal
from pathlib import Path

import pytest

from billing import services
from billing.chains.watchers import ChainListener, watcher_for
from billing.models import InvoiceException, InvoiceStatus, Payment

pytestmark = [pytest.mark.chain, pytest.mark.django_db]

ROOT = Path(__file__).resolve().parents[3]
WALLET = Path(__file__).with_name("solana_pay_wallet.js")


def node_modules() -> str:
    """Where @solana/pay is installed: NODE_PATH's folders, then .tools/node_modules."""
    candidates = [p for p in os.environ.get("NODE_PATH", "").split(os.pathsep) if p]
    candidates.append(str(ROOT / ".tools" / "node_modules"))
    for folder in candidates:
        if (Path(folder) / "@solana" / "pay" / "package.json").is_file():
            return folder
    pytest.fail(
        "@solana/pay is not installed: run tests/ensure-chain-nodes.sh (npm ci into .tools/ from "
        "devtools/node/package-lock.json), or point NODE_PATH at a node_modules folder holding it"
    )


@pytest.fixture
def sandbox(tmp_path, settings):
    from devtools.solana_sandbox import sol_sandbox_start

    started = sol_sandbox_start(folder=tmp_path / "sandbox", slot_seconds=0.05)
    settings.SANDBOX_ENV_FILE = tmp_path / "sandbox" / "sandbox.env"
    for name, value in started.env.items():
        setattr(settings, name, value)
    settings.SANDBOX = True
    watcher_for(currency="SOL").process_state_clear()
    try:
        yield started
    finally:
        started.stop()


def test_a_solana_pay_wallet_pays_a_sandbox_invoice_and_the_watcher_settles_it(sandbox, customer):
    node = shutil.which("node")
    assert node, "node is missing: install Node.js 20 or later (tests/ensure-chain-nodes.sh does, as root)"
    invoice = services.invoice_create(
        account=customer,
        payable=("test", 0),
        description="Sandbox test",
        lines=[services.LineSpec("GPU time", Decimal(1), Decimal("30.00"), Decimal("30.00"))],
        currency="SOL",
    )
    request = invoice.active_request
    with ChainListener(watcher_for(currency="SOL"), debounce=0.0) as listener:
        done = subprocess.run(
            [node, str(WALLET), sandbox.url, request.payment_uri],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "NODE_PATH": node_modules()},
            check=False,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        paid = json.loads(done.stdout.strip().splitlines()[-1])
        assert paid["recipient"] == sandbox.recipient == request.address
        assert paid["reference"] == [request.reference]
        assert paid["lamports"] == int(request.amount_due) == 200_000_000  # $30 at $150
        assert paid["found"] == paid["signature"] and paid["inBlock"]
        assert (paid["fee"], paid["rentExempt"]) == (5000, 890_880)

        deadline = time.monotonic() + 60
        while (status := _status(invoice))[0] != InvoiceStatus.SETTLED:
            assert time.monotonic() < deadline, f"not settled: {status}"
            listener.run(max_scans=1, timeout=5.0)
    assert status == (InvoiceStatus.SETTLED, InvoiceException.NONE)
    [payment] = Payment.objects.filter(invoice=invoice)
    assert (payment.txid, int(payment.amount)) == (paid["signature"], 200_000_000)
    calls = sandbox.server.stats.calls
    for method in (
        "requestAirdrop",
        "getAccountInfo",
        "getLatestBlockhash",
        "getFeeForMessage",
        "getMinimumBalanceForRentExemption",
        "simulateTransaction",
        "sendTransaction",
        "signatureSubscribe",
        "getBlock",
        "logsSubscribe",
    ):
        assert calls[method] >= 1, method


def _status(invoice) -> tuple[str, str]:
    invoice.refresh_from_db()
    return invoice.status, invoice.exception
