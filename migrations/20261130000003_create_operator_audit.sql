-- Operator actions. Every replay or dead-letter redrive writes one row: who, when, why, which filter, how many.
-- The cursor makes an interrupted replay resumable without skipping or doubling: events are replayed in id
-- order and `last_event_id` only advances after RabbitMQ confirmed every event up to it.
CREATE TABLE replay_runs (
    id             BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind           TEXT        NOT NULL CHECK (kind IN ('replay', 'dlq_redrive')),
    operator       TEXT        NOT NULL,
    reason         TEXT        NOT NULL CHECK (length(btrim(reason)) > 0),
    filter         JSONB       NOT NULL,
    dry_run        BOOLEAN     NOT NULL DEFAULT false,
    selected       BIGINT,                 -- events matching the filter when the run started
    published      BIGINT      NOT NULL DEFAULT 0,
    last_event_id  BIGINT      NOT NULL DEFAULT 0,
    started_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at    TIMESTAMPTZ
);

-- Purges are audited too.
CREATE TABLE purge_runs (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    operator         TEXT        NOT NULL,
    older_than_secs  BIGINT      NOT NULL,
    forced           BOOLEAN     NOT NULL DEFAULT false,
    dry_run          BOOLEAN     NOT NULL DEFAULT false,
    events_deleted   BIGINT      NOT NULL DEFAULT 0,
    markers_deleted  BIGINT      NOT NULL DEFAULT 0,
    started_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at      TIMESTAMPTZ
);

CREATE INDEX dead_letters_unresolved_idx ON dead_letters (event_id) WHERE resolved_at IS NULL;
CREATE INDEX webhook_events_provider_type_idx ON webhook_events (provider, event_type, id);
