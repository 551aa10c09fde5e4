//! The merchant API against the real PostgreSQL: authentication, validation, idempotency decided by the
//! database (the double click creates one intent), refunds never beyond the captured amount, and the two
//! listeners kept apart. Issue 25: clients see and refund only their own intents, idempotency belongs to the
//! client's name (removing, reordering or rotating keys changes nothing), NUL in any field is a 400, currencies
//! are the provider's ISO 4217 list, and a refund the gateway refused releases its reservation.

use std::time::Duration;

use futures::future::join_all;
use hookline_gateways::dispatch::DispatchSettings;
use hookline_sandbox::{
    FaultAction, FaultSpec, RunningSandbox, Sandbox, SandboxProvider, SandboxSettings, Scheme,
};
use hookline_tests::*;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// The client `shop`'s key.
pub(crate) const KEY_ONE: &str = "sk_hl_test_key_one";
/// The client `shop`'s second key (rotation: both valid).
pub(crate) const KEY_ONE_NEXT: &str = "sk_hl_test_key_one_next";
/// The client `other`'s key.
pub(crate) const KEY_TWO: &str = "sk_hl_test_key_two";

/// Two named clients: `shop` (two keys) and `other`.
pub(crate) fn clients_section() -> String {
    format!(
        "[api]\nlisten = \"127.0.0.1:0\"\n\
         [[api.clients]]\nname = \"shop\"\nkeys = [\"{KEY_ONE}\", \"{KEY_ONE_NEXT}\"]\n\
         [[api.clients]]\nname = \"other\"\nkeys = [\"{KEY_TWO}\"]\n"
    )
}

/// Starts an edge with `api_section` on the database `url`; returns (edge base, API base).
async fn start_edge(url: &str, api_section: &str, providers: &str) -> (String, String) {
    let tail = format!("[relay]\nembedded = false\n{providers}{api_section}");
    let config = parse_config(&test_config_toml(url, "", &tail));
    let app = hookline_edge::Application::build(config)
        .await
        .expect("build the edge");
    let port = app.port();
    let api_port = app.api_port().expect("the API listener is bound");
    tokio::spawn(app.run_until_stopped());
    (
        format!("http://127.0.0.1:{port}"),
        format!("http://127.0.0.1:{api_port}"),
    )
}

const PROVIDERS: &str = "[providers.st]\nscheme = \"stripe\"\nsecrets = [\"whsec_api_test\"]\napi_base = \"http://127.0.0.1:9\"\n\
     [providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"mp_api_test\"]\napi_base = \"http://127.0.0.1:9\"\n";

/// An edge with `[api]` on its own port and an `st` provider that can be charged (it has an `api_base`).
pub(crate) struct Api {
    /// The providers' listener.
    edge: String,
    /// The API listener.
    api: String,
    pub(crate) db: TestDb,
    client: reqwest::Client,
}

impl Api {
    pub(crate) async fn spawn() -> Api {
        Api::spawn_with(&clients_section()).await
    }

    pub(crate) async fn spawn_with(api_section: &str) -> Api {
        let db = TestDb::new().await;
        let (edge, api) = start_edge(&db.url, api_section, PROVIDERS).await;
        Api::on(db, edge, api)
    }

    /// The API listener's base URL (`http://127.0.0.1:PORT`).
    pub(crate) fn base(&self) -> &str {
        &self.api
    }

    fn on(db: TestDb, edge: String, api: String) -> Api {
        Api {
            edge,
            api,
            db,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("http client"),
        }
    }

    /// The same database behind an edge restarted with another `[api]` section.
    pub(crate) async fn restart(self, api_section: &str) -> Api {
        let (edge, api) = start_edge(&self.db.url, api_section, PROVIDERS).await;
        Api { edge, api, ..self }
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        auth: Option<&str>,
        key: Option<&str>,
        body: &str,
    ) -> Answer {
        let mut req = self
            .client
            .post(format!("{}{path}", self.api))
            .header("content-type", "application/json")
            .body(body.to_string());
        if let Some(auth) = auth {
            req = req.header("authorization", format!("Bearer {auth}"));
        }
        if let Some(key) = key {
            req = req.header("idempotency-key", key);
        }
        Answer::of(req.send().await.expect("request reaches the API")).await
    }

    pub(crate) async fn create(&self, key: &str, body: &Value) -> Answer {
        self.post(
            "/v1/payment_intents",
            Some(KEY_ONE),
            Some(key),
            &body.to_string(),
        )
        .await
    }

    async fn create_as(&self, auth: &str, key: &str, body: &Value) -> Answer {
        self.post(
            "/v1/payment_intents",
            Some(auth),
            Some(key),
            &body.to_string(),
        )
        .await
    }

    pub(crate) async fn get(&self, path: &str, auth: Option<&str>) -> Answer {
        let mut req = self.client.get(format!("{}{path}", self.api));
        if let Some(auth) = auth {
            req = req.header("authorization", format!("Bearer {auth}"));
        }
        Answer::of(req.send().await.expect("request reaches the API")).await
    }

    /// `DELETE {path}` on the API.
    pub(crate) async fn delete(&self, path: &str, auth: Option<&str>) -> Answer {
        let mut req = self.client.delete(format!("{}{path}", self.api));
        if let Some(auth) = auth {
            req = req.header("authorization", format!("Bearer {auth}"));
        }
        Answer::of(req.send().await.expect("request reaches the API")).await
    }

    async fn count(&self, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {table}"))
            .fetch_one(&self.db.pool)
            .await
            .expect("count")
    }
}

#[derive(Debug)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) replayed: bool,
    text: String,
}

impl Answer {
    async fn of(res: reqwest::Response) -> Answer {
        let status = res.status().as_u16();
        let replayed = res
            .headers()
            .get("idempotent-replayed")
            .is_some_and(|v| v == "true");
        let text = res.text().await.expect("body");
        Answer {
            status,
            replayed,
            text,
        }
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    pub(crate) fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

/// Stripe's test card: what the gateway needs to charge (`stripe.payment_method`).
fn card() -> Value {
    json!({"payment_method": "pm_card_visa"})
}

/// A complete Mercado Pago card payment object.
fn mp_card() -> Value {
    json!({"token": "ff8080814c11e237014c1ff593b57b4d", "payment_method_id": "visa", "installments": 1,
           "payer": {"email": "comprador@example.com.br"}})
}

pub(crate) fn order(amount: i64) -> Value {
    json!({"provider": "st", "amount": amount, "currency": "BRL", "customer": "cus_1", "description": "order 1",
           "stripe": card()})
}

#[tokio::test]
async fn requests_without_a_valid_key_are_refused() {
    let api = Api::spawn().await;
    let body = order(2500).to_string();
    for auth in [None, Some("sk_hl_wrong"), Some("")] {
        let a = api
            .post("/v1/payment_intents", auth, Some("k1"), &body)
            .await;
        assert_eq!(a.status, 401, "{a:?}");
        assert_eq!(a.json()["error"]["type"], "authentication_error", "{a:?}");
        assert!(a.json()["error"]["message"].is_string(), "{a:?}");
    }
    let a = api.get("/v1/payment_intents/pi_hl_x", None).await;
    assert_eq!(a.status, 401, "{a:?}");
    let a = api.get("/v1/nothing", Some("nope")).await;
    assert_eq!(a.status, 401, "{a:?}");
    assert_eq!(api.count("payment_intents").await, 0);
    assert_eq!(api.count("api_idempotency_keys").await, 0);
}

#[tokio::test]
async fn missing_key_bad_json_and_bad_fields_get_stable_codes() {
    let api = Api::spawn().await;
    let body = order(2500).to_string();
    let a = api
        .post("/v1/payment_intents", Some(KEY_ONE), None, &body)
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (400, "idempotency_key_missing"),
        "{a:?}"
    );
    let long_key = "k".repeat(256);
    for bad in [long_key.as_str(), "caf\u{e9}"] {
        let req = api
            .client
            .post(format!("{}/v1/payment_intents", api.api))
            .header("authorization", format!("Bearer {KEY_ONE}"))
            .header(
                "idempotency-key",
                reqwest::header::HeaderValue::from_bytes(bad.as_bytes()).unwrap(),
            )
            .body(body.clone());
        let a = Answer::of(req.send().await.unwrap()).await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (400, "idempotency_key_invalid"),
            "{a:?}"
        );
    }
    let a = api
        .post("/v1/payment_intents", Some(KEY_ONE), Some("j"), "{not json")
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (400, "invalid_json"),
        "{a:?}"
    );
    let a = api
        .post(
            "/v1/payment_intents",
            Some(KEY_ONE),
            Some("j"),
            &"x".repeat(70_000),
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (413, "payload_too_large"),
        "{a:?}"
    );

    let cases = [
        (
            json!({"provider": "st", "amount": 0, "currency": "brl"}),
            "amount_invalid",
            "amount",
        ),
        (
            json!({"provider": "st", "amount": 25.5, "currency": "brl"}),
            "amount_invalid",
            "amount",
        ),
        (
            json!({"provider": "st", "amount": "2500", "currency": "brl"}),
            "amount_invalid",
            "amount",
        ),
        (
            json!({"provider": "st", "amount": 1_000_000_000_000_001_i64, "currency": "brl"}),
            "amount_invalid",
            "amount",
        ),
        (
            json!({"provider": "st", "currency": "brl"}),
            "parameter_missing",
            "amount",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "order_reference": "o".repeat(201)}),
            "order_reference_invalid",
            "order_reference",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "order_reference": "a\nb"}),
            "order_reference_invalid",
            "order_reference",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "order_reference": " "}),
            "order_reference_invalid",
            "order_reference",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "confirm": "yes"}),
            "confirm_invalid",
            "confirm",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "stripe": {"payment_method": "tok_visa"}}),
            "parameter_invalid",
            "stripe.payment_method",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl",
                   "stripe": {"payment_method": "pm_card_visa", "return_url": "http://shop.example/back"}}),
            "parameter_invalid",
            "stripe.return_url",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "stripe": {"paymentMethod": "pm_card_visa"}}),
            "unknown_field",
            "stripe.paymentMethod",
        ),
        (
            json!({"provider": "mp", "amount": 1, "currency": "brl",
                   "mercadopago": {"token": "t", "payment_method_id": "visa", "installments": 25,
                                   "payer": {"email": "a@b.co"}}}),
            "parameter_invalid",
            "mercadopago.installments",
        ),
        (
            json!({"provider": "mp", "amount": 1, "currency": "brl",
                   "mercadopago": {"payment_method_id": "pix", "payer": {"email": "not-an-address"}}}),
            "parameter_invalid",
            "mercadopago.payer.email",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "br"}),
            "currency_invalid",
            "currency",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "b1l"}),
            "currency_invalid",
            "currency",
        ),
        (
            json!({"provider": "nope", "amount": 1, "currency": "brl"}),
            "provider_unknown",
            "provider",
        ),
        (
            json!({"provider": "github", "amount": 1, "currency": "brl"}),
            "provider_not_supported",
            "provider",
        ),
        // A stripe provider without api_base cannot be charged.
        (
            json!({"provider": "stripe", "amount": 1, "currency": "brl"}),
            "provider_not_supported",
            "provider",
        ),
        (
            json!({"amount": 1, "currency": "brl"}),
            "parameter_missing",
            "provider",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "customer": "c".repeat(201)}),
            "customer_invalid",
            "customer",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "description": "d".repeat(1001)}),
            "description_invalid",
            "description",
        ),
        (
            json!({"provider": "st", "amount": 1, "currency": "brl", "capture": true}),
            "unknown_field",
            "capture",
        ),
    ];
    // A missing field is 400 (issue 27: "a missing required field is a 400 naming the field"); a present but
    // invalid one stays 422.
    let status_of = |code: &str| {
        if code == "parameter_missing" {
            400
        } else {
            422
        }
    };
    for (i, (body, code, param)) in cases.iter().enumerate() {
        let a = api.create(&format!("bad-{i}"), body).await;
        assert_eq!(a.status, status_of(code), "{body}: {a:?}");
        assert_eq!(a.code(), *code, "{body}: {a:?}");
        assert_eq!(a.json()["error"]["param"], *param, "{body}: {a:?}");
        assert_eq!(a.json()["error"]["type"], "invalid_request_error", "{a:?}");
    }
    assert_eq!(api.count("payment_intents").await, 0);
    assert_eq!(api.count("api_idempotency_keys").await, 0);
}

