#!/usr/bin/env bash
# Make sure the browser tests can drive a headless browser: Debian's Chromium
# and its WebDriver (packages `chromium` and `chromium-driver`), plus fonts
# with the glyphs the pages use. Installs them when missing and we are root;
# otherwise says what to do. Never downloads a browser build of its own.
# Idempotent and silent when everything is present.
set -euo pipefail

log() { printf '[browser] %s\n' "$*"; }

have() { command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; }
fonts() { fc-list 2>/dev/null | grep -qi 'dejavu\|liberation'; }

if have && fonts; then
  exit 0
fi

if [ "$(id -u)" != 0 ]; then
  log "Chromium or its driver is missing: install the Debian packages as root"
  log "(apt-get install chromium chromium-driver fonts-dejavu-core); the browser tests need them"
  exit 1
fi

log "installing chromium, chromium-driver and fonts from Debian packages"
# shellcheck source=tests/apt-install.sh
. "$(dirname "${BASH_SOURCE[0]}")/apt-install.sh"
apt_install chromium chromium-driver fonts-dejavu-core fontconfig

if ! have; then
  log "chromium-driver was installed but chromium/chromedriver are still not on PATH"
  exit 1
fi
log "browser ready: $(chromium --version 2>/dev/null | head -n 1)"
