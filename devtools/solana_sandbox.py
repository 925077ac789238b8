"""The Solana part of the sandbox of `make run`: the loopback Solana node
(devtools.solana_rpc: JSON-RPC over HTTP and its PubSub websocket on the
next port) running in `make run`'s own process, with a clock that
makes a block every 0.4 s and finalizes the blocks 32 slots behind, as a
cluster does; the settings that point SOL at it; and `sol_sandbox_invoice_pay`
(behind `manage.py sandbox_pay`), which pays a SOL invoice the way a wallet
pays a Solana Pay request: a transfer to the recipient carrying the invoice's
reference, signed with a sandbox wallet and sent with `sendTransaction`.

The node's ledger lives in memory: each `make run` starts a new cluster (a new
genesis hash, pinned in SOL_GENESIS_HASH), like a test validator reset. The
recipient's address and the sandbox wallet's key (a throwaway key on a
loopback ledger, never a real one) are kept in the data folder.

A Solana Pay wallet can pay the sandbox's invoices too: the node answers what
`@solana/pay`'s `createTransfer` and `@solana/web3.js`'s `sendAndConfirmTransaction`
call, and funds a new wallet with `requestAirdrop`
(tests/chains/solana/solana_pay_wallet.js does it all from the invoice's URI).

Development only: nothing in production imports devtools, and paying refuses
any node whose genesis hash is not the sandbox's.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from solders.hash import Hash
from solders.keypair import Keypair
from solders.litesvm import LiteSVM
from solders.message import Message
from solders.pubkey import Pubkey
from solders.transaction import VersionedTransaction

from billing.chains.solana.rpc import SolanaRpc, SolanaRpcError, SolanaUnavailable
from billing.models import Invoice, PaymentStatus
from core.errors import DomainError
from devtools.sandbox import amount_still_due, invoice_not_found, sandbox_off_error, sandbox_off_reasons
from devtools.scanning import SandboxPayment, chain_scan_now
from devtools.solana_rpc import LAMPORTS_PER_SOL, SolanaLedger, SolanaRpcServer

SANDBOX_SOL_USD = "150"  # the SOL rate quoted in the sandbox when MANUAL_RATES_USD does not name one
WALLET_LAMPORTS = 1_000_000 * LAMPORTS_PER_SOL
SLOT_SECONDS = 0.4
FINALITY_DEPTH = 32


@dataclass
class SolanaSandbox:
    server: SolanaRpcServer
    recipient: str
    env: dict[str, str]

    @property
    def url(self) -> str:
        return self.server.url

    def stop(self) -> None:
        self.server.stop()


def _kept_keypair(path: Path) -> Keypair:
    """A sandbox key made once and kept in the data folder (mode 0600)."""
    if path.is_file():
        return Keypair.from_bytes(bytes(json.loads(path.read_text())))
    keypair = Keypair()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(json.dumps(list(bytes(keypair))) + "\n")
    return keypair


def _kept_recipient(path: Path) -> str:
    """The sandbox's recipient address (only the address is kept: the server never holds its key)."""
    if path.is_file():
        return str(Pubkey.from_string(path.read_text().strip()))
    address = str(Keypair().pubkey())
    path.write_text(address + "\n")
    return address


def _with_sol_rate(rates: str) -> str:
    entries = [e.strip() for e in (rates or "").split(",") if e.strip()]
    if any(e.split("=", 1)[0].strip().upper() == "SOL" for e in entries):
        return ",".join(entries)
    return ",".join([*entries, f"SOL={SANDBOX_SOL_USD}"])


def sol_sandbox_start(
    *, folder: Path, manual_rates: str = "", slot_seconds: float = SLOT_SECONDS, port: int = 0
) -> SolanaSandbox:
    """Start the loopback node with its clock, in this process, and return the
    settings for the processes that must see it: SOL_RECIPIENT, SOL_RPC_URL,
    SOL_WS_URL (its PubSub websocket, on the RPC port + 1), SOL_CLUSTER=localnet,
    SOL_GENESIS_HASH, MANUAL_RATES_USD with a SOL rate."""
    folder.mkdir(parents=True, exist_ok=True)
    recipient = _kept_recipient(folder / "sol-recipient")
    wallet = _kept_keypair(folder / "sol-wallet.json")
    # A node accepts any blockhash of the last 150 blocks: the ledger checks that
    # itself (sendTransaction), LiteSVM only knows the newest.
    ledger = SolanaLedger(svm=LiteSVM().with_blockhash_check(False))
    ledger.fund(Pubkey.from_string(recipient), LAMPORTS_PER_SOL)  # rent-exempt from the start
    ledger.fund(wallet.pubkey(), WALLET_LAMPORTS)
    server = SolanaRpcServer(ledger, port=port).start()
    server.clock_start(slot_seconds=slot_seconds, finality_depth=FINALITY_DEPTH)
    env = {
        "SOL_RECIPIENT": recipient,
        "SOL_RPC_URL": server.url,
        "SOL_WS_URL": server.ws_url,  # its PubSub websocket, for `manage.py listen_chain SOL`
        "SOL_CLUSTER": "localnet",
        "SOL_GENESIS_HASH": ledger.genesis_hash,
        "MANUAL_RATES_USD": _with_sol_rate(manual_rates),
    }
    return SolanaSandbox(server=server, recipient=recipient, env=env)


# --- paying an invoice -------------------------------------------------------------------------


