#!/usr/bin/env bash
# What each index of webhook_events costs an insert: pgbench inserts the edge's row (the same statement as the
# benchmark's baseline A) into a migrated database, with the variants interleaved so that the table's growth and
# the machine's drift fall on all of them alike. Prints tps, WAL bytes and machine CPU (/proc/stat, pgbench's own
# share included) per insert. Used for migration 20261205000021 (PROFILING.md, "Two fewer indexes") and for the
# event outbox against a cursor (PROFILING.md, "The targets after this round"):
#   7-indexes, 5-indexes  the trigger's outbox row, nobody deleting it (the insert side alone);
#   no-outbox             no trigger: the insert side's upper bound of an outbox without rows;
#   outbox+relay          the trigger, and a relay claiming the outbox (DELETE … RETURNING joined to the events,
#                         as `event_outbox::claim_due`, up to 1024 rows a round, a round every 2 ms): today's design;
#   cursor                no trigger, `xid` recorded per event and indexed with `(xid, id)`, and a relay reading
#                         past a cursor below the horizon (the domain relay's query) and moving it, every 2 ms.
#
#   crates/hookline-bench/scripts/webhook-events-index-cost.sh [ROUNDS] [VARIANT ...]   # default 4, all five;
#                                                                                        # ~4 min a round
#
# Needs psql and pgbench against PG (default postgres://postgres@127.0.0.1:5432, trust); drops and recreates the
# database hookline_index_cost. Run it on a quiet machine: nothing else should be building or benchmarking.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROUNDS=${1:-4}
shift || true
VARIANTS=("$@")
[ ${#VARIANTS[@]} -gt 0 ] || VARIANTS=(7-indexes 5-indexes no-outbox outbox+relay cursor)
DB=hookline_index_cost
export PGOPTIONS="-c client_min_messages=warning"
P=(psql -qAt -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres)
SCRIPT=$(mktemp)
RELAY=$(mktemp)
CURSOR=$(mktemp)
trap 'rm -f "$SCRIPT" "$RELAY" "$CURSOR"' EXIT

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
# The relay of today: claim and delete what the outbox holds, with the fields its messages carry.
cat > "$RELAY" <<'SQL'
WITH c AS (
    DELETE FROM event_outbox o
    USING (SELECT event_id FROM event_outbox ORDER BY event_id LIMIT 1024 FOR UPDATE SKIP LOCKED) d
    WHERE o.event_id = d.event_id
    RETURNING o.event_id, o.enqueued_at)
SELECT count(*), max(length(e.provider_event_id)), max(e.event_type), max(e.traceparent)
  FROM c JOIN webhook_events e ON e.id = c.event_id;
\sleep 2 ms
SQL
# A relay over a cursor: the events past it whose transactions have ended (the domain relay's horizon), then
# the cursor moved to the last of them, in one statement.
cat > "$CURSOR" <<'SQL'
SELECT xid::text AS cx, id AS ci FROM bench_event_cursor \gset
WITH s AS (SELECT pg_current_snapshot() AS snap),
     h AS (SELECT coalesce(
               (SELECT min(x) FROM s, pg_snapshot_xip(s.snap) AS x
                 WHERE NOT EXISTS (SELECT 1 FROM pg_stat_activity a
                                    WHERE a.backend_xid = x::xid
                                      AND a.datname IS DISTINCT FROM current_database())),
               (SELECT pg_snapshot_xmax(snap) FROM s)) AS horizon),
     r AS (SELECT e.xid, e.id, e.provider, e.provider_event_id, e.event_type, e.traceparent
             FROM webhook_events e, h
            WHERE (e.xid, e.id) > (:cx::text::xid8, :ci) AND e.xid < h.horizon
            ORDER BY e.xid, e.id LIMIT 1024),
     l AS (SELECT xid, id FROM r ORDER BY xid DESC, id DESC LIMIT 1)
UPDATE bench_event_cursor SET xid = l.xid, id = l.id FROM l;
\sleep 2 ms
SQL
"${P[@]}" -c "ALTER TABLE webhook_events ADD COLUMN xid xid8;
              CREATE TABLE bench_event_cursor (xid xid8 NOT NULL, id int8 NOT NULL);
              INSERT INTO bench_event_cursor VALUES ('0', 0)" "$DB"

cpu() { awk '/^cpu /{print $2+$3+$4+$7+$8}' /proc/stat; }
measure() { # label
  "${P[@]}" -c "CHECKPOINT" "$DB"
  local w0 w1 t0 t1 out tx tps
  w0=$("${P[@]}" -c "SELECT wal_bytes FROM pg_stat_wal" "$DB")
  # The variants with a relay run it beside the load, and say afterwards whether it kept up.
  local relay= kept_up=
  case $1 in
    outbox+relay)
      relay=$RELAY
      kept_up="SELECT 'outbox left ' || count(*) FROM event_outbox" ;;
    cursor)
      relay=$CURSOR
      kept_up="SELECT 'cursor behind by ' || count(*) FROM webhook_events e, bench_event_cursor c
               WHERE e.xid IS NOT NULL AND (e.xid, e.id) > (c.xid, c.id)" ;;
  esac
  t0=$(cpu)
  if [ -n "$relay" ]; then
    pgbench -h 127.0.0.1 -U postgres -n -c 1 -j 1 -T 21 -f "$relay" "$DB" >/dev/null 2>&1 &
  fi
  out=$(pgbench -h 127.0.0.1 -U postgres -n -c 64 -j 2 -T 20 -f "$SCRIPT" "$DB" 2>&1)
  if [ -n "$relay" ]; then wait; fi
  t1=$(cpu)
  w1=$("${P[@]}" -c "SELECT wal_bytes FROM pg_stat_wal" "$DB")
  tx=$(awk '/number of transactions actually processed/{print $NF}' <<<"$out" | cut -d/ -f1)
  tps=$(awk '/^tps/{print $3; exit}' <<<"$out")
  if [ -n "$kept_up" ]; then "${P[@]}" -c "$kept_up" "$DB"; fi
  printf '%-12s tps %8.0f  WAL %5d B/insert  machine CPU %.3f ms/insert\n' \
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
    outbox+relay) "${P[@]}" -c "ALTER TABLE webhook_events ENABLE TRIGGER webhook_events_enqueue; $noidx" "$DB" ;;
    cursor) "${P[@]}" -c "ALTER TABLE webhook_events DISABLE TRIGGER webhook_events_enqueue; $noidx
                          ALTER TABLE webhook_events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
                          CREATE INDEX IF NOT EXISTS webhook_events_xid_idx ON webhook_events (xid, id);
                          UPDATE bench_event_cursor SET xid = pg_current_xact_id(), id = 0" "$DB" ;;
  esac
  if [ "$1" != cursor ]; then
    "${P[@]}" -c "ALTER TABLE webhook_events ALTER COLUMN xid DROP DEFAULT;
                  DROP INDEX IF EXISTS webhook_events_xid_idx" "$DB"
  fi
}
for _ in $(seq "$ROUNDS"); do
  for v in "${VARIANTS[@]}"; do
    variant "$v"
    measure "$v"
  done
done
"${P[@]}" -c "DROP DATABASE $DB" postgres
