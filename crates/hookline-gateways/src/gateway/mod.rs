//! One API client per provider (issue 26's leftover): the base URL, the token, [`hookline_core::http::client`]
//! (never follows a redirect) and the bounded body reader, shared by everything that talks to a provider's API —
//! the dispatcher's charges, refunds and lookups ([`crate::dispatch`]), the worker's Mercado Pago payment fetch
//! ([`crate::fetch`]) and reconciliation ([`crate::reconcile`]). What each provider's requests and objects look
//! like lives beside it: [`stripe`], [`mercadopago`] and [`pagarme_v5`] (Pagar.me Core API v5). Adding a
//! gateway is one module here.
//!
//! Nothing here touches the database, and nothing here logs a token or a body.

pub mod mercadopago;
pub mod pagarme_v5;
pub mod stripe;

use std::sync::Arc;
use std::time::{Duration, Instant};

use secrecy::{ExposeSecret, SecretString};
use time::OffsetDateTime;

use hookline_core::events::OwnedEvent;
use hookline_core::handler::HandleError;
use hookline_core::retry::parse_retry_after;
use hookline_payments::intents::Intent;
use hookline_payments::model::PaymentFact;
use hookline_payments::params::PaymentParams;
use hookline_signature::Scheme;

/// Largest answer body read from a provider's API; a payment, a refund or a search page is a few KB.
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

/// Longest gateway object id accepted (Stripe's ids are ~30 characters, Mercado Pago's are numbers).
pub const MAX_PROVIDER_ID_CHARS: usize = 255;

/// The decline code recorded when the gateway refuses the payment method itself rather than the charge: a
/// Stripe `invalid_request_error` about `payment_method`/`customer` without a code of its own, a Mercado Pago saved
/// card its API no longer finds or cannot tokenize. Billing reads it as "the method is unusable"
/// (`needs_payment_method`, not retried).
pub const PAYMENT_METHOD_UNUSABLE: &str = "payment_method_unusable";

/// Metric names of API reads (the worker's fetch, lookups, reconciliation).
pub mod metric {
    /// Counter: API reads by `provider` and `outcome` (ok, not_found, refused, redirect, transient, error).
    pub const REQUESTS: &str = "hookline_worker_api_requests_total";
    /// Histogram: seconds per API read, by `provider`.
    pub const SECONDS: &str = "hookline_worker_api_seconds";
}

/// The provider APIs hookline sends requests to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Stripe (form-encoded requests, `Idempotency-Key`).
    Stripe,
    /// Mercado Pago (JSON requests, `X-Idempotency-Key`).
    MercadoPago,
    /// Pagar.me Core API v5 (JSON requests, HTTP Basic with the secret key, `Idempotency-Key`).
    PagarmeV5,
}

impl Api {
    /// The API of a signature scheme, if hookline talks to it.
    pub fn of(scheme: Scheme) -> Option<Api> {
        match scheme {
            Scheme::Stripe => Some(Api::Stripe),
            Scheme::MercadoPago => Some(Api::MercadoPago),
            Scheme::PagarmeV5 => Some(Api::PagarmeV5),
            _ => None,
        }
    }
}

/// A charge or refund to send, as [`Api::request`] builds it: everything the provider's file needs.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outgoing<'a> {
    /// The intent's charge, with its own payment parameters.
    Charge {
        /// The intent.
        intent: &'a Intent,
        /// Its payment parameters (the intent's `payment_params`, checked complete by the caller).
        params: &'a PaymentParams,
        /// A Mercado Pago saved card's minted token for this key generation.
        minted: Option<&'a mercadopago::MintedCard>,
    },
    /// A refund of the intent's payment.
    Refund {
        /// The gateway's payment (charge) id.
        payment: &'a str,
        /// Minor units.
        amount: i64,
        /// The refund's public id (`re_hl_N`), hookline's reference at the gateway where it keeps one.
        refund_public_id: &'a str,
    },
    /// The cancel of the intent's payment still open at the gateway (the void of an authorization).
    Cancel {
        /// The gateway's payment (charge) id.
        payment: &'a str,
        /// hookline's cancellation reason, passed on where the gateway takes one (Stripe).
        reason: Option<&'a str>,
    },
    /// The capture of the intent's authorization.
    Capture {
        /// The gateway's payment (charge) id.
        payment: &'a str,
        /// Minor units, when less than all is captured.
        amount: Option<i64>,
    },
}

