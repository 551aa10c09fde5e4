#!/usr/bin/env bash
# The scale-out step of deploy/test.sh (issue 15), runnable alone: builds the RabbitMQ cluster and the PostgreSQL
# primary + synchronous standby behind HAProxy with deploy/cluster.sh (own ports and directories; the machine's
# default RabbitMQ and PostgreSQL are not touched), runs tests/cluster.rs against them (two edges, two workers,
# broker-node and database failovers under load, total-queue check), and removes the cluster again — also when the
# test fails. Needs root (deploy/cluster.sh switches to the rabbitmq and postgres users). A few minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

down() { bash deploy/cluster.sh down || echo "test-cluster.sh: WARNING: deploy/cluster.sh down failed" >&2; }
trap down EXIT
# Leftovers of an interrupted run would keep their ports.
[ -d "${HOOKLINE_CLUSTER_DIR:-/tmp/hookline-cluster}" ] && down
bash deploy/cluster.sh up >/dev/null
eval "$(bash deploy/cluster.sh env)"
cargo test --locked -p hookline-tests --test cluster -- --ignored
