#!/usr/bin/env bash
# Make sure `make bench` has its load generator and the database's own yardstick:
# Debian's `wrk` and `pgbench` (package postgresql-client). Installs them when
# missing and we are root; otherwise says what to do. Idempotent and silent when
# both are present.
set -euo pipefail

log() { printf '[bench] %s\n' "$*"; }

have() { command -v wrk >/dev/null 2>&1 && command -v pgbench >/dev/null 2>&1; }

if have; then
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  log "wrk or pgbench is missing: install the Debian packages as root (apt-get install wrk postgresql-client)"
  exit 1
fi

log "installing wrk and postgresql-client from Debian packages"
# shellcheck source=tests/apt-install.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tests/apt-install.sh"
apt_install wrk postgresql-client

if ! have; then
  log "the packages were installed but wrk or pgbench is still not on PATH"
  exit 1
fi
log "ready: $(wrk --version 2>&1 | head -n 1 | cut -c1-40); $(pgbench --version)"
