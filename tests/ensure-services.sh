#!/usr/bin/env bash
# Make sure the services the tests talk to are running: PostgreSQL and Redis on
# loopback. Starts them when they are stopped; installs them from Debian
# packages when they are missing and we are root. Idempotent.
set -euo pipefail

log() { printf '[services] %s\n' "$*"; }
as_root() { [ "$(id -u)" = 0 ]; }
apt_install() {
  if ! as_root; then log "missing $*; install it (needs root)"; return 1; fi
  log "installing $* from Debian packages"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q "$@" >/dev/null 2>&1 || { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q "$@" >/dev/null; }
}

wait_for() {  # wait_for <description> <command...>
  local what=$1; shift
  for _ in $(seq 1 60); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
  log "$what did not come up"; return 1
}

# --- PostgreSQL ---------------------------------------------------------------
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432; }
if ! command -v pg_ctlcluster >/dev/null 2>&1; then
  apt_install postgresql postgresql-client
fi
if ! pg_up; then
  version=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1)
  if [ -z "$version" ]; then log "no PostgreSQL cluster found"; exit 1; fi
  log "starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_for PostgreSQL pg_up
fi
# The tests connect as postgres over TCP without a password (trust on loopback).
if ! psql -h 127.0.0.1 -U postgres -d postgres -Atc 'select 1' >/dev/null 2>&1; then
  log "cannot connect to PostgreSQL as postgres on 127.0.0.1:5432 (trust auth expected)"; exit 1
fi
log "PostgreSQL ready"

# --- Redis --------------------------------------------------------------------
redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping | grep -q PONG; }
if ! command -v redis-server >/dev/null 2>&1; then
  apt_install redis-server
fi
if ! redis_up; then
  log "starting Redis"
  mkdir -p /var/lib/redis /var/log/redis 2>/dev/null || true
  redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
    --dir /var/lib/redis --logfile /var/log/redis/ci.log
  wait_for Redis redis_up
fi
log "Redis ready"

# --- Tools the tests compare against ---------------------------------------------
# OpenSSH's ssh-keygen: SSH key fingerprints are checked against what it prints.
command -v ssh-keygen >/dev/null 2>&1 || apt_install openssh-client
# openssl: webhook signatures are checked against the docs' openssl command line.
command -v openssl >/dev/null 2>&1 || apt_install openssl
