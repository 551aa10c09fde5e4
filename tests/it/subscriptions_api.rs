//! Issue 48: subscriptions through the merchant API, against the real PostgreSQL. Create (201, `sub_hl_…`, its
//! `Idempotency-Key` replayed, one row), read, list (cursor pages without gaps or duplicates, `status=`), update (a
//! new method resumes a past-due subscription and retries its unpaid cycle; a new amount), cancel (now, at period
//! end). Scoped to the client: another client's subscription, or an operator's, is 404 on every route and absent
//! from its list. Every hostile input is a 4xx naming its field, never a 5xx. Each write records its fact
//! (`subscription.created`, `.updated`, `.canceled`) owned by the client.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::merchant_api::{clients_section, Api, KEY_ONE, KEY_TWO};

/// A Stripe subscription of the provider `st` (the harness's stripe provider).
fn stripe_sub(amount: i64) -> Value {
    json!({"provider": "st", "amount": amount, "currency": "brl", "interval": "month",
           "stripe": {"customer": "cus_NffrFeUfNV2Hib", "payment_method": "pm_card_visa"}})
}

async fn create(api: &Api, auth: &str, key: &str, body: &Value) -> Value {
    let a = api
        .post(
            "/v1/subscriptions",
            Some(auth),
            Some(key),
            &body.to_string(),
        )
        .await;
    assert_eq!(a.status, 201, "{a:?}");
    a.json()
}

/// The facts of `ty` about the subscription `id`: (owner, data).
async fn facts(api: &Api, ty: &str, id: &str) -> Vec<(Option<String>, Value)> {
    let rows: Vec<(Option<String>, Vec<u8>)> =
        sqlx::query_as("SELECT client, body FROM domain_events WHERE type = $1 ORDER BY seq")
            .bind(ty)
            .fetch_all(&api.db.pool)
            .await
            .expect("facts");
    rows.into_iter()
        .map(|(c, b)| (c, serde_json::from_slice::<Value>(&b).expect("json")))
        .filter(|(_, b)| b["data"]["subscription"] == id)
        .map(|(c, b)| (c, b["data"].clone()))
        .collect()
}

async fn count_subscriptions(api: &Api) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM subscriptions")
        .fetch_one(&api.db.pool)
        .await
        .expect("count")
}

#[tokio::test]
async fn a_subscription_is_created_once_per_key_and_read_back() {
    let api = Api::spawn_with(&clients_section()).await;
    let body = stripe_sub(2000);
    let a = api
        .post("/v1/subscriptions", Some(KEY_ONE), None, &body.to_string())
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (400, "idempotency_key_missing"),
        "{a:?}"
    );
    let sub = create(&api, KEY_ONE, "sub-1", &body).await;
    let id = sub["id"].as_str().expect("id").to_owned();
    assert!(id.starts_with("sub_hl_"), "{sub}");
    assert_eq!(sub["object"], "subscription");
    assert_eq!(sub["provider"], "st");
    assert_eq!(sub["amount"], 2000);
    assert_eq!(sub["currency"], "brl");
    assert_eq!(sub["interval"], "month");
    assert_eq!(sub["status"], "active");
    assert_eq!(sub["cancel_at_period_end"], false);
    assert_eq!(
        sub["stripe"],
        json!({"customer": "cus_NffrFeUfNV2Hib", "payment_method": "pm_card_visa"})
    );
    assert!(sub["current_period"]["cycle"].is_string(), "{sub}");
    assert!(sub["current_period"]["start"].is_string(), "{sub}");
    assert!(sub["current_period"]["end"].is_string(), "{sub}");
    assert_eq!(sub["latest_charge"], Value::Null);
    assert_eq!(sub["canceled_at"], Value::Null);
    assert!(sub["created"].is_string(), "{sub}");
    // The same key and body: the same answer, replayed, no second row.
    let again = api
        .post(
            "/v1/subscriptions",
            Some(KEY_ONE),
            Some("sub-1"),
            &body.to_string(),
        )
        .await;
    assert_eq!(again.status, 201, "{again:?}");
    assert!(again.replayed);
    assert_eq!(again.json(), sub);
    assert_eq!(count_subscriptions(&api).await, 1);
    // The same key with another body: refused as the intents refuse it.
    let other = api
        .post(
            "/v1/subscriptions",
            Some(KEY_ONE),
            Some("sub-1"),
            &stripe_sub(3000).to_string(),
        )
        .await;
    assert_eq!(
        (other.status, other.code().as_str()),
        (422, "idempotency_key_reused"),
        "{other:?}"
    );
    assert_eq!(count_subscriptions(&api).await, 1);
    let read = api
        .get(&format!("/v1/subscriptions/{id}"), Some(KEY_ONE))
        .await;
    assert_eq!(read.status, 200, "{read:?}");
    assert_eq!(read.json(), sub);
    // Its row belongs to the client; its fact too, once.
    let client: Option<String> =
        sqlx::query_scalar("SELECT client FROM subscriptions WHERE public_id = $1")
            .bind(&id)
            .fetch_one(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(client.as_deref(), Some("shop"));
    let created = facts(&api, "subscription.created", &id).await;
    assert_eq!(created.len(), 1, "{created:?}");
    assert_eq!(created[0].0.as_deref(), Some("shop"));
    assert_eq!(created[0].1["amount"], 2000);
    assert!(created[0].1["subscription_id"].is_string());
    // A Mercado Pago subscription takes the saved card's names (a numeric card id as MP answers it), yearly, with
    // an anchor.
    let mp = create(
        &api,
        KEY_ONE,
        "sub-mp",
        &json!({"provider": "mp", "amount": 990, "currency": "BRL", "interval": "year",
                "anchor": "2026-01-15T10:00:00Z",
                "mercadopago": {"customer_id": "247711297-jxOV430go9fx2e", "card_id": 1518023392627_u64}}),
    )
    .await;
    assert_eq!(
        mp["mercadopago"],
        json!({"customer_id": "247711297-jxOV430go9fx2e", "card_id": "1518023392627"})
    );
    assert_eq!(mp["anchor"], "2026-01-15T10:00:00Z");
    assert_eq!(mp["interval"], "year");
    assert!(mp.get("stripe").is_none(), "{mp}");
}

