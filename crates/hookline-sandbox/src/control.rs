//! The control and inspection API, over HTTP under `/_sandbox/…` (JSON) and in-process through
//! [`SandboxControl`]: count charges at the gateway, arm faults, shape webhook deliveries, inspect delivery
//! attempts, force outcomes, trigger chargebacks, reset. Unauthenticated: keep the sandbox on a loopback address.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::{web, HttpRequest, HttpResponse};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};

use crate::clock;
use crate::delivery::{Delivery, DeliveryBehaviour};
use crate::faults::{ArmedFault, FaultSpec};
use crate::limits::{MAX_COUNT, MAX_DELAY_MS, MAX_DUPLICATES};
use crate::mercadopago;
use crate::pagarme_v5;
use crate::report::{self, ChargesReport};
use crate::scripts::{self, PaymentMethodScript};
use crate::settings::Scheme;
use crate::state::{Outcome, RequestRecord, Shared, State};
use crate::stripe;
use crate::webhooks;

/// In-process access to the control state (what `/_sandbox/…` serves), for assertions in tests.
#[derive(Clone)]
pub struct SandboxControl {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for SandboxControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxControl")
            .field("seed", &self.shared.seed)
            .finish()
    }
}

impl SandboxControl {
    pub(crate) fn new(shared: Arc<Shared>) -> SandboxControl {
        SandboxControl { shared }
    }

    /// The seed ids and random choices derive from.
    pub fn seed(&self) -> u64 {
        self.shared.seed
    }

    /// Charges and payments at the gateway, in total, per provider and per idempotency key.
    pub fn charges(&self) -> ChargesReport {
        report::charges(&self.shared.lock())
    }

    /// Arms a fault; returns its id.
    pub fn arm_fault(&self, spec: FaultSpec) -> Result<u64, String> {
        let mut state = self.shared.lock();
        if let Some(name) = &spec.provider {
            if state.provider_index(name).is_none() {
                return Err(format!("no provider named '{name}'"));
            }
        }
        state.faults.arm(spec)
    }

    /// Armed faults and their hit counts.
    pub fn faults(&self) -> Vec<ArmedFault> {
        self.shared.lock().faults.list()
    }

    /// Disarms every fault.
    pub fn clear_faults(&self) {
        self.shared.lock().faults.clear();
    }

    /// How many passes the delivery loop has made over the queued deliveries (each takes what is due, unless
    /// paused). A pass that starts after a delivery was queued has seen it: a test that waits for two more passes
    /// than it read knows the loop had its chance to send what it queued.
    pub fn delivery_rounds(&self) -> u64 {
        self.shared
            .delivery_rounds
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// How deliveries are currently sent.
    pub fn delivery_behaviour(&self) -> DeliveryBehaviour {
        self.shared.lock().behaviour.clone()
    }

    /// Sets how deliveries are sent (applies to deliveries queued from now on; a pause applies at once).
    /// Refused (nothing changed) past [`MAX_DUPLICATES`], [`MAX_DELAY_MS`] or [`MAX_COUNT`].
    pub fn set_delivery_behaviour(&self, behaviour: DeliveryBehaviour) -> Result<(), String> {
        if behaviour.duplicates > MAX_DUPLICATES {
            return Err(format!(
                "duplicates must be at most {MAX_DUPLICATES}, not {}",
                behaviour.duplicates
            ));
        }
        for (name, ms) in [
            ("delay_ms", behaviour.delay_ms),
            ("shuffle_ms", behaviour.shuffle_ms),
        ] {
            if ms > MAX_DELAY_MS {
                return Err(format!("{name} must be at most {MAX_DELAY_MS}, not {ms}"));
            }
        }
        if behaviour.drop_next > MAX_COUNT {
            return Err(format!(
                "drop_next must be at most {MAX_COUNT}, not {}",
                behaviour.drop_next
            ));
        }
        for (name, rate) in [
            ("duplicate_rate", behaviour.duplicate_rate),
            ("drop_rate", behaviour.drop_rate),
        ] {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{name} must be between 0 and 1, not {rate}"));
            }
        }
        webhooks::set_behaviour(&mut self.shared.lock(), behaviour, Instant::now());
        self.shared.wake.notify_one();
        Ok(())
    }

