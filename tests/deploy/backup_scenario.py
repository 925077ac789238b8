"""The writes and checks of tests/deploy/test_backup.py, each step run as its own
process against whichever PostgreSQL `DATABASE_URL` names (the one backed up,
or the one restored), the way an operator's commands would run:

    python -m tests.deploy.backup_scenario STEP STATE_FILE

with LTC pointed at a regtest node (LTC_XPUB, LTC_NETWORK, LTC_RPC_URL) and
DJANGO_SETTINGS_MODULE=config.settings_test (tasks queued on commit run in
the process). Each step reads the JSON state file, adds what it did, and
writes it back; the test asserts on it.

- `before`: the customer, order A paid more than due (settled, the surplus is
  credit), order B placed unpaid; the watcher's cursor where it stopped, and
  the database's clock after it all.
- `after` (past the restore point): order C placed; B, C and a second transfer
  to A's address paid and confirmed and seen by the watcher.
- `check` (on the restored database): what it holds, the invariants, and two
  passes of the watcher from the restored cursor.
- `issue` (after deploy/backup/after-restore.sh): one more order.
"""

from __future__ import annotations

import json
import os
import sys
from decimal import Decimal
from pathlib import Path

OVERPAY = 1_000_000  # litoshi: $0.90 at LTC=90, credited to the account


def _django() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings_test")
    django.setup()


def _node():
    """The regtest node's chain RPC and its wallet's (sending, mining)."""
    from billing.chains.utxo.rpc import BitcoinRpc

    url = os.environ["LTC_RPC_URL"]
    return BitcoinRpc(url), BitcoinRpc(url, wallet=os.environ.get("LTC_WALLET", "harness"))


def _send(address: str, amount: int) -> str:
    from devtools.litecoind import base_units_to_coins

    _chain, wallet = _node()
    return wallet.call("sendtoaddress", address, base_units_to_coins(amount))


def _mine(blocks: int) -> int:
    chain, wallet = _node()
    chain.call("generatetoaddress", blocks, wallet.call("getnewaddress", "", "bech32"))
    return int(chain.call("getblockcount"))


def _scan() -> dict:
    """One run of the periodic watcher task, as a worker runs it."""
    from billing.tasks import chain_scan

    result = chain_scan.apply(args=("LTC",)).get()
    assert result["error"] == "" and result["skipped"] == "", result
    return result


def _customer():
    from accounts.models import Account

    return Account.objects.get(username="backup-customer")


def _order(name: str) -> dict:
    """An order through the API, as a customer places it: one L4 in PDX-1 for a week, in LTC."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519
    from rest_framework.test import APIClient

    from accounts.services import ssh_key_add

    customer = _customer()
    public_key = (
        ed25519.Ed25519PrivateKey.generate()
        .public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    key = ssh_key_add(account=customer, public_key=public_key, name=f"key {name}")
    api = APIClient()
    api.force_authenticate(customer)
    body = {
        "region": "PDX-1",
        "gpu": "l4",
        "gpu_count": 1,
        "term": "weekly",
        "terms": 1,
        "template": "ubuntu-24.04",
        "addons": [],
        "ssh_keys": [key.pk],
        "pay_currency": "LTC",
    }
    created = api.post("/api/v1/orders", body, format="json")
    assert created.status_code == 201, created.json()
    order = created.json()
    from billing.models import Invoice

    invoice = Invoice.objects.get(pk=order["invoice"]["id"])
    request = invoice.active_request
    assert request is not None
    return {
        "order": order["id"],
        "invoice": invoice.pk,
        "number": invoice.number,
        "address": request.address,
        "index": request.derivation_index,
        "amount": int(request.amount_due),
    }


def _cursor() -> int:
    from billing.models import ChainState

    height = ChainState.objects.get(chain="litecoin").height
    assert height is not None
    return height


def step_before(state: dict) -> None:
    from accounts.models import Account
    from billing.chains.utxo.watcher import bitcoin_cursor_set

    Account.objects.create_user("backup-customer", "a long enough passphrase")
    chain, _wallet = _node()
    bitcoin_cursor_set(currency="LTC", height=int(chain.call("getblockcount")))
    a = _order("A")
    a["txid"] = _send(a["address"], a["amount"] + OVERPAY)
    _mine(6)
    state["before_scan"] = _scan()
    b = _order("B")
    state.update(a=a, b=b, cursor_before=_cursor(), facts_before=_facts(), time_before=_database_time())


def _database_time() -> str:
    """The server's clock now, after every write so far committed: a recovery target time."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT to_char(clock_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') || '+00'")
        return cursor.fetchone()[0]


