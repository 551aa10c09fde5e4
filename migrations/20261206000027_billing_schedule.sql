-- Billing runs itself (issue 48): the workers charge due periods on a schedule, and merchants manage
-- subscriptions through the API.
--
-- * subscriptions.next_cycle / next_period_at: the first cycle of the subscription not yet decided by billing, and
--   when its period starts. The workers' scheduler reads `next_period_at <= now` through the partial index
--   subscriptions_due_idx (active subscriptions only), so a round touches due subscriptions only, never the whole
--   table. It is a pointer, not the authority: a cycle is still charged once because billing_claims_cycle_key and
--   payment_intents_live_cycle decide, under the subscription's row lock; the pointer moves in the transaction
--   that decides the cycle. Rows of older versions start at their anchor: the scheduler moves a pointer that lies
--   before the subscription's creation, or before the previous period (the cycle rule's window), forward without
--   charging what it skips.
-- * subscriptions.public_id ('sub_hl_…'): what the merchant API shows; subscriptions.client: the API client that
--   owns it (NULL: the operator's, created with `hookline subscriptions add`, never shown to a client).
ALTER TABLE subscriptions
    ADD COLUMN public_id TEXT,
    ADD COLUMN client TEXT
        CONSTRAINT subscriptions_client_name CHECK (client ~ '^[a-z0-9_-]{1,64}$'),
    ADD COLUMN next_cycle TEXT
        CONSTRAINT subscriptions_next_cycle_format CHECK (next_cycle ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    ADD COLUMN next_period_at TIMESTAMPTZ;

UPDATE subscriptions
   SET public_id = 'sub_hl_' || replace(gen_random_uuid()::text, '-', ''),
       next_cycle = to_char(anchor AT TIME ZONE 'UTC', 'YYYY-MM'),
       next_period_at = anchor;

ALTER TABLE subscriptions
    ALTER COLUMN public_id SET NOT NULL,
    ALTER COLUMN public_id SET DEFAULT 'sub_hl_' || replace(gen_random_uuid()::text, '-', ''),
    ALTER COLUMN next_cycle SET NOT NULL,
    ALTER COLUMN next_period_at SET NOT NULL,
    ADD CONSTRAINT subscriptions_public_id_key UNIQUE (public_id);

-- The scheduler's pick: the active subscriptions whose next period has started, oldest first.
CREATE INDEX subscriptions_due_idx ON subscriptions (next_period_at, id) WHERE status = 'active';
-- A client's list, newest first (cursor on id).
CREATE INDEX subscriptions_client_idx ON subscriptions (client, id) WHERE client IS NOT NULL;

COMMENT ON COLUMN subscriptions.next_cycle IS
    'the first cycle billing has not decided yet (a pointer for the scheduler; billing_claims decides)';
COMMENT ON COLUMN subscriptions.client IS
    'the merchant API client (its [[api.clients]] name) that created it; NULL = the operator''s (CLI), never shown by the API';
