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
        assert_eq!(PaymentStatus::parse(spelling).ok(), Some(status));
    }
    assert!(PaymentStatus::parse("Succeeded").is_err());
    assert!(PaymentStatus::parse("").is_err());
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
            failure: None,
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

/// normalize/json.rs `Obj::integer`, `||` replaced with `&&`: a float beyond the `i64` range (`1e19`) is "too
/// large", like an integer beyond it, not "not an integer" (the message tells the operator which mistake it is).
#[test]
fn amounts_beyond_i64_are_too_large_whether_integer_or_float() {
    for amount in ["1e19", "18446744073709551615"] {
        let body = format!(
            r#"{{"id":"evt_1","object":"event","type":"payment_intent.processing","data":{{"object":
               {{"id":"pi_1","object":"payment_intent","amount":{amount},"currency":"usd"}}}}}}"#
        );
        let err = normalize(Scheme::Stripe, None, body.as_bytes()).expect_err("out of range");
        assert!(
            err.0.starts_with("data.object.amount: ")
                && err.0.ends_with(" is too large for amount in minor units"),
            "{amount}: {}",
            err.0
        );
    }
}

/// normalize/mercadopago.rs `check_token`, `value.len() > max_len` replaced with `==` or `>=`: a Mercado Pago
/// resource id of 128 bytes is fetched, 129 or more are refused.
#[test]
fn mercadopago_resource_ids_up_to_128_bytes() {
    let notification = |id: &str| {
        let body = json!({ "action": "payment.updated", "type": "payment", "data": { "id": id } });
        normalize(Scheme::MercadoPago, None, body.to_string().as_bytes())
    };
    let longest = "1".repeat(128);
    assert_eq!(
        notification(&longest).expect("128 bytes"),
        [PaymentFact::NeedsFetch {
            resource: "payment".to_owned(),
            resource_id: longest,
        }]
    );
    for len in [129, 200] {
        let err = notification(&"1".repeat(len)).expect_err("too long");
        assert_eq!(
            err.0,
            format!("data.id: is {len} bytes long, more than 128")
        );
    }
}
