//! Mercado Pago notifications (JSON `type` plus `data.id`) → a resource to fetch.
//!
//! Owns the one rule for this dialect: the body is not signed, so it is only trusted to name a resource, and
//! that name is restricted to the characters real ids use before it can reach an API URL.

use serde_json::Value;

use super::json::{parse_json_object, render, Obj};
use super::{field_error, quoted};
use crate::model::{Failure, PaymentFact, PermanentError};

/// Longest resource id accepted for a fetch.
const MAX_RESOURCE_ID_LEN: usize = 128;

/// The body is not signed (only the query `data.id` is), so it is never trusted for amounts or statuses:
/// it only says which resource to fetch from the API.
pub(super) fn normalize(body: &[u8]) -> Result<Vec<PaymentFact>, PermanentError> {
    let map = parse_json_object(body)?;
    let root = Obj::root(&map);
    let data = root.object("data")?;
    let path = data.path_of("id");
    let resource_id = match data.value("id") {
        None => return Err(field_error(&path, "missing")),
        Some(Value::String(id)) => id.clone(),
        // Older notifications send the id as a JSON number.
        Some(Value::Number(n)) if n.is_u64() => n.to_string(),
        Some(other) => {
            return Err(field_error(
                &path,
                format!("{} is not a resource id", render(other)),
            ))
        }
    };
    // The id ends up in an API URL path. Restricting it to the characters real ids use (numbers, `ORD01…`,
    // hex ids) keeps an unsigned body from steering the fetch elsewhere (`../`, `?`, `/`).
    check_token(&path, &resource_id, MAX_RESOURCE_ID_LEN, &['-', '_'])?;
    let resource = root.text("type")?;
    check_token("type", resource, 64, &['-', '_', '.'])?;
    Ok(vec![PaymentFact::NeedsFetch {
        resource: resource.to_owned(),
        resource_id,
    }])
}

fn check_token(
    path: &str,
    value: &str,
    max_len: usize,
    extra: &[char],
) -> Result<(), PermanentError> {
    if value.is_empty() {
        return Err(field_error(path, "is empty"));
    }
    if value.len() > max_len {
        return Err(field_error(
            path,
            format!("is {} bytes long, more than {max_len}", value.len()),
        ));
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
    {
        let allowed: Vec<String> = extra.iter().map(|c| format!("'{c}'")).collect();
        return Err(field_error(
            path,
            format!(
                "{} has characters other than ASCII letters, digits and {}",
                quoted(value),
                allowed.join(", ")
            ),
        ));
    }
    Ok(())
}

/// A payment resource as `GET /v1/payments/{id}` returns it → payment facts. This is where Mercado Pago's
/// effects come from: the resource fetched by the signed `data.id`, never the unsigned notification body.
///
/// `expected_id` is the signed `data.id` the resource was fetched for; a resource with another id is refused.
/// Status mapping (forward-only, as every fact): `pending`/`in_process` → processing, `authorized` → authorized, `approved`
/// → succeeded with `transaction_amount`, `rejected` → failed, `cancelled` → canceled; `refunded`,
/// `charged_back` and `in_mediation` are succeeded payments (their money was captured first) plus, for
/// `charged_back`, a lost dispute `cb_{id}` and, for `in_mediation`, an open one. Every entry of `refunds` is
/// its own refund fact keyed by the refund's id (partial refunds included).
pub fn payment_resource(
    body: &[u8],
    expected_id: &str,
) -> Result<Vec<PaymentFact>, PermanentError> {
    use crate::model::{DisputeStatus, Money, PaymentStatus};

    let map = parse_json_object(body)?;
    let root = Obj::root(&map);
    let id = mp_id(&root, "id")?;
    if !id.eq_ignore_ascii_case(expected_id) {
        return Err(field_error(
            "id",
            format!(
                "{} is not the payment the notification named ({})",
                quoted(&id),
                quoted(expected_id)
            ),
        ));
    }
    let currency = super::check_currency("currency_id", root.text("currency_id")?)?;
    let amount = decimal_minor_units(&root, "transaction_amount")?;
    let money = |amount: i64| Money {
        amount,
        currency: currency.clone(),
    };
    let status = root.text("status")?;
    // Why it was rejected or cancelled (`cc_rejected_insufficient_amount`, `expired`): the intent shows it.
    let detail = root.opt_text("status_detail")?;
    let mut facts = Vec::new();
    let payment = |status: PaymentStatus, with_amount: bool| PaymentFact::Payment {
        payment_ref: id.clone(),
        status,
        amount: with_amount.then(|| money(amount)),
        failure: match status {
            PaymentStatus::Failed | PaymentStatus::Canceled => Some(Failure::new(
                detail.unwrap_or(root_status_text(status)),
                None,
            )),
            _ => None,
        },
    };
    match status {
        "pending" | "in_process" => facts.push(payment(PaymentStatus::Processing, true)),
        // `capture: false`: authorized (`pending_capture`), no money moved until the capture approves it.
        "authorized" => facts.push(payment(PaymentStatus::Authorized, true)),
        "approved" | "refunded" | "charged_back" | "in_mediation" => {
            facts.push(payment(PaymentStatus::Succeeded, true))
        }
        "rejected" => facts.push(payment(PaymentStatus::Failed, true)),
        "cancelled" => facts.push(payment(PaymentStatus::Canceled, true)),
        other => {
            return Err(field_error(
                "status",
                format!("{} is not a Mercado Pago payment status", quoted(other)),
            ))
        }
    }
    for (i, refund) in root
        .opt_array("refunds")?
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        let refund_id = mp_id(refund, "id")?;
        let refund_status = refund.opt_text("status")?.unwrap_or("approved");
        if refund_status != "approved" {
            continue; // only money that actually went back is posted
        }
        facts.push(PaymentFact::Refund {
            refund_ref: super::check_id(&format!("refunds[{i}].id"), &refund_id)?,
            payment_ref: id.clone(),
            amount: money(decimal_minor_units(refund, "amount")?),
        });
    }
    let dispute = match status {
        "charged_back" => Some(DisputeStatus::Lost),
        "in_mediation" => Some(DisputeStatus::Open),
        _ => None,
    };
    if let Some(dispute_status) = dispute {
        facts.push(PaymentFact::Dispute {
            dispute_ref: format!("cb_{id}"),
            payment_ref: id.clone(),
            amount: money(amount),
            status: dispute_status,
        });
    }
    Ok(facts)
}

