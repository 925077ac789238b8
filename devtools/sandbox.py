"""The sandbox of `make run`: a Litecoin regtest node kept in the data folder,
the settings that point LTC at it, `sandbox_invoice_issue` (behind
`manage.py sandbox_invoice`: a demo invoice to try the checkout page with) and
`sandbox_invoice_pay` (behind `manage.py sandbox_pay`), which pays an invoice
from the node's wallet.

`make run` (devtools' `serve_local`) starts it when DEBUG is on, litecoind is
installed and LTC is not configured otherwise. Development only: nothing in
production imports devtools, and both refuse to run unless
SANDBOX is set (which production settings refuse without DEBUG) and LTC points
at a regtest node.
"""

from __future__ import annotations

import contextlib
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from billing import services
from billing.chains.utxo.rpc import BitcoinRpc, ChainUnavailable, RpcError
from billing.chains.utxo.watcher import rpc_url
from billing.models import Invoice, PaymentStatus
from core.errors import DomainError, NotFound
from devtools.litecoind import (
    REGTEST_HRP,
    RegtestNode,
    base_units_to_coins,
    watch_only_account_from_key,
    watch_only_account_generate,
)
from devtools.scanning import SandboxPayment, chain_scan_now
from rentals.models import Rental
from rentals.services.lifecycle import rental_activate

SANDBOX_WALLET = "sandbox"
# Blocks the sandbox chain starts with: 200 mature coinbases (8,750 regtest LTC),
# enough to pay invoices of any size.
SANDBOX_MIN_HEIGHT = 300
# The LTC rate quoted in the sandbox when MANUAL_RATES_USD does not name one.
SANDBOX_LTC_USD = "90"


def regtest_wallet_pay(
    *, url: str, wallet: str, address: str, amount: int, mine: int = 0, max_top_ups: int = 5
) -> tuple[str, list[str]]:
    """Pay `amount` base units to `address` from a regtest node's wallet, then mine
    `mine` blocks; (txid, block hashes). Refuses any node that is not on regtest."""
    with BitcoinRpc(url) as rpc, BitcoinRpc(url, wallet=wallet) as wallet_rpc:
        chain = rpc.call("getblockchaininfo")["chain"]
        if chain != "regtest":
            raise RpcError(0, f"the node is on {chain!r}, not regtest: refusing to pay from it", method="sandbox")
        for _ in range(max_top_ups):
            balance = Decimal(wallet_rpc.call("getbalance"))
            if balance.scaleb(8) > amount + 1_000_000:
                break
            # Coinbases mature after 100 blocks: mine 101 to make the wallet richer.
            rpc.call("generatetoaddress", 101, wallet_rpc.call("getnewaddress", "", "bech32"))
        # Nothing to send (amount 0): only mine, e.g. to confirm what was sent before.
        txid = wallet_rpc.call("sendtoaddress", address, base_units_to_coins(amount)) if amount > 0 else ""
        hashes: list[str] = []
        if mine:
            hashes = rpc.call("generatetoaddress", mine, wallet_rpc.call("getnewaddress", "", "bech32"))
        return txid, hashes


@dataclass
class Sandbox:
    """A regtest Litecoin node kept in the data folder, and the settings that point LTC at it."""

    node: RegtestNode
    vpub: str
    env: dict[str, str]
    env_file: Path

    def stop(self) -> None:
        """Stop the node (its chain stays in the data folder) and retract the settings."""
        with contextlib.suppress(OSError):
            self.env_file.unlink()
        self.node.stop(remove=False)


def _sandbox_key(path: Path) -> str:
    """The sandbox's watch-only account key, made once and kept (only the vpub:
    the mnemonic and private keys are discarded when it is generated)."""
    if path.is_file():
        vpub = path.read_text().strip()
        watch_only_account_from_key(vpub, hrp=REGTEST_HRP["litecoind"])  # refuses anything else
        return vpub
    vpub = watch_only_account_generate(hrp=REGTEST_HRP["litecoind"]).vpub
    path.write_text(vpub + "\n")
    return vpub