/// Issue 27: what the gateway requires to charge is required by the API when the intent is confirmed (the
/// dispatcher's own rule, `PaymentParams::missing_for_confirm`): 400 `parameter_missing` naming the field;
/// the other scheme's object is 400 `provider_object_mismatch`. With `confirm: false` the method may come
/// later. Nothing is written by a refused request.
#[tokio::test]
async fn what_the_gateway_needs_is_required_when_confirming_and_named_when_missing() {
    let api = Api::spawn().await;
    let base = |provider: &str| json!({"provider": provider, "amount": 1000, "currency": "brl"});
    let with = |provider: &str, field: &str, object: Value| {
        let mut b = base(provider);
        b[field] = object;
        b
    };
    let cases = [
        (base("st"), "parameter_missing", "stripe.payment_method"),
        (
            with("st", "stripe", json!({"customer": "cus_1"})),
            "parameter_missing",
            "stripe.payment_method",
        ),
        (
            with(
                "st",
                "stripe",
                json!({"payment_method": "pm_card_visa", "off_session": true}),
            ),
            "parameter_missing",
            "stripe.customer",
        ),
        (
            base("mp"),
            "parameter_missing",
            "mercadopago.payment_method_id",
        ),
        (
            with(
                "mp",
                "mercadopago",
                json!({"payment_method_id": "visa", "payer": {"email": "a@b.co"}}),
            ),
            "parameter_missing",
            "mercadopago.token",
        ),
        (
            with(
                "mp",
                "mercadopago",
                json!({"token": "t1", "payment_method_id": "master"}),
            ),
            "parameter_missing",
            "mercadopago.payer.email",
        ),
        (
            with(
                "mp",
                "mercadopago",
                json!({"payment_method_id": "pix", "payer": {"email": "a@b.co",
                                              "identification": {"type": "CPF"}}}),
            ),
            "parameter_missing",
            "mercadopago.payer.identification.number",
        ),
        // A saved card (merchant-initiated) is its two ids, never beside a token.
        (
            with("mp", "mercadopago", json!({"card_id": "1562188766852"})),
            "parameter_missing",
            "mercadopago.customer_id",
        ),
        (
            with("st", "mercadopago", mp_card()),
            "provider_object_mismatch",
            "mercadopago",
        ),
        (
            with("mp", "stripe", card()),
            "provider_object_mismatch",
            "stripe",
        ),
    ];
    for (i, (body, code, param)) in cases.iter().enumerate() {
        let a = api.create(&format!("need-{i}"), body).await;
        assert_eq!((a.status, a.code().as_str()), (400, *code), "{body}: {a:?}");
        assert_eq!(a.json()["error"]["param"], *param, "{body}: {a:?}");
    }
    // Present but contradictory: a token beside a saved card (422, as every invalid value).
    let both = with(
        "mp",
        "mercadopago",
        json!({"card_id": "1562188766852", "customer_id": "123-abc", "token": "t1"}),
    );
    let a = api.create("need-both", &both).await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (422, "parameter_invalid"),
        "{a:?}"
    );
    assert_eq!(a.json()["error"]["param"], "mercadopago.token", "{a:?}");
    assert_eq!(api.count("payment_intents").await, 0);
    assert_eq!(api.count("outbound_requests").await, 0);

    // Pix needs no card token; confirm=false needs nothing yet and sends nothing.
    let pix = with(
        "mp",
        "mercadopago",
        json!({"payment_method_id": "pix", "payer": {"email": "a@b.co",
               "identification": {"type": "CPF", "number": "19100000000"}}}),
    );
    let a = api.create("pix", &pix).await;
    assert_eq!(
        (a.status, a.json()["status"].as_str()),
        (201, Some("requires_dispatch")),
        "{a:?}"
    );
    let mut later = base("st");
    later["confirm"] = json!(false);
    let a = api.create("later", &later).await;
    assert_eq!(
        (a.status, a.json()["status"].as_str()),
        (201, Some("requires_confirmation")),
        "{a:?}"
    );
    assert_eq!(api.count("payment_intents").await, 2);
    assert_eq!(
        api.count("outbound_requests").await,
        1,
        "only the confirmed one is queued"
    );
}

/// The intent's answer shows the new fields (`order_reference`, `next_action`, `failure_code`,
/// `failure_message`) and never the payment parameters (a card token is a credential), which are stored as
/// sent for the dispatcher.
#[tokio::test]
async fn the_intent_shows_its_order_and_outcome_fields_never_its_card_token() {
    let api = Api::spawn().await;
    let token = "ff8080814c11e237014c1ff593b57b4d";
    let body = json!({"provider": "mp", "amount": 4250, "currency": "brl", "order_reference": "pedido-77",
                      "mercadopago": {"token": token, "payment_method_id": "master", "installments": 3,
                                      "issuer_id": "24",
                                      "payer": {"email": "comprador@example.com.br",
                                                "identification": {"type": "CPF", "number": "19100000000"}}}});
    let a = api.create("shown", &body).await;
    assert_eq!(a.status, 201, "{a:?}");
    let intent = a.json();
    assert_eq!(intent["order_reference"], "pedido-77");
    assert_eq!(intent["status"], "requires_dispatch");
    for field in ["next_action", "failure_code", "failure_message"] {
        assert!(
            intent.get(field).is_some_and(Value::is_null),
            "{field}: {intent}"
        );
    }
    assert!(intent.get("payment_params").is_none(), "{intent}");
    assert!(!a.text.contains(token), "{a:?}");
    let id = intent["id"].as_str().unwrap();
    let got = api
        .get(&format!("/v1/payment_intents/{id}"), Some(KEY_ONE))
        .await;
    assert_eq!(got.json(), intent);
    assert!(!got.text.contains(token));
    let stored: Value =
        sqlx::query_scalar("SELECT payment_params FROM payment_intents WHERE public_id = $1")
            .bind(id)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(stored, json!({"mercadopago": body["mercadopago"]}));
    // Nor is the token in the stored answer of the idempotency key.
    let stored_answers: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM api_idempotency_keys WHERE position($1::bytea IN response_body) > 0",
    )
    .bind(token.as_bytes())
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(stored_answers, 0);
}

