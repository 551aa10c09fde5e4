-- The relay's outbox becomes its own small table of ids, instead of `webhook_events.published_at`.
--
-- Why: marking a published event rewrote its `webhook_events` row — a 1–2 KB row with 8 indexes, never a HOT
-- update because `published_at` was in the unpublished partial index's predicate — once per event, in the
-- same cores that serve the edge (3.4 ms per relay batch, the largest relay cost in `hookline-bench`). Now a
-- stored event is never updated: the relay claims `event_outbox` rows (`FOR UPDATE SKIP LOCKED`, so a sweeper
-- and a fast path, or two edges, never publish one event at the same time), publishes them, and deletes the
-- confirmed ones in the same transaction. A crash or an unconfirmed publish rolls the claim back; the row stays
-- and is published again later (at least once; the worker deduplicates).
CREATE TABLE event_outbox (
    -- `webhook_events.id`. No foreign key: its check would lock the event row on every insert. Retention only
    -- purges events that are no longer here; an orphan (a hand-deleted event) is dropped by the next claim.
    event_id     BIGINT      PRIMARY KEY,
    -- When the event was committed to the outbox (the sweeper's `sweep_min_age` counts from here).
    enqueued_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A queue table: every row is inserted and deleted within moments, so dead rows pile up at the head of its
-- index, where every claim starts. Vacuum it after a fixed number of deletes, not after a fraction of a table
-- that is almost always nearly empty (the default would wait for 20 % of "nothing").
ALTER TABLE event_outbox SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 5000,
                     autovacuum_vacuum_cost_delay = 0);

-- Every stored event enters the outbox in the transaction that stores it, whoever inserts it (the edge, the
-- reconciler, an older edge during a rolling upgrade, a hand-written repair): the database, not each writer,
-- keeps the invariant "committed ⇒ published or in the outbox". One statement-level insert per INSERT
-- statement (the edge's group commit writes many events with one), with the rows really inserted only:
-- a duplicate that `ON CONFLICT DO NOTHING` skipped is not in the transition table.
CREATE FUNCTION webhook_events_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO event_outbox (event_id) SELECT id FROM inserted;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_events_enqueue
    AFTER INSERT ON webhook_events
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_events_enqueue();

-- What the previous version had not published yet is still to publish.
INSERT INTO event_outbox (event_id, enqueued_at)
    SELECT id, received_at FROM webhook_events WHERE published_at IS NULL;

DROP INDEX webhook_events_unpublished_idx;
-- A relay of an earlier version (which would mark rows here) must not run against this schema: it fails
-- loudly on the missing column instead of publishing everything again.
ALTER TABLE webhook_events DROP COLUMN published_at;
