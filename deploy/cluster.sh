#!/usr/bin/env bash
# A scaled-out hookline backend on ONE machine, for trying and testing failover locally:
#   - a RabbitMQ cluster of three nodes: hl1@localhost, hl2@localhost, hl3@localhost, AMQP on 127.0.0.1:5701-5703,
#     Erlang distribution on 25701-25703, no management plugin, each with its own data and log directories;
#   - PostgreSQL 15: a primary and a streaming standby with synchronous replication (nodes "a" on 127.0.0.1:5441
#     and "b" on 127.0.0.1:5442), behind HAProxy on 127.0.0.1:5440, which routes only to the node that is writable
#     (an external check asks each node `pg_is_in_recovery()`).
# Everything lives under $HOOKLINE_CLUSTER_DIR (default /tmp/hookline-cluster). The machine's default RabbitMQ node
# (rabbit@localhost, 5672) and PostgreSQL (5432) are not touched. The RabbitMQ nodes run as the `rabbitmq` user
# and share its Erlang cookie (/var/lib/rabbitmq/.erlang.cookie, i.e. ~rabbitmq/.erlang.cookie), so the usual
# `rabbitmqctl -n hl1@localhost …` reaches them. Needs root (it switches to the rabbitmq and postgres users).
#
# Usage: deploy/cluster.sh VERB [ARG]
#   up                 create and start everything (installs Debian's haproxy when missing); idempotent
#   down               stop everything and delete $HOOKLINE_CLUSTER_DIR
#   status             nodes, cluster membership, queue leaders, PostgreSQL roles, where the proxy routes
#   env                the settings hookline needs (amqp_urls, database_url) as shell exports
#   rabbit-kill N      SIGKILL RabbitMQ node N (1-3)
#   rabbit-start N     start node N again (it rejoins the cluster) and wait until it runs
#   rabbit-leader Q    the node (1-3) holding the leader of quorum queue Q
#   pg-primary         the node (a|b) that is the primary
#   pg-stop-primary    stop the primary as a crash would (pg_ctl stop -m immediate)
#   pg-promote         promote the standby; it runs without a synchronous standby until pg-rejoin
#   pg-rejoin          bring the old primary back as the new standby (pg_rewind, or a fresh pg_basebackup if
#                      rewinding fails) and make replication synchronous again
set -euo pipefail

DIR=${HOOKLINE_CLUSTER_DIR:-/tmp/hookline-cluster}
PGBIN=${HOOKLINE_PGBIN:-/usr/lib/postgresql/15/bin}
RABBIT_BIN=/usr/lib/rabbitmq/bin
PROXY_PORT=5440
declare -A PG_PORT=([a]=5441 [b]=5442)
rabbit_port() { echo $((5700 + $1)); }
rabbit_node() { echo "hl$1@localhost"; }

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

[ "$(id -u)" = 0 ] || die "run as root (the nodes run as the rabbitmq and postgres users)"

# ---------------------------------------------------------------------------------------------------- RabbitMQ
rabbit_dir() { echo "$DIR/rabbit/hl$1"; }

# The environment of node N. RABBITMQ_CONF_ENV_FILE points at the node's own (empty) file so that the system's
# /etc/rabbitmq/rabbitmq-env.conf (NODENAME=rabbit@localhost) does not apply; the listener comes from the node's
# own rabbitmq.conf for the same reason (the system one binds 5672).
rabbit_env() {
  local n=$1 d
  d=$(rabbit_dir "$n")
  echo HOME=/var/lib/rabbitmq \
    RABBITMQ_NODENAME="$(rabbit_node "$n")" \
    RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
    RABBITMQ_NODE_PORT="$(rabbit_port "$n")" \
    RABBITMQ_DIST_PORT="$((25700 + n))" \
    RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" \
    RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
    RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" \
    RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
    RABBITMQ_MNESIA_BASE="$d/mnesia" \
    RABBITMQ_LOG_BASE="$d/log" \
    RABBITMQ_PID_FILE="$d/pid" \
    ERL_EPMD_ADDRESS=127.0.0.1
}

ctl() { # ctl N ARGS…: rabbitmqctl against node N
  local n=$1; shift
  rabbitmqctl -q -n "$(rabbit_node "$n")" "$@"
}

