//! The outbound dispatcher: sends the requests queued in `outbound_requests` (charges of payment intents,
//! refunds) to the provider's API and records the answers.
//!
//! Runs supervised inside `hookline-worker` (task `dispatcher`; `[dispatcher] enabled = false` disables it) and
//! on its own with `hookline dispatch`. Several dispatchers may run at once: requests are claimed with a lease
//! ([`outbound_requests::claim_due`], `FOR UPDATE SKIP LOCKED`).
//!
//! Exactly-once at the gateway rests on the idempotency key, sent unchanged on **every** attempt of a key
//! generation (Stripe `Idempotency-Key`, Mercado Pago `X-Idempotency-Key`): a retry after a lost answer, or after
//! a dispatcher died between sending and recording (its lease expires, another claims the request), gets the first
//! attempt's answer instead of a second charge. No database transaction is open during the HTTP call; the answer
//! is recorded afterwards in one short transaction. Every request goes through the provider's one
//! [`gateway::ApiClient`]; what is sent is built from the intent's own payment parameters
//! ([`hookline_payments::params::PaymentParams`]) — never a placeholder.
//!
//! Classification ([`answer`]), and why:
//!
//! | the gateway answers | request | intent / refund | why |
//! |---|---|---|---|
//! | its object (2xx, JSON, id, status) | `succeeded` | its status: `processing`, `succeeded`, `requires_action` (+ `next_action`), `failed` (canceled) | the gateway's word |
//! | a decline: Stripe 402 `card_error` or `requires_payment_method` + `last_payment_error`; Mercado Pago `rejected` | `declined` | `failed` + `failure_code`/`failure_message`, fact `payment_intent.failed` (refund: `failed`, its amount released) | a declined card is an outcome for the merchant, not an incident: `hookline status` stays green |
//! | a refused method: Stripe 4xx `invalid_request_error` whose `param` is `payment_method` or `customer` (a charge) | `declined` | `failed`, `failure_code` = the error's `code` or `payment_method_unusable`, `failure_message` its `message` | another customer's method, detached, missing, off-session without a saved method: the customer's method, not hookline, must change (billing: `needs_payment_method`) |
//! | a Mercado Pago saved card's lookup or token answered 400 or 404 | `declined`, no payment sent | `failed`, `payment_method_unusable` | the card or its customer is gone at the gateway: as above |
//! | a Pagar.me order refused for its card or customer: 404 (not found), 412 (another customer's card), 422 naming `card_id`/`card_token`/`customer_id` | `declined` | `failed`, `payment_method_unusable` | as above |
//! | a timeout, connection error, 5xx, 429 (`Retry-After` honoured) or 409 (the key still executing) | `pending`, retried with the same key, 1 s … 5 min | unchanged | the gateway replays the key's first answer: a retry cannot charge twice |
//! | the same, when the next attempt would come after the key's first send + ttl − margin | `unknown` | unchanged | past its lifetime the gateway forgets the key: a resend could charge twice |
//! | a 2xx that is not its object | retried with the same key; after [`MAX_UNREADABLE_ATTEMPTS`] `failed` | `needs_attention` | the charge may have happened (the key tells); a server that keeps answering so is not the gateway |
//! | a 3xx | `failed` | `needs_attention` | never followed (it would carry the charge, key and token elsewhere); `api_base` is wrong |
//! | another 4xx, or nothing sendable (no `api_base`, no or incomplete payment parameters) | `failed` | `needs_attention` | hookline's own problem: an operator fixes it |
//!
//! A Mercado Pago **saved card** (`card_id` + `customer_id`, merchant-initiated) is prepared per key generation
//! before its payment: the card's payment method (`GET /v1/customers/{customer}/cards/{card}`) and a single-use
//! token (`POST /v1/card_tokens`), stored with the request (`outbound_requests.saved_card`) BEFORE the payment is
//! sent, so every attempt of the generation sends the identical body under the same key; a new generation mints
//! anew. A timeout, 5xx or 429 of these steps is retried like any gateway error (nothing was paid yet); see
//! [`crate::gateway::mercadopago`].
//!
//! **Unknown requests** (issues 27 and 44): the key's lifetime is `providers.NAME.idempotency_key_ttl_secs`
//! ([`outbound_requests::key_margin`]: a tenth of it, at most an hour, before it ends no more attempts start).
//! The rule is checked twice, both times in one statement on the database's clock: where a retry is scheduled
//! ([`outbound_requests::retry_later`]) and where a request is claimed for sending
//! ([`outbound_requests::claim_due`]) — so a request whose dispatcher was slow, stopped for longer than the key
//! lives, crashed mid-send or lost its lease while dead is never sent again under a key the gateway may have
//! forgotten: it becomes `unknown` instead. Once the key has expired the request is resolved by asking the gateway
//! for the object by hookline's own reference (Stripe: the PaymentIntent with `metadata[hookline_intent]`, the
//! refund with `metadata[hookline_refund]`; Mercado Pago: `external_reference`, the refund with
//! `metadata.hookline_refund`; Pagar.me: the order's `code`): found → recorded as the lost answer; not found →
//! the next key generation is committed (`pending`, `{base}-g{n}`) BEFORE anything is sent under it — at most one
//! key of a request is live at the gateway at any time; the lookup failing → it stays unknown and is looked up
//! again with backoff. A refund is found by its own identity only, never by an amount that happens to fit: a
//! gateway refund without hookline's reference that could be this one (Mercado Pago, one of the same amount;
//! Pagar.me, whose refunds carry no reference at all, a charge whose cancelled amount could hold it) leaves the
//! request `unknown` for an operator, with the reason in `last_error` — it is neither recorded as made nor sent
//! again.
//!
//! Every reason is recorded in `outbound_requests.last_error` (shown by `hookline status`, the console and
//! the payment-intents API).

