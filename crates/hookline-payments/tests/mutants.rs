//! Tests written to kill the mutants `deploy/mutants.sh` found no other test noticing in the pure parts of
//! payments (normalize, the fee rule, statuses): each pins down an outcome (a spelling, a fact, an exact
//! dead-letter reason) that a plausible slip would change. The mutant each test exists for is named above it.

use hookline_payments::model::{DisputeStatus, Money, PaymentFact, PaymentStatus, PermanentError};
use hookline_payments::normalize::normalize;
use hookline_signature::Scheme;
use serde_json::{json, Value};

/// A Stripe event of type `ty` around `object`, normalized with the type the edge would have recorded.
fn stripe(ty: &str, object: Value) -> Result<Vec<PaymentFact>, PermanentError> {
    let body =
        json!({ "id": "evt_1", "object": "event", "type": ty, "data": { "object": object } });
    normalize(Scheme::Stripe, Some(ty), body.to_string().as_bytes())
}

fn payment_intent(id: &str) -> Value {
    json!({ "id": id, "object": "payment_intent", "amount": 1000, "currency": "usd", "status": "processing" })
}

/// model.rs `PaymentStatus::as_str` replaced with `""`/`"xyzzy"`, `PaymentStatus::parse` replaced with `None` or
/// one arm deleted: the spellings are the `payments.status` column's values, read back with `parse`.
#[test]
fn payment_status_spellings_round_trip() {
    let all = [
        (PaymentStatus::Created, "created"),
        (PaymentStatus::Processing, "processing"),
        (PaymentStatus::Failed, "failed"),
        (PaymentStatus::Canceled, "canceled"),
        (PaymentStatus::Succeeded, "succeeded"),
    ];
    for (status, spelling) in all {
        assert_eq!(status.as_str(), spelling);
        assert_eq!(PaymentStatus::parse(spelling), Some(status));
    }
    assert_eq!(PaymentStatus::parse("Succeeded"), None);
    assert_eq!(PaymentStatus::parse(""), None);
    // The rank: a payment only moves up, and the final status is the maximum over its events.
    let ranked: Vec<PaymentStatus> = all.iter().map(|(status, _)| *status).collect();
    let mut sorted = ranked.clone();
    sorted.sort();
    assert_eq!(sorted, ranked);
    assert_eq!(
        [
            PaymentStatus::Succeeded,
            PaymentStatus::Failed,
            PaymentStatus::Canceled
        ]
        .into_iter()
        .max(),
        Some(PaymentStatus::Succeeded)
    );
}

/// model.rs `DisputeStatus::as_str` replaced with `""`/`"xyzzy"`: the `disputes.status` spellings, in rank order.
#[test]
fn dispute_status_spellings_and_rank() {
    assert_eq!(DisputeStatus::Open.as_str(), "open");
    assert_eq!(DisputeStatus::Won.as_str(), "won");
    assert_eq!(DisputeStatus::Lost.as_str(), "lost");
    assert!(DisputeStatus::Open < DisputeStatus::Won && DisputeStatus::Won < DisputeStatus::Lost);
}

/// normalize/mod.rs `check_id`, `id.len() > MAX_ID_LEN` replaced with `==`: 255 bytes is the longest id
/// accepted, and every longer one is refused, not only one of exactly 256 bytes.
#[test]
fn ids_longer_than_255_bytes_are_refused() {
    let longest = format!("pi_{}", "a".repeat(252));
    let facts = stripe("payment_intent.processing", payment_intent(&longest)).expect("255 bytes");
    assert_eq!(
        facts,
        [PaymentFact::Payment {
            payment_ref: longest,
            status: PaymentStatus::Processing,
            amount: Some(Money {
                amount: 1000,
                currency: "usd".to_owned()
            }),
        }]
    );
    for len in [256, 300] {
        let id = format!("pi_{}", "a".repeat(len - 3));
        let err = stripe("payment_intent.processing", payment_intent(&id)).expect_err("too long");
        assert_eq!(
            err.0,
            format!("data.object.id: is {len} bytes long, more than 255")
        );
    }
}
