-- Issue 28: a Mercado Pago saved card (merchant-initiated, no CVV) is paid with a single-use card token the dispatcher
-- mints from it (GET /v1/customers/{customer}/cards/{card}, POST /v1/card_tokens {card_id, customer_id}).
--
-- * saved_card: what was minted for the key generation saved_card_generation — {"token", "payment_method_id",
--   "billing_date"} (hookline_payments::gateway::mercadopago::MintedCard). Stored BEFORE the payment is sent, so
--   every attempt of that generation sends the identical body under the same X-Idempotency-Key (a second token
--   under the same key would be a different request). A new key generation mints anew: the generation is kept
--   beside it and a token of another generation is never sent.
-- * The token pays once and is bound to the merchant's access token; it is never shown (not in RequestRow, not in
--   the API, the console or the logs).

ALTER TABLE outbound_requests
    ADD COLUMN saved_card JSONB
        CONSTRAINT outbound_requests_saved_card_size CHECK (octet_length(saved_card::text) <= 2048),
    ADD COLUMN saved_card_generation INTEGER,
    ADD CONSTRAINT outbound_requests_saved_card_pair
        CHECK ((saved_card IS NULL) = (saved_card_generation IS NULL));

COMMENT ON COLUMN outbound_requests.saved_card IS
    'Mercado Pago saved card: the card token minted for key generation saved_card_generation (sent on every attempt of it)';
