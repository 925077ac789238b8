"""How fast the BTC/LTC watcher scans a full block against many open invoices.

Starts its own litecoind regtest node (devtools.litecoind), a throwaway
database (SQLite in a temporary folder, or --database-url), registers
100,000 open deposit destinations, fills a block with 2,000+ transactions one
of which pays a real invoice, mines it, and prints:

- the time from the block being mined to the invoice being `settled` (one
  watcher run, as the periodic task does it; the confirmation policy is 1
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
import json
import os
import secrets
import shutil
import statistics
import sys
import tempfile
import time
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
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from accounts.models import Account
    from billing import services
    from billing.chains.utxo.scanner import block_parse
    from billing.chains.utxo.watcher import bitcoin_cursor_set, watched_scripts
    from billing.chains.watchers import chain_scan
    from billing.models import Invoice, PaymentRequest
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
    now = timezone.now()
    later = now + timezone.timedelta(days=1)
    batch = 5000
    for start in range(0, fillers, batch):
        count = min(batch, fillers - start)
        invoices = Invoice.objects.bulk_create(
            Invoice(
                number=f"BENCH-{start + i:07d}",
                account=customer,
                subject_kind="bench",
                description="filler",
                total_usd=Decimal("90.00"),
                created_at=now,
                expires_at=later,
                monitoring_until=later,
            )
            for i in range(count)
        )
        PaymentRequest.objects.bulk_create(
            PaymentRequest(
                invoice=inv,
                currency="LTC",
                network="litecoin-regtest",
                address="filler",
                match_key="0014" + secrets.token_hex(20),
                keyset="bench:filler",
                derivation_index=start + i,
                amount_due=100_000_000,
                rate_usd=Decimal(90),
                rate_source="manual",
                rate_at=now,
                payment_uri="",
                created_at=now,
                expires_at=later,
            )
            for i, inv in enumerate(invoices)
        )
    load_time, scripts = timed(lambda: watched_scripts(currency="LTC"), repeat=3)
    assert len(scripts) == args.destinations

    bitcoin_cursor_set(currency="LTC", height=node.height())
    print(f"Filling the mempool with {args.transactions:,} transactions, one paying {invoice.number} ...", flush=True)
    node.send_many_transactions(args.transactions, payees=[(request.match_key, int(request.amount_due))])
    bitcoin_cursor_set(currency="LTC", height=node.height())  # past the fan-out block
    started = time.perf_counter()
    mempool = chain_scan(currency="LTC", force=True)
    mempool_time = time.perf_counter() - started
    assert mempool.unconfirmed == 1, mempool.summary()
    invoice.refresh_from_db()
    assert invoice.status == "processing", invoice.status

    [block_hash] = node.mine(1)
    mined_at = time.perf_counter()
    report = chain_scan(currency="LTC", force=True)
    invoice.refresh_from_db()
    to_settled = time.perf_counter() - mined_at
    assert invoice.status == "settled" and report.blocks == 1, report.summary()

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
    print(f"Loading the {args.destinations:,} watched scripts (once per run): {load_time * 1000:,.0f} ms.")
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
