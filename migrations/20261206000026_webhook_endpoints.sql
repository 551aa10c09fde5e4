-- Webhook endpoints the merchant manages through the API (issue 47): rows of `destinations`, so that facts reach
-- them through the same fan-out statement, outbox (`domain_deliveries`), delivery loops and retry rules as the
-- operator's configured `[[destinations]]`. What tells them apart is `client`: NULL for the operator's (synced from
-- the configuration, secrets in the configuration), the owning API client's name for an endpoint made through the
-- API (its name is its public id `we_…`, its secrets live here, since no configuration holds them).
ALTER TABLE destinations
    ADD COLUMN client TEXT
        CONSTRAINT destinations_client_name CHECK (client ~ '^[a-z0-9_-]{1,64}$'),
    -- Copied from the client's `[[api.clients]] all_events` when the endpoint is made or changed, and refreshed for
    -- every endpoint when the API starts: an all_events client's endpoints receive every fact, the others only the
    -- facts about what their client owns (`domain_events.client`). Read by the fan-out, so no process's memory
    -- decides who receives what.
    ADD COLUMN all_events BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN description TEXT
        CONSTRAINT destinations_description_length CHECK (length(description) <= 1000),
    -- The Standard Webhooks secret (`whsec_` + base64) of an API endpoint; after a rotation the previous one keeps
    -- signing, as a second signature, until `previous_secret_expires_at`.
    ADD COLUMN secret TEXT,
    ADD COLUMN previous_secret TEXT,
    ADD COLUMN previous_secret_expires_at TIMESTAMPTZ,
    -- `[api] allow_private_webhook_urls` as the API last saw it (set on create and update, refreshed at the API's
    -- start): the delivery loops, which do not read `[api]`, refuse to connect to a non-public address unless it is
    -- true. Meaningless for the operator's destinations (never restricted).
    ADD COLUMN allow_private BOOLEAN NOT NULL DEFAULT false,
    -- 1..16 while an API endpoint is live, NULL once deleted (and for configured destinations): the unique
    -- constraint decides the bound of 16 endpoints per client in the INSERT itself, never by a count read first.
    ADD COLUMN slot SMALLINT
        CONSTRAINT destinations_slot_range CHECK (slot BETWEEN 1 AND 16),
    ADD CONSTRAINT destinations_client_slot UNIQUE (client, slot),
    -- The operator's destinations never have their secrets here; a deleted API endpoint's are wiped.
    ADD CONSTRAINT destinations_api_secret CHECK (client IS NOT NULL OR secret IS NULL),
    ADD CONSTRAINT destinations_previous_secret
        CHECK ((previous_secret IS NULL) = (previous_secret_expires_at IS NULL));

-- A client's endpoints, newest first (the list, at most 16 live ones each).
CREATE INDEX destinations_client_idx ON destinations (client, created_at) WHERE client IS NOT NULL;
