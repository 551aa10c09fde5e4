//! Stripe's PaymentIntent cancel as the real API behaves (<https://docs.stripe.com/api/payment_intents/cancel>):
//! an open intent is `canceled` with `canceled_at` and its reason and a `payment_intent.canceled` event; a retry
//! with the key replays the answer; a succeeded or canceled intent is refused (400 `payment_intent_unexpected_state`)
//! and a canceled one cannot be confirmed; an unknown reason or parameter is refused naming it.

mod common;

use common::*;

#[tokio::test]
async fn an_open_intent_is_canceled_once_and_a_succeeded_one_is_refused() {
    let sandbox = start(settings(None)).await;
    let (status, created) = stripe_post_json(
        &sandbox,
        "/v1/payment_intents",
        &[("amount", "2500"), ("currency", "brl")],
        None,
    )
    .await;
    assert_eq!(status, 200, "{created}");
    assert_eq!(created["status"], "requires_payment_method");
    let id = created["id"].as_str().unwrap().to_owned();
    let cancel = format!("/v1/payment_intents/{id}/cancel");

    let (status, refused) = stripe_post_json(
        &sandbox,
        &cancel,
        &[("cancellation_reason", "expired")],
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "cancellation_reason");
    let (status, refused) = stripe_post_json(&sandbox, &cancel, &[("amount", "1")], None).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["param"], "amount");

    let form = [("cancellation_reason", "abandoned")];
    let (status, canceled) = stripe_post_json(&sandbox, &cancel, &form, Some("cancel-1")).await;
    assert_eq!(status, 200, "{canceled}");
    assert_eq!(canceled["status"], "canceled");
    assert_eq!(canceled["cancellation_reason"], "abandoned");
    assert!(canceled["canceled_at"].as_i64().is_some(), "{canceled}");
    // The same key: the same answer, nothing done again.
    let (status, replayed) = stripe_post_json(&sandbox, &cancel, &form, Some("cancel-1")).await;
    assert_eq!((status, &replayed), (200, &canceled));
    // Another attempt: refused with the state it is in; a confirm too.
    let (status, again) = stripe_post_json(&sandbox, &cancel, &[], None).await;
    assert_eq!(status, 400, "{again}");
    assert_eq!(again["error"]["code"], "payment_intent_unexpected_state");
    assert!(
        again["error"]["message"]
            .as_str()
            .unwrap()
            .contains("status of canceled"),
        "{again}"
    );
    let (status, confirm) = stripe_post_json(
        &sandbox,
        &format!("/v1/payment_intents/{id}/confirm"),
        &[("payment_method", "pm_card_visa")],
        None,
    )
    .await;
    assert_eq!(status, 400, "{confirm}");
    assert_eq!(confirm["error"]["code"], "payment_intent_unexpected_state");
    let (_, events) = stripe_get(&sandbox, "/v1/events?type=payment_intent.canceled").await;
    let events = events["data"].as_array().unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["data"]["object"]["id"], id.as_str());

    // A payment the customer completed cannot be canceled (refund it instead).
    let paid = succeeded_intent(&sandbox, 1000).await;
    let (status, refused) = stripe_post_json(
        &sandbox,
        &format!("/v1/payment_intents/{paid}/cancel"),
        &[],
        None,
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "payment_intent_unexpected_state");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("status of succeeded"),
        "{refused}"
    );
    let (status, missing) =
        stripe_post_json(&sandbox, "/v1/payment_intents/pi_nope/cancel", &[], None).await;
    assert_eq!(status, 404, "{missing}");
}
