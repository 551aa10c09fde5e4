-- Worker side: processed markers, payments, the append-only double-entry ledger, and what the worker could not
-- apply (dead letters) or must fetch later.

-- One row per (consumer, stored event) whose effect was applied (or deliberately ignored). Inserted FIRST in the
-- effect's transaction: a concurrent duplicate blocks on the primary key and then finds the row. Never expires:
-- an event replayed years later must still change nothing.
CREATE TABLE processed_events (
    consumer      TEXT        NOT NULL,
    event_id      BIGINT      NOT NULL,  -- webhook_events.id (no FK: raw events may be purged, markers stay)
    processed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    outcome       TEXT        NOT NULL DEFAULT 'applied'
                  CHECK (outcome IN ('applied', 'ignored', 'parked', 'needs_fetch')),
    detail        TEXT,
    CONSTRAINT processed_events_pkey PRIMARY KEY (consumer, event_id)
);

CREATE TABLE payments (
    id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider             TEXT        NOT NULL,
    provider_payment_id  TEXT        NOT NULL,
    status               TEXT        NOT NULL
                         CHECK (status IN ('created', 'processing', 'failed', 'canceled', 'succeeded')),
    amount               BIGINT      CHECK (amount > 0),       -- minor units
    currency             TEXT        CHECK (currency ~ '^[a-z]{3}$'),
    amount_refunded      BIGINT      NOT NULL DEFAULT 0 CHECK (amount_refunded >= 0),
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT payments_provider_payment_id_key UNIQUE (provider, provider_payment_id),
    CONSTRAINT payments_refund_not_above_amount CHECK (amount_refunded <= coalesce(amount, 0))
);

-- Audit trail of status changes (only forward moves are recorded).
CREATE TABLE payment_transitions (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id   BIGINT      NOT NULL REFERENCES payments (id),
    event_id     BIGINT      NOT NULL,
    from_status  TEXT        NOT NULL,
    to_status    TEXT        NOT NULL,
    at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX payment_transitions_payment_idx ON payment_transitions (payment_id);

-- Refunds are their own records, keyed by the provider's refund id. 'parked' = the payment has not succeeded
-- yet; applied by the transaction that makes it succeed.
CREATE TABLE refunds (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider            TEXT        NOT NULL,
    provider_refund_id  TEXT        NOT NULL,
    payment_id          BIGINT      NOT NULL REFERENCES payments (id),
    amount              BIGINT      NOT NULL CHECK (amount > 0),
    currency            TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    status              TEXT        NOT NULL CHECK (status IN ('parked', 'applied', 'rejected')),
    reason              TEXT,
    event_id            BIGINT      NOT NULL,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT refunds_provider_refund_id_key UNIQUE (provider, provider_refund_id)
);
CREATE INDEX refunds_payment_idx ON refunds (payment_id);

CREATE TABLE disputes (
    id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider             TEXT        NOT NULL,
    provider_dispute_id  TEXT        NOT NULL,
    payment_id           BIGINT      NOT NULL REFERENCES payments (id),
    amount               BIGINT      NOT NULL CHECK (amount > 0),
    currency             TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    status               TEXT        NOT NULL CHECK (status IN ('open', 'won', 'lost')),
    -- true once a lost dispute's loss is in the ledger (waits for the payment to succeed: parked until then).
    posted               BOOLEAN     NOT NULL DEFAULT false,
    event_id             BIGINT      NOT NULL,
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT disputes_provider_dispute_id_key UNIQUE (provider, provider_dispute_id)
);
CREATE INDEX disputes_payment_idx ON disputes (payment_id);

-- Double-entry ledger. Append-only (triggers below refuse UPDATE and DELETE). Each posting is unique by
-- (provider, kind, reference): the constraint, not code, prevents a second posting of the same fact.
CREATE TABLE ledger_transactions (
    id          BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider    TEXT        NOT NULL,
    kind        TEXT        NOT NULL CHECK (kind IN ('payment', 'refund', 'dispute')),
    reference   TEXT        NOT NULL,  -- provider payment / refund / dispute id
    payment_id  BIGINT      NOT NULL REFERENCES payments (id),
    event_id    BIGINT      NOT NULL,  -- the stored event whose processing posted it
    currency    TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT ledger_transactions_posting_key UNIQUE (provider, kind, reference)
);

CREATE TABLE ledger_entries (
    id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    transaction_id  BIGINT NOT NULL REFERENCES ledger_transactions (id),
    account         TEXT   NOT NULL,
    amount          BIGINT NOT NULL CHECK (amount <> 0),  -- signed minor units: debit > 0, credit < 0
    CONSTRAINT ledger_entries_account_key UNIQUE (transaction_id, account)
);

-- Every ledger transaction sums to zero, checked at COMMIT (deferred) so entries can be inserted one by one.
CREATE FUNCTION ledger_check_balanced() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE total BIGINT;
BEGIN
    SELECT coalesce(sum(amount), 0) INTO total FROM ledger_entries WHERE transaction_id = NEW.transaction_id;
    IF total <> 0 THEN
        RAISE EXCEPTION 'ledger transaction % does not balance (sum %)', NEW.transaction_id, total
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER ledger_entries_balanced
    AFTER INSERT ON ledger_entries DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION ledger_check_balanced();

CREATE FUNCTION ledger_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the ledger is append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'insufficient_privilege';
END $$;
CREATE TRIGGER ledger_transactions_append_only BEFORE UPDATE OR DELETE ON ledger_transactions
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_entries_append_only BEFORE UPDATE OR DELETE ON ledger_entries
    FOR EACH ROW EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_transactions_no_truncate BEFORE TRUNCATE ON ledger_transactions
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();
CREATE TRIGGER ledger_entries_no_truncate BEFORE TRUNCATE ON ledger_entries
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_append_only();

-- Business key: two different events for the same subscription cycle charge once.
CREATE TABLE subscription_charges (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider         TEXT        NOT NULL,
    subscription_id  TEXT        NOT NULL,
    billing_cycle    TEXT        NOT NULL,
    invoice_id       TEXT        NOT NULL,
    amount           BIGINT      NOT NULL CHECK (amount > 0),
    currency         TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    event_id         BIGINT      NOT NULL,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT subscription_charges_cycle_key UNIQUE (subscription_id, billing_cycle)
);

-- Events whose payload is only a hint (Mercado Pago): the resource must be fetched from the provider's API.
CREATE TABLE pending_fetches (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider     TEXT        NOT NULL,
    resource     TEXT        NOT NULL,
    resource_id  TEXT        NOT NULL,
    event_id     BIGINT      NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    fetched_at   TIMESTAMPTZ,
    CONSTRAINT pending_fetches_resource_key UNIQUE (provider, resource, resource_id, event_id)
);

-- Deliveries the worker gave up on (permanent failure, or the delivery limit): the reason is kept here, the
-- message in the dead-letter queue. No processed marker is written, so a redrive after a fix applies it once.
CREATE TABLE dead_letters (
    consumer         TEXT        NOT NULL,
    event_id         BIGINT      NOT NULL,
    reason           TEXT        NOT NULL,
    attempts         INTEGER     NOT NULL DEFAULT 1,
    first_failed_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_failed_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    resolved_at      TIMESTAMPTZ,
    CONSTRAINT dead_letters_pkey PRIMARY KEY (consumer, event_id)
);
