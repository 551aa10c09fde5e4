//! Shared by the sandbox's integration tests: starting a sandbox on a free port, and a real webhook receiver that
//! verifies every delivery with `hookline_signature::Verifier` (the edge's own verifier) and answers as scripted.
#![allow(dead_code)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use base64::Engine as _;
use hookline_sandbox::{RunningSandbox, Sandbox, SandboxProvider, SandboxSettings, Scheme, Url};
use serde_json::Value;

pub const STRIPE_SECRET: &[u8] = b"whsec_sandbox_test_secret";
pub const MP_SECRET: &[u8] = b"mp_sandbox_test_secret";
pub const STRIPE_TOKEN: &str = "sk_test_sandbox_stripe_token";
pub const MP_TOKEN: &str = "TEST-1234-sandbox-mp-token";
/// Pagar.me's secret key (its public key is `pk_test_sandbox_pagarme`).
pub const PG_KEY: &str = "sk_test_sandbox_pagarme";
pub const PG_PUBLIC_KEY: &str = "pk_test_sandbox_pagarme";
/// The `user:password` Pagar.me's webhooks carry as HTTP Basic.
pub const PG_WEBHOOK_AUTH: &str = "hookline:webhook-password";

pub fn stripe(name: &str, token: Option<&str>) -> SandboxProvider {
    SandboxProvider {
        name: name.into(),
        scheme: Scheme::Stripe,
        webhook_secret: STRIPE_SECRET.to_vec(),
        api_token: token.map(str::to_owned),
        webhook_basic_auth: None,
    }
}

pub fn mercadopago(name: &str, token: Option<&str>) -> SandboxProvider {
    SandboxProvider {
        name: name.into(),
        scheme: Scheme::MercadoPago,
        webhook_secret: MP_SECRET.to_vec(),
        api_token: token.map(str::to_owned),
        webhook_basic_auth: None,
    }
}

/// A Pagar.me v5 provider with the test secret key and webhook credentials.
pub fn pagarme(name: &str) -> SandboxProvider {
    SandboxProvider::new(name, Scheme::PagarmeV5, Vec::new())
        .with_api_token(PG_KEY)
        .with_webhook_basic_auth(PG_WEBHOOK_AUTH)
}

/// Settings for a test: a free port, both providers with tokens, webhooks to `edge` (by default a closed port:
/// deliveries fail quietly), fast retries.
pub fn settings(edge: Option<&Url>) -> SandboxSettings {
    let edge = edge
        .cloned()
        .unwrap_or_else(|| Url::parse("http://127.0.0.1:9").unwrap());
    let mut s = SandboxSettings::new(
        "127.0.0.1:0".parse().unwrap(),
        edge,
        vec![
            stripe("stripe", Some(STRIPE_TOKEN)),
            mercadopago("mercadopago", Some(MP_TOKEN)),
        ],
    );
    s.seed = 42;
    s.webhook_backoff = Duration::from_millis(50);
    s.webhook_max_backoff = Duration::from_millis(200);
    s.webhook_timeout = Duration::from_secs(2);
    s
}

pub async fn start(settings: SandboxSettings) -> RunningSandbox {
    Sandbox::start(settings).await.expect("sandbox starts")
}

