//! Pagar.me Core API v5: the charge or order a webhook names, as the API returns it → payment facts.
//!
//! A v5 webhook is not signed (see `hookline-signature`'s `schemes/pagarme_v5.rs`): its body is trusted only to
//! name the object, and the edge puts that name into the dedupe key (`pgv5:{data.id}:{hook id}`). The worker
//! reads the object from the API by that name (`hookline_gateways::gateway::pagarme_v5::fetch_object`) and the effect
//! comes from what the API says, through [`object_resource`] — never from the webhook body. An event whose key
//! names no object is recorded as ignored ([`normalize`]).
//!
//! The payment's id is the charge's (`ch_…`): the order's charges are read one by one. Mapping (forward-only, as
//! every fact):
//! - `pending`, `processing` → processing;
//! - `paid`, `overpaid`, `underpaid` → succeeded with `paid_amount` (what was actually received: an underpaid
//!   boleto is a payment of less than was asked, posted as such; an overpaid one of more);
//! - `failed` → failed, with the acquirer's return code or the transaction's status;
//! - `canceled` → canceled when nothing was paid; a paid charge cancelled in full (`paid_amount` > 0) is a
//!   succeeded payment refunded in full;
//! - `chargedback` → succeeded plus a chargeback `cb_{charge}`: open, or lost when the last transaction is
//!   `chargedback` too (final); a chargeback hookline knows open whose charge is `paid` again was won
//!   ([`PaymentFact::ChargebackReversed`]). Pagar.me documents only the status `chargedback`; how open, won and
//!   lost look apart is the sandbox's convention, stated where the sandbox plays it.
//! - `canceled_amount` > 0 → [`PaymentFact::RefundedTotal`]: Pagar.me gives a refund (a partial cancellation) no
//!   id of its own, only the running total, so the worker records the difference between that total and the
//!   refunds it already holds, keyed by the total (`{charge}-refunded-{total}`): two reads of one state record
//!   one refund, two states two, in any order, never more than the total.

use super::json::{parse_json_object, Obj};
use super::{check_id, field_error, ignored, quoted};
use crate::model::{DisputeStatus, Failure, Money, PaymentFact, PaymentStatus, PermanentError};
use crate::params::is_pagarme_id;

/// Charges read from one order at most (Pagar.me's orders created by hookline have one).
const MAX_CHARGES: usize = 20;

/// The object a stored key names: `pgv5:{object}:{hook}` → `object`, when it is a charge (`ch_…`) or an order
/// (`or_…`) id by the one rule for Pagar.me ids ([`is_pagarme_id`]; it goes into an API path).
pub fn keyed_object(key: &str) -> Option<&str> {
    let object = key.strip_prefix("pgv5:")?.split(':').next()?;
    (is_pagarme_id(object, "ch_") || is_pagarme_id(object, "or_")).then_some(object)
}

/// The webhook body alone, when no object was read for it (no `api_base`, or a key that names none): never an
/// effect. Only the type is looked at, to say why.
pub(super) fn normalize(event_type: Option<&str>) -> Result<Vec<PaymentFact>, PermanentError> {
    Ok(vec![ignored(format!(
        "Pagar.me v5 {} names no charge or order that was read from the API; its unsigned body decides nothing",
        quoted(event_type.unwrap_or("(no type)"))
    ))])
}

/// The charge (`ch_…`) or order (`or_…`) `expected_id` as `GET /core/v5/charges/{id}` or `/orders/{id}`
/// returned it → its facts. Another object than the one asked for is refused.
pub fn object_resource(body: &[u8], expected_id: &str) -> Result<Vec<PaymentFact>, PermanentError> {
    let map = parse_json_object(body)?;
    let root = Obj::root(&map);
    let id = check_id("id", root.text("id")?)?;
    if id != expected_id {
        return Err(field_error(
            "id",
            format!(
                "{} is not the object the webhook named ({})",
                quoted(&id),
                quoted(expected_id)
            ),
        ));
    }
    if id.starts_with("ch_") {
        return charge_facts(&root);
    }
    let charges = root.opt_array("charges")?.unwrap_or_default();
    if charges.len() > MAX_CHARGES {
        return Err(field_error(
            "charges",
            format!("has {} charges, more than {MAX_CHARGES}", charges.len()),
        ));
    }
    let mut facts = Vec::new();
    for charge in &charges {
        facts.extend(charge_facts(charge)?);
    }
    if facts.is_empty() {
        facts.push(ignored(format!("order {id} has no charge yet")));
    }
    Ok(facts)
}

