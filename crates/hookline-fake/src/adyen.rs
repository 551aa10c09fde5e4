//! Adyen `AUTHORISATION` notifications, whose HMAC lives inside the body (`additionalData.hmacSignature`), so
//! they are signed when built.

use hookline_signature::sign;
use serde_json::json;

use crate::{rfc3339, Event, Faker, Payment};

/// The notification of payment `n` of the run, signed with `secret` (the configured hex key). Fails, with a
/// message that never contains the secret, when the key is not hex.
pub fn authorisation(f: &mut Faker, n: usize, secret: &[u8]) -> Result<Event, String> {
    let p = Payment::new(f, n);
    let mut item = json!({
        "amount": { "currency": "BRL", "value": p.amount },
        "eventCode": "AUTHORISATION",
        "eventDate": rfc3339(f.now),
        "merchantAccountCode": "HooklineSimBR",
        "merchantReference": p.order,
        "paymentMethod": p.brand,
        "pspReference": format!("{}{n:06}", f.run.to_uppercase()),
        "reason": format!("{}:{}:03/2030", f.rng.range(100_000, 999_999), p.last4),
        "success": "true",
    });
    let signature =
        sign::adyen(secret, &item).map_err(|why| format!("cannot sign for Adyen: {why}"))?;
    item["additionalData"] = json!({ "hmacSignature": signature, "cardSummary": p.last4 });
    let body = json!({
        "live": "false",
        "notificationItems": [{ "NotificationRequestItem": item }],
    });
    Ok(Event::json("AUTHORISATION", &body, String::new()))
}
