-- The domain relay reads facts past a cursor instead of claiming one `domain_outbox` row per fact (issue 32).
--
-- Why: every fact cost an outbox row inserted by a trigger and deleted by the relay (two tuples, their index
-- entries, WAL, and vacuum of a queue table) on top of the fact itself — 2 of the 11 tuples the worker writes
-- per payment event (`hookline-bench`'s cost model, PROFILING.md "Third performance round"). A fact is never
-- updated or deleted, so the relay only needs to know how far it has published.
--
-- A cursor over `seq` alone would be wrong: `seq` is taken when a row is inserted, not when its transaction
-- commits, so a fact with a lower `seq` can become visible after one with a higher `seq` was published, and a
-- cursor past it would skip it for ever. So each fact records the transaction that wrote it (`xid`, 64 bits:
-- no wraparound), and the relay reads only facts of transactions that have ended — `xid` below the oldest
-- transaction of this database still running, taken from the same statement's snapshot (`read_after` in
-- `hookline_core::domain_events`). Every such fact is visible, and no fact can later appear below that horizon,
-- so the cursor `(xid, seq)` may pass it. A long write transaction in this database holds the horizon back (the
-- facts wait, none is lost): the relay's backlog metric shows it.
--
-- `domain_outbox` stays, for what the cursor passed without a clean confirm (returned, nacked): the relay puts
-- those facts there and retries them as before. Facts recorded before this version have no `xid`; the
-- unpublished ones are already in `domain_outbox`.
ALTER TABLE domain_events ADD COLUMN xid xid8;
-- A default set after the column exists rewrites nothing: rows written from now on get their transaction's id,
-- whoever writes them (a worker of the previous version during a rolling upgrade included).
ALTER TABLE domain_events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
CREATE INDEX domain_events_xid_idx ON domain_events (xid, seq);

-- Where the relay has published up to: every fact with `(xid, seq)` at or below it was published (or put in
-- `domain_outbox`). One row; the relay that holds its lock publishes the new facts (`FOR UPDATE SKIP LOCKED`:
-- another relay retries the outbox meanwhile). It starts below every `xid`.
CREATE TABLE domain_relay_cursor (
    only_row  BOOLEAN PRIMARY KEY DEFAULT true CONSTRAINT domain_relay_cursor_one_row CHECK (only_row),
    xid       xid8    NOT NULL,
    seq       BIGINT  NOT NULL,
    moved_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
INSERT INTO domain_relay_cursor (xid, seq) VALUES ('0'::xid8, 0);

DROP TRIGGER domain_events_enqueue ON domain_events;
DROP FUNCTION domain_events_enqueue();