mod answer;
mod saved_card;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use answer::{classify, Expected};
pub use answer::{Answer, MAX_UNREADABLE_ATTEMPTS};
use hookline_core::telemetry;
use tracing::Instrument;

use crate::config::DispatcherConfig;
use crate::gateway::{self, Api, ApiClient, Outgoing, PostError, RefundsKnown};
use hookline_core::retry::jittered_backoff;
use hookline_core::{Config, ProviderConfig};
use hookline_payments::intents::{self, ChargeAnswer, ChargeFinal, Operation};
use hookline_payments::model::IntentStatus;
use hookline_payments::outbound_requests::{self, Claimed, KeyLifetimes, Retried};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Metric names.
pub mod metric {
    /// Counter: requests processed, by `provider`, `kind` (charge, refund) and `outcome` (succeeded, declined,
    /// retried, unknown, new_generation, lookup_retried, failed).
    pub const ATTEMPTS: &str = "hookline_dispatch_attempts_total";
    /// Histogram: seconds per gateway call, by `provider`.
    pub const SECONDS: &str = "hookline_dispatch_seconds";
}

/// How a dispatcher runs.
#[derive(Debug, Clone)]
pub struct DispatchSettings {
    /// Requests claimed at once (sent concurrently).
    pub batch: i64,
    /// How long a claimed request is ours; a request whose dispatcher died is claimed again after it.
    pub lease: Duration,
    /// Pause when nothing is due.
    pub idle_interval: Duration,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Whole-request timeout (payment APIs are slow under load).
    pub request_timeout: Duration,
    /// First retry delay; doubled per attempt.
    pub min_backoff: Duration,
    /// Longest retry delay.
    pub max_backoff: Duration,
}

impl Default for DispatchSettings {
    fn default() -> Self {
        DispatchSettings {
            batch: 16,
            lease: Duration::from_secs(60),
            idle_interval: Duration::from_millis(500),
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            min_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(300),
        }
    }
}

impl DispatchSettings {
    /// The defaults, with the request timeout and the lease of `[dispatcher]`.
    pub fn from_config(dispatcher: &DispatcherConfig) -> DispatchSettings {
        DispatchSettings {
            request_timeout: dispatcher.request_timeout,
            lease: dispatcher.lease,
            ..DispatchSettings::default()
        }
    }

    /// The delay before attempt `attempts + 1`: exponential, with jitter (half of it random), within
    /// `[min_backoff, max_backoff]`. `seed` makes the jitter reproducible.
    pub fn backoff(&self, attempts: i32, seed: u64) -> Duration {
        jittered_backoff(self.min_backoff, self.max_backoff, attempts, seed)
            .clamp(self.min_backoff, self.max_backoff)
    }
}

/// What became of a claimed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The gateway accepted it (or a lookup found it); recorded.
    Succeeded,
    /// The gateway declined it; recorded as an outcome.
    Declined,
    /// Scheduled for another attempt with the same key.
    Retried,
    /// Its key's lifetime ends before another attempt: `unknown`, looked up once the key expired.
    Unknown,
    /// The lookup found nothing after the key expired: pending again under the next key generation.
    NewGeneration,
    /// The lookup failed: still unknown, looked up again later.
    LookupRetried,
    /// Failed for good (hookline's own problem); needs attention.
    Failed,
    /// Sent but not recorded (fail point `dispatch.after_send`): the lease expires and it is sent again.
    Abandoned,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Declined => "declined",
            Outcome::Retried => "retried",
            Outcome::Unknown => "unknown",
            Outcome::NewGeneration => "new_generation",
            Outcome::LookupRetried => "lookup_retried",
            Outcome::Failed => "failed",
            Outcome::Abandoned => "abandoned",
        }
    }
}