/// A sandbox on `settings(None)` as changed by `change`.
pub async fn start_with(change: impl FnOnce(&mut SandboxSettings)) -> RunningSandbox {
    let mut s = settings(None);
    change(&mut s);
    start(s).await
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Polls `check` every 20 ms until it holds or `timeout` passes.
pub async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A POST to a provider's API with its `token`, and the idempotency key (if any) in the header `key_header`.
fn api_post(
    http: &reqwest::Client,
    sandbox: &RunningSandbox,
    path: &str,
    token: &str,
    key_header: &str,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = http.post(sandbox.url(path)).bearer_auth(token);
    match key {
        Some(key) => request.header(key_header, key),
        None => request,
    }
}

/// Sends a Stripe form with the test token and an optional idempotency key through `http`; the transport's
/// result, for tests in which the request itself fails.
pub async fn stripe_send(
    http: &reqwest::Client,
    sandbox: &RunningSandbox,
    path: &str,
    form: &[(&str, &str)],
    key: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    api_post(http, sandbox, path, STRIPE_TOKEN, "Idempotency-Key", key)
        .form(form)
        .send()
        .await
}

/// POSTs a Stripe form with the test token and an optional idempotency key.
pub async fn stripe_post(
    sandbox: &RunningSandbox,
    path: &str,
    form: &[(&str, &str)],
    key: Option<&str>,
) -> reqwest::Response {
    stripe_send(&client(), sandbox, path, form, key)
        .await
        .expect("request sent")
}

/// [`stripe_post`]'s status and JSON body.
pub async fn stripe_post_json(
    sandbox: &RunningSandbox,
    path: &str,
    form: &[(&str, &str)],
    key: Option<&str>,
) -> (u16, Value) {
    let response = stripe_post(sandbox, path, form, key).await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

/// GETs `path_and_query`, with `token` as the Bearer token when there is one.
pub async fn get_as(
    sandbox: &RunningSandbox,
    path_and_query: &str,
    token: Option<&str>,
) -> reqwest::Response {
    let request = client().get(sandbox.url(path_and_query));
    let request = match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    };
    request.send().await.expect("request sent")
}

/// The status and JSON body of a GET with `token`.
async fn get_json(sandbox: &RunningSandbox, path_and_query: &str, token: &str) -> (u16, Value) {
    let response = get_as(sandbox, path_and_query, Some(token)).await;
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

pub async fn stripe_get(sandbox: &RunningSandbox, path_and_query: &str) -> (u16, Value) {
    get_json(sandbox, path_and_query, STRIPE_TOKEN).await
}

/// The JSON answer of a control-API GET (`/_sandbox/…`).
pub async fn control_get(sandbox: &RunningSandbox, path: &str) -> Value {
    get_as(sandbox, path, None)
        .await
        .json()
        .await
        .expect("JSON body")
}

/// A control-API POST (`/_sandbox/…`) of `body`.
pub async fn control_post(sandbox: &RunningSandbox, path: &str, body: &Value) -> reqwest::Response {
    client()
        .post(sandbox.url(path))
        .json(body)
        .send()
        .await
        .expect("request sent")
}

/// A succeeded payment intent of `amount` cents; returns its id.
pub async fn succeeded_intent(sandbox: &RunningSandbox, amount: i64) -> String {
    let amount = amount.to_string();
    let response = stripe_post(
        sandbox,
        "/v1/payment_intents",
        &[
            ("amount", &amount),
            ("currency", "brl"),
            ("confirm", "true"),
            ("payment_method", "pm_card_visa"),
        ],
        None,
    )
    .await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], "succeeded");
    body["id"].as_str().unwrap().to_owned()
}

/// Sends a Mercado Pago JSON body with the test token and an optional `X-Idempotency-Key`; the transport's
/// result, for tests in which the request itself fails.
pub async fn mp_send(
    sandbox: &RunningSandbox,
    path: &str,
    body: &Value,
    key: Option<&str>,
) -> reqwest::Result<reqwest::Response> {
    api_post(&client(), sandbox, path, MP_TOKEN, "X-Idempotency-Key", key)
        .json(body)
        .send()
        .await
}

pub async fn mp_post(
    sandbox: &RunningSandbox,
    path: &str,
    body: &Value,
    key: Option<&str>,
) -> reqwest::Response {
    mp_send(sandbox, path, body, key)
        .await
        .expect("request sent")
}

/// POSTs `mp_payment(amount, reference)` to `/v1/payments`.
pub async fn mp_pay(
    sandbox: &RunningSandbox,
    amount: f64,
    reference: &str,
    key: Option<&str>,
) -> reqwest::Response {
    let token = mp_card_token(sandbox, "APRO").await;
    mp_post(
        sandbox,
        "/v1/payments",
        &mp_card_payment(amount, reference, &token),
        key,
    )
    .await
}

/// A card token of Mercado Pago's test Visa held by `holder` (`APRO`, `OTHE`, `FUND`, …: the outcome).
pub async fn mp_card_token(sandbox: &RunningSandbox, holder: &str) -> String {
    let response = mp_post(
        sandbox,
        "/v1/card_tokens",
        &serde_json::json!({
            "card_number": "4235647728025682",
            "expiration_month": 11,
            "expiration_year": 2030,
            "security_code": "123",
            "cardholder": {"name": holder, "identification": {"type": "CPF", "number": "12345678909"}},
        }),
        None,
    )
    .await;
    assert_eq!(response.status(), 201);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().unwrap().to_owned()
}

/// A Visa payment with card token `token`.
pub fn mp_card_payment(amount: f64, reference: &str, token: &str) -> Value {
    let mut body = mp_payment(amount, reference);
    body["payment_method_id"] = serde_json::json!("visa");
    body["token"] = serde_json::json!(token);
    body
}

pub async fn mp_get(sandbox: &RunningSandbox, path_and_query: &str) -> (u16, Value) {
    get_json(sandbox, path_and_query, MP_TOKEN).await
}

