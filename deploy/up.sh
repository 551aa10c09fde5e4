#!/usr/bin/env bash
# Brings the whole local pipeline up: services found or started (installed if absent), optimised build, database
# migrated, then the provider sandbox, the edge (with its relay and the merchant API), the worker and the operator
# console (its own process: an operator-facing flood can never slow a webhook ack) started in the background. Logs
# and pids go to .run/. Stop with deploy/down.sh.
#
# Ports, none shared with another process this script starts: edge 8080 (CONFIG's edge.listen), merchant API 8081,
# console 8070, sandbox 8090, worker health and metrics 9091.
#
# Development credentials, generated here and printed ONCE at the end (to the terminal, never into .run/*.log):
# - the merchant API (served by the edge on its own listener) gets a client `dev` with a random key, printed as
#   `export HOOKLINE_API_KEY=…`. The edge reads its keys from its configuration, so the key is in
#   .run/hookline.toml (mode 600, removed by deploy/down.sh). API_LISTEN (default 127.0.0.1:8081) moves the API;
#   empty: no API. A CONFIG with its own [api] section is used as it is (its clients, no generated key).
# - the console gets a first operator, `operator`, with a generated password that is stored nowhere: only its
#   Argon2 hash goes into .run/hookline.toml. CONSOLE_LISTEN (default 127.0.0.1:8070) moves it; empty: no
#   console. A CONFIG with its own [console] section is used as it is (its operators, no generated password).
# .run/hookline.toml = CONFIG + the generated sections; the edge and the console run on it. A second run while the
# edge or the console is still running keeps that file and prints no new credentials (nothing is added, nothing
# fails); after deploy/down.sh the next run generates new ones.
#
# The build: the three service packages with [profile.quick] (release at opt-level 1) into $CARGO_TARGET_DIR/quick
# (default target/quick): 4 min 9 s cold on 2 idle cores, against 6 min 10 s for full release optimisation
# (docs/development.md, "Build time"). HOOKLINE_PROFILE chooses another:
#   quick    (default) as above;
#   release  [profile.release], target/release: the binaries to benchmark or to ship (the container images and
#            systemd units build these);
#   debug    the debug binaries built by `cargo build --workspace --bins` (what deploy/test.sh builds: the same
#            command here is then a no-op); the newcomer check (deploy/newcomer.sh) uses it in CI so that it costs
#            no second build.
# Usage: deploy/up.sh [CONFIG]   (default deploy/hookline.toml)
set -euo pipefail
cd "$(dirname "$0")/.."
config=${1:-deploy/hookline.toml}
profile=${HOOKLINE_PROFILE:-quick}
target_dir=${CARGO_TARGET_DIR:-target}

bash deploy/services.sh
case "$profile" in
  release)
    # Only the three service packages: building the whole workspace would compile in the tests' fail points.
    cargo build --release --locked -p hookline-edge -p hookline-worker -p hookline-cli ;;
  quick)
    # Release without the expensive optimisation passes ([profile.quick]): the first bring-up in about 4 minutes.
    cargo build --profile quick --locked -p hookline-edge -p hookline-worker -p hookline-cli ;;
  debug)
    # The same command as deploy/test.sh's (same features unified): nothing to rebuild after it.
    cargo build --workspace --bins --locked ;;
  *) echo "up.sh: HOOKLINE_PROFILE must be release, quick or debug, not '$profile'" >&2; exit 2 ;;
esac
bin=$target_dir/$profile
mkdir -p .run
"$bin/hookline" --config "$config" migrate

running() { [ -f ".run/$1.pid" ] && kill -0 "$(cat ".run/$1.pid")" 2>/dev/null; }
start() {
  local name=$1; shift
  if running "$name"; then
    echo "$name already running (pid $(cat ".run/$name.pid"))"; return
  fi
  nohup "$@" >".run/$name.log" 2>&1 &
  echo $! >".run/$name.pid"
  echo "started $name (pid $!), log .run/$name.log"
}
# The `listen` of CONFIG's [SECTION], empty when the section has none.
section_listen() {
  sed -n "/^\[$1\]/,/^\[/s/^listen *= *\"\(.*\)\"/\1/p" "$config" | head -n 1
}
has_section() { grep -q "^\[$1\]" "$config"; }
# 16 or 18 random bytes from the kernel's generator as hex: pastes anywhere. `od -N` reads exactly that much (no
# `tr </dev/urandom | head`, whose SIGPIPE would stop this script under pipefail).
random_hex() { od -An -N"$1" -tx1 /dev/urandom | tr -d ' \n'; }