rabbit_running() { ctl "$1" status >/dev/null 2>&1; }

rabbit_start() {
  local n=$1 d
  d=$(rabbit_dir "$n")
  if rabbit_running "$n"; then return 0; fi
  mkdir -p "$d/mnesia" "$d/log"
  [ -f "$d/rabbitmq.conf" ] || cat >"$d/rabbitmq.conf" <<EOF
listeners.tcp.local = 127.0.0.1:$(rabbit_port "$n")
# The three nodes share one machine: keep their memory watermark modest.
vm_memory_high_watermark.relative = 0.2
EOF
  [ -f "$d/enabled_plugins" ] || echo '[].' >"$d/enabled_plugins"
  # Distribution on loopback only, like the machine's own node.
  [ -f "$d/rabbitmq-env.conf" ] ||
    echo 'SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"' >"$d/rabbitmq-env.conf"
  chown -R rabbitmq:rabbitmq "$DIR/rabbit"
  log "starting RabbitMQ node $(rabbit_node "$n") on 127.0.0.1:$(rabbit_port "$n")"
  # shellcheck disable=SC2046
  (cd /var/lib/rabbitmq && runuser -u rabbitmq -- env $(rabbit_env "$n") "$RABBIT_BIN/rabbitmq-server" -detached \
    >>"$d/log/start.out" 2>&1)
}

rabbit_wait() {
  local n=$1
  for _ in $(seq 120); do
    if ctl "$n" await_startup --timeout 5 >/dev/null 2>&1; then return 0; fi
    sleep 1
  done
  die "RabbitMQ node $(rabbit_node "$n") did not start; see $(rabbit_dir "$n")/log"
}

rabbit_join() { # joins node N to hl1 unless it already is a member
  local n=$1
  if ctl 1 cluster_status --formatter json 2>/dev/null | grep -q "\"$(rabbit_node "$n")\""; then return 0; fi
  log "joining $(rabbit_node "$n") to $(rabbit_node 1)"
  ctl "$n" stop_app >/dev/null
  ctl "$n" reset >/dev/null
  ctl "$n" join_cluster "$(rabbit_node 1)" >/dev/null 2>&1
  ctl "$n" start_app >/dev/null
}

rabbit_kill() {
  local n=$1 pidfile
  pidfile="$(rabbit_dir "$n")/pid"
  [ -s "$pidfile" ] || die "node $n has no pid file"
  log "SIGKILL RabbitMQ node $(rabbit_node "$n") (pid $(cat "$pidfile"))"
  kill -9 "$(cat "$pidfile")" 2>/dev/null || true
  for _ in $(seq 50); do port_open "$(rabbit_port "$n")" || return 0; sleep 0.1; done
  die "node $n still listens after SIGKILL"
}

rabbit_stop() {
  local n=$1 pidfile
  pidfile="$(rabbit_dir "$n")/pid"
  if rabbit_running "$n"; then ctl "$n" stop >/dev/null 2>&1 || true; fi
  if [ -s "$pidfile" ]; then kill -9 "$(cat "$pidfile")" 2>/dev/null || true; fi
}

rabbit_leader() { # rabbit-leader QUEUE: prints N of the node holding the leader
  local q=$1 n line
  for n in 1 2 3; do
    rabbit_running "$n" || continue
    line=$(ctl "$n" list_queues name leader --no-table-headers 2>/dev/null | awk -F'\t' -v q="$q" '$1 == q {print $2}')
    if [ -n "$line" ]; then echo "${line#hl}" | cut -d@ -f1; return 0; fi
  done
  die "no running node knows a leader for $q"
}

# -------------------------------------------------------------------------------------------------- PostgreSQL
pg_dir() { echo "$DIR/pg/$1"; }
as_pg() { runuser -u postgres -- "$@"; }
psql_at() { # psql_at PORT SQL
  "$PGBIN/psql" -h 127.0.0.1 -p "$1" -U postgres -d postgres -Atqc "$2"
}
other() { if [ "$1" = a ]; then echo b; else echo a; fi; }
pg_primary() { cat "$DIR/pg/primary"; }

