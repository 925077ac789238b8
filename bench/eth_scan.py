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
4. At scale: 100,000 open ETH invoices in the database (bulk rows, plus the
   few the bench pays, issued through the billing engine); for every watcher
   run ("pass"): the calls to the node (by method; a batch counts each call)
   and the HTTP requests, the database time (every SQL statement of the run),
   and the run's time. Then, with CONFIRMATIONS_ETH=2, for a few payments:
   push off (a poller runs the watcher every CHAIN_SCAN_SECONDS, 5 s) and push
   on (`ChainListener` on anvil's websocket, `eth_subscribe newHeads`, as
   `manage.py listen_chain ETH`): detection latency from the broadcast (the
   transaction is mined at once, anvil mining on request: the watcher counts
   payments from their block, it does not read the mempool) to the invoice
   `processing`, and block -> settled (the next block, to `settled`).

Run it with the project's virtualenv:

    .venv/bin/python bench/eth_scan.py
    .venv/bin/python bench/eth_scan.py --database-url postgres://postgres@127.0.0.1:5432/bench_eth
    .venv/bin/python bench/eth_scan.py --only-scale --database-url postgres://postgres@127.0.0.1:5432/bench_eth

A PostgreSQL database given with --database-url must exist and be empty (it is
migrated, filled and left behind).
"""

from __future__ import annotations

import argparse
import collections
import os
import queue
import secrets
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
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
    parser.add_argument("--invoices", type=int, default=100_000, help="open invoices at scale (100000)")
    parser.add_argument("--transfers", type=int, default=100, help="payments in the busy block at scale (100)")
    parser.add_argument("--payments", type=int, default=3, help="payments timed with push on and off (3)")
    parser.add_argument("--scan-seconds", type=float, default=5.0, help="the poll's period, push off (5)")
    parser.add_argument("--only-scale", action="store_true", help="only part 4 (at scale)")
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
        if not args.only_scale:
            matching(node, token, args)
            balance_mode(node, forwarder, args)
        django_setup(node, token, workdir, args)
        if not args.only_scale:
            block_to_settled(node, token, args)
        at_scale(node, args)
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


def django_setup(node, token: str, workdir: Path, args) -> None:
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
            "ETH_WS_URL": node.url.replace("http://", "ws://", 1),  # anvil serves both on one port
            "CHAIN_PUSH_DEBOUNCE_SECONDS": "0.5",
            "LOG_LEVEL": "WARNING",
        }
    )
    for name in ("BTC_XPUB", "LTC_XPUB", "XMR_ADDRESS", "SOL_RECIPIENT", "SANDBOX"):
        os.environ.pop(name, None)
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    print(f"\nMigrating a fresh {connection.vendor} database ...", flush=True)
    call_command("migrate", verbosity=0)


def block_to_settled(node, token: str, args) -> None:
    from decimal import Decimal

    from django.contrib.auth import get_user_model

    from billing import services
    from billing.chains.watchers import chain_scan, watcher_for
    from billing.models import Invoice
    from billing.payable import NOTHING, payable_register

    payable_register(kind="bench", payable=NOTHING)  # what its invoices pay for: nothing

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


# --- 4. At scale: per pass, push on and push off ----------------------------------------------

WAIT = 90.0  # seconds a payment may take to be detected or settled before the bench gives up


@dataclass
class Pass:
    """One watcher run: what it cost."""

    seconds: float
    db_seconds: float
    queries: int
    calls: collections.Counter
    requests: int
    why: str
    node_seconds: float = 0.0


class Worker:
    """Runs the ETH watcher once per item queued (as a Celery worker runs the scan task), timing
    each run, and notes when each watched invoice was first seen `processing` and `settled`."""

    def __init__(self) -> None:
        self.calls: collections.Counter = collections.Counter()
        self.requests = 0
        self.node_seconds = 0.0
        self._count_calls()
        self.work: queue.Queue = queue.Queue()
        self.passes: list[Pass] = []
        self.watch: dict[int, dict[str, float]] = {}
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _count_calls(self) -> None:
        from billing.chains.ethereum.rpc import EthRpc

        call, batch_send, worker = EthRpc.call, EthRpc._batch_send, self

        def counted_call(rpc, method, *params):
            worker.calls[method] += 1
            worker.requests += 1
            begun = time.perf_counter()
            try:
                return call(rpc, method, *params)
            finally:
                worker.node_seconds += time.perf_counter() - begun

        def counted_batch(rpc, chunk):
            for method, _params in chunk:
                worker.calls[method] += 1
            worker.requests += 1
            begun = time.perf_counter()
            try:
                return batch_send(rpc, chunk)
            finally:
                worker.node_seconds += time.perf_counter() - begun

        EthRpc.call, EthRpc._batch_send = counted_call, counted_batch

    def stop(self) -> None:
        self.work.put(None)
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        from django.db import connection

        try:
            while (why := self.work.get()) is not None:
                self.scan(why)
        finally:
            connection.close()

    def scan(self, why: str) -> Pass:
        from django.db import connection

        from billing.chains.watchers import chain_scan
        from billing.models import Invoice

        db = [0.0, 0]

        def timed(execute, sql, params, many, context):
            begun = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                db[0] += time.perf_counter() - begun
                db[1] += 1

        calls, requests, node = collections.Counter(self.calls), self.requests, self.node_seconds
        began = time.perf_counter()
        with connection.execute_wrapper(timed):
            report = chain_scan(currency="ETH")
        ended = time.perf_counter()
        if report.error:
            print(f"   (a run failed: {report.error})", flush=True)
        done = Pass(
            ended - began,
            db[0],
            db[1],
            self.calls - calls,
            self.requests - requests,
            report.skipped or why,
            self.node_seconds - node,
        )
        self.passes.append(done)
        if self.watch:
            for pk, status in Invoice.objects.filter(pk__in=list(self.watch)).values_list("pk", "status"):
                if status in ("processing", "settled"):
                    self.watch[pk].setdefault("processing", ended)
                if status == "settled":
                    self.watch[pk].setdefault("settled", ended)
        return done

    def wait(self, pk: int, status: str, since: float) -> float:
        give_up = time.perf_counter() + WAIT
        while status not in self.watch[pk]:
            if time.perf_counter() > give_up:
                raise SystemExit(f"invoice {pk} not {status} after {WAIT:.0f}s")
            time.sleep(0.01)
        return self.watch[pk][status] - since

    def drain(self, count: int) -> None:
        while len(self.passes) < count or not self.work.empty():
            time.sleep(0.02)


def at_scale(node, args) -> None:
    from decimal import Decimal

    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.db import connection

    from bench.fillers import fillers_register
    from billing import services
    from billing.chains.watchers import ChainListener, watcher_for
    from billing.models import DerivationCounter, Invoice, PaymentRequest
    from billing.payable import NOTHING, payable_register

    payable_register(kind="bench", payable=NOTHING)  # what its invoices pay for: nothing

    settings.CONFIRMATIONS = {**settings.CONFIRMATIONS, "ETH": 2}
    customer = get_user_model().objects.create_user("bench-scale", "a long bench passphrase")

    def invoice():
        return services.invoice_create(
            account=customer,
            payable=("bench", 0),
            description="Benchmark",
            lines=[services.LineSpec("GPU time", Decimal(1), Decimal("35.00"), Decimal("35.00"))],
            currency="ETH",
        )

    template = invoice().active_request
    started = time.perf_counter()
    fillers = args.invoices - 1 - (args.transfers + 2 * args.payments)  # the rest are issued for real
    base = int(template.derivation_index) + 1
    fillers_register(
        customer=customer,
        count=fillers,
        currency="ETH",
        network=template.network,
        keyset=template.keyset,
        first_index=base,
        match_key=lambda _index: "0x" + secrets.token_hex(20),
        amount_due=int(template.amount_due),
        amount_usd=template.amount_usd,
        rate_usd=template.rate_usd,
        days=2,
    )
    DerivationCounter.objects.filter(keyset=template.keyset).update(next_index=base + fillers)
    paid = [invoice() for _ in range(args.transfers + 2 * args.payments)]
    open_count = PaymentRequest.objects.filter(currency="ETH", is_active=True, invoice__status="new").count()
    print(
        f"\n4. {open_count:,} open ETH invoices ({connection.vendor}), filled in {time.perf_counter() - started:.1f}s"
    )

    watcher_for(currency="ETH").cursor_set(height=node.height())
    worker = Worker()
    rows: list[tuple[str, Pass]] = []
    latency: dict[str, tuple[list[float], list[float], list[Pass]]] = {}
    try:
        worker.work.put("first")
        worker.work.put("idle")
        worker.drain(2)
        rows += [("first run", worker.passes[0]), ("a run with nothing new", worker.passes[1])]
        busy = paid[: args.transfers]
        nonce = int(node.rpc("eth_getTransactionCount", node.payer, "pending"), 16)
        for i, inv in enumerate(busy):
            request = inv.active_request
            node.send_eth(request.address, int(request.amount_due), nonce=hex(nonce + i))
        node.mine(2)  # the block paying them, and the one confirming it
        worker.work.put("busy")
        worker.drain(3)
        settled = Invoice.objects.filter(pk__in=[i.pk for i in busy], status="settled").count()
        rows += [
            (f"two blocks, the first paying {len(busy)} invoices ({settled} settled by the run)", worker.passes[2])
        ]
        timed_off = paid[args.transfers :][: args.payments]
        timed_on = paid[-args.payments :]
        for mode, invoices in (("push off", timed_off), ("push on", timed_on)):
            latency[mode] = _latency(node, worker, invoices, mode=mode, args=args, listener=ChainListener)
    finally:
        worker.stop()

    print(f"\n   Per pass, {open_count:,} open invoices:")
    print("   | Pass | Node calls (HTTP requests) | Waiting on the node | Database | Run |")
    print("   |---|---|---|---|---|")
    for what, p in rows:
        print(
            f"   | {what} | {_calls(p.calls)} ({p.requests}) | {ms(p.node_seconds)} | "
            f"{ms(p.db_seconds)} ({p.queries} queries) | {ms(p.seconds)} |"
        )
    for mode, (_, _, passes) in latency.items():
        if passes:
            names = {n for p in passes for n in p.calls}
            calls = collections.Counter({n: int(statistics.median(p.calls.get(n, 0) for p in passes)) for n in names})
            print(
                f"   | {mode}: median of {len(passes)} runs | {_calls(calls)} "
                f"({int(statistics.median(p.requests for p in passes))}) | "
                f"{ms(statistics.median(p.node_seconds for p in passes))} | "
                f"{ms(statistics.median(p.db_seconds for p in passes))} "
                f"({int(statistics.median(p.queries for p in passes))} queries) | "
                f"{ms(statistics.median(p.seconds for p in passes))} |"
            )
    print(f"\n   Latency, {args.payments} payments each, CONFIRMATIONS_ETH=2 (median, max):")
    print("   | | Detection from broadcast (mined at once) | Block -> settled |")
    print("   |---|---|---|")
    for mode, (detect, settle, _) in latency.items():
        print(
            f"   | {mode} | {ms(statistics.median(detect))}, {ms(max(detect))} | "
            f"{ms(statistics.median(settle))}, {ms(max(settle))} |"
        )


def _calls(calls: collections.Counter) -> str:
    total = sum(calls.values())
    return f"{total}: " + ", ".join(f"{n} {c}" for n, c in sorted(calls.items())) if total else "0"


def _latency(node, worker: Worker, invoices, *, mode: str, args, listener):
    from billing.chains.watchers import watcher_for

    stop = threading.Event()
    if mode == "push off":

        def feed() -> None:
            while not stop.wait(args.scan_seconds):
                worker.work.put("poll")

    else:
        ears = listener(watcher_for(currency="ETH"), action=lambda: worker.work.put("newHeads"))
        ears.connect()

        def feed() -> None:
            try:
                ears.run(stop=stop)
            finally:
                ears.close()

    thread = threading.Thread(target=feed, daemon=True)
    thread.start()
    first = len(worker.passes)
    detect, settle = [], []
    try:
        for inv in invoices:
            worker.watch[inv.pk] = {}
            request = inv.active_request
            node.send_eth(request.address, int(request.amount_due))
            broadcast = time.perf_counter()
            node.mine()
            detect.append(worker.wait(inv.pk, "processing", broadcast))
            node.mine()
            mined = time.perf_counter()
            settle.append(worker.wait(inv.pk, "settled", mined))
            print(f"   {mode}: detected {ms(detect[-1])} after broadcast, settled {ms(settle[-1])} after the block")
    finally:
        stop.set()
        thread.join(timeout=10)
    worker.drain(0)
    return detect, settle, [p for p in worker.passes[first:] if p.why != "busy"]


if __name__ == "__main__":
    main()