#[tokio::test]
async fn the_double_click_creates_one_intent_and_every_click_gets_the_same_answer() {
    let api = Api::spawn().await;
    let body = order(2500);
    let answers = join_all((0..20).map(|_| api.create("order-1-click", &body))).await;
    for a in &answers {
        assert_eq!(a.status, 201, "{a:?}");
        assert_eq!(a.text, answers[0].text, "every click gets the same body");
    }
    assert_eq!(
        answers.iter().filter(|a| !a.replayed).count(),
        1,
        "{answers:?}"
    );
    assert_eq!(api.count("payment_intents").await, 1);
    assert_eq!(api.count("outbound_requests").await, 1);
    let intent = answers[0].json();
    let id = intent["id"].as_str().unwrap();
    assert!(id.starts_with("pi_hl_"), "{intent}");
    assert_eq!(intent["status"], "requires_dispatch");
    assert_eq!(intent["amount"], 2500);
    assert_eq!(intent["currency"], "brl");
    assert_eq!(intent["provider"], "st");
    assert_eq!(intent["customer"], "cus_1");
    assert!(intent["provider_payment_id"].is_null());
    let (kind, key): (String, String) =
        sqlx::query_as("SELECT kind, idempotency_key FROM outbound_requests")
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(kind, "charge");
    assert!(key.starts_with("hookline-intent-"), "{key}");

    // The stored client is the client's name, never the secret nor the key's position.
    let clients: Vec<String> = sqlx::query_scalar(
        "SELECT client FROM api_idempotency_keys UNION ALL SELECT client FROM payment_intents",
    )
    .fetch_all(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(clients, vec!["shop".to_string(), "shop".to_string()]);

    // GET answers the same intent, also with the client's other key.
    let got = api
        .get(&format!("/v1/payment_intents/{id}"), Some(KEY_ONE_NEXT))
        .await;
    assert_eq!(got.status, 200, "{got:?}");
    assert_eq!(got.json(), intent);
    let missing = api
        .get("/v1/payment_intents/pi_hl_nope", Some(KEY_ONE))
        .await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "intent_not_found"),
        "{missing:?}"
    );
}

#[tokio::test]
async fn a_key_replays_its_request_refuses_another_and_new_keys_create_new_intents() {
    let api = Api::spawn().await;
    let first = api.create("order-2", &order(1000)).await;
    assert_eq!((first.status, first.replayed), (201, false), "{first:?}");

    let retry = api.create("order-2", &order(1000)).await;
    assert_eq!((retry.status, retry.replayed), (201, true), "{retry:?}");
    assert_eq!(retry.text, first.text);

    let other_body = api.create("order-2", &order(1001)).await;
    assert_eq!(other_body.status, 422, "{other_body:?}");
    assert_eq!(other_body.code(), "idempotency_key_reused");
    assert!(!other_body.replayed);

    let new_key = api.create("order-3", &order(1000)).await;
    assert_eq!(
        (new_key.status, new_key.replayed),
        (201, false),
        "{new_key:?}"
    );
    assert_ne!(new_key.json()["id"], first.json()["id"]);

    // Keys belong to their API key: the same Idempotency-Key under another API key is another request.
    let other_client = api
        .post(
            "/v1/payment_intents",
            Some(KEY_TWO),
            Some("order-2"),
            &order(1000).to_string(),
        )
        .await;
    assert_eq!(
        (other_client.status, other_client.replayed),
        (201, false),
        "{other_client:?}"
    );

    let mp = api
        .create(
            "order-mp",
            &json!({"provider": "mp", "amount": 5000, "currency": "brl", "mercadopago": mp_card()}),
        )
        .await;
    assert_eq!(mp.status, 201, "{mp:?}");
    assert!(mp.json()["customer"].is_null());
    assert_eq!(api.count("payment_intents").await, 4);
    assert_eq!(api.count("outbound_requests").await, 4);

    // Expired keys are pruned, and an expired key not pruned yet is free again.
    sqlx::query("UPDATE api_idempotency_keys SET created_at = now() - interval '2 days' WHERE key = 'order-3'")
        .execute(&api.db.pool)
        .await
        .unwrap();
    let again = api.create("order-3", &order(1000)).await;
    assert_eq!((again.status, again.replayed), (201, false), "{again:?}");
    assert_ne!(again.json()["id"], new_key.json()["id"]);
    sqlx::query("UPDATE api_idempotency_keys SET created_at = now() - interval '2 days' WHERE key = 'order-mp'")
        .execute(&api.db.pool)
        .await
        .unwrap();
    let pruned = hookline_payments::intents::prune_idempotency_keys(
        &api.db.pool,
        std::time::Duration::from_secs(86_400),
        1,
    )
    .await
    .unwrap();
    assert_eq!(pruned, 1);
    assert_eq!(api.count("api_idempotency_keys").await, 3);
}

#[tokio::test]
async fn refunds_never_exceed_what_was_captured_even_concurrently() {
    let api = Api::spawn().await;
    let intent = api.create("order-r", &order(2500)).await.json();
    let id = intent["id"].as_str().unwrap().to_string();
    let path = format!("/v1/payment_intents/{id}/refunds");
    let refund = |key: String, amount: i64| {
        let path = path.clone();
        let api = &api;
        async move {
            api.post(
                &path,
                Some(KEY_ONE),
                Some(&key),
                &json!({"amount": amount, "reason": "customer asked"}).to_string(),
            )
            .await
        }
    };

    let early = refund("early".into(), 100).await;
    assert_eq!(
        (early.status, early.code().as_str()),
        (409, "intent_not_captured"),
        "{early:?}"
    );
    let a = api
        .post(
            "/v1/payment_intents/pi_hl_nope/refunds",
            Some(KEY_ONE),
            Some("x"),
            r#"{"amount": 1}"#,
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (404, "intent_not_found"),
        "{a:?}"
    );
    let a = api
        .post(&path, Some(KEY_ONE), None, r#"{"amount": 1}"#)
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (400, "idempotency_key_missing"),
        "{a:?}"
    );

    sqlx::query("UPDATE payment_intents SET status = 'succeeded' WHERE public_id = $1")
        .bind(&id)
        .execute(&api.db.pool)
        .await
        .unwrap();

    let over = refund("over".into(), 2501).await;
    assert_eq!(
        (over.status, over.code().as_str()),
        (422, "refund_above_captured"),
        "{over:?}"
    );
    let bad = refund("bad".into(), 0).await;
    assert_eq!(
        (bad.status, bad.code().as_str()),
        (422, "amount_invalid"),
        "{bad:?}"
    );

    // Ten refunds of 300 at once on 2500: at most eight fit.
    let answers = join_all((0..10).map(|i| refund(format!("r-{i}"), 300))).await;
    let mut accepted = 0;
    for a in &answers {
        match a.status {
            201 => {
                let r = a.json();
                assert!(r["id"].as_str().unwrap().starts_with("re_hl_"), "{r}");
                assert_eq!(r["intent"], id.as_str());
                assert_eq!(r["amount"], 300);
                assert_eq!(r["status"], "requires_dispatch");
                accepted += 300;
            }
            422 => assert_eq!(a.code(), "refund_above_captured", "{a:?}"),
            _ => panic!("unexpected answer {a:?}"),
        }
    }
    assert!(accepted <= 2500, "accepted {accepted}");
    assert_eq!(accepted, 2400, "{answers:?}");
    let (refunded, rows): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT refunded FROM payment_intents), (SELECT coalesce(sum(amount), 0)::bigint FROM outbound_refunds)",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!((refunded, rows), (2400, 2400));
    assert_eq!(api.count("outbound_requests").await, 1 + 8);

    // A refund's retry is a replay; the rest still fits once.
    let last = refund("last".into(), 100).await;
    assert_eq!(last.status, 201, "{last:?}");
    let replay = refund("last".into(), 100).await;
    assert_eq!((replay.status, replay.replayed), (201, true), "{replay:?}");
    assert_eq!(replay.text, last.text);
    let none_left = refund("none-left".into(), 1).await;
    assert_eq!(none_left.status, 422, "{none_left:?}");
    let got = api
        .get(&format!("/v1/payment_intents/{id}"), Some(KEY_ONE))
        .await;
    assert_eq!(got.json()["refunded"], 2500);
}

