//! Stripe: the PaymentIntent charge (create + confirm in one call, with the intent's [`StripeParams`]), the
//! refund, the lookups by hookline's own reference (`metadata[hookline_intent]`, `metadata[hookline_refund]`)
//! and how its objects and errors read.

use serde_json::Value;

use super::{
    bounded, next_action, valid_id, ApiClient, Decline, Object, PostError, Verdict,
    PAYMENT_METHOD_UNUSABLE,
};
use hookline_payments::intents::{CaptureMethod, Intent};
use hookline_payments::params::StripeParams;

/// The charge: `POST /v1/payment_intents` with `confirm=true`, the intent's payment method (and customer,
/// `off_session`, `return_url`), hookline's reference in `metadata[hookline_intent]` (what the lookup searches),
/// under `key`.
pub(crate) fn charge_request(
    api: &ApiClient,
    key: &str,
    intent: &Intent,
    params: &StripeParams,
) -> Result<reqwest::RequestBuilder, PostError> {
    let mut form = vec![
        ("amount", intent.amount.to_string()),
        ("currency", intent.currency.clone()),
        ("confirm", "true".to_owned()),
        ("metadata[hookline_intent]", intent.public_id.clone()),
    ];
    if let Some(pm) = &params.payment_method {
        form.push(("payment_method", pm.clone()));
    }
    // Stripe's `customer` takes a `cus_…` object id; the merchant's free-text reference goes to metadata.
    if let Some(c) = &params.customer {
        form.push(("customer", c.clone()));
    }
    if params.off_session {
        form.push(("off_session", "true".to_owned()));
    }
    if let Some(url) = &params.return_url {
        form.push(("return_url", url.clone()));
    }
    if intent.capture_method == CaptureMethod::Manual {
        form.push(("capture_method", "manual".to_owned()));
    }
    if let Some(d) = &intent.description {
        form.push(("description", d.clone()));
    }
    if let Some(c) = &intent.customer {
        form.push(("metadata[hookline_customer]", c.clone()));
    }
    Ok(api
        .post("v1/payment_intents")?
        .header("Idempotency-Key", key)
        .form(&form))
}

/// The refund: `POST /v1/refunds` of `amount` on `payment`, with hookline's refund id in
/// `metadata[hookline_refund]` (what the lookup matches), under `key`.
pub(crate) fn refund_request(
    api: &ApiClient,
    key: &str,
    payment: &str,
    amount: i64,
    refund_public_id: &str,
) -> Result<reqwest::RequestBuilder, PostError> {
    Ok(api
        .post("v1/refunds")?
        .header("Idempotency-Key", key)
        .form(&[
            ("payment_intent", payment.to_owned()),
            ("amount", amount.to_string()),
            ("metadata[hookline_refund]", refund_public_id.to_owned()),
        ]))
}

/// The cancel of an open PaymentIntent (`requires_action`, `requires_capture`: the void):
/// `POST /v1/payment_intents/{id}/cancel` with Stripe's `cancellation_reason` where hookline's has one (`expired`
/// is Stripe's `abandoned`), under `key`.
pub(crate) fn cancel_request(
    api: &ApiClient,
    key: &str,
    payment: &str,
    reason: Option<&str>,
) -> Result<reqwest::RequestBuilder, PostError> {
    let payment = checked(payment)?;
    let reason = match reason {
        Some(r @ ("duplicate" | "fraudulent" | "requested_by_customer" | "abandoned")) => Some(r),
        Some("expired") => Some("abandoned"),
        _ => None,
    };
    let form: Vec<(&str, &str)> = reason
        .map(|r| vec![("cancellation_reason", r)])
        .unwrap_or_default();
    Ok(api
        .post(&format!("v1/payment_intents/{payment}/cancel"))?
        .header("Idempotency-Key", key)
        .form(&form))
}

/// The capture of a `requires_capture` PaymentIntent: `POST /v1/payment_intents/{id}/capture` with
/// `amount_to_capture` when less than all is taken, under `key`.
pub(crate) fn capture_request(
    api: &ApiClient,
    key: &str,
    payment: &str,
    amount: Option<i64>,
) -> Result<reqwest::RequestBuilder, PostError> {
    let payment = checked(payment)?;
    let form: Vec<(&str, String)> = amount
        .map(|a| vec![("amount_to_capture", a.to_string())])
        .unwrap_or_default();
    Ok(api
        .post(&format!("v1/payment_intents/{payment}/capture"))?
        .header("Idempotency-Key", key)
        .form(&form))
}