/// What a refund's lookup needs from hookline's own records, read by the caller (nothing here touches the
/// database): one variant per gateway's need ([`Api::refunds_needed`] names which, with nothing in it yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RefundsKnown {
    /// Nothing: the gateway keeps hookline's reference on the refund (Stripe's metadata).
    Nothing,
    /// Mercado Pago: the gateway refund ids linked to the intent's other refund requests (a gateway refund of the
    /// same amount linked to another is not this one).
    Linked(Vec<String>),
    /// Pagar.me: minor units of the intent's other refunds the gateway confirmed (its refunds carry no reference:
    /// the charge's `canceled_amount` must hold this one beside them).
    Recorded(i64),
}

/// One payment as a provider's reconciliation listing shows it: what the provider says of it, and the notification
/// to store when ours differs (the worker then reads the object from the API and applies it, as for a webhook).
#[derive(Debug)]
pub struct ListedPayment {
    /// The payment's id at the provider (how hookline's `payments` row is keyed).
    pub id: String,
    /// How reports name it (`payment 123`, `charge ch_…`).
    pub label: String,
    /// Its resource, normalized.
    pub facts: Vec<PaymentFact>,
    /// What the provider says has been refunded, minor units.
    pub refunded: i64,
    /// The notification stored when ours differs, keyed so that a second run stores nothing.
    pub notification: OwnedEvent,
}

/// One page of a provider's payments, for reconciliation.
#[derive(Debug, Default)]
pub struct PaymentsPage {
    /// The payments listed, read.
    pub payments: Vec<ListedPayment>,
    /// How many objects the page held (read or not).
    pub seen: u64,
    /// Objects that could not be read, each with why (reported for an operator).
    pub unreadable: Vec<String>,
    /// Where a resumed run continues after this page.
    pub cursor: String,
    /// Whether another page follows.
    pub more: bool,
}

impl PaymentsPage {
    /// The id and facts of one listed object (`what` names its kind in the reports), its id read by `id` and its
    /// resource normalized by `normalize` as a webhook's would be; an object without a readable id, or whose
    /// resource does not normalize, is reported in [`PaymentsPage::unreadable`] and skipped (`None`).
    pub(crate) fn read<E: std::fmt::Display>(
        &mut self,
        what: &str,
        object: &serde_json::Value,
        id: impl FnOnce(&serde_json::Value) -> Option<String>,
        normalize: impl FnOnce(&[u8], &str) -> Result<Vec<PaymentFact>, E>,
    ) -> anyhow::Result<Option<(String, Vec<PaymentFact>)>> {
        use anyhow::Context;
        let Some(id) = id(object) else {
            self.unreadable
                .push(format!("a {what} without a readable id in the list"));
            return Ok(None);
        };
        let body = serde_json::to_vec(object).with_context(|| format!("serialise a {what}"))?;
        match normalize(&body, &id) {
            Ok(facts) => Ok(Some((id, facts))),
            Err(e) => {
                self.unreadable.push(format!("{what} {id}: {e}"));
                Ok(None)
            }
        }
    }
}

/// The notification reconciliation stores for a payment whose state differs from ours: `body` under the dedupe
/// `key`, marked `x-hookline-source: reconcile`, in the current trace — stored through the edge's own statement,
/// so a webhook that arrives later is a duplicate.
pub(crate) fn reconcile_notification(
    client: &ApiClient,
    key: String,
    event_type: String,
    query: String,
    body: &serde_json::Value,
) -> anyhow::Result<OwnedEvent> {
    use anyhow::Context;
    Ok(OwnedEvent {
        provider: client.provider().to_owned(),
        provider_event_id: key,
        event_type: Some(event_type),
        signed_at: None,
        headers: vec![("x-hookline-source".into(), "reconcile".into())],
        query,
        body: serde_json::to_vec(body)
            .context("serialise a notification")?
            .into(),
        traceparent: hookline_core::telemetry::current_traceparent(),
    })
}

/// The window a reconciliation lists.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// Start.
    pub since: OffsetDateTime,
    /// End.
    pub until: OffsetDateTime,
}

impl Window {
    /// RFC 3339, as the providers' list filters take it.
    pub fn rfc3339(t: OffsetDateTime) -> String {
        t.format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default()
    }
}