/// One provider the dispatcher can send to.
#[derive(Clone)]
struct Gateway {
    api: Api,
    client: ApiClient,
    /// The provider's idempotency-key lifetime.
    ttl: Duration,
}

/// The dispatcher: a pool and the providers' API clients.
#[derive(Clone)]
pub struct Dispatcher {
    pool: PgPool,
    gateways: Arc<HashMap<String, Gateway>>,
    /// The gateways' key lifetimes, as the claiming statement checks them.
    ttls: Arc<KeyLifetimes>,
    settings: DispatchSettings,
    /// What a subscription's charge reaching a final status does in the answer's transaction (billing's dunning).
    charge_final: Arc<dyn ChargeFinal>,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("providers", &self.gateways.keys().collect::<Vec<_>>())
            .field("settings", &self.settings)
            .finish()
    }
}

/// The data a request is built from, read before the HTTP call.
struct Subject {
    intent: intents::Intent,
    /// `(amount, public id)` of the refund, for refunds.
    refund: Option<(i64, String)>,
}

impl Dispatcher {
    /// A dispatcher for the providers that have an `api_base` and a scheme that can charge (Stripe, Mercado
    /// Pago, Pagar.me v5). Requests for other providers fail with the reason. `charge_final` is billing's dunning
    /// (`hookline_billing::dispatcher` composes it).
    pub fn new<'a>(
        pool: PgPool,
        providers: impl IntoIterator<Item = &'a ProviderConfig>,
        settings: DispatchSettings,
        charge_final: Arc<dyn ChargeFinal>,
    ) -> Dispatcher {
        let gateways = providers
            .into_iter()
            .filter_map(|p| {
                let api = Api::of(p.scheme)?;
                let client = ApiClient::with_timeouts(
                    &p.name,
                    p.api_base.clone()?,
                    p.api_token.clone(),
                    settings.connect_timeout,
                    settings.request_timeout,
                );
                Some((
                    p.name.clone(),
                    Gateway {
                        api,
                        client,
                        ttl: p.idempotency_key_ttl,
                    },
                ))
            })
            .collect::<HashMap<String, Gateway>>();
        let ttls = KeyLifetimes::new(gateways.iter().map(|(name, g)| (name.as_str(), g.ttl)));
        Dispatcher {
            pool,
            gateways: Arc::new(gateways),
            ttls: Arc::new(ttls),
            settings,
            charge_final,
        }
    }

    /// A dispatcher on `pool` for the configured providers.
    pub fn from_config(
        pool: PgPool,
        config: &Config,
        settings: DispatchSettings,
        charge_final: Arc<dyn ChargeFinal>,
    ) -> Dispatcher {
        Dispatcher::new(pool, config.providers.values(), settings, charge_final)
    }

    /// Whether `provider` can be charged through this dispatcher.
    pub fn can_charge(&self, provider: &str) -> bool {
        self.gateways.contains_key(provider)
    }

    /// The settings.
    pub fn settings(&self) -> &DispatchSettings {
        &self.settings
    }

    /// Runs until `cancel`: claims due requests, sends them, records the answers; pauses when nothing is due.
    /// Database errors are logged and retried after a pause (the leases make that safe).
    pub async fn run(&self, cancel: CancellationToken) -> anyhow::Result<()> {
        let mut pause = self.settings.idle_interval;
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            match self.dispatch_once().await {
                Ok(n) if n > 0 => {
                    pause = self.settings.idle_interval;
                    continue;
                }
                Ok(_) => pause = self.settings.idle_interval,
                Err(e) => {
                    tracing::warn!(error = %e, "dispatcher: cannot claim outbound requests; retrying");
                    pause = (pause * 2).clamp(self.settings.idle_interval, Duration::from_secs(10));
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Claims up to `batch` due requests for `lease` ([`outbound_requests::claim_due`], with the gateways' key
    /// lifetimes: a request whose key may be forgotten is made `unknown` there, never returned for sending).
    pub async fn claim(&self, lease: Duration) -> Result<Vec<Claimed>, sqlx::Error> {
        outbound_requests::claim_due(&self.pool, self.settings.batch, lease, &self.ttls).await
    }

    /// Claims up to `batch` due requests and processes them concurrently; returns how many were claimed.
    pub async fn dispatch_once(&self) -> Result<usize, sqlx::Error> {
        let claimed = self.claim(self.settings.lease).await?;
        let n = claimed.len();
        let results = futures::future::join_all(claimed.iter().map(|c| self.process(c))).await;
        for (c, r) in claimed.iter().zip(results) {
            if let Err(e) = r {
                // The lease expires and the request is claimed again (same key).
                tracing::warn!(request = c.id, error = %e, "dispatcher: cannot record the gateway's answer");
            }
        }
        Ok(n)
    }

    /// Processes one claimed request: an `unknown` one is looked up ([`Dispatcher::resolve`]), a pending one is
    /// sent and its answer recorded — in a `dispatch.attempt` span, child of the trace the request was queued
    /// in (the merchant's API call, a billing run), with the key sent, the gateway's status and the
    /// classification. What the answer records (the intent's facts) joins that trace too.
    pub async fn process(&self, claimed: &Claimed) -> Result<Outcome, sqlx::Error> {
        let span = tracing::info_span!(
            "dispatch.attempt",
            otel.kind = "client",
            request = claimed.id,
            kind = %claimed.kind,
            provider = %claimed.provider,
            intent = claimed.intent_id,
            idempotency_key = %claimed.sent_key(),
            attempt = claimed.attempts,
            key_generation = claimed.key_generation,
            lookup = claimed.is_unknown(),
            http.response.status_code = tracing::field::Empty,
            classification = tracing::field::Empty,
            outcome = tracing::field::Empty,
            trace_id = tracing::field::Empty,
        );
        telemetry::set_parent(&span, claimed.traceparent.as_deref());
        telemetry::record_trace_id(&span);
        let result = self.process_in(claimed).instrument(span.clone()).await;
        if let Ok(outcome) = &result {
            span.record("outcome", outcome.as_str());
        }
        result
    }

    async fn process_in(&self, claimed: &Claimed) -> Result<Outcome, sqlx::Error> {
        let span = tracing::Span::current(); // the `dispatch.attempt` of `process`
        let started = Instant::now();
        if claimed.is_unknown() {
            let outcome = self.resolve(claimed).await?;
            self.count(claimed, outcome);
            return Ok(outcome);
        }
        let answer = self.send(claimed).await?;
        span.record("classification", answer.classification());
        if let Some(status) = answer.http_status() {
            span.record("http.response.status_code", status);
        }
        metrics::histogram!(metric::SECONDS, "provider" => claimed.provider.clone())
            .record(started.elapsed().as_secs_f64());
        // Between the gateway's answer and recording it: a crash here leaves the request leased; the next
        // dispatcher sends it again with the same key.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("dispatch.after_send", |_| Ok(Outcome::Abandoned));
        let outcome = self.record(claimed, &answer).await?;
        self.count(claimed, outcome);
        match (&answer, outcome) {
            (Answer::Retry { error, .. }, Outcome::Unknown) => tracing::warn!(request = claimed.id,
                attempts = claimed.attempts, error = %error,
                "dispatcher: the key's lifetime ends before another attempt; unknown until its lookup"),
            (Answer::Retry { error, .. }, _) => tracing::info!(request = claimed.id,
                attempts = claimed.attempts, error = %error, "dispatcher: will retry"),
            (Answer::Refused { error, .. }, _) => tracing::warn!(request = claimed.id,
                error = %error, "dispatcher: the request cannot be sent or was refused; needs attention"),
            (Answer::Declined { code, .. }, _) => tracing::info!(request = claimed.id,
                code = %code, "dispatcher: the gateway declined"),
            (Answer::Overtaken { final_status, .. }, _) => tracing::info!(request = claimed.id,
                status = %final_status, "dispatcher: the payment had moved on; the operation did not happen"),
            (Answer::Accepted { .. }, _) => {}
        }
        Ok(outcome)
    }

    fn count(&self, claimed: &Claimed, outcome: Outcome) {
        metrics::counter!(metric::ATTEMPTS, "provider" => claimed.provider.clone(),
            "kind" => claimed.kind.clone(), "outcome" => outcome.as_str())
        .increment(1);
    }

    /// The intent (and refund) a request is about; `Err`: why it cannot be sent.
    async fn subject(&self, claimed: &Claimed) -> Result<Result<Subject, String>, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        let Some(intent) = intents::get(&mut conn, claimed.intent_id).await? else {
            return Ok(Err(format!("intent {} does not exist", claimed.intent_id)));
        };
        let refund = match claimed.refund_id {
            Some(id) => match intents::get_refund(&mut conn, id).await? {
                Some((_, amount, _)) => Some((amount, intents::refund_public_id(id))),
                None => return Ok(Err("the refund record is missing".into())),
            },
            None => None,
        };
        Ok(Ok(Subject { intent, refund }))
    }

    /// Sends one claimed request to the gateway (with its generation's key) and classifies the answer. Reads
    /// what it sends from the database first, with no transaction open during the HTTP call. Records nothing but
    /// a saved card's minted token (stored before the payment is sent, see [`crate::gateway::mercadopago`]).
    pub async fn send(&self, claimed: &Claimed) -> Result<Answer, sqlx::Error> {
        let refused = |error: String| Answer::Refused {
            status: None,
            error,
        };
        let Some(gateway) = self.gateways.get(&claimed.provider) else {
            return Ok(refused(format!(
                "provider {} has no api_base, or its scheme cannot charge (stripe, mercadopago, pagarme-v5)",
                claimed.provider
            )));
        };
        let subject = match self.subject(claimed).await? {
            Ok(s) => s,
            Err(e) => return Ok(refused(e)),
        };
        if let Some(operation) = operation_of(claimed) {
            return Ok(self
                .send_operation(gateway, claimed, operation, &subject.intent)
                .await);
        }
        let minted = match self.saved_card(gateway, claimed, &subject).await? {
            Ok(m) => m,
            Err(answer) => return Ok(answer),
        };
        let request = match build(gateway, claimed, &subject, minted.as_ref()) {
            Ok(r) => r,
            Err(e) => return Ok(unsent(e)),
        };
        let expected = Expected {
            api: gateway.api,
            refund: claimed.refund_id.is_some(),
            provider: &claimed.provider,
            attempts: claimed.attempts,
            refund_public_id: subject.refund.as_ref().map(|(_, id)| id.as_str()),
            operation: false,
        };
        Ok(classify(&expected, ApiClient::exchange(request).await))
    }

    /// Sends the cancel or capture of `intent`'s payment and classifies the answer. Nothing is sent when the
    /// intent has already ended (its state is the answer); Pagar.me's cancel is sent only while its charge is
    /// unpaid (on a paid charge the same call refunds). A 4xx is the gateway refusing the operation in the
    /// payment's current state (captured already, canceled, paid by the customer a second before): the payment is
    /// read and its state recorded ([`Answer::Overtaken`]) — never a silent loss.
    async fn send_operation(
        &self,
        gateway: &Gateway,
        claimed: &Claimed,
        operation: Operation,
        intent: &intents::Intent,
    ) -> Answer {
        let Some(payment) = intent.provider_payment_id.as_deref() else {
            return Answer::Refused {
                status: None,
                error: format!("intent {} has no gateway payment id", intent.public_id),
            };
        };
        if intent.status.is_final() {
            return Answer::Overtaken {
                status: None,
                provider_id: payment.to_owned(),
                final_status: intent.status.as_str(),
                reason: format!("not sent: the intent is already {}", intent.status),
            };
        }
        let expected = Expected {
            api: gateway.api,
            refund: false,
            provider: &claimed.provider,
            attempts: claimed.attempts,
            refund_public_id: None,
            operation: true,
        };
        if operation == Operation::Cancel && gateway.api.cancel_may_refund() {
            match self.payment_now(gateway, payment, &expected).await {
                Ok((_, "succeeded")) => {
                    return Answer::Overtaken {
                        status: None,
                        provider_id: payment.to_owned(),
                        final_status: "succeeded",
                        reason: "not sent: the payment was already paid (a cancel would refund it)"
                            .into(),
                    }
                }
                Ok(_) => {}
                Err(answer) => return answer,
            }
        }
        let send = match operation {
            Operation::Capture => Outgoing::Capture {
                payment,
                amount: intent.amount_to_capture.filter(|a| *a < intent.amount),
            },
            Operation::Cancel => Outgoing::Cancel {
                payment,
                reason: intent.cancellation_reason.as_deref(),
            },
        };
        let request = match gateway
            .api
            .request(&gateway.client, &claimed.sent_key(), send)
        {
            Ok(r) => r,
            Err(e) => return unsent(e),
        };
        let (refused_status, why) = match classify(&expected, ApiClient::exchange(request).await) {
            Answer::Refused {
                status: Some(status @ (400 | 402 | 404 | 412 | 422)),
                error,
            } => (status, error),
            answer => return answer,
        };
        match self.payment_now(gateway, payment, &expected).await {
            Ok((provider_id, final_status)) => Answer::Overtaken {
                status: Some(refused_status),
                provider_id,
                final_status,
                reason: format!(
                    "the gateway refused the {} (the payment is {final_status}): {why}",
                    claimed.kind
                ),
            },
            Err(answer) => answer,
        }
    }

    /// The payment as the gateway shows it now: its id and status (an intent status); `Err`: the answer to record
    /// instead (the read failed: retried with the same key, nothing was done).
    async fn payment_now(
        &self,
        gateway: &Gateway,
        payment: &str,
        expected: &Expected<'_>,
    ) -> Result<(String, &'static str), Answer> {
        let retry = |error: String| Answer::Retry {
            status: None,
            retry_after: None,
            error: format!("reading the payment: {error}"),
        };
        let json = gateway
            .api
            .get_charge(&gateway.client, payment)
            .await
            .map_err(retry)?;
        match expected.read(&json).map_err(retry)? {
            gateway::Object {
                id,
                verdict: gateway::Verdict::Status { status, .. },
            } => Ok((id, status)),
            gateway::Object {
                id,
                verdict: gateway::Verdict::Declined { .. },
            } => Ok((id, "failed")),
        }
    }

    /// Resolves an `unknown` request (its key expired without a readable answer) by asking the gateway for the
    /// object by hookline's own reference: found → recorded as the lost answer; not found → the next key
    /// generation, committed before anything is sent under it; the lookup failing → looked up again later.
    pub async fn resolve(&self, claimed: &Claimed) -> Result<Outcome, sqlx::Error> {
        let lookup_failed = |error: String| async move {
            let after = self.backoff_for(claimed);
            outbound_requests::retry_lookup(&self.pool, claimed.id, after, &error).await?;
            tracing::info!(request = claimed.id, error = %error, "dispatcher: lookup failed; will retry");
            Ok::<_, sqlx::Error>(Outcome::LookupRetried)
        };
        let Some(gateway) = self.gateways.get(&claimed.provider) else {
            return lookup_failed(format!(
                "provider {} has no api_base, or its scheme cannot charge",
                claimed.provider
            ))
            .await;
        };
        let subject = match self.subject(claimed).await? {
            Ok(s) => s,
            Err(e) => return lookup_failed(e).await,
        };
        let found = match self.find(gateway, claimed, &subject).await? {
            Ok(found) => found,
            Err(e) => return lookup_failed(e).await,
        };
        let Some(json) = found else {
            // Nothing at the gateway under hookline's reference, and the key has expired (the request was not due
            // before): the next generation is committed first, then sent like any pending request.
            let moved =
                outbound_requests::next_generation(&self.pool, claimed.id, claimed.key_generation)
                    .await?;
            tracing::warn!(request = claimed.id, generation = claimed.key_generation + 1, moved,
                "dispatcher: the gateway has nothing under hookline's reference; sending under a new key");
            return Ok(Outcome::NewGeneration);
        };
        let expected = Expected {
            api: gateway.api,
            refund: claimed.refund_id.is_some(),
            provider: &claimed.provider,
            attempts: claimed.attempts,
            refund_public_id: subject.refund.as_ref().map(|(_, id)| id.as_str()),
            operation: operation_of(claimed).is_some(),
        };
        match expected.read(&json) {
            Ok(gateway::Object {
                verdict: gateway::Verdict::Status { status, .. },
                ..
            }) if expected.operation
                && !IntentStatus::parse(status).is_ok_and(IntentStatus::is_final) =>
            {
                // The payment is still where the operation found it: the cancel or capture did not happen under
                // the expired key — the next generation asks again.
                let moved = outbound_requests::next_generation(
                    &self.pool,
                    claimed.id,
                    claimed.key_generation,
                )
                .await?;
                tracing::warn!(request = claimed.id, generation = claimed.key_generation + 1, moved,
                    "dispatcher: the operation did not happen at the gateway; asking again under a new key");
                Ok(Outcome::NewGeneration)
            }
            Ok(object) => {
                tracing::info!(request = claimed.id, provider_id = %object.id,
                    "dispatcher: the lookup found the lost answer's object");
                self.record(claimed, &Answer::from_object(200, object))
                    .await
            }
            Err(why) => lookup_failed(format!("the object found is not readable: {why}")).await,
        }
    }

    /// The gateway's object for `claimed` by hookline's reference (`Ok(None)`: none; `Err`: the lookup failed).
    async fn find(
        &self,
        gateway: &Gateway,
        claimed: &Claimed,
        subject: &Subject,
    ) -> Result<Result<Option<serde_json::Value>, String>, sqlx::Error> {
        let intent = &subject.intent;
        let operation = operation_of(claimed).is_some();
        if subject.refund.is_none() && !operation {
            return Ok(gateway
                .api
                .find_charge(&gateway.client, &intent.public_id)
                .await);
        }
        let Some(payment) = intent.provider_payment_id.as_deref() else {
            return Ok(Err(format!(
                "intent {} has no gateway payment id",
                intent.public_id
            )));
        };
        let Some((amount, refund_public_id)) = &subject.refund else {
            // A cancel or capture is found on the payment itself: what state it is in now.
            return Ok(gateway
                .api
                .get_charge(&gateway.client, payment)
                .await
                .map(Some));
        };
        // What hookline already knows of the intent's other refunds, as far as this gateway's lookup needs it.
        let except = claimed.refund_id.unwrap_or_default();
        let known = match gateway.api.refunds_needed() {
            RefundsKnown::Nothing => RefundsKnown::Nothing,
            RefundsKnown::Linked(_) => RefundsKnown::Linked(
                intents::linked_refund_ids(&self.pool, intent.id, except).await?,
            ),
            RefundsKnown::Recorded(_) => RefundsKnown::Recorded(
                intents::recorded_refund_amount(&self.pool, intent.id, except).await?,
            ),
        };
        Ok(gateway
            .api
            .find_refund(&gateway.client, payment, refund_public_id, *amount, &known)
            .await)
    }

    fn backoff_for(&self, claimed: &Claimed) -> Duration {
        let seed = (claimed.id as u64).rotate_left(32)
            ^ (claimed.attempts as u64)
            ^ SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.subsec_nanos() as u64)
                .unwrap_or(0);
        self.settings.backoff(claimed.attempts, seed)
    }

    /// Records an answer in one short transaction (the gateway's object, a decline, a final refusal) or
    /// schedules the next attempt (or makes the request `unknown` when that attempt would outlive its key).
    pub async fn record(&self, claimed: &Claimed, answer: &Answer) -> Result<Outcome, sqlx::Error> {
        match answer {
            Answer::Accepted {
                status,
                provider_id,
                final_status,
                next_action,
            } => {
                let mut tx = self.pool.begin().await?;
                match claimed.refund_id {
                    Some(refund) => {
                        intents::record_refund_answer(
                            &mut tx,
                            refund,
                            Some(provider_id.as_str()),
                            final_status,
                        )
                        .await?;
                    }
                    None if operation_of(claimed).is_some() => {
                        record_operation(
                            &mut tx,
                            claimed,
                            final_status,
                            next_action.as_ref(),
                            &*self.charge_final,
                        )
                        .await?
                    }
                    None => {
                        record_accepted_charge(
                            &mut tx,
                            claimed,
                            provider_id,
                            final_status,
                            next_action.as_ref(),
                            &*self.charge_final,
                        )
                        .await?
                    }
                }
                outbound_requests::succeed(&mut tx, claimed.id, *status).await?;
                tx.commit().await?;
                Ok(Outcome::Succeeded)
            }
            Answer::Declined {
                status,
                provider_id,
                code,
                message,
            } => {
                let mut tx = self.pool.begin().await?;
                match claimed.refund_id {
                    Some(refund) => {
                        intents::record_refund_answer(
                            &mut tx,
                            refund,
                            provider_id.as_deref(),
                            "failed",
                        )
                        .await?
                    }
                    None => {
                        let recorded = ChargeAnswer {
                            provider_payment_id: provider_id.as_deref(),
                            status: IntentStatus::Failed,
                            next_action: None,
                            failure_code: Some(code),
                            failure_message: Some(message),
                            ends_operation: false,
                        };
                        intents::record_charge_answer(
                            &mut tx,
                            claimed.intent_id,
                            &recorded,
                            &*self.charge_final,
                        )
                        .await?;
                    }
                }
                let reason = format!("declined: {code}: {message}");
                outbound_requests::decline(&mut tx, claimed.id, *status, &reason).await?;
                tx.commit().await?;
                Ok(Outcome::Declined)
            }
            Answer::Overtaken {
                status,
                final_status,
                reason,
                ..
            } => {
                let mut tx = self.pool.begin().await?;
                record_operation(&mut tx, claimed, final_status, None, &*self.charge_final).await?;
                outbound_requests::decline(&mut tx, claimed.id, *status, reason).await?;
                tx.commit().await?;
                Ok(Outcome::Declined)
            }
            Answer::Retry {
                status,
                retry_after,
                error,
            } => {
                let after = match retry_after {
                    Some(d) => (*d).min(self.settings.max_backoff),
                    None => self.backoff_for(claimed),
                };
                let ttl = self.ttls.of(&claimed.provider);
                let retried = outbound_requests::retry_later(
                    &self.pool, claimed.id, after, ttl, *status, error,
                )
                .await?;
                Ok(match retried {
                    Retried::Later => Outcome::Retried,
                    Retried::Unknown => Outcome::Unknown,
                })
            }
            Answer::Refused { status, error } => {
                let mut tx = self.pool.begin().await?;
                match claimed.refund_id {
                    // The payment is as it was at the gateway (open, or authorized): the operation ends, the
                    // intent keeps its state, the reason is the request's for an operator.
                    None if operation_of(claimed).is_some() => {
                        intents::end_operation(&mut tx, claimed.intent_id).await?
                    }
                    Some(refund) => {
                        intents::record_refund_answer(&mut tx, refund, None, "needs_attention")
                            .await?
                    }
                    None => {
                        intents::record_gateway_answer(
                            &mut tx,
                            claimed.intent_id,
                            None,
                            "needs_attention",
                            &*self.charge_final,
                        )
                        .await?
                    }
                }
                outbound_requests::fail(&mut tx, claimed.id, *status, error).await?;
                tx.commit().await?;
                Ok(Outcome::Failed)
            }
        }
    }
}

/// The request of `claimed` at its gateway, under its generation's key. `Err(Refused)`: nothing sendable — no
/// payment parameters (an intent of an older version), parameters of another gateway, or missing what the
/// gateway requires ([`PaymentParams::missing_for_confirm`], the rule the merchant API answers 400 with): the
/// dispatcher never invents a payment method.
fn build(
    gateway: &Gateway,
    claimed: &Claimed,
    subject: &Subject,
    minted: Option<&gateway::mercadopago::MintedCard>,
) -> Result<reqwest::RequestBuilder, PostError> {
    let key = claimed.sent_key();
    let intent = &subject.intent;
    if let Some((amount, refund_public_id)) = &subject.refund {
        let Some(payment) = intent.provider_payment_id.as_deref() else {
            return Err(PostError::Refused(format!(
                "intent {} has no gateway payment id",
                intent.public_id
            )));
        };
        return gateway.api.request(
            &gateway.client,
            &key,
            Outgoing::Refund {
                payment,
                amount: *amount,
                refund_public_id,
            },
        );
    }
    let Some(params) = intent.payment_params.as_ref().map(|p| &p.0) else {
        return Err(PostError::Refused(format!(
            "intent {} has no payment parameters (created before they existed?): nothing to charge with",
            intent.public_id
        )));
    };
    if let Some(missing) = params.missing_for_confirm() {
        return Err(PostError::Refused(format!(
            "intent {}: {missing} is missing; the gateway cannot charge without it",
            intent.public_id
        )));
    }
    gateway.api.request(
        &gateway.client,
        &key,
        Outgoing::Charge {
            intent,
            params,
            minted,
        },
    )
}

/// The cancel or capture a request is, if it is one.
fn operation_of(claimed: &Claimed) -> Option<Operation> {
    outbound_requests::Kind::parse(&claimed.kind).and_then(Operation::of_kind)
}

/// The answer for a request that could not be built: hookline's own problem (needs an operator), or no HTTP client
/// (retried: nothing was sent).
fn unsent(e: PostError) -> Answer {
    match e {
        PostError::Refused(error) => Answer::Refused {
            status: None,
            error,
        },
        PostError::NoClient(error) => Answer::Retry {
            status: None,
            retry_after: None,
            error,
        },
    }
}

/// Records the gateway's word on an intent's cancel or capture (the payment as it is now), ending the operation,
/// in the caller's transaction: forward only, like a charge's answer ([`intents::record_charge_answer`]).
async fn record_operation(
    conn: &mut sqlx::PgConnection,
    claimed: &Claimed,
    final_status: &str,
    next_action: Option<&serde_json::Value>,
    charge_final: &dyn ChargeFinal,
) -> Result<(), sqlx::Error> {
    let status = IntentStatus::parse(final_status).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let recorded = ChargeAnswer {
        provider_payment_id: None,
        status,
        next_action,
        failure_code: None,
        failure_message: None,
        ends_operation: true,
    };
    intents::record_charge_answer(conn, claimed.intent_id, &recorded, charge_final).await?;
    Ok(())
}

/// Records the gateway's accepted charge on its intent (in the caller's transaction) and, when the provider's
/// webhook was applied before this answer linked the intent, follows the payment's final status now.
async fn record_accepted_charge(
    conn: &mut sqlx::PgConnection,
    claimed: &Claimed,
    provider_id: &str,
    final_status: &str,
    next_action: Option<&serde_json::Value>,
    charge_final: &dyn ChargeFinal,
) -> Result<(), sqlx::Error> {
    let status = IntentStatus::parse(final_status).map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let recorded = ChargeAnswer {
        provider_payment_id: Some(provider_id),
        status,
        next_action,
        failure_code: None,
        failure_message: None,
        ends_operation: false,
    };
    intents::record_charge_answer(conn, claimed.intent_id, &recorded, charge_final).await?;
    if matches!(
        status,
        IntentStatus::Processing | IntentStatus::RequiresAction
    ) {
        let state =
            hookline_payments::apply::payment_state(&mut *conn, &claimed.provider, provider_id)
                .await?;
        if let Some(done) = state.and_then(|(s, _)| s.intent_status()) {
            intents::complete_from_payment(
                conn,
                &claimed.provider,
                provider_id,
                done,
                charge_final,
            )
            .await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_with_jitter_within_bounds() {
        let s = DispatchSettings::default();
        for attempts in 0..40 {
            for seed in 0..50u64 {
                let d = s.backoff(attempts, seed);
                assert!(
                    d >= Duration::from_secs(1) && d <= Duration::from_secs(300),
                    "{d:?}"
                );
            }
        }
        // The 5th attempt waits between 8 and 16 s.
        let d = s.backoff(5, 7);
        assert!(
            d >= Duration::from_secs(8) && d <= Duration::from_secs(16),
            "{d:?}"
        );
        assert_ne!(s.backoff(5, 1), s.backoff(5, 2));
        assert_eq!(s.backoff(30, 3), s.backoff(30, 3));
    }
}
