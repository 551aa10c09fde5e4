#!/usr/bin/env bash
# A scaled-out hookline backend on ONE machine, for trying and testing failover locally:
#   - a RabbitMQ cluster of three nodes: hl1@localhost, hl2@localhost, hl3@localhost, AMQP on 127.0.0.1:5701-5703,
#     Erlang distribution on 25701-25703, no management plugin, each with its own data and log directories;
#   - an etcd cluster of three members (e1-e3, clients on 127.0.0.1:23791-23793, peers on 23801-23803);
#   - PostgreSQL 15 under Patroni: three nodes a, b, c on 127.0.0.1:5441-5443 (Patroni's REST API on 8441-8443),
#     synchronous_mode (strict), pg_rewind; Patroni promotes and rejoins by itself (docs/scaling.md);
#   - HAProxy on 127.0.0.1:5440, which routes only to the node whose Patroni answers 200 on GET /primary.
# Everything lives under $HOOKLINE_CLUSTER_DIR (default /tmp/hookline-cluster). The machine's default RabbitMQ node
# (rabbit@localhost, 5672) and PostgreSQL (5432) are not touched. The RabbitMQ nodes run as the `rabbitmq` user
# and share its Erlang cookie (/var/lib/rabbitmq/.erlang.cookie, i.e. ~rabbitmq/.erlang.cookie), so the usual
# `rabbitmqctl -n hl1@localhost …` reaches them; etcd runs as `etcd`, Patroni and PostgreSQL as `postgres`. Needs
# root. Installs Debian's patroni, etcd-server, etcd-client, haproxy and curl when missing, and refuses a Patroni
# other than 3.0.x or an etcd other than 3.4.x (the versions it was tested with).
#
# Usage: deploy/cluster.sh VERB [ARG]
#   up                 create and start everything; idempotent
#   down               stop everything and delete $HOOKLINE_CLUSTER_DIR
#   status             RabbitMQ nodes and queue leaders, etcd members, each PostgreSQL node's role, state and lag
#                      (`patronictl list`), where the proxy routes
#   env                the settings hookline needs (amqp_urls, database_url) as shell exports
#   rabbit-kill N      SIGKILL RabbitMQ node N (1-3)
#   rabbit-start N     start node N again (it rejoins the cluster) and wait until it runs
#   rabbit-leader Q    the node (1-3) holding the leader of quorum queue Q
#   pg-primary         the node (a|b|c) whose Patroni answers 200 on /primary
#   pg-sync-standby    the node (a|b|c) whose Patroni answers 200 on /sync (the synchronous standby)
#   pg-kill-primary    SIGKILL the primary's postmaster (Patroni fails over, then rejoins the node); prints the node
#   pg-kill-node N     SIGKILL node N's Patroni and postmaster (the leader key expires after ttl)
#   pg-start N         start node N's Patroni again (it rejoins as a replica by itself)
#   pg-streaming N     succeeds when node N is a replica streaming WAL
#   pg-switchover [N]  planned move of the primary (to node N, or to the synchronous standby):
#                      `patronictl -c $HOOKLINE_CLUSTER_DIR/pg/patroni-a.yml switchover --force`
#   etcd-kill N        SIGKILL etcd member N (1-3)
#   etcd-start N       start etcd member N again
set -euo pipefail

DIR=${HOOKLINE_CLUSTER_DIR:-/tmp/hookline-cluster}
PGBIN=${HOOKLINE_PGBIN:-/usr/lib/postgresql/15/bin}
RABBIT_BIN=/usr/lib/rabbitmq/bin
PROXY_PORT=5440
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

# ------------------------------------------------------------------------------------------------ etcd (3 members)
# Patroni's store: three etcd members e1-e3, clients on 127.0.0.1:23791-23793, peers on 23801-23803. Patroni keeps
# the leader key there (a lease of `ttl` seconds); a majority (2 of 3) must be up for it to be written.
ETCD_CLIENT_BASE=23790
ETCD_PEER_BASE=23800
etcd_dir() { echo "$DIR/etcd/e$1"; }
etcd_client_url() { echo "http://127.0.0.1:$((ETCD_CLIENT_BASE + $1))"; }
etcd_endpoints() { echo "127.0.0.1:$((ETCD_CLIENT_BASE + 1)),127.0.0.1:$((ETCD_CLIENT_BASE + 2)),127.0.0.1:$((ETCD_CLIENT_BASE + 3))"; }
etcd_initial_cluster() {
  local n sep="" out=""
  for n in 1 2 3; do out="$out${sep}e$n=http://127.0.0.1:$((ETCD_PEER_BASE + n))"; sep=,; done
  echo "$out"
}
etcdctl_() { ETCDCTL_API=3 etcdctl --endpoints="$(etcd_endpoints)" --command-timeout=3s "$@"; }
# Whether the process whose pid is in file $1 runs (a killed process not yet reaped, state Z, does not).
pid_alive() {
  local state
  [ -s "$1" ] || return 1
  state=$(ps -o stat= -p "$(cat "$1")" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "${state#Z}" = "$state" ]
}

