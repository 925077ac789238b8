"""The instructions the web side executes per order, in one process (Valgrind's callgrind).

    .venv/bin/python bench/order_instructions.py               # 40 orders, about a minute
    .venv/bin/python bench/order_instructions.py --orders 100

bench/order_cpu.py's CPU time per order moves with what else a shared machine
runs (by a fifth between two runs of one version on the 2-core machine); the
count of instructions a process executes for the same orders moves by about
half a percent. So this is the figure to compare two versions of the order
path by on a busy machine: run it in a checkout of each and compare.

It re-runs itself under `valgrind --tool=callgrind` (Debian package
`valgrind`) with the counting off, makes the throwaway database as
bench/load.py does (migrations run in their own processes, uncounted), places
30 orders to warm up, then counts the instructions of --orders more placed by
POST /api/v1/orders through Django's test client (the whole middleware,
authentication, DRF and database-client path; not the database server's
work). Python runs some 50 times slower under callgrind: the count is the
figure, not the time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import load  # bench/load.py: the same set-up as the load run

UNDER = "GRH_ORDER_INSTRUCTIONS_OUT"  # set when this process runs under callgrind: where it writes


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--orders", type=int, default=40, help="orders counted (after 30 uncounted)")


def measure(bench: load.Bench, args: argparse.Namespace) -> None:
    place = bench.order_placer()
    place(30)  # warm: prepared statements, caches, first imports
    bench.stock_reset()
    pid = str(os.getpid())

    def control(*flags: str) -> None:
        subprocess.run(["callgrind_control", *flags, pid], check=True, capture_output=True)

    control("--zero")
    control("--instr=on")
    place(args.orders)
    control("--dump")
    control("--instr=off")
    dumps = sorted(Path(os.environ[UNDER]).glob("callgrind.*"), key=lambda p: p.stat().st_mtime)
    total = None
    with dumps[-1].open() as dump:
        for line in dump:
            if line.startswith(("summary:", "totals:")):
                total = int(line.split()[1])
    if total is None:
        raise SystemExit(f"no total in {dumps[-1]}")
    print(f"web instructions per order, one process, {args.orders} orders: {total / args.orders / 1e6:.2f} million")


def main() -> int:
    if UNDER in os.environ:
        return load.run_prepared(__doc__, arguments, measure)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        print("valgrind is missing: apt-get install valgrind (Debian package)", file=sys.stderr)
        return 2
    out = tempfile.mkdtemp(prefix="grh-callgrind-")
    try:
        command = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}/callgrind.%p",
            sys.executable,
            *sys.argv,
        ]
        done = subprocess.run(command, env=os.environ | {UNDER: out}, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            sys.stderr.write(done.stderr[-3000:])
        return done.returncode
    finally:
        shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
