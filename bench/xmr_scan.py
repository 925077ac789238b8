"""How the Monero watcher does with 100,000 open invoices: per pass, push on and push off.

Starts its own regtest network (devtools.monero: monerod, a payer wallet and
the merchant's view-only wallet; `bash tests/ensure-chain-nodes.sh` installs
them), fills the database with open XMR invoices (one subaddress each; bulk
rows, plus the few the bench pays, issued through the billing engine), and
prints, for every watcher run ("pass"): the calls to the node (wallet-rpc and
monerod, by method), the database time (every SQL statement the run made), and
the run's own time. Then, with CONFIRMATIONS_XMR=1, for a few payments each:

- push off: a poller runs the watcher every CHAIN_SCAN_SECONDS (5 s), as the
  periodic task does;
- push on: monerod's ZMQ block announcements (`ChainListener`, as
  `manage.py listen_chain XMR`) and the wallet's `--tx-notify` hook
  (billing/chains/monero/notify.py, which puts the scan task on the Redis
  broker) queue the runs; the bench takes the tasks off the broker as a worker
  would (XMR_WALLET_REFRESH_SECONDS=1: the wallet reads the pool every second);

and prints detection latency (from the payment's broadcast to its record, the
invoice `processing`) and block -> settled (from the block being mined to the
invoice `settled`).

The merchant wallet must know every issued subaddress, as a production wallet
does after its watcher created them one by one as invoices were issued. Creating
100,000 through wallet-rpc takes the wallet a quarter of an hour (each one costs a
pass over its lookahead), so the bench writes the wallet with a lookahead past
every index, makes it take in a payment to the highest (its table then reaches
there), and sets the lookahead back to Monero's 200 (monero-wallet-cli `set
subaddress-lookahead`): the state of a wallet that has issued that many.

    .venv/bin/python bench/xmr_scan.py --database-url postgres://postgres@127.0.0.1:5432/bench_xmr \\
        --broker-url redis://127.0.0.1:6379/8 --invoices 100000

The PostgreSQL database must exist and be empty (it is migrated, filled and left
behind); without --database-url a throwaway SQLite database is used. The Redis
database of --broker-url is used for the push-on runs (its `celery` list is
emptied); without it they run with the ZMQ block push alone.
"""

from __future__ import annotations

import argparse
import collections
import os
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PER_TX = 15  # destinations per payer transaction (16 outputs with the change)
LOOKAHEAD = 200  # Monero's default: the merchant wallet's lookahead once warmed
WAIT = 90.0  # seconds a payment may take to be detected or settled before the bench gives up
NOTIFY = ROOT / "billing" / "chains" / "monero" / "notify.py"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--invoices", type=int, default=100_000, help="open invoices, one subaddress each (100000)")
    parser.add_argument("--transfers", type=int, default=150, help="incoming transfers in the busy block (150)")
    parser.add_argument("--payments", type=int, default=3, help="payments timed with push on and with push off (3)")
    parser.add_argument("--scan-seconds", type=float, default=5.0, help="the poll's period, push off (5)")
    parser.add_argument("--database-url", default="", help="default: SQLite in a temporary folder")
    parser.add_argument(
        "--broker-url",
        default="",
        help="a Redis URL (a database of its own, emptied) for the wallet's --tx-notify hook; without it, push on is skipped",
    )
    parser.add_argument("--slow-sql", action="store_true", help="print the busy block's slowest statements")
    args = parser.parse_args()

    from devtools.monero import COINBASE_UNLOCK, RING_OUTPUTS, MoneroRegtest

    workdir = Path(tempfile.mkdtemp(prefix="xmr-scan-bench-"))
    txs = -(-args.transfers // PER_TX) + 2 * args.payments + 1 + 25
    tx_notify = ""
    if args.broker_url:
        (workdir / "broker.url").write_text(f"{args.broker_url}\n")
        tx_notify = f"{sys.executable} {NOTIFY} --broker-file {workdir / 'broker.url'} XMR %s"
    warm = args.invoices + LOOKAHEAD
    print(f"Starting monerod and the wallets (the merchant's lookahead {warm:,} to begin with) ...", flush=True)
    started = time.perf_counter()
    net = MoneroRegtest.start(mine=COINBASE_UNLOCK + RING_OUTPUTS + txs + 10, lookahead=warm, tx_notify=tx_notify)
    print(f"   {time.perf_counter() - started:.1f}s", flush=True)
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
                "XMR_ZMQ_URL": net.zmq_url,
                "XMR_SUBADDRESS_LOOKAHEAD": str(LOOKAHEAD),
                "XMR_WALLET_REFRESH_SECONDS": "1",
                "MANUAL_RATES_USD": "XMR=200",
                "CONFIRMATIONS_XMR": "1",
                "CHAIN_PUSH_DEBOUNCE_SECONDS": "0.5",
                "LOG_LEVEL": "WARNING",
            }
        )
        for name in ("BTC_XPUB", "LTC_XPUB", "ETH_XPUB", "SOL_RECIPIENT", "SANDBOX"):
            os.environ.pop(name, None)
        run(net, args)
    finally:
        net.stop()
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class Pass:
    """One watcher run: when it ended, what it cost."""

    began: float
    seconds: float
    db_seconds: float
    queries: int
    calls: collections.Counter
    recorded: int
    why: str
    node_seconds: float = 0.0


