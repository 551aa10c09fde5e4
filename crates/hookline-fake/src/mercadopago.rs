//! Mercado Pago payment notifications: a JSON body, the notified payment's id also in the signed query
//! (`data.id`), and an `x-request-id` that a retry repeats (with `data.id`, the signed dedupe material).

use serde_json::json;

use crate::{rfc3339, Event, Faker};

/// A random seller account id (`user_id` of the notifications), drawn once per run.
pub fn user_id(f: &mut Faker) -> u64 {
    let offset = f.rng.range(0, 899_999_999) as u64;
    100_000_000 + offset
}

/// The `payment.created` notification of payment `n` of the run, for seller `user_id`.
pub fn payment_notification(f: &mut Faker, n: usize, user_id: u64) -> Event {
    let payment_id = f.numeric_id(n);
    payment_notification_for(f, n, user_id, payment_id)
}

/// The `payment.created` notification `n` of the run naming an existing payment (`payment_id`, e.g. one created
/// at the sandbox, which the worker then reads from the API).
pub fn payment_notification_for(
    f: &mut Faker,
    n: usize,
    user_id: u64,
    payment_id: String,
) -> Event {
    // Notification ids are numbers; the run id keeps them distinct between runs.
    let notification_id = (f.run_num % 1_000_000_000_000) * 1_000_000 + n as u64;
    let body = json!({
        "action": "payment.created",
        "api_version": "v1",
        "data": { "id": payment_id },
        "date_created": rfc3339(f.now),
        "id": notification_id,
        "live_mode": false,
        "type": "payment",
        "user_id": user_id,
    });
    let mut event = Event::json("payment", &body, f.rng.uuid());
    event.data_id = Some(payment_id);
    event
}