# Settings that differ between the two nodes live in node.conf, rewritten after every copy of the data directory
# (pg_basebackup and pg_rewind copy the source's configuration files).
pg_node_conf() {
  local node=$1
  cat >"$(pg_dir "$node")/node.conf" <<EOF
port = ${PG_PORT[$node]}
cluster_name = 'hookline-$node'
EOF
  chown postgres:postgres "$(pg_dir "$node")/node.conf"
}

pg_start() {
  local node=$1
  if as_pg "$PGBIN/pg_ctl" -D "$(pg_dir "$node")" status >/dev/null 2>&1; then return 0; fi
  log "starting PostgreSQL node $node on 127.0.0.1:${PG_PORT[$node]}"
  as_pg "$PGBIN/pg_ctl" -D "$(pg_dir "$node")" -l "$DIR/pg/$node.log" -w -t 120 start >/dev/null
}

pg_stop() {
  local node=$1 mode=${2:-fast}
  if [ -d "$(pg_dir "$node")" ] && as_pg "$PGBIN/pg_ctl" -D "$(pg_dir "$node")" status >/dev/null 2>&1; then
    log "stopping PostgreSQL node $node (-m $mode)"
    as_pg "$PGBIN/pg_ctl" -D "$(pg_dir "$node")" -m "$mode" -w -t 120 stop >/dev/null
  fi
}

# Makes the standby of `primary` synchronous: a commit on the primary returns only once the standby has flushed
# its WAL (synchronous_commit = on, the default), so whatever hookline acknowledged survives a failover.
pg_sync_on() {
  local primary=$1
  psql_at "${PG_PORT[$primary]}" "ALTER SYSTEM SET synchronous_standby_names = '*'" >/dev/null
  psql_at "${PG_PORT[$primary]}" "SELECT pg_reload_conf()" >/dev/null
}

pg_wait_streaming() {
  local primary=$1
  for _ in $(seq 120); do
    if [ "$(psql_at "${PG_PORT[$primary]}" "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null)" = 1 ]; then
      return 0
    fi
    sleep 0.5
  done
  die "no standby is streaming from node $primary"
}

pg_basebackup_into() { # pg_basebackup_into NODE FROM
  local node=$1 from=$2 d
  d=$(pg_dir "$node")
  rm -rf "$d"
  log "pg_basebackup of node $from into node $node"
  as_pg "$PGBIN/pg_basebackup" -h 127.0.0.1 -p "${PG_PORT[$from]}" -U postgres -D "$d" -X stream -c fast \
    -R -d "host=127.0.0.1 port=${PG_PORT[$from]} user=postgres application_name=$node"
  pg_node_conf "$node"
}

pg_up() {
  mkdir -p "$DIR/pg/run"
  chown postgres:postgres "$DIR/pg" "$DIR/pg/run"
  if [ ! -f "$DIR/pg/primary" ]; then
    local d
    d=$(pg_dir a)
    rm -rf "$d" "$(pg_dir b)"
    log "initdb node a"
    as_pg "$PGBIN/initdb" -D "$d" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >>"$d/postgresql.conf" <<EOF
# --- hookline cluster (deploy/cluster.sh) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$DIR/pg/run'
max_connections = 300
shared_buffers = 64MB
wal_level = replica
max_wal_senders = 8
wal_keep_size = 512MB
# pg_rewind needs hint-bit changes in the WAL (or data checksums).
wal_log_hints = on
hot_standby = on
# The guarantee "an acknowledged event survives a failover" rests on these two: a commit waits until a standby
# has flushed it. synchronous_standby_names is set by pg_sync_on once a standby streams, and emptied on the
# promoted node until the old primary has rejoined (otherwise every commit would wait for a standby that is gone).
synchronous_commit = on
synchronous_standby_names = ''
include_if_exists = 'node.conf'
EOF
    cat >"$d/pg_hba.conf" <<EOF
local all all trust
host all all 127.0.0.1/32 trust
host replication all 127.0.0.1/32 trust
EOF
    pg_node_conf a
    chown -R postgres:postgres "$d"
    pg_start a
    echo a >"$DIR/pg/primary"
  fi
  local primary standby
  primary=$(pg_primary)
  standby=$(other "$primary")
  pg_start "$primary"
  if [ ! -d "$(pg_dir "$standby")" ]; then
    pg_basebackup_into "$standby" "$primary"
  fi
  pg_start "$standby"
  pg_wait_streaming "$primary"
  pg_sync_on "$primary"
}

