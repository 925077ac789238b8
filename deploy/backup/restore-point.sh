#!/usr/bin/env bash
# restore-point.sh NAME: a named restore point in the WAL (pg_create_restore_point), then a switch to
# a new WAL segment so the one holding it is archived now, not when it fills. Take one before an
# upgrade, a migration or a bulk correction: restore.sh --target-name NAME comes back to it.
# Connection: libpq's environment (PGHOST, PGPORT, PGUSER; a superuser or a role granted
# pg_create_restore_point and pg_switch_wal), or PGDATABASE / a conninfo in RESTORE_POINT_DSN.
# PostgreSQL 15 manual, 9.27.3 "Backup Control Functions"
# (https://www.postgresql.org/docs/15/functions-admin.html#FUNCTIONS-ADMIN-BACKUP).
set -euo pipefail
if [ $# -ne 1 ] || [ -z "$1" ]; then
  echo "usage: $0 NAME" >&2
  exit 2
fi
psql ${RESTORE_POINT_DSN:+"$RESTORE_POINT_DSN"} --no-psqlrc -v ON_ERROR_STOP=1 -X -At -v name="$1" <<'SQL'
SELECT 'restore point ' || :'name' || ' at ' || pg_create_restore_point(:'name');
SELECT 'switched WAL at ' || pg_switch_wal();
SQL
