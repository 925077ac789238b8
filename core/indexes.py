"""Indexes added to (or dropped from) tables that are written while the migration runs.

`AddIndexConcurrently` builds its index with `CREATE INDEX CONCURRENTLY` on
PostgreSQL: orders and payments go on being written while it builds (a plain
`CREATE INDEX` holds off every insert and update of the table until it is done,
seconds to minutes on a table of years). On another database (SQLite, for
`make run`) it adds a plain index. Its migration must say `atomic = False`.

A concurrent build that fails (a cancelled statement, a server restart)
leaves an invalid index of the same name behind, which PostgreSQL keeps
updating but never reads; the operation drops such a leftover first, so
running `migrate` again finishes the job. A build whose client went away (a
killed `migrate`) goes on in the server and may finish, valid, without the
migration being recorded: the next run finds the index there and only records
the migration.
"""

from __future__ import annotations

from django.contrib.postgres.operations import AddIndexConcurrently as PostgresAddIndexConcurrently
from django.contrib.postgres.operations import RemoveIndexConcurrently as PostgresRemoveIndexConcurrently
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations import AddIndex, RemoveIndex
from django.db.migrations.state import ProjectState


def _index_valid(schema_editor: BaseDatabaseSchemaEditor, name: str) -> bool | None:
    """Whether the index `name` is valid; None when there is none."""
    with schema_editor.connection.cursor() as cursor:
        # to_regclass finds the index as the migration's own statements would (search_path).
        cursor.execute(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)", [schema_editor.quote_name(name)]
        )
        row = cursor.fetchone()
    return None if row is None else row[0]


def invalid_index_drop(schema_editor: BaseDatabaseSchemaEditor, name: str) -> bool:
    """Drop the index `name` if a failed concurrent build left it invalid; whether it did."""
    if _index_valid(schema_editor, name) is not False:
        return False
    schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {schema_editor.quote_name(name)}")
    return True


class AddIndexConcurrently(PostgresAddIndexConcurrently):
    def database_forwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            AddIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)
            return
        self._ensure_not_in_transaction(schema_editor)
        invalid_index_drop(schema_editor, self.index.name)
        if schema_editor.collect_sql or not _index_valid(schema_editor, self.index.name):
            super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            AddIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
            return
        super().database_backwards(app_label, schema_editor, from_state, to_state)


class RemoveIndexConcurrently(PostgresRemoveIndexConcurrently):
    """`DROP INDEX CONCURRENTLY IF EXISTS` on PostgreSQL (the table's writes go on
    meanwhile; running it again finds nothing to drop), a plain removal elsewhere.
    Its migration must say `atomic = False`."""

    def database_forwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            RemoveIndex.database_forwards(self, app_label, schema_editor, from_state, to_state)
            return
        super().database_forwards(app_label, schema_editor, from_state, to_state)

    def database_backwards(
        self, app_label: str, schema_editor: BaseDatabaseSchemaEditor, from_state: ProjectState, to_state: ProjectState
    ) -> None:
        if schema_editor.connection.vendor != "postgresql":
            RemoveIndex.database_backwards(self, app_label, schema_editor, from_state, to_state)
            return
        super().database_backwards(app_label, schema_editor, from_state, to_state)