/// The one place that names each provider for the generic loops (the dispatcher, its answer classification and
/// lookup, reconciliation's listing): every arm calls the provider's own file, so adding a gateway is one file here and one arm per method.
impl Api {
    /// What a 2xx must contain, in the reasons.
    pub fn object_name(self, refund: bool) -> &'static str {
        match (self, refund) {
            (Api::Stripe, false) => "a Stripe payment_intent",
            (Api::Stripe, true) => "a Stripe refund",
            (Api::MercadoPago, false) => "a Mercado Pago payment",
            (Api::MercadoPago, true) => "a Mercado Pago refund",
            (Api::PagarmeV5, false) => "a Pagar.me order",
            (Api::PagarmeV5, true) => "a Pagar.me charge",
        }
    }

    /// What the answer to a cancel or capture must be, in the reasons.
    pub fn payment_name(self) -> &'static str {
        match self {
            Api::Stripe => "a Stripe payment_intent",
            Api::MercadoPago => "a Mercado Pago payment",
            Api::PagarmeV5 => "a Pagar.me charge",
        }
    }

    /// Reads the payment as the gateway's payment API shows it (the answer to a cancel or capture, and
    /// [`Api::get_charge`]): Stripe's PaymentIntent, Mercado Pago's payment, Pagar.me's charge.
    pub fn read_payment(self, json: &serde_json::Value) -> Result<Object, String> {
        match self {
            Api::Stripe => stripe::read_charge(json),
            Api::MercadoPago => mercadopago::read_payment(json),
            Api::PagarmeV5 => pagarme_v5::read_charge(json),
        }
    }

    /// The payment `payment` as it is now at the gateway (`Err`: the read failed).
    pub async fn get_charge(
        self,
        client: &ApiClient,
        payment: &str,
    ) -> Result<serde_json::Value, String> {
        match self {
            Api::Stripe => stripe::get_charge(client, payment).await,
            Api::MercadoPago => mercadopago::get_charge(client, payment).await,
            Api::PagarmeV5 => pagarme_v5::get_charge(client, payment).await,
        }
    }

    /// Whether the gateway's cancel of a PAID payment is a refund rather than a refusal (Pagar.me's `DELETE
    /// /charges/{id}`): the dispatcher then reads the payment first and sends the cancel only while it is unpaid.
    pub fn cancel_may_refund(self) -> bool {
        self == Api::PagarmeV5
    }

    /// Reads the provider's charge or refund object from `json` (a refund's public id names Pagar.me's refund,
    /// whose answer is the charge).
    pub fn read_object(
        self,
        json: &serde_json::Value,
        refund: bool,
        refund_public_id: &str,
    ) -> Result<Object, String> {
        match (self, refund) {
            (Api::Stripe, false) => stripe::read_charge(json),
            (Api::Stripe, true) => stripe::read_refund(json),
            (Api::MercadoPago, false) => mercadopago::read_payment(json),
            (Api::MercadoPago, true) => mercadopago::read_refund(json),
            (Api::PagarmeV5, false) => pagarme_v5::read_order(json),
            (Api::PagarmeV5, true) => pagarme_v5::read_refund(json, refund_public_id),
        }
    }

    /// A 4xx that is an outcome, not hookline's problem (a declined card, a refused payment method, a refund
    /// the gateway will not make), read from the error body; `None`: hookline's own problem.
    pub fn refusal(self, refund: bool, status: u16, body: &[u8]) -> Option<Decline> {
        match self {
            Api::Stripe => stripe::read_refusal(refund, status, body),
            Api::MercadoPago => None,
            Api::PagarmeV5 => pagarme_v5::read_refusal(refund, status, body),
        }
    }

    /// Whether a charge's saved card is prepared before it is sent (Mercado Pago: the card's payment method and
    /// a single-use token, minted per key generation).
    pub fn mints_saved_cards(self) -> bool {
        self == Api::MercadoPago
    }

    /// The request for `send` under idempotency `key`, or why there is none.
    pub(crate) fn request(
        self,
        client: &ApiClient,
        key: &str,
        send: Outgoing<'_>,
    ) -> Result<reqwest::RequestBuilder, PostError> {
        match send {
            Outgoing::Cancel { payment, reason } => match self {
                Api::Stripe => stripe::cancel_request(client, key, payment, reason),
                Api::MercadoPago => mercadopago::cancel_request(client, key, payment),
                Api::PagarmeV5 => pagarme_v5::cancel_request(client, key, payment),
            },
            Outgoing::Capture { payment, amount } => match self {
                Api::Stripe => stripe::capture_request(client, key, payment, amount),
                Api::MercadoPago => mercadopago::capture_request(client, key, payment, amount),
                Api::PagarmeV5 => pagarme_v5::capture_request(client, key, payment, amount),
            },
            Outgoing::Refund {
                payment,
                amount,
                refund_public_id,
            } => match self {
                Api::Stripe => {
                    stripe::refund_request(client, key, payment, amount, refund_public_id)
                }
                Api::MercadoPago => {
                    mercadopago::refund_request(client, key, payment, amount, refund_public_id)
                }
                Api::PagarmeV5 => pagarme_v5::refund_request(client, key, payment, amount),
            },
            Outgoing::Charge {
                intent,
                params,
                minted,
            } => match (self, params) {
                (Api::Stripe, PaymentParams::Stripe(p)) => {
                    stripe::charge_request(client, key, intent, p)
                }
                (Api::MercadoPago, PaymentParams::MercadoPago(p)) => {
                    let saved = minted.map(|minted| mercadopago::SavedCardCharge {
                        minted,
                        // A billing charge's subscription (Mercado Pago's subscription messaging).
                        subscription_id: intent.subscription_id,
                    });
                    mercadopago::charge_request(client, key, intent, p, saved.as_ref())
                }
                (Api::PagarmeV5, PaymentParams::Pagarme(p)) => {
                    let order = pagarme_v5::OrderFor {
                        public_id: &intent.public_id,
                        amount: intent.amount,
                        description: intent.description.as_deref(),
                        subscription_id: intent.subscription_id,
                        authorize_only: intent.capture_method
                            == hookline_payments::intents::CaptureMethod::Manual,
                    };
                    pagarme_v5::order_request(client, key, &order, p)
                }
                (_, other) => Err(PostError::Refused(format!(
                    "intent {} carries {} parameters but provider {} is not that scheme",
                    intent.public_id,
                    other.scheme_name(),
                    client.provider()
                ))),
            },
        }
    }

    /// The charge of the intent `public_id`, found by hookline's own reference (`Ok(None)`: none).
    pub async fn find_charge(
        self,
        client: &ApiClient,
        public_id: &str,
    ) -> Result<Option<serde_json::Value>, String> {
        match self {
            Api::Stripe => stripe::find_charge(client, public_id).await,
            Api::MercadoPago => mercadopago::find_charge(client, public_id).await,
            Api::PagarmeV5 => pagarme_v5::find_order(client, public_id).await,
        }
    }

    /// What [`Api::find_refund`] needs to know of the intent's other refunds: the variant to fill (empty).
    pub fn refunds_needed(self) -> RefundsKnown {
        match self {
            Api::Stripe => RefundsKnown::Nothing,
            Api::MercadoPago => RefundsKnown::Linked(Vec::new()),
            Api::PagarmeV5 => RefundsKnown::Recorded(0),
        }
    }

    /// The refund `refund_public_id` of `amount` on `payment`, found by its own identity only (`Ok(None)`:
    /// not made; `Err`: the lookup failed or cannot tell).
    pub async fn find_refund(
        self,
        client: &ApiClient,
        payment: &str,
        refund_public_id: &str,
        amount: i64,
        known: &RefundsKnown,
    ) -> Result<Option<serde_json::Value>, String> {
        match (self, known) {
            (Api::Stripe, _) => stripe::find_refund(client, payment, refund_public_id).await,
            (Api::MercadoPago, RefundsKnown::Linked(linked)) => {
                mercadopago::find_refund(client, payment, refund_public_id, amount, linked).await
            }
            (Api::PagarmeV5, RefundsKnown::Recorded(recorded)) => {
                pagarme_v5::find_refund(client, payment, amount, *recorded).await
            }
            (api, other) => Err(format!(
                "the refund lookup of {api:?} needs {:?}, was given {other:?}",
                api.refunds_needed()
            )),
        }
    }

    /// How reconciliation reads this provider's own record: its Events list (Stripe: every event hookline lacks is
    /// stored as received), or else its payments listed page by page ([`Api::list_payments`]).
    pub fn reconciles_events(self) -> bool {
        self == Api::Stripe
    }

    /// One page of the provider's payments in `window`, from `cursor` (`None`: the first page).
    pub async fn list_payments(
        self,
        client: &ApiClient,
        window: Window,
        cursor: Option<&str>,
    ) -> anyhow::Result<PaymentsPage> {
        match self {
            Api::Stripe => anyhow::bail!("Stripe is reconciled from its Events list"),
            Api::MercadoPago => mercadopago::list_payments(client, window, cursor).await,
            Api::PagarmeV5 => pagarme_v5::list_payments(client, window, cursor).await,
        }
    }
}

