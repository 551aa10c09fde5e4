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

# RabbitMQ needs a file descriptor per connection and per queue segment: Debian's default limit (1024, ~900 for
# the broker) runs out under the test suite's parallel pipelines, and every test then times out at once. The
# broker is started with a raised limit, and one already running with the default limit is restarted with it
# (only when we may: root, and a broker started the Debian way).
RABBITMQ_NOFILE=65536
rabbitmq_fd_limit() {
  rabbitmqctl -q status 2>/dev/null | sed -n 's/.*Total: [0-9]*, limit: \([0-9]*\).*/\1/p' | head -n1
}

start_rabbitmq() {
  if [ -x /etc/init.d/rabbitmq-server ] && [ "$(id -u)" -eq 0 ]; then
    # Debian's init script raises the limit from /etc/default/rabbitmq-server before it drops to the rabbitmq
    # user (`rabbitmq-server -detached` goes through su, which resets it to 1024): as many as asked, else the
    # hard limit.
    if ! grep -qE '^[[:space:]]*ulimit -n' /etc/default/rabbitmq-server 2>/dev/null; then
      printf '%s\n' "# deploy/services.sh: a file descriptor per connection and queue segment" \
        "ulimit -n $RABBITMQ_NOFILE 2>/dev/null || ulimit -n \"\$(ulimit -Hn)\"" >>/etc/default/rabbitmq-server
    fi
    /etc/init.d/rabbitmq-server start >/dev/null 2>&1 || true
  else
    ( ulimit -n "$RABBITMQ_NOFILE" 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
      rabbitmq-server -detached >/dev/null 2>&1 || true )
  fi
  rabbitmqctl -q await_startup --timeout 120 >/dev/null 2>&1 || wait_port 5672 RabbitMQ 120
  wait_port 5672 RabbitMQ 120
}

ensure_rabbitmq() {
  if port_open 5672; then
    local limit
    limit=$(rabbitmq_fd_limit)
    if [ -n "$limit" ] && [ "$limit" -lt 10000 ] && [ "$(id -u)" -eq 0 ]; then
      log "RabbitMQ runs with $limit file descriptors: restarting it with up to $RABBITMQ_NOFILE"
      rabbitmqctl -q stop >/dev/null 2>&1 || true
      for _ in $(seq 1 60); do port_open 5672 || break; sleep 1; done
      start_rabbitmq
      log "RabbitMQ file descriptor limit: $(rabbitmq_fd_limit)"
    fi
    return 0
  fi
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    apt_install rabbitmq-server
  fi
  log "starting RabbitMQ"
  start_rabbitmq
}

ensure_postgres
ensure_rabbitmq
log "PostgreSQL and RabbitMQ are up"
