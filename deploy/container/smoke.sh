#!/usr/bin/env bash
# Smoke test of the images deploy/container/build.sh made (containers cannot run on this machine: the runtime's
# setrlimit is refused), on each image's exported root filesystem:
#   1. the image's configuration: user 65532, entrypoint, command, exposed ports and HEALTHCHECK as Containerfile
#      says (check-compose.py reads them from there), and no shell anywhere in it;
#   2. in a chroot of it, as user 65532 with the image's environment: every binary's --help;
#   3. `hookline migrate` against the local PostgreSQL, on a scratch database that it creates (hookline_test_…,
#      dropped at the end): every migration of migrations/ applied, and a second run changes nothing;
#   4. each service started in its image's chroot (edge, worker, console serve, sandbox) on free loopback ports
#      against the local PostgreSQL and RabbitMQ (names under test-deploy-…; the sandbox with the compose stack's
#      own configuration, which it validates as every process does), healthy by the image's own
#      HEALTHCHECK command (its port replaced by the chroot's), then stopped with SIGTERM: exit 0 within the 30 s
#      grace period that compose.yaml and the systemd units give them.
# Needs root (chroot), podman, psql, and PostgreSQL/RabbitMQ up (deploy/services.sh).
# Usage: deploy/container/smoke.sh [TAG]   (default latest)
set -euo pipefail
cd "$(dirname "$0")/../.."
tag=${1:-latest}
PY=/usr/bin/python3

run_id=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
db=hookline_test_deploy_$run_id
prefix=test-deploy-$run_id
work=$(mktemp -d)
pids=()
mounted=()

cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for image in "${mounted[@]}"; do podman image unmount "$image" >/dev/null 2>&1 || true; done
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  # This run's RabbitMQ names (deploy/test.sh removes any test-* leftovers too).
  rabbitmqctl -q eval "
    P = <<\"$prefix\">>, N = byte_size(P),
    Mine = fun(<<X:N/binary, _/binary>>) when X =:= P -> true; (_) -> false end,
    [rabbit_amqqueue:delete(Q, false, false, <<\"smoke\">>) || Q <- rabbit_amqqueue:list(), Mine(element(4, amqqueue:get_name(Q)))],
    [rabbit_exchange:delete(element(2, X), false, <<\"smoke\">>) || X <- rabbit_exchange:list(), Mine(element(4, element(2, X)))],
    ok." >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

fail() { echo "smoke.sh: FAIL: $*" >&2; exit 1; }

# ---- 1. image configuration, then each image's filesystem exported to $work/NAME ----
declare -A rootfs
for name in hookline-edge hookline-worker hookline; do
  image=localhost/$name:$tag
  podman image exists "$image" || fail "$image missing (deploy/container/build.sh $tag)"
  # The image's configuration, with its health check (kept beside Config, not inside it, by podman).
  podman image inspect --format '{{json .Config}}' "$image" >"$work/config.json"
  podman image inspect --format '{{json .HealthCheck}}' "$image" >"$work/health.json"
  $PY -c 'import json,sys; c=json.load(open(sys.argv[1])); c["Healthcheck"]=json.load(open(sys.argv[2])); print(json.dumps(c))' \
    "$work/config.json" "$work/health.json" >"$work/$name.config.json"
  # Its filesystem, copied out of a read-only mount of the image (no container is created).
  mnt=$(podman image mount "$image")
  mounted+=("$image")
  mkdir "$work/$name"
  cp -a "$mnt/." "$work/$name/"
  podman image unmount "$image" >/dev/null
  rootfs[$name]=$work/$name
  for shell in bin/sh bin/bash bin/dash bin/busybox usr/bin/sh usr/bin/bash usr/bin/dash; do
    if [ -e "$work/$name/$shell" ] || [ -L "$work/$name/$shell" ]; then fail "$image has a shell: /$shell"; fi
  done
done
$PY deploy/container/check-compose.py --images "$work" >"$work/images.txt" || fail "image configuration (above)"
sed 's/^/  /' "$work/images.txt"

# `image_cmd NAME [VAR=value…] -- ARGS…` sets CMD to the command line that runs ARGS in NAME's root filesystem,
# as user 65532, with the image's environment (nothing of this shell's) plus the VARs; `in_image` runs it.
image_cmd() {
  local name=$1; shift
  local -a envs
  mapfile -t envs < <($PY -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["Env"] or []))' "$work/$name.config.json")
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  CMD=(env -i "${envs[@]}" chroot --userspec=65532:65532 "${rootfs[$name]}" "$@")
}
in_image() {
  image_cmd "$@"
  "${CMD[@]}"
}

# ---- 2. --help of every binary ----
echo "== --help in each image's chroot (user 65532)"
for pair in hookline-edge:hookline-edge hookline-worker:hookline-worker hookline:hookline \
  hookline-edge:hookline-healthcheck hookline-worker:hookline-healthcheck hookline:hookline-healthcheck; do
  name=${pair%%:*} bin=${pair#*:}
  out=$(in_image "$name" -- "/usr/local/bin/$bin" --help 2>&1) || fail "$name: $bin --help: $out"
  echo "  $name: $bin --help: $(head -n 1 <<<"$out")"
done

# ---- 3. migrate, twice ----
read -r -a ports <<<"$($PY -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))')"
edge_port=${ports[0]} worker_port=${ports[1]} console_port=${ports[2]} sandbox_port=${ports[3]}
# The console's operator: a hash made by the image's own binary (its password is thrown away).
hash=$(od -An -N18 -tx1 /dev/urandom | tr -d ' \n' | in_image hookline -- /usr/local/bin/hookline console hash-password) ||
  fail "hookline console hash-password"
config=$work/hookline.toml
cat >"$config" <<EOF
# deploy/container/smoke.sh, run $run_id
database_url = "postgres://postgres@127.0.0.1:5432/$db"
amqp_url = "amqp://guest:guest@127.0.0.1:5672/%2f"
[amqp]
prefix = "$prefix"
[edge]
listen = "127.0.0.1:$edge_port"
[worker]
listen = "127.0.0.1:$worker_port"
[console]
listen = "127.0.0.1:$console_port"
[[console.operators]]
name = "smoke"
password_hash = "$hash"
[sandbox]
edge_url = "http://127.0.0.1:$edge_port"
[providers.stripe]
scheme = "stripe"
secrets = ["whsec_smoke_$run_id"]
api_base = "http://127.0.0.1:$sandbox_port"
api_token = "sk_test_smoke_$run_id"
EOF
# Where the images read it (HOOKLINE_CONFIG): what a container's mount would put there.
for name in "${!rootfs[@]}"; do
  install -D -m 0644 "$config" "${rootfs[$name]}/etc/hookline/hookline.toml"
done

echo "== hookline migrate in the hookline image's chroot (database $db, created by it)"
start=$(date +%s)
out=$(in_image hookline -- /usr/local/bin/hookline migrate 2>&1) || fail "migrate: $out"
expected=$(find migrations -maxdepth 1 -name '*.sql' | wc -l)
applied=$(psql -h 127.0.0.1 -U postgres -d "$db" -Atqc 'SELECT count(*) FROM _sqlx_migrations WHERE success')
[ "$applied" = "$expected" ] || fail "migrate applied $applied migrations, migrations/ has $expected"
out=$(in_image hookline -- /usr/local/bin/hookline migrate 2>&1) || fail "second migrate: $out"
again=$(psql -h 127.0.0.1 -U postgres -d "$db" -Atqc 'SELECT count(*) FROM _sqlx_migrations')
[ "$again" = "$expected" ] || fail "a second migrate left $again rows in _sqlx_migrations, expected $expected"
echo "  $applied/$expected migrations applied; a second run applied none ($(( $(date +%s) - start )) s)"

# ---- 4. the services, healthy by their images' HEALTHCHECK, stopped by SIGTERM ----
# `probe_args NAME PORT [PATH]` sets PROBE to NAME's HEALTHCHECK command (CMD form) with its URL's port set to
# PORT (and its path to PATH).
probe_args() {
  mapfile -t PROBE < <($PY - "$work/$1.config.json" "$2" "${3:-}" <<'PY'
import json, re, sys
test = json.load(open(sys.argv[1]))["Healthcheck"]["Test"]
assert test[0] == "CMD", f"HEALTHCHECK is not in exec form: {test}"
args = [re.sub(r"^(http://[^/:]+):\d+", rf"\g<1>:{sys.argv[2]}", a) for a in test[1:]]
if sys.argv[3]:
    args = [re.sub(r"^(http://[^/]+)/.*$", rf"\g<1>{sys.argv[3]}", a) for a in args]
print("\n".join(args))
PY
  )
}

# `service LABEL NAME ARGS…`: starts ARGS in NAME's chroot in the background (log $work/LABEL.log).
declare -A service_pid
service() {
  local label=$1 name=$2; shift 2
  image_cmd "$name" RUST_LOG=info -- "$@"
  # A simple command in the background: $! is the service itself (env and chroot exec it).
  "${CMD[@]}" >"$work/$label.log" 2>&1 &
  service_pid[$label]=$!
  pids+=("$!")
}

echo "== services in their images' chroots, probed by the images' HEALTHCHECK commands"
start=$(date +%s)
# The sandbox reads the compose stack's configuration (deploy/container/hookline.toml, all of it validated at
# start-up as by every hookline process); it connects to nothing named in it until asked to send a webhook.
install -m 0644 deploy/container/hookline.toml "${rootfs[hookline]}/etc/hookline/compose.toml"
image_cmd hookline RUST_LOG=info HOOKLINE_API_KEY="sk_smoke_$run_id" -- \
  /usr/local/bin/hookline --config /etc/hookline/compose.toml sandbox --listen "127.0.0.1:$sandbox_port"
"${CMD[@]}" >"$work/sandbox.log" 2>&1 &
service_pid[sandbox]=$!
pids+=("$!")
service edge hookline-edge /usr/local/bin/hookline-edge
service worker hookline-worker /usr/local/bin/hookline-worker
service console hookline /usr/local/bin/hookline console serve

# label image port path (empty: the HEALTHCHECK's own path)
checks=(
  "edge hookline-edge $edge_port"
  "worker hookline-worker $worker_port"
  "console hookline $console_port"
  "sandbox hookline $sandbox_port /_sandbox/health"
)
for check in "${checks[@]}"; do
  read -r label name port path <<<"$check"
  probe_args "$name" "$port" "$path"
  deadline=$(( $(date +%s) + 60 ))
  until out=$(in_image "$name" -- "${PROBE[@]}" 2>&1); do
    if ! kill -0 "${service_pid[$label]}" 2>/dev/null; then
      tail -n 20 "$work/$label.log" >&2
      fail "$label exited before it was healthy"
    fi
    if [ "$(date +%s)" -ge "$deadline" ]; then
      tail -n 20 "$work/$label.log" >&2
      fail "$label not healthy within 60 s: $out"
    fi
    sleep 0.5
  done
  echo "  $label: healthy: ${PROBE[*]}"
done
echo "  all healthy $(( $(date +%s) - start )) s after start"
grep -q 'webhooks to http://edge:8080/' "$work/sandbox.log" ||
  { cat "$work/sandbox.log" >&2; fail "the sandbox did not take the compose configuration's edge_url"; }
echo "  sandbox: runs on deploy/container/hookline.toml (webhooks to http://edge:8080/)"

# Stopped as `podman stop` / compose / systemd stop them: SIGTERM, then at most the 30 s grace period they give
# (compose.yaml stop_grace_period, the units' TimeoutStopSec). All at once: a worker still declaring its queues
# on a busy broker finishes that first (up to its 15 s bound).
stop_start=$(date +%s)
for label in console worker edge sandbox; do kill -TERM "${service_pid[$label]}"; done
for label in console worker edge sandbox; do
  pid=${service_pid[$label]}
  while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt $(( stop_start + 30 )) ]; do sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then
    tail -n 20 "$work/$label.log" >&2
    fail "$label still running 30 s after SIGTERM"
  fi
  status=0
  wait "$pid" || status=$?
  if [ "$status" -ne 0 ]; then
    tail -n 20 "$work/$label.log" >&2
    fail "$label exited $status on SIGTERM"
  fi
  echo "  $label: stopped by SIGTERM, exit 0 (within $(( $(date +%s) - stop_start )) s)"
done
pids=()
echo "smoke.sh: OK: localhost/{hookline-edge,hookline-worker,hookline}:$tag"