/// An API read's error as reconciliation reports it: a transient one says to run again.
pub fn unavailable(e: HandleError) -> anyhow::Error {
    match e {
        HandleError::Transient(e) => e.context("the provider's API is unavailable; run again"),
        HandleError::Permanent(e) => e,
    }
}

/// One provider's API: base URL, token and a client with bounded timeouts.
#[derive(Clone)]
pub struct ApiClient {
    provider: String,
    base: url::Url,
    token: Option<SecretString>,
    /// [`hookline_core::http::client`], or why it could not be built (then every call fails transiently with
    /// that reason, never through a default client that would follow redirects).
    http: Result<reqwest::Client, Arc<str>>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("provider", &self.provider)
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// An answer as read: status, `Retry-After`, where a redirect pointed, and at most [`MAX_BODY_BYTES`] of body.
#[derive(Debug, Clone)]
pub struct Raw {
    /// HTTP status.
    pub status: u16,
    /// The `Retry-After` header (seconds or an HTTP date).
    pub retry_after: Option<Duration>,
    /// A redirect's target, without its query (for the reason; never followed).
    pub redirect_target: String,
    /// The body, cut at [`MAX_BODY_BYTES`].
    pub body: Vec<u8>,
    /// Whether the body was longer than [`MAX_BODY_BYTES`] (and cut).
    pub truncated: bool,
}

impl ApiClient {
    /// A client for `provider` at `base`. Payment APIs are slow under load: 5 s to connect, 30 s per request.
    pub fn new(provider: &str, base: url::Url, token: Option<SecretString>) -> ApiClient {
        ApiClient::with_timeouts(
            provider,
            base,
            token,
            Duration::from_secs(5),
            Duration::from_secs(30),
        )
    }

