//! A merchant API checkout paying a subscription's cycle, followed by a billing run (`paid_elsewhere`), then
//! declined: the cycle stays in the dunning on the provider's schedule (issue 28), with the REAL processes of
//! [`hookline_tests::billing::BillingRig`].

use hookline_tests::billing::{BillingRig, PROVIDER};
use serde_json::{json, Value};

const OCT: &str = "2026-10";
const SCHEDULE: [u32; 2] = [1, 2];

/// A merchant API checkout paying a cycle that a run followed (`paid_elsewhere`), then declined: the cycle stays
/// in the dunning (retried on the provider's schedule with the saved card), it is not past due after an attempt
/// the billing run never made.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_declined_checkout_the_run_followed_leaves_the_cycle_to_the_dunning() {
    let mut rig = BillingRig::start("billing_followed_checkout", &SCHEDULE).await;
    let (customer, card) = rig.saved_card("cliente").await;
    let id = rig.add_subscription(&customer, &card, 2500).await;
    rig.cluster.start_worker(None).await;
    let (status, intent) = rig
        .api_post(
            "/v1/payment_intents",
            Some("checkout-oct"),
            &json!({"provider": PROVIDER, "amount": 2500, "currency": "brl", "subscription_id": id,
                    "billing_cycle": OCT, "confirm": false}),
        )
        .await;
    assert_eq!(status, 201, "{intent}");
    let checkout = intent["id"].as_str().expect("id").to_owned();
    let run = rig.billing_run(Some(OCT)).await;
    assert_eq!((run.charged, run.paid_elsewhere), (0, 1), "{run:?}");
    let (status, declined) = rig
        .api_post(
            &format!("/v1/payment_intents/{checkout}/confirm"),
            None,
            &json!({"stripe": {"payment_method": "pm_card_chargeDeclinedInsufficientFunds"}}),
        )
        .await;
    assert_eq!(status, 200, "{declined}");
    rig.settled("the declined checkout").await;
    let claim = rig.claim(id, OCT).await.expect("the claim");
    assert_eq!(
        (claim.status.as_str(), claim.attempts, claim.intent.as_str()),
        ("retry_scheduled", 1, checkout.as_str()),
        "{claim:?}"
    );
    assert_eq!(rig.subscription_status(id).await, "active");

    // The retry, with the saved card, pays the cycle.
    assert_eq!(rig.until_retries_due().await, 1);
    let run = rig.billing_run(Some(OCT)).await;
    assert_eq!((run.charged, run.retried), (0, 1), "{run:?}");
    rig.settled("the retry").await;
    let claim = rig.claim(id, OCT).await.expect("the claim");
    assert_eq!(
        (claim.status.as_str(), claim.attempts),
        ("paid", 2),
        "{claim:?}"
    );
    let charges = rig.sandbox.control().charges();
    assert_eq!(charges.payment_method_charges(PROVIDER, &card), 1);
    let facts = rig.all_facts_delivered().await;
    let sub = |t: &str| -> Vec<&Value> {
        facts
            .iter()
            .filter(|f| f.ty == t)
            .map(|f| &f.data)
            .collect()
    };
    let failed = sub("subscription.payment_failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["intent_id"], checkout.as_str());
    assert_eq!(failed[0]["failure_code"], "insufficient_funds");
    assert!(failed[0]["next_attempt_at"].is_string(), "{failed:?}");
    assert_eq!(sub("subscription.past_due").len(), 0);
    let charged = sub("subscription.charged");
    assert_eq!(charged.len(), 1, "{charged:?}");
    assert_eq!(charged[0]["intent_id"], claim.intent.as_str());
    assert_eq!(charged[0]["attempt"], 2);
    rig.teardown().await;
}
