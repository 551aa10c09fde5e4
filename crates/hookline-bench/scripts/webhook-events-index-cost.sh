#!/usr/bin/env bash
# What each index of webhook_events costs an insert: pgbench inserts the edge's row (the same statement as the
# benchmark's baseline A) into a migrated database, with the variants interleaved so that the table's growth and
# the machine's drift fall on all of them alike. Prints tps, WAL bytes and machine CPU (/proc/stat, pgbench's own
# share included) per insert. Used for migration 20261205000021 (PROFILING.md, "Two fewer indexes").
#
#   crates/hookline-bench/scripts/webhook-events-index-cost.sh [ROUNDS]     # default 4; ~2.5 min a round
#
# Needs psql and pgbench against PG (default postgres://postgres@127.0.0.1:5432, trust); drops and recreates the
# database hookline_index_cost. Run it on a quiet machine: nothing else should be building or benchmarking.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROUNDS=${1:-4}
DB=hookline_index_cost
export PGOPTIONS="-c client_min_messages=warning"
P=(psql -qAt -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres)
SCRIPT=$(mktemp)
trap 'rm -f "$SCRIPT"' EXIT

"${P[@]}" -c "DROP DATABASE IF EXISTS $DB" postgres
"${P[@]}" -c "CREATE DATABASE $DB" postgres
for f in migrations/*.sql; do "${P[@]}" -f "$f" "$DB" >/dev/null; done
"${P[@]}" -c "CREATE SEQUENCE IF NOT EXISTS pgbench_hookline_seq" "$DB"
# 300,000 rows first, so that the random-key indexes are not tiny.
"${P[@]}" -c "INSERT INTO webhook_events (provider, provider_event_id, event_type, signed_at, headers, body)
  SELECT 'stripe', 'evt_pre_' || md5(g::text), 'payment_intent.succeeded', now(), '[]'::jsonb,
         convert_to(repeat('x', 1500), 'UTF8') FROM generate_series(1, 300000) g" "$DB"
"${P[@]}" -c "TRUNCATE event_outbox" "$DB"
"${P[@]}" -c "VACUUM ANALYZE webhook_events" "$DB"
cat > "$SCRIPT" <<'SQL'
INSERT INTO webhook_events (provider, provider_event_id, event_type, signed_at, headers, body)
VALUES ('stripe', 'evt_pgbench_a_' || md5(nextval('pgbench_hookline_seq')::text), 'payment_intent.succeeded', now(),
        '[["host","127.0.0.1"],["content-type","application/json"],["stripe-signature","t=1,v1=00"],["content-length","1500"]]'::jsonb,
        convert_to(repeat('x', 1500), 'UTF8'))
ON CONFLICT ON CONSTRAINT webhook_events_provider_event_id_key DO NOTHING;
SQL

cpu() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
measure() { # label
  "${P[@]}" -c "CHECKPOINT" "$DB"
  local w0 w1 t0 t1 out tx tps
  w0=$("${P[@]}" -c "SELECT wal_bytes FROM pg_stat_wal" "$DB")
  t0=$(cpu)
  out=$(pgbench -h 127.0.0.1 -U postgres -n -c 64 -j 2 -T 20 -f "$SCRIPT" "$DB" 2>&1)
  t1=$(cpu)
  w1=$("${P[@]}" -c "SELECT wal_bytes FROM pg_stat_wal" "$DB")
  tx=$(awk '/number of transactions actually processed/{print $NF}' <<<"$out" | cut -d/ -f1)
  tps=$(awk '/^tps/{print $3; exit}' <<<"$out")
  printf '%-10s tps %8.0f  WAL %5d B/insert  machine CPU %.3f ms/insert\n' \
    "$1" "$tps" $(((w1 - w0) / tx)) "$(bc -l <<<"($t1 - $t0) * 1000 / $(getconf CLK_TCK) / $tx")"
  "${P[@]}" -c "TRUNCATE event_outbox" "$DB"
}
variant() {
  local idx="CREATE INDEX IF NOT EXISTS webhook_events_provider_type_idx ON webhook_events (provider, event_type, id);
             CREATE INDEX IF NOT EXISTS webhook_events_provider_event_id_idx ON webhook_events (provider_event_id);"
  local noidx="DROP INDEX IF EXISTS webhook_events_provider_type_idx;
               DROP INDEX IF EXISTS webhook_events_provider_event_id_idx;"
  case $1 in
    7-indexes) "${P[@]}" -c "ALTER TABLE webhook_events ENABLE TRIGGER webhook_events_enqueue; $idx" "$DB" ;;
    5-indexes) "${P[@]}" -c "ALTER TABLE webhook_events ENABLE TRIGGER webhook_events_enqueue; $noidx" "$DB" ;;
    # The upper bound of an event outbox without rows (a cursor): no trigger insert (nor the relay's delete).
    no-outbox) "${P[@]}" -c "ALTER TABLE webhook_events DISABLE TRIGGER webhook_events_enqueue; $noidx" "$DB" ;;
  esac
}
for _ in $(seq "$ROUNDS"); do
  for v in 7-indexes 5-indexes no-outbox; do
    variant "$v"
    measure "$v"
  done
done
"${P[@]}" -c "DROP DATABASE $DB" postgres
