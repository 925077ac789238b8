"""How fast the Ethereum watcher reads a full block, and what the balance-check mode costs.

Starts its own anvil node (devtools.anvil; `bash tests/ensure-chain-nodes.sh`
installs it), deploys the test tokens, and prints:

1. Matching. A block of 1,000 transactions (500 ether transfers, 500 token
   transfers) matched against 100,000 open destinations: the scanner's own
   time for the block (decoding the node's JSON into transfers and matching
   them; everything in `EvmScanner.blocks_read` but the waits on the node) as
   a fraction of the node's own `eth_getBlockByNumber(full)` + `eth_getLogs`
   time for that block. The trace call of the trace modes is shown apart.
2. The balance-check mode with 10,000 open addresses: JSON-RPC calls, HTTP
   requests and time per block, through Multicall3 and through batched
   `eth_getBalance`.
3. Block to settled: with CONFIRMATIONS_ETH=1, the time from a block paying
   an invoice being mined to the invoice being `settled` by one watcher run,
   as the periodic task runs it (throwaway SQLite database, or
   --database-url).

Run it with the project's virtualenv:

    .venv/bin/python bench/eth_scan.py
    .venv/bin/python bench/eth_scan.py --database-url postgres://postgres@127.0.0.1:5432/bench_eth

A PostgreSQL database given with --database-url must exist and be empty (it is
migrated, filled and left behind).
"""

from __future__ import annotations

import argparse
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def timed(fn, repeat: int = 5) -> tuple[float, object]:
    """Median seconds of `repeat` calls, and the last result."""
    times, result = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=1000, help="transactions in the block (default 1000)")
    parser.add_argument("--token-share", type=float, default=0.5, help="share of them that are token transfers")
    parser.add_argument("--destinations", type=int, default=100_000, help="open destinations (default 100000)")
    parser.add_argument("--balance-addresses", type=int, default=10_000, help="balance mode addresses (10000)")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary folder")
    parser.add_argument(
        "--debug-trace",
        action="store_true",
        help="also time debug_traceBlockByNumber on the full block (anvil takes minutes: it replays every transaction)",
    )
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from devtools.anvil import AnvilNode

    workdir = Path(tempfile.mkdtemp(prefix="eth-scan-bench-"))
    print("Starting anvil ...", flush=True)
    node = AnvilNode.start(gas_limit=1_000_000_000)
    try:
        token = node.token_deploy("USDT", 6)
        forwarder = node.deploy("Forwarder")
        node.multicall_install()
        node.token_mint(token, node.payer, 10**18)
        node.mine()
        matching(node, token, args)
        balance_mode(node, forwarder, args)
        block_to_settled(node, token, workdir, args)
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _fill_block(node, token: str, *, transactions: int, token_share: float, paid: list[str]) -> int:
    """Send `transactions` transfers (the first ones to `paid`), mine them in one block; its height."""
    from web3 import Web3

    tokens = int(transactions * token_share)
    to_pay = iter(paid)
    nonce = int(node.rpc("eth_getTransactionCount", node.payer, "pending"), 16)
    calls = []
    for i in range(transactions):
        to = next(to_pay, None) or "0x" + secrets.token_hex(20)
        if i < tokens:
            data = node.call_data(token, "transfer", Web3.to_checksum_address(to), 1_000 + i)
            tx = {"from": node.payer, "to": token, "data": data, "gas": hex(60_000)}
        else:
            tx = {"from": node.payer, "to": Web3.to_checksum_address(to), "value": hex(10**12 + i), "gas": hex(21_000)}
        tx["nonce"] = hex(nonce + i)  # one sender, many pending transactions: nonces given, not guessed
        calls.append(("eth_sendTransaction", (tx,)))
    from billing.chains.ethereum.rpc import EthRpc

    with EthRpc(node.url, batch_size=200) as rpc:
        rpc.batch(calls)
    height = node.mine()
    count = len(node.block(height)["transactions"])
    if count != transactions:
        raise SystemExit(f"the block holds {count} transactions, not {transactions}")
    return height


def matching(node, token: str, args) -> None:
    from billing.chains.blocks import BlockRef
    from billing.chains.ethereum.abi import TRANSFER_TOPIC
    from billing.chains.ethereum.rpc import EthRpc
    from billing.chains.ethereum.scanner import EvmScanner

    paid = ["0x" + secrets.token_hex(20) for _ in range(20)]
    watched = frozenset({*("0x" + secrets.token_hex(20) for _ in range(args.destinations - len(paid))), *paid})
    print(f"Filling a block with {args.transactions} transactions ...", flush=True)
    height = _fill_block(node, token, transactions=args.transactions, token_share=args.token_share, paid=paid)
    base = BlockRef(height - 1, node.block_hash(height - 1))
    with EthRpc(node.url) as rpc:
        block_s, block = timed(lambda: rpc.call("eth_getBlockByNumber", hex(height), True))
        logs_s, logs = timed(
            lambda: rpc.call(
                "eth_getLogs", {"fromBlock": hex(height), "toBlock": hex(height), "topics": [TRANSFER_TOPIC]}
            )
        )
        trace_s, _ = timed(lambda: rpc.call("trace_block", hex(height)))
    node_s = block_s + logs_s
    print(
        f"\n1. Matching a block of {len(block['transactions'])} transactions and {len(logs)} token transfers "
        f"against {len(watched):,} open destinations"
    )
    print(f"   node: eth_getBlockByNumber(full) {ms(block_s)} + eth_getLogs {ms(logs_s)} = {ms(node_s)}")
    print(f"   node: trace_block {ms(trace_s)} (the trace modes' extra call)")
    for mode in ("trace_block", "debug_trace") if args.debug_trace else ("trace_block",):
        own: list[float] = []
        found = 0
        for _ in range(5 if mode == "trace_block" else 1):
            with EthRpc(node.url, timeout=3600) as rpc:
                scanner = EvmScanner(rpc, internal=mode)
                started = time.perf_counter()
                [scan] = scanner.blocks_read(heights=[height], watched=watched, base=base)
                total = time.perf_counter() - started
                own.append(total - rpc.seconds)
                found = len(scan.transfers)
                if mode == "debug_trace":
                    print(f"   node: debug_traceBlockByNumber (callTracer) {ms(rpc.seconds)} with the rest")
        print(
            f"   scanner ({mode}): {ms(statistics.median(own))} of its own, "
            f"{statistics.median(own) / node_s:.1%} of the node's time; {found} transfers found (20 expected)"
        )


