-- Domain events out: the facts hookline committed, handed on to the merchant's systems exactly once per fact
-- (at least once on the wire, with an id the receiver deduplicates by).
--
--   effect's transaction ──> domain_events (+ one domain_deliveries row per subscribed destination)
--   domain relay ──────────> RabbitMQ {prefix}.domain (topic, routing key = type), marks published_at
--   delivery loop ─────────> each destination's URL, signed per Standard Webhooks, retried, recorded

-- Every payment change moves its version up, so a receiver can ignore an event older than what it has seen.
ALTER TABLE payments ADD COLUMN version BIGINT NOT NULL DEFAULT 1;

CREATE TABLE domain_events (
    seq           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- 'evt_' + 32 hex of sha256 of the fact (type and the business ids it is about): a replay or a redelivery
    -- of the same fact derives the same id, and the UNIQUE constraint keeps one row.
    id            TEXT        NOT NULL CHECK (id ~ '^evt_[0-9a-f]{32}$'),
    type          TEXT        NOT NULL CHECK (type ~ '^[a-z_]+\.[a-z_]+$'),
    -- The exact bytes every destination receives and every signature covers ({"id","type","created_at","data"}).
    body          BYTEA       NOT NULL CHECK (octet_length(body) <= 65536),
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    published_at  TIMESTAMPTZ,                     -- confirmed by RabbitMQ on {prefix}.domain
    CONSTRAINT domain_events_id_key UNIQUE (id)
);
CREATE INDEX domain_events_unpublished_idx ON domain_events (seq) WHERE published_at IS NULL;
CREATE INDEX domain_events_type_idx ON domain_events (type, created_at);

-- The HTTP destinations known to the database: synced from the configuration's [[destinations]] at start (the
-- secrets stay in the configuration). The fan-out statement reads this table, so the database — not a
-- process's memory — decides which destinations a fact goes to.
CREATE TABLE destinations (
    name             TEXT        PRIMARY KEY CHECK (name ~ '^[A-Za-z0-9_-]{1,64}$'),
    url              TEXT        NOT NULL CHECK (length(url) <= 2048),
    events           TEXT[]      NOT NULL,        -- subscribed types; '*' = all
    -- 410 Gone (or an operator) disables a destination: its deliveries wait, nothing is dropped.
    disabled_at      TIMESTAMPTZ,
    disabled_reason  TEXT,
    -- No longer in the configuration: receives no new facts; what was queued for it stays visible.
    removed_at       TIMESTAMPTZ,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- One row per (destination, fact): its own state, attempts and schedule, so one destination's failures never
-- hold another's deliveries.
CREATE TABLE domain_deliveries (
    destination      TEXT        NOT NULL REFERENCES destinations (name),
    event_seq        BIGINT      NOT NULL REFERENCES domain_events (seq),
    status           TEXT        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts         INTEGER     NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Start of the retry window ([delivery] retry_window_secs): when the delivery was queued or redelivered.
    window_start     TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_until      TIMESTAMPTZ,                 -- a delivery loop is sending it until then
    last_status      SMALLINT,
    last_error       TEXT,
    delivered_at     TIMESTAMPTZ,
    dead_reason      TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT domain_deliveries_pkey PRIMARY KEY (destination, event_seq)
);
CREATE INDEX domain_deliveries_due_idx ON domain_deliveries (destination, next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX domain_deliveries_dead_idx ON domain_deliveries (destination) WHERE status = 'dead';

-- What each destination answered, attempt by attempt (status, latency, the first bytes of its body): for
-- `hookline destinations status` and the console.
CREATE TABLE domain_delivery_attempts (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    destination  TEXT        NOT NULL,
    event_seq    BIGINT      NOT NULL,
    attempt      INTEGER     NOT NULL,
    http_status  SMALLINT,
    latency_ms   INTEGER     NOT NULL,
    outcome      TEXT        NOT NULL CHECK (outcome IN ('delivered', 'retry', 'gone', 'dead')),
    error        TEXT        CHECK (length(error) <= 1024),
    response     TEXT        CHECK (length(response) <= 1024),
    at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX domain_delivery_attempts_delivery_idx ON domain_delivery_attempts (destination, event_seq);

-- `hookline events redeliver` is audited in the same table as replays and redrives.
ALTER TABLE replay_runs DROP CONSTRAINT replay_runs_kind_check;
ALTER TABLE replay_runs
    ADD CONSTRAINT replay_runs_kind_check
    CHECK (kind IN ('replay', 'dlq_redrive', 'dlq_discard', 'domain_redeliver'));
