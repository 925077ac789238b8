#!/usr/bin/env bash
# Make the virtual environment `make test-django-newest` runs the suite in: the pinned set of
# requirements.lock with Django replaced by the newest release (requirements-django-newest.txt),
# on a Python that release supports (Django 6 needs Python 3.12 or later; the pinned set runs on
# the system's Python 3.11).
#
# The Python is, in this order: $PYTHON_NEWEST when set; python3.14, python3.13 or python3.12 on
# PATH; the newest 3.12 or later that pyenv has installed. Without one it says what to do.
#
# Idempotent: an environment whose stamp matches both requirement files is kept as it is.
set -euo pipefail

log() { printf '[newest-django] %s\n' "$*"; }

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${NEWEST_VENV:-$ROOT/.venv-django-newest}"  # NEWEST_VENV: elsewhere (its test)
PINS="$ROOT/requirements-django-newest.txt"

supports_django6() { "$1" -c 'import sys, ssl, sqlite3, zlib; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; }

pick_python() {
  local candidate found
  local candidates=("${PYTHON_NEWEST:-}" python3.14 python3.13 python3.12)
  if command -v pyenv >/dev/null 2>&1; then
    # pyenv's shims answer only for the selected version: ask for the installed ones themselves.
    while read -r found; do
      candidates+=("$found")
    done < <(ls -d "$(pyenv root)"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -rV)
  fi
  for candidate in "${candidates[@]}"; do
    [ -n "$candidate" ] || continue
    found="$(command -v "$candidate" 2>/dev/null || true)"
    if [ -n "$found" ] && supports_django6 "$found"; then
      echo "$found"
      return 0
    fi
    if [ "$candidate" = "${PYTHON_NEWEST:-}" ]; then
      log "PYTHON_NEWEST=$PYTHON_NEWEST is not a working Python 3.12 or later" >&2
      return 1
    fi
  done
  log "no Python 3.12 or later found: install one (Debian 13's python3.13, or pyenv install 3.13)" >&2
  log "and set PYTHON_NEWEST to it if it is not on PATH as python3.12 or later" >&2
  return 1
}

stamp="$(cat "$ROOT/requirements.lock" "$PINS" | sha256sum | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ "$(cat "$VENV/.installed" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
python="$(pick_python)"
log "virtual environment .venv-django-newest on $("$python" -V)"
rm -rf "$VENV"
"$python" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
# The pinned set, less what requirements-django-newest.txt pins otherwise, then those pins.
pinned="$(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' "$PINS" | tr '[:upper:]_' '[:lower:]-')"
grep -viE "^($(echo "$pinned" | paste -sd'|'))==" "$ROOT/requirements.lock" >"$VENV/requirements.txt"
grep -E '^[A-Za-z0-9]' "$PINS" >>"$VENV/requirements.txt"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --no-compile -r "$VENV/requirements.txt"
"$VENV/bin/python" -m pip check
echo "$stamp" >"$VENV/.installed"
log "ready: $("$VENV/bin/python" -c 'import django; print("Django", django.get_version())')"
