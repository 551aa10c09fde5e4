//! Stripe events (currency BRL, amounts in centavos).
//!
//! Three layers, each built on the one before:
//! - bare objects (`*_object`): the fields the payments worker reads, with the caller's ids and amounts;
//! - envelopes: [`envelope`] (what every Stripe event carries) and [`live_envelope`] (plus the request that
//!   caused it, as a live delivery has);
//! - whole events: the fixed-time byte builders tests post ([`payment_intent`], [`refund`], …), and the
//!   realistic ones about a simulated [`Payment`] ([`realistic_payment_intent`], [`subscription_invoice`], …)
//!   wrapped by [`live_event`].

use serde_json::{json, Value};

use crate::{merge, Event, Faker, Payment};

/// The API version every fake event claims.
pub const API_VERSION: &str = "2024-06-20";
/// `created` of the fixed-time events (2026-01-01T00:00:00Z).
pub const FIXED_CREATED: i64 = 1_767_225_600;
/// A billing month, in seconds.
pub const MONTH: i64 = 30 * 86_400;

// -----------------------------------------------------------------------------------------------------------
// Envelopes
// -----------------------------------------------------------------------------------------------------------

/// A Stripe event `id` of type `kind` around `object`.
pub fn envelope(id: &str, kind: &str, created: i64, object: Value) -> Value {
    json!({
        "id": id, "object": "event", "api_version": API_VERSION, "created": created,
        "livemode": false, "type": kind, "data": { "object": object }
    })
}

/// [`envelope`] as a live delivery carries it: with `pending_webhooks` and the API request that caused it.
pub fn live_envelope(
    id: &str,
    kind: &str,
    created: i64,
    object: Value,
    request_id: &str,
    idempotency_key: &str,
) -> Value {
    let mut event = envelope(id, kind, created, object);
    merge(
        &mut event,
        json!({
            "pending_webhooks": 1,
            "request": { "id": request_id, "idempotency_key": idempotency_key },
        }),
    );
    event
}

/// A live event of the run `f`: a fresh event id, the run's clock, a random request id and idempotency key.
pub fn live_event(f: &mut Faker, kind: &str, object: Value) -> Event {
    let id = f.event_id();
    let request_id = format!("req_{}", f.rng.alnum(14));
    let idempotency_key = f.rng.uuid();
    let body = live_envelope(&id, kind, f.now, object, &request_id, &idempotency_key);
    Event::json(kind, &body, id)
}

/// The bytes of a fixed-time ([`FIXED_CREATED`]) event.
pub fn fixed_event(event_id: &str, kind: &str, object: Value) -> Vec<u8> {
    envelope(event_id, kind, FIXED_CREATED, object)
        .to_string()
        .into_bytes()
}

// -----------------------------------------------------------------------------------------------------------
// Bare objects
// -----------------------------------------------------------------------------------------------------------

/// A PaymentIntent in the state an event `payment_intent.{status}` reports (created, processing, succeeded,
/// payment_failed, canceled): received only once succeeded.
pub fn payment_intent_object(pi: &str, status: &str, amount: i64) -> Value {
    let received = if status == "succeeded" { amount } else { 0 };
    let object_status = match status {
        "created" | "payment_failed" => "requires_payment_method",
        other => other,
    };
    json!({ "id": pi, "object": "payment_intent", "amount": amount, "amount_received": received,
            "currency": "brl", "status": object_status })
}

/// A captured, succeeded charge of `pi`.
pub fn charge_object(charge: &str, pi: &str, amount: i64) -> Value {
    json!({ "id": charge, "object": "charge", "amount": amount, "amount_captured": amount,
            "currency": "brl", "payment_intent": pi, "status": "succeeded", "captured": true })
}

/// A succeeded refund of `amount` on `pi` (charge `charge`).
pub fn refund_object(refund: &str, pi: &str, charge: &str, amount: i64) -> Value {
    json!({ "id": refund, "object": "refund", "amount": amount, "currency": "brl",
            "payment_intent": pi, "charge": charge, "status": "succeeded" })
}

