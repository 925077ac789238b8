#!/usr/bin/env bash
# Make sure the chain tests can start their nodes:
#
# - litecoind and litecoin-cli on PATH (Debian package `litecoind`), for the
#   Bitcoin-family tests. Installed from Debian packages when missing and we
#   are root; otherwise says what to do.
# - anvil (Ethereum dev node) and solc (Solidity compiler, the npm build) for
#   the Ethereum tests, and @solana/pay with @solana/web3.js for the Solana
#   wallet test, installed from npm into the git-ignored .tools/ folder
#   of the repository at the versions pinned in devtools/node/package-lock.json.
#   npm (and node) come from Debian packages when missing and we are root.
# - monerod, monero-wallet-rpc and monero-wallet-cli (Debian package `monero`)
#   for the Monero tests, installed the same way as litecoind.
#
# Idempotent and silent when everything is present.
set -euo pipefail

log() { printf '[chain-nodes] %s\n' "$*"; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="$ROOT/.tools"
PINS="$ROOT/devtools/node"

# shellcheck source=tests/apt-install.sh
. "$ROOT/tests/apt-install.sh"

ensure_litecoind() {
  if command -v litecoind >/dev/null 2>&1 && command -v litecoin-cli >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    log "litecoind is missing: install the Debian package as root (apt-get install litecoind)"
    log "or put Litecoin Core's litecoind and litecoin-cli on PATH; the chain tests need them"
    return 1
  fi
  log "installing litecoind from Debian packages"
  apt_install litecoind
  if ! command -v litecoind >/dev/null 2>&1 || ! command -v litecoin-cli >/dev/null 2>&1; then
    log "litecoind was installed but litecoind/litecoin-cli are still not on PATH"
    return 1
  fi
  log "litecoind ready: $(litecoind -version | head -n 1)"
}

ensure_monero() {
  if command -v monerod >/dev/null 2>&1 && command -v monero-wallet-rpc >/dev/null 2>&1 &&
    command -v monero-wallet-cli >/dev/null 2>&1; then
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    log "monerod is missing: install the Debian package as root (apt-get install monero)"
    log "or put monerod, monero-wallet-rpc and monero-wallet-cli on PATH; the Monero tests need them"
    return 1
  fi
  log "installing monero from Debian packages"
  apt_install monero
  if ! command -v monerod >/dev/null 2>&1 || ! command -v monero-wallet-rpc >/dev/null 2>&1; then
    log "monero was installed but monerod/monero-wallet-rpc are still not on PATH"
    return 1
  fi
  log "monero ready: $(monerod --version | head -n 1)"
}

ethereum_tools_present() {
  [ -x "$TOOLS/node_modules/.bin/anvil" ] &&
    [ -f "$TOOLS/node_modules/solc/soljson.js" ] &&
    [ -f "$TOOLS/node_modules/@solana/pay/package.json" ] &&
    cmp -s "$PINS/package-lock.json" "$TOOLS/package-lock.json"
}

ensure_ethereum_tools() {
  if ethereum_tools_present; then
    return 0
  fi
  case "$(uname -s)-$(uname -m)" in
    Linux-x86_64 | Linux-amd64) ;;
    *)
      log "the pinned anvil package is for Linux x86-64; on $(uname -s)-$(uname -m) install Foundry's anvil"
      log "yourself and put it on PATH (the harness falls back to it), and run: npm install --prefix .tools solc"
      return 1
      ;;
  esac
  if ! command -v npm >/dev/null 2>&1; then
    if [ "$(id -u)" != 0 ]; then
      log "npm is missing: install Node.js 20 or later with npm (as root: apt-get install nodejs npm)"
      return 1
    fi
    log "installing node and npm from Debian packages"
    apt_install nodejs npm
  fi
  log "installing anvil, solc and @solana/pay from npm into .tools/ (versions pinned in devtools/node/package-lock.json)"
  mkdir -p "$TOOLS"
  # The folder ignores itself: nothing installed there is ever committed.
  printf '*\n' >"$TOOLS/.gitignore"
  cp "$PINS/package.json" "$PINS/package-lock.json" "$TOOLS/"
  (cd "$TOOLS" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
  if ! ethereum_tools_present; then
    log "npm finished but .tools/node_modules has no anvil, solc or @solana/pay"
    return 1
  fi
  log "anvil ready: $("$TOOLS/node_modules/.bin/anvil" --version | head -n 1)"
}

status=0
ensure_litecoind || status=1
ensure_ethereum_tools || status=1
ensure_monero || status=1
exit "$status"
