#!/usr/bin/env bash
# Brings the whole local pipeline up: services found or started (installed if absent), release build, database
# migrated, then the provider sandbox, the edge (with its relay), the worker and the operator console (its own
# process: an operator-facing flood can never slow a webhook ack) started in the background. Logs and pids go to
# .run/. Stop with deploy/down.sh.
#
# The console gets a first operator, `operator`, with a password generated here and printed ONCE at the end
# (it is stored nowhere; its Argon2 hash goes into .run/hookline.toml = CONFIG + a [console] section, mode 600,
# never into the committed deploy/hookline.toml). Each start of the console by this script makes a new one.
# CONSOLE_LISTEN (default 127.0.0.1:8070) moves it; empty: no console. A CONFIG with its own [console]
# section is used as it is (its operators, no generated password).
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

# The operator console: its own process on its own configuration file.
console_listen=${CONSOLE_LISTEN-127.0.0.1:8070}
console_password=""
if grep -q '^\[console\]' "$config"; then
  console_listen=$(sed -n '/^\[console\]/,/^\[/s/^listen *= *"\(.*\)"/\1/p' "$config" | head -n 1)
  console_listen=${console_listen:-127.0.0.1:8070}
  start console ./target/release/hookline --config "$config" console serve
elif [ -n "$console_listen" ]; then
  if [ -f .run/console.pid ] && kill -0 "$(cat .run/console.pid)" 2>/dev/null; then
    echo "console already running (pid $(cat .run/console.pid)); its password was printed when it started"
  else
    # 18 bytes (144 bits) from the kernel's generator as hex: pastes anywhere. `od -N` reads exactly that much
    # (no `tr </dev/urandom | head`, whose SIGPIPE would stop this script under pipefail).
    console_password=$(od -An -N18 -tx1 /dev/urandom | tr -d ' \n')
    hash=$(printf '%s\n' "$console_password" | ./target/release/hookline console hash-password)
    (
      umask 077
      {
        cat "$config"
        printf '\n# Added by deploy/up.sh: the operator console (hookline console serve) and its first operator.\n'
        printf '[console]\nlisten = "%s"\n\n[[console.operators]]\nname = "operator"\npassword_hash = "%s"\n' \
          "$console_listen" "$hash"
      } >.run/hookline.toml
    )
    start console ./target/release/hookline --config .run/hookline.toml console serve
  fi
fi

listen=$(sed -n 's/^listen *= *"\(.*\)"/\1/p' "$config" | head -n 1)
listen=${listen:-127.0.0.1:8080}
# `GET PATH` on ADDRESS answers 200, without depending on curl (a fresh machine may not have it).
answers_200() {
  local address=$1 path=$2 host=${1%:*} port=${1##*:}
  exec 3<>"/dev/tcp/$host/$port" 2>/dev/null || return 1
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$address" >&3
  local status
  read -r -t 2 status <&3 || status=""
  exec 3<&- 3>&-
  [[ $status == *" 200 "* ]]
}
up=""
for _ in $(seq 50); do
  if answers_200 "$listen" /readyz; then up=1; break; fi
  sleep 0.2
done
[ -n "$up" ] || { echo "edge did not become ready; see .run/edge.log" >&2; exit 1; }
echo "hookline is up: POST http://$listen/webhooks/{provider}"
if [ -n "$console_listen" ]; then
  up=""
  for _ in $(seq 50); do
    if answers_200 "$console_listen" /healthz; then up=1; break; fi
    sleep 0.2
  done
  [ -n "$up" ] || { echo "console did not become healthy; see .run/console.log" >&2; exit 1; }
  echo "operator console: http://$console_listen/"
  if [ -n "$console_password" ]; then
    echo "  operator: operator   password: $console_password"
    echo "  (printed this once and stored nowhere; deploy/down.sh then deploy/up.sh makes a new one)"
  fi
fi