/// A charge listing its `refunds` as `(id, amount)`.
pub fn charge_refunded_object(charge: &str, pi: &str, refunds: &[(&str, i64)]) -> Value {
    let total: i64 = refunds.iter().map(|(_, a)| a).sum();
    let data: Vec<Value> = refunds
        .iter()
        .map(|(id, a)| refund_object(id, pi, charge, *a))
        .collect();
    json!({ "id": charge, "object": "charge", "amount": 100000, "amount_refunded": total,
            "currency": "brl", "payment_intent": pi, "refunded": false,
            "refunds": { "object": "list", "data": data } })
}

/// A fraud dispute of `amount` on `pi` in `status` (needs_response, won, lost).
pub fn dispute_object(dispute: &str, pi: &str, charge: &str, amount: i64, status: &str) -> Value {
    json!({ "id": dispute, "object": "dispute", "amount": amount, "currency": "brl",
            "charge": charge, "payment_intent": pi, "status": status, "reason": "fraudulent" })
}

/// A paid subscription invoice for the period `period_start..period_end`.
pub fn invoice_object(
    invoice: &str,
    subscription: &str,
    period_start: i64,
    period_end: i64,
    amount: i64,
) -> Value {
    json!({ "id": invoice, "object": "invoice", "subscription": subscription,
            "amount_paid": amount, "currency": "brl", "period_start": period_start,
            "period_end": period_end, "status": "paid" })
}

// -----------------------------------------------------------------------------------------------------------
// Fixed-time events, as the tests post them
// -----------------------------------------------------------------------------------------------------------

/// `payment_intent.{status}` (created, processing, succeeded, payment_failed, canceled).
pub fn payment_intent(event_id: &str, status: &str, pi: &str, amount: i64) -> Vec<u8> {
    let object = payment_intent_object(pi, status, amount);
    fixed_event(event_id, &format!("payment_intent.{status}"), object)
}

/// `charge.succeeded` for payment intent `pi`.
pub fn charge_succeeded(event_id: &str, charge: &str, pi: &str, amount: i64) -> Vec<u8> {
    let object = charge_object(charge, pi, amount);
    fixed_event(event_id, "charge.succeeded", object)
}

/// `refund.created` (status succeeded) of `amount` on `pi`.
pub fn refund(event_id: &str, refund: &str, pi: &str, amount: i64) -> Vec<u8> {
    let object = refund_object(refund, pi, "ch_x", amount);
    fixed_event(event_id, "refund.created", object)
}

/// `charge.refunded` listing `refunds` as `(id, amount)`.
pub fn charge_refunded(event_id: &str, charge: &str, pi: &str, refunds: &[(&str, i64)]) -> Vec<u8> {
    let object = charge_refunded_object(charge, pi, refunds);
    fixed_event(event_id, "charge.refunded", object)
}

/// `charge.dispute.{kind}` (created, closed) with the dispute's `status` (needs_response, won, lost).
pub fn dispute(
    event_id: &str,
    kind: &str,
    dispute: &str,
    pi: &str,
    amount: i64,
    status: &str,
) -> Vec<u8> {
    let object = dispute_object(dispute, pi, "ch_x", amount, status);
    fixed_event(event_id, &format!("charge.dispute.{kind}"), object)
}

/// `invoice.paid` for a monthly subscription cycle starting at `period_start`.
pub fn invoice_paid(
    event_id: &str,
    invoice: &str,
    subscription: &str,
    period_start: i64,
    amount: i64,
) -> Vec<u8> {
    let object = invoice_object(
        invoice,
        subscription,
        period_start,
        period_start + MONTH,
        amount,
    );
    fixed_event(event_id, "invoice.paid", object)
}

// -----------------------------------------------------------------------------------------------------------
// Realistic objects about a simulated payment
// -----------------------------------------------------------------------------------------------------------

