#!/usr/bin/env bash
# Point-in-time restore: a base backup copied into a new data directory, set up to replay the
# archived WAL up to a target and then open for writes. It does not start PostgreSQL.
#
#   restore.sh --pgdata DIR (--target-name NAME | --target-time 'YYYY-MM-DD HH:MM:SS+00' | --latest)
#              [--backup BACKUP_ROOT/base/<time>] [--archive BACKUP_ROOT/wal] [--owner postgres]
#
# --backup defaults to the newest base backup that started before the target (for --target-time)
# or the newest one; --archive to $BACKUP_ROOT/wal. DIR must not exist or be empty. Run as root
# (the files are then given to --owner, postgres by default) or as the server's user.
#
# The steps are the PostgreSQL 15 manual's, 26.3.4 "Recovering Using a Continuous Archive Backup"
# (https://www.postgresql.org/docs/15/continuous-archiving.html#BACKUP-PITR-RECOVERY): restore the
# base backup, set restore_command, set the recovery target (20.5.5 "Recovery Target",
# https://www.postgresql.org/docs/15/runtime-config-wal.html#RUNTIME-CONFIG-WAL-RECOVERY-TARGET),
# create recovery.signal, start the server. recovery_target_action = promote: once the target is
# reached the server ends recovery and accepts writes (the default, pause, would wait for
# pg_wal_replay_resume()). A target the archived WAL does not reach stops the server with
# "recovery ended before configured recovery target was reached" instead of opening it early.
set -euo pipefail
usage() { sed -n '4,6p' "$0" >&2; exit 2; }
pgdata="" target_kind="" target_value="" backup="" archive="" owner=""
while [ $# -gt 0 ]; do
  case $1 in
    --pgdata) pgdata=$2; shift 2 ;;
    --target-name) target_kind=name; target_value=$2; shift 2 ;;
    --target-time) target_kind=time; target_value=$2; shift 2 ;;
    --latest) target_kind=latest; shift ;;
    --backup) backup=$2; shift 2 ;;
    --archive) archive=$2; shift 2 ;;
    --owner) owner=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$pgdata" ] && [ -n "$target_kind" ] || usage
if [ -z "$archive" ]; then
  : "${BACKUP_ROOT:?give --archive, or set BACKUP_ROOT}"
  archive=$BACKUP_ROOT/wal
fi
if [ -z "$backup" ]; then
  : "${BACKUP_ROOT:?give --backup, or set BACKUP_ROOT}"
  for candidate in $(find "$BACKUP_ROOT/base" -mindepth 1 -maxdepth 1 -type d -name '2*' -printf '%f\n' | sort -r); do
    if [ "$target_kind" = time ]; then
      # backup_label: "START TIME: 2026-12-03 18:01:02 UTC"; a backup started after the target cannot reach it.
      started=$(sed -n 's/^START TIME: //p' "$BACKUP_ROOT/base/$candidate/backup_label")
      [ "$(date -u -d "$started" +%s)" -le "$(date -u -d "$target_value" +%s)" ] || continue
    fi
    backup=$BACKUP_ROOT/base/$candidate
    break
  done
  [ -n "$backup" ] || { echo "restore: no base backup in $BACKUP_ROOT/base fits the target" >&2; exit 1; }
fi
[ -f "$backup/backup_label" ] || { echo "restore: $backup is not a base backup (no backup_label)" >&2; exit 1; }
[ -d "$archive" ] || { echo "restore: no WAL archive at $archive" >&2; exit 1; }
if [ -e "$pgdata" ] && [ -n "$(ls -A "$pgdata")" ]; then
  echo "restore: $pgdata is not empty; move the old data directory away first" >&2
  exit 1
fi

mkdir -p "$pgdata"
cp -a "$backup/." "$pgdata/"
# The manifest belongs to the backup, not to a running server.
rm -f "$pgdata/backup_manifest"
{
  echo "# Written by deploy/backup/restore.sh from $backup"
  printf "restore_command = 'cp \"%s/%%f\" \"%%p\"'\n" "$archive"
  case $target_kind in
    name) printf "recovery_target_name = '%s'\n" "${target_value//\'/\'\'}" ;;
    time) printf "recovery_target_time = '%s'\n" "${target_value//\'/\'\'}" ;;
    latest) ;;
  esac
  [ "$target_kind" = latest ] || echo "recovery_target_action = 'promote'"
} >>"$pgdata/postgresql.auto.conf"
touch "$pgdata/recovery.signal"
chmod 0700 "$pgdata"
if [ "$(id -u)" = 0 ]; then
  chown -R "${owner:-postgres}:" "$pgdata"
fi
echo "restore: $pgdata holds $backup, replaying $archive to ${target_kind}${target_value:+ $target_value}."
echo "Start PostgreSQL on it; once it accepts writes run deploy/backup/after-restore.sh before web, worker and beat."
