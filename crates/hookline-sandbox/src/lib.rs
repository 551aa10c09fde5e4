//! `hookline-sandbox`: Stripe, Mercado Pago and Pagar.me (Core API v5) on one machine — a real HTTP server that
//! plays the providers' API and webhook sides closely enough that code tested against it works against the real thing, plus the faults
//! the real thing produces only on bad days. It is a test double of **external** systems: nothing in hookline
//! runs through it in production.
//!
//! It must never: be linked by a production binary other than the CLI's `sandbox` command; accept what the real
//! APIs refuse (a test that passes against it must have a gateway that behaves the same).
//!
//! Run it with `hookline sandbox --listen 127.0.0.1:12111 [--seed N]` (settings from the hookline configuration,
//! see `hookline_cli`), or in-process from a test with [`Sandbox::start`]. State lives **in memory only**: a restart
//! forgets every object, key and delivery.
//!
//! # API
//!
//! Every provider is served at its real paths, so a client only needs its base URL changed
//! (`providers.NAME.api_base`). `/v1/payments…`, `/v1/card_tokens…` and `/v1/customers/{id}/cards…` are
//! Mercado Pago, every other `/v1/…` path is Stripe, except `POST /v1/customers` and `GET /v1/customers/{id}`,
//! which both serve: such a request goes to the provider whose API key it carries (else the only scheme
//! configured, else by its shape: a JSON body or an id without `cus_` is Mercado Pago's). When several providers
//! are configured they are told apart by their API key (`Authorization: Bearer <api_token>`; Stripe also takes
//! HTTP Basic with the key as user name). A provider with
//! an `api_token` requires it: Stripe answers 401 `{"error":{"type":"invalid_request_error","message":"Invalid API
//! Key provided: sk_test_****…"}}`, Mercado Pago 401 `{"message":"invalid_token","error":"unauthorized",
//! "status":401,"cause":[]}`.
//!
//! **Stripe** (form-encoded requests, JSON answers, `Request-Id` and `Stripe-Version` headers):
//!
//! | endpoint | what |
//! |---|---|
//! | `POST /v1/payment_intents` | `amount`, `currency`, `customer` (a `cus_…` that exists), `description`, `metadata[…]`, `payment_method`, `confirm`, `off_session` (needs `confirm=true`, and a `customer` with the payment method attached to it), `return_url`, `capture_method` (`automatic`, `automatic_async` — played as `automatic` —, `manual`); `pi_…`, `requires_payment_method`/`requires_confirmation`, or with `confirm=true` what confirming gives |
//! | `POST /v1/payment_intents/{id}/confirm` | without a payment method 400 `payment_intent_unexpected_state` (the intent in the error); an unknown `pm_…` 400 `resource_missing`; another customer's method, or with `off_session=true` a method not attached to the intent's customer (a bare `pm_card_…` is attached to nobody) or no customer, 400 `invalid_request_error` with `param: payment_method`; else `succeeded`, 402 `card_error` for Stripe's decline test methods (`pm_card_chargeDeclined`, `…InsufficientFunds`, `…Fraudulent`, `…LostCard`, `…StolenCard`, `pm_card_chargeCustomerFail` — attaches, then always declines), `requires_action` + `next_action` for `pm_card_threeDSecure2Required`/`pm_card_authenticationRequired` (402 `authentication_required` off session), or the saved method's script, or a forced outcome (declines carry Stripe's code and message: `card_declined`, `expired_card`, `incorrect_cvc`, `processing_error`, …); a `capture_method=manual` intent whose card authorizes (at once, or once its 3-D Secure is passed) is `requires_capture` instead of `succeeded`: `amount_capturable` = `amount`, `amount_received` 0, its charge `succeeded` with `captured: false`, `amount_captured` 0, no balance transaction; events `charge.succeeded` and `payment_intent.amount_capturable_updated`. A `succeeded`, `requires_capture` or `canceled` intent is not confirmable (400 `payment_intent_unexpected_state`) |
//! | `POST /v1/payment_intents/{id}/capture` | a `requires_capture` intent, optional `amount_to_capture` (positive integer, ≤ `amount_capturable`: more is 400 `amount_too_large` with `param: amount_to_capture`), `metadata[…]` (merged): `succeeded`, `amount_received` = captured, `amount_capturable` 0; its charge `captured`, `amount_captured` = captured, the uncaptured rest released and shown in `amount_refunded` (as Stripe shows it; refunds are bounded by what was captured); events `charge.captured`, `payment_intent.succeeded`. Any other status: 400 `payment_intent_unexpected_state` ("This PaymentIntent could not be captured because it has a status of …") |
//! | `POST /v1/payment_intents/{id}/cancel` | optional `cancellation_reason` (`duplicate`, `fraudulent`, `requested_by_customer`, `abandoned`): from `requires_payment_method`, `requires_confirmation`, `requires_action`, `requires_capture` (the void: the authorization released, `amount_capturable` 0, the charge's `amount_refunded` its amount, nothing captured), `processing` → `canceled` with `canceled_at`, `payment_intent.canceled`; `succeeded`/`canceled`: 400 `payment_intent_unexpected_state` |
//! | `GET /v1/payment_intents` | list: `limit` (≤ 100), `starting_after`, `ending_before`, `customer`, `created` |
//! | `GET /v1/payment_intents/search` | `query` (`metadata['k']:'v'`, `status`, `customer`, `currency`, `amount`, `AND`, `-` negation), `limit`, `page`; `search_result` |
//! | `POST /v1/customers`, `GET /v1/customers/{id}` | minimal customers |
//! | `POST /v1/payment_methods/{pm}/attach`, `GET /v1/payment_methods/{pm}` | a `pm_card_…` attached is minted into a `pm_…` of the customer; one attached to another customer is refused (attach and charge) |
//! | `GET /v1/payment_intents/{id}`, `GET /v1/charges/{id}`, `GET /v1/refunds/{id}`, `GET /v1/events/{id}` | the object, or 404 `resource_missing` |
//! | `POST /v1/refunds` | `payment_intent` or `charge`, optional `amount` (≤ what remains, else 400 `amount_too_large`; 400 `charge_already_refunded` once nothing remains), `reason`, `metadata[…]`; `re_…`, `status: succeeded` |
//! | `GET /v1/refunds` | list: `payment_intent`, `charge`, `limit`, `starting_after`, `ending_before` |
//! | `GET /v1/events` | newest first in Stripe's list envelope; `limit` (10, max 100), `starting_after`, `ending_before`, `type` (`payment_intent.*` wildcards), `types[]`, `created` / `created[gt|gte|lt|lte]`, `delivery_success` |
//!
//! Every 400 `payment_intent_unexpected_state` (confirm, capture, cancel) carries the intent as it is in
//! `error.payment_intent`, as Stripe's does. An authorization left uncaptured 7 days (on the sandbox clock, from
//! when the card authorized) expires: the intent becomes `canceled` with `cancellation_reason: "automatic"`, the
//! authorization released, and `payment_intent.canceled` is sent (an event of no request). Expiry happens when
//! `POST /_sandbox/clock` moves the clock past it, and at the latest before the provider next answers any request
//! (a read, a list or a write).
//!
//! Unknown parameters get 400 `parameter_unknown`, missing ones `parameter_missing`, as Stripe does.
//! `Stripe-Version` (`YYYY-MM-DD` with an optional `.name`) is answered back as asked, the sandbox's `2024-06-20` when
//! absent; a malformed one is 400 `Invalid Stripe API version: …` (the payloads do not change with it). Every state
//! change is an event (`evt_…`, `object: "event"`, `type`, `created`, `data.object` = the full object,
//! `request.id`/`request.idempotency_key`): `payment_intent.created`, `charge.succeeded` /
//! `charge.failed`, `payment_intent.succeeded` / `payment_intent.payment_failed`,
//! `payment_intent.requires_action`, `payment_intent.amount_capturable_updated`, `charge.captured`,
//! `payment_intent.canceled`, `refund.created`, `charge.refunded`, `charge.dispute.created` /
//! `charge.dispute.closed`.
//!
//! Stripe idempotency as documented: the first response for an `Idempotency-Key` (per API key) — errors such as a
//! 402 decline or a 400 `amount_too_large` included — is saved and replayed for retries with the same status and
//! body plus `Idempotent-Replayed: true` and `Original-Request`; the same key with other parameters is 400
//! `idempotency_error`; a retry while the first request still executes is 409 `idempotency_error` ("… currently
//! another in-progress request …"); a request that failed parameter validation (or was refused by an injected
//! fault before executing) saves nothing. Keys expire after `idempotency_window` (24 h).
//!
//! **Mercado Pago** (JSON, errors as `{"message","error","status","cause":[{"code","description","data"}]}`):
//!
//! | endpoint | what |
//! |---|---|
//! | `POST /v1/card_tokens` | `card_number`, `expiration_month`, `expiration_year`, `security_code`, `cardholder` (`name`, `identification`); 201 with a 32-hex `id`; single use, 7 days. Mercado Pago's test holder names (`APRO`, `OTHE`, `CONT`, `CALL`, `FUND`, `SECU`, `EXPI`, `FORM`) decide the payment's outcome |
//! | `POST /v1/card_tokens` `{"card_id", "customer_id"?}` | a single-use token of a saved card, no security code needed (automatic payments): 404 for an unknown card, 400 cause 140 when `customer_id` is not the card's |
//! | `POST /v1/customers`, `GET /v1/customers/{id}`, `GET /v1/customers/search?email=` | `email` required (400 cause 106), one customer per email (400 cause 101); id `{user id}-{15 alphanumerics}` |
//! | `POST /v1/customers/{id}/cards` `{"token"}`, `GET /v1/customers/{id}/cards[/{card_id}]` | saves the token's card (the token is used up; its holder name keeps deciding the outcome): `id` (digits), `customer_id`, `payment_method.id` (`visa`, `master`, …), `first_six_digits`, `last_four_digits`, … |
//! | `POST /v1/payments` | requires `X-Idempotency-Key` (400, cause 4292, without it); `transaction_amount` (decimal), `description`, `payment_method_id`, `token` (required for a card brand: 400 cause 3003 without it, 2006 for an unknown or used one), `payer.email` (400 cause 4050 without it) or `payer: {"type": "customer", "id"}` (required with a saved card's token: 400 cause 2034 otherwise; 2002 for an unknown customer), `point_of_interaction` (`{"type": "SUBSCRIPTIONS", "transaction_data": {…}}`, checked for shape, echoed), `external_reference`, `installments`, `issuer_id`, `metadata`, `capture` (boolean; `false`: a card that approves is only authorized — `authorized`/`pending_capture`, `captured: false`, no `date_approved` — until captured; the reservation expires 7 days later on the sandbox clock: `cancelled`/`expired`, notified, when `POST /_sandbox/clock` moves past it or at the latest before the provider's next answer); 201 with a numeric `id`. A card is `approved` unless its holder name says otherwise; `pix` is `pending`/`pending_waiting_transfer` with `point_of_interaction.transaction_data` (`qr_code`, `qr_code_base64`, `ticket_url`) and `date_of_expiration`; boletos pending; a saved card's script, else a forced outcome, overrides |
//! | `PUT /v1/payments/{id}` | `{"capture": true, "transaction_amount"?}` captures an `authorized` payment (all of it, or less: more than authorized is 400 cause 2017 "Invalid transaction_amount for update") → `approved`/`accredited`, `captured: true`, `transaction_amount` the amount captured; `{"status": "cancelled"}` on `authorized`, `pending` or `in_process` → `cancelled`/`by_collector`; the wrong status for either (captured, approved, refunded, cancelled, rejected…) is 400 cause 2063 "The action requested is not valid for the current payment state"; any other body 400 naming the field; `X-Idempotency-Key` honoured; 200 with the payment and `payment.updated` |
//! | `GET /v1/payments/{id}` | `status` (approved, authorized, pending, in_process, rejected, refunded, charged_back, cancelled), `captured`, `status_detail`, `transaction_amount`, `transaction_amount_refunded`, `currency_id` `BRL`, `date_created`/`date_approved`/`date_last_updated` (`-04:00`, milliseconds), `refunds`, `fee_details` (3.99 %), `external_reference`, … |
//! | `POST /v1/payments/{id}/refunds` | optional `{"amount": 10.00}` (partial; never beyond what remains, 400 otherwise); `X-Idempotency-Key` honoured; 201 refund; a full refund makes the payment `refunded` |
//! | `GET /v1/payments/{id}/refunds` | the payment's refunds |
//! | `GET /v1/payments/{id}/refunds/{refund_id}` | one refund, or 404 |
//! | `GET /v1/payments/search` | `begin_date`/`end_date` (ISO 8601 or `NOW-30DAYS`), `range` (`date_created`, `date_last_updated`, `date_approved`, `money_release_date`), `sort`, `criteria`, `limit` (30, max 1000), `offset`, `external_reference`, `status`, `id`, …; `{"paging":{"total","limit","offset"},"results":[…]}` |
//!
//! The same `X-Idempotency-Key` on the same endpoint replays the first response (whatever the body), 409 while it
//! still executes; on another endpoint it is refused (400, cause 2032 "X-Idempotency-Key already used").
//!
//! **Pagar.me v5** (under `/core/v5`; JSON, amounts in cents; `Authorization: Basic base64("sk_…:")` — the secret
//! key as user, empty password — else 401 `{"message":"Authorization has been denied for this request."}`;
//! errors `{"message"}`, invalid requests 422 `{"message":"The request is invalid.","errors":{"order.items[0].amount":[…]}}`):
//!
//! | endpoint | what |
//! |---|---|
//! | `POST /core/v5/orders` | `code`, `customer` {`name`, `email`, `document`, `document_type`, `type`, `phones`, `metadata`} or `customer_id` (404 `Customer not found.` without either), `items` [{`amount`, `description`, `quantity`, `code`}], one `payments` entry: `credit_card` {`card_id` \| `card_token` \| `card` {`number`, `holder_name`, `exp_month`, `exp_year`, `cvv`}, `installments`, `statement_descriptor`, `operation_type`: `auth_and_capture` or `auth_only` (or `capture: false`)}, `pix` {`expires_in` \| `expires_at`}, `boleto` {`due_at`, `instructions`}; `closed`, `metadata` (strings). 200 `or_…` with its `ch_…` and `last_transaction` `tran_…`: card `paid`/`captured`, or `failed`/`not_authorized` (Pagar.me's test cards `4000000000000010` paid, `4000000000000028` failed, `4000000000000036` `processing`; any other valid number paid), Pix `pending`/`waiting_payment` with `qr_code`, `qr_code_url`, `expires_at`; boleto `pending`/`generated` with `url`, `pdf`, `line`, `barcode`, `due_at`. `auth_only` with a card that approves: charge `pending`, transaction `authorized_pending_capture` (acquirer `0000`), order `pending`, webhooks `order.created`, `charge.created`, `charge.pending`; uncaptured for 5 days on the sandbox clock it is cancelled (charge `canceled`, transaction `voided`, order `canceled`; `charge.updated`, `order.canceled`) when the clock moves past it or at the latest before the provider's next answer. A token's card is saved to the order's customer |
//! | `POST /core/v5/charges/{id}/capture` | an `auth_only` charge pending capture, optional `{"amount"}` (≤ authorized; `code`, `split` taken and ignored): `paid`, `paid_amount` the amount captured, transaction `captured`, order `paid`; `charge.paid`, `order.paid`; 200 with the charge. Any other charge or a larger amount 412; an invalid amount 422; `Idempotency-Key` as on orders |
//! | `GET /core/v5/orders/{id}`, `GET /core/v5/charges/{id}` | the order (items, customer, charges) or the charge (with its order's summary), or 404 |
//! | `GET /core/v5/orders`, `GET /core/v5/charges` | `code`, `status`, `customer_id`, `created_since`, `created_until` (charges also `payment_method`, `order_id`), `page` (1…), `size` (10, ≤ 100); newest first; `{"data", "paging": {"total", "previous", "next"}}` |
//! | `DELETE /core/v5/charges/{id}` | the refund: optional `{"amount"}`; a paid charge refunded in full → `canceled` (`canceled_amount`, transaction `refunded`, order `canceled`), in part → still `paid` with `canceled_amount` (transaction `partial_refunded`); never beyond what is left (412); a pending/processing charge — an `auth_only` authorization (the void: transaction `voided`), a Pix, a boleto — is cancelled whole (`charge.updated`, order `canceled`); 200 with the charge |
//! | `POST /core/v5/customers`, `GET …/{id}`, `POST /core/v5/customers/{id}/cards` (`{number…}` or `{token}`), `GET …/cards[/{card_id}]` | `cus_…`, `card_…` |
//! | `POST /core/v5/tokens?appId=pk_…` | `{"type":"card","card":{…}}` → `token_…`, single use, 60 s; the public key is the secret key with `pk_` for `sk_` |
//!
//! `Idempotency-Key` (any mutating request): the first answer — a failed order included — is replayed for the same
//! endpoint whatever the body, for `idempotency_window` (24 h) from the key's first use on the sandbox clock; then
//! the key is forgotten. A retry while the first executes is 409, a key reused on another endpoint 422.
//!
//! # Webhooks
//!
//! Every event (Stripe), payment change (Mercado Pago) or order and charge change (Pagar.me) is POSTed to
//! `{edge_url}/webhooks/{provider name}`, signed with the provider's webhook secret through
//! `hookline_signature::sign` (Pagar.me: unsigned):
//!
//! - Stripe: the event JSON, `Stripe-Signature: t=…,v1=…`;
//! - Mercado Pago: only the resource id, like real notifications — body `{"id": <notification id>,
//!   "live_mode": false, "type": "payment", "date_created", "user_id", "api_version": "v1",
//!   "action": "payment.created"|"payment.updated", "data": {"id": "<payment id>"}}`, query
//!   `?data.id=<payment id>&type=payment`, `x-signature: ts=<ms>,v1=<hex>` and `x-request-id: <uuid>`;
//! - Pagar.me: `{"id": "hook_…", "account": {"id": "acc_…", "name"}, "type", "created_at", "data": <the order or
//!   the charge>}`, types `order.created`, `order.paid`, `order.payment_failed`, `order.canceled`,
//!   `charge.created`, `charge.pending` (authorized, waiting for its capture), `charge.paid`, `charge.payment_failed`, `charge.refunded`, `charge.partial_canceled`,
//!   `charge.updated` (cancelled unpaid), `charge.chargedback`, `charge.underpaid`, `charge.overpaid`; no
//!   signature, `Authorization: Basic base64(user:password)` with [`SandboxProvider::webhook_basic_auth`] when set.
//!
//! Delivery is at least once: anything but a 2xx, or no answer within `webhook_timeout`, is retried with
//! exponential backoff (`webhook_backoff` doubling up to `webhook_max_backoff`) until `webhook_max_attempts`.
//! A retry repeats the delivery exactly (same body — the same `evt_…` or `hook_…` id —, same `x-request-id`) with
//! a fresh signature timestamp. Every
//! attempt is recorded (status or error, latency). The delivery loop runs supervised
//! (`hookline_core::supervisor`).
//!
//! # Control API (`/_sandbox/…`, JSON; [`SandboxControl`] in-process)
//!
//! | endpoint | what |
//! |---|---|
//! | `GET /_sandbox/health` | providers, seed, edge URL |
//! | `GET /_sandbox/charges` | [`ChargesReport`]: charges/payments in total, per provider, per idempotency key (requests, executions, replays, conflicts, objects created) and per saved payment method (`payment_method_charges`) |
//! | `GET /_sandbox/requests` | the API requests seen: method, path, status, idempotency key, replayed, fault, latency |
//! | `POST /_sandbox/faults`, `GET`, `DELETE` | arm a [`FaultSpec`] (`{"path":"/v1/payment_intents","method":"POST","action":{"kind":"delay","delay_ms":3000},"count":1}`; kinds `delay`, `drop_response`, `status` (+`retry_after_secs`), `reset`; `count` and/or seeded `rate`; optional `provider`), list them with hit counts, clear them |
//! | `GET`/`PUT /_sandbox/delivery` | [`DeliveryBehaviour`]: `duplicates` (+`duplicate_rate`), `parallel`, `delay_ms`, `shuffle_ms`, `drop_next`, `drop_rate`, `paused` (PUT replaces it; absent fields take defaults) |
//! | `GET /_sandbox/deliveries?provider=&event_id=&resource_id=&request_id=&state=` | every [`Delivery`] with its attempts |
//! | `POST /_sandbox/deliveries/{id}/redeliver` | send a delivery again (same body and request id) |
//! | `POST /_sandbox/outcomes` | `{"provider","status","status_detail","count"}`: outcome of the next charges/payments (Pagar.me: card charges, `paid`, `processing`, `failed` + a decline) |
//! | `POST /_sandbox/chargebacks` | `{"provider","payment","status"}`: Stripe dispute (`won`/`lost` close it), Mercado Pago `charged_back`, Pagar.me charge `chargedback` (`opened`, `lost`) or back to `paid` (`won`) |
//! | `POST /_sandbox/payments/{provider}/{id}/status` | Mercado Pago: `{"status":"approved"}` (a Pix paid), `rejected`, `cancelled`, …; Pagar.me (a pending/processing `ch_…` or its `or_…`): `paid`, `failed` (+ decline), `canceled`, `underpaid`/`overpaid` (+ paid amount) |
//! | `POST /_sandbox/payment_intents/{provider}/{id}/authenticate` | Stripe: `{"outcome":"succeed"\|"fail"}` ends a `requires_action` intent's 3-D Secure ([`SandboxControl::complete_authentication`]) |
//! | `POST /_sandbox/pix/{provider}/{id}` | Mercado Pago, Pagar.me: `{"outcome":"paid"\|"expired"}` settles a pending Pix ([`SandboxControl::settle_pix`]) |
//! | `POST`/`GET /_sandbox/payment_methods/{provider}/{id}/script` | `{"outcomes": ["succeed", "insufficient_funds", …]}`: the Nth executed charge (not a replay) of saved method `id` (Stripe `pm_…`, Mercado Pago card id, Pagar.me `card_…`) gets `outcomes[N-1]` — `succeed`, a Stripe decline code, a Mercado Pago `cc_rejected_…` detail or a Pagar.me decline (`not_authorized`, `insufficient_funds`, `expired_card`, `invalid_card`, `invalid_cvv`, `restricted_card`, `suspected_fraud`, `with_error`) (400 for another) — then the card's own behaviour; `GET` shows [`PaymentMethodScript`] `{uses, outcomes}` ([`SandboxControl::script_payment_method`]) |
//! | `GET`/`POST /_sandbox/clock` | `{"advance_secs": N}` moves the sandbox clock ahead (≤ 400 days in all): idempotency keys of every provider expire on it, uncaptured authorizations expire on it (canceled by the move, with their webhooks), Pagar.me dates by it; `{"offset_secs", "now"}` ([`SandboxControl::advance_clock`]) |
//! | `POST /_sandbox/reset` | forget everything, the clock back to real time (ids never repeat: the generator is not re-seeded) |
//!
//! # Reproducibility
//!
//! Every id (`pi_…`, `evt_…`, payment ids, request ids) and every random choice (fault rates, drops, duplicates,
//! shuffling) comes from one generator seeded with [`SandboxSettings::seed`]: the same seed and the same sequence
//! of requests give the same ids. Timestamps are the real clock (Pagar.me's: the sandbox clock, real time plus what
//! `POST /_sandbox/clock` added). Beware that restarting with the same seed in
//! front of a persistent edge re-creates the same `evt_…` ids, which the edge will take for duplicates.
//!
//! # What is not faithful
//!
//! - Only the subset above; no setup intents, webhook endpoint objects, or Mercado Pago orders/preferences,
//!   customer or card updates and deletions. Customers and payment methods send no events.
//! - Stripe's manual capture: one capture per authorization (no `final_capture=false` multicapture, no
//!   incremental authorization, no `amount_details`/application fees); the capture's `amount_too_large` message
//!   is the sandbox's wording; a void or an expiry sends `payment_intent.canceled` only (whether Stripe also sends
//!   `charge.refunded` for the released authorization is not verified); a refund of an uncaptured charge is
//!   refused (400 naming `charge`: cancel the PaymentIntent instead), where Stripe may release it. Attaching a Stripe decline test card succeeds (Stripe declines attaching most of
//!   them; `pm_card_chargeCustomerFail` is the one meant to attach and then fail).
//! - Some error messages are the sandbox's wording where Stripe's exact text is not documented: `off_session`
//!   without `confirm`/`customer`, a payment method of another customer (or, off session, of none), re-attaching;
//!   the statuses and `param` follow Stripe, and those refusals carry no `code`. Mercado Pago's card-token error
//!   causes (`E301`, `E302`, `325`, `326`, `221`) likewise, and the causes for a saved card's token or payment
//!   (`140`, `120`, `2034`, `2002`), a customer's card limit (25) and where `point_of_interaction` is strict
//!   (unknown fields refused) are plausible, not verified.
//! - Pagar.me: one payment per order; `auth_and_capture` and `auth_only` (`pre_auth` is refused, 422); one capture
//!   per authorization; the capture's 412 messages, the void's `charge.updated` (as any unpaid cancellation),
//!   the authorization's acquirer message and no `status_reason: capture_timeout` on an expired one are the
//!   sandbox's choices; no `card` events, checkouts, subscriptions, splits, antifraud. Its 401 message, the declines' acquirer codes
//!   and messages (only `not_authorized` is the test card's), the 409/422 for a key still executing or reused
//!   elsewhere, the 412 wording, what a total refund does to the order (`canceled`), an expired Pix (`failed`), an
//!   unpaid charge's cancellation (`charge.updated`) and the chargeback won/lost convention are the sandbox's
//!   plausible choices, not verified against Pagar.me. Webhooks are sent without Pagar.me's own retry schedule.
//! - Stripe's search is eventually consistent (up to a minute); the sandbox's finds an object at once.
//! - Retry schedules are compressed (Stripe retries over 3 days, Mercado Pago over hours).
//! - Mercado Pago's answer to a refund beyond the refundable amount, and to a `X-Idempotency-Key` reused with
//!   another body (replayed here), are not documented; the sandbox's are plausible, not verified. Likewise its
//!   capture and cancellation refusals (causes 2063 for the payment's state and 2017 for an amount, as Mercado Pago
//!   answers refunds), the messages for other `PUT` bodies, and `capture: false` on a non-card payment (ignored).
//! - Webhooks go to one endpoint per provider (`edge_url`); Mercado Pago's per-payment `notification_url` is
//!   stored and echoed but not used. Plain HTTP only.
//!
//! # Module layout
//!
//! The crate-private modules import one another without a loop: data types first, then the state that holds
//! them, then the handlers that lock the state. `a ← b, c` reads "`a` is imported by `b` and `c`"; the crate root
//! imports what it starts and re-exports, and no module imports the root.
//!
//! - `state` ← `auth`, `api`, `webhooks`, `fault_injection`, `control`, `report`, `customers`, `stripe` (and
//!   `stripe::ops`, `stripe::confirm`), `mercadopago` (and `mercadopago::ops`, `mercadopago::search`,
//!   `mercadopago::customers`, `mercadopago::tokens`), `pagarme_v5` (its handlers);
//! - `customers` (the `/v1/customers` paths both providers serve) → `auth`, `stripe`, `mercadopago`; imported
//!   only by the root;
//! - inside one provider's directory the handler modules import one another (the validated request types live
//!   in `ops`, the HTTP plumbing in the directory's `mod`, a charge's confirmation in `stripe::confirm`); the
//!   rule holds between directories and crate-level modules;
//! - `webhooks` (queueing and sending) ← `stripe::ops`, `mercadopago::ops`, `pagarme_v5::emit`, `control`;
//! - `api`, `auth` ← `stripe`, `mercadopago`, `pagarme` (`auth` also ← `fault_injection`);
//! - `stripe::ops`, `stripe::confirm`, `mercadopago::ops`, `pagarme_v5::settle` ← `control` (chargebacks, payment
//!   status changes, 3-D Secure, Pix); `report` (the charges report) ← `control`;
//! - inside `pagarme_v5`: `mod` (routes, authentication) → `ops` (orders, refunds), `list`, `cards`, `customers`,
//!   `validate`; `ops`, `settle` → `lifecycle` (status changes and their webhooks) → `emit` → `render` → `book`;
//!   `cards`, `customers`, `validate` → `fields`, `errors`;
//! - `scripts` (card-use scripts) ← `state`, `control`, `stripe::confirm`, `mercadopago::ops`, `pagarme_v5::ops`; it
//!   imports `stripe::book`, `mercadopago::book`, `pagarme_v5::book` (their outcome vocabularies) and `settings`;
//! - `stripe::errors`, `mercadopago::errors`, `pagarme_v5::errors` ← their provider, `fault_injection`;
//! - what the state holds imports no handler: `faults` (fault definitions and the armed list; → `limits`, `rng`),
//!   `delivery` (deliveries, attempts, behaviour), `idempotency`, `stripe::book`, `mercadopago::book`
//!   (→ `clock`), `pagarme_v5::book`; the books sit in their provider's directory but import nothing of it. `state`
//!   itself imports only those, `clock`, `settings` and `rng`;
//! - leaves (import nothing of the crate): `settings` (providers and settings; ← `config` too), `limits`,
//!   `clock` (with the movable [`SandboxControl::advance_clock`] clock), `rng`, `reply`, `idempotency`,
//!   `delivery`, `pix` (Pix codes, ← `mercadopago::ops`, `pagarme_v5::ops`), `stripe::book`, `pagarme_v5::book`.

