#!/usr/bin/env bash
# Runs every test of the workspace against the real PostgreSQL and RabbitMQ (started or installed if needed).
# Usage: deploy/test.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

bash deploy/services.sh

cleanup() {
  # Each test creates its own database hookline_test_<uuid>; drop them once the run is over.
  # And their RabbitMQ objects, named test-<uuid>.*
  rabbitmqctl -q list_queues name 2>/dev/null | grep '^test-' |
    while read -r q; do rabbitmqctl -q delete_queue "$q" >/dev/null 2>&1 || true; done
  psql -h 127.0.0.1 -U postgres -Atqc "SELECT datname FROM pg_database WHERE datname LIKE 'hookline\_test\_%'" 2>/dev/null |
    while read -r db; do psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true; done
}
trap cleanup EXIT

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
# The fault tests run the real binaries (with fail points compiled in, through the tests crate's features).
cargo build --workspace --bins --locked
# Tests are I/O bound (real databases and brokers), so run more of them at once than there are cores.
RUST_TEST_THREADS=${RUST_TEST_THREADS:-8} cargo test --workspace --locked "$@"
