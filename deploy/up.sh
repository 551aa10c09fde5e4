#!/usr/bin/env bash
# Brings the whole local pipeline up: services found or started (installed if absent), release build, database
# migrated, then the provider sandbox, the edge (with its relay) and the worker started in the background. Logs
# and pids go to .run/. Stop with deploy/down.sh.
# Usage: deploy/up.sh [CONFIG]   (default deploy/hookline.toml)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-deploy/hookline.toml}

bash deploy/services.sh
# Only the three service packages: building the whole workspace would compile in the tests' fail points.
cargo build --release --locked -p hookline-edge -p hookline-worker -p hookline-cli
mkdir -p .run
./target/release/hookline --config "$config" migrate

start() {
  local name=$1; shift
  if [ -f ".run/$name.pid" ] && kill -0 "$(cat ".run/$name.pid")" 2>/dev/null; then
    echo "$name already running (pid $(cat ".run/$name.pid"))"; return
  fi
  nohup "$@" >".run/$name.log" 2>&1 &
  echo $! >".run/$name.pid"
  echo "started $name (pid $!), log .run/$name.log"
}

# The local provider (Stripe and Mercado Pago APIs + their webhooks), which the configuration's api_base points at
# (SANDBOX_LISTEN must match it; empty: no sandbox, e.g. against real providers).
sandbox_listen=${SANDBOX_LISTEN-127.0.0.1:8090}
if [ -n "$sandbox_listen" ]; then
  start sandbox ./target/release/hookline --config "$config" sandbox --listen "$sandbox_listen"
fi
start edge ./target/release/hookline-edge --config "$config"
start worker ./target/release/hookline-worker --config "$config"

listen=$(sed -n 's/^listen *= *"\(.*\)"/\1/p' "$config" | head -n 1)
listen=${listen:-127.0.0.1:8080}
# GET /readyz without depending on curl (a fresh machine may not have it).
ready() {
  local host=${listen%:*} port=${listen##*:}
  exec 3<>"/dev/tcp/$host/$port" 2>/dev/null || return 1
  printf 'GET /readyz HTTP/1.0\r\nHost: %s\r\n\r\n' "$listen" >&3
  local status
  read -r -t 2 status <&3 || status=""
  exec 3<&- 3>&-
  [[ $status == *" 200 "* ]]
}
for _ in $(seq 50); do
  if ready; then
    echo "hookline is up: POST http://$listen/webhooks/{provider}"; exit 0
  fi
  sleep 0.2
done
echo "edge did not become ready; see .run/edge.log" >&2; exit 1
