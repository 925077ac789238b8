"""One migrated and seeded test database per run, copied for each xdist worker.

Each pytest-xdist worker needs its own PostgreSQL test database. Built the
usual way, every worker runs all the migrations and seeds the catalog itself,
which costs the same again for each worker. Here the first worker to need a
database builds a template (`test_<name>_template`: migrations, the catalog, the
snapshot of tests/seeding.py) under a PostgreSQL advisory lock; every worker's
own database is then `CREATE DATABASE ... TEMPLATE` of it, a file copy of a
fraction of a second. The template carries the run's id (xdist's testrunuid) as
its comment, so a template left by another run is never used: it is built anew.
The controller drops the template when the run ends.
"""

from __future__ import annotations

from collections.abc import Callable

# A fixed key for pg_advisory_lock: the workers of one run take turns building and copying.
LOCK_KEY = 0x67726854  # "grhT"


def template_name(base_name: str) -> str:
    return f"test_{base_name}_template"


def _nodb_cursor():
    from django.db import connection

    return connection.creation._nodb_cursor()


def _exists(cursor, name: str) -> bool:
    cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
    return cursor.fetchone() is not None


def _comment(cursor, name: str) -> str | None:
    cursor.execute(
        "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s",
        [name],
    )
    row = cursor.fetchone()
    return row[0] if row else None


def worker_database_create(*, base_name: str, worker_name: str, run_id: str, build: Callable[[str], None]) -> None:
    """Make `worker_name` a copy of this run's template, building the template
    first (`build(name)`: create, migrate and seed the database `name`, then close
    every connection to it) when no worker of this run has built it yet. Leaves
    the default connection pointing at `worker_name`."""
    from django.conf import settings
    from django.db import connection
    from psycopg import sql

    template = template_name(base_name)
    quote = connection.ops.quote_name
    with _nodb_cursor() as cursor:
        cursor.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
        try:
            if _comment(cursor, template) != run_id:
                if _exists(cursor, template):
                    cursor.execute(f"DROP DATABASE {quote(template)}")
                build(template)
                # A literal, not a parameter: a utility statement takes no server-side parameter.
                cursor.execute(
                    sql.SQL("COMMENT ON DATABASE {} IS {}").format(sql.Identifier(template), sql.Literal(run_id))
                )
            if _exists(cursor, worker_name):
                cursor.execute(f"DROP DATABASE {quote(worker_name)}")
            cursor.execute(f"CREATE DATABASE {quote(worker_name)} TEMPLATE {quote(template)}")
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
    connection.close()
    settings.DATABASES[connection.alias]["NAME"] = worker_name
    connection.settings_dict["NAME"] = worker_name
    connection.ensure_connection()


def template_drop(*, base_name: str) -> None:
    """Drop the run's template (the controller, once every worker has finished)."""
    from django.db import connection

    with _nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(template_name(base_name))}")
