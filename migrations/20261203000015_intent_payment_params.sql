-- Issue 27: intents carry what a real gateway needs to charge, the key is born with the intent, and one merchant
-- order has at most one live intent.
--
-- * payment_params: the provider object the merchant sent ({"stripe": {...}} or {"mercadopago": {...}}), validated
--   by the API (hookline_payments::params::PaymentParams). NULL for intents of older versions: the dispatcher
--   refuses to charge them without it (needs_attention with the reason) rather than invent a payment method.
-- * requires_confirmation: created with confirm=false when the checkout is built; POST …/confirm moves it to
--   requires_dispatch and enqueues the charge (the outbound request's UNIQUE key makes a second confirm a no-op).
-- * requires_action: the gateway wants the customer (3-D Secure, a Pix QR code to pay); next_action holds what the
--   merchant's front end shows. The webhook completes it.
-- * failure_code / failure_message: the gateway's decline (a decline is an outcome, not an incident).
-- * order_reference: the merchant's order; a partial UNIQUE index keeps one live (not failed) intent per order and
--   client, the defence for a front end that makes a new Idempotency-Key per click.

ALTER TABLE payment_intents
    ADD COLUMN payment_params  JSONB
        CONSTRAINT payment_intents_payment_params_size CHECK (octet_length(payment_params::text) <= 8192),
    ADD COLUMN order_reference TEXT
        CONSTRAINT payment_intents_order_reference_length CHECK (length(order_reference) BETWEEN 1 AND 200),
    ADD COLUMN next_action     JSONB
        CONSTRAINT payment_intents_next_action_size CHECK (octet_length(next_action::text) <= 65536),
    ADD COLUMN failure_code    TEXT
        CONSTRAINT payment_intents_failure_code_length CHECK (length(failure_code) <= 200),
    ADD COLUMN failure_message TEXT
        CONSTRAINT payment_intents_failure_message_length CHECK (length(failure_message) <= 1000);

ALTER TABLE payment_intents DROP CONSTRAINT payment_intents_status_check;
ALTER TABLE payment_intents ADD CONSTRAINT payment_intents_status_check
    CHECK (status IN ('requires_confirmation', 'requires_dispatch', 'requires_action', 'processing',
                      'succeeded', 'failed', 'needs_attention'));

-- One live intent per (client, merchant order). Intents of hookline's own (client NULL) never collide: NULLs are
-- distinct in a UNIQUE index.
CREATE UNIQUE INDEX payment_intents_live_order
    ON payment_intents (client, order_reference)
    WHERE order_reference IS NOT NULL AND status <> 'failed';

-- A refund asked for by the CLI carries the operator's key: the same command run twice refunds once.
ALTER TABLE outbound_refunds
    ADD COLUMN request_key TEXT
        CONSTRAINT outbound_refunds_request_key_length CHECK (length(request_key) BETWEEN 1 AND 255),
    ADD CONSTRAINT outbound_refunds_request_key UNIQUE (intent_id, request_key);

COMMENT ON COLUMN payment_intents.payment_params IS
    'the provider object the merchant sent ({"stripe": …} | {"mercadopago": …}); NULL for older intents';
COMMENT ON COLUMN payment_intents.next_action IS
    'what the customer must do (Stripe next_action, Pix QR data) while status = requires_action';

-- A subscription is charged off-session with a method saved at its provider (Stripe cus_… + pm_…; Mercado Pago
-- customer + card id): `customer` is now the customer AT THE PROVIDER, `payment_method` the saved method. Older
-- subscriptions have none: the billing run's charge needs attention instead of inventing one.
ALTER TABLE subscriptions
    ADD COLUMN payment_method TEXT
        CONSTRAINT subscriptions_payment_method_length CHECK (length(payment_method) BETWEEN 1 AND 255);
