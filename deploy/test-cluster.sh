#!/usr/bin/env bash
# The scale-out step of deploy/test.sh (issues 15 and 49), runnable alone: builds the RabbitMQ cluster, the etcd
# cluster and the three PostgreSQL nodes under Patroni behind HAProxy with deploy/cluster.sh (own ports and
# directories; the machine's default RabbitMQ and PostgreSQL are not touched), runs tests/it/cluster.rs against them
# (two edges, two workers, broker-node faults, database crashes and a switchover under load with nothing done by
# hand, total-queue check), and removes the cluster again — also when the test fails. The test is the `cluster::` module of the one integration-test binary `it`, `#[ignore]`d in every other
# run: `--ignored cluster::` selects it alone (the disruptive:: tests are ignored too but do not match). Needs root (deploy/cluster.sh switches to the rabbitmq and postgres users). A few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

down() { bash deploy/cluster.sh down || echo "test-cluster.sh: WARNING: deploy/cluster.sh down failed" >&2; }
# On failure the nodes' logs outlive the cluster: RabbitMQ's, etcd's, Patroni's and PostgreSQL's side of what the
# test saw.
keep_logs() {
  local dir=${HOOKLINE_CLUSTER_DIR:-/tmp/hookline-cluster} out
  out="${TMPDIR:-/tmp}/hookline-cluster-logs-$(date +%Y%m%dT%H%M%S)"
  mkdir -p "$out"
  for n in 1 2 3; do cp -r "$dir/rabbit/hl$n/log" "$out/rabbit-hl$n" 2>/dev/null || true; done
  cp "$dir"/pg/*.log "$dir"/etcd/*.log "$out/" 2>/dev/null || true
  echo "test-cluster.sh: the cluster's logs are in $out" >&2
}
trap 'rc=$?; [ "$rc" = 0 ] || keep_logs; down; exit $rc' EXIT
# Leftovers of an interrupted run would keep their ports.
[ -d "${HOOKLINE_CLUSTER_DIR:-/tmp/hookline-cluster}" ] && down
# The test runs the real binaries (with fail points, through the tests crate's features); up to date when
# deploy/test.sh ran first.
cargo build --workspace --bins --locked
bash deploy/cluster.sh up >/dev/null
eval "$(bash deploy/cluster.sh env)"
cargo test --locked -p hookline-tests --test it -- --ignored cluster::