etcd_start() {
  local n=$1 d
  d=$(etcd_dir "$n")
  if pid_alive "$d.pid"; then return 0; fi
  local state=new
  [ -d "$d/member" ] && state=existing
  mkdir -p "$d"
  chown -R etcd:etcd "$DIR/etcd"
  chmod 700 "$d"
  log "starting etcd member e$n on $(etcd_client_url "$n")"
  # setsid: the member outlives the shell (and a test) that started it; its pid is the one in e$n.pid.
  setsid setpriv --reuid=etcd --regid=etcd --init-groups -- etcd \
    --name "e$n" --data-dir "$d" \
    --listen-client-urls "$(etcd_client_url "$n")" --advertise-client-urls "$(etcd_client_url "$n")" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PEER_BASE + n))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PEER_BASE + n))" \
    --initial-cluster "$(etcd_initial_cluster)" --initial-cluster-state "$state" \
    --initial-cluster-token hookline-cluster \
    >>"$DIR/etcd/e$n.log" 2>&1 </dev/null &
  echo $! >"$d.pid"
}

etcd_wait() { # etcd_wait [N]: until every member (or member N) answers healthy
  local endpoints
  endpoints=$(etcd_endpoints)
  [ -n "${1:-}" ] && endpoints=$(etcd_client_url "$1")
  for _ in $(seq 120); do
    if ETCDCTL_API=3 etcdctl --endpoints="$endpoints" --command-timeout=3s endpoint health >/dev/null 2>&1; then
      return 0
    fi
    sleep 0.5
  done
  die "etcd ${1:+member e$1 }is not healthy; see $DIR/etcd/*.log"
}

etcd_kill() {
  local n=$1 d
  d=$(etcd_dir "$n")
  pid_alive "$d.pid" || die "etcd member e$n is not running"
  log "SIGKILL etcd member e$n (pid $(cat "$d.pid"))"
  kill -9 "$(cat "$d.pid")"
  for _ in $(seq 50); do
    if ! pid_alive "$d.pid" && ! port_open "$((ETCD_CLIENT_BASE + n))"; then return 0; fi
    sleep 0.1
  done
  die "etcd member e$n still runs after SIGKILL"
}

etcd_stop() {
  local n=$1 d
  d=$(etcd_dir "$n")
  if pid_alive "$d.pid"; then kill "$(cat "$d.pid")" 2>/dev/null || true; fi
}

# ---------------------------------------------------------------------------------- PostgreSQL under Patroni
# Three nodes a, b, c: PostgreSQL on 127.0.0.1:5441-5443, Patroni's REST API on 8441-8443. Patroni bootstraps the
# first node (initdb), clones the others from it (pg_basebackup), keeps exactly one primary, promotes the
# synchronous standby when the primary is gone and rewinds (pg_rewind) a node that comes back.
PG_NODES="a b c"
declare -A PG_PORT=([a]=5441 [b]=5442 [c]=5443)
declare -A REST_PORT=([a]=8441 [b]=8442 [c]=8443)
# The timing Patroni promises (docs/scaling.md): the leader key lives TTL s unless renewed; each member runs its
# loop every LOOP_WAIT s; a store or PostgreSQL call is retried for RETRY_TIMEOUT s before the primary demotes
# itself. Patroni requires TTL >= LOOP_WAIT + 2 * RETRY_TIMEOUT.
PATRONI_TTL=12
PATRONI_LOOP_WAIT=2
PATRONI_RETRY_TIMEOUT=5

