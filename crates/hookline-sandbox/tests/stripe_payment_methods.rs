//! Stripe refuses what Stripe refuses (confirming without a payment method, `off_session` without `confirm` or a
//! customer, unknown payment methods, a method saved to another customer, a malformed `Stripe-Version`) and
//! serves what merchants' SDKs call: test cards (declines, 3-D Secure on and off session), customers and saved
//! methods, the 3-D Secure completion through the control API, list and search of payment intents, refund lists.

mod common;

use common::*;
use hookline_sandbox::Outcome;
use serde_json::{json, Value};

async fn post_json(
    sandbox: &hookline_sandbox::RunningSandbox,
    path: &str,
    form: &[(&str, &str)],
) -> (u16, Value) {
    let response = stripe_post(sandbox, path, form, None).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

async fn customer(sandbox: &hookline_sandbox::RunningSandbox) -> String {
    let (status, body) =
        post_json(sandbox, "/v1/customers", &[("email", "buyer@example.com")]).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "customer");
    body["id"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirming_needs_a_known_payment_method_and_off_session_needs_confirm_and_a_customer() {
    let sandbox = start(settings(None)).await;
    let base = [("amount", "1000"), ("currency", "brl")];
    // confirm=true without a payment method: Stripe's 400, with the intent in the error.
    let (status, body) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[base[0], base[1], ("confirm", "true")],
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "payment_intent_unexpected_state");
    assert!(body["error"]["message"].as_str().unwrap().starts_with(
        "You cannot confirm this PaymentIntent because it's missing a payment method."
    ));
    assert_eq!(
        body["error"]["payment_intent"]["status"],
        "requires_payment_method"
    );
    // The same through /confirm.
    let (_, open) = post_json(&sandbox, "/v1/payment_intents", &base).await;
    let confirm = format!(
        "/v1/payment_intents/{}/confirm",
        open["id"].as_str().unwrap()
    );
    let (status, body) = post_json(&sandbox, &confirm, &[]).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "payment_intent_unexpected_state");
    // An unknown payment method: 400 resource_missing, nothing created.
    let (status, body) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            base[0],
            base[1],
            ("confirm", "true"),
            ("payment_method", "pm_nope"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "resource_missing");
    assert_eq!(body["error"]["param"], "payment_method");
    // off_session needs confirm=true, and a customer.
    let (status, body) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            base[0],
            base[1],
            ("off_session", "true"),
            ("payment_method", "pm_card_visa"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "off_session");
    let (status, body) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            base[0],
            base[1],
            ("confirm", "true"),
            ("off_session", "true"),
            ("payment_method", "pm_card_visa"),
        ],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "payment_method");
    // An unknown customer.
    let (status, body) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[base[0], base[1], ("customer", "cus_nope")],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "resource_missing");
    assert_eq!(sandbox.control().charges().total_charges, 0);
    // The intent created with confirm=true exists (its error carries it), and the one confirmed later.
    assert_eq!(sandbox.control().charges().providers[0].payment_intents, 2);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn test_cards_decline_and_forced_outcomes_override_them() {
    let sandbox = start(settings(None)).await;
    for (pm, decline) in [
        ("pm_card_chargeDeclined", "generic_decline"),
        (
            "pm_card_chargeDeclinedInsufficientFunds",
            "insufficient_funds",
        ),
    ] {
        let (status, body) = post_json(
            &sandbox,
            "/v1/payment_intents",
            &[
                ("amount", "900"),
                ("currency", "brl"),
                ("confirm", "true"),
                ("payment_method", pm),
            ],
        )
        .await;
        assert_eq!(status, 402, "{body}");
        let e = &body["error"];
        assert_eq!(e["type"], "card_error");
        assert_eq!(e["code"], "card_declined");
        assert_eq!(e["decline_code"], decline);
        assert_eq!(e["payment_intent"]["status"], "requires_payment_method");
        assert_eq!(
            e["payment_intent"]["last_payment_error"]["decline_code"],
            decline
        );
    }
    for pm in ["pm_card_visa", "pm_card_mastercard"] {
        let (status, body) = post_json(
            &sandbox,
            "/v1/payment_intents",
            &[
                ("amount", "900"),
                ("currency", "brl"),
                ("confirm", "true"),
                ("payment_method", pm),
            ],
        )
        .await;
        assert_eq!((status, body["status"].as_str()), (200, Some("succeeded")));
    }
    // A forced outcome overrides the card, both ways.
    let control = sandbox.control();
    let declined = Outcome {
        status: "declined".into(),
        status_detail: Some("expired_card".into()),
    };
    control.push_outcome("stripe", declined, 1).unwrap();
    let (status, body) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "900"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("payment_method", "pm_card_visa"),
        ],
    )
    .await;
    assert_eq!(
        (status, body["error"]["decline_code"].as_str()),
        (402, Some("expired_card"))
    );
    let succeeded = Outcome {
        status: "succeeded".into(),
        status_detail: None,
    };
    control.push_outcome("stripe", succeeded, 1).unwrap();
    let (status, _) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "900"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("payment_method", "pm_card_chargeDeclined"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    let report = control.charges();
    let stripe = report.provider("stripe").unwrap();
    assert_eq!((stripe.charges, stripe.captured_charges), (6, 3));
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_d_secure_requires_action_until_the_control_api_completes_it() {
    let receiver = Receiver::start(|_| Answer::Status(200)).await;
    let sandbox = start(settings(Some(&receiver.url))).await;
    let cus = customer(&sandbox).await;
    // On session with a return_url: redirect_to_url.
    let (status, pi) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "2500"),
            ("currency", "eur"),
            ("confirm", "true"),
            ("customer", &cus),
            ("payment_method", "pm_card_threeDSecure2Required"),
            ("return_url", "https://shop.example/back"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{pi}");
    assert_eq!(pi["status"], "requires_action");
    assert_eq!(pi["next_action"]["type"], "redirect_to_url");
    assert_eq!(
        pi["next_action"]["redirect_to_url"]["return_url"],
        "https://shop.example/back"
    );
    assert!(pi["next_action"]["redirect_to_url"]["url"]
        .as_str()
        .unwrap()
        .starts_with("https://"));
    assert_eq!(sandbox.control().charges().total_charges, 0);
    let id = pi["id"].as_str().unwrap();
    // Passed, over HTTP: charged once, and the succeeded event is sent.
    let response = control_post(
        &sandbox,
        &format!("/_sandbox/payment_intents/stripe/{id}/authenticate"),
        &json!({"outcome": "succeed"}),
    )
    .await;
    assert_eq!(response.status(), 200);
    let (_, fetched) = stripe_get(&sandbox, &format!("/v1/payment_intents/{id}")).await;
    assert_eq!(fetched["status"], "succeeded");
    assert_eq!(fetched["next_action"], Value::Null);
    assert!(sandbox
        .control()
        .complete_authentication("stripe", id, true)
        .is_err());
    let report = sandbox.control().charges();
    assert_eq!(report.provider("stripe").unwrap().captured_charges, 1);

    // Without a return_url: use_stripe_sdk; failing the challenge fails the payment.
    let (_, pi) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "2500"),
            ("currency", "eur"),
            ("confirm", "true"),
            ("payment_method", "pm_card_authenticationRequired"),
        ],
    )
    .await;
    assert_eq!(pi["next_action"]["type"], "use_stripe_sdk");
    let failed_id = pi["id"].as_str().unwrap().to_owned();
    let failed = sandbox
        .control()
        .complete_authentication("stripe", &failed_id, false)
        .unwrap();
    assert_eq!(failed["status"], "requires_payment_method");
    assert_eq!(
        failed["last_payment_error"]["code"],
        "payment_intent_authentication_failure"
    );

    // Off session, such a card is declined: authentication_required.
    let saved: Value = stripe_post(
        &sandbox,
        "/v1/payment_methods/pm_card_authenticationRequired/attach",
        &[("customer", &cus)],
        None,
    )
    .await
    .json()
    .await
    .unwrap();
    let (status, body) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "2500"),
            ("currency", "eur"),
            ("confirm", "true"),
            ("off_session", "true"),
            ("customer", &cus),
            ("payment_method", saved["id"].as_str().unwrap()),
        ],
    )
    .await;
    assert_eq!(status, 402, "{body}");
    assert_eq!(body["error"]["type"], "card_error");
    assert_eq!(body["error"]["code"], "authentication_required");
    assert_eq!(
        body["error"]["payment_intent"]["status"],
        "requires_payment_method"
    );

    // The webhooks: requires_action, then succeeded (first) and payment_failed (second).
    let sent = |kind: &'static str, intent: String| {
        let deliveries = sandbox.control().deliveries();
        deliveries
            .iter()
            .any(|d| d.event_type == kind && d.resource_id == intent)
    };
    assert!(sent("payment_intent.requires_action", id.to_owned()));
    assert!(sent("payment_intent.succeeded", id.to_owned()));
    assert!(sent("payment_intent.payment_failed", failed_id.clone()));
    // And the succeeded event reaches the receiver, signed.
    eventually(
        std::time::Duration::from_secs(10),
        "payment_intent.succeeded delivered",
        || async {
            receiver.received().iter().any(|r| {
                r.verified.is_ok()
                    && r.body["type"] == "payment_intent.succeeded"
                    && r.body["data"]["object"]["id"] == id
            })
        },
    )
    .await;
    sandbox.stop().await;
    receiver.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_methods_belong_to_their_customer() {
    let sandbox = start(settings(None)).await;
    let (alice, bob) = (customer(&sandbox).await, customer(&sandbox).await);
    let (status, pm) = post_json(
        &sandbox,
        "/v1/payment_methods/pm_card_visa/attach",
        &[("customer", &alice)],
    )
    .await;
    assert_eq!(status, 200, "{pm}");
    let pm_id = pm["id"].as_str().unwrap();
    assert!(pm_id.starts_with("pm_") && pm_id != "pm_card_visa");
    assert_eq!(pm["customer"], alice.as_str());
    let (_, fetched) = stripe_get(&sandbox, &format!("/v1/payment_methods/{pm_id}")).await;
    assert_eq!(fetched["card"]["last4"], "4242");
    let (status, test_pm) = stripe_get(&sandbox, "/v1/payment_methods/pm_card_mastercard").await;
    assert_eq!(
        (status, test_pm["card"]["brand"].as_str()),
        (200, Some("mastercard"))
    );
    let (status, _) = stripe_get(&sandbox, "/v1/payment_methods/pm_nope").await;
    assert_eq!(status, 404);
    let (status, got) = stripe_get(&sandbox, &format!("/v1/customers/{alice}")).await;
    assert_eq!(
        (status, got["email"].as_str()),
        (200, Some("buyer@example.com"))
    );
    // Attached to Alice: refused for Bob (at attach and at charge), and without a customer.
    let (status, _) = post_json(
        &sandbox,
        &format!("/v1/payment_methods/{pm_id}/attach"),
        &[("customer", &bob)],
    )
    .await;
    assert_eq!(status, 400);
    for customer in [Some(bob.as_str()), None] {
        let mut form = vec![
            ("amount", "1000"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("payment_method", pm_id),
        ];
        if let Some(c) = customer {
            form.push(("customer", c));
        }
        let (status, body) = post_json(&sandbox, "/v1/payment_intents", &form).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    // For Alice, off session: charged.
    let (status, body) = post_json(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "1000"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("off_session", "true"),
            ("customer", &alice),
            ("payment_method", pm_id),
        ],
    )
    .await;
    assert_eq!((status, body["status"].as_str()), (200, Some("succeeded")));
    assert_eq!(body["payment_method"], pm_id);
    assert_eq!(sandbox.control().charges().total_charges, 1);
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn intents_are_listed_searched_by_metadata_and_refunds_listed_with_metadata() {
    let sandbox = start(settings(None)).await;
    let cus = customer(&sandbox).await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let tag = format!("pi_hl_{i}");
        let mut form = vec![
            ("amount", "1000"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("payment_method", "pm_card_visa"),
            ("metadata[hookline_intent]", tag.as_str()),
        ];
        if i % 2 == 0 {
            form.push(("customer", &cus));
        }
        let (_, body) = post_json(&sandbox, "/v1/payment_intents", &form).await;
        ids.push(body["id"].as_str().unwrap().to_owned());
    }
    let (status, page) = stripe_get(&sandbox, "/v1/payment_intents?limit=2").await;
    assert_eq!(status, 200);
    assert_eq!(page["object"], "list");
    assert_eq!(page["url"], "/v1/payment_intents");
    assert_eq!(page["has_more"], true);
    let listed: Vec<&str> = page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap())
        .collect();
    assert_eq!(listed, vec![ids[4].as_str(), ids[3].as_str()]);
    let (_, next) = stripe_get(
        &sandbox,
        &format!("/v1/payment_intents?limit=2&starting_after={}", ids[3]),
    )
    .await;
    assert_eq!(next["data"][0]["id"], ids[2].as_str());
    let (_, before) = stripe_get(
        &sandbox,
        &format!("/v1/payment_intents?ending_before={}", ids[1]),
    )
    .await;
    assert_eq!(before["data"].as_array().unwrap().len(), 3);
    let (_, mine) = stripe_get(&sandbox, &format!("/v1/payment_intents?customer={cus}")).await;
    assert_eq!(mine["data"].as_array().unwrap().len(), 3);
    let (status, _) = stripe_get(&sandbox, "/v1/payment_intents?limit=101").await;
    assert_eq!(status, 400);

    let query = "metadata['hookline_intent']:'pi_hl_3' AND status:'succeeded'";
    let url = format!("/v1/payment_intents/search?query={}", form_escape(query));
    let (status, found) = stripe_get(&sandbox, &url).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["object"], "search_result");
    assert_eq!(found["data"].as_array().unwrap().len(), 1);
    assert_eq!(found["data"][0]["id"], ids[3].as_str());
    assert_eq!(found["next_page"], Value::Null);
    let (_, none) = stripe_get(
        &sandbox,
        &format!(
            "/v1/payment_intents/search?query={}",
            form_escape("metadata['hookline_intent']:'pi_hl_9'")
        ),
    )
    .await;
    assert_eq!(none["data"].as_array().unwrap().len(), 0);
    let (_, paged) = stripe_get(
        &sandbox,
        &format!(
            "/v1/payment_intents/search?limit=2&query={}",
            form_escape("status:'succeeded'")
        ),
    )
    .await;
    assert_eq!(paged["has_more"], true);
    let next = paged["next_page"].as_str().unwrap();
    let (_, page2) = stripe_get(
        &sandbox,
        &format!(
            "/v1/payment_intents/search?limit=2&page={next}&query={}",
            form_escape("status:'succeeded'")
        ),
    )
    .await;
    assert_eq!(page2["data"][0]["id"], ids[2].as_str());
    let (status, _) = stripe_get(
        &sandbox,
        &format!(
            "/v1/payment_intents/search?query={}",
            form_escape("email:'x'")
        ),
    )
    .await;
    assert_eq!(status, 400);

    // Refunds carry their metadata and are listed by payment intent.
    let (status, refund) = post_json(
        &sandbox,
        "/v1/refunds",
        &[
            ("payment_intent", &ids[0]),
            ("amount", "300"),
            ("metadata[hookline_refund]", "re_hl_1"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(refund["metadata"]["hookline_refund"], "re_hl_1");
    post_json(&sandbox, "/v1/refunds", &[("payment_intent", &ids[1])]).await;
    let (_, refunds) =
        stripe_get(&sandbox, &format!("/v1/refunds?payment_intent={}", ids[0])).await;
    assert_eq!(refunds["object"], "list");
    assert_eq!(refunds["data"].as_array().unwrap().len(), 1);
    assert_eq!(refunds["data"][0]["metadata"]["hookline_refund"], "re_hl_1");
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_version_is_echoed_validated_or_defaulted() {
    let sandbox = start(settings(None)).await;
    let ask = |version: Option<&'static str>| {
        let request = client()
            .get(sandbox.url("/v1/payment_intents"))
            .bearer_auth(STRIPE_TOKEN);
        let request = match version {
            Some(v) => request.header("Stripe-Version", v),
            None => request,
        };
        request.send()
    };
    let response = ask(Some("2026-10-28.endive")).await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["stripe-version"], "2026-10-28.endive");
    let response = ask(Some("2020-08-27")).await.unwrap();
    assert_eq!(response.headers()["stripe-version"], "2020-08-27");
    let response = ask(None).await.unwrap();
    assert_eq!(response.headers()["stripe-version"], "2024-06-20");
    for bad in ["2019-2-19", "latest", "2026-13-01", "2026-10-28.Endive!"] {
        let response = ask(Some(bad)).await.unwrap();
        assert_eq!(response.status(), 400, "{bad}");
        let body: Value = response.json().await.unwrap();
        assert!(body["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("Invalid Stripe API version"));
    }
    // POSTs too, before anything executes.
    let response = client()
        .post(sandbox.url("/v1/customers"))
        .bearer_auth(STRIPE_TOKEN)
        .header("Stripe-Version", "nope")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    sandbox.stop().await;
}

fn form_escape(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}
