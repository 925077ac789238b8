#!/usr/bin/env bash
# Make sure the chain tests can start their regtest node: litecoind and
# litecoin-cli on PATH (Debian package `litecoind`). Installs the package when
# it is missing and we are root; otherwise says what to do. Idempotent and
# silent when everything is present.
set -euo pipefail

log() { printf '[chain-nodes] %s\n' "$*"; }

if command -v litecoind >/dev/null 2>&1 && command -v litecoin-cli >/dev/null 2>&1; then
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  log "litecoind is missing: install the Debian package as root (apt-get install litecoind)"
  log "or put Litecoin Core's litecoind and litecoin-cli on PATH; the chain tests need them"
  exit 1
fi

log "installing litecoind from Debian packages"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends litecoind >/dev/null 2>&1; then
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends litecoind >/dev/null
fi

if ! command -v litecoind >/dev/null 2>&1 || ! command -v litecoin-cli >/dev/null 2>&1; then
  log "litecoind was installed but litecoind/litecoin-cli are still not on PATH"
  exit 1
fi
log "litecoind ready: $(litecoind -version | head -n 1)"