/// One charge's facts (see the module's mapping).
fn charge_facts(charge: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
    let id = check_id(&charge.path_of("id"), charge.text("id")?)?;
    if !id.starts_with("ch_") {
        return Err(field_error(
            &charge.path_of("id"),
            format!("{} is not a Pagar.me charge id", quoted(&id)),
        ));
    }
    let currency = charge.currency("currency")?;
    let money = |amount: i64| Money {
        amount,
        currency: currency.clone(),
    };
    let asked = charge.money("amount", "currency")?;
    let paid = charge.amount_or_zero_if_present("paid_amount")?;
    let canceled = charge.amount_or_zero_if_present("canceled_amount")?;
    let status = charge.text("status")?;
    let transaction = charge.opt_object("last_transaction")?;
    let transaction_status = match &transaction {
        Some(t) => t.opt_text("status")?,
        None => None,
    };
    let payment =
        |status: PaymentStatus, amount: Money, failure: Option<Failure>| PaymentFact::Payment {
            payment_ref: id.clone(),
            status,
            amount: Some(amount),
            failure,
        };
    // What was received: `paid_amount`, or the amount asked when a paid charge does not say.
    let received = if paid > 0 { paid } else { asked.amount };
    let mut facts = Vec::new();
    match status {
        // `auth_only`: authorized, not captured — no money moved until the capture makes it `paid`.
        "pending" | "processing" if transaction_status == Some("authorized_pending_capture") => {
            facts.push(payment(PaymentStatus::Authorized, asked.clone(), None))
        }
        "pending" | "processing" => {
            facts.push(payment(PaymentStatus::Processing, asked.clone(), None))
        }
        "paid" | "overpaid" | "underpaid" | "chargedback" => {
            facts.push(payment(PaymentStatus::Succeeded, money(received), None))
        }
        "canceled" if paid > 0 => facts.push(payment(PaymentStatus::Succeeded, money(paid), None)),
        "canceled" => facts.push(payment(
            PaymentStatus::Canceled,
            asked.clone(),
            Some(Failure::new("canceled", None)),
        )),
        "failed" => {
            let code = match &transaction {
                Some(t) => t
                    .opt_text("acquirer_return_code")?
                    .filter(|c| !c.is_empty())
                    .or(transaction_status),
                None => None,
            };
            let message = match &transaction {
                Some(t) => t.opt_text("acquirer_message")?.filter(|m| !m.is_empty()),
                None => None,
            };
            facts.push(payment(
                PaymentStatus::Failed,
                asked.clone(),
                Some(Failure::new(code.unwrap_or("failed"), message)),
            ))
        }
        other => {
            return Err(field_error(
                &charge.path_of("status"),
                format!("{} is not a Pagar.me charge status", quoted(other)),
            ))
        }
    }
    if canceled > 0 && (paid > 0 || status != "canceled") {
        facts.push(PaymentFact::RefundedTotal {
            payment_ref: id.clone(),
            total: money(canceled),
        });
    }
    let dispute_ref = format!("cb_{id}");
    match status {
        "chargedback" => facts.push(PaymentFact::Dispute {
            dispute_ref,
            payment_ref: id.clone(),
            amount: money(received),
            status: if transaction_status == Some("chargedback") {
                DisputeStatus::Lost
            } else {
                DisputeStatus::Open
            },
        }),
        "paid" | "overpaid" => facts.push(PaymentFact::ChargebackReversed {
            dispute_ref,
            payment_ref: id.clone(),
        }),
        _ => {}
    }
    Ok(facts)
}