def step_after(state: dict) -> None:
    c = _order("C")
    b, a = state["b"], state["a"]
    b["txid"] = _send(b["address"], b["amount"])
    c["txid"] = _send(c["address"], c["amount"])
    a["late_txid"] = _send(a["address"], OVERPAY)
    state["tip_after"] = _mine(6)
    state["after_scan"] = _scan()
    state.update(c=c, facts_after=_facts())


def step_check(state: dict) -> None:
    state["facts_restored"] = _facts()
    state["cursor_restored"] = _cursor()
    state["scans"] = [_scan(), _scan()]
    state["facts_rescanned"] = _facts()


def step_issue(state: dict) -> None:
    state["d"] = _order("D")
    state["facts_issued"] = _facts()


def _facts() -> dict:
    """What the database holds, and its invariants, read in one transaction."""
    from django.db import transaction
    from django.db.models import Count, Max, Sum

    from billing.models import (
        CreditBalance,
        CreditEntry,
        DerivationCounter,
        Invoice,
        InvoiceCounter,
        Payment,
        PaymentRequest,
    )
    from rentals.models import Order

    with transaction.atomic():
        numbers: dict[str, list[int]] = {}
        for number in Invoice.objects.values_list("number", flat=True):
            series, sequence = number.rsplit("-", 1)
            numbers.setdefault(series, []).append(int(sequence))
        counters = dict(InvoiceCounter.objects.values_list("series", "last"))
        issued = dict(
            PaymentRequest.objects.values("keyset").annotate(top=Max("derivation_index")).values_list("keyset", "top")
        )
        next_index = dict(DerivationCounter.objects.values_list("keyset", "next_index"))
        ledger = {}
        for balance in CreditBalance.objects.all():
            entries = CreditEntry.objects.filter(account_id=balance.account_id)
            last = entries.order_by("-created_at", "-id").first()
            ledger[str(balance.account_id)] = {
                "balance": str(balance.balance_usd),
                "sum": str(entries.aggregate(s=Sum("amount_usd"))["s"] or Decimal(0)),
                "last_balance_after": str(last.balance_after_usd) if last else "0.00",
            }
        credits = sorted(
            [kind, payment or 0, invoice or 0, str(amount)]
            for kind, payment, invoice, amount in CreditEntry.objects.values_list(
                "kind", "payment__txid", "invoice_id", "amount_usd"
            )
        )
        payments = sorted(
            [txid, invoice, status, int(amount)]
            for txid, invoice, status, amount in Payment.objects.values_list("txid", "invoice_id", "status", "amount")
        )
        duplicates = list(
            Payment.objects.values("chain", "txid", "position")
            .annotate(n=Count("id"))
            .filter(n__gt=1)
            .values_list("txid")
        )
        return {
            "orders": dict(Order.objects.order_by("id").values_list("id", "status")),
            "invoices": dict(Invoice.objects.order_by("id").values_list("id", "status")),
            "numbers": {series: sorted(values) for series, values in numbers.items()},
            "counters": counters,
            "issued_top_index": issued,
            "next_index": next_index,
            "ledger": ledger,
            "credits": credits,
            "payments": payments,
            "duplicate_payments": duplicates,
            "orders_paid": Order.objects.filter(status="paid").count(),
        }


STEPS = {"before": step_before, "after": step_after, "check": step_check, "issue": step_issue}


def main(argv: list[str]) -> None:
    step, path = argv[1], Path(argv[2])
    _django()
    state = json.loads(path.read_text()) if path.exists() else {}
    STEPS[step](state)
    path.write_text(json.dumps(state, indent=1, sort_keys=True, default=str))


if __name__ == "__main__":
    main(sys.argv)
