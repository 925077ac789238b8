# Sourced by the ensure-*.sh scripts (tests/ and bench/): install Debian packages
# without recommends, refreshing the package lists only when the first try fails.
# Needs root; the caller checks and says what to do otherwise.
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1; then
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends "$@" >/dev/null
  fi
}
