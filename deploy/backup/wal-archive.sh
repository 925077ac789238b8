#!/usr/bin/env bash
# PostgreSQL's archive_command (archive.conf): wal-archive.sh %p %f ARCHIVE_DIR
# Copies one WAL segment (or history/backup file) into ARCHIVE_DIR and succeeds only once the copy
# is on disk under its final name. As the PostgreSQL 15 manual asks of an archive command
# (26.3.1, https://www.postgresql.org/docs/15/continuous-archiving.html#BACKUP-ARCHIVING-WAL):
# it never overwrites a different file of the same name (answers nonzero: someone else's archive,
# or a bug), and answers 0 for a file already archived with the same content (PostgreSQL may ask
# again after a crash between the copy and its own note of it).
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 %p %f ARCHIVE_DIR" >&2
  exit 2
fi
src=$1 name=$2 archive=$3
dest="$archive/$name"
if [ -e "$dest" ]; then
  if cmp -s "$src" "$dest"; then
    exit 0
  fi
  echo "wal-archive: $dest exists with other content; not overwriting" >&2
  exit 1
fi
tmp="$archive/.$name.partial.$$"
trap 'rm -f "$tmp"' EXIT
cp "$src" "$tmp"
sync "$tmp"
mv "$tmp" "$dest"
sync "$archive"
