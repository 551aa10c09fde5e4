#!/usr/bin/env bash
# What writing a fact's owner costs the worker's recording statement (issue 47; PROFILING.md, "A fact's owner on
# the worker's path"): the statement of `hookline_core::domain_events::record_many` with 100 payment facts, inside a
# rolled-back transaction, in three variants interleaved so that the machine's drift falls on all of them alike:
#   before     no owner column written, the fan-out as it was;
#   nolookup   the `client` column and the fan-out's owner condition, no lookup;
#   after      today's statement: the owner looked up in payment_intents by (provider, provider_payment_id).
#
#   crates/hookline-bench/scripts/fact_owner.sh [ROUNDS] [SECONDS]    # default 4 rounds of 10 s per variant
#
# Needs psql and pgbench against PG (postgres://postgres@127.0.0.1:5432, trust); drops and recreates the database
# hookline_fact_owner (migrated with migrations/, 100,000 intents, one configured destination). Run it on a quiet
# machine.
set -euo pipefail
cd "$(dirname "$0")/../../.."
ROUNDS=${1:-4}
SECS=${2:-10}
DB=hookline_fact_owner
export PGOPTIONS="-c client_min_messages=warning"
P=(psql -qAt -v ON_ERROR_STOP=1 -h 127.0.0.1 -U postgres)
DIR=$(mktemp -d)
trap 'rm -rf "$DIR"' EXIT

"${P[@]}" -c "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB"
for f in migrations/*.sql; do "${P[@]}" -d "$DB" -f "$f" >/dev/null; done
"${P[@]}" -d "$DB" <<'SQL'
INSERT INTO payment_intents (public_id, provider, amount, currency, status, provider_payment_id, client)
SELECT 'pi_hl_' || md5(g::text), 'stripe', 1000, 'brl', 'succeeded', 'pi_' || g, 'shop'
  FROM generate_series(1, 100000) g;
INSERT INTO destinations (name, url, events) VALUES ('ops', 'http://127.0.0.1:9/', '{*}');
ANALYZE;
SQL

# 100 facts a statement; half of their payments belong to an intent (g * 997 % 200000 over 100,000 intents).
FACTS="SELECT 'evt_' || md5(:r::text || g::text) AS id, 'payment.succeeded' AS type,
               convert_to('{\"x\":1}', 'UTF8') AS body, NULL::text AS traceparent, NULL::text AS client,
               'stripe'::text AS provider, 'pi_' || (g * 997 % 200000) AS payment_ref
          FROM generate_series(1, 100) g"
cat > "$DIR/before.sql" <<SQL
\set r random(1, 1000000000)
BEGIN;
WITH ev AS (
  INSERT INTO domain_events (id, type, body, traceparent)
  SELECT u.id, u.type, u.body, u.traceparent FROM ($FACTS) u
  ON CONFLICT ON CONSTRAINT domain_events_id_key DO NOTHING
  RETURNING seq, type),
fanout AS (
  INSERT INTO domain_deliveries (destination, event_seq)
  SELECT d.name, ev.seq FROM ev JOIN destinations d
      ON d.removed_at IS NULL AND (ev.type = ANY (d.events) OR '*' = ANY (d.events)))
SELECT count(*) FROM ev;
ROLLBACK;
SQL
for variant in nolookup after; do
  if [ "$variant" = after ]; then
    OWNER="coalesce(u.client, (SELECT p.client FROM payment_intents p
                                WHERE p.provider = u.provider AND p.provider_payment_id = u.payment_ref))"
  else
    OWNER="u.client"
  fi
  cat > "$DIR/$variant.sql" <<SQL
\set r random(1, 1000000000)
BEGIN;
WITH ev AS (
  INSERT INTO domain_events (id, type, body, traceparent, client)
  SELECT u.id, u.type, u.body, u.traceparent, $OWNER FROM ($FACTS) u
  ON CONFLICT ON CONSTRAINT domain_events_id_key DO NOTHING
  RETURNING seq, type, client),
fanout AS (
  INSERT INTO domain_deliveries (destination, event_seq)
  SELECT d.name, ev.seq FROM ev JOIN destinations d
      ON d.removed_at IS NULL AND (ev.type = ANY (d.events) OR '*' = ANY (d.events))
     AND (d.client IS NULL OR d.all_events OR d.client = ev.client))
SELECT count(*) FROM ev;
ROLLBACK;
SQL
done

# A warm-up of each (the first statements read the indexes from disk), not reported.
for variant in before nolookup after; do
  pgbench -n -h 127.0.0.1 -U postgres -T 3 -c 1 -f "$DIR/$variant.sql" "$DB" >/dev/null 2>&1
done
for round in $(seq 1 "$ROUNDS"); do
  for variant in before nolookup after; do
    latency=$(pgbench -n -h 127.0.0.1 -U postgres -T "$SECS" -c 1 -f "$DIR/$variant.sql" "$DB" 2>&1 \
      | sed -n 's/^latency average = //p')
    echo "round $round  $variant  $latency per statement of 100 facts"
  done
done
"${P[@]}" -c "DROP DATABASE $DB"