/// The PaymentIntent `payment` as it is now: `GET /v1/payment_intents/{id}`.
pub async fn get_charge(api: &ApiClient, payment: &str) -> Result<Value, String> {
    let payment = checked(payment).map_err(|_| format!("{payment:?} is not a Stripe id"))?;
    api.get_json(&format!("v1/payment_intents/{payment}"), &[])
        .await
        .map_err(|e| format!("{e}"))
}

/// A gateway id safe to put in a path.
fn checked(payment: &str) -> Result<&str, PostError> {
    if valid_id(payment) {
        Ok(payment)
    } else {
        Err(PostError::Refused(format!(
            "{:?} is not a Stripe id",
            payment.chars().take(80).collect::<String>()
        )))
    }
}

/// Whether `public_id` can be put in a search query as is (hookline's ids: `pi_hl_` and hex).
fn searchable(public_id: &str) -> bool {
    !public_id.is_empty()
        && public_id.len() <= 64
        && public_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The PaymentIntent carrying `metadata[hookline_intent] = public_id`, if any:
/// `GET /v1/payment_intents/search?query=metadata['hookline_intent']:'pi_hl_…'`. `Err`: the lookup failed (retried).
pub async fn find_charge(api: &ApiClient, public_id: &str) -> Result<Option<Value>, String> {
    if !searchable(public_id) {
        return Err(format!("{public_id:?} cannot be searched for"));
    }
    let page = api
        .get_json(
            "v1/payment_intents/search",
            &[(
                "query",
                format!("metadata['hookline_intent']:'{public_id}'"),
            )],
        )
        .await
        .map_err(|e| format!("{e}"))?;
    let Some(data) = page["data"].as_array() else {
        return Err("the search answer has no \"data\" list".into());
    };
    // Newest first; more than one would be a double charge already (never by this dispatcher: one key live at a
    // time) — the newest is recorded and the others are visible at the gateway.
    Ok(data
        .iter()
        .find(|o| o["metadata"]["hookline_intent"].as_str() == Some(public_id))
        .cloned())
}

/// The refund of `payment` carrying `metadata[hookline_refund] = refund_public_id`, if any:
/// `GET /v1/refunds?payment_intent=pi_…&limit=100`.
pub async fn find_refund(
    api: &ApiClient,
    payment: &str,
    refund_public_id: &str,
) -> Result<Option<Value>, String> {
    if !valid_id(payment) {
        return Err(format!("{payment:?} is not a Stripe id"));
    }
    let page = api
        .get_json(
            "v1/refunds",
            &[
                ("payment_intent", payment.to_owned()),
                ("limit", "100".to_owned()),
            ],
        )
        .await
        .map_err(|e| format!("{e}"))?;
    let Some(data) = page["data"].as_array() else {
        return Err("the refund list has no \"data\" list".into());
    };
    Ok(data
        .iter()
        .find(|r| r["metadata"]["hookline_refund"].as_str() == Some(refund_public_id))
        .cloned())
}

/// The object's id, checked: `object` must be `want`.
fn id_of(json: &Value, want: &str) -> Result<String, String> {
    if !json.is_object() {
        return Err("not a JSON object".into());
    }
    match json["object"].as_str() {
        Some(o) if o == want => {}
        Some(o) => {
            return Err(format!(
                "\"object\" is {:?}, not {want:?}",
                o.chars().take(40).collect::<String>()
            ))
        }
        None => return Err(format!("no \"object\": {want:?}")),
    }
    match &json["id"] {
        Value::String(s) if valid_id(s) => Ok(s.clone()),
        Value::Null => Err("no \"id\"".into()),
        other => Err(format!(
            "\"id\" {:?} is not an id of this provider",
            other.to_string().chars().take(40).collect::<String>()
        )),
    }
}

/// A PaymentIntent: `succeeded` → succeeded; `requires_action` (3-D Secure) → requires_action with its
/// `next_action`; `requires_payment_method` with a `last_payment_error` → declined (the card was refused, the
/// intent waits for another method); `canceled` → canceled; `requires_capture` (a manual capture's
/// authorization) → requires_capture; `processing` → processing.
/// `requires_payment_method` without an error, or `requires_confirmation`, cannot follow a confirmed create: an
/// answer hookline cannot interpret.
pub fn read_charge(json: &Value) -> Result<Object, String> {
    let id = id_of(json, "payment_intent")?;
    let Some(status) = json["status"].as_str() else {
        return Err("no \"status\"".into());
    };
    let verdict = match status {
        "succeeded" => Verdict::Status {
            status: "succeeded",
            next_action: None,
        },
        "processing" => Verdict::Status {
            status: "processing",
            next_action: None,
        },
        "requires_capture" => Verdict::Status {
            status: "requires_capture",
            next_action: None,
        },
        "canceled" => Verdict::Status {
            status: "canceled",
            next_action: None,
        },
        "requires_action" => Verdict::Status {
            status: "requires_action",
            next_action: next_action(&json["next_action"]),
        },
        "requires_payment_method" if json["last_payment_error"].is_object() => {
            let e = &json["last_payment_error"];
            Verdict::Declined {
                code: decline_code(e),
                message: bounded(&e["message"], 1000).unwrap_or_default(),
            }
        }
        other => {
            return Err(format!(
                "a payment_intent in status {:?} after a confirmed create",
                other.chars().take(40).collect::<String>()
            ))
        }
    };
    Ok(Object { id, verdict })
}

/// A Refund: `succeeded`, `failed`/`canceled` → failed, anything else (pending, requires_action) → still
/// pending at the gateway.
pub fn read_refund(json: &Value) -> Result<Object, String> {
    let id = id_of(json, "refund")?;
    Object::refund(
        id,
        json["status"].as_str(),
        "succeeded",
        &["failed", "canceled"],
    )
}

/// `decline_code` (the issuer's reason) or else `code` of a Stripe error object.
fn decline_code(error: &Value) -> String {
    bounded(&error["decline_code"], 200)
        .or_else(|| bounded(&error["code"], 200))
        .unwrap_or_else(|| "card_declined".to_owned())
}

/// A 4xx that is an outcome: a declined card (402 `card_error`), or — for a charge — a payment method or customer
/// Stripe refuses (another customer's method, detached, missing; off-session without a saved method): no operator
/// can fix the customer's card, and billing must learn that the method is unusable.
pub fn read_refusal(refund: bool, status: u16, body: &[u8]) -> Option<Decline> {
    read_decline(body).or_else(|| {
        (!refund && (400..=499).contains(&status))
            .then(|| read_method_refusal(body))
            .flatten()
    })
}

/// A Stripe error answer that is a decline: `error.type = card_error` (HTTP 402), with the PaymentIntent's id
/// when the error carries it (`error.payment_intent.id`).
pub fn read_decline(body: &[u8]) -> Option<Decline> {
    let json: Value = serde_json::from_slice(body).ok()?;
    let error = &json["error"];
    if error["type"].as_str() != Some("card_error") {
        return None;
    }
    let id = error["payment_intent"]["id"]
        .as_str()
        .filter(|s| valid_id(s))
        .map(str::to_owned);
    Some(Decline {
        id,
        code: decline_code(error),
        message: bounded(&error["message"], 1000).unwrap_or_default(),
    })
}

/// The charge parameters whose refusal is about the payment method itself: a PaymentMethod of another customer,
/// missing or detached, or an off-session charge of a customer without a saved method.
const METHOD_PARAMS: &[&str] = &["payment_method", "customer"];

/// A Stripe 4xx `invalid_request_error` whose `param` is `payment_method` or `customer`: the method cannot be
/// charged (Stripe refuses a PaymentMethod not attached to the customer, detached, of another customer, or an
/// off-session charge without one — <https://docs.stripe.com/api/errors>). A decline, not hookline's problem: its
/// `code` (or [`PAYMENT_METHOD_UNUSABLE`] when it has none) and `message`, with the PaymentIntent's id when the
/// error carries it. Every other `invalid_request_error` stays hookline's own problem.
pub fn read_method_refusal(body: &[u8]) -> Option<Decline> {
    let json: Value = serde_json::from_slice(body).ok()?;
    let error = &json["error"];
    if error["type"].as_str() != Some("invalid_request_error") {
        return None;
    }
    let param = error["param"].as_str()?;
    if !METHOD_PARAMS.contains(&param) {
        return None;
    }
    let id = error["payment_intent"]["id"]
        .as_str()
        .filter(|s| valid_id(s))
        .map(str::to_owned);
    Some(Decline {
        id,
        code: bounded(&error["code"], 200)
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| PAYMENT_METHOD_UNUSABLE.to_owned()),
        message: bounded(&error["message"], 1000).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn payment_intents_read_as_outcomes() {
        let pi = |status: &str, extra: Value| {
            let mut o = json!({"id": "pi_1", "object": "payment_intent", "status": status});
            if let (Some(o), Some(extra)) = (o.as_object_mut(), extra.as_object()) {
                o.extend(extra.clone());
            }
            read_charge(&o)
        };
        assert_eq!(
            pi("succeeded", json!({})).unwrap().verdict,
            Verdict::Status {
                status: "succeeded",
                next_action: None
            }
        );
        let action = json!({"type": "use_stripe_sdk", "use_stripe_sdk": {"type": "three_d_secure_redirect"}});
        assert_eq!(
            pi("requires_action", json!({"next_action": action.clone()}))
                .unwrap()
                .verdict,
            Verdict::Status {
                status: "requires_action",
                next_action: Some(action)
            }
        );
        let declined = pi(
            "requires_payment_method",
            json!({"last_payment_error": {"type": "card_error", "code": "card_declined",
                   "decline_code": "insufficient_funds", "message": "Your card has insufficient funds."}}),
        )
        .unwrap();
        assert_eq!(
            declined.verdict,
            Verdict::Declined {
                code: "insufficient_funds".into(),
                message: "Your card has insufficient funds.".into()
            }
        );
        assert!(pi("requires_payment_method", json!({})).is_err());
        assert!(pi("requires_confirmation", json!({})).is_err());
        assert_eq!(
            pi("canceled", json!({})).unwrap().verdict,
            Verdict::Status {
                status: "canceled",
                next_action: None
            }
        );
        assert_eq!(
            pi("requires_capture", json!({})).unwrap().verdict,
            Verdict::Status {
                status: "requires_capture",
                next_action: None
            }
        );
        assert!(
            read_charge(&json!({"id": "re_1", "object": "refund", "status": "succeeded"})).is_err()
        );
        assert!(read_charge(
            &json!({"id": "pi 1", "object": "payment_intent", "status": "succeeded"})
        )
        .is_err());
    }

    #[test]
    fn a_402_card_error_is_a_decline_other_errors_are_not() {
        let d = read_decline(
            br#"{"error": {"type": "card_error", "code": "card_declined", "decline_code": "generic_decline",
                 "message": "Your card was declined.", "payment_intent": {"id": "pi_9", "status": "requires_payment_method"}}}"#,
        )
        .expect("decline");
        assert_eq!(
            d,
            Decline {
                id: Some("pi_9".into()),
                code: "generic_decline".into(),
                message: "Your card was declined.".into()
            }
        );
        assert!(read_decline(
            br#"{"error": {"type": "invalid_request_error", "code": "parameter_missing"}}"#
        )
        .is_none());
        assert!(read_decline(b"<html>").is_none());
    }

    #[test]
    fn a_refused_payment_method_or_customer_is_a_decline_other_invalid_requests_are_not() {
        let d = read_method_refusal(
            br#"{"error": {"type": "invalid_request_error", "code": "resource_missing", "param": "payment_method",
                 "message": "No such PaymentMethod: 'pm_gone'"}}"#,
        )
        .expect("refusal");
        assert_eq!(
            d,
            Decline {
                id: None,
                code: "resource_missing".into(),
                message: "No such PaymentMethod: 'pm_gone'".into()
            }
        );
        // No code of its own: the method is unusable; the PaymentIntent's id is kept when named.
        let d = read_method_refusal(
            br#"{"error": {"type": "invalid_request_error", "param": "customer",
                 "message": "The customer does not have a payment method with the ID pm_1.",
                 "payment_intent": {"id": "pi_7"}}}"#,
        )
        .expect("refusal");
        assert_eq!(
            (d.id.as_deref(), d.code.as_str()),
            (Some("pi_7"), PAYMENT_METHOD_UNUSABLE)
        );
        for other in [
            &br#"{"error": {"type": "invalid_request_error", "code": "parameter_missing", "param": "amount"}}"#[..],
            br#"{"error": {"type": "invalid_request_error", "code": "parameter_missing"}}"#,
            br#"{"error": {"type": "api_error", "param": "payment_method"}}"#,
            br#"{"error": {"type": "invalid_request_error", "param": 7}}"#,
            b"<html>",
        ] {
            assert!(
                read_method_refusal(other).is_none(),
                "{}",
                String::from_utf8_lossy(other)
            );
        }
    }
}