pg_dir() { echo "$DIR/pg/$1"; }
patroni_yml() { echo "$DIR/pg/patroni-$1.yml"; }
psql_at() { # psql_at PORT SQL
  "$PGBIN/psql" -h 127.0.0.1 -p "$1" -U postgres -d postgres -Atqc "$2"
}
patronictl_() { patronictl -c "$(patroni_yml a)" "$@"; }
# The HTTP status of Patroni's REST API of NODE at PATH (000 when it does not answer).
rest_status() { curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:${REST_PORT[$1]}$2" || true; }

# The versions this script was written and tested against (Debian 12's): a major version change of Patroni or
# etcd is a change to review, not to take silently.
PATRONI_SERIES=3.0
ETCD_SERIES=3.4
pg_packages() {
  local missing=()
  command -v patroni >/dev/null 2>&1 || missing+=(patroni)
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v etcdctl >/dev/null 2>&1 || missing+=(etcd-client)
  command -v haproxy >/dev/null 2>&1 || missing+=(haproxy)
  command -v curl >/dev/null 2>&1 || missing+=(curl)
  if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]} (Debian)"
    # Debian starts no etcd of its own here unless systemd runs; where it does, that one listens on 2379, not ours.
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null ||
      { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${missing[@]}" >/dev/null; }
  fi
  local v
  v=$(patroni --version 2>/dev/null | awk '{print $2}')
  case "$v" in "$PATRONI_SERIES".*) ;; *) die "Patroni $v installed; this script is for Patroni $PATRONI_SERIES.x" ;; esac
  v=$(etcd --version 2>/dev/null | awk '/^etcd Version:/ {print $3}')
  case "$v" in "$ETCD_SERIES".*) ;; *) die "etcd $v installed; this script is for etcd $ETCD_SERIES.x" ;; esac
}

patroni_conf() {
  local node=$1
  cat >"$(patroni_yml "$node")" <<EOF
# Written by deploy/cluster.sh. Node $node of the Patroni cluster "hookline".
scope: hookline
namespace: /hookline-cluster/
name: $node
log:
  level: INFO
restapi:
  listen: 127.0.0.1:${REST_PORT[$node]}
  connect_address: 127.0.0.1:${REST_PORT[$node]}
etcd3:
  hosts: $(etcd_endpoints)
bootstrap:
  # The cluster-wide settings, written to etcd once by the member that bootstraps; later changes go through
  # \`patronictl edit-config\`.
  dcs:
    ttl: $PATRONI_TTL
    loop_wait: $PATRONI_LOOP_WAIT
    retry_timeout: $PATRONI_RETRY_TIMEOUT
    # A crashed primary is not restarted in place: fail over at once to the synchronous standby (it has every
    # acknowledged commit), then the old node rejoins as a replica.
    primary_start_timeout: 0
    # Commits wait for one synchronous standby, and only that standby may be promoted (Patroni records it in
    # etcd). Strict: with no standby left, commits wait (hookline answers 503) instead of being acknowledged on
    # one node only. See docs/scaling.md.
    synchronous_mode: true
    synchronous_mode_strict: true
    synchronous_node_count: 1
    # With etcd's majority gone, the primary keeps running as long as it reaches every other member's REST API
    # (instead of demoting itself); nothing can be promoted meanwhile.
    failsafe_mode: true
    postgresql:
      use_pg_rewind: true
      use_slots: true
      parameters:
        max_connections: 300
        shared_buffers: 64MB
        wal_level: replica
        wal_log_hints: "on"
        max_wal_senders: 10
        max_replication_slots: 10
        wal_keep_size: 256MB
        hot_standby: "on"
        synchronous_commit: "on"
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - auth: trust
postgresql:
  listen: 127.0.0.1:${PG_PORT[$node]}
  connect_address: 127.0.0.1:${PG_PORT[$node]}
  data_dir: $(pg_dir "$node")
  bin_dir: $PGBIN
  pgpass: $DIR/pg/$node.pgpass
  authentication:
    superuser:
      username: postgres
      password: hookline-local
    replication:
      username: replicator
      password: hookline-local
  parameters:
    unix_socket_directories: $DIR/pg/run-$node
    logging_collector: "on"
    log_directory: $DIR/pg
    log_filename: $node.log
    log_file_mode: "0644"
    cluster_name: hookline-$node
  pg_hba:
    - local all all trust
    - host all all 127.0.0.1/32 trust
    - host replication all 127.0.0.1/32 trust
  # A node whose rewind fails, or whose timeline diverged beyond rewinding, is cloned afresh instead of staying out.
  remove_data_directory_on_rewind_failure: true
  remove_data_directory_on_diverged_timelines: true
watchdog:
  # One machine, no /dev/watchdog: see docs/scaling.md for production.
  mode: off
EOF
  chown postgres:postgres "$(patroni_yml "$node")"
  chmod 600 "$(patroni_yml "$node")"
}

