-- Issue 27: every retry to the gateway stays inside the lifetime of its idempotency key, and a decline is an outcome.
--
-- * status 'declined': the gateway declined the charge or refund (a card decline, a rejected payment). The intent is
--   `failed` with the gateway's code and message; nothing for an operator to do, so `hookline status` does not count
--   it (only 'failed' — hookline's own problem — does).
-- * status 'unknown': retryable failures went on until the key was about to expire (key_first_sent_at + ttl -
--   margin). Sending again under that key after it expired could charge twice, so nothing more is sent with it; once
--   the key has expired the dispatcher asks the gateway for the object by hookline's own reference (lookup): found →
--   recorded as the lost answer; not found → the next key generation.
-- * key_generation: the key SENT is `idempotency_key` for generation 0 and `{idempotency_key}-g{n}` after
--   (hookline_payments::outbound_requests::sent_key). A new generation is committed BEFORE anything is sent under it,
--   and only once the previous key has expired and the lookup found nothing: at most one key of a request is live at
--   the gateway at any time. `idempotency_key` itself stays the constant base (UNIQUE, it guards the enqueue).
-- * key_first_sent_at: first send of the CURRENT generation's key (set when the request is first claimed under it;
--   claiming before sending makes the estimate early, never late). unknown_since: when the request became unknown.

ALTER TABLE outbound_requests DROP CONSTRAINT outbound_requests_status_check;
ALTER TABLE outbound_requests ADD CONSTRAINT outbound_requests_status_check
    CHECK (status IN ('pending', 'succeeded', 'declined', 'unknown', 'failed'));

ALTER TABLE outbound_requests
    ADD COLUMN key_generation INTEGER NOT NULL DEFAULT 0
        CONSTRAINT outbound_requests_key_generation_range CHECK (key_generation BETWEEN 0 AND 10000),
    ADD COLUMN key_first_sent_at TIMESTAMPTZ,
    ADD COLUMN unknown_since TIMESTAMPTZ,
    ADD CONSTRAINT outbound_requests_unknown_since CHECK ((status = 'unknown') = (unknown_since IS NOT NULL));

-- Unknown requests are claimed for their lookup by next_attempt_at like pending ones.
DROP INDEX outbound_requests_due_idx;
CREATE INDEX outbound_requests_due_idx ON outbound_requests (next_attempt_at) WHERE status IN ('pending', 'unknown');

COMMENT ON COLUMN outbound_requests.key_generation IS
    'generation of the idempotency key sent: idempotency_key (0) or idempotency_key-g{n}; bumped only after a lookup found nothing';
COMMENT ON COLUMN outbound_requests.unknown_since IS
    'the key expired (or was about to) without a readable answer: resolved by lookup, never by sending under that key';
