"""What the unpaid cap's check costs an account with a long history of orders.

    .venv/bin/python bench/unpaid_check.py                      # 50,000 old orders, 200 checks
    .venv/bin/python bench/unpaid_check.py --history 200000

Every order checks what its account holds unpaid under the account's lock
(rentals/services/unpaid.py), so the check's cost is paid by each order and by
every other order of the account waiting on that lock. It makes a throwaway
database as bench/load.py does, places one order for one account, copies it
--history times as expired orders of that account (what years of orders leave
behind), closed one every --spacing minutes back from now, so that some fall
inside the lapse window (UNPAID_LAPSE_WINDOW_HOURS; fewer than
UNPAID_LAPSES_MAX at the default spacing) and the check counts them, analyzes
the table, and prints the milliseconds each check takes (the median of
--checks calls, after 20 unmeasured ones): the account's caps as its page
reads them, and the order's own check (the account's lock, the address's, the
caps of both, the card's stock, the lapses), in a transaction rolled back
each time. The database is dropped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import load  # bench/load.py: the same set-up as the load run


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", type=int, default=50_000, help="expired orders the account has")
    parser.add_argument("--checks", type=int, default=200)
    parser.add_argument("--spacing", type=int, default=7, help="minutes between two expired orders' closing")


def measure(bench: load.Bench, args: argparse.Namespace) -> None:
    from django.conf import settings
    from django.db import connection, transaction
    from django.utils import timezone

    from accounts.models import Account
    from catalog.models import GpuModel, Region
    from rentals.models import Order, OrderStatus
    from rentals.services.orders import OrderSpec, order_create
    from rentals.services.unpaid import unpaid_limit_check, unpaid_limits

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
        client_address="198.51.100.1",  # the copies share its address: the address's counts read them too
    )
    load.say(f"copying the order {args.history:,} times as expired orders of the same account")
    quote = connection.ops.quote_name
    columns = [f.column for f in Order._meta.concrete_fields if f.column != "id"]
    picked = {
        "status": "%s",
        "host_id": "NULL",
        "invoice_id": "NULL",
        "closed_at": "now() - g * make_interval(mins => %s)",
    }
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {quote(Order._meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
            f"SELECT {', '.join(picked.get(c, quote(c)) for c in columns)} "
            f"FROM {quote(Order._meta.db_table)}, generate_series(1, %s) g WHERE id = %s",
            [OrderStatus.EXPIRED, args.spacing, args.history, order.pk],
        )
        cursor.execute(f"ANALYZE {quote(Order._meta.db_table)}")
    card_region, card = Region.objects.get(code=region), GpuModel.objects.get(slug=gpu)

    def page() -> dict:
        return unpaid_limits(account=account)

    def order_check(lapses: bool = True) -> None:
        with transaction.atomic():
            unpaid_limit_check(
                account=account,
                gpu_count=1,
                network=order.client_network,
                region=card_region,
                gpu=card,
                lapses=lapses,
            )
            transaction.set_rollback(True)

    def median_ms(check) -> float:
        for _ in range(20):
            check()
        timings = []
        for _ in range(args.checks):
            started = time.perf_counter()
            check()
            timings.append((time.perf_counter() - started) * 1000)
        return statistics.median(timings)

    window = Order.objects.filter(
        account=account, closed_at__gte=timezone.now() - timedelta(hours=settings.UNPAID_LAPSE_WINDOW_HOURS)
    ).count()
    print(
        f"an account with {args.history:,} expired orders ({window} closed in the lapse window) "
        f"and {page()['unpaid_orders']} unpaid, median of {args.checks}: "
        f"its caps {median_ms(page):.2f} ms, an order's check {median_ms(order_check):.2f} ms "
        f"({median_ms(lambda: order_check(lapses=False)):.2f} ms without counting the lapses)"
    )


if __name__ == "__main__":
    sys.exit(load.run_prepared(__doc__, arguments, measure))
