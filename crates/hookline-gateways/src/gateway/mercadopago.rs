//! Mercado Pago: the payment (`POST /v1/payments` with the intent's [`MercadoPagoParams`]: card token or Pix,
//! payer — or a saved card), the refund, the lookups by hookline's own reference (`external_reference`), the
//! worker's payment fetch, and how its objects read.
//!
//! **Saved cards** (merchant-initiated, no CVV — Mercado Pago's "Pagamentos automáticos" / Card on File,
//! <https://www.mercadopago.com.br/developers/en/docs/automatic-payments/recurring-charges>): a card saved with
//! `POST /v1/customers/{customer_id}/cards` is charged with a single-use token minted from it. Per key generation
//! the dispatcher reads the card ([`saved_card_request`], `GET /v1/customers/{customer_id}/cards/{card_id}`: its
//! `payment_method.id`, unless the intent names one), mints the token ([`card_token_request`],
//! `POST /v1/card_tokens {card_id, customer_id}`) and stores both ([`MintedCard`]) with the outbound request
//! BEFORE the payment is sent: every attempt of the generation sends the identical body under the same
//! `X-Idempotency-Key`. The payment ([`charge_body`]) pays as `payer {type: "customer", id}` and carries the
//! subscription messaging of automatic payments (`point_of_interaction.type = SUBSCRIPTIONS`,
//! <https://www.mercadopago.com.br/developers/en/docs/automatic-payments/recurring-charges/subscription-messaging>).

use hookline_core::handler::HandleError;
use serde_json::{json, Value};

use super::{bounded, valid_id, ApiClient, Object, PostError, Verdict};
use hookline_payments::intents::{CaptureMethod, Intent};
pub use hookline_payments::params::MintedCard;
use hookline_payments::params::{
    is_mercadopago_card_id, is_mercadopago_customer_id, MercadoPagoParams,
    MERCADOPAGO_NON_CARD_METHODS,
};

/// Longest card token accepted from Mercado Pago (its tokens are 32 hex characters).
pub const MAX_CARD_TOKEN_BYTES: usize = 128;

/// Both ids of a saved card, checked: they go into a URL path. `Err` is an operator's problem (the API and the
/// CLI refuse such ids before they are stored).
fn saved_card_ids<'a>(customer: &'a str, card: &'a str) -> Result<(&'a str, &'a str), PostError> {
    if !is_mercadopago_customer_id(customer) {
        return Err(PostError::Refused(format!(
            "{:?} is not a Mercado Pago customer id",
            customer.chars().take(80).collect::<String>()
        )));
    }
    if !is_mercadopago_card_id(card) {
        return Err(PostError::Refused(format!(
            "{:?} is not a Mercado Pago card id",
            card.chars().take(80).collect::<String>()
        )));
    }
    Ok((customer, card))
}

/// The saved card: `GET /v1/customers/{customer}/cards/{card}` (its `payment_method.id`, read by
/// [`read_saved_card`]).
pub(crate) fn saved_card_request(
    api: &ApiClient,
    customer: &str,
    card: &str,
) -> Result<reqwest::RequestBuilder, PostError> {
    let (customer, card) = saved_card_ids(customer, card)?;
    api.get_request(&format!("v1/customers/{customer}/cards/{card}"))
}

/// A token of the saved card, for one payment, without the security code (merchant-initiated):
/// `POST /v1/card_tokens {"card_id", "customer_id"}` (read by [`read_card_token`]).
pub(crate) fn card_token_request(
    api: &ApiClient,
    customer: &str,
    card: &str,
) -> Result<reqwest::RequestBuilder, PostError> {
    let (customer, card) = saved_card_ids(customer, card)?;
    Ok(api
        .post("v1/card_tokens")?
        .json(&json!({ "card_id": card, "customer_id": customer })))
}

/// The `payment_method.id` of the saved card `card` (the answer must be that card).
pub fn read_saved_card(json: &Value, card: &str) -> Result<String, String> {
    if !json.is_object() {
        return Err("not a JSON object".into());
    }
    if id_text(&json["id"]).as_deref() != Some(card) {
        return Err(format!(
            "not card {card} (its \"id\" differs or is missing)"
        ));
    }
    match json["payment_method"]["id"].as_str() {
        Some(m)
            if !m.is_empty()
                && m.len() <= 50
                && m.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') =>
        {
            Ok(m.to_owned())
        }
        _ => Err("no readable \"payment_method.id\"".into()),
    }
}

