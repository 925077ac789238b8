"""A chain family is added by its package alone (and the one line of
billing.chains.spec.FAMILY_PACKAGES): its currency is then paid like any
other, with its units, rate symbols, confirmations and colour, and billing
needs no migration.

The family, TOY, is the test's own (tests/chains/plugin/), copied into a
temporary folder as a package; a fresh process adds its name to
FAMILY_PACKAGES before Django starts, as the registry line would, and then:
checks that `makemigrations --check` finds nothing to write; lists the
currencies through the API; issues an invoice in TOY with its address and URI;
records a payment of it, which settles the invoice at TOY's own confirmation
count; and reads what the rate providers, the staff charts and the settings
take from the declaration."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = Path(__file__).resolve().parent / "plugin"

SCRIPT = r"""
import json
from decimal import Decimal

import billing.chains.spec as spec
spec.FAMILY_PACKAGES = (*spec.FAMILY_PACKAGES, "toyfam")  # the registry line

import django
django.setup()

from io import StringIO
from django.conf import settings
from django.core.management import call_command
from django.test import Client

out = {}
try:
    call_command("makemigrations", "--check", "--dry-run", stdout=StringIO(), stderr=StringIO())
    out["migrations_needed"] = False
except SystemExit:
    out["migrations_needed"] = True

from accounts.models import Account
from billing import services
from billing.currencies import CURRENCIES
from billing.payable import NOTHING, payable_register
from billing.rates import CoinGeckoProvider, KrakenProvider
from rentals.dashboard import CURRENCY_COLORS

out["listed"] = [c["code"] for c in Client().get("/api/v1/currencies").json()]
out["kraken"] = list(KrakenProvider.PAIRS["TOY"])
out["coingecko"] = CoinGeckoProvider.IDS["TOY"]
out["colour"] = CURRENCY_COLORS["TOY"]
out["confirmations"] = settings.CONFIRMATIONS["TOY"]

payable_register(kind="toy-test", payable=NOTHING)
account = Account.objects.create_user("toybuyer", "correct horse battery staple")
invoice = services.invoice_create(
    account=account, payable=("toy-test", 1), description="A toy",
    lines=[services.LineSpec(description="A toy", quantity=Decimal(1), unit_usd=Decimal("10.00"), amount_usd=Decimal("10.00"))],
    currency="TOY",
)
request = invoice.active_request
out["invoice"] = {"amount": request.amount_due, "address": request.address, "uri": request.payment_uri,
                  "currency": request.currency}
for confirmations in (0, 3):
    services.payment_observe(observation=services.Observation(
        currency="TOY", txid="ab" * 32, output_index=0, match_key=request.match_key,
        amount=request.amount_due, confirmations=confirmations, block_height=None if confirmations == 0 else 7))
    invoice.refresh_from_db()
    out[f"status_at_{confirmations}"] = invoice.status
print("RESULT " + json.dumps(out))
"""


@pytest.mark.django_db(transaction=True)
def test_a_chain_family_is_added_by_its_package_alone(tmp_path):
    package = tmp_path / "toyfam"
    package.mkdir()
    shutil.copy(PLUGIN / "toyfam_init.py", package / "__init__.py")
    shutil.copy(PLUGIN / "toyfam_family.py", package / "family.py")
    db = connection.settings_dict  # the test database; the test flushes it afterwards
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}{':' + db['PASSWORD'] if db['PASSWORD'] else ''}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}",
        "DJANGO_SETTINGS_MODULE": "config.settings_test",
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "TOY_SEED": "toy-seed-of-the-test",
        "MANUAL_RATES_USD": "TOY=2",
        "CONFIRMATIONS_TOY": "3",
    }
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr[-4000:]
    seen = json.loads(next(line for line in run.stdout.splitlines() if line.startswith("RESULT "))[7:])
    assert seen["migrations_needed"] is False
    assert seen["listed"] == ["TOY"]  # the only currency with its key material set here
    assert seen["kraken"] == ["TOYUSD", "XTOYZUSD"] and seen["coingecko"] == "toycoin"
    assert seen["colour"] == "#123456" and seen["confirmations"] == 3
    # 10.00 USD at 2 USD a TOY, in 6 decimals: 5 TOY.
    assert seen["invoice"]["currency"] == "TOY" and seen["invoice"]["amount"] == 5_000_000
    assert seen["invoice"]["address"].startswith("toy1")
    assert seen["invoice"]["uri"] == f"toycoin:{seen['invoice']['address']}?amount=5000000"
    assert seen["status_at_0"] == "processing" and seen["status_at_3"] == "settled"