#![warn(missing_docs)]

mod api;
mod auth;
mod clock;
mod config;
mod control;
mod customers;
mod delivery;
mod fault_injection;
mod faults;
mod idempotency;
mod limits;
mod mercadopago;
mod pagarme_v5;
mod pix;
mod reply;
mod report;
mod rng;
mod scripts;
mod settings;
mod state;
mod stripe;
mod webhooks;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use anyhow::Context;
use hookline_core::supervisor::{Liveness, RestartPolicy, Supervisor};
use tokio_util::sync::CancellationToken;

pub use config::SandboxConfig;
pub use control::SandboxControl;
pub use delivery::{Attempt, Delivery, DeliveryBehaviour, DeliveryState};
pub use faults::{ArmedFault, FaultAction, FaultSpec};
pub use limits::{MAX_COUNT, MAX_DELAY_MS, MAX_DUPLICATES};
pub use report::{ChargesReport, ProviderReport};
pub use scripts::{PaymentMethodScript, MAX_SCRIPT_OUTCOMES};
pub use settings::{SandboxProvider, SandboxSettings, Scheme};
pub use state::{KeyStats, Outcome, RequestRecord};
pub use url::Url;

/// Starts sandboxes.
#[derive(Debug)]
pub struct Sandbox;

impl Sandbox {
    /// Binds `settings.listen`, starts the HTTP server and the supervised webhook delivery loop. Must be called
    /// inside a Tokio runtime (the server and the loop are spawned on it).
    pub async fn start(settings: SandboxSettings) -> anyhow::Result<RunningSandbox> {
        settings.validate()?;
        let shared = Arc::new(state::Shared::new(&settings)?);
        let listener = std::net::TcpListener::bind(settings.listen)
            .with_context(|| format!("cannot listen on {}", settings.listen))?;
        let local = listener.local_addr()?;
        let data = web::Data::from(shared.clone());
        let server = HttpServer::new(move || {
            App::new()
                .app_data(data.clone())
                .service(
                    web::scope("/_sandbox")
                        .configure(control::configure)
                        .default_service(web::to(|| async {
                            HttpResponse::NotFound()
                                .json(serde_json::json!({"error": "no such control endpoint"}))
                        })),
                )
                .service(
                    web::scope("")
                        .wrap_fn(fault_injection::middleware)
                        .configure(customers::configure)
                        .configure(stripe::configure)
                        .configure(mercadopago::configure)
                        .configure(pagarme_v5::configure)
                        .default_service(web::to(unrouted)),
                )
        })
        .on_connect(fault_injection::on_connect)
        .workers(settings.http_workers.max(1))
        .shutdown_timeout(2)
        .disable_signals()
        .listen(listener)
        .with_context(|| format!("cannot serve on {local}"))?
        .run();
        let server_handle = server.handle();
        let server_task = tokio::spawn(server);

        let liveness = Liveness::new();
        let supervisor = Supervisor::new(liveness.clone(), RestartPolicy::default());
        let cancel = CancellationToken::new();
        let delivery_task = {
            let shared = shared.clone();
            let cancel = cancel.clone();
            tokio::spawn(async move {
                supervisor
                    .run("sandbox-webhook-delivery", cancel.clone(), |_| {
                        webhooks::run(shared.clone(), cancel.clone())
                    })
                    .await
            })
        };
        let host = match local.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let base_url = Url::parse(&format!("http://{}", SocketAddr::new(host, local.port())))
            .context("base URL")?;
        tracing::info!(%base_url, seed = settings.seed, edge_url = %settings.edge_url,
            providers = ?settings.providers.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), "sandbox listening");
        Ok(RunningSandbox {
            local,
            base_url,
            server_handle,
            server_task: Some(server_task),
            delivery_task: Some(delivery_task),
            cancel,
            liveness,
            control: SandboxControl::new(shared),
        })
    }
}