    /// Every webhook delivery with its attempts, oldest first.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.shared.lock().deliveries.values().cloned().collect()
    }

    /// Queues a fresh copy of delivery `id` (same body and request id); returns the new delivery's id.
    pub fn redeliver(&self, id: u64) -> Option<u64> {
        let new = webhooks::redeliver(&mut self.shared.lock(), id, Instant::now());
        self.shared.wake.notify_one();
        new
    }

    /// Forces the outcome of the next `count` charges (Stripe) or payments (Mercado Pago) of `provider`.
    pub fn push_outcome(&self, provider: &str, outcome: Outcome, count: u32) -> Result<(), String> {
        let mut state = self.shared.lock();
        let p = state
            .provider_index(provider)
            .ok_or_else(|| format!("no provider named '{provider}'"))?;
        let valid = match state.providers[p].config.scheme {
            Scheme::Stripe => matches!(outcome.status.as_str(), "succeeded" | "declined"),
            Scheme::MercadoPago => matches!(
                outcome.status.as_str(),
                "approved" | "pending" | "in_process" | "rejected"
            ),
            Scheme::PagarmeV5 => {
                matches!(outcome.status.as_str(), "paid" | "failed" | "processing")
            }
        };
        let queued = state.providers[p].outcomes.len();
        if count as usize + queued > MAX_COUNT as usize {
            return Err(format!(
                "count: at most {MAX_COUNT} forced outcomes queued at once ({queued} already are), not {count} more"
            ));
        }
        if outcome.status.len() > 64
            || outcome
                .status_detail
                .as_ref()
                .is_some_and(|d| d.len() > 200)
        {
            return Err("status: at most 64 bytes, status_detail: at most 200".into());
        }
        if !valid {
            return Err(format!(
                "status '{}' is not an outcome of a new charge (Stripe: succeeded, declined; Mercado Pago: approved, pending, in_process, rejected; Pagar.me: paid, failed, processing)",
                outcome.status
            ));
        }
        for _ in 0..count.max(1) {
            state.providers[p].outcomes.push_back(outcome.clone());
        }
        Ok(())
    }

    /// A chargeback: Stripe opens a dispute on the payment intent's (or charge's) charge — closed at once when
    /// `status` is `won` or `lost`; Mercado Pago marks the payment `charged_back` (`status` is then its
    /// `status_detail`, default `settled`); Pagar.me marks the charge (`ch_…`, or its order `or_…`) `chargedback`
    /// (`opened`, the default, or `lost`, which also marks its last transaction `chargedback` for good;
    /// `charge.chargedback`) or returns an open one to `paid` (`won`; `charge.paid`). Returns the dispute, payment
    /// or charge as JSON.
    pub fn chargeback(
        &self,
        provider: &str,
        payment: &str,
        status: Option<&str>,
    ) -> Result<Value, String> {
        let mut state = self.shared.lock();
        let p = state
            .provider_index(provider)
            .ok_or_else(|| format!("no provider named '{provider}'"))?;
        let edge = &self.shared.edge_url;
        let result = match state.providers[p].config.scheme {
            Scheme::Stripe => stripe::ops::chargeback(&mut state, edge, p, payment, status),
            Scheme::MercadoPago => {
                mercadopago::ops::chargeback(&mut state, edge, p, payment, status)
            }
            Scheme::PagarmeV5 => {
                pagarme_v5::settle::chargeback(&mut state, edge, p, payment, status)
            }
        };
        drop(state);
        self.shared.wake.notify_one();
        result
    }

    /// Mercado Pago: moves payment `id` to `status` (e.g. a pending Pix paid: `approved`) and notifies. Pagar.me:
    /// moves a `pending` or `processing` charge (`ch_…`, or its order `or_…`) to `paid`, `failed` (`status_detail`:
    /// a decline, default `not_authorized`), `canceled`, `underpaid` or `overpaid` (Pix and boleto;
    /// `status_detail`: the paid amount in cents) and sends its webhooks. Returns the payment or charge.
    pub fn set_payment_status(
        &self,
        provider: &str,
        id: &str,
        status: &str,
        status_detail: Option<&str>,
    ) -> Result<Value, String> {
        let mut state = self.shared.lock();
        let p = state
            .provider_index(provider)
            .ok_or_else(|| format!("no provider named '{provider}'"))?;
        let edge = &self.shared.edge_url;
        let result = match state.providers[p].config.scheme {
            Scheme::MercadoPago => {
                mercadopago::ops::set_status(&mut state, edge, p, id, status, status_detail)
            }
            Scheme::PagarmeV5 => {
                pagarme_v5::settle::set_status(&mut state, edge, p, id, status, status_detail)
            }
            Scheme::Stripe => Err(format!(
                "'{provider}' is a Stripe provider: its payment intents change through the API"
            )),
        };
        drop(state);
        self.shared.wake.notify_one();
        result
    }

    /// Stripe: ends the 3-D Secure challenge of a `requires_action` payment intent — `succeed`: the payment is
    /// charged (`charge.succeeded`, `payment_intent.succeeded`); otherwise the intent returns to
    /// `requires_payment_method` with `last_payment_error.code = payment_intent_authentication_failure`
    /// (`payment_intent.payment_failed`). The webhooks are sent as for any other change. Returns the intent.
    pub fn complete_authentication(
        &self,
        provider: &str,
        intent: &str,
        succeed: bool,
    ) -> Result<Value, String> {
        let mut state = self.shared.lock();
        let p = state
            .provider_index(provider)
            .ok_or_else(|| format!("no provider named '{provider}'"))?;
        if state.providers[p].config.scheme != Scheme::Stripe {
            return Err(format!("'{provider}' is not a Stripe provider"));
        }
        let edge = &self.shared.edge_url;
        let result = stripe::confirm::complete_authentication(&mut state, edge, p, intent, succeed);
        drop(state);
        self.shared.wake.notify_one();
        result
    }

    /// A pending Pix is paid or expires unpaid. Mercado Pago: `approved`/`accredited` or `cancelled`/`expired`,
    /// then `payment.updated`. Pagar.me (a `ch_…` or its order's `or_…`): charge and order `paid`
    /// (`charge.paid`, `order.paid`) or `failed` (`charge.payment_failed`, `order.payment_failed`). Refused for
    /// anything but a pending Pix. Returns the payment or charge.
    pub fn settle_pix(&self, provider: &str, id: &str, paid: bool) -> Result<Value, String> {
        let mut state = self.shared.lock();
        let p = state
            .provider_index(provider)
            .ok_or_else(|| format!("no provider named '{provider}'"))?;
        let edge = &self.shared.edge_url;
        let result = match state.providers[p].config.scheme {
            Scheme::MercadoPago => mercadopago::ops::settle_pix(&mut state, edge, p, id, paid),
            Scheme::PagarmeV5 => pagarme_v5::settle::settle_pix(&mut state, edge, p, id, paid),
            Scheme::Stripe => Err(format!("'{provider}' is a Stripe provider: no Pix")),
        };
        drop(state);
        self.shared.wake.notify_one();
        result
    }

    /// Scripts the charges of saved payment method `id` of `provider` (Stripe: a `pm_…` attached to a customer;
    /// Mercado Pago and Pagar.me: a card saved to a customer): from now on, its Nth executed charge — an idempotent replay
    /// is not one — gets `outcomes[N-1]`, and after the list the card's own behaviour. An outcome is `succeed`
    /// or a decline of the provider: a Stripe decline code (`insufficient_funds`, `generic_decline`,
    /// `expired_card`, `authentication_required`, …; a 402 `card_error` with Stripe's code and message) or a
    /// Mercado Pago rejection `status_detail` (`cc_rejected_insufficient_amount`, `cc_rejected_other_reason`,
    /// `cc_rejected_card_disabled`, …; a `rejected` payment) or a Pagar.me decline (`not_authorized`,
    /// `insufficient_funds`, `expired_card`, `with_error`, …; a `failed` charge). A script outweighs a forced outcome
    /// ([`SandboxControl::push_outcome`]). Setting a script again replaces it and counts uses from 0; an empty
    /// list clears it. Refused: an unknown provider or method, an unknown outcome, more than
    /// [`scripts::MAX_SCRIPT_OUTCOMES`] outcomes.
    pub fn script_payment_method(
        &self,
        provider: &str,
        id: &str,
        outcomes: &[&str],
    ) -> Result<(), String> {
        let outcomes: Vec<String> = outcomes.iter().map(|o| (*o).to_owned()).collect();
        let mut state = self.shared.lock();
        let p = saved_method(&state, provider, id)?;
        scripts::validate(state.providers[p].config.scheme, &outcomes)?;
        state.providers[p].scripts.set(id, outcomes);
        Ok(())
    }

    /// The script of saved payment method `id` of `provider` and its uses since it was set
    /// ([`SandboxControl::script_payment_method`]).
    pub fn payment_method_script(
        &self,
        provider: &str,
        id: &str,
    ) -> Result<PaymentMethodScript, String> {
        let state = self.shared.lock();
        let p = saved_method(&state, provider, id)?;
        Ok(state.providers[p].scripts.get(id))
    }

    /// Moves the sandbox clock `by` ahead (at most 400 days ahead in total): idempotency keys of every provider
    /// expire on it (a key first used more than `idempotency_window` ago is forgotten), Pagar.me's objects and
    /// tokens are dated by it, and uncaptured authorizations expire on it (canceled at once, with their webhooks,
    /// when the move takes them past their lifetime). Webhook deliveries and retries keep real time.
    pub fn advance_clock(&self, by: Duration) -> Result<(), String> {
        let mut state = self.shared.lock();
        state.clock.advance(by)?;
        expire_authorizations(&mut state, &self.shared.edge_url);
        drop(state);
        self.shared.wake.notify_one();
        Ok(())
    }

    /// How far ahead of the real clock the sandbox clock is.
    pub fn clock_offset(&self) -> Duration {
        self.shared.lock().clock.offset()
    }

    /// The API requests seen (at most the last 10,000), oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.lock().requests.iter().cloned().collect()
    }

    /// Forgets every object, key, fault, delivery, outcome and behaviour (ids keep coming from the same
    /// generator: none repeats an earlier one).
    pub fn reset(&self) {
        self.shared.lock().reset();
    }
}

