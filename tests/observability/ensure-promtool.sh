#!/usr/bin/env bash
# Make sure tests/observability/test_alerts.py can check deploy/prometheus/alerts.yml:
# promtool, from Debian's prometheus package (`promtool check rules`, `promtool test
# rules`). Installs it when missing and we are root (the Prometheus server it also
# brings is not started: a test needs promtool alone); otherwise says what to do.
# Idempotent and silent when promtool is present.
set -euo pipefail

log() { printf '[promtool] %s\n' "$*"; }
have() { command -v promtool >/dev/null 2>&1; }

if have; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  log "promtool is missing: install the Debian package as root (apt-get install prometheus);"
  log "tests/observability/test_alerts.py is skipped without it"
  exit 1
fi
log "installing prometheus (for promtool) from Debian packages"
# Keep the package's server from starting where a service manager would start it.
policy=/usr/sbin/policy-rc.d
made_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod +x "$policy" && made_policy=1
fi
# shellcheck source=tests/apt-install.sh
. "$(dirname "${BASH_SOURCE[0]}")/../apt-install.sh"
status=0
apt_install prometheus || status=$?
[ "$made_policy" = 1 ] && rm -f "$policy"
[ "$status" = 0 ] || { log "apt-get install prometheus failed"; exit "$status"; }
have || { log "prometheus was installed but promtool is not found"; exit 1; }
log "promtool ready: $(promtool --version 2>&1 | head -1)"