#[tokio::test]
async fn the_list_pages_newest_first_without_gaps_and_filters_by_status() {
    let api = Api::spawn_with(&clients_section()).await;
    let mut made = Vec::new();
    for i in 0..7 {
        let s = create(&api, KEY_ONE, &format!("k{i}"), &stripe_sub(100 + i)).await;
        made.push(s["id"].as_str().unwrap().to_owned());
    }
    let theirs = create(&api, KEY_TWO, "k0", &stripe_sub(5)).await;
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let path = match &after {
            None => "/v1/subscriptions?limit=3".to_owned(),
            Some(a) => format!("/v1/subscriptions?limit=3&starting_after={a}"),
        };
        let page = api.get(&path, Some(KEY_ONE)).await;
        assert_eq!(page.status, 200, "{page:?}");
        let page = page.json();
        assert_eq!(page["object"], "list");
        assert_eq!(page["url"], "/v1/subscriptions");
        let data = page["data"].as_array().unwrap();
        pages += 1;
        for s in data {
            seen.push(s["id"].as_str().unwrap().to_owned());
        }
        if page["has_more"] != true {
            break;
        }
        after = seen.last().cloned();
        assert!(pages < 10);
    }
    assert_eq!(pages, 3);
    let newest_first: Vec<String> = made.iter().rev().cloned().collect();
    assert_eq!(seen, newest_first, "every one once, newest first");
    assert!(!seen.contains(&theirs["id"].as_str().unwrap().to_owned()));
    // status=: two canceled.
    for id in &made[..2] {
        let a = api
            .post(
                &format!("/v1/subscriptions/{id}/cancel"),
                Some(KEY_ONE),
                None,
                "",
            )
            .await;
        assert_eq!(a.status, 200, "{a:?}");
    }
    let canceled = api
        .get("/v1/subscriptions?status=canceled", Some(KEY_ONE))
        .await
        .json();
    let ids: BTreeSet<&str> = canceled["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, made[..2].iter().map(String::as_str).collect());
    let active = api
        .get("/v1/subscriptions?status=active&limit=100", Some(KEY_ONE))
        .await
        .json();
    assert_eq!(active["data"].as_array().unwrap().len(), 5);
    // Bounded parameters; another client's id is no cursor.
    for (query, param) in [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=abc", "limit"),
        ("status=paid", "status"),
        ("offset=1", "offset"),
        ("limit=1&limit=2", "limit"),
        ("starting_after=sub_hl_nobody", "starting_after"),
        ("starting_after=a%00b", "starting_after"),
        ("status=act%0Aive", "status"),
    ] {
        let a = api
            .get(&format!("/v1/subscriptions?{query}"), Some(KEY_ONE))
            .await;
        assert!((400..500).contains(&a.status), "{query}: {a:?}");
        assert_eq!(a.json()["error"]["param"], param, "{query}: {a:?}");
    }
    let a = api
        .get(
            &format!(
                "/v1/subscriptions?starting_after={}",
                theirs["id"].as_str().unwrap()
            ),
            Some(KEY_ONE),
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (422, "resource_missing"),
        "{a:?}"
    );
}

