"""billing/migrations/0009_payable.py: the old subject strings become
(subject_kind, subject_id)."""

from __future__ import annotations

import importlib

import pytest

from billing.models import Invoice

migration = importlib.import_module("billing.migrations.0009_payable")


@pytest.mark.parametrize(
    ("subject", "parsed"),
    [
        ("order:12", ("order", 12)),
        ("rental:5:auto", ("renewal", 5)),
        ("rental:5:manual", ("renewal", 5)),
        ("rental:5:usage", ("usage", 5)),
        ("test:1", ("test", 1)),
        ("sandbox:demo", ("sandbox", 0)),
        ("bench", ("bench", 0)),
    ],
)
def test_each_old_subject_is_read(subject, parsed):
    assert migration.subject_parse(subject) == parsed


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_the_migration_moves_existing_invoices():
    from django.db import connection
    from django.db.migrations.executor import MigrationExecutor

    before, after = [("billing", "0008_utxo_seen")], [("billing", "0009_payable")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before[0]).apps
        account = old.get_model("accounts", "Account").objects.create(username="probe", password="x")
        invoices = old.get_model("billing", "Invoice").objects
        for n, subject in enumerate(("order:12", "rental:5:auto", "rental:5:usage", "sandbox:demo"), start=1):
            invoices.create(
                number=f"OLD-{n}",
                account_id=account.pk,
                subject=subject,
                description="old",
                total_usd="10.00",
                created_at="2026-12-01T00:00:00Z",
                expires_at="2026-12-01T00:30:00Z",
                monitoring_until="2026-12-02T00:30:00Z",
            )
        executor = MigrationExecutor(connection)
        executor.migrate(after)
    finally:
        MigrationExecutor(connection).migrate(executor.loader.graph.leaf_nodes())
    rows = list(Invoice.objects.order_by("number").values_list("number", "subject_kind", "subject_id", "subject"))
    assert rows == [
        ("OLD-1", "order", 12, "order:12"),
        ("OLD-2", "renewal", 5, "rental:5:auto"),
        ("OLD-3", "usage", 5, "rental:5:usage"),
        ("OLD-4", "sandbox", 0, "sandbox:demo"),
    ]