/// The answer to a path neither provider serves, in the format of the provider the path looks like.
async fn unrouted(req: HttpRequest) -> HttpResponse {
    match auth::family(req.path()) {
        Some(Scheme::MercadoPago) => mercadopago::errors::route_not_found().into_response(),
        Some(Scheme::PagarmeV5) => pagarme_v5::errors::route_not_found().into_response(),
        _ => stripe::errors::unrecognized_url(req.method().as_str(), req.path())
            .reply()
            .into_response(),
    }
}

/// A running sandbox. Dropping it stops the server without waiting; [`RunningSandbox::stop`] waits.
pub struct RunningSandbox {
    local: SocketAddr,
    base_url: Url,
    server_handle: ServerHandle,
    server_task: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    delivery_task: Option<tokio::task::JoinHandle<()>>,
    cancel: CancellationToken,
    liveness: Liveness,
    control: SandboxControl,
}

impl std::fmt::Debug for RunningSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunningSandbox")
            .field("base_url", &self.base_url.as_str())
            .finish()
    }
}

impl RunningSandbox {
    /// `http://host:port` to give clients as the providers' API base (an unspecified listen address is
    /// replaced by loopback).
    pub fn base_url(&self) -> &Url {
        &self.base_url
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `base_url` joined with `path` (`/v1/payment_intents`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base_url.as_str().trim_end_matches('/'), path)
    }

    /// The control state, for assertions.
    pub fn control(&self) -> &SandboxControl {
        &self.control
    }

    /// What the supervised delivery loop reports (dead after it kept failing).
    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }

    /// Stops serving (in-flight requests get up to 2 s) and stops the delivery loop.
    pub async fn stop(mut self) {
        self.cancel.cancel();
        self.server_handle.stop(true).await;
        if let Some(task) = self.server_task.take() {
            let _ = task.await;
        }
        if let Some(task) = self.delivery_task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for RunningSandbox {
    fn drop(&mut self) {
        if self.server_task.is_some() {
            self.cancel.cancel();
            // Sends the stop command at once; the returned future only waits for completion.
            drop(self.server_handle.stop(false));
        }
    }
}
