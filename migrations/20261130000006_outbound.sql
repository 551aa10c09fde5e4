-- The outbound direction: the merchant's application asks hookline to charge (payment intents), the worker's
-- dispatcher sends each request to the gateway from an outbox, billing runs charge subscriptions once per cycle,
-- and refunds are their own operations. Three different keys defend three different duplicate entry points:
--   * api_idempotency_keys (client key, Idempotency-Key)   — the double click / the client's own retry;
--   * outbound_requests.idempotency_key (derived, UNIQUE)   — our HTTP retries to the gateway: same key every attempt;
--   * billing_claims (subscription_id, billing_cycle) UNIQUE — the batch re-run.

CREATE TABLE payment_intents (
    id                   BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    public_id            TEXT        NOT NULL,                 -- 'pi_hl_…', what the API shows
    provider             TEXT        NOT NULL,                 -- configured provider name (stripe or mercadopago scheme)
    amount               BIGINT      NOT NULL CHECK (amount > 0 AND amount <= 1000000000000000),
    currency             TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    customer             TEXT        CHECK (length(customer) <= 200),
    description          TEXT        CHECK (length(description) <= 1000),
    -- requires_dispatch: waiting for the dispatcher; processing: the gateway accepted it; succeeded / failed:
    -- the gateway's (or its webhook's) final word; needs_attention: a final 4xx, with the reason in outbound_requests.
    status               TEXT        NOT NULL DEFAULT 'requires_dispatch'
                         CHECK (status IN ('requires_dispatch', 'processing', 'succeeded', 'failed', 'needs_attention')),
    provider_payment_id  TEXT,                                 -- the gateway's id once known (pi_…, MP payment id)
    refunded             BIGINT      NOT NULL DEFAULT 0 CHECK (refunded >= 0),
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT payment_intents_public_id_key UNIQUE (public_id),
    -- Refunds never exceed what was charged: decided by the database, also under concurrent requests.
    CONSTRAINT payment_intents_refund_not_above_amount CHECK (refunded <= amount)
);
CREATE UNIQUE INDEX payment_intents_provider_payment_key
    ON payment_intents (provider, provider_payment_id) WHERE provider_payment_id IS NOT NULL;

-- The merchant API's idempotency: the first response for (client, key) is stored and replayed.
CREATE TABLE api_idempotency_keys (
    client          TEXT        NOT NULL,                      -- which API key (its index, never the secret)
    key             TEXT        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
    request_hash    TEXT        NOT NULL,                      -- sha256 of method, path and body
    response_status SMALLINT,                                  -- NULL while the first request is in flight
    response_body   BYTEA,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    completed_at    TIMESTAMPTZ,
    CONSTRAINT api_idempotency_keys_pkey PRIMARY KEY (client, key)
);
CREATE INDEX api_idempotency_keys_created_idx ON api_idempotency_keys (created_at);

-- Subscriptions the merchant bills through hookline, and the business key of a billing run.
CREATE TABLE subscriptions (
    id           BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider     TEXT        NOT NULL,
    customer     TEXT        NOT NULL CHECK (length(customer) BETWEEN 1 AND 200),
    amount       BIGINT      NOT NULL CHECK (amount > 0 AND amount <= 1000000000000000),
    currency     TEXT        NOT NULL CHECK (currency ~ '^[a-z]{3}$'),
    status       TEXT        NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'canceled')),
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    canceled_at  TIMESTAMPTZ
);

CREATE TABLE billing_claims (
    subscription_id  BIGINT      NOT NULL REFERENCES subscriptions (id),
    billing_cycle    TEXT        NOT NULL CHECK (billing_cycle ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    intent_id        BIGINT      NOT NULL REFERENCES payment_intents (id),
    claimed_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT billing_claims_cycle_key UNIQUE (subscription_id, billing_cycle)
);

-- Refunds requested through hookline: their own records and keys, never "undo the payment".
CREATE TABLE outbound_refunds (
    id                  BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    intent_id           BIGINT      NOT NULL REFERENCES payment_intents (id),
    amount              BIGINT      NOT NULL CHECK (amount > 0),
    reason              TEXT        NOT NULL CHECK (length(btrim(reason)) BETWEEN 1 AND 500),
    status              TEXT        NOT NULL DEFAULT 'requires_dispatch'
                        CHECK (status IN ('requires_dispatch', 'succeeded', 'failed', 'needs_attention')),
    provider_refund_id  TEXT,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The outbox to the gateway, written in the same transaction as the intent or refund. The idempotency key is
-- derived from what it charges ('hookline-intent-{id}', 'hookline-refund-{id}') and is the same on every attempt
-- and after any crash.
CREATE TABLE outbound_requests (
    id               BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind             TEXT        NOT NULL CHECK (kind IN ('charge', 'refund')),
    intent_id        BIGINT      NOT NULL REFERENCES payment_intents (id),
    refund_id        BIGINT      REFERENCES outbound_refunds (id),
    provider         TEXT        NOT NULL,
    idempotency_key  TEXT        NOT NULL,
    status           TEXT        NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts         INTEGER     NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    lease_until      TIMESTAMPTZ,                               -- a dispatcher is sending it until then
    last_status      SMALLINT,                                  -- the gateway's last HTTP status
    last_error       TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT outbound_requests_idempotency_key UNIQUE (idempotency_key)
);
CREATE INDEX outbound_requests_due_idx ON outbound_requests (next_attempt_at) WHERE status = 'pending';
