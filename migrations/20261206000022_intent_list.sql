-- The merchant's list of its payment intents (GET /v1/payment_intents, issue 46): newest first, paged by id, one
-- client's only. This index serves every page by a backward scan of one client's entries that stops at the page's
-- size (the other filters are checked on the rows it reaches).
CREATE INDEX IF NOT EXISTS payment_intents_client_list_idx ON payment_intents (client, id);