#[tokio::test]
async fn each_listener_serves_only_its_own_routes() {
    let api = Api::spawn().await;
    let on_edge = api
        .client
        .post(format!("{}/v1/payment_intents", api.edge))
        .header("authorization", format!("Bearer {KEY_ONE}"))
        .header("idempotency-key", "k")
        .body(order(2500).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(on_edge.status().as_u16(), 404);
    let body = stripe_event("evt_api_1", "pi_api_1", 100);
    let on_api = api
        .client
        .post(format!("{}/webhooks/stripe", api.api))
        .header("authorization", format!("Bearer {KEY_ONE}"))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(on_api.status().as_u16(), 404);
    // The edge still takes webhooks.
    let mut req = api
        .client
        .post(format!("{}/webhooks/stripe", api.edge))
        .body(body.clone());
    for (k, v) in stripe_headers(secrets::STRIPE, now(), &body) {
        req = req.header(k, v);
    }
    assert_eq!(req.send().await.unwrap().status().as_u16(), 200);
    assert_eq!(api.db.event_count().await, 1);
    assert_eq!(api.count("payment_intents").await, 0);
}

/// Marks an intent captured, as the dispatcher and the provider's webhook would.
async fn capture(api: &Api, public_id: &str) {
    sqlx::query("UPDATE payment_intents SET status = 'succeeded' WHERE public_id = $1")
        .bind(public_id)
        .execute(&api.db.pool)
        .await
        .unwrap();
}

/// An intent of hookline's own (as billing or the CLI creates it): no API client's.
async fn own_intent(api: &Api) -> hookline_payments::intents::Intent {
    let mut tx = api.db.pool.begin().await.unwrap();
    let internal = hookline_payments::intents::create_intent(
        &mut tx,
        &hookline_payments::intents::NewIntent {
            provider: "st",
            amount: 900,
            currency: "brl",
            customer: Some("billing"),
            description: None,
            order_reference: None,
            payment_params: None,
            confirm: true,
            cycle: None,
            capture_method: Default::default(),
        },
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    internal
}

async fn post_as(api: &Api, auth: &str, path: &str, key: &str, body: &Value) -> Answer {
    api.post(path, Some(auth), Some(key), &body.to_string())
        .await
}

/// Issue 25, finding 3: an intent created with key A was read (200, A's customer and amount) and refunded (201)
/// with key B. Now another client's intent does not exist for it: 404 `intent_not_found` on GET and on refund
/// (not 403: nothing confirms the id), nothing is reserved or queued; hookline's own intents (billing, CLI) are
/// no API client's.
#[tokio::test]
async fn a_client_never_reads_nor_refunds_another_clients_intent() {
    let api = Api::spawn().await;
    let created = api.create("mine", &order(2500)).await;
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["id"].as_str().unwrap().to_string();
    capture(&api, &id).await;
    let internal = own_intent(&api).await;
    capture(&api, &internal.public_id).await;

    for (target, auths) in [
        (id.as_str(), vec![KEY_TWO]),
        (internal.public_id.as_str(), vec![KEY_ONE, KEY_TWO]),
    ] {
        for auth in auths {
            let got = api
                .get(&format!("/v1/payment_intents/{target}"), Some(auth))
                .await;
            assert_eq!(
                (got.status, got.code().as_str()),
                (404, "intent_not_found"),
                "{got:?}"
            );
            assert!(
                !got.text.contains("cus_1") && !got.text.contains("2500"),
                "{got:?}"
            );
            let refund = post_as(
                &api,
                auth,
                &format!("/v1/payment_intents/{target}/refunds"),
                &format!("steal-{target}-{auth}"),
                &json!({"amount": 100}),
            )
            .await;
            assert_eq!(
                (refund.status, refund.code().as_str()),
                (404, "intent_not_found"),
                "{refund:?}"
            );
        }
    }
    assert_eq!(api.count("outbound_refunds").await, 0);
    let refunded: i64 = sqlx::query_scalar("SELECT sum(refunded)::bigint FROM payment_intents")
        .fetch_one(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(refunded, 0);
    // The owner, with either of its keys, still reads and refunds it.
    let own = api
        .get(&format!("/v1/payment_intents/{id}"), Some(KEY_ONE_NEXT))
        .await;
    assert_eq!(own.status, 200, "{own:?}");
    let refund = post_as(
        &api,
        KEY_ONE_NEXT,
        &format!("/v1/payment_intents/{id}/refunds"),
        "own-refund",
        &json!({"amount": 100}),
    )
    .await;
    assert_eq!(refund.status, 201, "{refund:?}");
}

/// Issue 25, finding 4: with keys [A, B], A removed and the edge restarted, B retrying `kb` created a SECOND
/// intent and B sending `ka` got A's stored answer; rotating a key gave two intents for one Idempotency-Key.
/// Now idempotency belongs to the client's name: the legacy list is one client (`default`), and with named
/// clients removing, reordering or rotating keys never changes which stored answer a key returns.
#[tokio::test]
async fn idempotency_survives_removing_reordering_and_rotating_keys() {
    const A: &str = "sk_hl_legacy_a";
    const B: &str = "sk_hl_legacy_b";
    let legacy = |keys: &str| format!("[api]\nlisten = \"127.0.0.1:0\"\nkeys = [{keys}]\n");
    let api = Api::spawn_with(&legacy(&format!("\"{A}\", \"{B}\""))).await;
    let path = "/v1/payment_intents";
    let ka = post_as(&api, A, path, "ka", &order(1000)).await;
    let kb = post_as(&api, B, path, "kb", &order(2000)).await;
    assert_eq!((ka.status, kb.status), (201, 201), "{ka:?} {kb:?}");

    // A removed, the edge restarted: B's retry replays B's own answer, no second intent.
    let api = api.restart(&legacy(&format!("\"{B}\""))).await;
    let retry = post_as(&api, B, path, "kb", &order(2000)).await;
    assert_eq!((retry.status, retry.replayed), (201, true), "{retry:?}");
    assert_eq!(retry.json()["id"], kb.json()["id"]);
    assert_eq!(api.count("payment_intents").await, 2);

    // Named clients: shop [A1], other [B1]; then shop's key rotated (A1 + A2, then A2 alone) and the list
    // reordered, other's key removed and back.
    let named = |shop: &str, other: &str, reversed: bool| {
        let mut entries = vec![("shop", shop), ("other", other)];
        if reversed {
            entries.reverse();
        }
        let mut s = "[api]\nlisten = \"127.0.0.1:0\"\n".to_string();
        for (name, keys) in entries.into_iter().filter(|(_, k)| !k.is_empty()) {
            s += &format!("[[api.clients]]\nname = \"{name}\"\nkeys = [{keys}]\n");
        }
        s
    };
    let mut api = api.restart(&named("\"sk_A1\"", "\"sk_B1\"", false)).await;
    let first = post_as(&api, "sk_A1", path, "order-9", &order(900)).await;
    let theirs = post_as(&api, "sk_B1", path, "order-b", &order(800)).await;
    assert_eq!(
        (first.status, theirs.status),
        (201, 201),
        "{first:?} {theirs:?}"
    );
    for (shop, other, reversed) in [
        ("\"sk_A1\", \"sk_A2\"", "\"sk_B1\"", true),
        ("\"sk_A2\"", "", false),
        ("\"sk_A2\"", "\"sk_B1\"", true),
    ] {
        api = api.restart(&named(shop, other, reversed)).await;
        let again = post_as(&api, "sk_A2", path, "order-9", &order(900)).await;
        assert_eq!(
            (again.status, again.replayed),
            (201, true),
            "{shop} / {other}: {again:?}"
        );
        assert_eq!(again.json()["id"], first.json()["id"]);
        if !other.is_empty() {
            let b = post_as(&api, "sk_B1", path, "order-b", &order(800)).await;
            assert_eq!((b.status, b.replayed), (201, true), "{b:?}");
            assert_eq!(b.json()["id"], theirs.json()["id"]);
        }
        // Another client's Idempotency-Key is not this client's: never its stored answer.
        let cross = post_as(&api, "sk_A2", path, "order-b", &order(800)).await;
        assert_eq!(cross.status, 201, "{cross:?}");
        assert_ne!(cross.json()["id"], theirs.json()["id"]);
    }
    // order-9 once, order-b once per client: 2 legacy + 2 + shop's own order-b.
    assert_eq!(api.count("payment_intents").await, 5);
}

/// Issue 25, finding 8 (API side): `GET /v1/payment_intents/pi_hl_%00x` and `POST …/pi_%00/refunds` answered
/// 500 (`invalid byte sequence for encoding "UTF8": 0x00`). Every route × every field with a NUL: 400 with a
/// stable code naming the field, never 500, nothing written.
#[tokio::test]
async fn nul_in_any_path_id_or_json_field_is_a_400_never_a_500() {
    let api = Api::spawn().await;
    let created = api.create("base", &order(2500)).await;
    let id = created.json()["id"].as_str().unwrap().to_string();
    capture(&api, &id).await;
    let create = "/v1/payment_intents";
    let refunds = format!("/v1/payment_intents/{id}/refunds");
    let base_intent = json!({"provider": "st", "amount": 100, "currency": "brl", "customer": "c", "description": "d"});
    let mut cases: Vec<(String, &str, Option<Value>, &str)> = Vec::new();
    // (path, method, body, param)
    for path in [
        "/v1/payment_intents/pi_hl_%00x",
        "/v1/payment_intents/%00",
        "/v1/payment_intents/pi_hl_%01x",
    ] {
        cases.push((path.to_string(), "GET", None, "id"));
    }
    for path in [
        "/v1/payment_intents/pi_%00/refunds",
        "/v1/payment_intents/pi_hl_%0Ax/refunds",
    ] {
        cases.push((path.to_string(), "POST", Some(json!({"amount": 1})), "id"));
    }
    for field in ["provider", "currency", "customer", "description"] {
        let mut body = base_intent.clone();
        body[field] = json!("a\u{0}b");
        cases.push((create.to_string(), "POST", Some(body), field));
    }
    let mut unknown = base_intent.clone();
    unknown["k\u{0}"] = json!(1);
    cases.push((create.to_string(), "POST", Some(unknown), "k\u{0}"));
    cases.push((
        refunds.clone(),
        "POST",
        Some(json!({"amount": 1, "reason": "r\u{0}"})),
        "reason",
    ));
    let mut unknown = json!({"amount": 1});
    unknown["x"] = json!(["\u{0}"]);
    cases.push((refunds.clone(), "POST", Some(unknown), "x/0"));

    for (i, (path, method, body, param)) in cases.iter().enumerate() {
        let a = match (method, body) {
            (&"GET", _) => api.get(path, Some(KEY_ONE)).await,
            (_, body) => {
                let body = body.as_ref().map(Value::to_string).unwrap_or_default();
                api.post(path, Some(KEY_ONE), Some(&format!("nul-{i}")), &body)
                    .await
            }
        };
        assert_eq!(a.status, 400, "{method} {path} {body:?}: {a:?}");
        let code = a.code();
        assert!(
            code == "invalid_text" || code == "control_character",
            "{method} {path}: {a:?}"
        );
        let want = param.replace('\u{0}', "");
        assert_eq!(
            a.json()["error"]["param"],
            want.as_str(),
            "{method} {path}: {a:?}"
        );
    }
    // A NUL in a header never gets past the HTTP parser: 400 too, raw on the socket.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = api.api.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = order(1).to_string();
    s.write_all(
        format!(
            "POST /v1/payment_intents HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY_ONE}\r\n\
             Idempotency-Key: a\0b\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut answer))
        .await
        .expect("the API answers")
        .ok();
    let head = String::from_utf8_lossy(&answer);
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    assert_eq!(api.count("payment_intents").await, 1);
    assert_eq!(api.count("outbound_refunds").await, 0);
    assert_eq!(api.count("api_idempotency_keys").await, 1);
}

/// Issue 25, finding 9 (currencies): `zzz` and `xxx` were accepted (a regex). Now a currency is one of the ISO
/// 4217 codes the provider accepts: 422 `currency_unsupported` naming `currency`; Mercado Pago only its
/// countries' currencies.
#[tokio::test]
async fn currencies_are_the_providers_iso_4217_codes() {
    let api = Api::spawn().await;
    let cases = [
        ("st", "zzz", false),
        ("st", "xxx", false),
        ("st", "XTS", false),
        ("st", "xau", false),
        ("mp", "eur", false),
        ("mp", "jpy", false),
        ("st", "EUR", true),
        ("st", "jpy", true),
        ("st", "xof", true),
        ("mp", "ars", true),
        ("mp", "mxn", true),
    ];
    for (i, (provider, currency, ok)) in cases.iter().enumerate() {
        let mut body = json!({"provider": provider, "amount": 100, "currency": currency});
        match *provider {
            "st" => body["stripe"] = card(),
            _ => body["mercadopago"] = mp_card(),
        }
        let a = api.create(&format!("cur-{i}"), &body).await;
        if *ok {
            assert_eq!(a.status, 201, "{provider} {currency}: {a:?}");
            assert_eq!(a.json()["currency"], currency.to_ascii_lowercase());
        } else {
            assert_eq!(
                (a.status, a.code().as_str()),
                (422, "currency_unsupported"),
                "{provider} {currency}: {a:?}"
            );
            assert_eq!(a.json()["error"]["param"], "currency", "{a:?}");
        }
    }
    assert_eq!(api.count("payment_intents").await, 5);
}

/// The API in front of the real dispatcher and the provider sandbox (the `st` Stripe provider): the merchant's
/// requests end as charges counted at the gateway.
pub(crate) struct Gatewayed {
    pub(crate) api: Api,
    pub(crate) sandbox: RunningSandbox,
    cancel: CancellationToken,
    config: hookline_core::Config,
    dispatcher: Option<tokio::task::JoinHandle<()>>,
}

impl Gatewayed {
    pub(crate) async fn start() -> Gatewayed {
        Gatewayed::start_with(&clients_section()).await
    }

    /// [`Gatewayed::start`] with another `[api]` section.
    pub(crate) async fn start_with(api_section: &str) -> Gatewayed {
        let sandbox_port = free_port();
        let providers = format!(
            "[providers.st]\nscheme = \"stripe\"\nsecrets = [\"whsec_refused\"]\n\
             api_base = \"http://127.0.0.1:{sandbox_port}\"\napi_token = \"sk_test_refused\"\n"
        );
        let db = TestDb::new().await;
        let (edge, api_base) = start_edge(&db.url, api_section, &providers).await;
        let config = parse_config(&test_config_toml(
            &db.url,
            "",
            &format!("[relay]\nembedded = false\n{providers}"),
        ));
        let mut settings = SandboxSettings::new(
            format!("127.0.0.1:{sandbox_port}").parse().expect("addr"),
            edge.parse().expect("edge url"),
            vec![SandboxProvider {
                name: "st".into(),
                scheme: Scheme::Stripe,
                webhook_secret: b"whsec_refused".to_vec(),
                api_token: Some("sk_test_refused".into()),
                webhook_basic_auth: None,
            }],
        );
        settings.webhook_backoff = Duration::from_millis(100);
        let sandbox = Sandbox::start(settings).await.expect("sandbox");
        let mut gw = Gatewayed {
            api: Api::on(db, edge, api_base),
            sandbox,
            cancel: CancellationToken::new(),
            config,
            dispatcher: None,
        };
        gw.start_dispatcher();
        gw
    }

    /// The API and the sandbox, the dispatcher stopped ([`Gatewayed::start_dispatcher`] starts it again).
    pub(crate) async fn start_paused() -> Gatewayed {
        let mut gw = Gatewayed::start().await;
        gw.cancel.cancel();
        if let Some(d) = gw.dispatcher.take() {
            within(Duration::from_secs(60), "the dispatcher's stop", d)
                .await
                .unwrap();
        }
        gw.cancel = CancellationToken::new();
        gw
    }

    /// Starts the real dispatcher (short idle interval and backoffs) on the test's database.
    pub(crate) fn start_dispatcher(&mut self) {
        let dispatcher = hookline_billing::dispatcher(
            self.api.db.pool.clone(),
            &self.config,
            DispatchSettings {
                idle_interval: Duration::from_millis(50),
                min_backoff: Duration::from_millis(100),
                max_backoff: Duration::from_millis(500),
                request_timeout: Duration::from_secs(10),
                ..DispatchSettings::default()
            },
        );
        let token = self.cancel.clone();
        self.dispatcher = Some(tokio::spawn(async move {
            dispatcher.run(token).await.expect("dispatcher")
        }));
    }

    /// Charges made at the gateway (the sandbox's own count).
    pub(crate) fn charges(&self) -> usize {
        self.sandbox
            .control()
            .charges()
            .provider("st")
            .expect("provider")
            .charges
    }

    pub(crate) async fn stop(self) {
        self.cancel.cancel();
        if let Some(dispatcher) = self.dispatcher {
            within(Duration::from_secs(60), "the dispatcher's stop", dispatcher)
                .await
                .unwrap();
        }
        self.sandbox.stop().await;
    }
}

/// Issue 25, finding 5, end to end with the real dispatcher and the provider sandbox: the gateway refuses a
/// refund of 2500 with 400; the refund is `needs_attention` and nothing moved at the gateway, and the intent's
/// `refunded` is back to 0 (it stayed 2500, so the corrected refund got 422 `refund_above_captured`). The
/// corrected refund is accepted (201) and succeeds at the gateway.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refund_the_gateway_refused_releases_its_reservation() {
    const WAIT: Duration = Duration::from_secs(60);
    let gw = Gatewayed::start().await;
    let (api, sandbox) = (&gw.api, &gw.sandbox);

    let created = api.create("refused-1", &order(2500)).await;
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["id"].as_str().unwrap().to_string();
    wait_for_count(
        &api.db.pool,
        WAIT,
        "the charge succeeded at the gateway",
        "SELECT count(*) FROM payment_intents WHERE status = 'succeeded'",
        1,
    )
    .await;

    sandbox
        .control()
        .arm_fault(FaultSpec {
            method: Some("POST".into()),
            ..FaultSpec::next(
                "/v1/refunds",
                1,
                FaultAction::Status {
                    status: 400,
                    retry_after_secs: None,
                },
            )
        })
        .expect("arm");
    let path = format!("/v1/payment_intents/{id}/refunds");
    let refund = post_as(api, KEY_ONE, &path, "refund-1", &json!({"amount": 2500})).await;
    assert_eq!(refund.status, 201, "{refund:?}");
    wait_for_count(
        &api.db.pool,
        WAIT,
        "the refused refund needs attention",
        "SELECT count(*) FROM outbound_refunds WHERE status = 'needs_attention'",
        1,
    )
    .await;
    let report = sandbox.control().charges();
    let book = report.provider("st").expect("provider");
    assert_eq!(
        (book.refunds, book.refunded_amount),
        (0, 0),
        "nothing refunded at the gateway"
    );
    let got = api
        .get(&format!("/v1/payment_intents/{id}"), Some(KEY_ONE))
        .await;
    assert_eq!(
        got.json()["refunded"],
        0,
        "the refusal released the reservation: {got:?}"
    );

    let corrected = post_as(api, KEY_ONE, &path, "refund-2", &json!({"amount": 2500})).await;
    assert_eq!(corrected.status, 201, "{corrected:?}");
    wait_for_count(
        &api.db.pool,
        WAIT,
        "the corrected refund succeeded",
        "SELECT count(*) FROM outbound_refunds WHERE status = 'succeeded'",
        1,
    )
    .await;
    let report = sandbox.control().charges();
    let book = report.provider("st").expect("provider");
    assert_eq!((book.refunds, book.refunded_amount), (1, 2500));
    let got = api
        .get(&format!("/v1/payment_intents/{id}"), Some(KEY_ONE))
        .await;
    assert_eq!(got.json()["refunded"], 2500, "{got:?}");
    // Still never beyond the capture.
    let more = post_as(api, KEY_ONE, &path, "refund-3", &json!({"amount": 1})).await;
    assert_eq!(
        (more.status, more.code().as_str()),
        (422, "refund_above_captured"),
        "{more:?}"
    );
    gw.stop().await;
}

/// Issue 27: the key is born with the intent, not with the click. The intent is created when the checkout is
/// built (`confirm: false`: `requires_confirmation`, nothing queued), then the submit is clicked ten times at
/// once: ten parallel confirms, some supplying the payment method, some with an Idempotency-Key, some without.
/// Every answer is 200 with the same intent; one outbound request, one charge at the gateway. A confirm still
/// missing the payment method is 400 naming it; another client's intent is 404; the other scheme's object is
/// 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_intent_confirmed_ten_times_in_parallel_charges_once() {
    const WAIT: Duration = Duration::from_secs(60);
    let gw = Gatewayed::start().await;
    let api = &gw.api;
    let created = api
        .create(
            "checkout-built",
            &json!({"provider": "st", "amount": 3900, "currency": "brl", "order_reference": "pedido-1",
                    "confirm": false, "stripe": {"return_url": "https://shop.example/pedido-1"}}),
        )
        .await;
    assert_eq!(created.status, 201, "{created:?}");
    let intent = created.json();
    assert_eq!(intent["status"], "requires_confirmation");
    let id = intent["id"].as_str().unwrap().to_string();
    let confirm_path = format!("/v1/payment_intents/{id}/confirm");
    assert_eq!(api.count("outbound_requests").await, 0);

    // Not confirmable yet: the payment method is missing (created without one, none supplied).
    let missing = api.post(&confirm_path, Some(KEY_ONE), None, "").await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (400, "parameter_missing"),
        "{missing:?}"
    );
    assert_eq!(missing.json()["error"]["param"], "stripe.payment_method");
    let wrong = api
        .post(
            &confirm_path,
            Some(KEY_ONE),
            None,
            &json!({"mercadopago": mp_card()}).to_string(),
        )
        .await;
    assert_eq!(
        (wrong.status, wrong.code().as_str()),
        (400, "provider_object_mismatch"),
        "{wrong:?}"
    );
    let stranger = api
        .post(
            &confirm_path,
            Some(KEY_TWO),
            None,
            &json!({"stripe": card()}).to_string(),
        )
        .await;
    assert_eq!(
        (stranger.status, stranger.code().as_str()),
        (404, "intent_not_found"),
        "{stranger:?}"
    );
    assert_eq!(api.count("outbound_requests").await, 0);
    assert_eq!(gw.charges(), 0);

    // The submit, clicked ten times at once.
    let body = json!({"stripe": card()}).to_string();
    let answers = join_all((0..10).map(|i| {
        let (path, body) = (&confirm_path, &body);
        async move {
            let key = format!("submit-{}", i % 3);
            match i % 2 {
                0 => api.post(path, Some(KEY_ONE), None, body).await,
                _ => api.post(path, Some(KEY_ONE), Some(&key), body).await,
            }
        }
    }))
    .await;
    for a in &answers {
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.json()["id"], id.as_str(), "{a:?}");
        assert_eq!(a.json()["order_reference"], "pedido-1", "{a:?}");
    }
    assert_eq!(api.count("outbound_requests").await, 1);
    let stored: Value =
        sqlx::query_scalar("SELECT payment_params FROM payment_intents WHERE public_id = $1")
            .bind(&id)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(
        stored,
        json!({"stripe": {"payment_method": "pm_card_visa", "off_session": false,
                          "return_url": "https://shop.example/pedido-1"}}),
        "the confirm's method laid over what the checkout stored"
    );
    wait_for_count(
        &api.db.pool,
        WAIT,
        "the confirmed intent succeeded at the gateway",
        "SELECT count(*) FROM payment_intents WHERE status = 'succeeded'",
        1,
    )
    .await;
    assert_eq!(gw.charges(), 1);
    // A late click, even with another card: the current state, nothing changed or sent.
    let late = api
        .post(
            &confirm_path,
            Some(KEY_ONE),
            None,
            &json!({"stripe": {"payment_method": "pm_card_mastercard"}}).to_string(),
        )
        .await;
    assert_eq!(late.status, 200, "{late:?}");
    assert_eq!(late.json()["status"], "succeeded", "{late:?}");
    let after: Value =
        sqlx::query_scalar("SELECT payment_params FROM payment_intents WHERE public_id = $1")
            .bind(&id)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(
        after, stored,
        "a confirmed intent's method is never replaced"
    );
    assert_eq!(api.count("outbound_requests").await, 1);
    assert_eq!(gw.charges(), 1);
    gw.stop().await;
}

/// Issue 27: a front end that makes a new Idempotency-Key per click (a common bug) sent ten creates for one
/// order. The partial UNIQUE index over (client, order_reference) of live intents decides: one 201, nine 409
/// `order_reference_in_use` naming that intent, one charge at the gateway. Another client's order of the same
/// name is its own; once an order's intent has failed, a new one for the same order is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_per_click_with_one_order_reference_charges_once() {
    const WAIT: Duration = Duration::from_secs(60);
    let gw = Gatewayed::start().await;
    let api = &gw.api;
    let mut body = order(5000);
    body["order_reference"] = json!("pedido-42");
    let keys: Vec<String> = (0..10).map(|i| format!("click-{i}")).collect();
    let answers = join_all(keys.iter().map(|k| api.create_as(KEY_ONE, k, &body))).await;
    let created: Vec<&Answer> = answers.iter().filter(|a| a.status == 201).collect();
    assert_eq!(created.len(), 1, "{answers:?}");
    let id = created[0].json()["id"].as_str().unwrap().to_string();
    for a in answers.iter().filter(|a| a.status != 201) {
        assert_eq!(
            (a.status, a.code().as_str()),
            (409, "order_reference_in_use"),
            "{a:?}"
        );
        assert_eq!(a.json()["error"]["intent"], id.as_str(), "{a:?}");
        assert_eq!(a.json()["error"]["param"], "order_reference", "{a:?}");
    }
    assert_eq!(api.count("payment_intents").await, 1);
    assert_eq!(api.count("outbound_requests").await, 1);
    // Only the created answer is stored on its key: a retry of a refused click is refused again.
    assert_eq!(api.count("api_idempotency_keys").await, 1);
    // (A click that was refused — whichever won the race, its key replays its own 201.)
    let refused = keys
        .iter()
        .zip(&answers)
        .find(|(_, a)| a.status == 409)
        .map(|(k, _)| k.as_str())
        .expect("nine clicks were refused");
    let again = api.create_as(KEY_ONE, refused, &body).await;
    assert_eq!(
        (again.status, again.code().as_str()),
        (409, "order_reference_in_use")
    );
    // Another client's order of the same name is another order.
    let theirs = api.create_as(KEY_TWO, "their-click", &body).await;
    assert_eq!(theirs.status, 201, "{theirs:?}");

    wait_for_count(
        &api.db.pool,
        WAIT,
        "both orders charged",
        "SELECT count(*) FROM payment_intents WHERE status = 'succeeded'",
        2,
    )
    .await;
    assert_eq!(gw.charges(), 2, "one charge per order");
    // Paid: still the order's live intent.
    let paid = api.create_as(KEY_ONE, "click-after-paid", &body).await;
    assert_eq!(
        (paid.status, paid.code().as_str()),
        (409, "order_reference_in_use")
    );

    // Once an order's intent has failed (a decline, recorded here as the dispatcher records it), the order can
    // be paid with a new intent, which is then the live one.
    let mut declined = order(700);
    declined["order_reference"] = json!("pedido-43");
    declined["confirm"] = json!(false);
    let first = api.create_as(KEY_ONE, "p43-1", &declined).await;
    assert_eq!(first.status, 201, "{first:?}");
    let first_id = first.json()["id"].as_str().unwrap().to_string();
    sqlx::query(
        "UPDATE payment_intents SET status = 'failed', failure_code = 'card_declined' WHERE public_id = $1",
    )
    .bind(&first_id)
    .execute(&api.db.pool)
    .await
    .unwrap();
    let second = api.create_as(KEY_ONE, "p43-2", &declined).await;
    assert_eq!(second.status, 201, "{second:?}");
    let second_id = second.json()["id"].as_str().unwrap().to_string();
    assert_ne!(second_id, first_id);
    let third = api.create_as(KEY_ONE, "p43-3", &declined).await;
    assert_eq!(third.status, 409, "{third:?}");
    assert_eq!(third.json()["error"]["intent"], second_id.as_str());
    gw.stop().await;
}

