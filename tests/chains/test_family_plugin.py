"""A chain family is added by its package alone (and the one line of
billing.chains.spec.FAMILY_PACKAGES): its currency is then paid like any
other, with its units, rate symbols, confirmations and colour, its own key
parsing, payment URI and sandbox, and billing needs no migration.

The family, TOY, is the test's own (tests/chains/plugin/), copied into a
temporary folder as a package (`__init__`, `family`, `keys`, `uri`,
`sandbox`); a fresh process adds its name to FAMILY_PACKAGES before Django
starts, as the registry line would, and then: checks that `makemigrations
--check` finds nothing to write; lists the currencies through the API; has
the start-up check refuse a bad TOY_SEED through the family's own key
parsing; issues an invoice in TOY with the address its keys derive and the
URI its scheme writes; pays it with `manage.py sandbox_pay`, which finds the
family's sandbox, first unconfirmed then with --confirm, settling it at TOY's
own confirmation count; and reads what the rate providers, the staff charts,
the settings and `make run`'s sandboxes take from the declaration. Nothing
outside its package names it."""

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

from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings
from billing.chains import config
from devtools.sandboxes import sandbox_kinds

out["family_module"] = type(config.family_of("TOY")).__module__
out["sandboxes"] = [kind.code for kind in sandbox_kinds()]
out["refused"] = {}
for seed in ("short", "abandon " * 11 + "about"):
    with override_settings(TOY_SEED=seed):
        try:
            config.chain_config_validate()
        except ImproperlyConfigured as exc:
            out["refused"][seed] = str(exc)

payable_register(kind="toy-test", payable=NOTHING)
account = Account.objects.create_user("toybuyer", "correct horse battery staple")
invoice = services.invoice_create(
    account=account, payable=("toy-test", 1), description="A toy",
    lines=[services.LineSpec(description="A toy", quantity=Decimal(1), unit_usd=Decimal("10.00"), amount_usd=Decimal("10.00"))],
    currency="TOY",
)
request = invoice.active_request
out["invoice"] = {"amount": request.amount_due, "address": request.address, "uri": request.payment_uri,
                  "currency": request.currency, "number": invoice.number}
from toyfam.keys import toy_account_parse
out["derived"] = toy_account_parse(settings.TOY_SEED).address(request.derivation_index)
for confirmations, flags in ((0, []), (3, ["--confirm"])):
    paid = StringIO()
    call_command("sandbox_pay", invoice.number, *flags, stdout=paid)
    out[f"paid_at_{confirmations}"] = paid.getvalue()
    invoice.refresh_from_db()
    out[f"status_at_{confirmations}"] = invoice.status
print("RESULT " + json.dumps(out))
"""


@pytest.mark.django_db(transaction=True)
def test_a_chain_family_is_added_by_its_package_alone(tmp_path):
    package = tmp_path / "toyfam"
    package.mkdir()
    shutil.copy(PLUGIN / "toyfam_init.py", package / "__init__.py")
    for name in ("family", "keys", "uri", "sandbox"):
        shutil.copy(PLUGIN / f"toyfam_{name}.py", package / f"{name}.py")
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
    # The family's own modules, reached through the registry: its keys derive the address, its scheme
    # writes the URI (amount in whole coins, free text percent-encoded, with billing.chains.uris).
    assert seen["family_module"] == "toyfam.family"
    address = seen["invoice"]["address"]
    assert address.startswith("toy1") and address == seen["derived"]
    assert seen["invoice"]["uri"] == f"toycoin:{address}?amount=5&message=Invoice%20{seen['invoice']['number']}"
    # The start-up check runs the family's key parsing (and the shared refusal of secrets) on TOY_SEED.
    assert "TOY_SEED is too short (8 characters at least)." in seen["refused"]["short"]
    assert "TOY_SEED holds a seed phrase (12 words), which can spend" in seen["refused"]["abandon " * 11 + "about"]
    # sandbox_pay finds the invoice's family's sandbox; make run lists it after the others.
    assert seen["sandboxes"] == ["LTC", "ETH", "XMR", "SOL", "TOY"]
    assert f"Paid 5.000000 TOY (5000000 toy units) to {address}" in seen["paid_at_0"]
    assert seen["status_at_0"] == "processing" and seen["status_at_3"] == "settled"
    # Nothing outside the package names it: the registry line is the script's.
    named = [
        str(path.relative_to(ROOT))
        for folder in ("billing", "devtools", "config", "core", "rentals", "accounts", "webhooks")
        for path in (ROOT / folder).rglob("*.py")
        if "toyfam" in path.read_text() or '"TOY"' in path.read_text()
    ]
    assert named == []