/// Mercado Pago ids are JSON numbers (older payloads: strings): either, as decimal text.
fn mp_id(obj: &Obj<'_>, key: &str) -> Result<String, PermanentError> {
    let path = obj.path_of(key);
    match obj.value(key) {
        Some(Value::Number(n)) if n.is_u64() => Ok(n.to_string()),
        Some(Value::String(s)) => super::check_id(&path, s),
        None => Err(field_error(&path, "missing")),
        Some(other) => Err(field_error(
            &path,
            format!("{} is not an id", render(other)),
        )),
    }
}

/// A decimal amount in major units (`25`, `25.5`, `25.50`) → integer minor units (2550), exactly: parsed from the
/// number's text, never through a float; more than two decimals, exponents, zero or negatives are refused.
fn decimal_minor_units(obj: &Obj<'_>, key: &str) -> Result<i64, PermanentError> {
    let path = obj.path_of(key);
    let text = match obj.value(key) {
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        None => return Err(field_error(&path, "missing")),
        Some(other) => {
            return Err(field_error(
                &path,
                format!("{} is not an amount", render(other)),
            ))
        }
    };
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let fraction = fraction.trim_end_matches('0');
    let valid = !whole.is_empty()
        && whole.len() <= 15
        && whole.bytes().all(|b| b.is_ascii_digit())
        && fraction.len() <= 2
        && fraction.bytes().all(|b| b.is_ascii_digit());
    if !valid {
        return Err(field_error(
            &path,
            format!(
                "{} is not an amount with at most two decimals",
                quoted(&text)
            ),
        ));
    }
    let cents = format!("{fraction:0<2}");
    let minor = format!("{whole}{cents}")
        .parse::<i64>()
        .map_err(|_| field_error(&path, format!("{} is out of range", quoted(&text))))?;
    super::check_amount(&path, minor, false)
}

