-- Raw webhook events as received by the edge. One row per (provider, provider_event_id): the UNIQUE constraint,
-- not application code, decides what is a duplicate (INSERT ... ON CONFLICT DO NOTHING).
CREATE TABLE webhook_events (
    id                 BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider           TEXT        NOT NULL,
    provider_event_id  TEXT        NOT NULL,
    event_type         TEXT,
    received_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- The timestamp the provider signed, for schemes that sign one.
    signed_at          TIMESTAMPTZ,
    -- Request headers as a JSON array of [name, value] pairs, in arrival order (credentials removed).
    headers            JSONB       NOT NULL,
    query              TEXT        NOT NULL DEFAULT '',
    -- Byte-exact body: never re-serialised, so it can be re-verified and replayed; BYTEA because JSONB would
    -- reject \u0000 and reorder keys, and TEXT would reject invalid UTF-8.
    body               BYTEA       NOT NULL,
    -- Set by the relay once RabbitMQ confirmed the event (outbox); NULL = still to publish.
    published_at       TIMESTAMPTZ,
    CONSTRAINT webhook_events_provider_event_id_key UNIQUE (provider, provider_event_id)
);

-- The relay sweeps unpublished rows oldest first; a partial index keeps that scan proportional to the backlog.
CREATE INDEX webhook_events_unpublished_idx ON webhook_events (id) WHERE published_at IS NULL;
CREATE INDEX webhook_events_received_at_idx ON webhook_events (received_at);