patroni_start() {
  local node=$1
  if pid_alive "$DIR/pg/patroni-$node.pid"; then return 0; fi
  patroni_conf "$node"
  log "starting Patroni node $node (PostgreSQL 127.0.0.1:${PG_PORT[$node]}, REST 127.0.0.1:${REST_PORT[$node]})"
  (
    cd "$DIR/pg" || exit 1
    setsid setpriv --reuid=postgres --regid=postgres --init-groups -- \
      patroni "$(patroni_yml "$node")" >>"$DIR/pg/patroni-$node.log" 2>&1 </dev/null &
    echo $! >"$DIR/pg/patroni-$node.pid"
  )
}

patroni_stop() {
  local node=$1 pidfile="$DIR/pg/patroni-$1.pid"
  if pid_alive "$pidfile"; then
    log "stopping Patroni node $node"
    kill "$(cat "$pidfile")" 2>/dev/null || true
    for _ in $(seq 60); do pid_alive "$pidfile" || break; sleep 0.5; done
    if pid_alive "$pidfile"; then kill -9 "$(cat "$pidfile")" 2>/dev/null || true; fi
  fi
  # A postmaster left behind (Patroni SIGKILLed) is stopped too.
  local d
  d=$(pg_dir "$node")
  if [ -s "$d/postmaster.pid" ] && kill -0 "$(head -1 "$d/postmaster.pid")" 2>/dev/null; then
    kill -9 "$(head -1 "$d/postmaster.pid")" 2>/dev/null || true
  fi
}

# The node whose Patroni answers 200 on /primary: the one HAProxy routes to. Fails when there is none.
pg_primary() {
  local node
  for node in $PG_NODES; do
    if [ "$(rest_status "$node" /primary)" = 200 ]; then echo "$node"; return 0; fi
  done
  die "no node answers 200 on /primary"
}

# The node whose Patroni answers 200 on /sync: the synchronous standby. Fails when there is none.
pg_sync_standby() {
  local node
  for node in $PG_NODES; do
    if [ "$(rest_status "$node" /sync)" = 200 ]; then echo "$node"; return 0; fi
  done
  die "no node answers 200 on /sync"
}

# Whether NODE is a replica whose WAL receiver is streaming (from whichever node is primary).
pg_streaming() {
  local node=$1
  [ "$(psql_at "${PG_PORT[$node]}" "SELECT count(*) FROM pg_stat_wal_receiver WHERE status = 'streaming'" 2>/dev/null)" = 1 ]
}

