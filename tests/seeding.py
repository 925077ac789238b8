"""The published catalog in the test databases: seeded once per run (per xdist
worker), and put back quickly after a transactional test has flushed it.

`seed_snapshot_take()` keeps a copy of the seeded tables beside them, in the
schema test_seed_snapshot of the worker's test database; `seed_restore()`
copies them back, one statement per table, instead of a whole `seed_catalog`
(845 hosts, 6,300 slots, the sizing architectures).
"""

from __future__ import annotations

# The apps whose tables `seed_catalog` fills: the catalog and, through its signal, the sizing architectures.
SEEDED_APPS = ("catalog", "sizing")
# Where a copy of those tables is kept, in each worker's test database, for putting them back quickly.
SEED_SNAPSHOT_SCHEMA = "test_seed_snapshot"


def seeded_models(*labels: str) -> list:
    from django.apps import apps

    return [
        model
        for label in labels or SEEDED_APPS
        for model in apps.get_app_config(label).get_models(include_auto_created=True)
        if model._meta.managed and not model._meta.proxy
    ]


def _quoted(model) -> str:
    from django.db import connection

    return connection.ops.quote_name(model._meta.db_table)


def seed_snapshot_take() -> None:
    """Copy the seeded tables (call it right after `seed_catalog`)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(f"DROP SCHEMA IF EXISTS {SEED_SNAPSHOT_SCHEMA} CASCADE")
        cursor.execute(f"CREATE SCHEMA {SEED_SNAPSHOT_SCHEMA}")
        for model in seeded_models():
            cursor.execute(f"CREATE TABLE {SEED_SNAPSHOT_SCHEMA}.{_quoted(model)} AS TABLE {_quoted(model)}")


def seed_restore() -> None:
    """Put the seeded tables back as the session seeded them, an app at a time
    where all of its tables are empty (as a flush leaves them). Django's foreign
    keys on PostgreSQL are checked at commit, so the order of the tables does not
    matter inside one transaction. An app with some rows already (a test seeded
    part of it) is completed by `seed_catalog` instead, which adds what is missing."""
    from django.core.management import call_command
    from django.core.management.color import no_style
    from django.db import connection, transaction

    from catalog.models import CatalogVersion
    from catalog.services import hosts_free_recount

    partial = False
    with transaction.atomic(), connection.cursor() as cursor:
        for label in SEEDED_APPS:
            models = seeded_models(label)
            if any(model._base_manager.exists() for model in models):
                partial = True
                continue
            for model in models:
                cursor.execute(f"INSERT INTO {_quoted(model)} SELECT * FROM {SEED_SNAPSHOT_SCHEMA}.{_quoted(model)}")
            for statement in connection.ops.sequence_reset_sql(no_style(), models):
                cursor.execute(statement)
        # The slot triggers counted the copied slots onto the copied hosts' counts a second time.
        hosts_free_recount()
        if not partial:
            # The copies moved the catalog version (triggers); the data is the snapshot's again, so is its version.
            version = _quoted(CatalogVersion)
            cursor.execute(f"DELETE FROM {version}")
            cursor.execute(f"INSERT INTO {version} SELECT * FROM {SEED_SNAPSHOT_SCHEMA}.{version}")
    if partial:
        call_command("seed_catalog", verbosity=0)
