"""The Ethereum part of the sandbox of `make run`: an anvil node whose chain is kept
in the data folder, the two test tokens deployed on it (standing in for USDT and
USDC), the settings that point ETH, USDT and USDC at it, and
`eth_sandbox_invoice_pay` (behind `manage.py sandbox_pay`), which pays an ETH,
USDT or USDC invoice from one of anvil's unlocked accounts.

`make run` starts it when DEBUG is on, anvil is installed (`bash
tests/ensure-chain-nodes.sh`) and ETH is not configured otherwise. Development
only: nothing in production imports devtools, and paying refuses any node that
is not anvil on the sandbox's chain id.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from billing import services
from billing.models import Invoice, PaymentStatus
from core.errors import DomainError
from devtools.anvil import AnvilNode, anvil_installed
from devtools.sandbox import amount_still_due, invoice_not_found, sandbox_off_error, sandbox_off_reasons
from devtools.scanning import SandboxPayment, chain_scan_now

if TYPE_CHECKING:
    from billing.chains.ethereum.rpc import EthRpc

SANDBOX_CHAIN_ID = 31337
ETHEREUM_CURRENCIES = ("ETH", "USDT", "USDC")
# Rates quoted in the sandbox when MANUAL_RATES_USD does not name them.
SANDBOX_RATES = {"ETH": "3500", "USDT": "1", "USDC": "1"}
# Blocks the sandbox mines to settle a payment under ETH_FINALITY=finalized:
# anvil puts `finalized` two epochs of 32 slots below the newest block.
FINALIZED_DEPTH = 65


@dataclass
class EthereumSandbox:
    node: AnvilNode
    xpub: str
    usdt: str
    usdc: str
    env: dict[str, str]

    def stop(self) -> None:
        """Stop anvil; it writes its chain to the data folder on the way out."""
        self.node.stop()


def _sandbox_xpub(path: Path) -> str:
    """The sandbox's watch-only Ethereum account key, made once and kept (the
    mnemonic is discarded as soon as the xpub is derived)."""
    from bip_utils import Bip39MnemonicGenerator, Bip39SeedGenerator, Bip44, Bip44Coins

    from billing.chains.ethereum.keys import ethereum_account_parse

    if path.is_file():
        xpub = path.read_text().strip()
        ethereum_account_parse(value=xpub)  # refuses anything but an xpub
        return xpub
    seed = Bip39SeedGenerator(Bip39MnemonicGenerator().FromWordsNumber(12)).Generate()
    xpub = Bip44.FromSeed(seed, Bip44Coins.ETHEREUM).Purpose().Coin().Account(0).PublicKey().ToExtended()
    path.write_text(xpub + "\n")
    return xpub


def _with_rates(rates: str) -> str:
    entries = [e.strip() for e in (rates or "").split(",") if e.strip()]
    named = {e.split("=", 1)[0].strip().upper() for e in entries}
    return ",".join([*entries, *(f"{code}={usd}" for code, usd in SANDBOX_RATES.items() if code not in named)])


def _tokens(node: AnvilNode, record: Path) -> tuple[str, str]:
    """The sandbox's USDT and USDC contracts: those recorded, while the chain still
    holds their code; deployed afresh otherwise."""
    if record.is_file():
        known = json.loads(record.read_text())
        if all(node.rpc("eth_getCode", known[c], "latest") not in ("0x", None) for c in ("USDT", "USDC")):
            return known["USDT"], known["USDC"]
    usdt = node.token_deploy("USDT", 6, name="Sandbox Tether")
    usdc = node.token_deploy("USDC", 6, name="Sandbox USD Coin")
    record.write_text(json.dumps({"USDT": usdt, "USDC": usdc}) + "\n")
    return usdt, usdc


def eth_sandbox_start(*, folder: Path, manual_rates: str = "") -> EthereumSandbox | None:
    """Start anvil with its chain kept in `folder` (None when anvil is not installed).

    `env` holds the settings for the processes that must see it: ETH_XPUB,
    ETH_CHAIN_ID, ETH_RPC_URL, USDT_CONTRACT, USDC_CONTRACT and
    MANUAL_RATES_USD with ETH, USDT and USDC rates.
    """
    if not anvil_installed():
        return None
    folder.mkdir(parents=True, exist_ok=True)
    xpub = _sandbox_xpub(folder / "eth-xpub")
    node = AnvilNode.start(
        chain_id=SANDBOX_CHAIN_ID,
        random_accounts=False,
        extra_args=["--state", str(folder / "anvil-state.json"), "--state-interval", "10"],
    )
    try:
        usdt, usdc = _tokens(node, folder / "tokens.json")
    except BaseException:
        node.stop()
        raise
    env = {
        "ETH_XPUB": xpub,
        "ETH_CHAIN_ID": str(SANDBOX_CHAIN_ID),
        "ETH_RPC_URL": node.url,
        "USDT_CONTRACT": usdt,
        "USDC_CONTRACT": usdc,
        "MANUAL_RATES_USD": _with_rates(manual_rates),
    }
    return EthereumSandbox(node=node, xpub=xpub, usdt=usdt, usdc=usdc, env=env)


# --- paying an invoice ---------------------------------------------------------------------------


def _sandbox_rpc() -> EthRpc:
    from billing.chains.ethereum.rpc import EthRpc  # web3: loaded when a payment is made, not at start-up

    url = str(getattr(settings, "ETH_RPC_URL", "") or "")
    if not settings.SANDBOX or not url:
        reasons = sandbox_off_reasons(chain_settings_ok=bool(url), what="ETH_RPC_URL (the anvil node) is not set")
        raise sandbox_off_error(
            reasons or ["the sandbox settings are incomplete"],
            "SANDBOX=1, ETH_RPC_URL at the anvil node `make run` starts when anvil is installed",
        )
    rpc = EthRpc(url)
    client = str(rpc.call("web3_clientVersion"))
    chain_id = int(rpc.call("eth_chainId"), 16)
    if not client.startswith("anvil/") or chain_id != int(settings.ETH_CHAIN_ID):
        rpc.close()
        raise DomainError(
            "sandbox_node", f"Refusing to pay: the node is {client} on chain {chain_id}, not the sandbox's anvil."
        )
    return rpc


def eth_sandbox_invoice_pay(*, invoice_number: str, amount: int | None = None, confirm: bool = False) -> SandboxPayment:
    """Pay an invoice's ETH, USDT or USDC address from anvil's first account (a
    token is minted to it first when it holds too little) and mine the block
    that includes it; with `confirm`, the blocks the finality policy wants.
    Then scan right away. Refused outside the sandbox."""
    from web3 import Web3

    from billing.chains.ethereum import family

    invoice = Invoice.objects.filter(number=invoice_number).first()
    if invoice is None:
        raise invoice_not_found(invoice_number)
    request = invoice.requests.filter(currency__in=ETHEREUM_CURRENCIES).order_by("-is_active", "-created_at", "-id")
    request = request.first()
    if request is None:
        raise DomainError("no_payment_request", f"{invoice_number} has no ETH, USDT or USDC address to pay.")
    currency = request.currency
    pending = list(request.payments.filter(status=PaymentStatus.PENDING).order_by("first_seen_at", "id"))
    if amount is None:
        amount = amount_still_due(request=request, pending=pending, confirm=confirm, invoice_number=invoice_number)
    elif amount <= 0:
        raise DomainError("invalid", "The amount is a positive number of base units (wei, or token units).")
    with _sandbox_rpc() as rpc:
        node = AnvilNode.attach(rpc.provider.endpoint_uri)
        if amount == 0:  # paid in full, unconfirmed: only the blocks below
            txid = pending[0].txid
        elif currency == "ETH":
            txid = node.send_eth(request.address, amount)
        else:
            token = family.token_contract(currency)
            if node.token_balance(token, node.payer) < amount:
                node.token_mint(token, node.payer, amount)
            txid = node.token_transfer(token, Web3.to_checksum_address(request.address), amount)
        blocks = 1
        if confirm:
            final = family.finality_policy() == "finalized"
            blocks = FINALIZED_DEPTH if final else max(1, services.confirmations_required(currency=currency))
        node.mine(blocks)
    report = chain_scan_now(currency=currency)
    invoice.refresh_from_db()
    return SandboxPayment(
        invoice.number, currency, request.address, amount, txid, blocks, invoice.status, invoice.exception, report
    )


# --- what `make run` (serve_local) and `sandbox_pay` ask of this sandbox (devtools/sandboxes.py) -----------

SANDBOX_CODE = "ETH"
SANDBOX_STARTS = "background"
invoice_pay = eth_sandbox_invoice_pay


def serve_start(*, rates: str, say: Callable[[str], object], warn: Callable[[str], object]) -> EthereumSandbox | None:
    """An anvil node with the test tokens, when anvil is installed and ETH is not
    configured otherwise (SANDBOX=0 turns it off)."""
    from devtools.sandboxes import sandboxes_allowed

    if not sandboxes_allowed():
        return None
    if (settings.ETH_XPUB or settings.ETH_RPC_URL) and not settings.SANDBOX:
        return None  # ETH is configured: no sandbox
    from devtools.anvil import NodeStartError

    if not anvil_installed():
        say("No ETH sandbox: install anvil (bash tests/ensure-chain-nodes.sh) to get one.")
        return None
    say("Starting the ETH sandbox (anvil, with test USDT and USDC) ...")
    try:
        return eth_sandbox_start(folder=settings.SANDBOX_ENV_FILE.parent, manual_rates=rates)
    except (NodeStartError, OSError, RuntimeError) as exc:
        warn(f"The ETH sandbox did not start: {exc}")
        return None


def serve_banner(box: EthereumSandbox, *, demo: dict[str, str] | None) -> str:
    from devtools.sandbox import sandbox_pay_command

    return (
        f"ETH sandbox: an anvil node at {box.node.url} (chain 31337, kept in "
        f"{settings.SANDBOX_ENV_FILE.parent}), test USDT {box.usdt} and USDC {box.usdc}.\n"
        "    Order or invoice in ETH, USDT or USDC, then pay it from an anvil account:\n"
        f"    {sandbox_pay_command()}\n"
    )