/// Every provider's authorizations left uncaptured past their lifetime on the sandbox clock are canceled (Stripe
/// `canceled`/`automatic`, Mercado Pago `cancelled`/`expired`, Pagar.me `canceled`), with their webhooks.
fn expire_authorizations(state: &mut State, edge_url: &url::Url) {
    for p in 0..state.providers.len() {
        match state.providers[p].config.scheme {
            Scheme::Stripe => stripe::ops::expire_authorizations(state, edge_url, p),
            Scheme::MercadoPago => mercadopago::ops::expire_authorizations(state, edge_url, p),
            Scheme::PagarmeV5 => pagarme_v5::settle::expire_authorizations(state, edge_url, p),
        }
    }
}

/// The index of provider `name`, if `id` is one of its saved payment methods (Stripe: a `pm_…` minted by
/// attaching; Mercado Pago: a saved card).
fn saved_method(state: &State, name: &str, id: &str) -> Result<usize, String> {
    let p = state
        .provider_index(name)
        .ok_or_else(|| format!("no provider named '{name}'"))?;
    let book = &state.providers[p];
    let saved = match book.config.scheme {
        Scheme::Stripe => book.stripe.payment_methods.contains_key(id),
        Scheme::MercadoPago => book.mp.cards.contains_key(id),
        Scheme::PagarmeV5 => book.pagarme.cards.contains_key(id),
    };
    if saved {
        Ok(p)
    } else {
        Err(format!(
            "'{id}' is not a saved payment method of '{name}' (Stripe: a pm_… attached to a customer; Mercado Pago, Pagar.me: a card saved to a customer)"
        ))
    }
}