pg_wait_ready() {
  local node
  for _ in $(seq 240); do
    local primary="" replicas=0
    for node in $PG_NODES; do
      [ "$(rest_status "$node" /primary)" = 200 ] && primary=$node
      pg_streaming "$node" && replicas=$((replicas + 1))
    done
    # Ready: a primary, both others streaming, and a synchronous standby chosen (commits would wait otherwise).
    if [ -n "$primary" ] && [ "$replicas" = 2 ] &&
      [ "$(psql_at "${PG_PORT[$primary]}" "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'" 2>/dev/null)" = 1 ]; then
      return 0
    fi
    sleep 0.5
  done
  die "the Patroni cluster did not come up with a primary and two streaming replicas; see $DIR/pg/patroni-*.log"
}

pg_up() {
  mkdir -p "$DIR/pg"
  local node
  for node in $PG_NODES; do mkdir -p "$DIR/pg/run-$node"; done
  chown postgres:postgres "$DIR/pg" "$DIR"/pg/run-*
  chmod 755 "$DIR/pg"
  # The first member bootstraps (whichever takes the initialize key); starting it alone first makes that "a".
  patroni_start a
  for _ in $(seq 240); do
    [ "$(rest_status a /primary)" = 200 ] && break
    [ -n "$(etcdctl_ get --prefix --keys-only /hookline-cluster/hookline/leader 2>/dev/null)" ] && break
    sleep 0.5
  done
  for node in $PG_NODES; do patroni_start "$node"; done
  pg_wait_ready
}

# SIGKILL of the primary's postmaster only: Patroni stays and sees its PostgreSQL gone.
pg_kill_primary() {
  local node d pid
  node=$(pg_primary)
  d=$(pg_dir "$node")
  pid=$(head -1 "$d/postmaster.pid")
  log "SIGKILL the postmaster of the primary $node (pid $pid)"
  kill -9 "$pid"
  echo "$node"
}

# SIGKILL of the whole node: Patroni first (no one is left to demote anything), then its postmaster.
pg_kill_node() {
  local node=$1 d
  d=$(pg_dir "$node")
  log "SIGKILL Patroni node $node and its postmaster"
  if pid_alive "$DIR/pg/patroni-$node.pid"; then kill -9 "$(cat "$DIR/pg/patroni-$node.pid")"; fi
  if [ -s "$d/postmaster.pid" ]; then kill -9 "$(head -1 "$d/postmaster.pid")" 2>/dev/null || true; fi
  for _ in $(seq 50); do pid_alive "$DIR/pg/patroni-$node.pid" || return 0; sleep 0.1; done
  die "Patroni node $node still runs after SIGKILL"
}

# A planned move of the primary (Patroni does it: the candidate must be a healthy synchronous standby).
pg_switchover() {
  local from to=${1:-}
  from=$(pg_primary)
  local args=(switchover hookline --primary "$from" --force)
  [ -n "$to" ] && args+=(--candidate "$to")
  log "switchover from $from${to:+ to $to}"
  patronictl_ "${args[@]}" >&2
}

# ----------------------------------------------------------------------------------------------------- HAProxy
# Routes to the node whose Patroni answers 200 on GET /primary (the leader-key holder running as primary): a
# replica, a node whose PostgreSQL is down and a primary that lost its key all answer 503.
haproxy_up() {
  if pid_alive "$DIR/haproxy.pid"; then return 0; fi
  {
    cat <<EOF
global
  maxconn 2000
  pidfile $DIR/haproxy.pid
  daemon

defaults
  mode tcp
  timeout connect 2s
  # Pooled database connections sit idle for minutes; the pools' own idle timeout (300 s) is shorter.
  timeout client 10m
  timeout server 10m
  timeout check 2s

listen postgres
  bind 127.0.0.1:$PROXY_PORT
  option httpchk GET /primary
  http-check expect status 200
  # Checked every 500 ms; two failures take a node out (and cut its sessions), two successes put it back.
  default-server inter 500ms fall 2 rise 2 on-marked-down shutdown-sessions
EOF
    for node in $PG_NODES; do
      echo "  server $node 127.0.0.1:${PG_PORT[$node]} check port ${REST_PORT[$node]}"
    done
  } >"$DIR/haproxy.cfg"
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
  mkdir -p "$DIR/rabbit" "$DIR/pg" "$DIR/etcd"
  chmod 755 "$DIR"
  pg_packages
  for n in 1 2 3; do etcd_start "$n"; done
  for n in 1 2 3; do rabbit_start "$n"; done
  etcd_wait
  for n in 1 2 3; do rabbit_wait "$n"; done
  for n in 2 3; do rabbit_join "$n"; done
  pg_up
  haproxy_up
  log "up: RabbitMQ $(rabbit_node 1) $(rabbit_node 2) $(rabbit_node 3) on 5701-5703; etcd on $(etcd_endpoints); PostgreSQL primary $(pg_primary) of a b c behind 127.0.0.1:$PROXY_PORT"
  cmd_env
}

cmd_down() {
  haproxy_down
  local node
  for node in $PG_NODES; do patroni_stop "$node" || true; done
  for n in 1 2 3; do etcd_stop "$n"; done
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
  for n in 1 2 3; do
    if ETCDCTL_API=3 etcdctl --endpoints="$(etcd_client_url "$n")" --command-timeout=2s endpoint health >/dev/null 2>&1; then
      echo "etcd e$n $(etcd_client_url "$n") healthy"
    else
      echo "etcd e$n $(etcd_client_url "$n") down"
    fi
  done
  # Each node's role, state, timeline and replication lag (MB behind the primary), as Patroni sees them.
  patronictl_ list 2>/dev/null || echo "patronictl list: no answer (etcd without a majority?)"
  for node in $PG_NODES; do
    echo "postgres $node 127.0.0.1:${PG_PORT[$node]} REST /primary $(rest_status "$node" /primary) /replica $(rest_status "$node" /replica)"
  done
  printf 'proxy 127.0.0.1:%s -> ' "$PROXY_PORT"
  psql_at "$PROXY_PORT" "SELECT inet_server_port()" 2>/dev/null || echo "no primary"
}

pg_node_arg() {
  case "${1:-}" in a | b | c) echo "$1" ;; *) die "a node: a, b or c" ;; esac
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
  pg-sync-standby) pg_sync_standby ;;
  pg-kill-primary) pg_kill_primary ;;
  pg-kill-node) pg_kill_node "$(pg_node_arg "${2:-}")" ;;
  pg-start) patroni_start "$(pg_node_arg "${2:-}")" ;;
  pg-streaming) pg_streaming "$(pg_node_arg "${2:-}")" ;;
  pg-switchover) pg_switchover "${2:-}" ;;
  etcd-kill) etcd_kill "${2:?member 1-3}" ;;
  etcd-start) etcd_start "${2:?member 1-3}"; etcd_wait "$2" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
