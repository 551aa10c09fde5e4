-- Merchant API clients get stable names (`[[api.clients]] name = "…"`), issue 25 findings 3 and 4.
--
-- Before: `api_idempotency_keys.client` was the key's INDEX in `[api] keys` ('0', '1', …), so removing or
-- reordering a key shifted every later client onto another's stored answers, and intents had no owner at all
-- (any key read and refunded any intent). Now intents and idempotency keys belong to the client's NAME.
--
-- The legacy `[api] keys` list keeps working as ONE client named 'default' (every listed key is that client),
-- so old rows map to it:
--   * idempotency keys: every index-based client ('0', '1', …) becomes 'default'. Two legacy keys may have used
--     the same Idempotency-Key; only one row can survive (primary key (client, key)): the earliest created
--     (ties: the lower index) is kept, the others deleted. Safe: a retry of a deleted row either replays the
--     kept answer (identical request) or gets 422 idempotency_key_reused, never a second intent. Rows live at
--     most `[api] idempotency_window_secs` (24 h) anyway.
--   * intents: an intent not created by a billing run was created through the API (the only two writers), so
--     it belongs to 'default'. Billing-run intents (and the CLI's) keep client NULL: hookline's own, never shown
--     to an API client. An operator moving to named clients keeps these old intents visible by naming one
--     client 'default'.

ALTER TABLE payment_intents
    ADD COLUMN client TEXT
        CONSTRAINT payment_intents_client_name CHECK (client ~ '^[a-z0-9_-]{1,64}$');

UPDATE payment_intents p SET client = 'default'
 WHERE NOT EXISTS (SELECT 1 FROM billing_claims b WHERE b.intent_id = p.id);

-- The API reads an intent by (public_id, client): public_id is unique, so its index serves both.

DELETE FROM api_idempotency_keys k
 USING (SELECT client, key,
               row_number() OVER (PARTITION BY key ORDER BY created_at, client::bigint) AS rank
          FROM api_idempotency_keys WHERE client ~ '^[0-9]{1,18}$') ranked
 WHERE k.client = ranked.client AND k.key = ranked.key AND ranked.rank > 1;

UPDATE api_idempotency_keys SET client = 'default' WHERE client ~ '^[0-9]{1,18}$';

ALTER TABLE api_idempotency_keys
    ADD CONSTRAINT api_idempotency_keys_client_name CHECK (client ~ '^[a-z0-9_-]{1,64}$');

COMMENT ON COLUMN payment_intents.client IS
    'the merchant API client (its [[api.clients]] name) that created it; NULL = hookline''s own (billing, CLI), never shown by the API';
COMMENT ON COLUMN api_idempotency_keys.client IS
    'the merchant API client name ([[api.clients]] name, or ''default'' for the legacy [api] keys)';