def _sandbox_rpc() -> SolanaRpc:
    url = str(getattr(settings, "SOL_RPC_URL", "") or "")
    pinned = str(getattr(settings, "SOL_GENESIS_HASH", "") or "")
    if not settings.SANDBOX or not url or not pinned:
        reasons = sandbox_off_reasons(
            chain_settings_ok=bool(url and pinned),
            what="SOL_RPC_URL and SOL_GENESIS_HASH (the loopback node) are not set",
        )
        raise sandbox_off_error(
            reasons or ["the sandbox settings are incomplete"],
            "SANDBOX=1, SOL_RPC_URL at the loopback Solana node `make run` starts",
        )
    rpc = SolanaRpc(url, rate_limit_retries=0, transport_retries=0)
    try:
        genesis = str(rpc.call("getGenesisHash"))
    except SolanaUnavailable as exc:
        rpc.close()
        raise DomainError("sandbox_node", f"The sandbox's Solana node does not answer: {exc}") from None
    if genesis != pinned:
        rpc.close()
        raise DomainError("sandbox_node", f"Refusing to pay: the node's genesis hash is {genesis}, not the sandbox's.")
    return rpc


def _finalized_wait(rpc: SolanaRpc, signature: str, *, timeout: float) -> None:
    """Wait until the cluster has finalized `signature` (the sandbox's clock does it)."""
    deadline = time.monotonic() + timeout
    while True:
        [status] = rpc.call("getSignatureStatuses", [signature])["value"]
        if status is not None and status.get("confirmationStatus") == "finalized":
            return
        if time.monotonic() > deadline:
            raise DomainError("sandbox_node", f"{signature} was not finalized within {timeout:g}s.")
        time.sleep(SLOT_SECONDS)


def sol_sandbox_invoice_pay(
    *, invoice_number: str, amount: int | None = None, confirm: bool = False, timeout: float = 60.0
) -> SandboxPayment:
    """Pay a SOL invoice from the sandbox wallet as a wallet pays its Solana Pay
    request (the reference on the transfer); with `confirm`, wait until the
    transaction is finalized. Then scan right away. Refused outside the sandbox."""
    invoice = Invoice.objects.filter(number=invoice_number).first()
    if invoice is None:
        raise invoice_not_found(invoice_number)
    request = invoice.requests.filter(currency="SOL").order_by("-is_active", "-created_at", "-id").first()
    if request is None:
        raise DomainError("no_payment_request", f"{invoice_number} has no SOL request to pay.")
    pending = list(request.payments.filter(status=PaymentStatus.PENDING).order_by("first_seen_at", "id"))
    if amount is None:
        amount = amount_still_due(request=request, pending=pending, confirm=confirm, invoice_number=invoice_number)
    elif amount <= 0:
        raise DomainError("invalid", "The amount is a positive number of lamports.")
    if amount == 0:  # paid in full, not yet finalized: only wait for it
        with _sandbox_rpc() as rpc:
            _finalized_wait(rpc, pending[0].txid, timeout=timeout)
        report = chain_scan_now(currency="SOL")
        invoice.refresh_from_db()
        return SandboxPayment(
            invoice.number, "SOL", request.address, 0, pending[0].txid, 0, invoice.status, invoice.exception, report
        )
    wallet = _kept_keypair(Path(settings.SANDBOX_ENV_FILE).parent / "sol-wallet.json")
    with _sandbox_rpc() as rpc:
        blockhash = rpc.call("getLatestBlockhash", {"commitment": "confirmed"})["value"]["blockhash"]
        instructions = SolanaLedger.payment_instructions(
            payer=wallet.pubkey(), recipient=request.address, lamports=amount, references=[request.reference]
        )
        message = Message.new_with_blockhash(instructions, wallet.pubkey(), Hash.from_string(blockhash))
        tx = VersionedTransaction(message, [wallet])
        try:
            signature = rpc.call("sendTransaction", base64.b64encode(bytes(tx)).decode(), {"encoding": "base64"})
        except SolanaRpcError as exc:
            raise DomainError("sandbox_node", f"The sandbox's Solana node refused the payment: {exc}") from None
        if confirm:
            _finalized_wait(rpc, signature, timeout=timeout)
    report = chain_scan_now(currency="SOL")
    invoice.refresh_from_db()
    return SandboxPayment(
        invoice.number, "SOL", request.address, amount, signature, 0, invoice.status, invoice.exception, report
    )


# --- what `make run` (serve_local) and `sandbox_pay` ask of this sandbox (devtools/sandboxes.py) -----------

SANDBOX_CODE = "SOL"
SANDBOX_STARTS = "foreground"
invoice_pay = sol_sandbox_invoice_pay


def serve_start(*, rates: str, say: Callable[[str], object], warn: Callable[[str], object]) -> SolanaSandbox | None:
    """The loopback Solana node, when SOL is not configured otherwise (SANDBOX=0 turns it off).
    It needs nothing installed: it runs in this process."""
    from devtools.sandboxes import sandboxes_allowed

    if not sandboxes_allowed():
        return None
    if (settings.SOL_RECIPIENT or settings.SOL_RPC_URL) and not settings.SANDBOX:
        return None  # SOL is configured: no sandbox
    say("Starting the SOL sandbox (a loopback Solana node) ...")
    try:
        return sol_sandbox_start(folder=settings.SANDBOX_ENV_FILE.parent, manual_rates=rates)
    except OSError as exc:
        warn(f"The SOL sandbox did not start: {exc}")
        return None


def serve_banner(box: SolanaSandbox, *, demo: dict[str, str] | None) -> str:
    from devtools.sandbox import sandbox_pay_command

    return (
        f"SOL sandbox: a loopback Solana node at {box.url} (a new cluster each run, a block "
        "every 0.4 s, finalized 32 slots behind).\n"
        "    Order or invoice in SOL, then pay it from the sandbox wallet as a Solana Pay transfer:\n"
        f"    {sandbox_pay_command()}\n"
    )