/// The code of a rejection or cancellation Mercado Pago gave no `status_detail` for.
fn root_status_text(status: crate::model::PaymentStatus) -> &'static str {
    match status {
        crate::model::PaymentStatus::Canceled => "cancelled",
        _ => "rejected",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{DisputeStatus, PaymentStatus};

    fn resource(status: &str, refunds: &str) -> Vec<u8> {
        format!(
            r#"{{"id": 123, "status": "{status}", "currency_id": "BRL", "transaction_amount": 25.5,
                 "refunds": [{refunds}]}}"#
        )
        .into_bytes()
    }

    #[test]
    fn in_mediation_is_a_succeeded_payment_with_an_open_dispute() {
        let facts = payment_resource(&resource("in_mediation", ""), "123").unwrap();
        assert_eq!(facts.len(), 2, "{facts:?}");
        assert!(matches!(
            &facts[0],
            PaymentFact::Payment {
                status: PaymentStatus::Succeeded,
                ..
            }
        ));
        assert!(matches!(
            &facts[1],
            PaymentFact::Dispute { status: DisputeStatus::Open, dispute_ref, .. } if dispute_ref == "cb_123"
        ));
    }

    #[test]
    fn a_negative_or_fractional_number_is_not_an_id() {
        for id in ["-123", "12.5"] {
            let body = format!(
                r#"{{"id": {id}, "status": "approved", "currency_id": "BRL", "transaction_amount": 25.5}}"#
            );
            let err = payment_resource(body.as_bytes(), "123").unwrap_err();
            assert!(err.to_string().contains("is not an id"), "{id}: {err}");
        }
    }

    #[test]
    fn a_rejection_carries_its_status_detail_as_the_failure_code() {
        let body =
            br#"{"id": 7, "status": "rejected", "status_detail": "cc_rejected_insufficient_amount",
                        "currency_id": "BRL", "transaction_amount": 25.5}"#;
        let facts = payment_resource(body, "7").unwrap();
        assert!(
            matches!(
                &facts[0],
                PaymentFact::Payment { status: PaymentStatus::Failed, failure: Some(f), .. }
                    if f.code == "cc_rejected_insufficient_amount" && f.message.is_none()
            ),
            "{facts:?}"
        );
        let approved = payment_resource(&resource("approved", ""), "123").unwrap();
        assert!(matches!(
            &approved[0],
            PaymentFact::Payment { failure: None, .. }
        ));
    }

    #[test]
    fn approved_is_a_succeeded_payment_in_minor_units() {
        let facts = payment_resource(&resource("approved", ""), "123").unwrap();
        assert_eq!(
            facts,
            vec![PaymentFact::Payment {
                payment_ref: "123".into(),
                status: PaymentStatus::Succeeded,
                amount: Some(crate::model::Money {
                    amount: 2550,
                    currency: "brl".into()
                }),
                failure: None,
            }]
        );
    }

    #[test]
    fn refunds_are_their_own_facts_and_chargebacks_lost_disputes() {
        let facts = payment_resource(
            &resource(
                "charged_back",
                r#"{"id": 9, "amount": 10, "status": "approved"}, {"id": 10, "amount": 1.05}"#,
            ),
            "123",
        )
        .unwrap();
        assert_eq!(facts.len(), 4, "{facts:?}");
        assert!(
            matches!(&facts[1], PaymentFact::Refund { refund_ref, amount, .. }
            if refund_ref == "9" && amount.amount == 1000)
        );
        assert!(
            matches!(&facts[2], PaymentFact::Refund { refund_ref, amount, .. }
            if refund_ref == "10" && amount.amount == 105)
        );
        assert!(matches!(
            &facts[3],
            PaymentFact::Dispute {
                status: DisputeStatus::Lost,
                ..
            }
        ));
    }

    #[test]
    fn a_resource_for_another_id_or_a_bad_amount_is_refused() {
        assert!(payment_resource(&resource("approved", ""), "999").is_err());
        let bad = br#"{"id": 123, "status": "approved", "currency_id": "BRL", "transaction_amount": 1.005}"#;
        assert!(payment_resource(bad, "123").is_err());
        let bad =
            br#"{"id": 123, "status": "approved", "currency_id": "BRL", "transaction_amount": -1}"#;
        assert!(payment_resource(bad, "123").is_err());
        let bad = br#"{"id": 123, "status": "teleported", "currency_id": "BRL", "transaction_amount": 1}"#;
        assert!(payment_resource(bad, "123").is_err());
    }
}