    /// [`ApiClient::new`] with other timeouts (the dispatcher's `[dispatcher] request_timeout_secs`).
    pub fn with_timeouts(
        provider: &str,
        base: url::Url,
        token: Option<SecretString>,
        connect: Duration,
        request: Duration,
    ) -> ApiClient {
        let http = hookline_core::http::client(connect, request).map_err(|e| {
            tracing::error!(provider = %provider, error = %format!("{e:#}"),
                "gateway: no HTTP client; every call fails");
            Arc::from(format!("{e:#}"))
        });
        ApiClient {
            provider: provider.to_owned(),
            base,
            token,
            http,
        }
    }

    /// The configured provider name.
    pub fn provider(&self) -> &str {
        &self.provider
    }

    fn url(&self, path: &str) -> Result<url::Url, String> {
        self.base
            .join(path)
            .map_err(|e| format!("cannot build the API URL: {e}"))
    }

    fn http(&self) -> Result<&reqwest::Client, String> {
        self.http
            .as_ref()
            .map_err(|e| format!("no HTTP client: {e}"))
    }

    /// A POST to `path` under the API base, with the token. `Err` only when the URL cannot be built or there is
    /// no HTTP client.
    pub(crate) fn post(&self, path: &str) -> Result<reqwest::RequestBuilder, PostError> {
        self.bearer(reqwest::Method::POST, path)
    }

    /// A PUT to `path` under the API base, with the token (Mercado Pago's payment updates), as [`ApiClient::post`].
    pub(crate) fn put(&self, path: &str) -> Result<reqwest::RequestBuilder, PostError> {
        self.bearer(reqwest::Method::PUT, path)
    }

    fn bearer(
        &self,
        method: reqwest::Method,
        path: &str,
    ) -> Result<reqwest::RequestBuilder, PostError> {
        let url = self.url(path).map_err(PostError::Refused)?;
        let http = self.http().map_err(PostError::NoClient)?;
        let mut req = http.request(method, url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token.expose_secret());
        }
        Ok(req)
    }

