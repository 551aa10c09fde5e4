#!/usr/bin/env bash
# Checked SQL (docs/development.md): the queries of hookline-payments and hookline-billing are sqlx's
# compile-time checked macros, built from the metadata committed in .sqlx/ (.cargo/config.toml sets
# SQLX_OFFLINE=true). This step checks both halves against the schema the migrations make:
#   1. a throwaway database, migrated with migrations/*.sql in order (each file in one transaction, as
#      sqlx::migrate! applies them);
#   2. `cargo check` of the two crates ONLINE against it: every query is prepared by PostgreSQL, so a query the
#      schema refuses (a renamed column, a wrong type) fails here, and the macros write each query's metadata into
#      an empty directory;
#   3. that directory against .sqlx/: a file missing (a query changed or added without regenerating) or left
#      over (a query removed) fails the run, naming the files.
# Usage: deploy/sqlx-check.sh           check (deploy/test.sh runs it after clippy)
#        deploy/sqlx-check.sh --write   regenerate .sqlx/ (only the queries in use) after changing a query
# Needs the PostgreSQL of deploy/services.sh (127.0.0.1:5432, user postgres, trust). A check, not a build:
# only the two crates are compiled again (their dependencies come from the target dir).
set -euo pipefail
cd "$(dirname "$0")/.."

write=0
case "${1:-}" in
  --write) write=1 ;;
  "") ;;
  *) echo "usage: $0 [--write]" >&2; exit 2 ;;
esac

psql_() { psql -h 127.0.0.1 -U postgres -v ON_ERROR_STOP=1 -Xq "$@"; }

# hookline_test_* so that test.sh's cleanup also removes one a killed run left behind.
db="hookline_test_sqlx_$(date +%s)_$$"
out=$(mktemp -d)
cleanup_sqlx() {
  psql_ -d postgres -c "DROP DATABASE IF EXISTS \"$db\" WITH (FORCE)" >/dev/null 2>&1 || true
  rm -rf "$out"
}
trap cleanup_sqlx EXIT

psql_ -d postgres -c "CREATE DATABASE \"$db\"" >/dev/null
for migration in migrations/*.sql; do
  if ! psql_ -d "$db" --single-transaction -f "$migration" >/dev/null; then
    echo "sqlx-check: migration $migration failed on a fresh database" >&2
    exit 1
  fi
done

# The macros only run when the crate is compiled: touching the two crates' roots makes cargo compile them again
# (their dependencies stay built), whatever an earlier build with the committed metadata left in the target dir.
touch crates/hookline-payments/src/lib.rs crates/hookline-billing/src/lib.rs
if ! SQLX_OFFLINE=false DATABASE_URL="postgres://postgres@127.0.0.1:5432/$db" SQLX_OFFLINE_DIR="$out" \
  cargo check --locked -p hookline-payments -p hookline-billing; then
  echo "sqlx-check: a checked query does not fit the schema of migrations/ (the errors above name it)" >&2
  exit 1
fi
# Touched again so the next ordinary build compiles them with the committed metadata, not this check's result.
touch crates/hookline-payments/src/lib.rs crates/hookline-billing/src/lib.rs

if [ -z "$(ls -A "$out")" ]; then
  echo "sqlx-check: the macros wrote no query metadata: were the crates compiled? ($out is empty)" >&2
  exit 1
fi

if [ "$write" = 1 ]; then
  rm -rf .sqlx
  mkdir .sqlx
  cp "$out"/query-*.json .sqlx/
  echo "sqlx-check: wrote $(ls .sqlx | wc -l) query files to .sqlx/"
  exit 0
fi

stale=0
for f in .sqlx/*.json; do
  [ -e "$f" ] || continue
  name=$(basename "$f")
  if [ ! -e "$out/$name" ]; then
    echo "sqlx-check: stale: .sqlx/$name belongs to no query in the code (a query changed or was removed)" >&2
    stale=1
  elif ! cmp -s "$f" "$out/$name"; then
    echo "sqlx-check: stale: .sqlx/$name differs from what the schema says of its query now:" >&2
    diff "$f" "$out/$name" >&2 || true
    stale=1
  fi
done
for f in "$out"/*.json; do
  name=$(basename "$f")
  if [ ! -e ".sqlx/$name" ]; then
    query=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["query"][:200])' "$f" 2>/dev/null || true)
    echo "sqlx-check: missing: .sqlx/$name, for the query: ${query}" >&2
    stale=1
  fi
done
if [ "$stale" = 1 ]; then
  echo "sqlx-check: .sqlx/ does not match the queries: regenerate it with deploy/sqlx-check.sh --write and commit it" >&2
  exit 1
fi
echo "sqlx-check: $(ls "$out" | wc -l) checked queries fit the schema of migrations/ and match .sqlx/"