def _with_ltc_rate(rates: str) -> str:
    entries = [e.strip() for e in (rates or "").split(",") if e.strip()]
    if any(e.split("=", 1)[0].strip().upper() == "LTC" for e in entries):
        return ",".join(entries)
    return ",".join([*entries, f"LTC={SANDBOX_LTC_USD}"])


def sandbox_start(*, folder: Path, manual_rates: str = "") -> Sandbox:
    """Start (or restart) the sandbox node in `folder` and write its settings.

    The node's chain, wallet and the watch-only key persist in `folder`
    across runs; ports and RPC credentials are new each time. `env` holds
    the settings for the processes that must see the sandbox (LTC_XPUB,
    LTC_NETWORK=regtest, LTC_RPC_URL, MANUAL_RATES_USD with an LTC rate,
    SANDBOX=1), also written to `folder/sandbox.env` (mode 0600) for commands
    run from another shell.
    """
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    vpub = _sandbox_key(folder / "ltc-vpub")
    node = RegtestNode.start(datadir=folder / "litecoind", wallet=SANDBOX_WALLET, mine=0)
    try:
        height = node.height()
        if height < SANDBOX_MIN_HEIGHT:
            node.mine(SANDBOX_MIN_HEIGHT - height)
        env = {
            "LTC_XPUB": vpub,
            "LTC_NETWORK": "regtest",
            "LTC_RPC_URL": node.url,
            "MANUAL_RATES_USD": _with_ltc_rate(manual_rates),
            "SANDBOX": "1",
        }
        env_file = folder / "sandbox.env"
        fd = os.open(env_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write("# Written by the sandbox while `make run` runs; removed when it stops.\n")
            handle.writelines(f"{key}='{value}'\n" for key, value in env.items())
    except BaseException:
        node.stop(remove=False)
        raise
    return Sandbox(node=node, vpub=vpub, env=env, env_file=env_file)


# --- invoices in the sandbox: a demo one, and paying one ---------------------------------------------------


def sandbox_pay_command(invoice_number: str = "<invoice-number>") -> str:
    """The command that pays an invoice from another shell: with the DATA_DIR of
    this run (the sandbox's settings file and the database live there) unless
    it is the default."""
    data_dir = Path(settings.DATA_DIR).resolve()
    prefix = (
        "" if data_dir == (Path(settings.BASE_DIR) / "data").resolve() else f"DATA_DIR={shlex.quote(str(data_dir))} "
    )
    return f"{prefix}DEBUG=1 .venv/bin/python manage.py sandbox_pay {invoice_number} --confirm"


def sandbox_off_reasons(*, chain_settings_ok: bool, what: str) -> list[str]:
    """Why the sandbox is not seen by this process, most likely first."""
    env_file = Path(settings.SANDBOX_ENV_FILE)
    reasons = []
    if not settings.DEBUG:
        reasons.append("DEBUG=1 is not set, so the sandbox's settings file is not read")
    if not env_file.is_file():
        reasons.append(
            f"there is no sandbox settings file at {env_file}: `make run` is not running with DATA_DIR="
            f"{Path(settings.DATA_DIR).resolve()}; give this command the DATA_DIR `make run` was started with "
            "(its banner prints the exact command)"
        )
    if not settings.SANDBOX:
        reasons.append("SANDBOX is not set")
    if not chain_settings_ok:
        reasons.append(what)
    return reasons


def sandbox_off_error(reasons: list[str], needs: str) -> DomainError:
    return DomainError(
        "sandbox_off",
        f"This works only in the local sandbox ({needs}): " + "; ".join(reasons) + ".",
        details={"reasons": reasons, "data_dir": str(Path(settings.DATA_DIR).resolve())},
    )


def _sandbox_check() -> None:
    network = str(settings.LTC_NETWORK).strip().lower()
    ltc_ok = network == "regtest" and bool(rpc_url(currency="LTC"))
    if settings.SANDBOX and ltc_ok:
        return
    what = (
        f"LTC_NETWORK is {network!r}, not regtest"
        if network != "regtest"
        else "LTC_RPC_URL (the regtest node) is not set"
    )
    reasons = sandbox_off_reasons(chain_settings_ok=ltc_ok, what=what)
    raise sandbox_off_error(
        reasons or ["the sandbox settings are incomplete"],
        "SANDBOX=1, LTC_NETWORK=regtest, started by `make run` when litecoind is installed",
    )


def invoice_not_found(invoice_number: str) -> NotFound:
    return NotFound(
        f"No invoice {invoice_number} in the database of DATA_DIR={Path(settings.DATA_DIR).resolve()}; if `make run` "
        "was started with another DATA_DIR (or DATABASE_URL), give this command the same one."
    )


SANDBOX_DEMO_USERNAME = "sandbox-demo"


@transaction.atomic
def sandbox_invoice_issue(*, usd: Decimal = Decimal("25.00"), username: str = SANDBOX_DEMO_USERNAME) -> Invoice:
    """An LTC invoice to try the checkout page with, for a demo account (made
    when missing, with no password): its newest invoice while that can still be
    paid, else a new one. Refused outside the sandbox."""
    from django.contrib.auth import get_user_model

    _sandbox_check()
    if usd <= 0:
        raise DomainError("invalid", "The amount is a positive number of USD.")
    Account = get_user_model()
    account = Account.objects.filter(username=username).first()
    if account is None:
        account = Account.objects.create_user(username, None)
    now = timezone.now()
    open_ = (
        Invoice.objects.filter(account=account, status="new", expires_at__gt=now, requests__currency="LTC")
        .order_by("-created_at")
        .first()
    )
    if open_ is not None:
        return open_
    return services.invoice_create(
        account=account,
        payable=("sandbox", 0),
        description="Sandbox demo: pay it with sandbox_pay",
        lines=[services.LineSpec("Sandbox demo payment", Decimal(1), usd, usd)],
        currency="LTC",
        metadata={"sandbox": True},
    )


def amount_still_due(*, request, pending: list, confirm: bool, invoice_number: str) -> int:
    """What is left to pay to `request`, in base units; 0 when it is paid in full
    but not confirmed and `confirm` asks to confirm it (only blocks to mine)."""
    paid = sum(int(p.amount) for p in request.payments.exclude(status=PaymentStatus.REMOVED))
    due = int(request.amount_due) - paid
    if due > 0:
        return due
    if pending and confirm:
        return 0
    if pending:
        raise DomainError(
            "already_paid",
            f"{invoice_number} is paid in full and waits for confirmations: give --confirm to mine them, "
            "or --amount to pay more.",
        )
    raise DomainError("already_paid", f"{invoice_number} is paid in full and confirmed; give --amount to pay more.")


def sandbox_invoice_pay(*, invoice_number: str, amount: int | None = None, confirm: bool = False) -> SandboxPayment:
    """Pay an invoice's LTC address from the sandbox's regtest wallet; with
    `confirm`, mine the blocks the policy wants. Then scan right away (the
    periodic task would within seconds anyway). Refused outside the sandbox."""
    _sandbox_check()
    invoice = Invoice.objects.filter(number=invoice_number).first()
    if invoice is None:
        raise invoice_not_found(invoice_number)
    request = invoice.requests.filter(currency="LTC").order_by("-created_at", "-id").first()
    if request is None:
        raise DomainError("no_payment_request", f"{invoice_number} has no LTC address to pay.")
    required = services.confirmations_required(currency="LTC")
    blocks = required if confirm else 0
    pending = list(request.payments.filter(status=PaymentStatus.PENDING).order_by("first_seen_at", "id"))
    if amount is None:
        amount = amount_still_due(request=request, pending=pending, confirm=confirm, invoice_number=invoice_number)
        if amount == 0:  # paid in full, unconfirmed: mine what its confirmations still need
            blocks = max(1, required - min(p.confirmations for p in pending))
    elif amount <= 0:
        raise DomainError("invalid", "The amount is a positive number of litoshi.")
    try:
        txid, hashes = regtest_wallet_pay(
            url=rpc_url(currency="LTC"), wallet=SANDBOX_WALLET, address=request.address, amount=amount, mine=blocks
        )
    except (ChainUnavailable, RpcError) as exc:
        raise DomainError("sandbox_node", f"The sandbox node refused: {exc}") from None
    txid = txid or pending[0].txid
    report = chain_scan_now(currency="LTC")
    invoice.refresh_from_db()
    return SandboxPayment(
        invoice.number, "LTC", request.address, amount, txid, len(hashes), invoice.status, invoice.exception, report
    )


# The three documentation networks of RFC 5737 (TEST-NET-1, -2, -3): never routed.
SANDBOX_IPV4_NETWORKS = ("192.0.2", "198.51.100", "203.0.113")


def sandbox_ipv4(rental_id: int) -> str:
    """A documentation IPv4 address of its own for each rental (762 before they repeat):
    rental 1 gets 192.0.2.1, rental 255 gets 198.51.100.1."""
    index = (rental_id - 1) % (254 * len(SANDBOX_IPV4_NETWORKS))
    return f"{SANDBOX_IPV4_NETWORKS[index // 254]}.{index % 254 + 1}"


def sandbox_rental_hand_over(*, rental_id: int) -> Rental:
    """Stand in for the operators' provisioning system in the sandbox: report a
    provisioning rental's server ready, with documentation addresses (RFC 5737,
    RFC 3849), as `POST /api/v1/ops/rentals/{id}/ready` would. Refused outside
    the sandbox."""
    if not settings.SANDBOX:
        reasons = sandbox_off_reasons(chain_settings_ok=True, what="")
        raise sandbox_off_error(reasons or ["SANDBOX is not set"], "SANDBOX=1, started by `make run`")
    return rental_activate(
        rental_id=rental_id,
        ipv4=sandbox_ipv4(rental_id),
        ipv6_prefix=f"2001:db8:{rental_id % 0x10000:x}::/64",
        actor="sandbox",
        reason="sandbox: the provisioning system stand-in reported ready",
    )


# --- what `make run` (serve_local) and `sandbox_pay` ask of this sandbox (devtools/sandboxes.py) -----------

SANDBOX_CODE = "LTC"
SANDBOX_STARTS = "foreground"
SANDBOX_PRIMARY = True  # its settings file is the sandbox's; `make run` offers a demo invoice in LTC
invoice_pay = sandbox_invoice_pay


def serve_start(*, rates: str, say: Callable[[str], object], warn: Callable[[str], object]) -> Sandbox | None:
    """A Litecoin regtest node to pay into, when litecoind is installed and LTC is
    not configured otherwise (SANDBOX=0 turns it off)."""
    from devtools.sandboxes import sandboxes_allowed

    if not sandboxes_allowed():
        return None
    if (settings.LTC_XPUB or settings.LTC_RPC_URL) and not settings.SANDBOX:
        return None  # LTC is configured: no sandbox
    import shutil

    if shutil.which("litecoind") is None:
        say("No LTC sandbox: install litecoind (bash tests/ensure-chain-nodes.sh) to get one.")
        return None
    from devtools.litecoind import NodeStartError

    say("Starting the LTC sandbox (a Litecoin regtest node) ...")
    try:
        return sandbox_start(folder=settings.SANDBOX_ENV_FILE.parent, manual_rates=rates)
    except (NodeStartError, ChainUnavailable, RpcError, OSError) as exc:
        warn(f"The LTC sandbox did not start: {exc}")
        return None


def serve_banner(box: Sandbox, *, demo: dict[str, str] | None) -> str:
    return (
        f"LTC sandbox: a Litecoin regtest node at 127.0.0.1:{box.node.rpc_port} (data in "
        f"{box.node.datadir}).\n"
        + (f"    Try paying: {demo['page']}  (invoice {demo['number']})\n" if demo else "")
        + "    Order or invoice in LTC, then pay it from the node's wallet; its checkout page turns paid:\n"
        f"    {sandbox_pay_command(demo['number'] if demo else '<invoice-number>')}\n"
    )
