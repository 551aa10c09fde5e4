//! The outbound dispatcher: sends the requests queued in `outbound_requests` (charges of payment intents,
//! refunds) to the provider's API and records the answers.
//!
//! Runs supervised inside `hookline-worker` (task `dispatcher`; `[dispatcher] enabled = false` disables it) and
//! on its own with `hookline dispatch`. Several dispatchers may run at once: requests are claimed with a lease
//! ([`outbound_requests::claim_due`], `FOR UPDATE SKIP LOCKED`).
//!
//! Exactly-once at the gateway rests on the stored idempotency key, sent unchanged on **every** attempt (Stripe
//! `Idempotency-Key`, Mercado Pago `X-Idempotency-Key`): a retry after a lost answer, or after a dispatcher died
//! between sending and recording (its lease expires, another claims the request), gets the first attempt's
//! answer instead of a second charge. No database transaction is open during the HTTP call; the answer is
//! recorded afterwards in one short transaction.
//!
//! Classification (see [`classify`]):
//! * a 2xx whose body is the provider's object — JSON with the object's id (and, for Stripe, the expected
//!   `object`) and a `status` — → recorded (`intents::record_gateway_answer` + `outbound_requests::succeed`). Nothing else
//!   is a success: the intent never becomes `processing` without a gateway id;
//! * a 2xx whose body is not that (not JSON, no id, another object) → retried with the same key: the charge may
//!   have happened, and the gateway replays its stored answer to the same key, so a retry is safe and may
//!   return a readable answer. After [`MAX_UNREADABLE_ATTEMPTS`] attempts it needs attention instead (a server
//!   that keeps answering 2xx garbage is not the gateway: a misconfigured `api_base`);
//! * a timeout, connection error, 5xx, 429 (its `Retry-After` honoured) or 409 (the same key still executing at
//!   the gateway) → retried later with exponential backoff and jitter (1 s … 5 min);
//! * a 3xx → `outbound_requests::fail`, needs attention: redirects are never followed ([`hookline_core::http::client`]; following
//!   one would re-send the charge, its key and the token to wherever `Location` points), and a payment API
//!   does not redirect its POSTs: the `api_base` is wrong (a proxy, a captive portal, a moved host);
//! * any other 4xx → `outbound_requests::fail` with the reason, and the intent (or refund) `needs_attention`.
//!
//! Every reason is recorded in `outbound_requests.last_error` (shown by `hookline status`, the console and
//! the payment-intents API).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::intents;
use crate::outbound_requests::{self, Claimed};
use hookline_core::config::DispatcherConfig;
use hookline_core::retry::{jittered_backoff, parse_retry_after};
use hookline_core::{Config, ProviderConfig};
use hookline_signature::Scheme;
use secrecy::{ExposeSecret, SecretString};
use serde_json::{json, Value};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;

/// Metric names.
pub mod metric {
    /// Counter: requests sent, by `provider`, `kind` (charge, refund) and `outcome` (succeeded, retried, failed).
    pub const ATTEMPTS: &str = "hookline_dispatch_attempts_total";
    /// Histogram: seconds per gateway call, by `provider`.
    pub const SECONDS: &str = "hookline_dispatch_seconds";
}

/// Largest answer body read.
const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Attempts after which a 2xx answer that is not the provider's object needs attention instead of another
/// retry (with the default backoff, about two minutes after the first).
pub const MAX_UNREADABLE_ATTEMPTS: i32 = 8;

/// Longest gateway object id accepted (Stripe's ids are ~30 characters, Mercado Pago's are numbers).
const MAX_PROVIDER_ID_CHARS: usize = 255;

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

/// The refund request of `claimed` at its gateway, with the request's idempotency key; `Err` says why it cannot
/// be sent (a refusal, not a retry).
fn refund_request(
    http: &reqwest::Client,
    gateway: &Gateway,
    claimed: &Claimed,
    intent: &intents::Intent,
    amount: i64,
) -> Result<reqwest::RequestBuilder, String> {
    let Some(payment) = intent.provider_payment_id.as_deref() else {
        return Err(format!(
            "intent {} has no gateway payment id",
            intent.public_id
        ));
    };
    match gateway.api {
        Api::Stripe => post(http, gateway, "v1/refunds").map(|r| {
            r.header("Idempotency-Key", &claimed.idempotency_key)
                .form(&[
                    ("payment_intent", payment.to_owned()),
                    ("amount", amount.to_string()),
                ])
        }),
        Api::MercadoPago => {
            if !payment.chars().all(|c| c.is_ascii_alphanumeric()) {
                return Err(format!("{payment:?} is not a Mercado Pago payment id"));
            }
            post(http, gateway, &format!("v1/payments/{payment}/refunds")).map(|r| {
                r.header("X-Idempotency-Key", &claimed.idempotency_key)
                    .json(&json!({ "amount": major_units(amount) }))
            })
        }
    }
}

