#!/usr/bin/env bash
# Runs berth's whole test suite, first installing what the tests need.
#
# - PostgreSQL server binaries: the integration tests initdb and start their
#   own server from them on a free loopback port (or use
#   BERTH_TEST_POSTGRES_URL if set). Installed from Debian's packages when
#   missing and we are root.
# - moto's EC2 server, for the EC2 provider's tests, and schemathesis, for
#   the API's hostile-input test: installed from PyPI into .venv in the
#   repository when missing (or set BERTH_MOTO_SERVER to a moto_server
#   binary, BERTH_SCHEMATHESIS to a schemathesis binary).
# - OpenSSH's server and client, for the manual provider's tests: each
#   test starts its own sshd on a loopback port with generated keys.
#   Installed from Debian's packages when missing and we are root (or set
#   BERTH_SSHD to an sshd binary).
# - Headless Chromium and chromedriver, for the dashboard's tests: installed
#   from Debian's packages when missing and we are root (or set
#   BERTH_CHROMEDRIVER to a chromedriver; BERTH_SKIP_BROWSER_TESTS=1 skips
#   those tests).
# - curl, for the TLS tests: installed from Debian's packages when missing.
#
# Extra arguments go to `cargo test` (e.g. a test name filter).
set -euo pipefail
cd "$(dirname "$0")/.."

# Installs Debian packages (as root), refreshing the package lists once.
apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then
    apt-get update -qq
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

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
    apt_install postgresql libpq-dev
  else
    echo "the tests need PostgreSQL's server binaries and libpq: install postgresql and libpq-dev," >&2
    echo "or set BERTH_PG_BIN to a directory with initdb and postgres, or BERTH_TEST_POSTGRES_URL" >&2
    exit 1
  fi
fi

# curl, the raw HTTPS client of the TLS tests (it must verify the
# controller's certificate with its CA, and fail without it).
if ! command -v curl >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing curl from the system's packages" >&2
    apt_install curl
  else
    echo "the TLS tests need curl: install it" >&2
    exit 1
  fi
fi

have_sshd() {
  local sshd="${BERTH_SSHD:-/usr/sbin/sshd}"
  [ -x "$sshd" ] && command -v ssh >/dev/null && command -v ssh-keygen >/dev/null
}

if ! have_sshd; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing OpenSSH's server from the system's packages" >&2
    apt_install openssh-server openssh-client
  else
    echo "the manual provider's tests need OpenSSH's server: install openssh-server," >&2
    echo "or set BERTH_SSHD to an sshd binary" >&2
    exit 1
  fi
fi

# The moto release the EC2 tests are written against, and the schemathesis
# release the API's hostile-input test runs.
MOTO_VERSION=5.1.22
SCHEMATHESIS_VERSION=4.32.5

pip_has() { .venv/bin/pip show "$1" 2>/dev/null | grep -qx "Version: $2"; }

have_moto() {
  [ -n "${BERTH_MOTO_SERVER:-}" ] && [ -x "${BERTH_MOTO_SERVER}" ] && return 0
  [ -x .venv/bin/moto_server ] && pip_has moto "${MOTO_VERSION}"
}

have_schemathesis() {
  [ -n "${BERTH_SCHEMATHESIS:-}" ] && [ -x "${BERTH_SCHEMATHESIS}" ] && return 0
  [ -x .venv/bin/schemathesis ] && pip_has schemathesis "${SCHEMATHESIS_VERSION}"
}

if ! have_moto || ! have_schemathesis; then
  echo "installing moto ${MOTO_VERSION} and schemathesis ${SCHEMATHESIS_VERSION} into .venv" >&2
  if [ ! -x .venv/bin/pip ] && ! python3 -m venv .venv >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt_install python3-venv
      python3 -m venv .venv
    else
      echo "the EC2 and API tests need python3 with venv (python3-venv) to install moto and schemathesis" >&2
      exit 1
    fi
  fi
  .venv/bin/pip install --quiet --disable-pip-version-check \
    "moto[server]==${MOTO_VERSION}" "schemathesis==${SCHEMATHESIS_VERSION}"
fi

have_browser() {
  [ "${BERTH_SKIP_BROWSER_TESTS:-}" = 1 ] && return 0
  if [ -n "${BERTH_CHROMEDRIVER:-}" ]; then
    [ -x "${BERTH_CHROMEDRIVER}" ]
    return
  fi
  [ -x /usr/bin/chromedriver ] && [ -x /usr/bin/chromium ]
}

if ! have_browser; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing Chromium and chromedriver from the system's packages" >&2
    apt_install chromium chromium-driver
  else
    echo "the dashboard's tests need headless Chromium and its WebDriver: install the packages" >&2
    echo "chromium and chromium-driver, or set BERTH_CHROMEDRIVER to a chromedriver," >&2
    echo "or set BERTH_SKIP_BROWSER_TESTS=1 to skip those tests" >&2
    exit 1
  fi
fi

cargo test --features test-hooks "$@"
