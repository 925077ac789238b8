#!/usr/bin/env bash
# A base backup of the PostgreSQL server into $BACKUP_ROOT/base/<UTC time>/, checked, then the
# backups beyond the newest $KEEP_BASE_BACKUPS removed with the archived WAL only they needed.
# Settings from the environment (deploy/backup/backup.env.example): BACKUP_ROOT, KEEP_BASE_BACKUPS,
# and libpq's PGHOST, PGPORT, PGUSER (a role with REPLICATION).
#
# PostgreSQL 15 manual: 26.3.2 "Making a Base Backup"
# (https://www.postgresql.org/docs/15/continuous-archiving.html#BACKUP-BASE-BACKUP), pg_basebackup,
# pg_verifybackup (checks every file against the backup's manifest and that the WAL it needs parses)
# and pg_archivecleanup (removes archived segments older than the one named).
set -euo pipefail
: "${BACKUP_ROOT:?set BACKUP_ROOT (deploy/backup/backup.env.example)}"
KEEP_BASE_BACKUPS=${KEEP_BASE_BACKUPS:-2}
PG_BIN=${PG_BIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
PATH="$PG_BIN:$PATH"

base="$BACKUP_ROOT/base"
mkdir -p "$base" "$BACKUP_ROOT/wal"
# To the microsecond: two backups in one second (a retry, a test) must not share a folder, or the
# second would be moved inside the first.
stamp=$(date -u +%Y%m%dT%H%M%S.%6NZ)
if [ -e "$base/$stamp" ]; then
  echo "base backup $base/$stamp exists already" >&2
  exit 1
fi
target="$base/$stamp"
partial="$base/.$stamp.partial"
trap 'rm -rf "$partial"' EXIT
# Plain format with the WAL the backup needs streamed into it (-X stream): the copy is consistent on
# its own, and pg_verifybackup can check it. A fast checkpoint starts it at once.
pg_basebackup --pgdata="$partial" --format=plain --wal-method=stream --checkpoint=fast \
  --label="gpurenthub $stamp" --no-password
pg_verifybackup --quiet "$partial"
mv "$partial" "$target"
echo "base backup $target ($(du -sh "$target" | cut -f1))"

# Keep the newest KEEP_BASE_BACKUPS; drop the WAL older than what the oldest kept one starts from.
mapfile -t backups < <(find "$base" -mindepth 1 -maxdepth 1 -type d -name '2*' -printf '%f\n' | sort)
drop=$((${#backups[@]} - KEEP_BASE_BACKUPS))
for ((i = 0; i < drop; i++)); do
  rm -rf "${base:?}/${backups[$i]}"
  echo "removed base backup ${backups[$i]}"
done
oldest=${backups[$((drop > 0 ? drop : 0))]}
# backup_label: "START WAL LOCATION: 0/2000028 (file 000000010000000000000002)"
first_wal=$(sed -n 's/^START WAL LOCATION: .*(file \([0-9A-F]\{24\}\))$/\1/p' "$base/$oldest/backup_label")
pg_archivecleanup "$BACKUP_ROOT/wal" "$first_wal"
