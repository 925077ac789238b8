"""The Monero part of the sandbox of `make run`: a monerod regtest network kept in the
data folder (the daemon, a payer wallet with coins, the merchant's view-only wallet),
the settings that point XMR at it, and `xmr_sandbox_invoice_pay` (behind `manage.py
sandbox_pay`), which pays an XMR invoice from the payer wallet.

`make run` starts it when DEBUG is on, monerod is installed (`bash
tests/ensure-chain-nodes.sh`) and XMR is not configured otherwise. Development only:
nothing in production imports devtools, and paying refuses to run outside the sandbox.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from billing import services
from billing.models import Invoice, PaymentStatus
from core.errors import DomainError, NotFound
from devtools.monero import MoneroRegtest, MoneroRpcError, Rpc, mine_past_pool, monero_installed
from devtools.sandbox import amount_still_due
from devtools.scanning import SandboxPayment, chain_scan_now

SANDBOX_RATE = "200"  # XMR in USD when MANUAL_RATES_USD does not name it
SANDBOX_LOOKAHEAD = 200  # Monero's default: the watcher creates subaddresses as invoices are issued
NOTIFY_SCRIPT = Path(__file__).resolve().parent.parent / "billing" / "chains" / "monero" / "notify.py"
PAYER_FILE = "payer.url"  # where `sandbox_pay` finds the payer wallet (beside the network's files)


@dataclass
class MoneroSandbox:
    net: MoneroRegtest
    env: dict[str, str]

    def stop(self) -> None:
        """Stop the wallets and the daemon; they save their files in the data folder on the way out."""
        self.net.stop()
        (self.net.directory / PAYER_FILE).unlink(missing_ok=True)


def _with_rate(rates: str) -> str:
    entries = [e.strip() for e in (rates or "").split(",") if e.strip()]
    named = {e.split("=", 1)[0].strip().upper() for e in entries}
    return ",".join([*entries, *([] if "XMR" in named else [f"XMR={SANDBOX_RATE}"])])


def xmr_sandbox_start(*, folder: Path, manual_rates: str = "") -> MoneroSandbox | None:
    """Start the network with everything kept in `folder`/monero (None when monerod is not installed).

    `env` holds the settings for the processes that must see it: XMR_ADDRESS,
    XMR_VIEW_KEY, XMR_WALLET_RPC_URL, XMR_DAEMON_URL, XMR_SUBADDRESS_LOOKAHEAD,
    XMR_NETWORK=regtest and MANUAL_RATES_USD with an XMR rate.
    """
    if not monero_installed():
        return None
    # A payment in the pool queues the scan at once (docs/chains/push.md); the hook runs
    # with an empty environment and reads the broker's URL from a file.
    broker_file = folder / "monero" / "broker.url"
    broker_file.parent.mkdir(parents=True, exist_ok=True)
    broker_file.write_text(f"{settings.CELERY_BROKER_URL}\n")
    net = MoneroRegtest.start(
        directory=folder / "monero",
        lookahead=SANDBOX_LOOKAHEAD,
        tx_notify=f"{sys.executable} {NOTIFY_SCRIPT} --broker-file {broker_file} XMR %s",
    )
    (net.directory / PAYER_FILE).write_text(f"{net.payer.url} {net.daemon_url}\n")
    env = {
        "XMR_ADDRESS": net.address,
        "XMR_VIEW_KEY": net.view_key,
        "XMR_WALLET_RPC_URL": net.wallet_url,
        "XMR_DAEMON_URL": net.daemon_url,
        "XMR_SUBADDRESS_LOOKAHEAD": str(SANDBOX_LOOKAHEAD),
        "XMR_WALLET_REFRESH_SECONDS": "1",  # the wallet reads the pool every second; --tx-notify then
        "XMR_NETWORK": "regtest",
        "MANUAL_RATES_USD": _with_rate(manual_rates),
    }
    return MoneroSandbox(net=net, env=env)


def _sandbox_rpcs() -> tuple[Rpc, Rpc]:
    """The sandbox's payer wallet and daemon; DomainError outside the sandbox."""
    record = Path(settings.SANDBOX_ENV_FILE).parent / "monero" / PAYER_FILE
    if not settings.SANDBOX or not record.is_file():
        raise DomainError(
            "sandbox_off",
            "This works only in the local sandbox (SANDBOX=1, with the monerod regtest network "
            "`make run` starts when monerod is installed).",
        )
    payer_url, daemon_url = record.read_text().split()
    if daemon_url != str(getattr(settings, "XMR_DAEMON_URL", "")):
        raise DomainError("sandbox_node", "Refusing to pay: XMR_DAEMON_URL is not the sandbox's monerod.")
    port = lambda url: int(url.rsplit(":", 1)[1])  # noqa: E731 - loopback URLs the sandbox wrote
    return Rpc(port(payer_url), timeout=120), Rpc(port(daemon_url), timeout=120)


