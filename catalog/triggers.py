"""Database triggers that keep two derived figures current in the writing
transaction, whoever writes (a service, the admin, a bulk update, raw SQL):

- `catalog_host.free_slots`: the host's free slots, moved by every insert,
  update or delete of `catalog_slot` in the same statement. On PostgreSQL one
  statement-level trigger per event adds up the change per host from the
  transition tables (a reservation of 8 slots is one host update, not 8); the
  host row it updates is the one a reservation already holds locked.
- `catalog_catalogversion.version`: a new value after any write to a table the
  catalog, pricing or sizing answers are built from, so caches and ETags keyed on
  it are never stale. The host trigger leaves out `free_slots` (stock moves on
  every order; the catalog does not).

On PostgreSQL both also send a notification, delivered at commit (once per
transaction and channel): `catalog_changed` with the version, `stock_changed`
when free slots moved. Web workers listen for them (catalog/feed.py) instead of
asking for the version on every request.

Installed by migrations (catalog 0003, sizing 0003) for PostgreSQL and SQLite.
"""

from __future__ import annotations

VERSION_TABLE = "catalog_catalogversion"
VERSION_SEQUENCE = "catalog_catalogversion_seq"
# The notification channels (catalog/feed.py listens on them).
CATALOG_CHANNEL = "catalog_changed"
STOCK_CHANNEL = "stock_changed"
# Host columns whose change changes the catalog (not free_slots).
HOST_CATALOG_COLUMNS = ("name", "region_id", "gpu_id", "slot_count", "is_active")
CATALOG_TABLES = (
    "catalog_gpumodel",
    "catalog_region",
    "catalog_multigpudiscount",
    "catalog_termdiscount",
    "catalog_addon",
    "catalog_template",
    "catalog_template_gpus",
)

# --- PostgreSQL ---------------------------------------------------------------

_PG_FREE_DELTA = """
CREATE OR REPLACE FUNCTION catalog_slot_free_{name}() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE catalog_host h SET free_slots = h.free_slots + d.delta
    FROM (
        SELECT host_id, sum(delta) AS delta FROM ({rows}) AS x GROUP BY host_id HAVING sum(delta) <> 0
    ) AS d
    WHERE h.id = d.host_id;
    IF FOUND THEN
        PERFORM pg_notify('{channel}', '');
    END IF;
    RETURN NULL;
END $$;
"""
_PG_ROWS = {
    "ins": "SELECT host_id, 1 AS delta FROM new_rows WHERE status = 'free'",
    "del": "SELECT host_id, -1 AS delta FROM old_rows WHERE status = 'free'",
    "upd": (
        "SELECT host_id, -1 AS delta FROM old_rows WHERE status = 'free' "
        "UNION ALL SELECT host_id, 1 AS delta FROM new_rows WHERE status = 'free'"
    ),
}
_PG_REFERENCING = {
    "ins": ("INSERT", "REFERENCING NEW TABLE AS new_rows"),
    "del": ("DELETE", "REFERENCING OLD TABLE AS old_rows"),
    "upd": ("UPDATE", "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows"),
}


def _pg_free_slots() -> list[str]:
    out = []
    for name, rows in _PG_ROWS.items():
        event, referencing = _PG_REFERENCING[name]
        out.append(_PG_FREE_DELTA.format(name=name, rows=rows, channel=STOCK_CHANNEL))
        out.append(
            f"CREATE TRIGGER catalog_slot_free_{name} AFTER {event} ON catalog_slot {referencing} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION catalog_slot_free_{name}()"
        )
    return out


def _pg_version_function() -> list[str]:
    return [
        f"CREATE SEQUENCE IF NOT EXISTS {VERSION_SEQUENCE}",
        f"""
CREATE OR REPLACE FUNCTION catalog_version_bump() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE {VERSION_TABLE} SET version = nextval('{VERSION_SEQUENCE}'), changed_at = now() WHERE id = 1;
    PERFORM pg_notify('{CATALOG_CHANNEL}', '');
    RETURN NULL;
END $$;
""",
    ]