pub(crate) fn configure(cfg: &mut web::ServiceConfig) {
    cfg.route("/health", web::get().to(health))
        .route("/charges", web::get().to(charges))
        .route("/requests", web::get().to(requests))
        .service(
            web::resource("/faults")
                .route(web::get().to(list_faults))
                .route(web::post().to(arm_fault))
                .route(web::delete().to(clear_faults)),
        )
        .service(
            web::resource("/delivery")
                .route(web::get().to(get_behaviour))
                .route(web::put().to(put_behaviour)),
        )
        .route("/deliveries", web::get().to(deliveries))
        .route("/deliveries/{id}/redeliver", web::post().to(redeliver))
        .route("/outcomes", web::post().to(outcomes))
        .route("/chargebacks", web::post().to(chargebacks))
        .route(
            "/payments/{provider}/{id}/status",
            web::post().to(payment_status),
        )
        .route(
            "/payment_intents/{provider}/{id}/authenticate",
            web::post().to(authenticate),
        )
        .route("/pix/{provider}/{id}", web::post().to(pix))
        .service(
            web::resource("/payment_methods/{provider}/{id}/script")
                .route(web::post().to(set_script))
                .route(web::get().to(get_script)),
        )
        .service(
            web::resource("/clock")
                .route(web::get().to(get_clock))
                .route(web::post().to(advance_clock)),
        )
        .route("/reset", web::post().to(reset));
}

fn control(shared: &web::Data<Shared>) -> SandboxControl {
    SandboxControl::new(shared.clone().into_inner())
}

