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


@pytest.mark.parametrize("subject", ["order:12", "rental:5:auto", "rental:5:usage", "sandbox:demo"])
def test_the_service_reads_old_subjects_as_the_migration_does(subject):
    from billing.services.invoices import subject_parse

    assert subject_parse(subject) == migration.subject_parse(subject)


@pytest.mark.parametrize(
    ("kind", "written"), [("order", "order:12"), ("renewal", "rental:12:renewal"), ("usage", "rental:12:usage")]
)
def test_the_subject_string_is_the_one_the_release_before_parses(kind, written):
    """That release reads "order:" as an order's and "rental:" as a rental's (its renewal
    re-quote check keys on the prefix), and reads nothing after the id."""
    from billing.payable import PayableRef
    from billing.services.invoices import legacy_subject, subject_parse

    assert legacy_subject(PayableRef(kind, 12)) == written
    assert subject_parse(written) == (kind, 12)


@pytest.mark.django_db
def test_invoices_the_release_before_wrote_after_the_migration_are_filled(customer):
    from decimal import Decimal

    from django.utils import timezone

    from billing.services import invoice_subjects_fill

    now = timezone.now()
    for n, subject in enumerate(("order:7", "rental:3:manual"), start=1):
        Invoice.objects.create(
            number=f"OLD-{n}",
            account=customer,
            subject=subject,
            subject_kind="",
            description="old",
            total_usd=Decimal("10.00"),
            created_at=now,
            expires_at=now,
            monitoring_until=now,
        )
    assert invoice_subjects_fill(batch=1) == 2
    rows = set(Invoice.objects.values_list("subject_kind", "subject_id"))
    assert rows == {("order", 7), ("renewal", 3)}
    assert invoice_subjects_fill() == 0  # nothing left: safe to run again
