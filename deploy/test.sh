#!/usr/bin/env bash
# Runs every test of the workspace against the real PostgreSQL and RabbitMQ (started or installed if needed).
# Usage: deploy/test.sh [extra cargo test arguments]
# Skips: HOOKLINE_SKIP_CONTAINERS=1, HOOKLINE_SKIP_DISRUPTIVE=1, HOOKLINE_SKIP_CLUSTER=1, HOOKLINE_SKIP_NEWCOMER=1.
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/services.sh

# Every test uses its own RabbitMQ names (test-<uuid>.*) and its own database (hookline_test_<uuid>). Hundreds of
# leftover quorum queues make RabbitMQ 3.10 slow to declare new ones on 2 cores, so they are removed before and
# after the run: in one rabbitmqctl call (one Erlang VM start instead of one per queue).
clean_broker() {
  # Names are matched with a fun, not with a variable bound inside a case pattern: RabbitMQ 3.10's eval refuses
  # the latter ({unsafe_var, …}). A failure here fails the run: silently leftover queues slow the broker until
  # the pipeline tests time out.
  local out
  if ! out=$(rabbitmqctl -q eval '
    IsTest = fun(<<"test-", _/binary>>) -> true; (<<"bench-", _/binary>>) -> true; (_) -> false end,
    Qs = [Q || Q <- rabbit_amqqueue:list(), IsTest(element(4, amqqueue:get_name(Q)))],
    [rabbit_amqqueue:delete(Q, false, false, <<"hookline-tests">>) || Q <- Qs],
    Xs = [element(2, X) || X <- rabbit_exchange:list(), IsTest(element(4, element(2, X)))],
    [rabbit_exchange:delete(N, false, <<"hookline-tests">>) || N <- Xs],
    {length(Qs), length(Xs)}.' 2>&1); then
    echo "test.sh: removing leftover test queues and exchanges failed: $out" >&2
    return 1
  fi
  echo "test.sh: removed leftover test queues and exchanges {queues, exchanges} = $out"
}

cleanup() {
  clean_broker
  psql -h 127.0.0.1 -U postgres -Atqc "SELECT datname FROM pg_database WHERE datname LIKE 'hookline\_test\_%'" 2>/dev/null |
    while read -r db; do psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true; done
}
# After the run a failed cleanup is reported loudly (the run's own result stands); before it, it stops the run.
trap 'cleanup || echo "test.sh: WARNING: cleanup after the run failed" >&2' EXIT
cleanup

# Alert rules: syntax, unit tests (promtool, from Debian's prometheus package, installed when missing).
bash deploy/prometheus/check.sh

# The manual cannot drift (deploy/doc-check.sh): every repository path and every intra-doc link (file and heading
# anchor) named in README.md and docs/*.md exists, each failure named FILE:LINE. Under a second and needing no
# service or build, so it runs early: a stale manual fails the run before the long steps.
bash deploy/doc-check.sh

# The console's browser tests (tests/console.rs) drive headless Chromium through chromedriver: Debian's
# chromium and chromium-driver packages (and a font for readable screenshots), installed when missing.
if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "test.sh: chromium or chromedriver missing: installing Debian's chromium and chromium-driver" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "test.sh: not root and no sudo: install chromium and chromium-driver" >&2; exit 1; fi
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver fonts-liberation
  command -v chromedriver >/dev/null 2>&1 || { echo "test.sh: chromedriver still missing after install" >&2; exit 1; }
fi

# The official Stripe and Mercado Pago SDKs drive the sandbox and the merchant API in tests/it/sdk.rs, from a venv
# the tests make under the target dir (tests/src/sdk.rs): python3 with venv and pip (Debian's python3-venv).
if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  echo "test.sh: python3 with venv/ensurepip missing: installing Debian's python3-venv" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "test.sh: not root and no sudo: install python3-venv" >&2; exit 1; fi
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3 python3-venv
fi

# Pagar.me's official Node SDK (npm @pagarme/pagarme-nodejs-sdk, pinned by tests/sdk/package-lock.json) drives the
# sandbox in tests/it/sdk.rs: node and npm (Debian's nodejs and npm; `npm ci` runs under the target dir).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "test.sh: node or npm missing: installing Debian's nodejs and npm" >&2
  if [ "$(id -u)" -eq 0 ]; then SUDO=(); elif command -v sudo >/dev/null 2>&1; then SUDO=(sudo); else
    echo "test.sh: not root and no sudo: install nodejs and npm" >&2; exit 1; fi
  "${SUDO[@]}" apt-get update -qq
  "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nodejs npm
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# Checked SQL (deploy/sqlx-check.sh, docs/development.md): the money crates' queries against the schema of the
# migrations (a throwaway database), and the committed .sqlx/ metadata against the queries. Two crates checked, no
# second build.
bash deploy/sqlx-check.sh
# The fault tests run the real binaries (with fail points compiled in, through the tests crate's features).
cargo build --workspace --bins --locked

# Deployment (docs/deployment.md): the systemd units (systemd-analyze verify and security exposure), then the
# container images packaged from the binaries just built and smoke-tested in chroots of their filesystems, with
# the compose file checked against them. HOOKLINE_SKIP_CONTAINERS=1 skips the images (a machine without podman).
bash deploy/systemd/check.sh
if [ "${HOOKLINE_SKIP_CONTAINERS:-0}" != 1 ]; then
  BIN_DIR=${CARGO_TARGET_DIR:-target}/debug bash deploy/container/check.sh
fi
# Tests are I/O bound (real databases and brokers), so run more of them at once than there are cores.
# The integration tests are one binary (tests/it, `--test it`); its tests that stop or disturb the shared
# PostgreSQL/RabbitMQ (module `disruptive::`) and the cluster test (`cluster::`) are #[ignore]d, so this run has
# none of them beside the others.
RUST_TEST_THREADS=${RUST_TEST_THREADS:-8} cargo test --workspace --locked "$@"

# The disruptive tests (broker app stopped, every broker connection closed, PostgreSQL restarted or stopped):
# after everything else, alone and one at a time, so that no other test sees their outages (separate test binaries
# gave that isolation before: cargo runs binaries one after another). Skipped when arguments narrowed the run or
# HOOKLINE_SKIP_DISRUPTIVE=1.
if [ "$#" -eq 0 ] && [ "${HOOKLINE_SKIP_DISRUPTIVE:-0}" != 1 ]; then
  # The run above leaves a few hundred test queues behind (each test its own names); with them, a broker whose
  # connections these tests close takes longer than their 15 s connect timeout to answer again.
  clean_broker
  cargo test --locked -p hookline-tests --test it -- --ignored --test-threads=1 disruptive::
fi

# Scale-out (issues 15 and 49), its own step (deploy/test-cluster.sh): a three-node RabbitMQ cluster, a three-member
# etcd and three PostgreSQL nodes under Patroni built by deploy/cluster.sh, the chaos test against them, the cluster
# removed again. Skipped when
# arguments narrowed the run or HOOKLINE_SKIP_CLUSTER=1.
if [ "$#" -eq 0 ] && [ "${HOOKLINE_SKIP_CLUSTER:-0}" != 1 ]; then
  bash deploy/test-cluster.sh
fi

# The newcomer check (deploy/newcomer.sh, docs/development.md): the manual's marked command blocks (README.md
# first, then docs/ in the index's order) run against the stack deploy/up.sh starts, on the debug binaries built
# above (HOOKLINE_PROFILE=debug: no second build), after every test so that its stack (fixed ports, the `hookline` database) never meets them; it stops the stack
# again. Skipped when arguments narrowed the run or HOOKLINE_SKIP_NEWCOMER=1.
if [ "$#" -eq 0 ] && [ "${HOOKLINE_SKIP_NEWCOMER:-0}" != 1 ]; then
  newcomer_start=$(date +%s)
  HOOKLINE_PROFILE=debug bash deploy/newcomer.sh
  echo "test.sh: the newcomer check took $(( $(date +%s) - newcomer_start )) s"
fi