/// A payment from the payer's Mercado Pago balance (`account_money`: no card token), approved.
pub fn mp_payment(amount: f64, reference: &str) -> Value {
    serde_json::json!({
        "transaction_amount": amount,
        "description": "Sandbox order",
        "payment_method_id": "account_money",
        "installments": 1,
        "payer": {"email": "buyer@example.com"},
        "external_reference": reference,
    })
}

/// One delivery as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Received {
    pub provider: String,
    /// The verifier's dedupe key, or why verification failed.
    pub verified: Result<String, String>,
    /// Stripe: body `id`; Mercado Pago: the notification `id`; Pagar.me: the `hook_…` id.
    pub event_id: String,
    pub request_id: Option<String>,
    pub query: String,
    pub body: Value,
    /// What the receiver answered (0: it did not answer in time).
    pub answered: u16,
}

/// What the receiver does with the n-th attempt (1-based) of one delivery identity.
#[derive(Debug, Clone, Copy)]
pub enum Answer {
    Status(u16),
    /// Wait this long, then answer 200 (longer than the sandbox's webhook timeout: a timeout).
    Stall(Duration),
}

type Script = Arc<dyn Fn(u32) -> Answer + Send + Sync>;

/// A webhook receiver on a free port: `POST /webhooks/{name}`.
pub struct Receiver {
    pub url: Url,
    log: Arc<Mutex<Vec<Received>>>,
    handle: actix_web::dev::ServerHandle,
}

impl Receiver {
    /// `script(n)` decides the answer to the n-th attempt of each identity (Stripe event id, Mercado Pago request
    /// id); deliveries that fail verification get 400.
    pub async fn start(script: impl Fn(u32) -> Answer + Send + Sync + 'static) -> Receiver {
        let log: Arc<Mutex<Vec<Received>>> = Arc::default();
        let counts: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let script: Script = Arc::new(script);
        let state = (log.clone(), counts, script);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = HttpServer::new(move || {
            App::new()
                .app_data(web::Data::new(state.clone()))
                .route("/webhooks/{name}", web::post().to(receive))
        })
        .workers(2)
        .disable_signals()
        .shutdown_timeout(1)
        .listen(listener)
        .unwrap()
        .run();
        let handle = server.handle();
        tokio::spawn(server);
        Receiver {
            url: Url::parse(&format!("http://127.0.0.1:{port}")).unwrap(),
            log,
            handle,
        }
    }

    pub fn received(&self) -> Vec<Received> {
        self.log.lock().unwrap().clone()
    }

    pub async fn stop(self) {
        self.handle.stop(false).await;
    }
}

type ReceiverState = (
    Arc<Mutex<Vec<Received>>>,
    Arc<Mutex<HashMap<String, u32>>>,
    Script,
);

async fn receive(
    req: HttpRequest,
    name: web::Path<String>,
    body: web::Bytes,
    state: web::Data<ReceiverState>,
) -> HttpResponse {
    let (log, counts, script) = state.get_ref();
    let headers: Vec<(String, Vec<u8>)> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_owned(), v.as_bytes().to_vec()))
        .collect();
    let header_refs: Vec<(&str, &[u8])> = headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let verified = if req.headers().contains_key("stripe-signature")
        || req.headers().contains_key("x-signature")
    {
        let (scheme, secret) = if req.headers().contains_key("stripe-signature") {
            (hookline_signature::Scheme::Stripe, STRIPE_SECRET)
        } else {
            (hookline_signature::Scheme::MercadoPago, MP_SECRET)
        };
        let secrets: [&[u8]; 1] = [secret];
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        hookline_signature::Verifier {
            scheme,
            secrets: &secrets,
            tolerance_secs: None,
            now_unix: now,
        }
        .verify(&hookline_signature::Request {
            headers: &header_refs,
            query: req.query_string(),
            body: &body,
        })
        .map(|v| v.dedupe_key)
        .map_err(|e| e.to_string())
    } else {
        // Pagar.me signs nothing: the webhook's Basic credentials authenticate it (the hook id is its identity).
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(PG_WEBHOOK_AUTH)
        );
        let given = req
            .headers()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        if given == Some(expected.as_str()) {
            Ok(json["id"].as_str().unwrap_or_default().to_owned())
        } else {
            Err(format!("bad or missing Basic credentials: {given:?}"))
        }
    };
    let event_id = match &json["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let request_id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let identity = request_id.clone().unwrap_or_else(|| event_id.clone());
    let attempt = {
        let mut counts = counts.lock().unwrap();
        let n = counts.entry(identity).or_insert(0);
        *n += 1;
        *n
    };
    let answer = if verified.is_ok() {
        script(attempt)
    } else {
        Answer::Status(400)
    };
    let mut record = Received {
        provider: name.into_inner(),
        verified,
        event_id,
        request_id,
        query: req.query_string().to_owned(),
        body: json,
        answered: 0,
    };
    match answer {
        Answer::Status(status) => {
            record.answered = status;
            log.lock().unwrap().push(record);
            HttpResponse::build(actix_web::http::StatusCode::from_u16(status).unwrap()).finish()
        }
        Answer::Stall(pause) => {
            log.lock().unwrap().push(record);
            tokio::time::sleep(pause).await;
            HttpResponse::Ok().finish()
        }
    }
}