/// Issue 46, the list: `GET /v1/payment_intents` pages a client's intents newest first by cursor (forward with
/// `starting_after`, back with `ending_before`), filters by status, order and creation time, and never shows
/// another client's intents or hookline's own; a cursor that is another client's intent is `resource_missing`.
#[tokio::test]
async fn the_list_pages_newest_first_and_shows_only_the_clients_own_intents() {
    let api = Api::spawn().await;
    let mut mine = Vec::new();
    for n in 0..25 {
        let mut body = order(1000 + n);
        body["order_reference"] = json!(format!("order-{n}"));
        let created = api.create(&format!("list-{n}"), &body).await;
        assert_eq!(created.status, 201, "{created:?}");
        mine.push(created.json()["id"].as_str().unwrap().to_string());
    }
    let mut theirs = Vec::new();
    for n in 0..3 {
        let created = api
            .create_as(KEY_TWO, &format!("other-{n}"), &order(5))
            .await;
        assert_eq!(created.status, 201, "{created:?}");
        theirs.push(created.json()["id"].as_str().unwrap().to_string());
    }
    own_intent(&api).await;
    capture(&api, &mine[3]).await;
    capture(&api, &mine[20]).await;

    let list = |query: String, auth: &'static str| {
        let api = &api;
        async move {
            let got = api
                .get(&format!("/v1/payment_intents{query}"), Some(auth))
                .await;
            assert_eq!(got.status, 200, "{query}: {got:?}");
            let json = got.json();
            assert_eq!(json["object"], "list");
            let ids: Vec<String> = json["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["id"].as_str().unwrap().to_string())
                .collect();
            (ids, json["has_more"].as_bool().unwrap())
        }
    };
    let newest: Vec<String> = mine.iter().rev().cloned().collect();
    let (page1, more) = list(String::new(), KEY_ONE).await;
    assert_eq!((page1.as_slice(), more), (&newest[..10], true));
    let (page2, more) = list(format!("?starting_after={}", page1[9]), KEY_ONE_NEXT).await;
    assert_eq!((page2.as_slice(), more), (&newest[10..20], true));
    let (page3, more) = list(format!("?starting_after={}&limit=100", page2[9]), KEY_ONE).await;
    assert_eq!((page3.as_slice(), more), (&newest[20..], false));
    let (back, more) = list(format!("?ending_before={}", page2[0]), KEY_ONE).await;
    assert_eq!((back.as_slice(), more), (&newest[..10], false));
    let (back, more) = list(format!("?ending_before={}&limit=3", page3[0]), KEY_ONE).await;
    assert_eq!((back.as_slice(), more), (&newest[17..20], true));
    let (all, more) = list("?limit=100".into(), KEY_ONE).await;
    assert_eq!((all, more), (newest.clone(), false));

    let (found, _) = list("?order_reference=order-7".into(), KEY_ONE).await;
    assert_eq!(found, vec![mine[7].clone()]);
    let (found, _) = list("?status=succeeded".into(), KEY_ONE).await;
    assert_eq!(found, vec![mine[20].clone(), mine[3].clone()]);
    let (found, _) = list("?status=succeeded&limit=1".into(), KEY_ONE).await;
    assert_eq!(found, vec![mine[20].clone()]);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (found, _) = list(format!("?created%5Bgte%5D={}", now + 3600), KEY_ONE).await;
    assert!(found.is_empty(), "{found:?}");
    let (found, _) = list(format!("?created[gte]={}&limit=100", now - 3600), KEY_ONE).await;
    assert_eq!(found.len(), 25);
    let (found, _) = list(format!("?created[lt]={}", now - 3600), KEY_ONE).await;
    assert!(found.is_empty(), "{found:?}");

    // The other client sees its three, newest first; a cursor of the first client's is no intent of its own.
    let (other, more) = list(String::new(), KEY_TWO).await;
    assert_eq!(
        (other, more),
        (theirs.iter().rev().cloned().collect::<Vec<_>>(), false)
    );
    for param in ["starting_after", "ending_before"] {
        let got = api
            .get(
                &format!("/v1/payment_intents?{param}={}", mine[0]),
                Some(KEY_TWO),
            )
            .await;
        assert_eq!(
            (got.status, got.code().as_str()),
            (422, "resource_missing"),
            "{got:?}"
        );
        assert_eq!(got.json()["error"]["param"], param);
    }
}