/// The charge request of `claimed`'s intent at its gateway, with the request's idempotency key.
fn charge_request(
    http: &reqwest::Client,
    gateway: &Gateway,
    claimed: &Claimed,
    intent: &intents::Intent,
) -> Result<reqwest::RequestBuilder, String> {
    match gateway.api {
        Api::Stripe => {
            let mut form = vec![
                ("amount", intent.amount.to_string()),
                ("currency", intent.currency.clone()),
                ("confirm", "true".to_owned()),
                ("metadata[hookline_intent]", intent.public_id.clone()),
            ];
            if let Some(d) = &intent.description {
                form.push(("description", d.clone()));
            }
            // Stripe's `customer` takes a `cus_…` object id; the merchant's reference goes to metadata.
            if let Some(c) = &intent.customer {
                form.push(("metadata[hookline_customer]", c.clone()));
            }
            post(http, gateway, "v1/payment_intents").map(|r| {
                r.header("Idempotency-Key", &claimed.idempotency_key)
                    .form(&form)
            })
        }
        Api::MercadoPago => {
            let email = intent
                .customer
                .as_deref()
                .filter(|c| c.contains('@'))
                .unwrap_or("payer@example.com");
            let description = intent
                .description
                .clone()
                .unwrap_or_else(|| intent.public_id.clone());
            post(http, gateway, "v1/payments").map(|r| {
                r.header("X-Idempotency-Key", &claimed.idempotency_key)
                    .json(&json!({
                        "transaction_amount": major_units(intent.amount),
                        "description": description,
                        "payment_method_id": "visa",
                        "payer": {"email": email},
                        "external_reference": intent.public_id,
                    }))
            })
        }
    }
}

/// A POST to `path` under the gateway's API base, with its token.
fn post(
    http: &reqwest::Client,
    gateway: &Gateway,
    path: &str,
) -> Result<reqwest::RequestBuilder, String> {
    let url = gateway
        .base
        .join(path)
        .map_err(|e| format!("cannot build the API URL: {e}"))?;
    let mut req = http.post(url);
    if let Some(token) = &gateway.token {
        req = req.bearer_auth(token.expose_secret());
    }
    Ok(req)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Stripe,
    MercadoPago,
}

#[derive(Clone)]
struct Gateway {
    api: Api,
    base: url::Url,
    token: Option<SecretString>,
}

/// What the gateway answered to one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// 2xx with the provider's object: its id and what it says of it.
    Accepted {
        /// HTTP status.
        status: u16,
        /// The payment (charge) or refund id at the gateway (always present: a 2xx without it is not accepted).
        provider_id: String,
        /// `processing`, `succeeded` or `failed` (charges); `succeeded`, `failed` or `requires_dispatch`
        /// (refunds still pending at the gateway).
        final_status: &'static str,
    },
    /// Try again later.
    Retry {
        /// HTTP status, when there was an answer.
        status: Option<u16>,
        /// The gateway's `Retry-After`.
        retry_after: Option<Duration>,
        /// What happened.
        error: String,
    },
    /// Final refusal (a 3xx or a 4xx, a 2xx still unreadable after [`MAX_UNREADABLE_ATTEMPTS`], or nothing we
    /// can send).
    Refused {
        /// HTTP status, when there was an answer.
        status: Option<u16>,
        /// Why.
        error: String,
    },
}

/// What became of a claimed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The gateway accepted it; recorded.
    Succeeded,
    /// Scheduled for another attempt.
    Retried,
    /// Failed for good; needs attention.
    Failed,
    /// Sent but not recorded (fail point `dispatch.after_send`): the lease expires and it is sent again.
    Abandoned,
}

impl Outcome {
    fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Retried => "retried",
            Outcome::Failed => "failed",
            Outcome::Abandoned => "abandoned",
        }
    }
}

/// The dispatcher: a pool, the providers' APIs and one HTTP client.
#[derive(Clone)]
pub struct Dispatcher {
    pool: PgPool,
    gateways: Arc<HashMap<String, Gateway>>,
    /// [`hookline_core::http::client`], or why it could not be built (then every attempt is retried with that reason,
    /// never sent through a default client that would follow redirects).
    http: Result<reqwest::Client, Arc<str>>,
    settings: DispatchSettings,
}