fn bad_request(message: impl Into<String>) -> HttpResponse {
    HttpResponse::BadRequest().json(json!({"error": message.into()}))
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, String> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body).map_err(|e| format!("invalid JSON body: {e}"))
}

async fn health(shared: web::Data<Shared>) -> HttpResponse {
    let state = shared.lock();
    let providers: Vec<Value> = state
        .providers
        .iter()
        .map(|p| json!({"name": p.config.name, "scheme": p.config.scheme.as_str(), "auth": p.config.api_token.is_some()}))
        .collect();
    HttpResponse::Ok().json(json!({"ok": true, "seed": shared.seed, "edge_url": shared.edge_url.as_str(), "providers": providers}))
}

async fn charges(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok().json(control(&shared).charges())
}

async fn requests(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok().json(control(&shared).requests())
}

async fn list_faults(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok().json(control(&shared).faults())
}

async fn arm_fault(shared: web::Data<Shared>, body: web::Bytes) -> HttpResponse {
    let spec: FaultSpec = match parse(&body) {
        Ok(spec) => spec,
        Err(e) => return bad_request(e),
    };
    match control(&shared).arm_fault(spec) {
        Ok(id) => HttpResponse::Created().json(json!({"id": id})),
        Err(e) => bad_request(e),
    }
}

async fn clear_faults(shared: web::Data<Shared>) -> HttpResponse {
    control(&shared).clear_faults();
    HttpResponse::NoContent().finish()
}

async fn get_behaviour(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok().json(control(&shared).delivery_behaviour())
}

async fn put_behaviour(shared: web::Data<Shared>, body: web::Bytes) -> HttpResponse {
    let behaviour: DeliveryBehaviour = match parse(&body) {
        Ok(b) => b,
        Err(e) => return bad_request(e),
    };
    let control = control(&shared);
    match control.set_delivery_behaviour(behaviour) {
        Ok(()) => HttpResponse::Ok().json(control.delivery_behaviour()),
        Err(e) => bad_request(e),
    }
}

