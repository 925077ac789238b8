"""How fast the BTC/LTC watcher scans a full block against many open invoices.

Starts its own litecoind regtest node (devtools.litecoind), a throwaway
database (SQLite in a temporary folder, or --database-url), registers
100,000 open deposit destinations, fills a block with 2,000+ transactions one
of which pays a real invoice, mines it, and prints:

- per watcher run (pass), as the periodic task runs it: the calls to the node
  (a batch counts each of its calls), the transactions decoded, the database
  time and queries, the run's wall time, and what it found: the mempool pass
  that first sees the 2,000 transactions, an idle pass, a pass after a worker
  restart (the seen-set is stored: nothing is decoded again), a new payment
  (detection latency from its broadcast: the run that follows it; the poll
  adds up to CHAIN_SCAN_SECONDS before that run starts), and the
  block (block mined -> invoice `settled`; the confirmation policy is 1
  block here so the one block settles it);
- the watcher's scan of that block, per block and per transaction: parsing
  the node's JSON (exact decimals) and matching every output against the
  100,000 destinations;
- the node's own `getblock <hash> 2` (the HTTP round trip and its bytes);
- loading the 100,000 watched destinations, which every run does once;
- for comparison, the other way to read a block: the raw bytes (`getblock
  <hash> 0`) decoded with python-bitcoinlib (`CBlock`), with the same matching
  and the same outpoints and txids the watcher needs. The watcher keeps the
  node's JSON: python-bitcoinlib does not know Litecoin's MWEB serialisation,
  and its pure-Python decoding costs more of the worker's time than the JSON does.

Run it with the project's virtualenv:

    .venv/bin/python bench/chain_scan.py
    .venv/bin/python bench/chain_scan.py --database-url postgres://postgres@127.0.0.1:5432/bench

A PostgreSQL database given with --database-url must exist and be empty (it is
migrated, filled and left behind).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from decimal import Decimal
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--transactions", type=int, default=2000, help="transactions in the block (default 2000)")
    parser.add_argument("--destinations", type=int, default=100_000, help="open destinations (default 100000)")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary folder")
    parser.add_argument(
        "--poll-samples",
        type=int,
        default=5,
        help="payments timed with push off (the periodic poll) and with push on (P2P) (default 5 each; 0: none)",
    )
    args = parser.parse_args()

    from devtools.litecoind import RegtestNode, watch_only_account_generate

    workdir = Path(tempfile.mkdtemp(prefix="chain-scan-bench-"))
    print("Starting litecoind -regtest ...", flush=True)
    node = RegtestNode.start(mine=300)  # 200 mature coinbases fund the 2,000 transactions
    try:
        account = watch_only_account_generate(hrp=node.hrp)
        os.environ.update(
            {
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "DEBUG": "1",
                "DATA_DIR": str(workdir),
                "DATABASE_URL": args.database_url or f"sqlite:///{workdir / 'bench.sqlite3'}",
                "CACHE_URL": "locmemcache://",
                "CELERY_BROKER_URL": "memory://",
                "LTC_XPUB": account.vpub,
                "LTC_NETWORK": "regtest",
                "LTC_RPC_URL": node.url,
                "MANUAL_RATES_USD": "LTC=90",
                "CONFIRMATIONS_LTC": "1",
                "LOG_LEVEL": "WARNING",
            }
        )
        for name in ("BTC_XPUB", "ETH_XPUB", "XMR_ADDRESS", "SOL_RECIPIENT", "SANDBOX"):
            os.environ.pop(name, None)
        run(node, args)
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run(node, args) -> None:
    import django

    django.setup()
    import httpx
    from django.conf import settings
    from django.core.management import call_command
    from django.db import connection

    from accounts.models import Account
    from bench.fillers import fillers_register
    from billing import services
    from billing.chains.utxo import watcher as utxo_watcher
    from billing.chains.utxo.scanner import block_parse
    from billing.chains.utxo.watcher import bitcoin_cursor_set, watched_scripts
    from billing.chains.watchers import chain_scan
    from billing.models import Invoice
    from billing.payable import NOTHING, payable_register

    payable_register(kind="bench", payable=NOTHING)  # what its invoices pay for: nothing

    print(f"Migrating a fresh {connection.vendor} database ...", flush=True)
    call_command("migrate", verbosity=0)
    customer = Account.objects.create_user("bench", "a long bench passphrase")
    invoice = services.invoice_create(
        account=customer,
        payable=("bench", 1),
        description="Benchmark",
        lines=[services.LineSpec("GPU time", Decimal(1), Decimal("90.00"), Decimal("90.00"))],
        currency="LTC",
    )
    request = invoice.active_request

    fillers = args.destinations - 1
    print(f"Registering {fillers:,} more open invoices with their destinations ...", flush=True)
    fillers_register(
        customer=customer,
        count=fillers,
        currency="LTC",
        network="litecoin-regtest",
        keyset="bench:filler",
        first_index=0,
        match_key=lambda _index: "0014" + secrets.token_hex(20),
        amount_due=100_000_000,
        amount_usd=Decimal("90.00"),
        rate_usd=Decimal(90),
    )
    load_time, scripts = timed(lambda: watched_scripts(currency="LTC"), repeat=3)
    assert len(scripts) == args.destinations

    bitcoin_cursor_set(currency="LTC", height=node.height())
    second = services.invoice_create(
        account=customer,
        payable=("bench", 2),
        description="Benchmark",
        lines=[services.LineSpec("GPU time", Decimal(1), Decimal("90.00"), Decimal("90.00"))],
        currency="LTC",
    )
    meter = Meter()
    passes: list[dict] = []

    def scan_pass(what: str, *, since: float | None = None, until=None) -> dict:
        """One watcher run, metered; `since` (a broadcast or a block, perf_counter) to when
        `until()` holds after the run: the detection latency."""
        with meter.measure() as m:
            started = time.perf_counter()
            report = chain_scan(currency="LTC", force=True)
            wall = time.perf_counter() - started
        assert report.ok, report.summary()
        row = {"what": what, "report": report, "wall": wall, **m}
        if since is not None:
            assert until is None or until(), f"{what}: not detected in one run"
            row["latency"] = time.perf_counter() - since
        passes.append(row)
        return row

    def status_is(inv, wanted):
        return lambda: Invoice.objects.get(pk=inv.pk).status == wanted

    print(f"Filling the mempool with {args.transactions:,} transactions, one paying {invoice.number} ...", flush=True)
    node.send_many_transactions(args.transactions, payees=[(request.match_key, int(request.amount_due))])
    broadcast = time.perf_counter()
    first = scan_pass(
        f"the fan-out block and {args.transactions:,} new mempool txs, one paying",
        since=broadcast,
        until=status_is(invoice, "processing"),
    )
    assert first["report"].unconfirmed == 1 and first["decoded"] >= args.transactions, first
    mempool_time = first["wall"]
    scan_pass("idle: nothing new")
    utxo_watcher.process_state_clear()  # a worker restart: the process's watchers are gone
    restarted = scan_pass(f"after a worker restart, the {args.transactions:,} txs still in the mempool")
    assert restarted["decoded"] == 0, restarted
    txid = node.send_to_script(second.active_request.match_key, int(second.active_request.amount_due))
    broadcast = time.perf_counter()
    paid = scan_pass("a new payment broadcast", since=broadcast, until=status_is(second, "processing"))
    assert paid["decoded"] == 1 and paid["report"].unconfirmed == 1, (txid, paid)
    scan_pass("idle: nothing new")

    [block_hash] = node.mine(1)
    mined_at = time.perf_counter()
    block_row = scan_pass(
        "the block holding them mined (CONFIRMATIONS_LTC=1)",
        since=mined_at,
        until=lambda: status_is(invoice, "settled")() and status_is(second, "settled")(),
    )
    report = block_row["report"]
    to_settled = block_row["latency"]
    assert report.blocks == 1, report.summary()
    scan_pass("idle: nothing new")

    print()
    print(
        f"Watcher runs at {args.destinations:,} open LTC invoices ({connection.vendor}); "
        "latency: from the broadcast (or the block) to the invoice's new status, the run starting at once."
    )
    print()
    print("| run | node calls | txs decoded | database | queries | run | latency | found |")
    print("|---|---|---|---|---|---|---|---|")
    for row in passes:
        r = row["report"]
        found = ", ".join(
            f"{n} {label}"
            for n, label in (
                (r.blocks, "block(s)"),
                (r.unconfirmed, "unconfirmed"),
                (r.recorded, "from blocks"),
                (r.confirmations_updated, "confirmations"),
            )
            if n
        )
        latency = f"{row['latency'] * 1000:,.0f} ms" if "latency" in row else ""
        print(
            f"| {row['what']} | {row['calls']:,} | {row['decoded']:,} | {row['db'] * 1000:,.0f} ms | "
            f"{row['queries']:,} | {row['wall'] * 1000:,.0f} ms | {latency} | {found or 'nothing'} |"
        )
    poll_latencies(node, customer, samples=args.poll_samples, interval=settings.CHAIN_SCAN_SECONDS)

    # The same block, taken apart.
    body = json.dumps({"jsonrpc": "1.0", "id": 1, "method": "getblock", "params": [block_hash, 2]})
    with httpx.Client(auth=(node.rpc_user, node.rpc_password), timeout=60) as client:
        url = f"http://127.0.0.1:{node.rpc_port}/"
        getblock_time, raw = timed(lambda: client.post(url, content=body).content)
    parse_time, reply = timed(lambda: json.loads(raw, parse_float=Decimal))
    block = reply["result"]
    match_time, scan = timed(lambda: block_parse(block, scripts=scripts))
    assert [o.txid for o in scan.observations] and scan.tx_count >= args.transactions + 1
    tx = scan.tx_count

    def row(what: str, seconds: float) -> str:
        return f"| {what} | {seconds * 1000:,.0f} ms | {seconds / tx * 1e6:,.1f} µs |"

    print()
    print(
        f"Block {scan.block.height}: {tx:,} transactions, {len(raw) / 1e6:.1f} MB of getblock JSON; "
        f"{args.destinations:,} open destinations ({connection.vendor}); medians of 5 runs."
    )
    print()
    print("| step | per block | per transaction |")
    print("|---|---|---|")
    print(row("the node's `getblock <hash> 2` (HTTP round trip)", getblock_time))
    print(row("parsing its JSON, amounts as exact decimals", parse_time))
    print(row("matching every output against the destinations", match_time))
    print(row("the watcher's whole run for the block (fetch, parse, match, record, settle)", report.seconds))
    print()
    print(
        f"Block mined -> invoice settled: {to_settled * 1000:,.0f} ms (one watcher run; the periodic task "
        f"starts one every CHAIN_SCAN_SECONDS)."
    )
    print(f"Loading the {args.destinations:,} watched scripts from scratch: {load_time * 1000:,.0f} ms.")
    print(f"Mempool pass that first saw the {args.transactions:,} transactions: {mempool_time * 1000:,.0f} ms.")

    body = json.dumps({"jsonrpc": "1.0", "id": 1, "method": "getblock", "params": [block_hash, 0]})
    with httpx.Client(auth=(node.rpc_user, node.rpc_password), timeout=60) as client:
        raw_fetch_time, raw_reply = timed(lambda: client.post(url, content=body).content)
    block_bytes = bytes.fromhex(json.loads(raw_reply)["result"])
    raw_time, found = timed(lambda: raw_block_match(block_bytes, scripts))
    assert found == sorted((o.txid, o.vout, o.amount) for o in scan.observations)
    print()
    print(f"For comparison, the raw block ({len(block_bytes) / 1e6:.1f} MB) read with python-bitcoinlib:")
    print()
    print("| step | per block | per transaction |")
    print("|---|---|---|")
    print(row("the node's `getblock <hash> 0` (HTTP round trip)", raw_fetch_time))
    print(row("decoding it (`CBlock`), txids, outpoints, matching", raw_time))
    print(row("against the JSON way: `getblock <hash> 2`, parsing, matching", getblock_time + parse_time + match_time))


def poll_latencies(node, customer, *, samples: int, interval: float) -> None:
    """Payments broadcast and blocks mined at random moments, the time from each to its
    invoice's new status as a customer polling would see it, twice: push off, as
    deployed without a listener (a poller runs the watcher every `interval` seconds,
    the beat schedule), and push on (`ChainListener` on the node's P2P port, as
    `manage.py listen_chain LTC` with LTC_P2P_PEER, each announcement waking a worker
    that runs the watcher)."""
    import random
    import threading

    from django.conf import settings
    from django.db import connection

    from billing import services
    from billing.chains.watchers import ChainListener, chain_scan, watcher_for
    from billing.models import Invoice

    if samples <= 0:
        return

    def wait_for(invoice, status: str, since: float) -> float:
        while Invoice.objects.filter(pk=invoice.pk, status=status).count() == 0:
            if time.perf_counter() - since > 4 * interval + 30:
                raise AssertionError(f"{invoice.number} not {status} after {4 * interval + 30:g} s")
            time.sleep(0.01)
        return time.perf_counter() - since

    def spread(values: list[float]) -> str:
        return f"median {statistics.median(values):.2f} s, {min(values):.2f}-{max(values):.2f} s"

    def one_mode(mode: str) -> None:
        stop, wake = threading.Event(), threading.Event()
        threads = []
        if mode == "push off":

            def poller() -> None:
                try:
                    while not stop.is_set():
                        started = time.monotonic()
                        chain_scan(currency="LTC")
                        stop.wait(max(0.0, interval - (time.monotonic() - started)))
                finally:
                    connection.close()

            threads.append(threading.Thread(target=poller, daemon=True))
        else:
            ears = ChainListener(watcher_for(currency="LTC"), action=wake.set)
            ears.connect()

            def listen() -> None:
                try:
                    ears.run(stop=stop)
                finally:
                    ears.close()

            def worker() -> None:
                try:
                    while not stop.is_set():
                        if wake.wait(0.1):
                            wake.clear()
                            chain_scan(currency="LTC")
                finally:
                    connection.close()

            threads += [threading.Thread(target=listen, daemon=True), threading.Thread(target=worker, daemon=True)]
        for thread in threads:
            thread.start()
        detected, settled = [], []
        try:
            for n in range(samples):
                invoice = services.invoice_create(
                    account=customer,
                    payable=("bench", n),
                    description="Benchmark",
                    lines=[services.LineSpec("GPU time", Decimal(1), Decimal("9.00"), Decimal("9.00"))],
                    currency="LTC",
                )
                time.sleep(random.uniform(0, interval))
                node.send_to_script(invoice.active_request.match_key, int(invoice.active_request.amount_due))
                detected.append(wait_for(invoice, "processing", time.perf_counter()))
                time.sleep(random.uniform(0, interval))
                node.mine(1)
                settled.append(wait_for(invoice, "settled", time.perf_counter()))
        finally:
            stop.set()
            for thread in threads:
                thread.join()

        print()
        if mode == "push off":
            print(f"Push off: the watcher polled every CHAIN_SCAN_SECONDS ({interval:g} s), {samples} payments:")
        else:
            print(f"Push on: the node's P2P announcements (LTC_P2P_PEER), {samples} payments:")
        print(f"- broadcast -> invoice processing: {spread(detected)}")
        print(f"- block mined -> invoice settled (CONFIRMATIONS_LTC=1): {spread(settled)}")

    settings.LTC_P2P_PEER = f"127.0.0.1:{node.p2p_port}"  # the bench node is noban for 127.0.0.1
    one_mode("push off")
    one_mode("push on")


class Meter:
    """Counts what a watcher run asks of the node and of the database."""

    @contextlib.contextmanager
    def measure(self):
        from django.db import connection

        from billing.chains.utxo.rpc import BitcoinRpc

        calls: Counter = Counter()
        db = {"seconds": 0.0, "queries": 0}
        call, batch = BitcoinRpc.call, BitcoinRpc.batch

        def counting_call(rpc, method, *params):
            calls[method] += 1
            return call(rpc, method, *params)

        def counting_batch(rpc, requests, **kwargs):
            requests = list(requests)
            calls.update(method for method, _ in requests)
            return batch(rpc, requests, **kwargs)

        def timing(execute, sql, params, many, context):
            started = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                db["seconds"] += time.perf_counter() - started
                db["queries"] += 1

        result: dict = {}
        BitcoinRpc.call, BitcoinRpc.batch = counting_call, counting_batch
        try:
            with connection.execute_wrapper(timing):
                yield result
        finally:
            BitcoinRpc.call, BitcoinRpc.batch = call, batch
            result.update(
                calls=sum(calls.values()),
                decoded=calls["getrawtransaction"],
                db=db["seconds"],
                queries=db["queries"],
                methods=dict(calls),
            )


def raw_block_match(block_bytes: bytes, scripts) -> list[tuple[str, int, int]]:
    """What `block_parse` gets from the node's JSON, from the raw block instead:
    every txid, every outpoint spent, and the outputs paying `scripts`."""
    from bitcoin.core import CBlock, b2lx

    block = CBlock.deserialize(block_bytes)
    txids, spent, found = set(), {}, []
    for tx in block.vtx:
        txid = b2lx(tx.GetTxid())
        txids.add(txid)
        if not tx.is_coinbase():
            for txin in tx.vin:
                spent[(b2lx(txin.prevout.hash), txin.prevout.n)] = txid
        for n, out in enumerate(tx.vout):
            if out.scriptPubKey.hex() in scripts:
                found.append((txid, n, out.nValue))
    return sorted(found)


if __name__ == "__main__":
    main()