pg_promote() {
  local old new
  old=$(pg_primary)
  new=$(other "$old")
  log "promoting node $new"
  as_pg "$PGBIN/pg_ctl" -D "$(pg_dir "$new")" -w -t 60 promote >/dev/null
  for _ in $(seq 120); do
    [ "$(psql_at "${PG_PORT[$new]}" "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ] && break
    sleep 0.25
  done
  [ "$(psql_at "${PG_PORT[$new]}" "SELECT pg_is_in_recovery()")" = f ] || die "node $new did not leave recovery"
  # Alone until pg-rejoin: commits must not wait for a standby that is not there. This is the window in which an
  # acknowledged write lives on one node only (see deploy/SCALING.md).
  psql_at "${PG_PORT[$new]}" "ALTER SYSTEM SET synchronous_standby_names = ''" >/dev/null
  psql_at "${PG_PORT[$new]}" "SELECT pg_reload_conf()" >/dev/null
  echo "$new" >"$DIR/pg/primary"
}

pg_rejoin() {
  local primary old d
  primary=$(pg_primary)
  old=$(other "$primary")
  d=$(pg_dir "$old")
  pg_stop "$old" fast
  # A freshly promoted node records its new timeline in pg_control only at its next checkpoint; until then
  # pg_rewind sees "the same timeline" and rewinds nothing, leaving the old primary's unreplicated tail in place.
  psql_at "${PG_PORT[$primary]}" "CHECKPOINT" >/dev/null
  log "pg_rewind node $old onto the new primary $primary"
  if as_pg "$PGBIN/pg_rewind" -D "$d" -R \
    --source-server="host=127.0.0.1 port=${PG_PORT[$primary]} user=postgres dbname=postgres" \
    >>"$DIR/pg/$old.rewind.log" 2>&1; then
    # -R wrote standby.signal and primary_conninfo; name this standby and put its own port back.
    echo "primary_conninfo = 'host=127.0.0.1 port=${PG_PORT[$primary]} user=postgres application_name=$old'" \
      >>"$d/postgresql.auto.conf"
    pg_node_conf "$old"
  else
    log "pg_rewind failed (see $DIR/pg/$old.rewind.log); taking a fresh base backup"
    pg_basebackup_into "$old" "$primary"
  fi
  pg_start "$old"
  pg_wait_streaming "$primary"
  pg_sync_on "$primary"
}

# ----------------------------------------------------------------------------------------------------- HAProxy
haproxy_up() {
  if ! command -v haproxy >/dev/null 2>&1; then
    log "installing haproxy (Debian)"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq haproxy >/dev/null ||
      { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq haproxy >/dev/null; }
  fi
  if [ -s "$DIR/haproxy.pid" ] && kill -0 "$(cat "$DIR/haproxy.pid")" 2>/dev/null; then return 0; fi
  # The check: a node is "up" for the proxy only if it accepts a connection AND is not in recovery, so the proxy
  # never sends a write to a standby. HAProxy runs it with the server's address and port as $3 and $4.
  cat >"$DIR/pg-is-primary.sh" <<EOF
#!/bin/sh
[ "\$("$PGBIN/psql" -h "\$3" -p "\$4" -U postgres -d postgres -Atqc 'SELECT pg_is_in_recovery()' 2>/dev/null)" = f ]
EOF
  chmod 755 "$DIR/pg-is-primary.sh"
  cat >"$DIR/haproxy.cfg" <<EOF
global
  maxconn 2000
  pidfile $DIR/haproxy.pid
  daemon
  external-check
  insecure-fork-wanted

defaults
  mode tcp
  timeout connect 2s
  # Pooled database connections sit idle for minutes; the pools' own idle timeout (300 s) is shorter.
  timeout client 10m
  timeout server 10m
  timeout check 2s

listen postgres
  bind 127.0.0.1:$PROXY_PORT
  option external-check
  external-check path "/usr/bin:/bin"
  external-check command $DIR/pg-is-primary.sh
  # Checked every 500 ms; two failures take a node out (and cut its sessions), two successes put it back.
  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
  server a 127.0.0.1:${PG_PORT[a]} check
  server b 127.0.0.1:${PG_PORT[b]} check
EOF
  log "starting HAProxy on 127.0.0.1:$PROXY_PORT"
  haproxy -f "$DIR/haproxy.cfg" -c -q
  haproxy -f "$DIR/haproxy.cfg"
  for _ in $(seq 60); do
    [ "$(psql_at "$PROXY_PORT" "SELECT pg_is_in_recovery()" 2>/dev/null)" = f ] && return 0
    sleep 0.5
  done
  die "the proxy on $PROXY_PORT does not reach the primary"
}

