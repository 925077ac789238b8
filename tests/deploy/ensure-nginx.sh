#!/usr/bin/env bash
# Make sure tests/deploy/test_nginx.py can run the shipped nginx site: Debian's
# nginx package. Installs it when missing and we are root (services are not
# started: the test runs its own nginx on loopback ports); otherwise says what
# to do. Idempotent and silent when nginx is present.
set -euo pipefail

log() { printf '[nginx] %s\n' "$*"; }
have() { command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; }

if have; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "nginx is missing: install the Debian package as root (apt-get install nginx);"
  log "tests/deploy/test_nginx.py is skipped without it"
  exit 1
fi
log "installing nginx from Debian packages"
# shellcheck source=tests/apt-install.sh
. "$(dirname "${BASH_SOURCE[0]}")/../apt-install.sh"
apt_install nginx
have || { log "nginx was installed but is not found"; exit 1; }
log "nginx ready: $(nginx -v 2>&1 || /usr/sbin/nginx -v 2>&1)"
