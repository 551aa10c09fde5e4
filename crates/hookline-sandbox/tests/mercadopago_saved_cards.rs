//! Mercado Pago customers and saved cards: a customer per email, a card saved from a card token keeps the token's
//! test holder (its payments' outcome); a token of the saved card (no security code) charges it only for its
//! customer (`payer.type = customer`); a recurring charge's `point_of_interaction` is checked and echoed; a
//! card-use script decides the card's Nth executed payment. `/v1/customers` is Stripe's too: each request goes
//! to the provider it is for.

mod common;

use common::*;
use hookline_sandbox::RunningSandbox;
use serde_json::{json, Value};

async fn mp_json(
    sandbox: &RunningSandbox,
    path: &str,
    body: &Value,
    key: Option<&str>,
) -> (u16, Value) {
    let response = mp_post(sandbox, path, body, key).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn mp_customer(sandbox: &RunningSandbox, email: &str) -> String {
    let (status, body) = mp_json(sandbox, "/v1/customers", &json!({"email": email}), None).await;
    assert_eq!(status, 201, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// Saves a test Visa held by `holder` to `customer`; the card's id.
async fn mp_saved_card(sandbox: &RunningSandbox, customer: &str, holder: &str) -> String {
    let token = mp_card_token(sandbox, holder).await;
    let (status, card) = mp_json(
        sandbox,
        &format!("/v1/customers/{customer}/cards"),
        &json!({"token": token}),
        None,
    )
    .await;
    assert_eq!(status, 201, "{card}");
    card["id"].as_str().unwrap().to_owned()
}

/// A token of saved card `card` (no security code).
async fn mp_card_id_token(sandbox: &RunningSandbox, card: &str, customer: &str) -> String {
    let (status, token) = mp_json(
        sandbox,
        "/v1/card_tokens",
        &json!({"card_id": card, "customer_id": customer}),
        None,
    )
    .await;
    assert_eq!(status, 201, "{token}");
    assert_eq!(token["card_id"], card);
    token["id"].as_str().unwrap().to_owned()
}

/// A merchant-initiated payment with a saved card's token for `customer`.
fn saved_card_payment(token: &str, customer: &str) -> Value {
    json!({
        "transaction_amount": 49.9,
        "description": "Plano mensal",
        "payment_method_id": "visa",
        "installments": 1,
        "token": token,
        "payer": {"type": "customer", "id": customer},
        "point_of_interaction": {"type": "SUBSCRIPTIONS", "transaction_data": {
            "first_time_use": false, "subscription_id": "hookline-sub-7", "billing_date": "2026-12-01",
            "subscription_sequence": {"number": 2, "total": null}}},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customers_save_cards_from_tokens() {
    let sandbox = start(settings(None)).await;
    let ana = mp_customer(&sandbox, "ana@example.com").await;
    let (user, suffix) = ana.split_once('-').unwrap();
    assert!(
        user.bytes().all(|b| b.is_ascii_digit()) && suffix.len() == 15,
        "{ana}"
    );
    // One customer per email; an email is required.
    let (status, body) = mp_json(
        &sandbox,
        "/v1/customers",
        &json!({"email": "ANA@example.com"}),
        None,
    )
    .await;
    assert_eq!(
        (status, body["cause"][0]["code"].as_i64()),
        (400, Some(101)),
        "{body}"
    );
    let (status, body) = mp_json(
        &sandbox,
        "/v1/customers",
        &json!({"first_name": "Ana"}),
        None,
    )
    .await;
    assert_eq!(
        (status, body["cause"][0]["code"].as_i64()),
        (400, Some(106)),
        "{body}"
    );
    let (status, found) = mp_get(&sandbox, "/v1/customers/search?email=ana@example.com").await;
    assert_eq!((status, found["paging"]["total"].as_i64()), (200, Some(1)));
    assert_eq!(found["results"][0]["id"], ana.as_str());
    let (status, body) = mp_get(&sandbox, "/v1/customers/123-nobody").await;
    assert_eq!((status, body["error"].as_str()), (404, Some("not_found")));

    // A card saved from a token: the token's card, and the token is used up.
    let token = mp_card_token(&sandbox, "FUND").await;
    let cards = format!("/v1/customers/{ana}/cards");
    let (status, card) = mp_json(&sandbox, &cards, &json!({"token": token}), None).await;
    assert_eq!(status, 201, "{card}");
    let card_id = card["id"].as_str().unwrap();
    assert!(card_id.bytes().all(|b| b.is_ascii_digit()), "{card}");
    assert_eq!(card["customer_id"], ana.as_str());
    assert_eq!(card["payment_method"]["id"], "visa");
    assert_eq!(
        (
            card["first_six_digits"].as_str(),
            card["last_four_digits"].as_str()
        ),
        (Some("423564"), Some("5682"))
    );
    assert_eq!(card["cardholder"]["name"], "FUND");
    let (status, body) = mp_json(&sandbox, &cards, &json!({"token": token}), None).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = mp_json(&sandbox, &cards, &json!({}), None).await;
    assert_eq!(
        (status, body["cause"][0]["code"].as_i64()),
        (400, Some(119))
    );
    let (status, body) = mp_json(
        &sandbox,
        "/v1/customers/123-nobody/cards",
        &json!({"token": mp_card_token(&sandbox, "APRO").await}),
        None,
    )
    .await;
    assert_eq!(status, 404, "{body}");
    let (status, list) = mp_get(&sandbox, &cards).await;
    assert_eq!((status, list.as_array().map(Vec::len)), (200, Some(1)));
    let (status, one) = mp_get(&sandbox, &format!("{cards}/{card_id}")).await;
    assert_eq!((status, one["id"].as_str()), (200, Some(card_id)));
    let (_, customer) = mp_get(&sandbox, &format!("/v1/customers/{ana}")).await;
    assert_eq!(customer["cards"][0]["id"], card_id);
    // Another customer's card is not found under Bia.
    let bia = mp_customer(&sandbox, "bia@example.com").await;
    let (status, _) = mp_get(&sandbox, &format!("/v1/customers/{bia}/cards/{card_id}")).await;
    assert_eq!(status, 404);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_saved_cards_token_charges_it_for_its_customer_only() {
    let sandbox = start(settings(None)).await;
    let (ana, bia) = (
        mp_customer(&sandbox, "ana@example.com").await,
        mp_customer(&sandbox, "bia@example.com").await,
    );
    let funds = mp_saved_card(&sandbox, &ana, "FUND").await;
    let good = mp_saved_card(&sandbox, &ana, "APRO").await;
    // Tokens of a saved card: only of its customer; an unknown card is not found.
    let (status, body) = mp_json(
        &sandbox,
        "/v1/card_tokens",
        &json!({"card_id": funds, "customer_id": bia}),
        None,
    )
    .await;
    assert_eq!(
        (status, body["cause"][0]["code"].as_i64()),
        (400, Some(140)),
        "{body}"
    );
    let (status, _) = mp_json(
        &sandbox,
        "/v1/card_tokens",
        &json!({"card_id": "9999999"}),
        None,
    )
    .await;
    assert_eq!(status, 404);

    let token = mp_card_id_token(&sandbox, &funds, &ana).await;
    // Without payer.type = customer, or for another customer: 400, and the token is still usable.
    let mut by_email = saved_card_payment(&token, &ana);
    by_email["payer"] = json!({"email": "ana@example.com"});
    let (status, body) = mp_json(&sandbox, "/v1/payments", &by_email, Some("p-1")).await;
    assert_eq!(
        (status, body["cause"][0]["code"].as_i64()),
        (400, Some(2034)),
        "{body}"
    );
    let (status, body) = mp_json(
        &sandbox,
        "/v1/payments",
        &saved_card_payment(&token, &bia),
        Some("p-2"),
    )
    .await;
    assert_eq!(
        (status, body["cause"][0]["code"].as_i64()),
        (400, Some(2034)),
        "{body}"
    );
    let (status, body) = mp_json(
        &sandbox,
        "/v1/payments",
        &saved_card_payment(&token, "1-nobody"),
        Some("p-3"),
    )
    .await;
    assert_eq!(
        (status, body["cause"][0]["code"].as_i64()),
        (400, Some(2002)),
        "{body}"
    );
    // A malformed point_of_interaction is refused before anything executes.
    let mut bad_poi = saved_card_payment(&token, &ana);
    bad_poi["point_of_interaction"]["transaction_data"]["billing_date"] = json!("2026-13-01");
    let (status, _) = mp_json(&sandbox, "/v1/payments", &bad_poi, Some("p-4")).await;
    assert_eq!(status, 400);
    assert_eq!(sandbox.control().charges().total_charges, 0);

    // For Ana, no email needed: the FUND holder carried over to the saved card rejects it.
    let (status, payment) = mp_json(
        &sandbox,
        "/v1/payments",
        &saved_card_payment(&token, &ana),
        Some("p-5"),
    )
    .await;
    assert_eq!(status, 201, "{payment}");
    assert_eq!(
        (
            payment["status"].as_str(),
            payment["status_detail"].as_str()
        ),
        (Some("rejected"), Some("cc_rejected_insufficient_amount"))
    );
    assert_eq!(payment["card"]["id"], funds.as_str());
    assert_eq!(payment["payer"]["id"], ana.as_str());
    assert_eq!(payment["point_of_interaction"]["type"], "SUBSCRIPTIONS");
    assert_eq!(
        payment["point_of_interaction"]["transaction_data"]["subscription_sequence"]["number"],
        2
    );
    // Single use.
    let (status, body) = mp_json(
        &sandbox,
        "/v1/payments",
        &saved_card_payment(&token, &ana),
        Some("p-6"),
    )
    .await;
    assert_eq!(
        (status, body["cause"][0]["code"].as_i64()),
        (400, Some(2006))
    );
    // The APRO card is approved.
    let token = mp_card_id_token(&sandbox, &good, &ana).await;
    let (status, payment) = mp_json(
        &sandbox,
        "/v1/payments",
        &saved_card_payment(&token, &ana),
        Some("p-7"),
    )
    .await;
    assert_eq!(
        (status, payment["status"].as_str()),
        (201, Some("approved"))
    );
    let report = sandbox.control().charges();
    assert_eq!(report.total_charges, 2);
    assert_eq!(report.payment_method_charges("mercadopago", &funds), 1);
    assert_eq!(report.payment_method_charges("mercadopago", &good), 1);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_decides_the_nth_payment_of_a_saved_card() {
    let sandbox = start(settings(None)).await;
    let ana = mp_customer(&sandbox, "ana@example.com").await;
    let card = mp_saved_card(&sandbox, &ana, "APRO").await;
    let path = format!("/_sandbox/payment_methods/mercadopago/{card}/script");
    let response = control_post(
        &sandbox,
        &path,
        &json!({"outcomes": ["cc_rejected_insufficient_amount", "succeed", "cc_rejected_card_disabled"]}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let mut seen = Vec::new();
    for i in 0..4 {
        let token = mp_card_id_token(&sandbox, &card, &ana).await;
        let key = format!("s-{i}");
        let (status, payment) = mp_json(
            &sandbox,
            "/v1/payments",
            &saved_card_payment(&token, &ana),
            Some(&key),
        )
        .await;
        assert_eq!(status, 201, "{payment}");
        seen.push(payment["status_detail"].as_str().unwrap().to_owned());
        // A retry under the same key replays the payment and is not a use.
        let (_, replay) = mp_json(
            &sandbox,
            "/v1/payments",
            &saved_card_payment(&token, &ana),
            Some(&key),
        )
        .await;
        assert_eq!(replay["id"], payment["id"]);
    }
    assert_eq!(
        seen,
        [
            "cc_rejected_insufficient_amount",
            "accredited",
            "cc_rejected_card_disabled",
            "accredited"
        ]
    );
    let script = control_get(&sandbox, &path).await;
    assert_eq!(script["uses"], 4);
    assert_eq!(
        sandbox
            .control()
            .charges()
            .payment_method_charges("mercadopago", &card),
        4
    );
    // Stripe's decline codes are not Mercado Pago's outcomes.
    let response = control_post(
        &sandbox,
        &path,
        &json!({"outcomes": ["insufficient_funds"]}),
    )
    .await;
    assert_eq!(response.status(), 400);
    let why: Value = response.json().await.unwrap();
    assert!(
        why["error"].as_str().unwrap().contains("cc_rejected_"),
        "{why}"
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn customers_paths_go_to_the_provider_a_request_is_for() {
    // With API keys: the key decides.
    let sandbox = start(settings(None)).await;
    let (status, stripe_customer) = {
        let response = stripe_post(
            &sandbox,
            "/v1/customers",
            &[("email", "ana@example.com")],
            None,
        )
        .await;
        (
            response.status().as_u16(),
            response.json::<Value>().await.unwrap(),
        )
    };
    assert_eq!(
        (status, stripe_customer["object"].as_str()),
        (200, Some("customer"))
    );
    let cus = stripe_customer["id"].as_str().unwrap();
    let mp = mp_customer(&sandbox, "ana@example.com").await;
    let (status, read) = stripe_get(&sandbox, &format!("/v1/customers/{cus}")).await;
    assert_eq!((status, read["id"].as_str()), (200, Some(cus)));
    let (status, read) = mp_get(&sandbox, &format!("/v1/customers/{mp}")).await;
    assert_eq!((status, read["id"].as_str()), (200, Some(mp.as_str())));
    // Each provider's 404 in its own format.
    let (status, missing) = mp_get(&sandbox, &format!("/v1/customers/{cus}")).await;
    assert_eq!((status, missing["status"].as_i64()), (404, Some(404)));
    let (status, missing) = stripe_get(&sandbox, &format!("/v1/customers/{mp}")).await;
    assert_eq!(
        (status, missing["error"]["code"].as_str()),
        (404, Some("resource_missing"))
    );
    sandbox.stop().await;

    // Without keys: the request's shape decides (JSON or a non-`cus_` id: Mercado Pago).
    let sandbox = start_with(|s| {
        for p in &mut s.providers {
            p.api_token = None;
        }
    })
    .await;
    let response = client()
        .post(sandbox.url("/v1/customers"))
        .json(&json!({"email": "bia@example.com"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 201);
    let mp: Value = response.json().await.unwrap();
    let response = client()
        .post(sandbox.url("/v1/customers"))
        .form(&[("email", "bia@example.com")])
        .send()
        .await
        .unwrap();
    let stripe: Value = response.json().await.unwrap();
    assert!(
        stripe["id"].as_str().unwrap().starts_with("cus_"),
        "{stripe}"
    );
    let read: Value = get_as(
        &sandbox,
        &format!("/v1/customers/{}", mp["id"].as_str().unwrap()),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(read["email"], "bia@example.com");
    assert_eq!(read["live_mode"], false);
    let read: Value = get_as(
        &sandbox,
        &format!("/v1/customers/{}", stripe["id"].as_str().unwrap()),
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(read["object"], "customer");
    sandbox.stop().await;
}
