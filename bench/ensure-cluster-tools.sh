#!/usr/bin/env bash
# Make sure `make cluster-trial` has what bench/cluster.py runs besides what `make test` installs
# (PostgreSQL, Redis, litecoind, nginx): iproute2's `ip` (network namespaces) and openssl (the
# edge's certificate). Installs the Debian packages when missing and we are root; otherwise says
# what to do. Idempotent and silent when both are present.
set -euo pipefail

log() { printf '[cluster] %s\n' "$*"; }

have() { command -v ip >/dev/null 2>&1 && command -v openssl >/dev/null 2>&1; }

if have; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "ip or openssl is missing: install the Debian packages as root (apt-get install iproute2 openssl)"
  exit 1
fi
log "installing iproute2 and openssl from Debian packages"
# shellcheck source=tests/apt-install.sh
. "$(dirname "${BASH_SOURCE[0]}")/../tests/apt-install.sh"
apt_install iproute2 openssl
have || { log "the packages were installed but ip or openssl is still not on PATH"; exit 1; }
