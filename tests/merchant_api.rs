//! The merchant API against the real PostgreSQL: authentication, validation, idempotency decided by the
//! database (the double click creates one intent), refunds never beyond the captured amount, and the two
//! listeners kept apart.

use futures::future::join_all;
use hookline_tests::*;
use serde_json::{json, Value};

const KEY_ONE: &str = "sk_hl_test_key_one";
const KEY_TWO: &str = "sk_hl_test_key_two";

/// An edge with `[api]` on its own port and an `st` provider that can be charged (it has an `api_base`).
struct Api {
    /// The providers' listener.
    edge: String,
    /// The API listener.
    api: String,
    db: TestDb,
    client: reqwest::Client,
}

impl Api {
    async fn spawn() -> Api {
        let db = TestDb::new().await;
        let tail = format!(
            "[relay]\nembedded = false\n\
             [providers.st]\nscheme = \"stripe\"\nsecrets = [\"whsec_api_test\"]\napi_base = \"http://127.0.0.1:9\"\n\
             [providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"mp_api_test\"]\napi_base = \"http://127.0.0.1:9\"\n\
             [api]\nlisten = \"127.0.0.1:0\"\nkeys = [\"{KEY_ONE}\", \"{KEY_TWO}\"]\n"
        );
        let config = parse_config(&test_config_toml(&db.url, "", &tail));
        let app = hookline_edge::Application::build(config)
            .await
            .expect("build the edge");
        let port = app.port();
        let api_port = app.api_port().expect("the API listener is bound");
        tokio::spawn(app.run_until_stopped());
        Api {
            edge: format!("http://127.0.0.1:{port}"),
            api: format!("http://127.0.0.1:{api_port}"),
            db,
            client: reqwest::Client::builder()
                .pool_max_idle_per_host(64)
                .build()
                .expect("http client"),
        }
    }

    async fn post(&self, path: &str, auth: Option<&str>, key: Option<&str>, body: &str) -> Answer {
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

    async fn create(&self, key: &str, body: &Value) -> Answer {
        self.post(
            "/v1/payment_intents",
            Some(KEY_ONE),
            Some(key),
            &body.to_string(),
        )
        .await
    }

    async fn get(&self, path: &str, auth: Option<&str>) -> Answer {
        let mut req = self.client.get(format!("{}{path}", self.api));
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
struct Answer {
    status: u16,
    replayed: bool,
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

    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|e| panic!("{e}: {}", self.text))
    }

    fn code(&self) -> String {
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

fn order(amount: i64) -> Value {
    json!({"provider": "st", "amount": amount, "currency": "BRL", "customer": "cus_1", "description": "order 1"})
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
            json!({"provider": "st", "amount": 1, "currency": "brl", "customer": "a\u{0}b"}),
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
    for (i, (body, code, param)) in cases.iter().enumerate() {
        let a = api.create(&format!("bad-{i}"), body).await;
        assert_eq!(a.status, 422, "{body}: {a:?}");
        assert_eq!(a.code(), *code, "{body}: {a:?}");
        assert_eq!(a.json()["error"]["param"], *param, "{body}: {a:?}");
        assert_eq!(a.json()["error"]["type"], "invalid_request_error", "{a:?}");
    }
    assert_eq!(api.count("payment_intents").await, 0);
    assert_eq!(api.count("api_idempotency_keys").await, 0);
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

    // The stored client is the key's index, never the secret.
    let clients: Vec<String> = sqlx::query_scalar("SELECT client FROM api_idempotency_keys")
        .fetch_all(&api.db.pool)
        .await
        .unwrap();
    assert_eq!(clients, vec!["0".to_string()]);

    // GET answers the same intent.
    let got = api
        .get(&format!("/v1/payment_intents/{id}"), Some(KEY_TWO))
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
            &json!({"provider": "mp", "amount": 5000, "currency": "brl"}),
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
    let pruned = hookline_core::intents::prune_idempotency_keys(
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