/// The PaymentIntent of `p` in `status` (created, processing, succeeded), with every field Stripe sends.
pub fn realistic_payment_intent(f: &Faker, p: &Payment, status: &str) -> Value {
    let created = status == "created";
    let mut object = payment_intent_object(&p.pi, status, p.amount);
    merge(
        &mut object,
        json!({
            "amount_capturable": 0,
            "amount_details": { "tip": {} },
            "application": null,
            "application_fee_amount": null,
            "automatic_payment_methods": null,
            "canceled_at": null,
            "cancellation_reason": null,
            "capture_method": "automatic",
            "client_secret": format!("{}_secret_{}", p.pi, f.run),
            "confirmation_method": "automatic",
            "created": p.created,
            "customer": p.customer,
            "description": format!("Pedido {} - {}", p.order, p.store),
            "last_payment_error": null,
            "latest_charge": if created { Value::Null } else { json!(p.charge) },
            "livemode": false,
            "metadata": p.metadata(f),
            "next_action": null,
            "on_behalf_of": null,
            "payment_method": if created { Value::Null } else { json!(p.payment_method) },
            "payment_method_options": { "card": { "installments": null, "request_three_d_secure": "automatic" } },
            "payment_method_types": ["card"],
            "receipt_email": p.email,
            "review": null,
            "setup_future_usage": null,
            "shipping": null,
            "statement_descriptor": "HOOKLINE",
            "statement_descriptor_suffix": p.brand.to_uppercase(),
            "transfer_data": null,
            "transfer_group": null,
        }),
    );
    object
}

/// A partial refund of `p`: 10 % to 90 % of the payment, at least one centavo, under its own `re_` id.
pub fn realistic_refund(f: &mut Faker, p: &Payment) -> Value {
    let amount = (p.amount * f.rng.range(10, 90) / 100).max(1);
    let mut object = refund_object(&f.id("re", p.n), &p.pi, &p.charge, amount);
    merge(
        &mut object,
        json!({
            "balance_transaction": f.id("txn_re", p.n),
            "created": f.now,
            "destination_details": { "card": { "reference_status": "pending", "type": "refund" }, "type": "card" },
            "metadata": { "order_id": p.order, "reason_detail": "item devolvido", "simulate_run": f.run },
            "reason": "requested_by_customer",
            "receipt_number": null,
            "source_transfer_reversal": null,
            "transfer_reversal": null,
        }),
    );
    object
}

/// The fraud dispute of all of `p` in `status` (needs_response, lost, …).
pub fn realistic_dispute(f: &Faker, p: &Payment, status: &str) -> Value {
    let mut object = dispute_object(&f.id("dp", p.n), &p.pi, &p.charge, p.amount, status);
    merge(
        &mut object,
        json!({
            "balance_transactions": [],
            "created": f.now,
            "evidence": { "customer_email_address": p.email, "customer_name": p.name },
            "evidence_details": { "due_by": f.now + 7 * 86_400, "has_evidence": false, "past_due": false, "submission_count": 0 },
            "is_charge_refundable": false,
            "livemode": false,
            "metadata": { "order_id": p.order, "simulate_run": f.run },
            "payment_method_details": { "card": { "brand": p.brand, "network_reason_code": "10.4" }, "type": "card" },
        }),
    );
    object
}

/// Plans of the simulated subscriptions, in centavos per month.
const PLANS: &[(&str, i64)] = &[
    ("Plano Básico", 2_990),
    ("Plano Plus", 4_990),
    ("Plano Pro", 9_990),
    ("Plano Empresa", 29_990),
];
/// Billing cycles per simulated subscription: cycle `n` belongs to subscription `n / 3`.
pub const CYCLES_PER_SUBSCRIPTION: usize = 3;