impl std::fmt::Debug for Dispatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("providers", &self.gateways.keys().collect::<Vec<_>>())
            .field("settings", &self.settings)
            .finish()
    }
}

impl Dispatcher {
    /// A dispatcher for the providers that have an `api_base` and a scheme that can charge (Stripe, Mercado
    /// Pago). Requests for other providers fail with the reason.
    pub fn new<'a>(
        pool: PgPool,
        providers: impl IntoIterator<Item = &'a ProviderConfig>,
        settings: DispatchSettings,
    ) -> Dispatcher {
        let gateways = providers
            .into_iter()
            .filter_map(|p| {
                let api = match p.scheme {
                    Scheme::Stripe => Api::Stripe,
                    Scheme::MercadoPago => Api::MercadoPago,
                    _ => return None,
                };
                Some((
                    p.name.clone(),
                    Gateway {
                        api,
                        base: p.api_base.clone()?,
                        token: p.api_token.clone(),
                    },
                ))
            })
            .collect();
        let http = hookline_core::http::client(settings.connect_timeout, settings.request_timeout)
            .map_err(|e| {
                tracing::error!(error = %format!("{e:#}"), "dispatcher: no HTTP client; nothing will be sent");
                Arc::from(format!("{e:#}"))
            });
        Dispatcher {
            pool,
            gateways: Arc::new(gateways),
            http,
            settings,
        }
    }

    /// A dispatcher on `pool` for the configured providers.
    pub fn from_config(pool: PgPool, config: &Config, settings: DispatchSettings) -> Dispatcher {
        Dispatcher::new(pool, config.providers.values(), settings)
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

    /// Claims up to `batch` due requests and processes them concurrently; returns how many were claimed.
    pub async fn dispatch_once(&self) -> Result<usize, sqlx::Error> {
        let claimed =
            outbound_requests::claim_due(&self.pool, self.settings.batch, self.settings.lease)
                .await?;
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

    /// Sends one claimed request and records the answer.
    pub async fn process(&self, claimed: &Claimed) -> Result<Outcome, sqlx::Error> {
        let started = Instant::now();
        let answer = self.send(claimed).await?;
        metrics::histogram!(metric::SECONDS, "provider" => claimed.provider.clone())
            .record(started.elapsed().as_secs_f64());
        // Between the gateway's answer and recording it: a crash here leaves the request leased; the next
        // dispatcher sends it again with the same key.
        #[cfg(feature = "failpoints")]
        fail::fail_point!("dispatch.after_send", |_| Ok(Outcome::Abandoned));
        let outcome = self.record(claimed, &answer).await?;
        metrics::counter!(metric::ATTEMPTS, "provider" => claimed.provider.clone(),
            "kind" => claimed.kind.clone(), "outcome" => outcome.as_str())
        .increment(1);
        match &answer {
            Answer::Retry { error, .. } => tracing::info!(request = claimed.id,
                attempts = claimed.attempts, error = %error, "dispatcher: will retry"),
            Answer::Refused { error, .. } => tracing::warn!(request = claimed.id,
                error = %error, "dispatcher: the gateway refused the request; needs attention"),
            Answer::Accepted { .. } => {}
        }
        Ok(outcome)
    }

    /// Sends one claimed request to the gateway (with its stored idempotency key) and classifies the answer.
    /// Reads what it sends from the database first, with no transaction open during the HTTP call. Records
    /// nothing.
    pub async fn send(&self, claimed: &Claimed) -> Result<Answer, sqlx::Error> {
        let Some(gateway) = self.gateways.get(&claimed.provider) else {
            return Ok(Answer::Refused {
                status: None,
                error: format!(
                    "provider {} has no api_base, or its scheme cannot charge (stripe, mercadopago)",
                    claimed.provider
                ),
            });
        };
        let http = match &self.http {
            Ok(h) => h,
            Err(e) => {
                return Ok(Answer::Retry {
                    status: None,
                    retry_after: None,
                    error: format!("no HTTP client: {e}"),
                })
            }
        };
        let (intent, refund) = {
            let mut conn = self.pool.acquire().await?;
            let intent = intents::get(&mut conn, claimed.intent_id).await?;
            let refund = match claimed.refund_id {
                Some(id) => intents::get_refund(&mut conn, id).await?,
                None => None,
            };
            (intent, refund)
        };
        let Some(intent) = intent else {
            return Ok(Answer::Refused {
                status: None,
                error: format!("intent {} does not exist", claimed.intent_id),
            });
        };
        let request = if claimed.kind == outbound_requests::Kind::Refund.as_str() {
            match refund {
                Some((_, amount, _)) => refund_request(http, gateway, claimed, &intent, amount),
                None => Err("the refund record is missing".into()),
            }
        } else {
            charge_request(http, gateway, claimed, &intent)
        };
        let request = match request {
            Ok(r) => r,
            Err(error) => {
                return Ok(Answer::Refused {
                    status: None,
                    error,
                })
            }
        };
        let expected = Expected {
            api: gateway.api,
            refund: claimed.refund_id.is_some(),
            provider: &claimed.provider,
            attempts: claimed.attempts,
        };
        Ok(classify(&expected, request.send().await).await)
    }

    /// Records an answer in one short transaction (2xx, final refusal) or schedules the next attempt.
    pub async fn record(&self, claimed: &Claimed, answer: &Answer) -> Result<Outcome, sqlx::Error> {
        match answer {
            Answer::Accepted {
                status,
                provider_id,
                final_status,
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
                    None => {
                        intents::record_gateway_answer(
                            &mut tx,
                            claimed.intent_id,
                            Some(provider_id.as_str()),
                            final_status,
                        )
                        .await?;
                        // The provider's webhook may have been applied before this answer was recorded (the
                        // intent was not linked yet): follow the payment's final status now.
                        if *final_status == "processing" {
                            let id = provider_id.as_str();
                            let state =
                                crate::apply::payment_state(&mut *tx, &claimed.provider, id)
                                    .await?;
                            let done = state.and_then(|(s, _)| s.intent_status());
                            if let Some(done) = done {
                                intents::complete_from_payment(
                                    &mut tx,
                                    &claimed.provider,
                                    id,
                                    done,
                                )
                                .await?;
                            }
                        }
                    }
                }
                outbound_requests::succeed(&mut tx, claimed.id, *status).await?;
                tx.commit().await?;
                Ok(Outcome::Succeeded)
            }
            Answer::Retry {
                status,
                retry_after,
                error,
            } => {
                let seed = (claimed.id as u64).rotate_left(32)
                    ^ (claimed.attempts as u64)
                    ^ SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.subsec_nanos() as u64)
                        .unwrap_or(0);
                let after = match retry_after {
                    Some(d) => (*d).min(self.settings.max_backoff),
                    None => self.settings.backoff(claimed.attempts, seed),
                };
                outbound_requests::retry_later(&self.pool, claimed.id, after, *status, error)
                    .await?;
                Ok(Outcome::Retried)
            }
            Answer::Refused { status, error } => {
                let mut tx = self.pool.begin().await?;
                match claimed.refund_id {
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

/// Minor units as the decimal major amount Mercado Pago expects (`2550` → `25.5`).
fn major_units(amount: i64) -> f64 {
    amount as f64 / 100.0
}

/// What the answer to one attempt must be: the provider's object of this kind.
struct Expected<'a> {
    api: Api,
    /// A refund (else a charge).
    refund: bool,
    /// Configured provider name (for the reasons).
    provider: &'a str,
    /// Attempts so far, this one included.
    attempts: i32,
}

impl Expected<'_> {
    /// What a 2xx must contain, in the reasons.
    fn object(&self) -> &'static str {
        match (self.api, self.refund) {
            (Api::Stripe, false) => "a Stripe payment_intent",
            (Api::Stripe, true) => "a Stripe refund",
            (Api::MercadoPago, false) => "a Mercado Pago payment",
            (Api::MercadoPago, true) => "a Mercado Pago refund",
        }
    }
}

/// The gateway's object id and its `status`, or why the body is not the expected object.
fn read_object(expected: &Expected<'_>, body: &[u8]) -> Result<(String, String), String> {
    let json: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON ({e})"))?;
    if !json.is_object() {
        return Err("not a JSON object".into());
    }
    if expected.api == Api::Stripe {
        let want = if expected.refund {
            "refund"
        } else {
            "payment_intent"
        };
        match json["object"].as_str() {
            Some(o) if o == want => {}
            Some(o) => {
                return Err(format!(
                    "\"object\" is {:?}, not {want:?}",
                    excerpt(o.as_bytes(), 40)
                ))
            }
            None => return Err(format!("no \"object\": {want:?}")),
        }
    }
    let id = match &json["id"] {
        Value::String(s) => s.clone(),
        // Mercado Pago's ids are numbers.
        Value::Number(n) if expected.api == Api::MercadoPago && n.is_u64() => n.to_string(),
        Value::Null => return Err("no \"id\"".into()),
        _ => return Err("\"id\" is not an id of this provider".into()),
    };
    if id.is_empty()
        || id.len() > MAX_PROVIDER_ID_CHARS
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    {
        return Err(format!(
            "\"id\" {:?} is not an id of this provider",
            excerpt(id.as_bytes(), 40)
        ));
    }
    let Some(status) = json["status"].as_str() else {
        return Err("no \"status\"".into());
    };
    Ok((id, status.to_owned()))
}

/// Up to `max` characters of `bytes`, lossily decoded, without control characters (safe in one log line and in
/// `last_error`).
fn excerpt(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| !c.is_control())
        .take(max)
        .collect()
}

