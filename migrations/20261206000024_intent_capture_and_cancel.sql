-- Issue 46, second part: an intent's operations after its charge was sent — the cancel of a payment still open at
-- the gateway (3-D Secure, a Pix or boleto waiting, an authorization: the void) and the capture of an
-- authorization (`capture_method = 'manual'`). Each is an outbound request of its own (kind `cancel` / `capture`)
-- with its own derived key, sent by the dispatcher under the same key-lifetime rules as charges and refunds.
--
-- * `requires_capture`: the gateway authorized only; `amount_capturable` is the amount (the API shows it).
-- * `pending_operation`: the cancel or capture asked of the gateway and not answered yet. ONE statement sets it
--   (only from NULL): two captures with two keys, or a capture racing a cancel, are decided by the row — one
--   operation per intent at a time. Cleared when the gateway's answer (or its webhook) is recorded.
-- * `amount_to_capture`: what the capture asked for (NULL: all); `amount_captured`: what was captured (a succeeded
--   intent's amount, or less after a partial capture) — refunds are bounded by it.
-- * `cancellation_reason` `automatic`: the gateway canceled it by itself (an authorization it let expire, a Pix
--   that expired, a cancel in its dashboard).
-- * payments.status `authorized`: a provider's authorized-not-captured payment. It ranks between `processing` and
--   `failed` (forward-only as every payment status) and moves no money: revenue is posted at `succeeded`, with the
--   captured amount.

ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_status_check;
ALTER TABLE payment_intents ADD CONSTRAINT payment_intents_status_check
    CHECK (status IN ('requires_confirmation', 'requires_dispatch', 'requires_action', 'requires_capture',
                      'processing', 'succeeded', 'failed', 'canceled', 'needs_attention'));

ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_cancellation_reason_check;
ALTER TABLE payment_intents ADD CONSTRAINT payment_intents_cancellation_reason_check
    CHECK (cancellation_reason IN ('duplicate', 'fraudulent', 'requested_by_customer', 'abandoned', 'expired',
                                   'automatic'));
-- A cancel asked of the gateway keeps its reason while the intent is still open: the pair now allows a reason
-- with a pending cancel.
ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_canceled_pair;

ALTER TABLE payment_intents
    ADD COLUMN capture_method TEXT NOT NULL DEFAULT 'automatic'
        CONSTRAINT payment_intents_capture_method_check CHECK (capture_method IN ('automatic', 'manual')),
    ADD COLUMN pending_operation TEXT
        CONSTRAINT payment_intents_pending_operation_check CHECK (pending_operation IN ('cancel', 'capture')),
    ADD COLUMN amount_to_capture BIGINT
        CONSTRAINT payment_intents_amount_to_capture_check CHECK (amount_to_capture > 0 AND amount_to_capture <= amount),
    ADD COLUMN amount_captured BIGINT
        CONSTRAINT payment_intents_amount_captured_check CHECK (amount_captured > 0 AND amount_captured <= amount),
    ADD CONSTRAINT payment_intents_canceled_pair
        CHECK ((status = 'canceled') = (canceled_at IS NOT NULL)
               AND (cancellation_reason IS NULL OR status = 'canceled' OR pending_operation = 'cancel')),
    ADD CONSTRAINT payment_intents_refund_not_above_captured
        CHECK (refunded <= coalesce(amount_captured, amount));

-- The expiry sweep also reads the intents waiting on their customer (3-D Secure, Pix, boleto), oldest first.
CREATE INDEX payment_intents_awaiting_customer_idx
    ON payment_intents (created_at) WHERE status = 'requires_action' AND pending_operation IS NULL;

ALTER TABLE outbound_requests DROP CONSTRAINT outbound_requests_kind_check;
ALTER TABLE outbound_requests ADD CONSTRAINT outbound_requests_kind_check
    CHECK (kind IN ('charge', 'refund', 'cancel', 'capture'));

ALTER TABLE payments DROP CONSTRAINT payments_status_check;
ALTER TABLE payments ADD CONSTRAINT payments_status_check
    CHECK (status IN ('created', 'processing', 'authorized', 'failed', 'canceled', 'succeeded'));
