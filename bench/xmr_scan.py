"""How fast the Monero watcher takes in a block of 200 payments among 10,000 open subaddresses.

Starts its own regtest network (devtools.monero: monerod, a payer wallet and
the merchant's view-only wallet; `bash tests/ensure-chain-nodes.sh` installs
them), issues the invoices through the billing engine, and prints:

0. The first run grows the view-only wallet's subaddress table (Monero's
   default lookahead of 200) ahead of the 10,000 issued indices.
1. A block with 200 incoming transfers (payer transactions of 15 each) to
   open subaddresses, 10,000 of them watched: the watcher run that records
   them, split into the time spent waiting on wallet-rpc (`refresh`, which
   reads the block, and `get_transfers`) and the watcher's own time (matching
   and recording the payments in the database).
2. A run with nothing new (what every CHAIN_SCAN_SECONDS costs when idle).
3. Block to settled: with CONFIRMATIONS_XMR=1, the time from the block paying
   an invoice to the invoice being `settled` by one watcher run.

Run it with the project's virtualenv:

    .venv/bin/python bench/xmr_scan.py
    .venv/bin/python bench/xmr_scan.py --destinations 2000 --transfers 100

It uses a throwaway SQLite database unless --database-url names an empty
PostgreSQL database (migrated, filled and left behind).
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PER_TX = 15  # destinations per payer transaction (16 outputs with the change)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--destinations", type=int, default=10_000, help="open subaddresses (default 10000)")
    parser.add_argument("--transfers", type=int, default=200, help="incoming transfers in the block (default 200)")
    parser.add_argument(
        "--lookahead",
        type=int,
        default=200,
        help="the wallet's subaddress lookahead (default 200, Monero's); the watcher creates the rest",
    )
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary folder")
    args = parser.parse_args()

    from devtools.monero import COINBASE_UNLOCK, RING_OUTPUTS, MoneroRegtest

    workdir = Path(tempfile.mkdtemp(prefix="xmr-scan-bench-"))
    txs = -(-args.transfers // PER_TX)
    print("Starting monerod and the wallets ...", flush=True)
    net = MoneroRegtest.start(mine=COINBASE_UNLOCK + RING_OUTPUTS + txs + 10, lookahead=args.lookahead)
    try:
        os.environ.update(
            {
                "DJANGO_SETTINGS_MODULE": "config.settings",
                "DEBUG": "1",
                "DATA_DIR": str(workdir),
                "DATABASE_URL": args.database_url or f"sqlite:///{workdir / 'bench.sqlite3'}",
                "CACHE_URL": "locmemcache://",
                "CELERY_BROKER_URL": "memory://",
                "XMR_ADDRESS": net.address,
                "XMR_VIEW_KEY": net.view_key,
                "XMR_WALLET_RPC_URL": net.wallet_url,
                "XMR_DAEMON_URL": net.daemon_url,
                "XMR_SUBADDRESS_LOOKAHEAD": str(args.lookahead),
                "MANUAL_RATES_USD": "XMR=200",
                "CONFIRMATIONS_XMR": "1",
                "LOG_LEVEL": "WARNING",
            }
        )
        for name in ("BTC_XPUB", "LTC_XPUB", "ETH_XPUB", "SOL_RECIPIENT", "SANDBOX"):
            os.environ.pop(name, None)
        run(net, args)
    finally:
        net.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def run(net, args) -> None:
    import django

    django.setup()
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from billing import services
    from billing.chains.monero import rpc
    from billing.chains.watchers import chain_scan
    from billing.models import Invoice
    from billing.payable import NOTHING, payable_register

    payable_register(kind="bench", payable=NOTHING)  # what its invoices pay for: nothing

    call_command("migrate", verbosity=0)
    customer = get_user_model().objects.create_user("bench", "a long bench passphrase")
    started = time.perf_counter()
    invoices = [
        services.invoice_create(
            account=customer,
            payable=("bench", 0),
            description="Benchmark",
            lines=[services.LineSpec("GPU time", Decimal(1), Decimal("35.00"), Decimal("35.00"))],
            currency="XMR",
        )
        for _ in range(args.destinations)
    ]
    print(f"{len(invoices)} open XMR invoices issued in {time.perf_counter() - started:.1f}s", flush=True)

    # Time every wallet-rpc call the watcher makes, by method.
    spent: dict[str, list[float]] = collections.defaultdict(list)
    original = rpc.WalletRpc.call

    def timed_call(self, method, **params):
        begun = time.perf_counter()
        try:
            return original(self, method, **params)
        finally:
            spent[method].append(time.perf_counter() - begun)

    rpc.WalletRpc.call = timed_call
    started = time.perf_counter()
    report = chain_scan(currency="XMR", force=True)
    assert not report.error, report.error
    made = len(spent["create_address"])
    print(
        f"First run: {time.perf_counter() - started:.1f}s, of which create_address {sum(spent['create_address']):.1f}s "
        f"in {made} call(s) (the wallet's subaddress table grown ahead of {len(invoices)} invoices)"
    )

    step = max(1, len(invoices) // args.transfers)
    paid = invoices[::step][: args.transfers]
    for i in range(0, len(paid), PER_TX):
        net.pay([(inv.active_request.address, int(inv.active_request.amount_due)) for inv in paid[i : i + PER_TX]])
    net.mine(1)
    print(f"\n1. A block with {len(paid)} transfers to {len(paid)} of {len(invoices)} open subaddresses")
    spent.clear()
    started = time.perf_counter()
    report = chain_scan(currency="XMR", force=True)
    total = time.perf_counter() - started
    assert not report.error and report.recorded == len(paid), report.summary()
    wallet = sum(sum(v) for v in spent.values())
    print(f"   watcher run: {ms(total)}; waiting on wallet-rpc {ms(wallet)}, its own work {ms(total - wallet)}")
    for method in ("refresh", "get_transfers"):
        print(f"   wallet-rpc {method}: {ms(sum(spent[method]))}")
    settled = Invoice.objects.filter(pk__in=[i.pk for i in paid], status="settled").count()
    print(f"   {settled} of {len(paid)} invoices settled by that run (CONFIRMATIONS_XMR=1)")

    spent.clear()
    started = time.perf_counter()
    chain_scan(currency="XMR", force=True)
    idle = time.perf_counter() - started
    print(f"\n2. A run with nothing new: {ms(idle)} (wallet-rpc {ms(sum(sum(v) for v in spent.values()))})")

    print("\n3. Block to settled, CONFIRMATIONS_XMR=1, one watcher run after the block")
    times = []
    for invoice in [i for i in invoices if i not in paid][:3]:
        request = invoice.active_request
        net.pay([(request.address, int(request.amount_due))])
        net.mine(1)
        begun = time.perf_counter()
        report = chain_scan(currency="XMR", force=True)
        times.append(time.perf_counter() - begun)
        if report.error or Invoice.objects.get(pk=invoice.pk).status != "settled":
            raise SystemExit(f"not settled: {report.summary()}")
    print(f"   {ms(statistics.median(times))} from the block to settled (median of {len(times)})")


if __name__ == "__main__":
    main()