/// Classifies one attempt's answer (see the module documentation for the rules and their reasons).
async fn classify(
    expected: &Expected<'_>,
    sent: Result<reqwest::Response, reqwest::Error>,
) -> Answer {
    let retry = |status: Option<u16>, retry_after: Option<Duration>, error: String| Answer::Retry {
        status,
        retry_after,
        error,
    };
    let mut res = match sent {
        Ok(r) => r,
        Err(e) => return retry(None, None, format!("sending: {e}")),
    };
    let status = res.status().as_u16();
    let retry_after = res
        .headers()
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_retry_after);
    // A redirect is never followed (hookline_core::http::client) and never a success: the charge did not reach the
    // gateway we meant, and re-sending it (with its key and token) wherever `Location` points could reach an
    // internal service. A payment API does not redirect its POSTs: the configured `api_base` is wrong, which
    // retrying cannot fix — it needs an operator.
    if (300..=399).contains(&status) {
        return Answer::Refused {
            status: Some(status),
            error: format!(
                "{status}: the gateway redirected to {} — redirects are not followed; \
                 check providers.{}.api_base",
                hookline_core::http::redirect_target(res.headers()),
                expected.provider
            ),
        };
    }
    let mut body = Vec::new();
    loop {
        match res.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_BODY_BYTES {
                    break;
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            // The answer was cut: we do not know what the gateway did; the same key will tell.
            Err(e) => return retry(Some(status), None, format!("reading the answer: {e}")),
        }
    }
    match status {
        200..=299 => {
            let (provider_id, said) = match read_object(expected, &body) {
                Ok(object) => object,
                Err(why) => {
                    let error = format!(
                        "{status} but the answer is not {}: {why}: {}",
                        expected.object(),
                        excerpt(&body, 200)
                    );
                    // The gateway may have charged: retrying with the same key is safe (it replays its stored
                    // answer, which may be readable this time). A server that keeps answering so is not the
                    // gateway: after a bound, an operator looks (the intent needs attention, the reason kept).
                    return if expected.attempts >= MAX_UNREADABLE_ATTEMPTS {
                        Answer::Refused {
                            status: Some(status),
                            error: format!("{error} (after {} attempts)", expected.attempts),
                        }
                    } else {
                        retry(Some(status), None, format!("{error} (will retry)"))
                    };
                }
            };
            let final_status = match (expected.api, expected.refund, said.as_str()) {
                (Api::Stripe, false, "succeeded") | (Api::MercadoPago, false, "approved") => {
                    "succeeded"
                }
                (Api::Stripe, false, "canceled")
                | (Api::MercadoPago, false, "rejected" | "cancelled") => "failed",
                (_, false, _) => "processing",
                (Api::Stripe, true, "succeeded") | (Api::MercadoPago, true, "approved") => {
                    "succeeded"
                }
                (Api::Stripe, true, "failed" | "canceled")
                | (Api::MercadoPago, true, "rejected" | "cancelled") => "failed",
                (_, true, _) => "requires_dispatch",
            };
            Answer::Accepted {
                status,
                provider_id,
                final_status,
            }
        }
        // 409: the same key is still executing at the gateway (our earlier, lost attempt): ask again later.
        409 | 429 | 500..=599 => retry(
            Some(status),
            retry_after,
            format!("{status} (will retry): {}", excerpt(&body, 300)),
        ),
        _ => Answer::Refused {
            status: Some(status),
            error: format!("{status}: {}", excerpt(&body, 300)),
        },
    }
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

    #[test]
    fn major_units_are_decimal() {
        assert_eq!(major_units(2550), 25.5);
        assert_eq!(major_units(1), 0.01);
        assert_eq!(json!(major_units(9999)).to_string(), "99.99");
    }
}
