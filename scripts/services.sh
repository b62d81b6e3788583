#!/usr/bin/env bash
# Make sure PostgreSQL and Redis answer on 127.0.0.1: start them when installed but stopped,
# install them from the distribution when absent. Used by `make test`.
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
  command -v pg_ctlcluster >/dev/null || apt_install postgresql postgresql-contrib
  if ! pg_up; then
    version=$(ls /etc/postgresql | sort -V | tail -n 1)
    $SUDO pg_ctlcluster --skip-systemctl-redirect "$version" main start
    for _ in $(seq 30); do pg_up && break; sleep 1; done
  fi
  # A fresh install asks for a password over TCP: give the postgres role the one we use.
  if ! psql "$PG_URL" -qtAc 'select 1' >/dev/null 2>&1; then
    as_postgres psql -qc "ALTER USER postgres PASSWORD 'postgres'" >/dev/null
  fi
  psql "$PG_URL" -qtAc 'select 1' >/dev/null
}

ensure_redis() {
  command -v redis-server >/dev/null || apt_install redis-server
  if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    redis-server --daemonize yes --bind 127.0.0.1 --port 6379 --save "" --appendonly no
    for _ in $(seq 30); do redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1 && break; sleep 0.5; done
  fi
  redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null
}

ensure_postgres
ensure_redis
echo "PostgreSQL and Redis are up on 127.0.0.1"