# What CONFIG lacks and this script adds: the merchant API and the console, each unless CONFIG has its section or
# its *_LISTEN is set empty.
api_listen=${API_LISTEN-127.0.0.1:8081}
console_listen=${CONSOLE_LISTEN-127.0.0.1:8070}
add_api=""; add_console=""
if has_section api; then api_listen=$(section_listen api); elif [ -n "$api_listen" ]; then add_api=1; fi
if has_section console; then
  console_listen=$(section_listen console); console_listen=${console_listen:-127.0.0.1:8070}
elif [ -n "$console_listen" ]; then add_console=1; fi

run_config=$config
api_key=""; console_password=""; reused=""
if [ -n "$add_api$add_console" ]; then
  run_config=.run/hookline.toml
  if [ -f "$run_config" ] && { running edge || running console; }; then
    # The processes already run on this file: keep it (a second key or password would not be theirs).
    reused=1
  else
    # The secrets are made here, not inside the pipeline below: its first part runs in a subshell.
    if [ -n "$add_api" ]; then api_key=hl_dev_$(random_hex 16); fi
    if [ -n "$add_console" ]; then
      console_password=$(random_hex 18)
      hash=$(printf '%s\n' "$console_password" | "$bin/hookline" console hash-password)
    fi
    {
      cat "$config"
      printf '\n# Added by deploy/up.sh (development only; removed by deploy/down.sh).\n'
      if [ -n "$add_api" ]; then
        printf '# The merchant API (served by the edge on its own listener) and its development client.\n'
        printf '[api]\nlisten = "%s"\n\n[[api.clients]]\nname = "dev"\nkeys = ["%s"]\n\n' "$api_listen" "$api_key"
      fi
      if [ -n "$add_console" ]; then
        printf '# The operator console (hookline console serve) and its first operator.\n'
        printf '[console]\nlisten = "%s"\n\n[[console.operators]]\nname = "operator"\npassword_hash = "%s"\n' \
          "$console_listen" "$hash"
      fi
    } | (umask 077; cat >"$run_config.new")
    # Renamed into place: a process never reads half a file.
    mv "$run_config.new" "$run_config"
  fi
fi

# The local provider (Stripe and Mercado Pago APIs + their webhooks), which the configuration's api_base points at
# (SANDBOX_LISTEN must match it; empty: no sandbox, e.g. against real providers).
sandbox_listen=${SANDBOX_LISTEN-127.0.0.1:8090}
if [ -n "$sandbox_listen" ]; then
  start sandbox "$bin/hookline" --config "$config" sandbox --listen "$sandbox_listen"
fi
start edge "$bin/hookline-edge" --config "$run_config"
start worker "$bin/hookline-worker" --config "$config"
if [ -n "$console_listen" ]; then
  start console "$bin/hookline" --config "$run_config" console serve
fi

listen=$(sed -n 's/^listen *= *"\(.*\)"/\1/p' "$config" | head -n 1)
listen=${listen:-127.0.0.1:8080}
# `GET PATH` on ADDRESS answers STATUS, without depending on curl (a fresh machine may not have it).
answers() {
  local expected=$1 address=$2 path=$3 host=${2%:*} port=${2##*:}
  exec 3<>"/dev/tcp/$host/$port" 2>/dev/null || return 1
  printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$path" "$address" >&3
  local status
  read -r -t 2 status <&3 || status=""
  exec 3<&- 3>&-
  [[ $status == *" $expected "* ]]
}
# Polls until `answers` says yes, 10 s at most.
await() {
  local what=$1 log=$2; shift 2
  for _ in $(seq 50); do
    if answers "$@"; then return 0; fi
    sleep 0.2
  done
  echo "$what did not answer; see $log" >&2
  exit 1
}
await "the edge (/readyz)" .run/edge.log 200 "$listen" /readyz
echo "hookline is up: POST http://$listen/webhooks/{provider}"
if [ -n "$api_listen" ]; then
  # No key: the API's answer is 401, which proves it listens and authenticates.
  await "the merchant API" .run/edge.log 401 "$api_listen" /v1/payment_intents/pi_hl_1
  echo "merchant API: http://$api_listen/v1/payment_intents"
  if [ -n "$api_key" ]; then
    echo "  client dev, key (printed this once; deploy/down.sh then deploy/up.sh makes a new one):"
    echo "  export HOOKLINE_API_KEY=$api_key"
  elif [ -n "$reused" ] && [ -n "$add_api" ]; then
    echo "  (already running: its key was printed when it was generated)"
  fi
fi
if [ -n "$console_listen" ]; then
  await "the console (/healthz)" .run/console.log 200 "$console_listen" /healthz
  echo "operator console: http://$console_listen/"
  if [ -n "$console_password" ]; then
    echo "  operator: operator   password: $console_password"
    echo "  (printed this once and stored nowhere; deploy/down.sh then deploy/up.sh makes a new one)"
  elif [ -n "$reused" ] && [ -n "$add_console" ]; then
    echo "  (already running: its password was printed when it was generated)"
  fi
fi
