"""What the unpaid cap's check costs an account with a long history of orders.

    .venv/bin/python bench/unpaid_check.py                      # 50,000 old orders, 200 checks
    .venv/bin/python bench/unpaid_check.py --history 200000

Every order checks what its account holds unpaid under the account's lock
(rentals/services/unpaid.py), so the check's cost is paid by each order and by
every other order of the account waiting on that lock. It makes a throwaway
database as bench/load.py does, places one order for one account, copies it
--history times as expired orders of that account (what years of orders leave
behind), analyzes the table, and prints the milliseconds one check takes (the
median of --checks calls, after 20 unmeasured ones). The database is dropped at
the end.
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
    parser.add_argument("--history", type=int, default=50_000, help="expired orders the account has")
    parser.add_argument("--checks", type=int, default=200)


def measure(bench: load.Bench, args: argparse.Namespace) -> None:
    from django.db import connection

    from accounts.models import Account
    from rentals.models import Order, OrderStatus
    from rentals.services.orders import OrderSpec, order_create
    from rentals.services.unpaid import unpaid_limits

    account = Account.objects.get(username="bench0")
    region, gpu = bench.combos[0]
    order = order_create(
        account=account,
        spec=OrderSpec(
            region=region,
            gpu=gpu,
            gpu_count=1,
            term="weekly",
            terms=1,
            template="ubuntu-24.04",
            pay_currency="LTC",
            ssh_keys=(bench.keys[0],),
            addons=(),
            workload=None,
            workload_input=None,
        ),
    )
    load.say(f"copying the order {args.history:,} times as expired orders of the same account")
    quote = connection.ops.quote_name
    columns = [f.column for f in Order._meta.concrete_fields if f.column != "id"]
    picked = {"status": "%s", "host_id": "NULL", "invoice_id": "NULL"}
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(Order._meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
            f"SELECT {', '.join(picked.get(c, quote(c)) for c in columns)} "
            f"FROM {quote(Order._meta.db_table)}, generate_series(1, %s) WHERE id = %s",
            [OrderStatus.EXPIRED, args.history, order.pk],
        )
        cursor.execute(f"ANALYZE {quote(Order._meta.db_table)}")
    for _ in range(20):
        limits = unpaid_limits(account=account)
    timings = []
    for _ in range(args.checks):
        started = time.perf_counter()
        limits = unpaid_limits(account=account)
        timings.append((time.perf_counter() - started) * 1000)
    print(
        f"unpaid check, an account with {args.history:,} expired orders and {limits['unpaid_orders']} unpaid: "
        f"{statistics.median(timings):.2f} ms (median of {args.checks})"
    )


if __name__ == "__main__":
    sys.exit(load.run_prepared(__doc__, arguments, measure))