/// The paid invoice of billing cycle `n` of the run: subscription `n / 3` (its plan by subscription), cycle
/// `n % 3`, the subscriptions having started a few months before the run, on a whole hour.
pub fn subscription_invoice(f: &Faker, n: usize) -> Value {
    let anchor = (f.now - (CYCLES_PER_SUBSCRIPTION as i64 + 1) * MONTH) / 3_600 * 3_600;
    let sub_n = n / CYCLES_PER_SUBSCRIPTION;
    let cycle = (n % CYCLES_PER_SUBSCRIPTION) as i64;
    let (plan, price) = PLANS[sub_n % PLANS.len()];
    // A subscription invoice's period looks back one period; the billed cycle starts at `period_end`.
    let period_end = anchor + cycle * MONTH;
    let period_start = if cycle == 0 {
        period_end
    } else {
        period_end - MONTH
    };
    let invoice = f.id("in", n);
    let mut object = invoice_object(
        &invoice,
        &f.id("sub", sub_n),
        period_start,
        period_end,
        price,
    );
    merge(
        &mut object,
        json!({
            "account_country": "BR",
            "amount_due": price,
            "amount_remaining": 0,
            "attempt_count": 1,
            "attempted": true,
            "billing_reason": if cycle == 0 { "subscription_create" } else { "subscription_cycle" },
            "collection_method": "charge_automatically",
            "created": period_end,
            "customer": f.id("cus", sub_n),
            "customer_email": format!("assinante{sub_n}@example.com.br"),
            "hosted_invoice_url": format!("https://invoice.stripe.com/i/acct_sim/{invoice}"),
            "lines": { "object": "list", "has_more": false, "total_count": 1, "data": [{
                "id": f.id("il", n),
                "object": "line_item",
                "amount": price,
                "currency": "brl",
                "description": format!("1 × {plan} (at R$ {},{:02} / month)", price / 100, price % 100),
                "period": { "start": period_end, "end": period_end + MONTH },
                "quantity": 1,
            }]},
            "livemode": false,
            "metadata": { "plan": plan, "simulate_run": f.run },
            "number": format!("{}-{:04}", f.run.to_uppercase(), n + 1),
            "paid": true,
            "subtotal": price,
            "total": price,
        }),
    );
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_events_have_the_test_shapes() {
        let v: Value =
            serde_json::from_slice(&payment_intent("evt_1", "created", "pi_1", 500)).unwrap();
        assert_eq!(v["type"], "payment_intent.created");
        assert_eq!(v["created"], FIXED_CREATED);
        assert_eq!(v["data"]["object"]["status"], "requires_payment_method");
        assert_eq!(v["data"]["object"]["amount_received"], 0);
        let v: Value = serde_json::from_slice(&charge_refunded(
            "evt_2",
            "ch_1",
            "pi_1",
            &[("re_1", 30), ("re_2", 20)],
        ))
        .unwrap();
        assert_eq!(v["data"]["object"]["amount_refunded"], 50);
        assert_eq!(v["data"]["object"]["refunds"]["data"][1]["charge"], "ch_1");
        let v: Value =
            serde_json::from_slice(&invoice_paid("evt_3", "in_1", "sub_1", 100, 2_990)).unwrap();
        assert_eq!(v["data"]["object"]["period_end"], 100 + MONTH);
    }

    #[test]
    fn realistic_objects_extend_the_bare_ones() {
        let mut f = Faker::with_run(1_000_000, FIXED_CREATED, 3);
        let p = Payment::new(&mut f, 0);
        let object = realistic_payment_intent(&f, &p, "succeeded");
        assert_eq!(object["amount_received"], p.amount);
        assert_eq!(object["latest_charge"], p.charge.as_str());
        let refund = realistic_refund(&mut f, &p);
        assert!(refund["amount"].as_i64().unwrap() < p.amount);
        assert_eq!(refund["payment_intent"], p.pi.as_str());
        let first = subscription_invoice(&f, 0);
        let second = subscription_invoice(&f, 1);
        assert_eq!(first["period_start"], first["period_end"]);
        assert_eq!(second["period_start"], first["period_end"]);
        assert_eq!(second["subscription"], first["subscription"]);
        let e = live_event(&mut f, "invoice.paid", first);
        let v: Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(v["pending_webhooks"], 1);
        assert_eq!(e.delivery_id, v["id"].as_str().unwrap());
    }
}