haproxy_down() {
  if [ -s "$DIR/haproxy.pid" ]; then kill "$(cat "$DIR/haproxy.pid")" 2>/dev/null || true; fi
}

# ------------------------------------------------------------------------------------------------------- verbs
amqp_urls() {
  local sep=""
  printf '['
  for n in 1 2 3; do printf '%s"amqp://guest:guest@127.0.0.1:%s/%%2f"' "$sep" "$(rabbit_port "$n")"; sep=", "; done
  printf ']'
}

cmd_env() {
  echo "export HOOKLINE_CLUSTER_AMQP_URLS='$(amqp_urls)'"
  echo "export HOOKLINE_CLUSTER_PG='postgres://postgres@127.0.0.1:$PROXY_PORT'"
  echo "export HOOKLINE_CLUSTER_RABBIT_NODES='$(rabbit_node 1) $(rabbit_node 2) $(rabbit_node 3)'"
}

cmd_up() {
  mkdir -p "$DIR/rabbit" "$DIR/pg"
  chmod 755 "$DIR"
  for n in 1 2 3; do rabbit_start "$n"; done
  for n in 1 2 3; do rabbit_wait "$n"; done
  for n in 2 3; do rabbit_join "$n"; done
  pg_up
  haproxy_up
  log "up: RabbitMQ $(rabbit_node 1) $(rabbit_node 2) $(rabbit_node 3) on 5701-5703; PostgreSQL primary $(pg_primary) behind 127.0.0.1:$PROXY_PORT"
  cmd_env
}

cmd_down() {
  haproxy_down
  for node in a b; do pg_stop "$node" immediate || true; done
  for n in 1 2 3; do rabbit_stop "$n"; done
  rm -rf "$DIR"
  log "down"
}

cmd_status() {
  for n in 1 2 3; do
    if rabbit_running "$n"; then echo "rabbit $(rabbit_node "$n") 127.0.0.1:$(rabbit_port "$n") running"; else echo "rabbit $(rabbit_node "$n") down"; fi
  done
  for n in 1 2 3; do
    if rabbit_running "$n"; then
      echo "running cluster members: $(ctl "$n" eval 'rabbit_nodes:all_running().')"
      ctl "$n" list_queues name type leader members --no-table-headers | grep quorum || true
      break
    fi
  done
  for node in a b; do
    printf 'postgres %s 127.0.0.1:%s ' "$node" "${PG_PORT[$node]}"
    case "$(psql_at "${PG_PORT[$node]}" "SELECT pg_is_in_recovery()" 2>/dev/null)" in
      f) echo primary ;;
      t) echo standby ;;
      *) echo down ;;
    esac
  done
  printf 'proxy 127.0.0.1:%s -> ' "$PROXY_PORT"
  psql_at "$PROXY_PORT" "SELECT inet_server_port()" 2>/dev/null || echo "no primary"
}

verb=${1:-}
case "$verb" in
  up) cmd_up ;;
  down) cmd_down ;;
  status) cmd_status ;;
  env) cmd_env ;;
  rabbit-kill) rabbit_kill "${2:?node 1-3}" ;;
  rabbit-start) rabbit_start "${2:?node 1-3}"; rabbit_wait "$2" ;;
  rabbit-leader) rabbit_leader "${2:?queue name}" ;;
  pg-primary) pg_primary ;;
  pg-stop-primary) pg_stop "$(pg_primary)" immediate ;;
  pg-promote) pg_promote ;;
  pg-rejoin) pg_rejoin ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