CONFIRM_WAIT_SECONDS = 20.0  # at most this long for the watcher to count the blocks --confirm mined


def xmr_sandbox_invoice_pay(*, invoice_number: str, amount: int | None = None, confirm: bool = False) -> SandboxPayment:
    """Pay an invoice's XMR subaddress from the sandbox's payer wallet and mine a block
    (with `confirm`, CONFIRMATIONS_XMR blocks); then scan right away. Refused outside the sandbox."""
    invoice = Invoice.objects.filter(number=invoice_number).first()
    if invoice is None:
        raise NotFound(f"No invoice {invoice_number}.")
    request = invoice.requests.filter(currency="XMR").order_by("-is_active", "-created_at", "-id").first()
    if request is None:
        raise DomainError("no_payment_request", f"{invoice_number} has no XMR subaddress to pay.")
    required = max(1, services.confirmations_required(currency="XMR"))
    pending = list(request.payments.filter(status=PaymentStatus.PENDING).order_by("first_seen_at", "id"))
    blocks = required if confirm else 1
    if amount is None:
        amount = amount_still_due(request=request, pending=pending, confirm=confirm, invoice_number=invoice_number)
        if amount == 0:  # paid in full, unconfirmed: mine what its confirmations still need
            blocks = max(1, required - min(p.confirmations for p in pending))
    elif amount <= 0:
        raise DomainError("invalid", "The amount is a positive number of piconero.")
    payer, daemon = _sandbox_rpcs()
    if amount:
        try:
            payer.call("refresh")
            sent = payer.call("transfer", destinations=[{"address": request.address, "amount": amount}], priority=0)
        except MoneroRpcError as exc:
            raise DomainError("sandbox_payer", f"The sandbox's payer wallet refused: {exc}") from None
        txid = sent["tx_hash"]
    else:
        txid = pending[0].txid
    wanted = required if confirm else blocks
    # The transfer's own block can come one or two late (devtools/monero.py, mine_past_pool): say
    # how many were mined in all.
    blocks = mine_past_pool(daemon, blocks=blocks, address=payer.call("get_address")["address"])
    report = chain_scan_now(currency="XMR")
    invoice.refresh_from_db()
    # The merchant's wallet may not have taken the new blocks in yet (it refreshes on its own
    # period): scan again for a few seconds until the payment is seen with the blocks mined.
    give_up = time.monotonic() + CONFIRM_WAIT_SECONDS
    while time.monotonic() < give_up and not request.payments.filter(txid=txid, confirmations__gte=wanted).exists():
        time.sleep(0.5)
        report = chain_scan_now(currency="XMR")
    invoice.refresh_from_db()
    return SandboxPayment(
        invoice.number,
        "XMR",
        request.address,
        amount,
        txid,
        blocks,
        invoice.status,
        invoice.exception,
        report,
    )


# --- what `make run` (serve_local) and `sandbox_pay` ask of this sandbox (devtools/sandboxes.py) -----------

SANDBOX_CODE = "XMR"
# Started once the server answers: its first start mines for a minute or more, which would slow the
# migration down on a small machine.
SANDBOX_STARTS = "late"
invoice_pay = xmr_sandbox_invoice_pay


def serve_start(*, rates: str, say: Callable[[str], object], warn: Callable[[str], object]) -> MoneroSandbox | None:
    """A monerod regtest network with a view-only wallet, when monerod is installed and
    XMR is not configured otherwise (SANDBOX=0 turns it off)."""
    from devtools.sandboxes import sandboxes_allowed

    if not sandboxes_allowed():
        return None
    if (settings.XMR_ADDRESS or settings.XMR_WALLET_RPC_URL) and not settings.SANDBOX:
        return None  # XMR is configured: no sandbox
    from devtools.monero import NodeStartError

    if not monero_installed():
        say("No XMR sandbox: install monero (bash tests/ensure-chain-nodes.sh) to get one.")
        return None
    say(
        "Starting the XMR sandbox in the background (monerod --regtest and two wallets; the first start mines "
        "for a minute or more): it says so here when it is ready, and web, worker and beat restart to see it."
    )
    try:
        return xmr_sandbox_start(folder=settings.SANDBOX_ENV_FILE.parent, manual_rates=rates)
    except (NodeStartError, OSError, RuntimeError) as exc:
        warn(f"The XMR sandbox did not start: {exc}")
        return None


def serve_banner(box: MoneroSandbox, *, demo: dict[str, str] | None) -> str:
    from devtools.sandbox import sandbox_pay_command

    return (
        f"XMR sandbox: monerod --regtest at {box.net.daemon_url} with a view-only "
        f"wallet-rpc at {box.net.wallet_url} (kept in {box.net.directory}).\n"
        "    Order or invoice in XMR, then pay it from the regtest payer wallet:\n"
        f"    {sandbox_pay_command()}\n"
    )