/// The card token's id: letters, digits, `-` and `_`, at most [`MAX_CARD_TOKEN_BYTES`].
pub fn read_card_token(json: &Value) -> Result<String, String> {
    match json["id"].as_str() {
        Some(t)
            if !t.is_empty()
                && t.len() <= MAX_CARD_TOKEN_BYTES
                && t.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') =>
        {
            Ok(t.to_owned())
        }
        _ => Err("no readable card token \"id\"".into()),
    }
}

/// Minor units as the decimal major amount Mercado Pago expects (`2550` → `25.5`).
pub fn major_units(amount: i64) -> f64 {
    amount as f64 / 100.0
}

/// A decimal major amount as minor units (`25.5` → `2550`), if it is one.
fn minor_units(value: &Value) -> Option<i64> {
    let v = value.as_f64()?;
    (v.is_finite() && (0.0..1e15).contains(&v)).then(|| (v * 100.0).round() as i64)
}

/// The payment: `POST /v1/payments` with [`charge_body`], under `key`.
pub(crate) fn charge_request(
    api: &ApiClient,
    key: &str,
    intent: &Intent,
    params: &MercadoPagoParams,
    saved: Option<&SavedCardCharge<'_>>,
) -> Result<reqwest::RequestBuilder, PostError> {
    let body = charge_body(
        &intent.public_id,
        intent.amount,
        intent.description.as_deref(),
        params,
        saved,
    )
    .map_err(PostError::Refused)?;
    let mut body = body;
    if intent.capture_method == CaptureMethod::Manual {
        // Authorize only: `authorized` / `pending_capture` until `PUT /v1/payments/{id}` captures it.
        body["capture"] = json!(false);
    }
    Ok(api
        .post("v1/payments")?
        .header("X-Idempotency-Key", key)
        .json(&body))
}

/// A Mercado Pago payment id safe to put in a path (digits and letters).
fn checked(payment: &str) -> Result<&str, PostError> {
    if !payment.is_empty()
        && payment.len() <= super::MAX_PROVIDER_ID_CHARS
        && payment.chars().all(|c| c.is_ascii_alphanumeric())
    {
        Ok(payment)
    } else {
        Err(PostError::Refused(format!(
            "{:?} is not a Mercado Pago payment id",
            payment.chars().take(80).collect::<String>()
        )))
    }
}

/// The cancel of a payment still open (`pending` Pix or boleto, `in_process`, an `authorized` one: the void):
/// `PUT /v1/payments/{id}` with `{"status": "cancelled"}`, under `key`.
pub(crate) fn cancel_request(
    api: &ApiClient,
    key: &str,
    payment: &str,
) -> Result<reqwest::RequestBuilder, PostError> {
    let payment = checked(payment)?;
    Ok(api
        .put(&format!("v1/payments/{payment}"))?
        .header("X-Idempotency-Key", key)
        .json(&json!({ "status": "cancelled" })))
}

/// The capture of an `authorized` payment: `PUT /v1/payments/{id}` with `{"capture": true}` and the
/// `transaction_amount` when less than all is taken, under `key`.
pub(crate) fn capture_request(
    api: &ApiClient,
    key: &str,
    payment: &str,
    amount: Option<i64>,
) -> Result<reqwest::RequestBuilder, PostError> {
    let payment = checked(payment)?;
    let mut body = json!({ "capture": true });
    if let Some(amount) = amount {
        body["transaction_amount"] = json!(major_units(amount));
    }
    Ok(api
        .put(&format!("v1/payments/{payment}"))?
        .header("X-Idempotency-Key", key)
        .json(&body))
}

/// The payment `payment` as it is now: `GET /v1/payments/{id}`.
pub async fn get_charge(api: &ApiClient, payment: &str) -> Result<Value, String> {
    let payment = checked(payment).map_err(|_| format!("{payment:?} is not a Mercado Pago id"))?;
    api.get_json(&format!("v1/payments/{payment}"), &[])
        .await
        .map_err(|e| format!("{e}"))
}

