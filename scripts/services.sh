#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on 127.0.0.1: start them when installed but stopped,
# install them from the distribution when absent (and xxd and hexdump, which some tests run).
# Used by `make test`.
set -euo pipefail

PG_URL=${PG_ADMIN_URL:-postgresql://postgres:postgres@127.0.0.1:5432/postgres}
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

apt_install() {
  echo "installing $* with apt-get"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then su postgres -c "$(printf '%q ' "$@")"; else sudo -u postgres "$@"; fi
}

pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }

ensure_postgres() {
  installed=""
  if ! command -v pg_ctlcluster >/dev/null; then
    apt_install postgresql postgresql-contrib
    installed=1
  fi
  if ! pg_up; then
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start
    for _ in $(seq 30); do pg_up && break; sleep 1; done
  fi
  # The install this script just made asks for a password over TCP: give its postgres role the
  # one the tests use. An existing installation's password is never changed.
  if [ -n "$installed" ] && ! psql "$PG_URL" -qtAc 'select 1' >/dev/null 2>&1; then
    as_postgres psql -qc "ALTER USER postgres PASSWORD 'postgres'" >/dev/null
  fi
  if ! psql "$PG_URL" -qtAc 'select 1' >/dev/null 2>&1; then
    echo "PostgreSQL runs but refuses $PG_URL, and an existing installation's passwords are" \
         "not changed here: run make test PG_ADMIN_URL=postgresql://USER:PASS@127.0.0.1:5432/postgres" \
         "TEST_DATABASE_URL=postgresql://USER:PASS@127.0.0.1:5432/mlsched with a role that works" >&2
    exit 1
  fi
}

ensure_redis() {
  command -v redis-server >/dev/null || apt_install redis-server
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
    for _ in $(seq 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done
  fi
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null
}

# The secret masking tests mask the hex dumps these tools print (od comes with coreutils).
ensure_dump_tools() {
  command -v xxd >/dev/null || apt_install xxd
  command -v hexdump >/dev/null || apt_install bsdextrautils
}

ensure_postgres
ensure_redis
ensure_dump_tools
echo "PostgreSQL and Redis are up on 127.0.0.1"