/// Issue 46: the list takes hostile query strings — NUL, control characters, huge or wrong-typed values,
/// unknown and repeated parameters — as 4xx naming the parameter, never a 5xx; without a key it is 401.
#[tokio::test]
async fn the_list_refuses_hostile_parameters_by_name() {
    let api = Api::spawn().await;
    let huge = "9".repeat(5000);
    let cases = [
        ("limit=0", 422, "limit_invalid", "limit"),
        ("limit=101", 422, "limit_invalid", "limit"),
        ("limit=%00", 422, "limit_invalid", "limit"),
        (&format!("limit={huge}"), 422, "limit_invalid", "limit"),
        ("limit=1&limit=2", 422, "duplicate_parameter", "limit"),
        ("offset=10", 422, "unknown_parameter", "offset"),
        ("status=paid", 422, "status_invalid", "status"),
        ("status[]=failed", 422, "unknown_parameter", "status[]"),
        (
            "created[gte]=yesterday",
            422,
            "created_invalid",
            "created[gte]",
        ),
        (
            &format!("created[lt]={huge}"),
            422,
            "created_invalid",
            "created[lt]",
        ),
        (
            "starting_after=pi%00hl",
            400,
            "invalid_text",
            "starting_after",
        ),
        (
            "ending_before=pi%0Ahl",
            400,
            "control_character",
            "ending_before",
        ),
        (
            &format!("starting_after=pi_{huge}"),
            422,
            "resource_missing",
            "starting_after",
        ),
        (
            "starting_after=pi_hl_none",
            422,
            "resource_missing",
            "starting_after",
        ),
        (
            "starting_after=a&ending_before=b",
            422,
            "cursor_conflict",
            "ending_before",
        ),
        (
            "order_reference=%00",
            400,
            "invalid_text",
            "order_reference",
        ),
        (
            &format!("order_reference={huge}"),
            422,
            "order_reference_invalid",
            "order_reference",
        ),
    ];
    for (query, status, code, param) in cases {
        let got = api
            .get(&format!("/v1/payment_intents?{query}"), Some(KEY_ONE))
            .await;
        assert_eq!(
            (got.status, got.code().as_str()),
            (status, code),
            "{query}: {got:?}"
        );
        assert_eq!(got.json()["error"]["param"], param, "{query}");
    }
    let anonymous = api.get("/v1/payment_intents", None).await;
    assert_eq!(anonymous.status, 401, "{anonymous:?}");
}

