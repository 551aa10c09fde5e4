#!/usr/bin/env bash
# Makes sure PostgreSQL (127.0.0.1:5432, user postgres, trust auth) and RabbitMQ (127.0.0.1:5672, guest/guest)
# are running. Installs them from Debian's packages when absent (needs root). Idempotent: does nothing when both
# already answer.
set -euo pipefail

log() { printf '[services] %s\n' "$*" >&2; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_port() {
  local port=$1 name=$2 tries=${3:-60}
  for _ in $(seq "$tries"); do
    port_open "$port" && return 0
    sleep 1
  done
  log "$name did not open port $port"; return 1
}

apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then
    log "apt-get update"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    apt_updated=1
  fi
  log "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_postgres() {
  if port_open 5432; then return 0; fi
  local fresh=0
  if ! ls /etc/postgresql/*/main >/dev/null 2>&1; then
    apt_install postgresql postgresql-client
    fresh=1
  fi
  local version
  version=$(ls /etc/postgresql | sort -V | tail -n 1)
  if [ "$fresh" = 1 ]; then
    # A fresh Debian cluster asks for passwords over TCP; local development and tests use trust, like the
    # machines this project is developed on.
    local hba="/etc/postgresql/$version/main/pg_hba.conf"
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust\nlocal all all trust' "$hba"
  fi
  log "starting PostgreSQL $version"
  pg_ctlcluster --skip-systemctl-redirect "$version" main start || true
  wait_port 5432 PostgreSQL 60
}

ensure_rabbitmq() {
  if port_open 5672; then return 0; fi
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    apt_install rabbitmq-server
  fi
  log "starting RabbitMQ"
  rabbitmq-server -detached >/dev/null 2>&1 || true
  rabbitmqctl -q await_startup --timeout 120 >/dev/null 2>&1 || wait_port 5672 RabbitMQ 120
  wait_port 5672 RabbitMQ 120
}

ensure_postgres
ensure_rabbitmq
log "PostgreSQL and RabbitMQ are up"