/// What a saved card's payment is sent with besides the intent's parameters.
#[derive(Debug, Clone, Copy)]
pub struct SavedCardCharge<'a> {
    /// What was minted for this key generation (stored with the request).
    pub minted: &'a MintedCard,
    /// The hookline subscription the intent pays, when it pays one (`subscription_id: "hookline-sub-{id}"`).
    pub subscription_id: Option<i64>,
}

/// The payment's body for the intent `public_id` of `amount` (minor units): the amount, the description (the
/// intent's id when it has none), hookline's reference in `external_reference` (what the lookup searches), and
/// either
/// - the card token (or a non-card method such as Pix), the installments, the issuer and the payer; or
/// - for a saved card ([`MercadoPagoParams::is_saved_card`]), the token minted for this key generation with the
///   card's `payment_method_id`, one installment unless the intent says otherwise, `payer {type: "customer",
///   id}` (Mercado Pago requires a saved card's token to be paid by its customer) and the subscription messaging
///   of automatic payments
///   (<https://www.mercadopago.com.br/developers/en/docs/automatic-payments/recurring-charges/subscription-messaging>):
///   `point_of_interaction {type: "SUBSCRIPTIONS", transaction_data: {first_time_use: false, billing_date,
///   subscription_id}}` — `first_time_use` is false because the card was saved in an earlier, customer-present
///   payment; only what the intent knows is sent (no sequence number: hookline's intent does not know it).
///
/// `Err`: a saved card without its minted token, or with a token beside it (nothing is sent).
pub fn charge_body(
    public_id: &str,
    amount: i64,
    description: Option<&str>,
    params: &MercadoPagoParams,
    saved: Option<&SavedCardCharge<'_>>,
) -> Result<Value, String> {
    let mut body = json!({
        "transaction_amount": major_units(amount),
        "description": description.unwrap_or(public_id),
        "external_reference": public_id,
    });
    if let Some(issuer) = &params.issuer_id {
        body["issuer_id"] = json!(issuer);
    }
    if params.is_saved_card() {
        let (Some(customer), Some(_), None) = (&params.customer_id, &params.card_id, &params.token)
        else {
            return Err(
                "a saved card needs card_id and customer_id, and no token beside them".into(),
            );
        };
        let Some(saved) = saved else {
            return Err("no card token was minted for the saved card".into());
        };
        body["token"] = json!(saved.minted.token);
        body["payment_method_id"] = json!(saved.minted.payment_method_id);
        body["installments"] = json!(params.installments.unwrap_or(1));
        body["payer"] = json!({ "type": "customer", "id": customer });
        let mut data = json!({
            "first_time_use": false,
            "billing_date": saved.minted.billing_date,
        });
        if let Some(id) = saved.subscription_id {
            data["subscription_id"] = json!(format!("hookline-sub-{id}"));
        }
        body["point_of_interaction"] = json!({ "type": "SUBSCRIPTIONS", "transaction_data": data });
        return Ok(body);
    }
    let method = params.payment_method_id.clone().unwrap_or_default();
    let card = !MERCADOPAGO_NON_CARD_METHODS.contains(&method.as_str());
    body["payment_method_id"] = json!(method);
    let mut payer = json!({ "email": params.payer.email });
    if let Some(id) = &params.payer.identification {
        payer["identification"] = json!({ "type": id.kind, "number": id.number });
    }
    body["payer"] = payer;
    if let Some(token) = &params.token {
        body["token"] = json!(token);
    }
    if card {
        body["installments"] = json!(params.installments.unwrap_or(1));
    }
    Ok(body)
}

/// The refund: `POST /v1/payments/{payment}/refunds` of `amount`, under `key`, carrying hookline's refund id as
/// `metadata.hookline_refund` — the identity [`find_refund`] looks it up by once the key has expired. `Err` when
/// `payment` is not a Mercado Pago id (it goes into the path).
pub(crate) fn refund_request(
    api: &ApiClient,
    key: &str,
    payment: &str,
    amount: i64,
    refund_public_id: &str,
) -> Result<reqwest::RequestBuilder, PostError> {
    if payment.is_empty() || !payment.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(PostError::Refused(format!(
            "{payment:?} is not a Mercado Pago payment id"
        )));
    }
    Ok(api
        .post(&format!("v1/payments/{payment}/refunds"))?
        .header("X-Idempotency-Key", key)
        .json(&json!({
            "amount": major_units(amount),
            "metadata": { "hookline_refund": refund_public_id },
        })))
}

