-- Indexes for the operator console (hookline-edge `[console]`). Its event list pages by id, newest first
-- (keyset: `WHERE id < $cursor ORDER BY id DESC LIMIT n`, never OFFSET), under optional filters; each filter
-- gets an index that yields ids in order, so a page reads about `n` index entries whatever the table size.
CREATE INDEX webhook_events_provider_id_idx ON webhook_events (provider, id);
CREATE INDEX webhook_events_type_id_idx ON webhook_events (event_type, id);
-- Search by the provider's event id alone (the UNIQUE key leads with the provider).
CREATE INDEX webhook_events_provider_event_id_idx ON webhook_events (provider_event_id);
-- Event detail: the transitions and postings an event caused, and a payment's postings.
CREATE INDEX payment_transitions_event_idx ON payment_transitions (event_id);
CREATE INDEX ledger_transactions_event_idx ON ledger_transactions (event_id);
CREATE INDEX ledger_transactions_payment_idx ON ledger_transactions (payment_id);
-- Outbound intents page: the requests of an intent.
CREATE INDEX outbound_requests_intent_idx ON outbound_requests (intent_id);
