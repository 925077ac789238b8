"""Migrations that would lock a busy table or break the release still running
while they apply (docs/operations.md#zero-downtime-upgrades) fail here.

django-migration-linter reads each migration's SQL as `sqlmigrate` prints it for
PostgreSQL and flags what the running release cannot live with: a NOT NULL column
without a default the database keeps (the old code's INSERTs omit it), dropped or
renamed tables and columns, a column's type changed, a unique constraint added to
an existing table, an index built without CONCURRENTLY (it holds off writes), and
data migrations that import models directly. Warnings count as errors.

The migrations below were shipped before this check; each is listed with why it
was accepted then. A new migration is never added to this list to make the test
pass: write it the safe way (`db_default`, core/indexes.py's concurrent index, a
column added in one release and required in the next).
"""

from __future__ import annotations

import io
from contextlib import redirect_stdout

from django.db.migrations.loader import MigrationLoader
from django_migration_linter import MigrationLinter
from django_migration_linter.sql_analyser import analyse_sql_statements
from django_migration_linter.sql_analyser.postgresql import PostgresqlAnalyser

APPS = ("core", "catalog", "sizing", "accounts", "billing", "webhooks", "rentals")

# Each of these has run on every database already: what it risked (named here) is
# past, and rewriting a shipped migration would fork the history.
SHIPPED_BEFORE_THE_CHECK = {
    ("accounts", "0003_token_scopes_and_ops_permissions"): (
        "apitoken.scope NOT NULL with its default dropped: an old process creating a token during the "
        "upgrade would fail until restarted"
    ),
    ("billing", "0002_invoice_checkout_token"): (
        "checkout_token filled row by row, then NOT NULL and UNIQUE with an index built under the invoice "
        "table's lock; the old release's new invoices lacked the token"
    ),
    ("billing", "0004_payment_position_stray_transfers"): (
        "payment.position NOT NULL and the unique key rebuilt on it, under the payments table's lock"
    ),
    ("billing", "0006_paymentrequest_amount_usd"): (
        "amount_usd filled from each request's invoice, then SET NOT NULL (a scan under lock); the old "
        "release's payment requests lacked it"
    ),
    ("catalog", "0003_free_slots_and_version"): (
        "host.free_slots NOT NULL with its default dropped: hosts are added by staff in the admin only"
    ),
    ("rentals", "0005_order_client_network"): (
        "order.client_network NOT NULL with its default dropped: an old process placing an order during "
        "the upgrade would fail until restarted (db_default is how such a column is added now)"
    ),
    ("webhooks", "0003_attempt_error_category"): (
        "webhookattempt.error_category NOT NULL with its default dropped: an old worker's attempt would fail "
        "until restarted, and the sweep would retry its delivery"
    ),
}


def lint(linter: MigrationLinter, migration) -> bool:
    """True when the linter finds `migration` unsafe (its report goes to the test's output)."""
    before = linter.nb_erroneous
    with redirect_stdout(io.StringIO()) as out:
        linter.lint_migration(migration)
    if linter.nb_erroneous > before:
        print(out.getvalue())
    return linter.nb_erroneous > before


def test_no_migration_locks_or_breaks_the_running_release(django_db_setup, django_db_blocker):
    # Outside a test transaction: sqlmigrate refuses to write a concurrent index's SQL inside one.
    with django_db_blocker.unblock():
        linter = MigrationLinter(no_cache=True, all_warnings_as_errors=True, analyser_string="postgresql")
        loader = MigrationLoader(None, ignore_no_migrations=True)
        ours = sorted(key for key in loader.disk_migrations if key[0] in APPS)
        assert len(ours) >= 26
        unsafe = {key for key in ours if lint(linter, loader.disk_migrations[key])}
    new = unsafe - SHIPPED_BEFORE_THE_CHECK.keys()
    assert not new, f"unsafe migrations (see docs/operations.md#zero-downtime-upgrades): {sorted(new)}"
    assert unsafe == SHIPPED_BEFORE_THE_CHECK.keys(), "an accepted migration is safe now: take it off the list"


# What the linter catches and lets pass, on SQL as Django writes it for PostgreSQL.


def flagged(*statements: str) -> set[str]:
    errors, _ignored, warnings = analyse_sql_statements(PostgresqlAnalyser, list(statements))
    return {issue.code for issue in (*errors, *warnings)}


def test_a_required_column_the_old_release_cannot_insert_is_caught():
    assert "NOT_NULL" in flagged(
        "BEGIN;",
        'ALTER TABLE "rentals_order" ADD COLUMN "note" varchar(20) DEFAULT \'\' NOT NULL;',
        'ALTER TABLE "rentals_order" ALTER COLUMN "note" DROP DEFAULT;',
        "COMMIT;",
    )


def test_a_required_column_with_a_database_default_passes():
    # models.CharField(db_default="") : the default stays in the database, old INSERTs get it.
    assert (
        flagged("BEGIN;", 'ALTER TABLE "rentals_order" ADD COLUMN "note" varchar(20) DEFAULT \'\' NOT NULL;', "COMMIT;")
        == set()
    )


def test_an_index_built_under_lock_is_caught_and_a_concurrent_one_passes():
    assert "CREATE_INDEX" in flagged(
        "BEGIN;", 'CREATE INDEX "rentals_order_x_idx" ON "rentals_order" ("account_id", "status");', "COMMIT;"
    )
    assert (
        flagged('CREATE INDEX CONCURRENTLY "rentals_order_x_idx" ON "rentals_order" ("account_id", "status");') == set()
    )


def test_dropping_or_renaming_is_caught():
    assert "DROP_COLUMN" in flagged('ALTER TABLE "rentals_order" DROP COLUMN "note" CASCADE;')
    assert "RENAME_COLUMN" in flagged('ALTER TABLE "rentals_order" RENAME COLUMN "note" TO "remark";')
