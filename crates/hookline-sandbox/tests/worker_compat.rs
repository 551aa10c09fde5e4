//! What the sandbox sends is what hookline's worker understands: every webhook body goes through the worker's
//! own normaliser (`hookline_payments::normalize`) and yields the expected payment facts.

mod common;

use std::time::Duration;

use common::*;
use hookline_payments::model::{DisputeStatus, PaymentFact, PaymentStatus};
use hookline_payments::normalize::normalize;
use hookline_sandbox::{Delivery, DeliveryBehaviour};
use hookline_signature::Scheme;
use serde_json::Value;

fn facts(d: &Delivery, scheme: Scheme) -> Vec<PaymentFact> {
    let body: Value = serde_json::from_str(&d.body).unwrap();
    let ty = body["type"].as_str().map(str::to_owned);
    normalize(scheme, ty.as_deref(), d.body.as_bytes())
        .unwrap_or_else(|e| panic!("the worker refuses {} {}: {e:?}", d.event_type, d.body))
}

/// Asserts the facts the worker draws from Stripe delivery `d` of the scenario of
/// `every_stripe_event_normalises_to_the_expected_facts`; split out so that neither function runs past ~120 lines.
fn assert_stripe_facts(
    d: &Delivery,
    facts: &[PaymentFact],
    pi: &str,
    refund: &Value,
    dispute: &Value,
) {
    match d.event_type.as_str() {
        "payment_intent.created" => assert!(matches!(
            facts,
            [PaymentFact::Payment {
                status: PaymentStatus::Created,
                ..
            }]
        )),
        "charge.succeeded" | "payment_intent.succeeded" => match facts {
            [PaymentFact::Payment {
                payment_ref,
                status: PaymentStatus::Succeeded,
                amount: Some(money),
                failure: None,
            }] => {
                assert_eq!(payment_ref, &pi);
                assert_eq!((money.amount, money.currency.as_str()), (10_000, "brl"));
            }
            other => panic!("{}: {other:?}", d.event_type),
        },
        "payment_intent.payment_failed" => {
            assert!(matches!(
                facts,
                [PaymentFact::Payment {
                    status: PaymentStatus::Failed,
                    ..
                }]
            ))
        }
        "refund.created" => match facts {
            [PaymentFact::Refund {
                refund_ref,
                payment_ref,
                amount,
            }] => {
                assert_eq!(refund_ref, refund["id"].as_str().unwrap());
                assert_eq!(payment_ref, &pi);
                assert_eq!(amount.amount, 2500);
            }
            other => panic!("refund.created: {other:?}"),
        },
        "charge.dispute.created" | "charge.dispute.closed" => match facts {
            [PaymentFact::Dispute {
                dispute_ref,
                payment_ref,
                amount,
                status,
            }] => {
                assert_eq!(dispute_ref, dispute["id"].as_str().unwrap());
                assert_eq!(payment_ref, &pi);
                assert_eq!(amount.amount, 10_000);
                let expected = if d.event_type == "charge.dispute.closed" {
                    DisputeStatus::Lost
                } else {
                    DisputeStatus::Open
                };
                assert_eq!(*status, expected);
            }
            other => panic!("{}: {other:?}", d.event_type),
        },
        // The worker records these as seen (refunds come from refund.*; a failed charge moves no money).
        "charge.refunded" | "charge.failed" => {
            assert!(matches!(facts, [PaymentFact::Ignored { .. }]), "{facts:?}")
        }
        other => panic!("unexpected event type {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_stripe_event_normalises_to_the_expected_facts() {
    let sandbox = start(settings(None)).await;
    // Nothing needs to arrive anywhere: hold deliveries, only their bodies matter.
    sandbox
        .control()
        .set_delivery_behaviour(DeliveryBehaviour {
            paused: true,
            ..DeliveryBehaviour::default()
        })
        .unwrap();
    let pi = succeeded_intent(&sandbox, 10_000).await;
    let declined = stripe_post(
        &sandbox,
        "/v1/payment_intents",
        &[
            ("amount", "700"),
            ("currency", "brl"),
            ("confirm", "true"),
            ("payment_method", "pm_card_chargeDeclined"),
        ],
        None,
    )
    .await;
    assert_eq!(declined.status(), 402);
    let refund = stripe_post(
        &sandbox,
        "/v1/refunds",
        &[("payment_intent", pi.as_str()), ("amount", "2500")],
        None,
    )
    .await;
    let refund: Value = refund.json().await.unwrap();
    let dispute = sandbox
        .control()
        .chargeback("stripe", &pi, Some("lost"))
        .unwrap();

    let deliveries = sandbox.control().deliveries();
    let mut seen = Vec::new();
    for d in &deliveries {
        let facts = facts(d, Scheme::Stripe);
        seen.push(d.event_type.clone());
        assert_stripe_facts(d, &facts, &pi, &refund, &dispute);
    }
    for expected in [
        "payment_intent.created",
        "charge.succeeded",
        "payment_intent.succeeded",
        "charge.failed",
        "payment_intent.payment_failed",
        "refund.created",
        "charge.refunded",
        "charge.dispute.created",
        "charge.dispute.closed",
    ] {
        assert!(
            seen.iter().any(|s| s == expected),
            "no {expected} in {seen:?}"
        );
    }
    sandbox.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mercado_pago_notifications_ask_the_worker_to_fetch_the_payment() {
    let receiver = Receiver::start(|_| Answer::Status(200)).await;
    let sandbox = start(settings(Some(&receiver.url))).await;
    let response = mp_pay(&sandbox, 33.3, "compat", Some("compat-1")).await;
    let id = response.json::<Value>().await.unwrap()["id"]
        .as_u64()
        .unwrap()
        .to_string();
    eventually(Duration::from_secs(10), "the notification", || async {
        !receiver.received().is_empty()
    })
    .await;
    let d = &sandbox.control().deliveries()[0];
    match &facts(d, Scheme::MercadoPago)[..] {
        [PaymentFact::NeedsFetch {
            resource,
            resource_id,
        }] => {
            assert_eq!(
                (resource.as_str(), resource_id.as_str()),
                ("payment", id.as_str())
            );
        }
        other => panic!("{other:?}"),
    }
    sandbox.stop().await;
    receiver.stop().await;
}
