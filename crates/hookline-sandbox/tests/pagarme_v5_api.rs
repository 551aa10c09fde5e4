//! Pagar.me v5 over HTTP: Basic authentication with the secret key, orders paid or declined by Pagar.me's test
//! cards, invalid orders in Pagar.me's 422 body, the `Idempotency-Key` replayed for 24 hours from its first use
//! (counted on the sandbox clock) and forgotten after, refunds by cancelling the charge (total, partial, never
//! beyond what was paid — also concurrently), lists with filters and paging, Pix and boleto.

mod common;

use std::time::Duration;

use common::*;
use futures::future::join_all;
use serde_json::{json, Value};

const APPROVED: &str = "4000000000000010";
const DECLINED: &str = "4000000000000028";
const PROCESSING: &str = "4000000000000036";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_takes_the_secret_key_as_basic_auth_only() {
    let sandbox = start_pagarme(None).await;
    let http = client();
    let url = sandbox.url("/core/v5/orders");
    let anonymous = http.get(&url).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let body: Value = anonymous.json().await.unwrap();
    assert_eq!(
        body["message"],
        "Authorization has been denied for this request."
    );
    for request in [
        http.get(&url).bearer_auth(PG_KEY),
        http.get(&url).basic_auth("sk_test_someone_else", Some("")),
    ] {
        assert_eq!(request.send().await.unwrap().status(), 401);
    }
    let (status, list) = pg_get(&sandbox, "/core/v5/orders").await;
    assert_eq!(status, 200);
    assert_eq!(list["paging"]["total"], 0);

    // An order without the key creates nothing.
    let token = pg_token(&sandbox, APPROVED).await;
    let refused = http
        .post(&url)
        .json(&pg_order("pi_anon", 1000, pg_card_payment(&token)))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    assert_eq!(sandbox.control().charges().total_charges, 0);

    // Tokens take the public key as `appId`, never the secret key.
    let card = json!({"type": "card", "card": {"number": APPROVED, "holder_name": "T", "exp_month": 1, "exp_year": 2040}});
    for path in ["/core/v5/tokens", "/core/v5/tokens?appId=pk_test_wrong"] {
        let response = http
            .post(sandbox.url(path))
            .basic_auth(PG_KEY, Some(""))
            .json(&card)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{path}");
    }
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cards_pay_decline_or_process_and_invalid_orders_get_422() {
    let sandbox = start_pagarme(None).await;
    let paid = pg_card_order(&sandbox, "pi_paid", 2500, APPROVED, Some("k-paid")).await;
    assert!(paid["id"].as_str().unwrap().starts_with("or_"));
    assert_eq!(
        (paid["status"].as_str(), paid["code"].as_str()),
        (Some("paid"), Some("pi_paid"))
    );
    assert_eq!(
        (paid["amount"].as_i64(), paid["currency"].as_str()),
        (Some(2500), Some("BRL"))
    );
    let charge = &paid["charges"][0];
    assert!(charge["id"].as_str().unwrap().starts_with("ch_"));
    assert_eq!(charge["status"], "paid");
    assert_eq!(charge["paid_amount"], 2500);
    assert_eq!(charge["payment_method"], "credit_card");
    let transaction = &charge["last_transaction"];
    assert!(transaction["id"].as_str().unwrap().starts_with("tran_"));
    assert_eq!(transaction["transaction_type"], "credit_card");
    assert_eq!(transaction["status"], "captured");
    assert_eq!(transaction["card"]["last_four_digits"], "0010");
    assert_eq!(transaction["gateway_response"]["errors"], json!([]));
    assert_eq!(paid["customer"]["name"], "Tony Stark");
    assert_eq!(paid["metadata"]["intent"], "pi_paid");

    let declined = pg_card_order(&sandbox, "pi_declined", 2500, DECLINED, Some("k-declined")).await;
    assert_eq!(declined["status"], "failed");
    let charge = &declined["charges"][0];
    assert_eq!(
        (charge["status"].as_str(), charge["paid_amount"].as_i64()),
        (Some("failed"), Some(0))
    );
    assert_eq!(charge["last_transaction"]["status"], "not_authorized");
    assert_eq!(charge["last_transaction"]["success"], false);
    assert!(charge["last_transaction"]["acquirer_message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));

    // Processing until the control API confirms it.
    let processing = pg_card_order(&sandbox, "pi_proc", 700, PROCESSING, None).await;
    assert_eq!(processing["status"], "pending");
    let charge_id = processing["charges"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(processing["charges"][0]["status"], "processing");
    let confirmed = control_post(
        &sandbox,
        &format!("/_sandbox/payments/pagarme/{charge_id}/status"),
        &json!({"status": "paid"}),
    )
    .await;
    assert_eq!(confirmed.status(), 200);
    let (_, fetched) = pg_get(&sandbox, &format!("/core/v5/charges/{charge_id}")).await;
    assert_eq!(
        (
            fetched["status"].as_str(),
            fetched["order"]["status"].as_str()
        ),
        (Some("paid"), Some("paid"))
    );

    let report = sandbox.control().charges();
    let book = report.provider("pagarme").unwrap();
    assert_eq!(
        (book.charges, book.captured_charges, book.orders),
        (3, 2, 3)
    );

    // Invalid orders: every field at once, nothing created, nothing saved under the key.
    let (status, error) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &json!({"customer": {"email": "x"}, "items": [{"amount": -5, "quantity": 0}], "payments": [{"payment_method": "credit_card"}]}),
        Some("k-bad"),
    )
    .await;
    assert_eq!(status, 422);
    assert_eq!(error["message"], "The request is invalid.");
    for field in [
        "order.customer.name",
        "order.items[0].amount",
        "order.items[0].description",
        "order.payments[0].credit_card",
    ] {
        assert!(error["errors"][field].is_array(), "{field}: {error}");
    }
    let (status, _) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order("pi_x", 100, pg_card_payment("token_unknown")),
        Some("k-bad"),
    )
    .await;
    assert_eq!(status, 422, "an unknown token");
    assert_eq!(
        sandbox
            .control()
            .charges()
            .provider("pagarme")
            .unwrap()
            .charges,
        3
    );
    let (status, _) = pg_get(&sandbox, "/core/v5/orders/or_nope").await;
    assert_eq!(status, 404);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_replays_its_first_answer_for_24_hours_from_first_use_then_is_forgotten() {
    let sandbox = start_pagarme(None).await;
    let token = pg_token(&sandbox, APPROVED).await;
    let body = pg_order("pi_key", 5000, pg_card_payment(&token));
    let first = pg_request(
        reqwest::Method::POST,
        &sandbox,
        "/core/v5/orders",
        Some("intent-key"),
    )
    .json(&body)
    .send()
    .await
    .unwrap();
    assert_eq!(first.status(), 200);
    let first = first.bytes().await.unwrap();

    // The same key with another body, now and just before the window closes: the first answer, byte for byte.
    let other = pg_order("pi_other", 1, pg_card_payment("token_whatever"));
    for advance in [0, 24 * 3600 - 60] {
        sandbox
            .control()
            .advance_clock(Duration::from_secs(advance))
            .unwrap();
        let replay = pg_request(
            reqwest::Method::POST,
            &sandbox,
            "/core/v5/orders",
            Some("intent-key"),
        )
        .json(&other)
        .send()
        .await
        .unwrap();
        assert_eq!(replay.status(), 200);
        assert_eq!(replay.bytes().await.unwrap(), first);
    }
    let report = sandbox.control().charges();
    assert_eq!(report.provider("pagarme").unwrap().charges, 1);
    let key = report.key("pagarme", "intent-key").unwrap();
    assert_eq!(
        (key.requests, key.executed, key.replays, key.charges),
        (3, 1, 2, 1)
    );

    // 24 h after its first use (over HTTP this time) the key is forgotten: the same request is a second order.
    let clock = control_post(&sandbox, "/_sandbox/clock", &json!({"advance_secs": 61})).await;
    assert_eq!(clock.status(), 200);
    assert_eq!(
        clock.json::<Value>().await.unwrap()["offset_secs"],
        24 * 3600 + 1
    );
    let token = pg_token(&sandbox, APPROVED).await;
    let (status, second) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order("pi_key", 5000, pg_card_payment(&token)),
        Some("intent-key"),
    )
    .await;
    assert_eq!(status, 200);
    let first: Value = serde_json::from_slice(&first).unwrap();
    assert_ne!(second["id"], first["id"]);
    assert_eq!(
        sandbox
            .control()
            .charges()
            .provider("pagarme")
            .unwrap()
            .charges,
        2
    );

    // Concurrent first uses of one key: one order; the others wait (409) or replay it.
    let token = pg_token(&sandbox, APPROVED).await;
    let body = pg_order("pi_race", 900, pg_card_payment(&token));
    let answers =
        join_all((0..6).map(|_| pg_post(&sandbox, "/core/v5/orders", &body, Some("race-key"))))
            .await;
    let ok: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 200)
        .map(|(_, b)| b)
        .collect();
    assert!(
        !ok.is_empty() && answers.iter().all(|(s, _)| *s == 200 || *s == 409),
        "{answers:?}"
    );
    assert!(ok.iter().all(|b| b["id"] == ok[0]["id"]));
    assert_eq!(
        sandbox
            .control()
            .charges()
            .key("pagarme", "race-key")
            .unwrap()
            .charges,
        1
    );
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refunds_cancel_the_charge_in_part_or_in_full_and_never_beyond_what_was_paid() {
    let sandbox = start_pagarme(None).await;
    let order = pg_card_order(&sandbox, "pi_refund", 10_000, APPROVED, Some("pay")).await;
    let charge = order["charges"][0]["id"].as_str().unwrap().to_owned();

    let (status, partial) = pg_refund(&sandbox, &charge, Some(3000), Some("refund-1")).await;
    assert_eq!(status, 200, "{partial}");
    assert_eq!(
        (
            partial["status"].as_str(),
            partial["canceled_amount"].as_i64()
        ),
        (Some("paid"), Some(3000))
    );
    assert_eq!(partial["last_transaction"]["status"], "partial_refunded");
    // Replayed with its key: no second refund.
    let (status, replay) = pg_refund(&sandbox, &charge, Some(3000), Some("refund-1")).await;
    assert_eq!((status, &replay), (200, &partial));

    let (status, error) = pg_refund(&sandbox, &charge, Some(8000), Some("refund-2")).await;
    assert_eq!(status, 412);
    assert!(error["message"]
        .as_str()
        .is_some_and(|m| m.contains("greater")));

    // No amount: what is left.
    let (status, full) = pg_refund(&sandbox, &charge, None, Some("refund-3")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (full["status"].as_str(), full["canceled_amount"].as_i64()),
        (Some("canceled"), Some(10_000))
    );
    assert_eq!(full["last_transaction"]["status"], "refunded");
    assert_eq!(full["order"]["status"], "canceled");
    let (status, _) = pg_refund(&sandbox, &charge, None, Some("refund-4")).await;
    assert_eq!(status, 412);
    let (status, _) = pg_refund(&sandbox, "ch_missing", None, None).await;
    assert_eq!(status, 404);

    // Five concurrent partial refunds of 3000 on 10000: three pass, two are refused.
    let order = pg_card_order(&sandbox, "pi_race", 10_000, APPROVED, None).await;
    let charge = order["charges"][0]["id"].as_str().unwrap().to_owned();
    let keys: Vec<String> = (0..5).map(|i| format!("race-{i}")).collect();
    let answers = join_all(
        keys.iter()
            .map(|k| pg_refund(&sandbox, &charge, Some(3000), Some(k))),
    )
    .await;
    let passed = answers.iter().filter(|(s, _)| *s == 200).count();
    assert_eq!(
        (passed, answers.iter().filter(|(s, _)| *s == 412).count()),
        (3, 2),
        "{answers:?}"
    );
    let (_, fetched) = pg_get(&sandbox, &format!("/core/v5/charges/{charge}")).await;
    assert_eq!(
        (
            fetched["canceled_amount"].as_i64(),
            fetched["status"].as_str()
        ),
        (Some(9000), Some("paid"))
    );
    let book = sandbox.control().charges();
    let book = book.provider("pagarme").unwrap();
    assert_eq!((book.refunds, book.refunded_amount), (2 + 3, 10_000 + 9000));

    // A declined charge cannot be refunded.
    let declined = pg_card_order(&sandbox, "pi_no", 500, DECLINED, None).await;
    let (status, _) = pg_refund(
        &sandbox,
        declined["charges"][0]["id"].as_str().unwrap(),
        None,
        None,
    )
    .await;
    assert_eq!(status, 412);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_filter_and_page_newest_first() {
    let sandbox = start_pagarme(None).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let number = if i == 2 { DECLINED } else { APPROVED };
        let order = pg_card_order(&sandbox, &format!("code-{i}"), 100 + i, number, None).await;
        ids.push(order["id"].as_str().unwrap().to_owned());
    }
    let (status, page1) = pg_get(&sandbox, "/core/v5/orders?size=2").await;
    assert_eq!(status, 200);
    assert_eq!(page1["paging"]["total"], 5);
    let listed: Vec<&str> = page1["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, [ids[4].as_str(), ids[3].as_str()]);
    assert!(page1["paging"]["previous"].is_null());
    let next = page1["paging"]["next"].as_str().unwrap();
    assert!(next.contains("page=2") && next.contains("size=2"), "{next}");
    let (_, page3) = pg_get(&sandbox, "/core/v5/orders?size=2&page=3").await;
    assert_eq!(page3["data"].as_array().unwrap().len(), 1);
    assert!(page3["paging"]["next"].is_null() && page3["paging"]["previous"].is_string());

    let (_, by_code) = pg_get(&sandbox, "/core/v5/orders?code=code-3").await;
    assert_eq!(by_code["paging"]["total"], 1);
    assert_eq!(by_code["data"][0]["id"], ids[3].as_str());
    let (_, failed) = pg_get(&sandbox, "/core/v5/orders?status=failed").await;
    assert_eq!(failed["data"][0]["id"], ids[2].as_str());
    let (_, charges) = pg_get(&sandbox, &format!("/core/v5/charges?order_id={}", ids[1])).await;
    assert_eq!(charges["paging"]["total"], 1);
    assert_eq!(charges["data"][0]["order"]["id"], ids[1].as_str());
    let (_, cards) = pg_get(&sandbox, "/core/v5/charges?payment_method=pix").await;
    assert_eq!(cards["paging"]["total"], 0);
    let (_, future) = pg_get(&sandbox, "/core/v5/orders?created_since=2999-01-01").await;
    assert_eq!(future["paging"]["total"], 0);
    let (_, past) = pg_get(
        &sandbox,
        "/core/v5/charges?created_since=2000-01-01T00:00:00Z&size=10",
    )
    .await;
    assert_eq!(past["paging"]["total"], 5);
    let (status, _) = pg_get(&sandbox, "/core/v5/orders?size=0").await;
    assert_eq!(status, 422);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pix_and_boleto_wait_for_the_payer() {
    let sandbox = start_pagarme(None).await;
    let (status, order) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order(
            "pi_pix",
            1990,
            json!({"payment_method": "pix", "pix": {"expires_in": 3600}}),
        ),
        Some("pix"),
    )
    .await;
    assert_eq!(status, 200, "{order}");
    let charge = &order["charges"][0];
    assert_eq!(
        (order["status"].as_str(), charge["status"].as_str()),
        (Some("pending"), Some("pending"))
    );
    let transaction = &charge["last_transaction"];
    assert_eq!(transaction["transaction_type"], "pix");
    assert_eq!(transaction["status"], "waiting_payment");
    assert!(transaction["qr_code"]
        .as_str()
        .unwrap()
        .starts_with("000201"));
    assert!(transaction["qr_code_url"]
        .as_str()
        .unwrap()
        .starts_with("https://"));
    assert!(transaction["expires_at"].is_string());
    let charge_id = charge["id"].as_str().unwrap().to_owned();

    // Paid over HTTP (named by its order), then a second Pix expires in-process.
    let paid = control_post(
        &sandbox,
        &format!("/_sandbox/pix/pagarme/{}", order["id"].as_str().unwrap()),
        &json!({"outcome": "paid"}),
    )
    .await;
    assert_eq!(paid.status(), 200);
    let (_, fetched) = pg_get(&sandbox, &format!("/core/v5/charges/{charge_id}")).await;
    assert_eq!(
        (fetched["status"].as_str(), fetched["paid_amount"].as_i64()),
        (Some("paid"), Some(1990))
    );
    assert_eq!(fetched["last_transaction"]["status"], "paid");
    let again = control_post(
        &sandbox,
        &format!("/_sandbox/pix/pagarme/{charge_id}"),
        &json!({"outcome": "paid"}),
    )
    .await;
    assert_eq!(again.status(), 400, "a paid Pix is not pending");

    let (_, second) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order("pi_pix2", 500, json!({"payment_method": "pix"})),
        None,
    )
    .await;
    let expired = sandbox
        .control()
        .settle_pix(
            "pagarme",
            second["charges"][0]["id"].as_str().unwrap(),
            false,
        )
        .unwrap();
    assert_eq!(
        (
            expired["status"].as_str(),
            expired["order"]["status"].as_str()
        ),
        (Some("failed"), Some("failed"))
    );

    let (status, boleto) = pg_post(&sandbox, "/core/v5/orders", &pg_order("pi_boleto", 15_000, json!({"payment_method": "boleto", "boleto": {"instructions": "Pagar até o vencimento", "due_at": "2099-01-01T00:00:00Z"}})), None).await;
    assert_eq!(status, 200);
    let transaction = &boleto["charges"][0]["last_transaction"];
    assert_eq!(
        (
            transaction["transaction_type"].as_str(),
            transaction["status"].as_str()
        ),
        (Some("boleto"), Some("generated"))
    );
    assert_eq!(transaction["line"].as_str().unwrap().len(), 47);
    assert!(transaction["url"].as_str().unwrap().starts_with("https://"));
    assert_eq!(transaction["due_at"], "2099-01-01T00:00:00Z");
    let underpaid = sandbox
        .control()
        .set_payment_status(
            "pagarme",
            boleto["id"].as_str().unwrap(),
            "underpaid",
            Some("14000"),
        )
        .unwrap();
    assert_eq!(
        (
            underpaid["status"].as_str(),
            underpaid["paid_amount"].as_i64()
        ),
        (Some("underpaid"), Some(14_000))
    );
    assert_eq!(underpaid["order"]["status"], "pending");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_are_single_use_and_live_sixty_seconds_and_saved_cards_belong_to_their_customer() {
    let sandbox = start_pagarme(None).await;
    let token = pg_token(&sandbox, APPROVED).await;
    assert!(token.starts_with("token_"));
    let first = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order("pi_t1", 100, pg_card_payment(&token)),
        None,
    )
    .await;
    assert_eq!(first.0, 200);
    // The token's card was saved to the order's customer.
    let card_id = first.1["charges"][0]["last_transaction"]["card"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(card_id.starts_with("card_"));
    let (status, _) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order("pi_t2", 100, pg_card_payment(&token)),
        None,
    )
    .await;
    assert_eq!(status, 422, "a used token");
    let stale = pg_token(&sandbox, APPROVED).await;
    sandbox
        .control()
        .advance_clock(Duration::from_secs(61))
        .unwrap();
    let (status, _) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order("pi_t3", 100, pg_card_payment(&stale)),
        None,
    )
    .await;
    assert_eq!(status, 422, "an expired token");

    // Customers and cards: a card charged by id for its own customer only.
    let (status, customer) = pg_post(&sandbox, "/core/v5/customers", &json!({"name": "Pepper Potts", "email": "pepper@example.com", "type": "individual", "document": "98765432100"}), None).await;
    assert_eq!(status, 200);
    let customer_id = customer["id"].as_str().unwrap().to_owned();
    assert!(customer_id.starts_with("cus_"));
    let (status, card) = pg_post(&sandbox, &format!("/core/v5/customers/{customer_id}/cards"), &json!({"number": DECLINED, "holder_name": "Pepper Potts", "exp_month": 3, "exp_year": 2034, "cvv": "321"}), None).await;
    assert_eq!(status, 200, "{card}");
    let saved = card["id"].as_str().unwrap().to_owned();
    assert_eq!(
        (card["last_four_digits"].as_str(), card["brand"].as_str()),
        (Some("0028"), Some("Visa"))
    );
    let (_, cards) = pg_get(&sandbox, &format!("/core/v5/customers/{customer_id}/cards")).await;
    assert_eq!(cards["data"][0]["id"], saved.as_str());
    let mut by_id = pg_order(
        "pi_saved",
        300,
        json!({"payment_method": "credit_card", "credit_card": {"card_id": saved}}),
    );
    by_id.as_object_mut().unwrap().remove("customer");
    by_id["customer_id"] = json!(customer_id);
    let (status, order) = pg_post(&sandbox, "/core/v5/orders", &by_id, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        order["charges"][0]["last_transaction"]["status"],
        "not_authorized"
    );
    let (status, _) = pg_post(
        &sandbox,
        "/core/v5/orders",
        &pg_order(
            "pi_theft",
            300,
            json!({"payment_method": "credit_card", "credit_card": {"card_id": card_id}}),
        ),
        None,
    )
    .await;
    assert_eq!(status, 412, "another customer's card");
    let (status, bad) = pg_post(&sandbox, &format!("/core/v5/customers/{customer_id}/cards"), &json!({"number": "4000000000000011", "holder_name": "X", "exp_month": 1, "exp_year": 2040}), None).await;
    assert_eq!(status, 422);
    assert!(bad["errors"]["number"].is_array(), "{bad}");
    assert_eq!(
        sandbox
            .control()
            .charges()
            .payment_method_charges("pagarme", &saved),
        1
    );
    sandbox.stop().await;
}
