"""Server time of the checkout page and of the status every open page polls.

    DATABASE_URL=postgres://... .venv/bin/python bench/checkout_status.py [--runs 500]

Sets Django up against DATABASE_URL (SQLite under data/ when unset), migrates,
enables LTC with a watch-only key generated for the run and a fixed rate, issues
an invoice (and one with a partial payment and one confirming), then times
GET /pay/<token>/status and GET /pay/<token> in process (middleware, queries,
rendering; no network) and prints the median and p99 wall time, the
application's own CPU time, and the database queries per request. An open page
asks once every CHECKOUT_POLL_SECONDS (5), so requests per second divided by
0.2 is how many open pages one process serves.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
os.environ.setdefault("SECRET_KEY", "bench-only-secret-key-not-used-anywhere-else-0123456789")
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")
os.environ.setdefault("SITE_URL", "http://127.0.0.1:8000")
os.environ.setdefault("LOG_LEVEL", "WARNING")


def percentile(samples: list[float], pct: float) -> float:
    ordered = sorted(samples)
    rank = max(0, min(len(ordered) - 1, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[rank]


def counting(executed: list[str]):
    """A database execute wrapper that notes each statement."""

    def wrapper(execute, sql, params, many, context):
        executed.append(sql)
        return execute(sql, params, many, context)

    return wrapper


def ltc_watch_only_key() -> str:
    from bip_utils import Bip39MnemonicGenerator, Bip39SeedGenerator, Bip84, Bip84Coins

    seed = Bip39SeedGenerator(Bip39MnemonicGenerator().FromWordsNumber(12)).Generate()
    return Bip84.FromSeed(seed, Bip84Coins.LITECOIN).Purpose().Coin().Account(0).PublicKey().ToExtended()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args()

    os.environ.setdefault("LTC_XPUB", ltc_watch_only_key())
    os.environ.setdefault("MANUAL_RATES_USD", "LTC=90")

    import django

    django.setup()
    from decimal import Decimal

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    from billing import services
    from billing.payable import NOTHING, payable_register

    payable_register(kind="bench", payable=NOTHING)  # what its invoices pay for: nothing

    call_command("migrate", verbosity=0)
    account, _ = get_user_model().objects.get_or_create(username="bench-checkout")

    def invoice():
        return services.invoice_create(
            account=account,
            payable=("bench", 0),
            description="2x A100 SXM in DFW-1, 1 month",
            lines=[
                services.LineSpec("A100 SXM GPU, per card and month", Decimal(2), Decimal("990.00"), Decimal("1881.00"))
            ],
            currency="LTC",
            metadata={"region": "DFW-1", "gpu_name": "A100 SXM", "gpu_count": 2, "term": "monthly", "terms": 1},
        )

    fresh, partial, confirming = invoice(), invoice(), invoice()
    for inv, share, confirmations in ((partial, 2, 1), (confirming, 1, 1)):
        services.payment_record_manual(
            invoice_number=inv.number,
            txid=f"bench-{inv.number}",
            amount=int(inv.active_request.amount_due) // share,
            confirmations=confirmations,
            reason="bench",
            actor=None,
        )

    client = Client()
    cases = [
        ("status, new", f"/pay/{fresh.checkout_token}/status", {}),
        ("status, partly paid", f"/pay/{partial.checkout_token}/status", {}),
        ("status, confirming", f"/pay/{confirming.checkout_token}/status", {}),
        ("page, new, English", f"/pay/{fresh.checkout_token}", {"HTTP_ACCEPT": "text/html"}),
        (
            "page, new, Spanish",
            f"/pay/{fresh.checkout_token}",
            {"HTTP_ACCEPT": "text/html", "HTTP_ACCEPT_LANGUAGE": "es"},
        ),
    ]
    print(f"{'request':<22} {'median ms':>10} {'p99 ms':>8} {'cpu ms':>8} {'queries':>8} {'req/s':>7}")
    for name, path, headers in cases:
        for _ in range(args.warmup):
            assert client.get(path, **headers).status_code == 200
        executed: list[str] = []
        with connection.execute_wrapper(counting(executed)):
            client.get(path, **headers)
        walls, cpus = [], []
        for _ in range(args.runs):
            wall, cpu = time.perf_counter(), time.process_time()
            response = client.get(path, **headers)
            cpus.append(time.process_time() - cpu)
            walls.append(time.perf_counter() - wall)
            assert response.status_code == 200
        median = statistics.median(walls) * 1000
        print(
            f"{name:<22} {median:>10.2f} {percentile(walls, 99) * 1000:>8.2f} "
            f"{statistics.median(cpus) * 1000:>8.2f} {len(executed):>8} {1000 / median:>7.0f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