impl Obj<'_> {
    /// An amount that may be absent or 0 (`paid_amount` before payment, `canceled_amount` before any refund).
    fn amount_or_zero_if_present(&self, key: &str) -> Result<i64, PermanentError> {
        if self.value(key).is_none() {
            return Ok(0);
        }
        self.amount_or_zero(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn charge(status: &str, paid: i64, canceled: i64, transaction: &str) -> Value {
        json!({
            "id": "ch_1", "amount": 1000, "currency": "BRL", "status": status,
            "paid_amount": paid, "canceled_amount": canceled,
            "last_transaction": {"status": transaction, "acquirer_return_code": "51",
                                 "acquirer_message": "Saldo insuficiente"}
        })
    }

    fn facts(v: &Value) -> Vec<PaymentFact> {
        object_resource(v.to_string().as_bytes(), "ch_1").expect("facts")
    }

    fn brl(amount: i64) -> Money {
        Money {
            amount,
            currency: "brl".into(),
        }
    }

    #[test]
    fn keys_name_only_plain_charge_and_order_ids() {
        assert_eq!(keyed_object("pgv5:ch_1:hook_2"), Some("ch_1"));
        assert_eq!(keyed_object("pgv5:or_Ab9:reconcile:2026"), Some("or_Ab9"));
        for key in [
            "pgv5::hook_2",
            "hook_2",
            "pgv5:cus_1:h",
            "mp:1:x",
            "pgv5:ch_/..:h",
            "pgv5:ch_a-b:h",
        ] {
            assert_eq!(keyed_object(key), None, "{key}");
        }
    }

    #[test]
    fn statuses_map_forward_with_what_was_received() {
        let paid = facts(&charge("paid", 1000, 0, "captured"));
        assert_eq!(
            paid[0],
            PaymentFact::Payment {
                payment_ref: "ch_1".into(),
                status: PaymentStatus::Succeeded,
                amount: Some(brl(1000)),
                failure: None
            }
        );
        // A paid charge may have had a chargeback that was won: the worker checks.
        assert!(matches!(paid[1], PaymentFact::ChargebackReversed { .. }));
        let under = facts(&charge("underpaid", 700, 0, "underpaid"));
        assert!(
            matches!(&under[0], PaymentFact::Payment { status: PaymentStatus::Succeeded, amount: Some(m), .. } if m.amount == 700)
        );
        assert_eq!(under.len(), 1);
        let failed = facts(&charge("failed", 0, 0, "not_authorized"));
        assert!(
            matches!(&failed[0], PaymentFact::Payment { status: PaymentStatus::Failed, failure: Some(f), .. } if f.code == "51" && f.message.as_deref() == Some("Saldo insuficiente"))
        );
        let pending = facts(&charge("pending", 0, 0, "waiting_payment"));
        assert!(matches!(
            &pending[0],
            PaymentFact::Payment {
                status: PaymentStatus::Processing,
                ..
            }
        ));
        let voided = facts(&charge("canceled", 0, 0, "voided"));
        assert_eq!(voided.len(), 1);
        assert!(matches!(
            &voided[0],
            PaymentFact::Payment {
                status: PaymentStatus::Canceled,
                ..
            }
        ));
    }

    #[test]
    fn refunds_are_the_running_total() {
        let partial = facts(&charge("paid", 1000, 300, "partial_refunded"));
        assert!(partial.contains(&PaymentFact::RefundedTotal {
            payment_ref: "ch_1".into(),
            total: brl(300)
        }));
        let total = facts(&charge("canceled", 1000, 1000, "refunded"));
        assert!(
            matches!(&total[0], PaymentFact::Payment { status: PaymentStatus::Succeeded, amount: Some(m), .. } if m.amount == 1000)
        );
        assert!(total.contains(&PaymentFact::RefundedTotal {
            payment_ref: "ch_1".into(),
            total: brl(1000)
        }));
    }

    #[test]
    fn chargebacks_open_then_lost_by_the_transaction() {
        let open = facts(&charge("chargedback", 1000, 0, "captured"));
        assert!(open.contains(&PaymentFact::Dispute {
            dispute_ref: "cb_ch_1".into(),
            payment_ref: "ch_1".into(),
            amount: brl(1000),
            status: DisputeStatus::Open
        }));
        let lost = facts(&charge("chargedback", 1000, 0, "chargedback"));
        assert!(lost.iter().any(|f| matches!(
            f,
            PaymentFact::Dispute {
                status: DisputeStatus::Lost,
                ..
            }
        )));
    }

    #[test]
    fn orders_give_their_charges_and_other_objects_are_refused() {
        let order = json!({"id": "or_1", "charges": [charge("paid", 1000, 0, "captured")]});
        let f = object_resource(order.to_string().as_bytes(), "or_1").expect("order");
        assert!(matches!(&f[0], PaymentFact::Payment { payment_ref, .. } if payment_ref == "ch_1"));
        let empty = json!({"id": "or_1", "charges": []});
        let f = object_resource(empty.to_string().as_bytes(), "or_1").expect("order");
        assert!(matches!(&f[0], PaymentFact::Ignored { .. }));
        let e = object_resource(charge("paid", 1000, 0, "x").to_string().as_bytes(), "ch_2")
            .unwrap_err();
        assert!(e.0.starts_with("id: "), "{e}");
        for (field, value) in [
            ("status", json!("refundedish")),
            ("amount", json!(-1)),
            ("amount", json!(10.5)),
            ("paid_amount", json!("1000")),
            ("currency", json!("R$")),
            ("canceled_amount", json!(1e300)),
        ] {
            let mut c = charge("paid", 1000, 0, "captured");
            c[field] = value;
            let e = object_resource(c.to_string().as_bytes(), "ch_1").unwrap_err();
            assert!(e.0.starts_with(field), "{field}: {e}");
        }
        assert!(object_resource(b"[]", "ch_1").is_err());
        assert!(object_resource(b"\xff", "ch_1").is_err());
    }
}
