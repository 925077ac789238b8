"""The web side's CPU time per order, in one process.

    .venv/bin/python bench/order_cpu.py                       # 5 rounds of 200 orders
    .venv/bin/python bench/order_cpu.py --orders 300 --rounds 7

A load run's order rate moves with a shared machine's speed from one minute
to the next; the CPU time one process spends per order moves much less, so
this is the figure to compare two versions by: run it in a checkout of each,
one after the other, and compare the medians.

It makes a throwaway database as bench/load.py does (the catalog with every
slot free, 8 accounts with a token and an SSH key, BTC, LTC and ETH with
watch-only keys made for the run), then places orders by POST /api/v1/orders
through Django's test client: the whole middleware, authentication, DRF and
database path of a request, without a server or a network. Orders rotate the
accounts, every card with stock and the three currencies, as the load run's
do; the stock is freed before each round. It prints the process's CPU time
per order in each round and their median, and drops the database at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import load  # bench/load.py: the same set-up as the load run


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--orders", type=int, default=200, help="orders per round")
    parser.add_argument("--rounds", type=int, default=5)


def measure(bench: load.Bench, args: argparse.Namespace) -> None:
    place_orders = bench.order_placer()

    def place(n: int) -> float:
        started = time.process_time()
        place_orders(n)
        return (time.process_time() - started) / n * 1000

    place(50)  # warm: prepared statements, caches, first imports
    rounds = []
    for k in range(args.rounds):
        bench.stock_reset()
        rounds.append(place(args.orders))
        load.say(f"round {k + 1}/{args.rounds}: {rounds[-1]:.2f} ms of CPU per order")
    print(
        f"web CPU per order, one process, {args.orders} orders a round: median {statistics.median(rounds):.2f} ms "
        f"(rounds: {', '.join(f'{r:.2f}' for r in rounds)})"
    )


if __name__ == "__main__":
    sys.exit(load.run_prepared(__doc__, arguments, measure))
