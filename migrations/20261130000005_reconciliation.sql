-- Where a stored event came from: 'webhook' (the edge, signature verified) or 'reconcile' (read from the
-- provider's API by `hookline reconcile` because its webhook never arrived). Same table, same UNIQUE key: a
-- webhook that arrives later is a duplicate of the reconciled row, and the other way round.
ALTER TABLE webhook_events
    ADD COLUMN source TEXT NOT NULL DEFAULT 'webhook' CHECK (source IN ('webhook', 'reconcile'));

-- Every reconciliation run is audited like a replay: who, why, which provider and window, what it found, and a
-- cursor so an interrupted run resumes where it stopped.
CREATE TABLE reconcile_runs (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider     TEXT        NOT NULL,
    operator     TEXT        NOT NULL,
    since        TIMESTAMPTZ NOT NULL,
    until        TIMESTAMPTZ NOT NULL,
    dry_run      BOOLEAN     NOT NULL DEFAULT false,
    cursor       TEXT,                   -- provider-specific position (Stripe: starting_after; MP: offset)
    seen         BIGINT      NOT NULL DEFAULT 0,
    present      BIGINT      NOT NULL DEFAULT 0,
    missing      BIGINT      NOT NULL DEFAULT 0,
    stored       BIGINT      NOT NULL DEFAULT 0,
    mismatched   BIGINT      NOT NULL DEFAULT 0,
    started_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at  TIMESTAMPTZ
);
