"""What one pass of the Solana watcher costs in RPC requests, at 100, 1,000
and 10,000 open invoices, measured against the loopback node
(devtools.solana_rpc).

For each size it opens that many invoice references, pays 1 % of them (and
sends one plain transfer to the recipient), finalizes, then runs:

- a busy pass: the payments are listed, fetched and validated;
- a quiet pass: nothing new (what every pass costs most of the time);
- a quiet pass in recipient-only mode (SOL_SCAN_REFERENCES=0): the recipient's
  listing alone finds every transfer, whatever the number of invoices;
- in recipient-only mode from the start (the default; `--modes recipient`): the
  first pass, the busy pass and a quiet pass, the references matched locally.

and prints, per pass: JSON-RPC calls (what providers bill and rate-limit),
HTTP requests (batches of --batch-size calls), the time the pass took against
the loopback node, and how long the same calls take at a provider's limit of
--rps calls per second (calls / rps: the pacing the client would apply).

    .venv/bin/python bench/solana_scan.py
    .venv/bin/python bench/solana_scan.py --sizes 100 1000 --batch-size 50 --rps 40
    .venv/bin/python bench/solana_scan.py --modes recipient --sizes 100000

With --latency it measures instead how long a payment takes to be seen, from
its broadcast (`sendTransaction` answered) to its invoice being `processing`,
and from its block being finalized to the invoice being `settled`, through the
whole billing engine (a throwaway SQLite database, Celery tasks run eagerly as
a worker would at once), against the loopback node with the sandbox's clock
(a block every 0.4 s, finalized 32 slots behind):

- push off: the periodic task alone, a scan every --poll seconds (CHAIN_SCAN_SECONDS);
- push on: the same poll, plus the listener of `listen_chain SOL` on the node's
  websocket (logsSubscribe mentioning the recipient, at confirmed and finalized,
  CHAIN_PUSH_DEBOUNCE_SECONDS of 0.5).

Payments are sent one at a time at random moments of the poll's period; the
invoices' states are read every 20 ms (the figures' resolution).

    .venv/bin/python bench/solana_scan.py --latency --payments 20
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from solders.keypair import Keypair  # noqa: E402

from billing.chains.solana.rpc import SolanaRpc  # noqa: E402
from billing.chains.solana.scan import FinalMemory, solana_scan  # noqa: E402
from devtools.solana_rpc import LAMPORTS_PER_SOL, SolanaLedger, SolanaRpcServer  # noqa: E402


def run_pass(rpc, node, *, recipient, references, state, memory) -> dict:
    node.stats_reset()
    before = (rpc.stats.http_requests, rpc.stats.calls)
    started = time.perf_counter()
    outcome = solana_scan(
        rpc,
        recipient=recipient,
        references=references,
        cursors=state["cursors"],
        pending=state["pending"],
        known_references=lambda keys: state["known"].intersection(keys),
        known_final=lambda sigs: state["final"].intersection(sigs),
        memory=memory,
    )
    seconds = time.perf_counter() - started
    state["cursors"], state["pending"] = outcome.cursors, outcome.pending
    state["final"] |= {s.signature for s in outcome.sightings + outcome.unmatched if s.finalized}
    return {
        "calls": rpc.stats.calls - before[1],
        "requests": rpc.stats.http_requests - before[0],
        "seconds": seconds,
        "by_method": dict(node.stats.calls),
        "payments": len(outcome.sightings),
        "unmatched": len(outcome.unmatched),
    }


def measure_recipient(size: int, *, batch_size: int, paid_share: float) -> list[tuple[str, dict]]:
    """The default mode: the recipient's listing alone, references matched locally
    (what `known_references` answers from the database, here from a set)."""
    ledger = SolanaLedger()
    merchant = ledger.keypair_funded(LAMPORTS_PER_SOL)
    payer = ledger.keypair_funded(10_000 * LAMPORTS_PER_SOL)
    references = [str(Keypair().pubkey()) for _ in range(size)]
    recipient = str(merchant.pubkey())
    rows = []
    with SolanaRpcServer(ledger) as node, SolanaRpc(node.url, batch_size=batch_size) as rpc:
        state = {"cursors": {}, "pending": {}, "known": set(references), "final": set()}
        memory = FinalMemory()
        rows.append(
            (
                "first, recipient only",
                run_pass(rpc, node, recipient=recipient, references=[], state=state, memory=memory),
            )
        )
        for reference in references[: max(1, int(size * paid_share))]:
            ledger.pay(payer, merchant.pubkey(), 1_000_000, references=[reference])
        ledger.pay(payer, merchant.pubkey(), 5_000)  # no reference: recorded for staff
        ledger.finalize()
        for name in ("busy, recipient only", "quiet, recipient only"):
            rows.append((name, run_pass(rpc, node, recipient=recipient, references=[], state=state, memory=memory)))
    return rows


def measure(size: int, *, batch_size: int, paid_share: float) -> list[tuple[str, dict]]:
    ledger = SolanaLedger()
    merchant = ledger.keypair_funded(LAMPORTS_PER_SOL)
    payer = ledger.keypair_funded(10_000 * LAMPORTS_PER_SOL)
    references = [str(Keypair().pubkey()) for _ in range(size)]
    recipient = str(merchant.pubkey())
    rows = []
    with SolanaRpcServer(ledger) as node, SolanaRpc(node.url, batch_size=batch_size) as rpc:
        state = {"cursors": {}, "pending": {}, "known": set(references), "final": set()}
        memory = FinalMemory()
        # Every reference listed once (empty), so the measured passes start from cursors.
        run_pass(rpc, node, recipient=recipient, references=references, state=state, memory=memory)
        for reference in references[: max(1, int(size * paid_share))]:
            ledger.pay(payer, merchant.pubkey(), 1_000_000, references=[reference])
        ledger.pay(payer, merchant.pubkey(), 5_000)  # no reference: recorded for staff
        ledger.finalize()
        rows.append(
            ("busy", run_pass(rpc, node, recipient=recipient, references=references, state=state, memory=memory))
        )
        rows.append(
            ("quiet", run_pass(rpc, node, recipient=recipient, references=references, state=state, memory=memory))
        )
        rows.append(
            (
                "quiet, recipient only",
                run_pass(rpc, node, recipient=recipient, references=[], state=state, memory=memory),
            )
        )
    return rows


def latency(args) -> None:
    """Broadcast to `processing` and finalized to `settled`, push off and on (see the module docstring)."""
    import os
    import random
    import shutil
    import statistics
    import tempfile
    import threading

    workdir = Path(tempfile.mkdtemp(prefix="sol-latency-bench-"))
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "DEBUG": "1",
            "DATA_DIR": str(workdir),
            "DATABASE_URL": args.database_url or f"sqlite:///{workdir / 'bench.sqlite3'}",
            "CACHE_URL": "locmemcache://",
            "CELERY_BROKER_URL": "memory://",
            "CELERY_TASK_ALWAYS_EAGER": "1",
            "MANUAL_RATES_USD": "SOL=150",
            "LOG_LEVEL": "WARNING",
        }
    )
    for name in ("BTC_XPUB", "LTC_XPUB", "ETH_XPUB", "XMR_ADDRESS", "SANDBOX", "SOL_WS_URL"):
        os.environ.pop(name, None)
    import django

    SLOT_SECONDS, FINALITY_DEPTH = 0.4, 32  # the sandbox's clock (devtools.solana_sandbox, which needs Django)

    ledger = SolanaLedger()
    merchant = ledger.keypair_funded(LAMPORTS_PER_SOL)
    payer = ledger.keypair_funded(10_000 * LAMPORTS_PER_SOL)
    node = SolanaRpcServer(ledger).start()
    node.clock_start(slot_seconds=SLOT_SECONDS, finality_depth=FINALITY_DEPTH)
    os.environ.update({"SOL_RECIPIENT": str(merchant.pubkey()), "SOL_RPC_URL": node.url, "SOL_CLUSTER": "localnet"})
    finalized_at: dict[str, float] = {}
    ledger.observe(
        lambda event, subject: (
            finalized_at.setdefault(subject.signature, time.monotonic()) if event == "finalized" else None
        )
    )
    try:
        django.setup()
        from decimal import Decimal

        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.core.management import call_command

        from billing import services
        from billing.chains.watchers import ChainListener, chain_scan, watcher_for
        from billing.models import Invoice, InvoiceStatus
        from billing.payable import NOTHING, payable_register

        payable_register(kind="bench", payable=NOTHING)  # what its invoices pay for: nothing
        call_command("migrate", verbosity=0)
        customer = get_user_model().objects.create_user("bench", "a long bench passphrase")
        if args.open:
            import secrets

            from solders.pubkey import Pubkey

            from bench.fillers import fillers_register

            template = services.invoice_create(
                account=customer,
                payable=("bench", 0),
                description="Benchmark",
                lines=[services.LineSpec("GPU time", Decimal(1), Decimal("30.00"), Decimal("30.00"))],
                currency="SOL",
            ).active_request
            print(f"Registering {args.open:,} open SOL invoices, each with its own reference ...", flush=True)
            fillers_register(
                customer=customer,
                count=args.open,
                currency="SOL",
                network=template.network,
                keyset=template.keyset,
                first_index=int(template.derivation_index) + 1,
                match_key=lambda _index: str(Pubkey(secrets.token_bytes(32))),
                amount_due=int(template.amount_due),
                amount_usd=template.amount_usd,
                rate_usd=template.rate_usd,
                days=2,
            )
        chain_scan(currency="SOL", force=True)  # the recipient's first listing

        def one_mode(push: bool) -> dict[str, list[float]]:
            stop = threading.Event()

            def poll() -> None:
                while not stop.wait(args.poll):
                    chain_scan(currency="SOL")

            threads = [threading.Thread(target=poll, daemon=True)]
            listener = None
            if push:
                settings.SOL_WS_URL = node.ws_url
                listener = ChainListener(watcher_for(currency="SOL"))
                listener.connect()
                threads.append(threading.Thread(target=listener.run, kwargs={"stop": stop}, daemon=True))
            for thread in threads:
                thread.start()
            sent: dict[int, tuple[str, float]] = {}
            seen: dict[int, float] = {}
            settled: dict[int, float] = {}
            try:
                for _ in range(args.payments):
                    amount = Decimal("30.00")
                    invoice = services.invoice_create(
                        account=customer,
                        payable=("bench", 0),
                        description="Benchmark",
                        lines=[services.LineSpec("GPU time", Decimal(1), amount, amount)],
                        currency="SOL",
                    )
                    request = invoice.active_request
                    moment = time.monotonic() + random.uniform(0, args.poll)  # any moment of the poll's period
                    while time.monotonic() < moment:
                        watch(sent, seen, settled)  # earlier payments settle meanwhile
                    signature = ledger.pay(
                        payer, merchant.pubkey(), int(request.amount_due), references=[request.reference]
                    )
                    sent[invoice.pk] = (signature, time.monotonic())
                    deadline = time.monotonic() + args.poll * 4 + 10
                    while invoice.pk not in seen and time.monotonic() < deadline:
                        watch(sent, seen, settled)
                deadline = time.monotonic() + FINALITY_DEPTH * SLOT_SECONDS + args.poll * 4 + 10
                while len(settled) < len(sent) and time.monotonic() < deadline:
                    watch(sent, seen, settled)
            finally:
                stop.set()
                for thread in threads:
                    thread.join(timeout=30)
                if listener is not None:
                    listener.close()
                settings.SOL_WS_URL = ""
            return {
                "processing": [seen[k] - sent[k][1] for k in seen],
                "settled": [settled[k] - finalized_at[sent[k][0]] for k in settled if sent[k][0] in finalized_at],
                "missed": [float(len(sent) - len(settled))],
            }

        def connection_vendor() -> str:
            from django.db import connection

            return connection.vendor

        def watch(sent, seen, settled) -> None:
            time.sleep(0.02)
            now = time.monotonic()
            for pk, status in Invoice.objects.filter(pk__in=list(sent)).values_list("pk", "status"):
                if status != InvoiceStatus.NEW and pk not in seen:
                    seen[pk] = now
                if status == InvoiceStatus.SETTLED and pk not in settled:
                    settled[pk] = now
                    seen.setdefault(pk, now)

        print(
            f"SOL detection latency, {args.payments} payments per row; poll every {args.poll:g} s; "
            f"a block every {SLOT_SECONDS:g} s, finalized {FINALITY_DEPTH} slots behind; "
            f"{Invoice.objects.filter(status=InvoiceStatus.NEW).count():,} open invoices ({connection_vendor()})"
        )
        header = f"{'push':<5} {'what':<28} {'median s':>9} {'p90 s':>7} {'max s':>7}"
        print(header)
        print("-" * len(header))
        for push in (False, True):
            rows = one_mode(push)
            for name, what in (("processing", "broadcast -> processing"), ("settled", "finalized -> settled")):
                values = sorted(rows[name])
                if not values:
                    print(f"{'on' if push else 'off':<5} {what:<28} {'none':>9}")
                    continue
                p90 = values[min(len(values) - 1, int(len(values) * 0.9))]
                print(
                    f"{'on' if push else 'off':<5} {what:<28} {statistics.median(values):>9.2f} {p90:>7.2f} "
                    f"{values[-1]:>7.2f}"
                )
            if rows["missed"][0]:
                print(f"      ({rows['missed'][0]:.0f} payment(s) not settled in time)")
    finally:
        node.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10_000], help="open invoices")
    parser.add_argument("--batch-size", type=int, default=100, help="calls per HTTP request (SOL_RPC_BATCH_SIZE)")
    parser.add_argument("--rps", type=float, default=50.0, help="a provider's limit in calls per second")
    parser.add_argument("--paid", type=float, default=0.01, help="share of invoices paid before the busy pass")
    parser.add_argument(
        "--modes",
        nargs="+",
        choices=("recipient", "references"),
        default=["recipient", "references"],
        help="recipient: the recipient's listing alone (the default, SOL_SCAN_REFERENCES=0); "
        "references: each open reference listed too",
    )
    parser.add_argument("--latency", action="store_true", help="measure detection latency, push off and on")
    parser.add_argument("--payments", type=int, default=20, help="--latency: payments per mode")
    parser.add_argument("--poll", type=float, default=5.0, help="--latency: the poll's period (CHAIN_SCAN_SECONDS)")
    parser.add_argument("--database-url", default="", help="--latency: default SQLite in a temporary folder")
    parser.add_argument(
        "--open", type=int, default=0, help="--latency: open SOL invoices registered first (e.g. 100000; default 0)"
    )
    args = parser.parse_args()
    if args.latency:
        latency(args)
        return
    print(f"batch size {args.batch_size}; provider limit {args.rps:g} calls/s; {args.paid:.0%} of invoices paid")
    header = f"{'invoices':>9} {'pass':<22} {'calls':>7} {'requests':>9} {'loopback s':>11} {'at limit s':>11}  calls by method"
    print(header)
    print("-" * len(header))
    runs = {"recipient": measure_recipient, "references": measure}
    for size in args.sizes:
        rows = [r for mode in args.modes for r in runs[mode](size, batch_size=args.batch_size, paid_share=args.paid)]
        for name, row in rows:
            methods = ", ".join(f"{m} {n}" for m, n in sorted(row["by_method"].items()))
            print(
                f"{size:>9} {name:<22} {row['calls']:>7} {row['requests']:>9} {row['seconds']:>11.2f} "
                f"{row['calls'] / args.rps:>11.1f}  {methods}"
            )


if __name__ == "__main__":
    main()
