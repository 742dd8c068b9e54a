#!/usr/bin/env bash
# Makes sure the services the tests talk to are running on loopback: PostgreSQL on
# 127.0.0.1:5432 (user postgres, trust auth). Starts it when stopped and installs it from
# Debian's packages when absent, along with the tools the tests run (python3, chromium,
# promtool).
# Only what a test uses is brought up. The JetStream consumer's tests start their own
# private nats-server instances (one server, or a 3-node cluster they kill a node of), so
# only the binary is needed: Debian's nats-server package.
# Exits non-zero, loudly, when one cannot be brought up: tests must never skip.
set -euo pipefail

PG_PORT=5432

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo -n "$@"; fi
}

port_open() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

wait_for_port() {
  local port=$1 name=$2
  for _ in $(seq 1 60); do
    port_open "$port" && return 0
    sleep 0.5
  done
  echo "error: $name is not answering on 127.0.0.1:$port" >&2
  return 1
}

apt_install() {
  echo "installing $* from Debian's packages" >&2
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null \
    || { as_root apt-get update >/dev/null && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >/dev/null; }
}

ensure_postgres() {
  if port_open "$PG_PORT" && pg_isready -q -h 127.0.0.1 -p "$PG_PORT" 2>/dev/null; then
    return 0
  fi
  local fresh=0
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    apt_install postgresql
    fresh=1
  fi
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if [ "$fresh" -eq 1 ]; then
    # A fresh Debian cluster asks for passwords over TCP; the tests use trust on loopback only.
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    as_root sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
  fi
  echo "starting PostgreSQL $version" >&2
  as_root pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  # The package may have started the cluster before pg_hba.conf was edited.
  [ "$fresh" -eq 1 ] && { as_root pg_ctlcluster --skip-systemctl-redirect "$version" main reload || true; }
  wait_for_port "$PG_PORT" PostgreSQL
  for _ in $(seq 1 60); do
    pg_isready -q -h 127.0.0.1 -p "$PG_PORT" && return 0
    sleep 0.5
  done
  echo "error: PostgreSQL does not accept connections on 127.0.0.1:$PG_PORT" >&2
  return 1
}

ensure_postgres
# Accepting connections is not accepting the tests' login (postgres, no password): say so
# now rather than let every PostgreSQL test fail on authentication.
if ! psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -Atqc 'SELECT 1' >/dev/null 2>&1; then
  echo "error: PostgreSQL on 127.0.0.1:$PG_PORT refuses user postgres without a password; the tests need trust auth on loopback (pg_hba.conf: host all all 127.0.0.1/32 trust)" >&2
  exit 1
fi
command -v python3 >/dev/null || apt_install python3
# The web UI tests load pages in headless Chromium (Debian's package).
command -v chromium >/dev/null || apt_install chromium
# The JetStream consumer's tests run private nats-server processes.
command -v nats-server >/dev/null || apt_install nats-server
# The pooler tests run a private pgbouncer in front of PostgreSQL (never the package's
# own service).
command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || apt_install pgbouncer
# The documented alert rules are checked with promtool, which Debian ships in the
# prometheus package (its own service is never used).
command -v promtool >/dev/null || apt_install prometheus
echo "services ready: PostgreSQL 127.0.0.1:$PG_PORT" >&2