#[tokio::test]
async fn a_new_method_resumes_a_past_due_subscription_and_retries_its_cycle() {
    let api = Api::spawn_with(&clients_section()).await;
    let sub = create(&api, KEY_ONE, "s", &stripe_sub(2000)).await;
    let id = sub["id"].as_str().unwrap().to_owned();
    let cycle = sub["current_period"]["cycle"].as_str().unwrap().to_owned();
    // Its cycle declined every time: an intent (the charge), its claim past due, the subscription past due.
    let intent = api
        .create("charge-1", &crate::merchant_api::order(2000))
        .await
        .json();
    let pool = &api.db.pool;
    sqlx::query(
        "INSERT INTO billing_claims (subscription_id, billing_cycle, intent_id, status, attempts,
                                     last_failure_code, last_failure_message)
         SELECT s.id, $2, p.id, 'past_due', 3, 'card_declined', 'Your card was declined.'
           FROM subscriptions s, payment_intents p WHERE s.public_id = $1 AND p.public_id = $3",
    )
    .bind(&id)
    .bind(&cycle)
    .bind(intent["id"].as_str().unwrap())
    .execute(pool)
    .await
    .unwrap();
    sqlx::query(
        "UPDATE subscriptions SET status = 'past_due', status_reason = 'card_declined' WHERE public_id = $1",
    )
    .bind(&id)
    .execute(pool)
    .await
    .unwrap();
    let parked = api
        .get(&format!("/v1/subscriptions/{id}"), Some(KEY_ONE))
        .await
        .json();
    assert_eq!(parked["status"], "past_due");
    assert_eq!(parked["decline_reason"], "card_declined");
    assert_eq!(parked["failure_code"], "card_declined");
    assert_eq!(parked["failure_message"], "Your card was declined.");
    assert_eq!(
        parked["latest_charge"],
        json!({"cycle": cycle, "intent": intent["id"], "status": "past_due", "attempts": 3})
    );
    assert_eq!(parked["next_retry_at"], Value::Null);
    // Another customer's method is refused, naming it; nothing changes.
    let a = api
        .post(
            &format!("/v1/subscriptions/{id}"),
            Some(KEY_ONE),
            None,
            &json!({"stripe": {"customer": "cus_Other", "payment_method": "pm_card_mastercard"}})
                .to_string(),
        )
        .await;
    assert_eq!(a.status, 422, "{a:?}");
    assert_eq!(a.json()["error"]["param"], "stripe.customer");
    // The new method: active again, its unpaid cycle due again now.
    let a = api
        .post(
            &format!("/v1/subscriptions/{id}"),
            Some(KEY_ONE),
            None,
            &json!({"stripe": {"customer": "cus_NffrFeUfNV2Hib", "payment_method": "pm_card_mastercard"}})
                .to_string(),
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    let resumed = a.json();
    assert_eq!(resumed["status"], "active");
    assert_eq!(resumed["decline_reason"], Value::Null);
    assert_eq!(resumed["stripe"]["payment_method"], "pm_card_mastercard");
    assert_eq!(resumed["latest_charge"]["status"], "retry_scheduled");
    assert!(resumed["next_retry_at"].is_string(), "{resumed}");
    let claim: String = sqlx::query_scalar(
        "SELECT b.status FROM billing_claims b JOIN subscriptions s ON s.id = b.subscription_id
          WHERE s.public_id = $1",
    )
    .bind(&id)
    .fetch_one(pool)
    .await
    .unwrap();
    assert_eq!(claim, "retry_scheduled");
    let updated = facts(&api, "subscription.updated", &id).await;
    assert_eq!(updated.len(), 1, "{updated:?}");
    assert_eq!(updated[0].0.as_deref(), Some("shop"));
    assert_eq!(updated[0].1["changed"], json!(["payment_method"]));
    // A new amount, from the next charge on (with a key: replayed).
    let body = json!({"amount": 3500}).to_string();
    let path = format!("/v1/subscriptions/{id}");
    let a = api.post(&path, Some(KEY_ONE), Some("amt"), &body).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.json()["amount"], 3500);
    let again = api.post(&path, Some(KEY_ONE), Some("amt"), &body).await;
    assert!(again.replayed, "{again:?}");
    let amount: i64 = sqlx::query_scalar("SELECT amount FROM subscriptions WHERE public_id = $1")
        .bind(&id)
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(amount, 3500);
    let updated = facts(&api, "subscription.updated", &id).await;
    assert_eq!(updated.len(), 2, "{updated:?}");
    assert_eq!(updated[1].1["changed"], json!(["amount"]));
    assert_eq!(updated[1].1["previous_amount"], 2000);
    // Another object than its provider's is refused.
    let a = api
        .post(
            &path,
            Some(KEY_ONE),
            None,
            &json!({"mercadopago": {"card_id": "123"}}).to_string(),
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (400, "provider_object_mismatch"),
        "{a:?}"
    );
}