    /// A GET of `path` under the API base, with the token, to be sent with [`ApiClient::exchange`] and classified
    /// by the caller (the dispatcher's saved-card lookup; [`ApiClient::get_json`] classifies for the worker).
    /// `Err` only when the URL cannot be built or there is no HTTP client.
    pub(crate) fn get_request(&self, path: &str) -> Result<reqwest::RequestBuilder, PostError> {
        let url = self.url(path).map_err(PostError::Refused)?;
        let http = self.http().map_err(PostError::NoClient)?;
        let mut req = http.get(url);
        if let Some(token) = &self.token {
            req = req.bearer_auth(token.expose_secret());
        }
        Ok(req)
    }

    /// Sends `req` and reads the answer (bounded). `Err`: no answer, or the answer was cut.
    pub(crate) async fn exchange(req: reqwest::RequestBuilder) -> Result<Raw, String> {
        let mut res = req.send().await.map_err(|e| format!("sending: {e}"))?;
        let status = res.status().as_u16();
        let retry_after = res
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let redirect_target = if (300..=399).contains(&status) {
            hookline_core::http::redirect_target(res.headers())
        } else {
            String::new()
        };
        let mut body = Vec::new();
        let mut truncated = false;
        loop {
            match res.chunk().await {
                Ok(Some(chunk)) => {
                    if body.len() + chunk.len() > MAX_BODY_BYTES {
                        truncated = true;
                        break;
                    }
                    body.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return Err(format!("{status}, reading the answer: {e}")),
            }
        }
        Ok(Raw {
            status,
            retry_after,
            redirect_target,
            body,
            truncated,
        })
    }

    /// `GET {base}/{path}?{query}` and its JSON (list and search endpoints).
    pub async fn get_json(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<serde_json::Value, HandleError> {
        let mut url = self.url(path).map_err(HandleError::permanent)?;
        if !query.is_empty() {
            url.query_pairs_mut()
                .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        }
        let body = self.get(url.clone()).await?;
        serde_json::from_slice(&body)
            .map_err(|e| HandleError::permanent(format!("GET {url}: the answer is not JSON: {e}")))
    }

    /// `GET url`, classified as the worker needs it: a timeout, connection error, 5xx or 429 is transient; a
    /// redirect (never followed: it would carry the token wherever `Location` points), 404, refused credentials
    /// or another 4xx is permanent, with what to check.
    pub(crate) async fn get(&self, url: url::Url) -> Result<Vec<u8>, HandleError> {
        let req = self.http().map(|http| {
            let mut req = http.get(url.clone());
            if let Some(token) = &self.token {
                req = req.bearer_auth(token.expose_secret());
            }
            req
        });
        self.get_counted(req, url).await
    }

    /// Sends a GET built by the caller (`Err`: why it could not be built, which is transient), classified as
    /// [`ApiClient::get`] says, counted and timed in [`metric`].
    pub(crate) async fn get_counted(
        &self,
        req: Result<reqwest::RequestBuilder, String>,
        url: url::Url,
    ) -> Result<Vec<u8>, HandleError> {
        let started = Instant::now();
        let result = match req {
            Ok(req) => self.read(req, &url).await,
            Err(e) => Err((
                "transient",
                HandleError::Transient(anyhow::anyhow!("GET {url}: {e}")),
            )),
        };
        let outcome = match &result {
            Ok(_) => "ok",
            Err((kind, _)) => kind,
        };
        metrics::counter!(metric::REQUESTS, "provider" => self.provider.clone(), "outcome" => outcome.to_string())
            .increment(1);
        metrics::histogram!(metric::SECONDS, "provider" => self.provider.clone())
            .record(started.elapsed().as_secs_f64());
        result.map_err(|(_, e)| e)
    }

    async fn read(
        &self,
        req: reqwest::RequestBuilder,
        url: &url::Url,
    ) -> Result<Vec<u8>, (&'static str, HandleError)> {
        let transient = |e: String| ("transient", HandleError::Transient(anyhow::anyhow!(e)));
        let raw = ApiClient::exchange(req)
            .await
            .map_err(|e| transient(format!("GET {url}: {e}")))?;
        let status = raw.status;
        if (300..=399).contains(&status) {
            return Err((
                "redirect",
                HandleError::permanent(format!(
                    "GET {url}: {status}, the API redirected to {} — redirects are not followed; \
                     check providers.{}.api_base",
                    raw.redirect_target, self.provider
                )),
            ));
        }
        if raw.truncated {
            return Err((
                "error",
                HandleError::permanent(format!(
                    "GET {url}: the answer is larger than {MAX_BODY_BYTES} bytes"
                )),
            ));
        }
        if (200..=299).contains(&status) {
            return Ok(raw.body);
        }
        let excerpt = excerpt(&raw.body, 200);
        match status {
            429 | 500..=599 => Err(transient(format!(
                "GET {url}: {status} (will retry): {excerpt}"
            ))),
            404 => Err((
                "not_found",
                HandleError::permanent(format!(
                    "GET {url}: 404, the provider does not know this resource: {excerpt}"
                )),
            )),
            401 | 403 => Err((
                "refused",
                HandleError::permanent(format!(
                    "GET {url}: {status}, the provider refused our credentials \
                     (check providers.{}.api_token): {excerpt}",
                    self.provider
                )),
            )),
            _ => Err((
                "error",
                HandleError::permanent(format!("GET {url}: {status}: {excerpt}")),
            )),
        }
    }
}

/// Why a POST could not be built.
#[derive(Debug, Clone)]
pub(crate) enum PostError {
    /// The request cannot be sent as configured (a bad URL): an operator fixes it.
    Refused(String),
    /// No HTTP client (TLS setup failed): retried, nothing was sent.
    NoClient(String),
}

/// What the gateway's object says of a charge or a refund.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Charges: `processing`, `succeeded`, `failed` (canceled), `requires_action`; refunds: `succeeded`,
    /// `failed`, `requires_dispatch` (still pending at the gateway).
    Status {
        /// The status to record.
        status: &'static str,
        /// `requires_action`: what the customer must do.
        next_action: Option<serde_json::Value>,
    },
    /// The gateway declined it: an outcome with its code and message.
    Declined {
        /// The decline code (`card_declined`, `insufficient_funds`, `cc_rejected_other_reason`).
        code: String,
        /// The gateway's message.
        message: String,
    },
}

/// A gateway object read from an answer or a lookup: its id and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// The payment (charge) or refund id at the gateway.
    pub id: String,
    /// What it says.
    pub verdict: Verdict,
}