def balance_mode(node, forwarder: str, args) -> None:
    from web3 import Web3

    from billing.chains.blocks import BlockRef
    from billing.chains.ethereum.abi import MULTICALL3_ADDRESS
    from billing.chains.ethereum.rpc import EthRpc
    from billing.chains.ethereum.scanner import EvmScanner

    addresses = sorted("0x" + secrets.token_hex(20) for _ in range(args.balance_addresses))
    print(f"\n2. Balance-check mode, {len(addresses):,} open ether addresses, per block (state remembered)")
    for label, multicall in (("Multicall3 aggregate3", MULTICALL3_ADDRESS), ("batched eth_getBalance", None)):
        node.transact(forwarder, "forward", Web3.to_checksum_address(addresses[0]), value=10**15)
        first = node.mine()
        node.mine()
        with EthRpc(node.url) as rpc:
            scanner = EvmScanner(rpc, internal="balance", multicall=multicall)
            base = BlockRef(first - 1, node.block_hash(first - 1))
            scanner.blocks_read(heights=[first], watched=frozenset(addresses), base=base, balance_watched=addresses)
            calls, requests = rpc.calls, rpc.requests
            started = time.perf_counter()
            [scan] = scanner.blocks_read(
                heights=[first + 1],
                watched=frozenset(addresses),
                base=BlockRef(first, node.block_hash(first)),
                balance_watched=addresses,
            )
            seconds = time.perf_counter() - started
        print(
            f"   {label}: {rpc.calls - calls} JSON-RPC calls in {rpc.requests - requests} HTTP requests, "
            f"{ms(seconds)} per block ({len(scan.transfers)} transfers)"
        )


def block_to_settled(node, token: str, workdir: Path, args) -> None:
    from bip_utils import Bip39MnemonicGenerator, Bip39SeedGenerator, Bip44, Bip44Coins

    seed = Bip39SeedGenerator(Bip39MnemonicGenerator().FromWordsNumber(12)).Generate()
    xpub = Bip44.FromSeed(seed, Bip44Coins.ETHEREUM).Purpose().Coin().Account(0).PublicKey().ToExtended()
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DEBUG": "1",
            "DATA_DIR": str(workdir),
            "DATABASE_URL": args.database_url or f"sqlite:///{workdir / 'bench.sqlite3'}",
            "CACHE_URL": "locmemcache://",
            "CELERY_BROKER_URL": "memory://",
            "ETH_XPUB": xpub,
            "ETH_CHAIN_ID": str(node.chain_id),
            "ETH_RPC_URL": node.url,
            "USDT_CONTRACT": token,
            "USDC_CONTRACT": "",
            "MANUAL_RATES_USD": "ETH=3500,USDT=1",
            "CONFIRMATIONS_ETH": "1",
            "CONFIRMATIONS_USDT": "1",
            "LOG_LEVEL": "WARNING",
        }
    )
    for name in ("BTC_XPUB", "LTC_XPUB", "XMR_ADDRESS", "SOL_RECIPIENT", "SANDBOX"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from billing import services
    from billing.chains.watchers import chain_scan, watcher_for
    from billing.models import Invoice
    from billing.payable import NOTHING, payable_register

    payable_register(kind="bench", payable=NOTHING)  # what its invoices pay for: nothing

    call_command("migrate", verbosity=0)
    customer = get_user_model().objects.create_user("bench", "a long bench passphrase")
    watcher_for(currency="ETH").cursor_set(height=node.height())
    chain_scan(currency="ETH", force=True)
    print("\n3. Block to settled, CONFIRMATIONS_ETH=1 and CONFIRMATIONS_USDT=1, one watcher run after the block")
    for currency in ("ETH", "USDT"):
        times = []
        for _ in range(5):
            invoice = services.invoice_create(
                account=customer,
                payable=("bench", 0),
                description="Benchmark",
                lines=[services.LineSpec("GPU time", Decimal(1), Decimal("35.00"), Decimal("35.00"))],
                currency=currency,
            )
            request = invoice.active_request
            if currency == "ETH":
                node.send_eth(request.address, int(request.amount_due))
            else:
                node.token_transfer(token, request.address, int(request.amount_due))
            node.mine()
            started = time.perf_counter()
            report = chain_scan(currency=currency, force=True)
            seconds = time.perf_counter() - started
            if report.error or Invoice.objects.get(pk=invoice.pk).status != "settled":
                raise SystemExit(f"not settled: {report.summary()}")
            times.append(seconds)
        print(f"   {currency}: {ms(statistics.median(times))} from the block to settled (median of {len(times)})")


if __name__ == "__main__":
    main()