#[tokio::test]
async fn a_subscription_is_canceled_now_or_at_its_period_end() {
    let api = Api::spawn_with(&clients_section()).await;
    let later = create(&api, KEY_ONE, "a", &stripe_sub(100)).await;
    let now = create(&api, KEY_ONE, "b", &stripe_sub(200)).await;
    let (later, now) = (
        later["id"].as_str().unwrap().to_owned(),
        now["id"].as_str().unwrap().to_owned(),
    );
    let a = api
        .post(
            &format!("/v1/subscriptions/{later}/cancel"),
            Some(KEY_ONE),
            None,
            r#"{"at_period_end": true}"#,
        )
        .await;
    assert_eq!(a.status, 200, "{a:?}");
    assert_eq!(a.json()["status"], "active");
    assert_eq!(a.json()["cancel_at_period_end"], true);
    let ends = facts(&api, "subscription.updated", &later).await;
    assert_eq!(ends.len(), 1, "{ends:?}");
    assert_eq!(ends[0].1["changed"], json!(["cancel_at_period_end"]));
    assert!(facts(&api, "subscription.canceled", &later)
        .await
        .is_empty());
    for _ in 0..2 {
        let a = api
            .post(
                &format!("/v1/subscriptions/{now}/cancel"),
                Some(KEY_ONE),
                None,
                "",
            )
            .await;
        assert_eq!(a.status, 200, "{a:?}");
        assert_eq!(a.json()["status"], "canceled");
        assert!(a.json()["canceled_at"].is_string());
    }
    let canceled = facts(&api, "subscription.canceled", &now).await;
    assert_eq!(canceled.len(), 1, "a repeat records nothing: {canceled:?}");
    assert_eq!(canceled[0].0.as_deref(), Some("shop"));
    // A canceled subscription does not change any more.
    let a = api
        .post(
            &format!("/v1/subscriptions/{now}"),
            Some(KEY_ONE),
            None,
            r#"{"amount": 5}"#,
        )
        .await;
    assert_eq!(
        (a.status, a.code().as_str()),
        (409, "subscription_canceled"),
        "{a:?}"
    );
}

#[tokio::test]
async fn another_clients_or_an_operators_subscription_is_not_found() {
    let api = Api::spawn_with(&clients_section()).await;
    let mine = create(&api, KEY_ONE, "m", &stripe_sub(100)).await;
    let mine = mine["id"].as_str().unwrap().to_owned();
    // An operator's (the CLI's: client NULL).
    let operator: String = sqlx::query_scalar(
        "INSERT INTO subscriptions (provider, customer, payment_method, amount, currency, interval, anchor,
                                    next_cycle, next_period_at)
         VALUES ('st', 'cus_1', 'pm_card_visa', 100, 'brl', 'month', now(), to_char(now(), 'YYYY-MM'), now())
         RETURNING public_id",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    for (auth, id) in [(KEY_TWO, mine.as_str()), (KEY_ONE, operator.as_str())] {
        let a = api
            .get(&format!("/v1/subscriptions/{id}"), Some(auth))
            .await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (404, "subscription_not_found"),
            "{a:?}"
        );
        let a = api
            .post(
                &format!("/v1/subscriptions/{id}"),
                Some(auth),
                None,
                r#"{"amount": 999}"#,
            )
            .await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (404, "subscription_not_found"),
            "{a:?}"
        );
        let a = api
            .post(
                &format!("/v1/subscriptions/{id}/cancel"),
                Some(auth),
                None,
                "",
            )
            .await;
        assert_eq!(
            (a.status, a.code().as_str()),
            (404, "subscription_not_found"),
            "{a:?}"
        );
        let list = api.get("/v1/subscriptions?limit=100", Some(auth)).await;
        assert!(!list.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == id));
    }
    let unchanged: Vec<(i64, String)> =
        sqlx::query_as("SELECT amount, status FROM subscriptions ORDER BY id")
            .fetch_all(&api.db.pool)
            .await
            .unwrap();
    assert_eq!(
        unchanged,
        vec![(100, "active".to_owned()), (100, "active".to_owned())]
    );
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM domain_events WHERE type IN ('subscription.updated', 'subscription.canceled')",
    )
    .fetch_one(&api.db.pool)
    .await
    .unwrap();
    assert_eq!(n, 0);
}