/// The payment carrying `external_reference = public_id`, if any: `GET /v1/payments/search?external_reference=…`.
pub async fn find_charge(api: &ApiClient, public_id: &str) -> Result<Option<Value>, String> {
    let page = api
        .get_json(
            "v1/payments/search",
            &[("external_reference", public_id.to_owned())],
        )
        .await
        .map_err(|e| format!("{e}"))?;
    let Some(results) = page["results"].as_array() else {
        return Err("the search answer has no \"results\" list".into());
    };
    Ok(results
        .iter()
        .find(|p| p["external_reference"].as_str() == Some(public_id))
        .cloned())
}

/// The refund of `payment` that is hookline's `refund_public_id`, by its identity only: the one whose
/// `metadata.hookline_refund` says so (`GET /v1/payments/{payment}/refunds`). `Ok(None)`: no refund of the payment
/// can be it — none carries that reference, and none without a reference of hookline's and not `linked` to another
/// of the intent's refunds has its `amount`. Such a refund (made in the dashboard, by another system, or by a
/// version of hookline that sent no metadata) may or may not be this one: never taken for it because its amount
/// fits, and never a reason to send again — `Err`, so the request stays `unknown` for an operator, with the reason.
pub async fn find_refund(
    api: &ApiClient,
    payment: &str,
    refund_public_id: &str,
    amount: i64,
    linked: &[String],
) -> Result<Option<Value>, String> {
    if payment.is_empty() || !payment.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(format!("{payment:?} is not a Mercado Pago payment id"));
    }
    let list = api
        .get_json(&format!("v1/payments/{payment}/refunds"), &[])
        .await
        .map_err(|e| format!("{e}"))?;
    let Some(refunds) = list.as_array() else {
        return Err("the refund list is not a list".into());
    };
    identify_refund(refunds, payment, refund_public_id, amount, linked)
}

/// [`find_refund`]'s decision over the payment's refund list.
fn identify_refund(
    refunds: &[Value],
    payment: &str,
    refund_public_id: &str,
    amount: i64,
    linked: &[String],
) -> Result<Option<Value>, String> {
    if let Some(r) = refunds
        .iter()
        .find(|r| r["metadata"]["hookline_refund"].as_str() == Some(refund_public_id))
    {
        return Ok(Some(r.clone()));
    }
    let anonymous = refunds.iter().find(|r| {
        minor_units(&r["amount"]) == Some(amount)
            && r["metadata"]["hookline_refund"].as_str().is_none()
            && id_text(&r["id"]).is_none_or(|id| !linked.contains(&id))
    });
    match anonymous {
        Some(r) => Err(format!(
            "payment {payment} has a refund of the same amount without hookline's reference ({}): it may be this \
             one or one made elsewhere; an operator decides (nothing is sent again)",
            id_text(&r["id"]).unwrap_or_else(|| "no id".into())
        )),
        None => Ok(None),
    }
}

/// A Mercado Pago id (a number, sometimes a string of digits) as text.
fn id_text(value: &Value) -> Option<String> {
    match value {
        Value::Number(n) if n.is_u64() => Some(n.to_string()),
        Value::String(s) if valid_id(s) => Some(s.clone()),
        _ => None,
    }
}

