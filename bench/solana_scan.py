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
    args = parser.parse_args()
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
