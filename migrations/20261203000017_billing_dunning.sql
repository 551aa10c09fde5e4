-- Issue 28: billing a merchant can run for real — intervals and anchors, dunning, and one live charge per
-- (subscription, cycle) whatever channel creates it.
--
-- * subscriptions: interval (month | year) and anchor (a period starts on the anchor's day of the month — of the
--   year, yearly — at its time of day, UTC, clamped to the month's last day); cancel_at_period_end; the statuses a
--   failed cycle leads to: past_due (every retry declined) and needs_payment_method (the gateway called the method
--   unusable: retrying it blindly would only decline again). Both "park" the subscription: no new cycle is charged
--   until its payment method is updated.
-- * billing_claims: still one row per (subscription, cycle) (billing_claims_cycle_key), now with the cycle's
--   dunning state. The retry schedule is copied from the provider's configuration when the cycle is claimed, so the
--   transaction that records a decline (the worker's, the dispatcher's) decides the next attempt without the
--   configuration, and a configuration change applies to cycles claimed after it.
-- * payment_intents: the subscription and cycle a charge pays. The partial UNIQUE index payment_intents_live_cycle
--   keeps at most ONE live (in flight or succeeded) charge per (subscription, cycle), whichever channel created it:
--   a billing run and a merchant API checkout for the same cycle cannot both charge (Lago #5708). Each dunning
--   attempt is a new intent (a decline is the final answer of its idempotency key).

ALTER TABLE subscriptions
    ADD COLUMN interval             TEXT        NOT NULL DEFAULT 'month'
        CONSTRAINT subscriptions_interval_known CHECK (interval IN ('month', 'year')),
    ADD COLUMN anchor               TIMESTAMPTZ,
    ADD COLUMN cancel_at_period_end BOOLEAN     NOT NULL DEFAULT false,
    ADD COLUMN status_reason        TEXT
        CONSTRAINT subscriptions_status_reason_length CHECK (length(status_reason) <= 1000),
    ADD COLUMN updated_at           TIMESTAMPTZ NOT NULL DEFAULT now();
-- Older subscriptions were billed by the cycle named on the command line: anchored on the first of the month they
-- were created in, so that every cycle since then is theirs.
UPDATE subscriptions SET anchor = date_trunc('month', created_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
ALTER TABLE subscriptions ALTER COLUMN anchor SET NOT NULL, ALTER COLUMN anchor SET DEFAULT now();
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_status_check;
ALTER TABLE subscriptions ADD CONSTRAINT subscriptions_status_check
    CHECK (status IN ('active', 'past_due', 'needs_payment_method', 'canceled'));

ALTER TABLE billing_claims
    ADD COLUMN status               TEXT        NOT NULL DEFAULT 'charging'
        CONSTRAINT billing_claims_status_known CHECK (status IN ('charging', 'retry_scheduled', 'paid', 'past_due',
                                                                 'needs_payment_method', 'canceled')),
    ADD COLUMN attempts             INT         NOT NULL DEFAULT 1
        CONSTRAINT billing_claims_attempts_positive CHECK (attempts BETWEEN 1 AND 100),
    ADD COLUMN next_attempt_at      TIMESTAMPTZ,
    ADD COLUMN retry_schedule_secs  INT[]       NOT NULL DEFAULT '{}'
        CONSTRAINT billing_claims_schedule_bounded CHECK (cardinality(retry_schedule_secs) <= 10),
    ADD COLUMN last_failure_code    TEXT
        CONSTRAINT billing_claims_failure_code_length CHECK (length(last_failure_code) <= 200),
    ADD COLUMN last_failure_message TEXT
        CONSTRAINT billing_claims_failure_message_length CHECK (length(last_failure_message) <= 1000),
    ADD COLUMN updated_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    ADD CONSTRAINT billing_claims_retry_has_time CHECK (status <> 'retry_scheduled' OR next_attempt_at IS NOT NULL);
-- Claims of older versions follow their intent: paid, or failed without dunning (an operator decides: past_due).
UPDATE billing_claims b
   SET status = CASE p.status WHEN 'succeeded' THEN 'paid' WHEN 'failed' THEN 'past_due' ELSE 'charging' END
  FROM payment_intents p
 WHERE p.id = b.intent_id;
CREATE INDEX billing_claims_due_idx ON billing_claims (next_attempt_at) WHERE status = 'retry_scheduled';
CREATE INDEX billing_claims_open_idx ON billing_claims (subscription_id)
    WHERE status IN ('retry_scheduled', 'past_due', 'needs_payment_method');

ALTER TABLE payment_intents
    ADD COLUMN subscription_id BIGINT
        CONSTRAINT payment_intents_subscription_fkey REFERENCES subscriptions (id),
    ADD COLUMN billing_cycle   TEXT
        CONSTRAINT payment_intents_billing_cycle_format CHECK (billing_cycle ~ '^[0-9]{4}-(0[1-9]|1[0-2])$'),
    ADD CONSTRAINT payment_intents_cycle_pair CHECK ((subscription_id IS NULL) = (billing_cycle IS NULL));
UPDATE payment_intents p
   SET subscription_id = b.subscription_id, billing_cycle = b.billing_cycle
  FROM billing_claims b
 WHERE b.intent_id = p.id;
CREATE UNIQUE INDEX payment_intents_live_cycle
    ON payment_intents (subscription_id, billing_cycle)
    WHERE subscription_id IS NOT NULL AND status <> 'failed';

COMMENT ON COLUMN billing_claims.retry_schedule_secs IS
    'seconds to wait after the 1st, 2nd, … decline (the provider''s dunning_retry_secs when the cycle was claimed)';
COMMENT ON COLUMN payment_intents.billing_cycle IS
    'the subscription cycle this charge pays (with subscription_id); one live charge per cycle (payment_intents_live_cycle)';
