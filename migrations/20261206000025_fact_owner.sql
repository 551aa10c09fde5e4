-- The events feed (GET /v1/events) and the merchant's own webhook endpoints (issue 47): a fact names the API
-- client that owns what it is about — its intents, their refunds, its subscriptions — so a client lists, and its
-- endpoints receive, only its own facts. NULL: a fact about nothing a client owns (a payment that arrived only by
-- webhook, hookline's own billing): seen only by the operator's configured destinations and by clients configured
-- with `all_events = true` (a merchant's back office).
ALTER TABLE domain_events
    ADD COLUMN client TEXT
        CONSTRAINT domain_events_client_name CHECK (client ~ '^[a-z0-9_-]{1,64}$');

-- Facts recorded by older versions: the intent facts name their intent, whose client owns them.
UPDATE domain_events e SET client = p.client
  FROM payment_intents p
 WHERE e.type LIKE 'payment\_intent.%'
   AND p.client IS NOT NULL
   AND p.public_id = convert_from(e.body, 'UTF8')::jsonb -> 'data' ->> 'intent_id';

-- A client's feed, newest first: (client, seq DESC) — one index scan per page.
CREATE INDEX domain_events_client_seq_idx ON domain_events (client, seq) WHERE client IS NOT NULL;