def _pg_version_trigger(table: str, columns: tuple[str, ...] = ()) -> list[str]:
    if not columns:
        return [
            f"CREATE TRIGGER {table}_version AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION catalog_version_bump()"
        ]
    return [
        f"CREATE TRIGGER {table}_version AFTER INSERT OR DELETE OR TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION catalog_version_bump()",
        f"CREATE TRIGGER {table}_version_update AFTER UPDATE OF {', '.join(columns)} ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION catalog_version_bump()",
    ]


# --- SQLite (the embedded default of `make run`) -------------------------------------

_SQLITE_BUMP = (
    f"UPDATE {VERSION_TABLE} SET version = abs(random() % 9000000000000000000), "
    "changed_at = strftime('%Y-%m-%d %H:%M:%f', 'now') WHERE id = 1;"
)


def _sqlite_free_slots() -> list[str]:
    return [
        "CREATE TRIGGER catalog_slot_free_ins AFTER INSERT ON catalog_slot WHEN NEW.status = 'free' BEGIN "
        "UPDATE catalog_host SET free_slots = free_slots + 1 WHERE id = NEW.host_id; END",
        "CREATE TRIGGER catalog_slot_free_del AFTER DELETE ON catalog_slot WHEN OLD.status = 'free' BEGIN "
        "UPDATE catalog_host SET free_slots = free_slots - 1 WHERE id = OLD.host_id; END",
        "CREATE TRIGGER catalog_slot_free_upd AFTER UPDATE OF status, host_id ON catalog_slot "
        "WHEN (OLD.status = 'free') <> (NEW.status = 'free') OR OLD.host_id <> NEW.host_id BEGIN "
        "UPDATE catalog_host SET free_slots = free_slots - (OLD.status = 'free') WHERE id = OLD.host_id; "
        "UPDATE catalog_host SET free_slots = free_slots + (NEW.status = 'free') WHERE id = NEW.host_id; END",
    ]


def _sqlite_version_trigger(table: str, columns: tuple[str, ...] = ()) -> list[str]:
    update = f"UPDATE OF {', '.join(columns)}" if columns else "UPDATE"
    return [
        f"CREATE TRIGGER {table}_version_{event.split()[0].lower()} AFTER {event} ON {table} BEGIN {_SQLITE_BUMP} END"
        for event in ("INSERT", "DELETE", update)
    ]


# --- What the migrations run ---------------------------------------------------------


def catalog_triggers_sql(vendor: str) -> list[str]:
    """The free-slot triggers and the catalog tables' version triggers."""
    if vendor == "postgresql":
        out = _pg_free_slots() + _pg_version_function()
        for table in CATALOG_TABLES:
            out += _pg_version_trigger(table)
        return out + _pg_version_trigger("catalog_host", HOST_CATALOG_COLUMNS)
    if vendor == "sqlite":
        out = _sqlite_free_slots()
        for table in CATALOG_TABLES:
            out += _sqlite_version_trigger(table)
        return out + _sqlite_version_trigger("catalog_host", HOST_CATALOG_COLUMNS)
    raise NotImplementedError(f"No catalog triggers for {vendor}: PostgreSQL and SQLite are supported.")


def version_trigger_sql(vendor: str, table: str) -> list[str]:
    """Version triggers for a table of another app the answers depend on (sizing's architectures)."""
    if vendor == "postgresql":
        return _pg_version_trigger(table)
    if vendor == "sqlite":
        return _sqlite_version_trigger(table)
    raise NotImplementedError(f"No catalog triggers for {vendor}: PostgreSQL and SQLite are supported.")


def notify_functions_sql(vendor: str) -> list[str]:
    """The trigger functions as they now are (they send the notifications):
    for a database whose triggers were installed before they did."""
    if vendor != "postgresql":
        return []
    out = _pg_version_function()[1:]
    for name, rows in _PG_ROWS.items():
        out.append(_PG_FREE_DELTA.format(name=name, rows=rows, channel=STOCK_CHANNEL))
    return out


def free_slots_recount_sql() -> str:
    """Set every host's free_slots from its slots (after a bulk copy of both tables)."""
    return (
        "UPDATE catalog_host SET free_slots = (SELECT count(*) FROM catalog_slot s "
        "WHERE s.host_id = catalog_host.id AND s.status = 'free')"
    )