/// A payment: `approved` → succeeded; `rejected` → declined (`status_detail` is the code);
/// `cancelled` → canceled; `authorized` (`capture: false`) → requires_capture; `pending`/`in_process` with
/// `point_of_interaction.transaction_data` (Pix: the QR code to pay) → requires_action; anything else (pending,
/// in_process) → processing.
pub fn read_payment(json: &Value) -> Result<Object, String> {
    if !json.is_object() {
        return Err("not a JSON object".into());
    }
    let id = match &json["id"] {
        Value::Null => return Err("no \"id\"".into()),
        v => id_text(v).ok_or("\"id\" is not an id of this provider")?,
    };
    let Some(status) = json["status"].as_str() else {
        return Err("no \"status\"".into());
    };
    let data = &json["point_of_interaction"]["transaction_data"];
    let verdict = match status {
        "approved" => Verdict::Status {
            status: "succeeded",
            next_action: None,
        },
        "rejected" => {
            let code =
                bounded(&json["status_detail"], 200).unwrap_or_else(|| "rejected".to_owned());
            Verdict::Declined {
                message: format!("Mercado Pago rejected the payment: {code}"),
                code,
            }
        }
        "cancelled" => Verdict::Status {
            status: "canceled",
            next_action: None,
        },
        // `capture: false`: authorized, `pending_capture` until captured or cancelled.
        "authorized" => Verdict::Status {
            status: "requires_capture",
            next_action: None,
        },
        "pending" | "in_process" if data.is_object() => Verdict::Status {
            status: "requires_action",
            next_action: Some(json!({
                "type": "pix_qr_code",
                "qr_code": bounded(&data["qr_code"], 4096),
                "qr_code_base64": bounded(&data["qr_code_base64"], 16384),
                "ticket_url": bounded(&data["ticket_url"], 2000),
            })),
        },
        _ => Verdict::Status {
            status: "processing",
            next_action: None,
        },
    };
    Ok(Object { id, verdict })
}

/// A refund: `approved` → succeeded, `rejected`/`cancelled` → failed, anything else → pending at the gateway.
pub fn read_refund(json: &Value) -> Result<Object, String> {
    if !json.is_object() {
        return Err("not a JSON object".into());
    }
    let id = match &json["id"] {
        Value::Null => return Err("no \"id\"".into()),
        v => id_text(v).ok_or("\"id\" is not an id of this provider")?,
    };
    Object::refund(
        id,
        json["status"].as_str(),
        "approved",
        &["rejected", "cancelled"],
    )
}

impl ApiClient {
    /// `GET {base}/v1/payments/{id}` (Mercado Pago), the raw JSON body: the worker's fetch of a payment its
    /// notification only names.
    pub async fn mercadopago_payment(&self, id: &str) -> Result<Vec<u8>, HandleError> {
        // The id came from signed material and was checked by the caller; still, only path-safe characters.
        if id.is_empty()
            || id.len() > 128
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(HandleError::permanent(format!(
                "payment id {id:?} is not a Mercado Pago resource id"
            )));
        }
        let url = self
            .url(&format!("v1/payments/{id}"))
            .map_err(HandleError::permanent)?;
        let body = self.get(url.clone()).await?;
        // Only the payment asked for is applied: a 2xx from something that is not the provider's API (a
        // portal, a proxy's page, another resource) is not a payment.
        let payment: Value = serde_json::from_slice(&body).map_err(|e| {
            HandleError::permanent(format!(
                "GET {url}: the answer is not a Mercado Pago payment (not JSON: {e}); check providers.{}.api_base",
                self.provider
            ))
        })?;
        let answered = match &payment["id"] {
            Value::Number(n) => Some(n.to_string()),
            Value::String(s) => Some(s.clone()),
            _ => None,
        };
        if answered.as_deref() != Some(id) {
            return Err(HandleError::permanent(format!(
                "GET {url}: the answer is not Mercado Pago payment {id} (its \"id\" is {}); check providers.{}.api_base",
                answered.map_or_else(|| "missing".to_owned(), |a| format!("{:?}", a.chars().take(40).collect::<String>())),
                self.provider
            )));
        }
        Ok(body)
    }
}