async fn deliveries(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    let filters: Vec<(String, String)> = form_urlencoded::parse(req.query_string().as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    for (name, _) in &filters {
        if !matches!(
            name.as_str(),
            "provider" | "event_id" | "resource_id" | "state" | "request_id"
        ) {
            return bad_request(format!(
                "unknown filter '{name}' (provider, event_id, resource_id, request_id, state)"
            ));
        }
    }
    let list: Vec<Delivery> = control(&shared)
        .deliveries()
        .into_iter()
        .filter(|d| {
            let fields = serde_json::to_value(d).unwrap_or(Value::Null);
            filters.iter().all(|(name, wanted)| {
                fields.get(name).and_then(Value::as_str) == Some(wanted.as_str())
            })
        })
        .collect();
    HttpResponse::Ok().json(list)
}

async fn redeliver(shared: web::Data<Shared>, id: web::Path<u64>) -> HttpResponse {
    match control(&shared).redeliver(id.into_inner()) {
        Some(new) => HttpResponse::Created().json(json!({"id": new})),
        None => HttpResponse::NotFound().json(json!({"error": "no such delivery"})),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OutcomeRequest {
    provider: String,
    status: String,
    #[serde(default)]
    status_detail: Option<String>,
    #[serde(default)]
    count: Option<u32>,
}

async fn outcomes(shared: web::Data<Shared>, body: web::Bytes) -> HttpResponse {
    let request: OutcomeRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let outcome = Outcome {
        status: request.status,
        status_detail: request.status_detail,
    };
    match control(&shared).push_outcome(&request.provider, outcome, request.count.unwrap_or(1)) {
        Ok(()) => HttpResponse::Created().json(json!({"ok": true})),
        Err(e) => bad_request(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ChargebackRequest {
    provider: String,
    payment: String,
    #[serde(default)]
    status: Option<String>,
}

async fn chargebacks(shared: web::Data<Shared>, body: web::Bytes) -> HttpResponse {
    let request: ChargebackRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    match control(&shared).chargeback(
        &request.provider,
        &request.payment,
        request.status.as_deref(),
    ) {
        Ok(object) => HttpResponse::Created().json(object),
        Err(e) => bad_request(e),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusRequest {
    status: String,
    #[serde(default)]
    status_detail: Option<String>,
}

async fn payment_status(
    shared: web::Data<Shared>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> HttpResponse {
    let request: StatusRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let (provider, id) = path.into_inner();
    match control(&shared).set_payment_status(
        &provider,
        &id,
        &request.status,
        request.status_detail.as_deref(),
    ) {
        Ok(object) => HttpResponse::Ok().json(object),
        Err(e) => bad_request(e),
    }
}

/// The body of a control action that ends one way or the other: `{"outcome": yes|no}`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TwoWayOutcome {
    outcome: String,
}

/// `true` for `yes`, `false` for `no`, else why not (answered 400).
fn outcome(body: &[u8], yes: &str, no: &str) -> Result<bool, String> {
    let request: TwoWayOutcome = parse(body)?;
    match request.outcome.as_str() {
        o if o == yes => Ok(true),
        o if o == no => Ok(false),
        _ => Err(format!("outcome must be '{yes}' or '{no}'")),
    }
}

/// `POST /_sandbox/payment_intents/{provider}/{id}/authenticate` `{"outcome": "succeed"|"fail"}`.
async fn authenticate(
    shared: web::Data<Shared>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> HttpResponse {
    let succeed = match outcome(&body, "succeed", "fail") {
        Ok(succeed) => succeed,
        Err(e) => return bad_request(e),
    };
    let (provider, id) = path.into_inner();
    match control(&shared).complete_authentication(&provider, &id, succeed) {
        Ok(object) => HttpResponse::Ok().json(object),
        Err(e) => bad_request(e),
    }
}

/// `POST /_sandbox/pix/{provider}/{id}` `{"outcome": "paid"|"expired"}`.
async fn pix(
    shared: web::Data<Shared>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> HttpResponse {
    let paid = match outcome(&body, "paid", "expired") {
        Ok(paid) => paid,
        Err(e) => return bad_request(e),
    };
    let (provider, id) = path.into_inner();
    match control(&shared).settle_pix(&provider, &id, paid) {
        Ok(object) => HttpResponse::Ok().json(object),
        Err(e) => bad_request(e),
    }
}

/// The body of `POST /_sandbox/payment_methods/{provider}/{id}/script`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptRequest {
    outcomes: Vec<String>,
}

/// `POST /_sandbox/payment_methods/{provider}/{id}/script` `{"outcomes": ["succeed", "insufficient_funds", …]}`:
/// 200 with the script (`{"uses": 0, "outcomes": […]}`), 400 with why not.
async fn set_script(
    shared: web::Data<Shared>,
    path: web::Path<(String, String)>,
    body: web::Bytes,
) -> HttpResponse {
    let request: ScriptRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    let (provider, id) = path.into_inner();
    let control = control(&shared);
    let outcomes: Vec<&str> = request.outcomes.iter().map(String::as_str).collect();
    match control
        .script_payment_method(&provider, &id, &outcomes)
        .and_then(|()| control.payment_method_script(&provider, &id))
    {
        Ok(script) => HttpResponse::Ok().json(script),
        Err(e) => bad_request(e),
    }
}

/// `GET /_sandbox/payment_methods/{provider}/{id}/script`: `{"uses", "outcomes"}`.
async fn get_script(shared: web::Data<Shared>, path: web::Path<(String, String)>) -> HttpResponse {
    let (provider, id) = path.into_inner();
    match control(&shared).payment_method_script(&provider, &id) {
        Ok(script) => HttpResponse::Ok().json(script),
        Err(e) => bad_request(e),
    }
}

/// `{"offset_secs", "now"}`: how far ahead the sandbox clock is, and its time.
fn clock_json(shared: &Shared) -> Value {
    let state = shared.lock();
    json!({
        "offset_secs": state.clock.offset().as_secs(),
        "now": clock::pagarme_date(state.clock.now()),
    })
}

async fn get_clock(shared: web::Data<Shared>) -> HttpResponse {
    HttpResponse::Ok().json(clock_json(&shared))
}

/// The body of `POST /_sandbox/clock`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ClockRequest {
    advance_secs: u64,
}

/// `POST /_sandbox/clock` `{"advance_secs": 86401}`: 200 `{"offset_secs", "now"}`, 400 past the bound.
async fn advance_clock(shared: web::Data<Shared>, body: web::Bytes) -> HttpResponse {
    let request: ClockRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(e),
    };
    match control(&shared).advance_clock(Duration::from_secs(request.advance_secs)) {
        Ok(()) => HttpResponse::Ok().json(clock_json(&shared)),
        Err(e) => bad_request(e),
    }
}

async fn reset(shared: web::Data<Shared>) -> HttpResponse {
    control(&shared).reset();
    HttpResponse::NoContent().finish()
}