/// A Pagar.me request with the test secret key as HTTP Basic (`sk_test_…:`) and an optional `Idempotency-Key`.
pub fn pg_request(
    method: reqwest::Method,
    sandbox: &RunningSandbox,
    path: &str,
    key: Option<&str>,
) -> reqwest::RequestBuilder {
    let request = client()
        .request(method, sandbox.url(path))
        .basic_auth(PG_KEY, Some(""));
    match key {
        Some(key) => request.header("Idempotency-Key", key),
        None => request,
    }
}

/// The status and JSON body of a Pagar.me request.
pub async fn pg_send(request: reqwest::RequestBuilder) -> (u16, Value) {
    let response = request.send().await.expect("request sent");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON body"))
}

/// POSTs `body` to a Pagar.me path.
pub async fn pg_post(
    sandbox: &RunningSandbox,
    path: &str,
    body: &Value,
    key: Option<&str>,
) -> (u16, Value) {
    pg_send(pg_request(reqwest::Method::POST, sandbox, path, key).json(body)).await
}

/// GETs a Pagar.me path.
pub async fn pg_get(sandbox: &RunningSandbox, path_and_query: &str) -> (u16, Value) {
    pg_send(pg_request(
        reqwest::Method::GET,
        sandbox,
        path_and_query,
        None,
    ))
    .await
}

/// `DELETE /core/v5/charges/{id}` with an optional amount (a refund).
pub async fn pg_refund(
    sandbox: &RunningSandbox,
    charge: &str,
    amount: Option<i64>,
    key: Option<&str>,
) -> (u16, Value) {
    let request = pg_request(
        reqwest::Method::DELETE,
        sandbox,
        &format!("/core/v5/charges/{charge}"),
        key,
    );
    let request = match amount {
        Some(amount) => request.json(&serde_json::json!({ "amount": amount })),
        None => request,
    };
    pg_send(request).await
}

/// A card token (`POST /core/v5/tokens?appId=pk_…`) of card `number`.
pub async fn pg_token(sandbox: &RunningSandbox, number: &str) -> String {
    let response = client()
        .post(sandbox.url(&format!("/core/v5/tokens?appId={PG_PUBLIC_KEY}")))
        .json(&serde_json::json!({
            "type": "card",
            "card": {"number": number, "holder_name": "Tony Stark", "exp_month": 12, "exp_year": 2035, "cvv": "123"},
        }))
        .send()
        .await
        .expect("request sent");
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    body["id"].as_str().expect("a token id").to_owned()
}

/// An order of one item of `amount` cents with merchant code `code`, paid by `payment`.
pub fn pg_order(code: &str, amount: i64, payment: Value) -> Value {
    serde_json::json!({
        "code": code,
        "customer": {"name": "Tony Stark", "email": "tony@example.com", "document": "12345678909", "type": "individual"},
        "items": [{"amount": amount, "description": "Chaveiro do Tesseract", "quantity": 1, "code": "tesseract"}],
        "payments": [payment],
        "closed": true,
        "metadata": {"intent": code},
    })
}

/// A credit-card payment with token `token`.
pub fn pg_card_payment(token: &str) -> Value {
    serde_json::json!({
        "payment_method": "credit_card",
        "credit_card": {"card_token": token, "installments": 1, "statement_descriptor": "HOOKLINE", "operation_type": "auth_and_capture"},
    })
}

/// Creates an order paid with a fresh token of card `number` under `key`; the order.
pub async fn pg_card_order(
    sandbox: &RunningSandbox,
    code: &str,
    amount: i64,
    number: &str,
    key: Option<&str>,
) -> Value {
    let token = pg_token(sandbox, number).await;
    let (status, order) = pg_post(
        sandbox,
        "/core/v5/orders",
        &pg_order(code, amount, pg_card_payment(&token)),
        key,
    )
    .await;
    assert_eq!(status, 200, "{order}");
    order
}

/// A sandbox with the default providers and a Pagar.me one named `pagarme_v5`, webhooks to `edge`.
pub async fn start_pagarme(edge: Option<&Url>) -> RunningSandbox {
    let mut s = settings(edge);
    s.providers.push(pagarme("pagarme"));
    start(s).await
}