/// Reconciliation's listing: `GET /v1/payments/search` over the window by `date_last_updated`, oldest first,
/// `offset`-paged (the cursor). A payment whose state differs from hookline's gets a notification with the key
/// `mp:{id}:reconcile:{date_last_updated}`: the worker fetches the payment and applies it, as for a webhook.
pub async fn list_payments(
    api: &ApiClient,
    window: super::Window,
    cursor: Option<&str>,
) -> anyhow::Result<super::PaymentsPage> {
    use hookline_payments::model::PaymentFact;
    const LIMIT: u64 = 50;
    let offset: u64 = cursor.and_then(|c| c.parse().ok()).unwrap_or(0);
    let query = vec![
        ("range", "date_last_updated".to_string()),
        ("begin_date", super::Window::rfc3339(window.since)),
        ("end_date", super::Window::rfc3339(window.until)),
        ("sort", "date_last_updated".to_string()),
        ("criteria", "asc".to_string()),
        ("limit", LIMIT.to_string()),
        ("offset", offset.to_string()),
    ];
    let page = api
        .get_json("v1/payments/search", &query)
        .await
        .map_err(super::unavailable)?;
    let results = page["results"].as_array().cloned().unwrap_or_default();
    let mut listed = super::PaymentsPage {
        seen: results.len() as u64,
        ..Default::default()
    };
    for payment in &results {
        let read = listed.read(
            "payment",
            payment,
            |p| match &p["id"] {
                Value::Number(n) => Some(n.to_string()),
                Value::String(s) => Some(s.clone()),
                _ => None,
            },
            hookline_payments::normalize::payment_resource,
        )?;
        let Some((id, facts)) = read else {
            continue;
        };
        let refunded: i64 = facts
            .iter()
            .map(|f| match f {
                PaymentFact::Refund { amount, .. } => amount.amount,
                _ => 0,
            })
            .sum();
        let updated = payment["date_last_updated"]
            .as_str()
            .unwrap_or("unknown")
            .to_owned();
        let notification = json!({
            "id": format!("reconcile-{id}-{updated}"),
            "type": "payment",
            "action": "payment.updated",
            "data": { "id": id },
        });
        listed.payments.push(super::ListedPayment {
            label: format!("payment {id}"),
            notification: super::reconcile_notification(
                api,
                format!("mp:{}:reconcile:{updated}", id.to_lowercase()),
                "payment".into(),
                format!("data.id={id}&type=payment"),
                &notification,
            )?,
            id,
            facts,
            refunded,
        });
    }
    let next = offset + results.len() as u64;
    let total = page["paging"]["total"].as_u64().unwrap_or(0);
    listed.cursor = next.to_string();
    listed.more = !results.is_empty() && next < total;
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn major_units_are_decimal() {
        assert_eq!(major_units(2550), 25.5);
        assert_eq!(major_units(1), 0.01);
        assert_eq!(json!(major_units(9999)).to_string(), "99.99");
        assert_eq!(minor_units(&json!(99.99)), Some(9999));
        assert_eq!(minor_units(&json!("1")), None);
    }

    #[test]
    fn payments_read_as_outcomes() {
        let approved = read_payment(&json!({"id": 12, "status": "approved"})).unwrap();
        assert_eq!(approved.id, "12");
        assert_eq!(
            approved.verdict,
            Verdict::Status {
                status: "succeeded",
                next_action: None
            }
        );
        assert_eq!(
            read_payment(&json!({"id": 12, "status": "rejected", "status_detail": "cc_rejected_other_reason"}))
                .unwrap()
                .verdict,
            Verdict::Declined {
                code: "cc_rejected_other_reason".into(),
                message: "Mercado Pago rejected the payment: cc_rejected_other_reason".into()
            }
        );
        let pix = read_payment(&json!({"id": 13, "status": "pending",
            "point_of_interaction": {"transaction_data": {"qr_code": "000201…", "qr_code_base64": "iVBOR", "ticket_url": "https://x"}}}))
        .unwrap();
        match pix.verdict {
            Verdict::Status {
                status: "requires_action",
                next_action: Some(a),
            } => {
                assert_eq!(a["type"], "pix_qr_code");
                assert_eq!(a["qr_code"], "000201…");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            read_payment(&json!({"id": 14, "status": "in_process"}))
                .unwrap()
                .verdict,
            Verdict::Status {
                status: "processing",
                next_action: None
            }
        );
        assert!(read_payment(&json!({"status": "approved"})).is_err());
        assert!(read_payment(&json!({"id": -1, "status": "approved"})).is_err());
    }

    fn saved_params() -> MercadoPagoParams {
        MercadoPagoParams {
            card_id: Some("1562188766852".into()),
            customer_id: Some("448870796-7ZjwhKGxILixxN".into()),
            installments: Some(1),
            ..MercadoPagoParams::default()
        }
    }

    fn minted() -> MintedCard {
        MintedCard {
            token: "ff8080814c11e237014c1ff593b57b4d".into(),
            payment_method_id: "master".into(),
            billing_date: "2026-12-03".into(),
        }
    }

    #[test]
    fn a_saved_card_is_paid_by_its_customer_with_the_minted_token_and_subscription_messaging() {
        let minted = minted();
        let saved = SavedCardCharge {
            minted: &minted,
            subscription_id: Some(12),
        };
        let body = charge_body(
            "pi_hl_1",
            2550,
            Some("Plano mensal"),
            &saved_params(),
            Some(&saved),
        )
        .expect("body");
        assert_eq!(
            body,
            json!({
                "transaction_amount": 25.5,
                "description": "Plano mensal",
                "external_reference": "pi_hl_1",
                "token": "ff8080814c11e237014c1ff593b57b4d",
                "payment_method_id": "master",
                "installments": 1,
                "payer": {"type": "customer", "id": "448870796-7ZjwhKGxILixxN"},
                "point_of_interaction": {
                    "type": "SUBSCRIPTIONS",
                    "transaction_data": {
                        "first_time_use": false,
                        "billing_date": "2026-12-03",
                        "subscription_id": "hookline-sub-12"
                    }
                }
            })
        );
        // The same minted token, the same body: what every attempt of a key generation sends.
        assert_eq!(
            charge_body(
                "pi_hl_1",
                2550,
                Some("Plano mensal"),
                &saved_params(),
                Some(&saved)
            ),
            Ok(body)
        );
        // Without a subscription: no subscription_id, the rest alike.
        let plain = charge_body(
            "pi_hl_2",
            100,
            None,
            &saved_params(),
            Some(&SavedCardCharge {
                minted: &minted,
                subscription_id: None,
            }),
        )
        .expect("body");
        assert_eq!(plain["description"], "pi_hl_2");
        assert_eq!(
            plain["point_of_interaction"]["transaction_data"],
            json!({"first_time_use": false, "billing_date": "2026-12-03"})
        );
        assert_eq!(plain["payer"].get("email"), None);
    }

    #[test]
    fn a_saved_card_without_its_minted_token_or_with_a_token_beside_it_is_not_sent() {
        assert!(charge_body("pi_hl_1", 100, None, &saved_params(), None).is_err());
        let minted = minted();
        let saved = SavedCardCharge {
            minted: &minted,
            subscription_id: None,
        };
        let both = MercadoPagoParams {
            token: Some("tok".into()),
            ..saved_params()
        };
        assert!(charge_body("pi_hl_1", 100, None, &both, Some(&saved)).is_err());
        let half = MercadoPagoParams {
            customer_id: None,
            ..saved_params()
        };
        assert!(charge_body("pi_hl_1", 100, None, &half, Some(&saved)).is_err());
        // A new card's body is unchanged by a minted token passed by mistake: it is not a saved card.
        let card = MercadoPagoParams {
            token: Some("tok".into()),
            payment_method_id: Some("visa".into()),
            ..MercadoPagoParams::default()
        };
        let body = charge_body("pi_hl_1", 100, None, &card, Some(&saved)).expect("body");
        assert_eq!(body["token"], "tok");
        assert_eq!(body["payment_method_id"], "visa");
        assert_eq!(body.get("point_of_interaction"), None);
    }

    #[test]
    fn the_saved_card_steps_are_built_on_the_api_base_with_checked_ids() {
        let api = ApiClient::new(
            "mp",
            url::Url::parse("http://127.0.0.1:9/").expect("url"),
            Some(secrecy::SecretString::from("TEST-token")),
        );
        let lookup = saved_card_request(&api, "448870796-7ZjwhKGxILixxN", "1562188766852")
            .expect("request")
            .build()
            .expect("built");
        assert_eq!(lookup.method(), reqwest::Method::GET);
        assert_eq!(
            lookup.url().as_str(),
            "http://127.0.0.1:9/v1/customers/448870796-7ZjwhKGxILixxN/cards/1562188766852"
        );
        assert_eq!(
            lookup.headers()["authorization"].to_str().ok(),
            Some("Bearer TEST-token")
        );
        let token = card_token_request(&api, "448870796-7ZjwhKGxILixxN", "1562188766852")
            .expect("request")
            .build()
            .expect("built");
        assert_eq!(token.method(), reqwest::Method::POST);
        assert_eq!(token.url().as_str(), "http://127.0.0.1:9/v1/card_tokens");
        let sent: Value = serde_json::from_slice(
            token
                .body()
                .and_then(|b| b.as_bytes())
                .expect("a JSON body"),
        )
        .expect("JSON");
        assert_eq!(
            sent,
            json!({"card_id": "1562188766852", "customer_id": "448870796-7ZjwhKGxILixxN"})
        );
        for (customer, card) in [("c/../x", "1"), ("c", "1?x=2"), ("", "1"), ("c", "")] {
            assert!(
                matches!(
                    saved_card_request(&api, customer, card),
                    Err(PostError::Refused(_))
                ),
                "{customer} {card}"
            );
            assert!(matches!(
                card_token_request(&api, customer, card),
                Err(PostError::Refused(_))
            ));
        }
    }

    #[test]
    fn saved_cards_and_card_tokens_read_as_mercado_pago_answers_them() {
        let card = json!({"id": "1562188766852", "customer_id": "c-1",
            "payment_method": {"id": "master", "name": "Mastercard"}, "last_four_digits": "6351"});
        assert_eq!(read_saved_card(&card, "1562188766852"), Ok("master".into()));
        // Mercado Pago's reference shows the id as a number too.
        assert_eq!(
            read_saved_card(
                &json!({"id": 1562188766852u64, "payment_method": {"id": "visa"}}),
                "1562188766852"
            ),
            Ok("visa".into())
        );
        assert!(read_saved_card(&card, "1").is_err(), "another card");
        assert!(read_saved_card(&json!({"id": "1"}), "1").is_err());
        assert!(read_saved_card(
            &json!({"id": "1", "payment_method": {"id": "Visa card"}}),
            "1"
        )
        .is_err());
        assert!(read_saved_card(&json!([]), "1").is_err());
        assert_eq!(
            read_card_token(&json!({"id": "3d2b6f0a", "status": "active"})),
            Ok("3d2b6f0a".into())
        );
        for bad in [
            json!({}),
            json!({"id": ""}),
            json!({"id": 5}),
            json!({"id": "a b"}),
            json!({"id": "t".repeat(129)}),
        ] {
            assert!(read_card_token(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_billing_date_is_the_utc_day_and_the_token_is_never_shown() {
        let at = time::macros::datetime!(2026-12-31 23:30 -03:00);
        assert_eq!(MintedCard::billing_date_of(at), "2027-01-01");
        let shown = format!("{:?}", minted());
        assert!(!shown.contains("ff8080814c11"), "{shown}");
        assert!(shown.contains("master"), "{shown}");
    }

    #[test]
    fn a_refund_is_found_by_hooklines_reference_never_by_its_amount() {
        let ours = json!({"id": 11, "amount": 20.0, "metadata": {"hookline_refund": "re_hl_7"}});
        let other_hookline =
            json!({"id": 12, "amount": 20.0, "metadata": {"hookline_refund": "re_hl_8"}});
        let outside = json!({"id": 13, "amount": 20.0, "metadata": {}});
        let smaller = json!({"id": 14, "amount": 5.0});
        // Found by its identity, whatever else the payment holds.
        let found = identify_refund(&[outside.clone(), ours.clone()], "99", "re_hl_7", 2000, &[]);
        assert_eq!(found, Ok(Some(ours)));
        // Another refund of hookline's, or one of another amount, is never ours: not found.
        assert_eq!(
            identify_refund(&[other_hookline, smaller], "99", "re_hl_7", 2000, &[]),
            Ok(None)
        );
        // One of the same amount without hookline's reference may be ours or not: an operator decides.
        let ambiguous = identify_refund(std::slice::from_ref(&outside), "99", "re_hl_7", 2000, &[]);
        assert!(
            ambiguous
                .as_ref()
                .is_err_and(|e| e.contains("operator") && e.contains("13")),
            "{ambiguous:?}"
        );
        // …unless it already belongs to another refund of the intent.
        assert_eq!(
            identify_refund(&[outside], "99", "re_hl_7", 2000, &["13".to_owned()]),
            Ok(None)
        );
    }
}