/// Counts rows of `sql` (a `SELECT count(*) …`).
pub(crate) async fn count_of(api: &Api, sql: &str) -> i64 {
    sqlx::query_scalar(sql)
        .fetch_one(&api.db.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Issue 46, cancel: an abandoned checkout (`confirm: false`) held its order for ever — the customer's second
/// attempt was 409 `order_reference_in_use`. Now the merchant cancels it: `canceled` with its reason, one
/// `payment_intent.canceled`, the order free for a new intent; the cancel is idempotent per key, a second one is
/// 409 with the state, a confirm after it changes nothing, another client's cancel is 404, hostile input is 4xx.
#[tokio::test]
async fn an_abandoned_checkout_is_canceled_once_and_frees_its_order() {
    let api = Api::spawn().await;
    let checkout = json!({"provider": "st", "amount": 4200, "currency": "brl", "order_reference": "pedido-9",
                          "confirm": false});
    let created = api.create("checkout-9", &checkout).await;
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["id"].as_str().unwrap().to_string();
    let cancel_path = format!("/v1/payment_intents/{id}/cancel");

    // Another client cannot cancel it, nor learn that it exists.
    let stranger = post_as(&api, KEY_TWO, &cancel_path, "steal", &json!({})).await;
    assert_eq!(
        (stranger.status, stranger.code().as_str()),
        (404, "intent_not_found"),
        "{stranger:?}"
    );
    // Hostile bodies and ids: 4xx naming the field, nothing canceled.
    for (body, status, code) in [
        (
            r#"{"cancellation_reason": 5}"#,
            422,
            "cancellation_reason_invalid",
        ),
        (
            r#"{"cancellation_reason": "expired"}"#,
            422,
            "cancellation_reason_invalid",
        ),
        (
            r#"{"cancellation_reason": "abandoned", "amount": 1}"#,
            422,
            "unknown_field",
        ),
        (
            r#"{"cancellation_reason": "aband\u0000oned"}"#,
            400,
            "invalid_text",
        ),
        ("[]", 400, "invalid_json"),
        ("{", 400, "invalid_json"),
    ] {
        let got = api.post(&cancel_path, Some(KEY_ONE), None, body).await;
        assert_eq!(
            (got.status, got.code().as_str()),
            (status, code),
            "{body}: {got:?}"
        );
    }
    let huge = format!("/v1/payment_intents/pi_{}/cancel", "9".repeat(5000));
    let got = api.post(&huge, Some(KEY_ONE), None, "").await;
    assert_eq!(got.status, 404, "{got:?}");
    let got = api
        .post("/v1/payment_intents/pi%00x/cancel", Some(KEY_ONE), None, "")
        .await;
    assert_eq!(got.status, 400, "{got:?}");
    assert_eq!(
        count_of(
            &api,
            "SELECT count(*) FROM payment_intents WHERE status = 'canceled'"
        )
        .await,
        0
    );

    // The cancel, clicked twice with one key: one cancel, the second answer replayed.
    let body = json!({"cancellation_reason": "abandoned"});
    let first = post_as(&api, KEY_ONE, &cancel_path, "cancel-9", &body).await;
    assert_eq!(first.status, 200, "{first:?}");
    let json = first.json();
    assert_eq!(json["status"], "canceled");
    assert_eq!(json["cancellation_reason"], "abandoned");
    assert!(json["canceled_at"].is_string(), "{json}");
    let again = post_as(&api, KEY_ONE, &cancel_path, "cancel-9", &body).await;
    assert_eq!((again.status, again.replayed), (200, true), "{again:?}");
    // Another key (or none): the state it is in.
    let other = api.post(&cancel_path, Some(KEY_ONE), None, "").await;
    assert_eq!(
        (other.status, other.code().as_str()),
        (409, "payment_intent_unexpected_state"),
        "{other:?}"
    );
    assert_eq!(other.json()["error"]["status"], "canceled");
    assert_eq!(
        count_of(
            &api,
            "SELECT count(*) FROM domain_events WHERE type = 'payment_intent.canceled'"
        )
        .await,
        1
    );
    // A late confirm changes nothing and queues nothing.
    let late = api
        .post(
            &format!("/v1/payment_intents/{id}/confirm"),
            Some(KEY_ONE),
            None,
            &json!({"stripe": card()}).to_string(),
        )
        .await;
    assert_eq!(late.status, 200, "{late:?}");
    assert_eq!(late.json()["status"], "canceled");
    assert_eq!(api.count("outbound_requests").await, 0);
    // The order is free: the customer's next attempt is a new intent.
    let retry = api.create("checkout-9-again", &checkout).await;
    assert_eq!(retry.status, 201, "{retry:?}");
    assert_ne!(retry.json()["id"], id.as_str());
    // Final intents are answered with their state; one whose charge was sent is in flight.
    let paid = api.create("paid", &order(100)).await;
    let paid_id = paid.json()["id"].as_str().unwrap().to_string();
    capture(&api, &paid_id).await;
    let got = api
        .post(
            &format!("/v1/payment_intents/{paid_id}/cancel"),
            Some(KEY_ONE),
            None,
            "",
        )
        .await;
    assert_eq!(
        (got.status, got.code().as_str()),
        (409, "payment_intent_unexpected_state"),
        "{got:?}"
    );
    assert_eq!(got.json()["error"]["status"], "succeeded");
    for status in ["requires_action", "processing"] {
        let sent = api.create(&format!("sent-{status}"), &order(100)).await;
        let sent_id = sent.json()["id"].as_str().unwrap().to_string();
        sqlx::query("UPDATE payment_intents SET status = $2 WHERE public_id = $1")
            .bind(&sent_id)
            .bind(status)
            .execute(&api.db.pool)
            .await
            .unwrap();
        let got = api
            .post(
                &format!("/v1/payment_intents/{sent_id}/cancel"),
                Some(KEY_ONE),
                None,
                "",
            )
            .await;
        assert_eq!(
            (got.status, got.code().as_str()),
            (409, "intent_in_flight"),
            "{got:?}"
        );
        assert_eq!(got.json()["error"]["status"], status);
    }
}

/// Issue 46: a cancel racing the dispatcher, many times in parallel against the real dispatcher and the provider
/// sandbox. Each intent ends either `canceled` with nothing sent, or charged once and `succeeded` after a 409
/// `intent_in_flight` — never canceled while the gateway holds money, never charged after the cancel.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_racing_the_dispatcher_never_cancels_a_charge_nor_charges_a_cancel() {
    const N: usize = 40;
    const WAIT: Duration = Duration::from_secs(120);
    // Every charge is queued before the dispatcher starts; then the dispatcher and the cancels start together.
    let mut gw = Gatewayed::start_paused().await;
    let mut ids = Vec::new();
    for n in 0..N {
        let mut body = order(1000 + n as i64);
        body["order_reference"] = json!(format!("race-{n}"));
        let created = gw.api.create(&format!("race-{n}"), &body).await;
        assert_eq!(created.status, 201, "{created:?}");
        ids.push(created.json()["id"].as_str().unwrap().to_string());
    }
    gw.start_dispatcher();
    let api = &gw.api;
    let answers = join_all(ids.iter().enumerate().map(|(n, id)| async move {
        // Spread over the dispatcher's first claims.
        tokio::time::sleep(Duration::from_millis(2 * n as u64)).await;
        api.post(
            &format!("/v1/payment_intents/{id}/cancel"),
            Some(KEY_ONE),
            None,
            "",
        )
        .await
    }))
    .await;
    let mut canceled = 0;
    let mut in_flight = 0;
    for a in &answers {
        match (a.status, a.code().as_str()) {
            (200, _) => {
                assert_eq!(a.json()["status"], "canceled", "{a:?}");
                canceled += 1
            }
            // The dispatcher claimed it first: still at the gateway, or already charged.
            (409, "intent_in_flight") => in_flight += 1,
            (409, "payment_intent_unexpected_state")
                if a.json()["error"]["status"] == "succeeded" =>
            {
                in_flight += 1
            }
            _ => panic!("a cancel answered {a:?}"),
        }
    }
    // Every intent the cancel did not take is charged and succeeds; nothing is left to send.
    wait_for_count(
        &api.db.pool,
        WAIT,
        "every intent canceled or succeeded",
        "SELECT count(*) FROM payment_intents WHERE status IN ('canceled', 'succeeded')",
        N as i64,
    )
    .await;
    wait_for_count(
        &api.db.pool,
        WAIT,
        "no charge request left to send",
        "SELECT count(*) FROM outbound_requests WHERE status IN ('pending', 'unknown')",
        0,
    )
    .await;
    let succeeded = count_of(
        api,
        "SELECT count(*) FROM payment_intents WHERE status = 'succeeded'",
    )
    .await;
    assert_eq!(
        count_of(
            api,
            "SELECT count(*) FROM payment_intents WHERE status = 'canceled'"
        )
        .await,
        canceled
    );
    assert_eq!(succeeded, in_flight);
    // The gateway charged exactly the intents that succeeded: none of the canceled ones.
    assert_eq!(gw.charges() as i64, succeeded);
    assert_eq!(
        count_of(
            api,
            "SELECT count(*) FROM outbound_requests WHERE status = 'canceled' AND key_first_sent_at IS NULL"
        )
        .await,
        canceled
    );
    assert_eq!(
        count_of(
            api,
            "SELECT count(*) FROM domain_events WHERE type = 'payment_intent.canceled'"
        )
        .await,
        canceled
    );
    eprintln!("race: {canceled} canceled before the claim, {in_flight} claimed first");
    assert!(
        canceled > 0 && in_flight > 0,
        "the race was not exercised ({canceled} canceled, {in_flight} in flight): the test proves nothing"
    );
    gw.stop().await;
}

/// Issue 46, expiry: an intent nobody confirms is canceled as `expired` after `api.intent_expiry_secs`, once,
/// releasing its order; a confirmed one (its charge queued) is not touched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_intent_expires_once_and_frees_its_order() {
    let section = format!(
        "[api]\nlisten = \"127.0.0.1:0\"\nintent_expiry_secs = 1\n\
         [[api.clients]]\nname = \"shop\"\nkeys = [\"{KEY_ONE}\", \"{KEY_ONE_NEXT}\"]\n"
    );
    let api = Api::spawn_with(&section).await;
    let checkout = json!({"provider": "st", "amount": 700, "currency": "brl", "order_reference": "pedido-e",
                          "confirm": false});
    let created = api.create("expiring", &checkout).await;
    assert_eq!(created.status, 201, "{created:?}");
    let id = created.json()["id"].as_str().unwrap().to_string();
    let queued = api.create("queued", &order(800)).await;
    assert_eq!(queued.status, 201, "{queued:?}");
    wait_for_count(
        &api.db.pool,
        Duration::from_secs(30),
        "the unconfirmed intent expired",
        "SELECT count(*) FROM payment_intents WHERE status = 'canceled' AND cancellation_reason = 'expired'",
        1,
    )
    .await;
    let got = api
        .get(&format!("/v1/payment_intents/{id}"), Some(KEY_ONE))
        .await;
    assert_eq!(got.json()["status"], "canceled", "{got:?}");
    assert_eq!(got.json()["cancellation_reason"], "expired");
    assert_eq!(
        count_of(
            &api,
            "SELECT count(*) FROM payment_intents WHERE status = 'requires_dispatch'"
        )
        .await,
        1,
        "a confirmed intent does not expire"
    );
    let again = api.create("expiring-again", &checkout).await;
    assert_eq!(again.status, 201, "{again:?}");
    // One fact for the expired intent (the new one may expire in turn meanwhile: counted by its id).
    let facts: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM domain_events WHERE type = 'payment_intent.canceled'
            AND convert_from(body, 'UTF8')::jsonb -> 'data' ->> 'intent_id' = $1",
    )
    .bind(&id)
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(facts, 1);
}
