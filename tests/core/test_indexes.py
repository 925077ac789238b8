"""Indexes built while the table goes on being written (core/indexes.py)."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.loader import MigrationLoader
from django.db.migrations.recorder import MigrationRecorder

from core.indexes import AddIndexConcurrently, RemoveIndexConcurrently, invalid_index_drop

pytestmark = pytest.mark.django_db(transaction=True)


def _index_state(name):
    with connection.cursor() as cursor:
        cursor.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [name])
        row = cursor.fetchone()
    return None if row is None else row[0]


def test_the_orders_index_is_built_concurrently_outside_a_transaction(capsys):
    migration = MigrationLoader(connection).get_migration("rentals", "0004_order_account_status_index")
    assert migration.atomic is False
    assert isinstance(migration.operations[0], AddIndexConcurrently)
    call_command("sqlmigrate", "rentals", "0004")
    sql = capsys.readouterr().out
    assert 'CREATE INDEX CONCURRENTLY "rentals_ord_account_8e211c_idx" ON "rentals_order"' in sql


def test_the_lapse_indexes_replace_the_two_column_ones_concurrently(capsys):
    """0008 builds (account, status, closed_at) and (client_network, status, closed_at), then drops
    the indexes they extend, each without holding off the table's writes."""
    migration = MigrationLoader(connection).get_migration("rentals", "0008_order_lapse_indexes")
    assert migration.atomic is False
    assert [type(op) for op in migration.operations] == [AddIndexConcurrently] * 2 + [RemoveIndexConcurrently] * 2
    call_command("sqlmigrate", "rentals", "0008")
    sql = capsys.readouterr().out
    for new in ("rentals_ord_account_d00b74_idx", "rentals_ord_client__c3d55c_idx"):
        assert f'CREATE INDEX CONCURRENTLY "{new}" ON "rentals_order"' in sql
        assert _index_state(new) is True
    for old in ("rentals_ord_account_8e211c_idx", "rentals_ord_client__16edf0_idx"):
        assert f'DROP INDEX CONCURRENTLY IF EXISTS "{old}"' in sql
        assert _index_state(old) is None


def test_a_failed_build_leaves_an_invalid_index_which_the_next_run_drops():
    with connection.cursor() as cursor:
        cursor.execute("CREATE TABLE index_scratch (x integer)")
        cursor.execute("INSERT INTO index_scratch VALUES (1), (1)")
    try:
        with connection.cursor() as cursor, pytest.raises(Exception, match="could not create unique index"):
            cursor.execute("CREATE UNIQUE INDEX CONCURRENTLY index_scratch_x ON index_scratch (x)")
        assert _index_state("index_scratch_x") is False  # left behind, invalid

        with connection.schema_editor(atomic=False) as editor:
            assert invalid_index_drop(editor, "index_scratch_x") is True
        assert _index_state("index_scratch_x") is None

        with connection.cursor() as cursor:
            cursor.execute("CREATE INDEX index_scratch_x ON index_scratch (x)")
        with connection.schema_editor(atomic=False) as editor:
            assert invalid_index_drop(editor, "index_scratch_x") is False  # a valid index is kept
            assert invalid_index_drop(editor, "no_such_index") is False
        assert _index_state("index_scratch_x") is True
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP TABLE index_scratch")


def test_an_index_a_killed_migrate_left_built_is_taken_as_it_is():
    """A migrate killed mid-build leaves the server to finish the index, valid, with the migration not
    recorded: the next migrate records it instead of failing on an index that already exists."""
    name = "rentals_ord_account_8e211c_idx"  # 0004's, until 0008 replaces it
    call_command("migrate", "rentals", "0003", verbosity=0)
    try:
        assert _index_state(name) is None
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE INDEX "{name}" ON rentals_order (account_id, status)')
        call_command("migrate", "rentals", "0004", verbosity=0)
        recorder = MigrationRecorder(connection)
        assert ("rentals", "0004_order_account_status_index") in recorder.applied_migrations()
        assert _index_state(name) is True
    finally:
        call_command("migrate", "rentals", verbosity=0)
    assert _index_state(name) is None and _index_state("rentals_ord_account_d00b74_idx") is True
