-- `hookline status` counts payment intents and refunds the gateway has not settled for a while (an intent
-- `processing` with no webhook, a charge never answered readably): these partial indexes keep that count cheap
-- however many settled intents the tables hold (only the unsettled rows are indexed, by the age it is judged on).
CREATE INDEX payment_intents_unresolved_idx
    ON payment_intents (updated_at) WHERE status IN ('requires_dispatch', 'processing');
CREATE INDEX outbound_refunds_unresolved_idx
    ON outbound_refunds (updated_at) WHERE status = 'requires_dispatch';