impl Object {
    /// A refund `id` whose `status` (the provider's spelling) is `succeeded` when it is `made`, `failed` when it
    /// is one of `refused`, and anything else still pending at the gateway (`requires_dispatch`).
    pub(crate) fn refund(
        id: String,
        status: Option<&str>,
        made: &str,
        refused: &[&str],
    ) -> Result<Object, String> {
        let Some(status) = status else {
            return Err("no \"status\"".into());
        };
        let status = if status == made {
            "succeeded"
        } else if refused.contains(&status) {
            "failed"
        } else {
            "requires_dispatch"
        };
        Ok(Object {
            id,
            verdict: Verdict::Status {
                status,
                next_action: None,
            },
        })
    }
}

/// A decline answered as an error (Stripe's 402 `card_error`), with the object's id when the answer named it.
#[derive(Debug, Clone, PartialEq)]
pub struct Decline {
    /// The gateway's object id, when the error carried it.
    pub id: Option<String>,
    /// The decline code.
    pub code: String,
    /// The gateway's message.
    pub message: String,
}

/// Longest `next_action` kept (the column allows 64 KiB; Stripe's are a few hundred bytes).
pub const MAX_NEXT_ACTION_BYTES: usize = 32 * 1024;

/// A gateway id, if it is one: non-empty, at most [`MAX_PROVIDER_ID_CHARS`], `[A-Za-z0-9_-]`.
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_PROVIDER_ID_CHARS
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// A string value of at most `max` characters without control characters (an external value made safe to
/// store and show).
pub(crate) fn bounded(value: &serde_json::Value, max: usize) -> Option<String> {
    value
        .as_str()
        .map(|s| s.chars().filter(|c| !c.is_control()).take(max).collect())
}

/// Up to `max` characters of `bytes`, lossily decoded, without control characters (safe in one log line and in
/// `last_error`).
pub fn excerpt(bytes: &[u8], max: usize) -> String {
    String::from_utf8_lossy(bytes)
        .chars()
        .filter(|c| !c.is_control())
        .take(max)
        .collect()
}

/// A `next_action` kept only when it is an object within [`MAX_NEXT_ACTION_BYTES`].
pub(crate) fn next_action(value: &serde_json::Value) -> Option<serde_json::Value> {
    if !value.is_object() {
        return None;
    }
    let size = serde_json::to_vec(value)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    (size <= MAX_NEXT_ACTION_BYTES).then(|| value.clone())
}
