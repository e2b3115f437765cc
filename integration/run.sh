#!/usr/bin/env bash
# Runs berth's whole test suite, first installing what the tests need.
#
# - PostgreSQL server binaries: the integration tests initdb and start their
#   own server from them on a free loopback port (or use
#   BERTH_TEST_POSTGRES_URL if set). Installed from Debian's packages when
#   missing and we are root.
#
# Extra arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

have_postgres() {
  [ -n "${BERTH_TEST_POSTGRES_URL:-}" ] && return 0
  [ -n "${BERTH_PG_BIN:-}" ] && [ -x "${BERTH_PG_BIN}/initdb" ] && return 0
  compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

have_libpq() {
  [ -e /usr/include/postgresql/libpq-fe.h ] || compgen -G "/usr/lib/*/libpq.so" >/dev/null
}

if ! have_postgres || ! have_libpq; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing PostgreSQL from the system's packages" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql libpq-dev >/dev/null
  else
    echo "the tests need PostgreSQL's server binaries and libpq: install postgresql and libpq-dev," >&2
    echo "or set BERTH_PG_BIN to a directory with initdb and postgres, or BERTH_TEST_POSTGRES_URL" >&2
    exit 1
  fi
fi

cargo test "$@"