@dataclass
class Meter:
    """Counts the node calls of the watcher (wallet-rpc and monerod, by method)."""

    calls: collections.Counter = field(default_factory=collections.Counter)
    seconds: float = 0.0  # waiting on the node

    def install(self) -> None:
        from billing.chains.monero import rpc

        for cls, prefix in ((rpc.WalletRpc, "wallet"), (rpc.DaemonRpc, "daemon")):
            original = cls.call

            def call(self_, method, _original=original, _prefix=prefix, **params):
                self.calls[f"{_prefix}.{method}"] += 1
                begun = time.perf_counter()
                try:
                    return _original(self_, method, **params)
                finally:
                    self.seconds += time.perf_counter() - begun

            cls.call = call


class Worker:
    """Runs the watcher once per item queued (as a Celery worker runs the scan task), timing
    each run, and notes when each watched invoice was first seen `processing` and `settled`."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter
        self.work: queue.Queue = queue.Queue()
        self.passes: list[Pass] = []
        self.watch: dict[int, dict[str, float]] = {}  # invoice pk -> status -> first seen at
        self.statements: collections.Counter = collections.Counter()  # the busy block's SQL, seconds each
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self.work.put(None)
        self._thread.join(timeout=120)

    def _loop(self) -> None:
        from django.db import connection

        try:
            while not self._stop.is_set():
                why = self.work.get()
                if why is None:
                    return
                self.scan(why)
        finally:
            connection.close()

    def scan(self, why: str) -> Pass:
        from django.db import connection

        from billing.chains.watchers import chain_scan
        from billing.models import Invoice

        db = [0.0, 0]
        statements = self.statements if why == "busy block" else None

        def timed(execute, sql, params, many, context):
            begun = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                spent = time.perf_counter() - begun
                db[0] += spent
                db[1] += 1
                if statements is not None:
                    statements[sql[:160]] += spent

        before = collections.Counter(self.meter.calls)
        node_before = self.meter.seconds
        began = time.perf_counter()
        with connection.execute_wrapper(timed):
            report = chain_scan(currency="XMR")
        ended = time.perf_counter()
        if report.error:
            print(f"   (a run failed: {report.error})", flush=True)
        done = Pass(
            began,
            ended - began,
            db[0],
            db[1],
            self.meter.calls - before,
            report.recorded,
            report.skipped or why,
            self.meter.seconds - node_before,
        )
        self.passes.append(done)
        if self.watch:
            for pk, status in Invoice.objects.filter(pk__in=list(self.watch)).values_list("pk", "status"):
                seen = self.watch[pk]
                if status in ("processing", "settled"):
                    seen.setdefault("processing", ended)
                if status == "settled":
                    seen.setdefault("settled", ended)
        return done

    def wait(self, pk: int, status: str, since: float) -> float:
        give_up = time.perf_counter() + WAIT
        while status not in self.watch[pk]:
            if time.perf_counter() > give_up:
                raise SystemExit(f"invoice {pk} not {status} after {WAIT:.0f}s")
            time.sleep(0.01)
        return self.watch[pk][status] - since


def run(net, args) -> None:
    import django

    django.setup()
    from decimal import Decimal

    from django.core.management import call_command
    from django.db import connection

    from accounts.models import Account
    from bench.fillers import fillers_register
    from billing import services
    from billing.chains.config import derivation_keyset
    from billing.chains.monero import family
    from billing.chains.watchers import ChainListener, watcher_for
    from billing.models import DerivationCounter, Invoice, PaymentRequest
    from billing.payable import NOTHING, payable_register

    payable_register(kind="bench", payable=NOTHING)  # what its invoices pay for: nothing

    print(f"Migrating a fresh {connection.vendor} database ...", flush=True)
    call_command("migrate", verbosity=0)
    customer = Account.objects.create_user("bench", "a long bench passphrase")

    def invoice():
        return services.invoice_create(
            account=customer,
            payable=("bench", 0),
            description="Benchmark",
            lines=[services.LineSpec("GPU time", Decimal(1), Decimal("35.00"), Decimal("35.00"))],
            currency="XMR",
        )

    first = invoice()  # subaddress (0, 1); the template of the bulk rows
    template = first.active_request
    keyset = derivation_keyset(currency="XMR")
    warm_index = args.invoices + 1  # never issued, above every issued one: the wallet's warm-up payment
    fillers = args.invoices - 1 - (args.transfers + 2 * args.payments)  # the rest are issued for real
    started = time.perf_counter()
    fillers_register(
        customer=customer,
        count=fillers,
        currency="XMR",
        network=template.network,
        keyset=keyset,
        first_index=2,
        match_key=lambda index: f"{family.XMR_ACCOUNT}/{index}",
        amount_due=int(template.amount_due),
        amount_usd=template.amount_usd,
        rate_usd=template.rate_usd,
        days=2,
    )
    DerivationCounter.objects.filter(keyset=keyset).update(next_index=fillers + 2)
    paid = [invoice() for _ in range(args.transfers + 2 * args.payments)]  # up to (0, N)
    open_count = PaymentRequest.objects.filter(currency="XMR", is_active=True, invoice__status="new").count()
    print(f"{open_count:,} open XMR invoices in {time.perf_counter() - started:.1f}s", flush=True)

    # The wallet takes in one payment to the highest issued index, then goes back to Monero's lookahead.
    started = time.perf_counter()
    warm_address = family.monero_account().subaddress(major=family.XMR_ACCOUNT, minor=warm_index)
    net.pay([(warm_address, 10**9)])
    net.mine(1)
    net.mine(25)  # past the watcher's margin (XMR_SCAN_MARGIN_BLOCKS): its first run does not read it
    net.merchant.rpc.call("refresh")
    net.merchant_lookahead_set(LOOKAHEAD)
    highest = net.merchant.rpc.call("get_address", account_index=0, address_index=[warm_index])
    assert highest["addresses"][0]["address"] == warm_address
    print(
        f"The wallet's table taken to ({family.XMR_ACCOUNT}, {warm_index:,}) and its lookahead set back to "
        f"{LOOKAHEAD} in {time.perf_counter() - started:.1f}s",
        flush=True,
    )
    watcher_for(currency="XMR").cursor_set(height=net.height() - 1)

    meter = Meter()
    meter.install()
    worker = Worker(meter)
    rows: list[tuple[str, Pass]] = []
    try:
        worker.work.put("first")
        worker.work.put("idle")
        while len(worker.passes) < 2:
            time.sleep(0.05)
        rows += [("first run (wallet checked, its refresh period set)", worker.passes[0])]
        rows += [("a run with nothing new", worker.passes[1])]

        busy = paid[: args.transfers]
        for i in range(0, len(busy), PER_TX):
            net.pay([(inv.active_request.address, int(inv.active_request.amount_due)) for inv in busy[i : i + PER_TX]])
        net.mine(1)
        worker.work.put("busy block")
        while len(worker.passes) < 3:
            time.sleep(0.05)
        block = worker.passes[2]
        settled = Invoice.objects.filter(pk__in=[i.pk for i in busy], status="settled").count()
        rows += [(f"a block paying {len(busy)} invoices ({settled} settled by the run)", block)]

        latency = {}
        for mode, timed in (("push off", paid[args.transfers :][: args.payments]), ("push on", paid[-args.payments :])):
            if mode == "push on" and not args.broker_url:
                # The test daemon is offline and never announces its pool over ZMQ: a pool payment is
                # pushed by the wallet's --tx-notify hook alone, which needs a broker to put the scan on.
                print("   push on skipped: it needs --broker-url (the wallet's --tx-notify hook queues there)")
                continue
            latency[mode] = measure(net, worker, timed, mode=mode, args=args, listener=ChainListener)
    finally:
        worker.stop()

    print(f"\nPer pass, {open_count:,} open invoices ({connection.vendor}):")
    print("| Pass | Node calls | Waiting on the node | Database | Run |")
    print("|---|---|---|---|---|")
    for what, p in rows:
        print(
            f"| {what} | {calls_text(p.calls)} | {ms(p.node_seconds)} | {ms(p.db_seconds)} ({p.queries} queries) "
            f"| {ms(p.seconds)} |"
        )
    for mode, (_, _, passes) in latency.items():
        if passes:
            print(
                f"| {mode}: median of {len(passes)} runs | {calls_text(median_calls(passes))} | "
                f"{ms(statistics.median(p.node_seconds for p in passes))} | "
                f"{ms(statistics.median(p.db_seconds for p in passes))} "
                f"({int(statistics.median(p.queries for p in passes))} queries) | "
                f"{ms(statistics.median(p.seconds for p in passes))} |"
            )
    if args.slow_sql:
        print("\nThe busy block's slowest statements (seconds in all):")
        for sql, spent in worker.statements.most_common(8):
            print(f"   {spent:.3f}  {sql}")
    print(f"\nLatency, {args.payments} payments each, CONFIRMATIONS_XMR=1 (median, max):")
    print("| | Detection from broadcast | Block -> settled |")
    print("|---|---|---|")
    for mode, (detect, settle, _) in latency.items():
        print(
            f"| {mode} | {ms(statistics.median(detect))}, {ms(max(detect))} | "
            f"{ms(statistics.median(settle))}, {ms(max(settle))} |"
        )


def calls_text(calls: collections.Counter) -> str:
    total = sum(calls.values())
    parts = ", ".join(f"{name.split('.', 1)[1]} {n}" for name, n in sorted(calls.items()))
    return f"{total}: {parts}" if total else "0"


def median_calls(passes: list[Pass]) -> collections.Counter:
    names = {name for p in passes for name in p.calls}
    return collections.Counter({n: int(statistics.median(p.calls.get(n, 0) for p in passes)) for n in names})


def measure(net, worker: Worker, invoices, *, mode: str, args, listener) -> tuple[list, list, list[Pass]]:
    """Pay each invoice (detection from broadcast), then mine its block (block -> settled)."""
    import redis

    from billing.chains.watchers import watcher_for

    stop = threading.Event()
    threads = []
    broker = redis.Redis.from_url(args.broker_url) if args.broker_url else None
    if broker is not None:
        broker.delete("celery")
    if mode == "push off":

        def poll() -> None:
            while not stop.wait(args.scan_seconds):
                worker.work.put("poll")

        threads.append(threading.Thread(target=poll, daemon=True))
    else:
        ears = listener(watcher_for(currency="XMR"), action=lambda: worker.work.put("zmq"))
        ears.connect()

        def listen() -> None:
            try:
                ears.run(stop=stop)
            finally:
                ears.close()

        threads.append(threading.Thread(target=listen, daemon=True))
        if broker is not None:

            def consume() -> None:  # the worker's side of the broker: one scan per task queued
                while not stop.is_set():
                    if broker.lpop("celery") is not None:
                        worker.work.put("tx-notify")
                    else:
                        time.sleep(0.02)

            threads.append(threading.Thread(target=consume, daemon=True))
    for thread in threads:
        thread.start()
    time.sleep(1.0)  # the ZMQ subscription reaches monerod
    first = len(worker.passes)
    detect, settle = [], []
    try:
        for inv in invoices:
            worker.watch[inv.pk] = {}
            request = inv.active_request
            net.pay([(request.address, int(request.amount_due))])
            broadcast = time.perf_counter()
            detect.append(worker.wait(inv.pk, "processing", broadcast))
            net.mine(1)
            mined = time.perf_counter()
            settle.append(worker.wait(inv.pk, "settled", mined))
            print(f"   {mode}: detected {ms(detect[-1])} after broadcast, settled {ms(settle[-1])} after the block")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    while not worker.work.empty():
        time.sleep(0.05)
    return detect, settle, [p for p in worker.passes[first:] if p.why != "busy"]


if __name__ == "__main__":
    main()
