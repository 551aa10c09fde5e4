#!/usr/bin/env bash
# Runs every test of the workspace against the real PostgreSQL and RabbitMQ (started or installed if needed).
# Usage: deploy/test.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/services.sh

# Every test uses its own RabbitMQ names (test-<uuid>.*) and its own database (hookline_test_<uuid>). Hundreds of
# leftover quorum queues make RabbitMQ 3.10 slow to declare new ones on 2 cores, so they are removed before and
# after the run: in one rabbitmqctl call (one Erlang VM start instead of one per queue).
clean_broker() {
  rabbitmqctl -q eval '
    Qs = [Q || Q <- rabbit_amqqueue:list(),
               case amqqueue:get_name(Q) of {resource, _, queue, <<"test-", _/binary>>} -> true; _ -> false end],
    [rabbit_amqqueue:delete(Q, false, false, <<"hookline-tests">>) || Q <- Qs],
    Xs = [N || X <- rabbit_exchange:list(),
               case element(2, X) of {resource, _, exchange, <<"test-", _/binary>>} = N -> true; _ -> false end],
    [rabbit_exchange:delete(N, false, <<"hookline-tests">>) || N <- Xs],
    {length(Qs), length(Xs)}.' >/dev/null 2>&1 || true
}

cleanup() {
  clean_broker
  psql -h 127.0.0.1 -U postgres -Atqc "SELECT datname FROM pg_database WHERE datname LIKE 'hookline\_test\_%'" 2>/dev/null |
    while read -r db; do psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT
cleanup

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The fault tests run the real binaries (with fail points compiled in, through the tests crate's features).
cargo build --workspace --bins --locked
# Tests are I/O bound (real databases and brokers), so run more of them at once than there are cores.
RUST_TEST_THREADS=${RUST_TEST_THREADS:-8} cargo test --workspace --locked "$@"
