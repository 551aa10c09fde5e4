-- Issue 46: a payment intent can be canceled — by its merchant (POST /v1/payment_intents/{id}/cancel) while its
-- charge was not sent, or by hookline when nobody confirmed it in time (`[api] intent_expiry_secs`).
-- * `canceled` is final, like `succeeded` and `failed`, and RELEASES what a live intent holds: the partial UNIQUE
--   indexes that keep one live intent per (client, order_reference) and per (subscription_id, billing_cycle) now
--   leave canceled intents out, so the order (or cycle) can be paid by a new intent.
-- * canceled_at / cancellation_reason say when and why (Stripe's reasons a merchant gives, or `expired`).
-- * outbound_requests.status `canceled`: the charge of an intent canceled before it was sent; the dispatcher never
--   claims it (its claim and the cancel are decided on this row, see hookline_payments::intents::cancel).

ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_status_check;
ALTER TABLE payment_intents ADD CONSTRAINT payment_intents_status_check
    CHECK (status IN ('requires_confirmation', 'requires_dispatch', 'requires_action', 'processing',
                      'succeeded', 'failed', 'canceled', 'needs_attention'));

ALTER TABLE payment_intents
    ADD COLUMN canceled_at TIMESTAMPTZ,
    ADD COLUMN cancellation_reason TEXT
        CONSTRAINT payment_intents_cancellation_reason_check
        CHECK (cancellation_reason IN ('duplicate', 'fraudulent', 'requested_by_customer', 'abandoned', 'expired')),
    ADD CONSTRAINT payment_intents_canceled_pair
        CHECK ((status = 'canceled') = (canceled_at IS NOT NULL)
               AND (cancellation_reason IS NULL OR status = 'canceled'));

DROP INDEX payment_intents_live_order;
CREATE UNIQUE INDEX payment_intents_live_order
    ON payment_intents (client, order_reference)
    WHERE order_reference IS NOT NULL AND status NOT IN ('failed', 'canceled');

DROP INDEX payment_intents_live_cycle;
CREATE UNIQUE INDEX payment_intents_live_cycle
    ON payment_intents (subscription_id, billing_cycle)
    WHERE subscription_id IS NOT NULL AND status NOT IN ('failed', 'canceled');

-- The expiry sweep reads only the unconfirmed intents, oldest first.
CREATE INDEX payment_intents_unconfirmed_idx
    ON payment_intents (created_at) WHERE status = 'requires_confirmation';

ALTER TABLE outbound_requests DROP CONSTRAINT outbound_requests_status_check;
ALTER TABLE outbound_requests ADD CONSTRAINT outbound_requests_status_check
    CHECK (status IN ('pending', 'succeeded', 'declined', 'unknown', 'failed', 'canceled'));