#[tokio::test]
async fn hostile_input_is_a_client_error_naming_the_field() {
    let api = Api::spawn_with(&clients_section()).await;
    let huge = "x".repeat(70_000);
    let long = "c".repeat(5_000);
    let with = |patch: Value| {
        let mut b = stripe_sub(100);
        for (k, v) in patch.as_object().unwrap() {
            if v.is_null() {
                b.as_object_mut().unwrap().remove(k);
            } else {
                b[k] = v.clone();
            }
        }
        b.to_string()
    };
    let creates: Vec<(String, &str)> = vec![
        (with(json!({"amount": 0})), "amount"),
        (with(json!({"amount": -5})), "amount"),
        (with(json!({"amount": 1_000_000_000_000_001_i64})), "amount"),
        (with(json!({"amount": 1e300})), "amount"),
        (with(json!({"amount": "100"})), "amount"),
        (with(json!({"amount": null})), "amount"),
        (with(json!({"interval": "week"})), "interval"),
        (with(json!({"interval": 1})), "interval"),
        (with(json!({"interval": null})), "interval"),
        (with(json!({"anchor": "yesterday"})), "anchor"),
        (with(json!({"anchor": "0001-01-01T00:00:00Z"})), "anchor"),
        (with(json!({"anchor": "2999-01-01T00:00:00Z"})), "anchor"),
        (with(json!({"anchor": 1700000000})), "anchor"),
        (with(json!({"anchor": long.clone()})), "anchor"),
        (with(json!({"provider": "nope"})), "provider"),
        (with(json!({"provider": 5})), "provider"),
        (with(json!({"provider": "st\u{0}"})), "provider"),
        (with(json!({"provider": null})), "provider"),
        (with(json!({"currency": "usdx"})), "currency"),
        (with(json!({"currency": 986})), "currency"),
        (with(json!({"surprise": 1})), "surprise"),
        (with(json!({"stripe": null})), "stripe"),
        (with(json!({"stripe": "pm_card_visa"})), "stripe"),
        (
            with(
                json!({"stripe": {"customer": "cus_1", "payment_method": "pm_1", "off_session": true}}),
            ),
            "stripe.off_session",
        ),
        (
            with(json!({"stripe": {"customer": "someone@example.com", "payment_method": "pm_1"}})),
            "stripe.customer",
        ),
        (
            with(json!({"stripe": {"customer": "cus_1", "payment_method": "tok_visa"}})),
            "stripe.payment_method",
        ),
        (
            with(json!({"stripe": {"customer": "cus_1", "payment_method": long.clone()}})),
            "stripe.payment_method",
        ),
        (
            with(json!({"stripe": {"customer": "cus_1\n", "payment_method": "pm_1"}})),
            "stripe.customer",
        ),
        (
            with(json!({"stripe": {"customer": "cus_1", "payment_method": ["pm_1"]}})),
            "stripe.payment_method",
        ),
        (
            with(json!({"stripe": {"customer": "cus_1"}})),
            "stripe.payment_method",
        ),
        (
            with(json!({"mercadopago": {"customer_id": "1", "card_id": "2"}})),
            "mercadopago",
        ),
        (
            json!({"provider": "mp", "amount": 100, "currency": "eur", "interval": "month",
                   "mercadopago": {"customer_id": "c-1", "card_id": "123"}})
            .to_string(),
            "currency",
        ),
        (
            json!({"provider": "mp", "amount": 100, "currency": "brl", "interval": "month",
                   "mercadopago": {"customer_id": "a/b", "card_id": "123"}})
            .to_string(),
            "mercadopago.customer_id",
        ),
        (
            json!({"provider": "mp", "amount": 100, "currency": "brl", "interval": "month",
                   "mercadopago": {"customer_id": "c-1", "card_id": "12a"}})
            .to_string(),
            "mercadopago.card_id",
        ),
        (
            json!({"provider": "mp", "amount": 100, "currency": "brl", "interval": "month",
                   "mercadopago": {"customer_id": "c-1", "card_id": -1}})
            .to_string(),
            "mercadopago.card_id",
        ),
    ];
    for (i, (body, param)) in creates.iter().enumerate() {
        let a = api
            .post(
                "/v1/subscriptions",
                Some(KEY_ONE),
                Some(&format!("h{i}")),
                body,
            )
            .await;
        assert!((400..500).contains(&a.status), "{body}: {a:?}");
        assert_eq!(a.json()["error"]["param"], *param, "{body}: {a:?}");
    }
    // Not JSON, not an object, too large: 4xx too.
    for body in ["", "[]", "{", "null", huge.as_str()] {
        let a = api
            .post("/v1/subscriptions", Some(KEY_ONE), Some("j"), body)
            .await;
        assert!((400..500).contains(&a.status), "{a:?}");
    }
    assert_eq!(count_subscriptions(&api).await, 0);
    let sub = create(&api, KEY_ONE, "ok", &stripe_sub(100)).await;
    let id = sub["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/subscriptions/{id}");
    for (body, param) in [
        (json!({}), "amount"),
        (json!({"amount": 0}), "amount"),
        (json!({"amount": -1}), "amount"),
        (json!({"amount": "1"}), "amount"),
        (json!({"amount": 10, "interval": "year"}), "interval"),
        (
            json!({"stripe": {"payment_method": "nope"}}),
            "stripe.payment_method",
        ),
        (
            json!({"stripe": {"payment_method": "pm_1", "return_url": "https://x.example"}}),
            "stripe.return_url",
        ),
        (
            json!({"stripe": {"customer": "cus_NffrFeUfNV2Hib"}}),
            "stripe.payment_method",
        ),
        (json!({"stripe": 5}), "stripe"),
        (json!({"pagarme": {"card_id": "card_1"}}), "pagarme"),
        (json!({"amount": 10, "x\u{7}": 1}), "x\u{7}"),
    ] {
        let a = api
            .post(&path, Some(KEY_ONE), None, &body.to_string())
            .await;
        assert!((400..500).contains(&a.status), "{body}: {a:?}");
        assert_eq!(a.json()["error"]["param"], param, "{body}: {a:?}");
    }
    for (body, param) in [
        (r#"{"at_period_end": "yes"}"#, "at_period_end"),
        (r#"{"at_period_end": 1}"#, "at_period_end"),
        (r#"{"now": true}"#, "now"),
    ] {
        let a = api
            .post(&format!("{path}/cancel"), Some(KEY_ONE), None, body)
            .await;
        assert!((400..500).contains(&a.status), "{body}: {a:?}");
        assert_eq!(a.json()["error"]["param"], param, "{body}: {a:?}");
    }
    // Malformed ids in the path: 404 for ids nobody can have, 400 for text the database cannot hold.
    let long_id = "s".repeat(300);
    for bad in [
        "sub_hl_nobody",
        long_id.as_str(),
        "sub_hl_%00",
        "sub_hl_%0A1",
        "%F0%9F%92%A5",
        "..%2F..",
    ] {
        for a in [
            api.get(&format!("/v1/subscriptions/{bad}"), Some(KEY_ONE))
                .await,
            api.post(
                &format!("/v1/subscriptions/{bad}"),
                Some(KEY_ONE),
                None,
                r#"{"amount": 5}"#,
            )
            .await,
            api.post(
                &format!("/v1/subscriptions/{bad}/cancel"),
                Some(KEY_ONE),
                None,
                "",
            )
            .await,
        ] {
            assert!(a.status == 404 || a.status == 400, "{bad}: {a:?}");
        }
    }
    // A method the route does not take: 405 with Allow; no key: 401.
    let a = api.delete(&path, Some(KEY_ONE)).await;
    assert_eq!(a.status, 405, "{a:?}");
    let a = api.get(&path, None).await;
    assert_eq!(a.status, 401, "{a:?}");
    // Nothing changed.
    let read = api.get(&path, Some(KEY_ONE)).await.json();
    assert_eq!(read["amount"], 100);
    assert_eq!(read["status"], "active");
}
