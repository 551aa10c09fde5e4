//! Pagar.me Core API v5, outbound (<https://docs.pagar.me/reference>): the order that charges an intent
//! (`POST /core/v5/orders`), the refund (`DELETE /core/v5/charges/{charge_id}` with `{amount}`, partial or total),
//! the lookup of an order by hookline's reference (`GET /core/v5/orders?code=…`), the lists reconciliation pages
//! through, and how the answers read. The webhook's fetch of a charge lives beside it ([`super::pagarme`] on the
//! inbound side).
//!
//! - **Authentication**: HTTP Basic, the secret key (`api_token`) as the user and an empty password — never a
//!   Bearer token (<https://docs.pagar.me/reference/autenticação-2>).
//! - **Idempotency**: `Idempotency-Key` on every attempt (the intent's key, a refund's own key); Pagar.me forgets
//!   a key 24 hours after its first use (`providers.NAME.idempotency_key_ttl_secs`, 86400 by default for this
//!   scheme), after which the dispatcher looks the order up by its `code` before anything is sent again.
//! - **hookline's reference**: the order `code` is the intent's public id (`pi_hl_…`, within Pagar.me's 52
//!   characters), repeated in `metadata.hookline_intent`.
//! - **The payment's id** is the order's one charge (`ch_…`), not the order (`or_…`): Pagar.me refunds, and its
//!   `charge.*` webhooks name, the charge.
//! - **Refunds** have no object of their own at Pagar.me: the answer is the charge, with `canceled_amount` grown
//!   (in full: `canceled`). The refund is recorded under `{charge_id}-{refund public id}` (unique per refund). A
//!   refund whose key expired is looked up on the charge: it counts as done when the charge's `canceled_amount`
//!   covers it beside the intent's other refunds already recorded (Pagar.me lists no refunds to search).

use serde_json::{json, Value};

use super::{
    bounded, excerpt, ApiClient, Decline, Object, PostError, Verdict, PAYMENT_METHOD_UNUSABLE,
};
use hookline_core::handler::HandleError;
use hookline_payments::params::{is_pagarme_id, PagarmeParams};
use secrecy::ExposeSecret;

/// Longest order `code` Pagar.me takes.
pub const MAX_ORDER_CODE_CHARS: usize = 52;

/// Orders per page when reconciliation lists them (Pagar.me's `size`, at most 30 in its examples).
pub const LIST_PAGE_SIZE: u32 = 30;

/// A request to `path` under the API base, authenticated as Pagar.me requires (Basic, secret key, empty
/// password). `Err` only when the URL cannot be built or there is no HTTP client.
fn request(
    api: &ApiClient,
    method: reqwest::Method,
    path: &str,
) -> Result<reqwest::RequestBuilder, PostError> {
    let url = api.url(path).map_err(PostError::Refused)?;
    let http = api.http().map_err(PostError::NoClient)?;
    let mut req = http.request(method, url);
    if let Some(token) = &api.token {
        req = req.basic_auth(token.expose_secret(), Some(""));
    }
    Ok(req)
}

/// The order: `POST /core/v5/orders` with [`order_body`], under `key`.
pub(crate) fn order_request(
    api: &ApiClient,
    key: &str,
    order: &OrderFor<'_>,
    params: &PagarmeParams,
) -> Result<reqwest::RequestBuilder, PostError> {
    let body = order_body(order, params).map_err(PostError::Refused)?;
    Ok(request(api, reqwest::Method::POST, "core/v5/orders")?
        .header("Idempotency-Key", key)
        .json(&body))
}

/// What an order is built from besides the intent's parameters.
#[derive(Debug, Clone, Copy)]
pub struct OrderFor<'a> {
    /// The intent's public id: the order's `code`.
    pub public_id: &'a str,
    /// Minor units (centavos).
    pub amount: i64,
    /// The item's description (the intent's id when it has none).
    pub description: Option<&'a str>,
    /// The hookline subscription a billing charge pays (`metadata.hookline_subscription`).
    pub subscription_id: Option<i64>,
    /// Authorize only (`operation_type: auth_only`; a card's): captured later by `POST /charges/{id}/capture`.
    pub authorize_only: bool,
}

/// The order's body: `code` = the intent's public id, one item of the whole amount, one payment of the method
/// the parameters name (credit card `auth_and_capture` with `card_id` or `card_token`; Pix; boleto), the
/// customer (`customer_id` or a new `customer`), `closed: true`. `Err`: what cannot be sent (nothing is).
pub fn order_body(order: &OrderFor<'_>, params: &PagarmeParams) -> Result<Value, String> {
    if order.public_id.is_empty() || order.public_id.chars().count() > MAX_ORDER_CODE_CHARS {
        return Err(format!(
            "the order code must be 1 to {MAX_ORDER_CODE_CHARS} characters"
        ));
    }
    if order.amount <= 0 || order.amount > i64::from(i32::MAX) {
        return Err(format!(
            "the amount {} is outside Pagar.me's range",
            order.amount
        ));
    }
    let method = params.payment_method.as_deref().unwrap_or_default();
    let mut payment = json!({ "payment_method": method, "amount": order.amount });
    match method {
        "credit_card" => {
            let mut card = json!({
                "installments": params.installments.unwrap_or(1),
                "operation_type": if order.authorize_only { "auth_only" } else { "auth_and_capture" },
            });
            match (&params.card_id, &params.card_token) {
                (Some(id), None) if is_pagarme_id(id, "card_") => card["card_id"] = json!(id),
                (None, Some(token)) => card["card_token"] = json!(token),
                (Some(_), Some(_)) => {
                    return Err("a card_id and a card_token: one of them, not both".into())
                }
                (Some(id), None) => {
                    return Err(format!(
                        "{:?} is not a Pagar.me card id",
                        id.chars().take(80).collect::<String>()
                    ))
                }
                (None, None) => return Err("a credit card needs card_id or card_token".into()),
            }
            if let Some(d) = &params.statement_descriptor {
                card["statement_descriptor"] = json!(d);
            }
            payment["credit_card"] = card;
        }
        // A day to pay, Pagar.me's own default for the QR code.
        "pix" => payment["pix"] = json!({ "expires_in": 86_400 }),
        "boleto" => payment["boleto"] = json!({}),
        other => {
            return Err(format!(
                "{:?} is not a Pagar.me payment method (credit_card, pix, boleto)",
                other.chars().take(40).collect::<String>()
            ))
        }
    }
    let mut metadata = json!({ "hookline_intent": order.public_id });
    if let Some(id) = order.subscription_id {
        metadata["hookline_subscription"] = json!(id.to_string());
    }
    let mut body = json!({
        "code": order.public_id,
        "items": [{
            "amount": order.amount,
            "description": order.description.unwrap_or(order.public_id),
            "quantity": 1,
            "code": order.public_id,
        }],
        "payments": [payment],
        "closed": true,
        "metadata": metadata,
    });
    match (&params.customer_id, &params.customer) {
        (Some(id), _) if is_pagarme_id(id, "cus_") => body["customer_id"] = json!(id),
        (Some(id), _) => {
            return Err(format!(
                "{:?} is not a Pagar.me customer id",
                id.chars().take(80).collect::<String>()
            ))
        }
        (None, Some(c)) => {
            let mut customer = json!({ "name": c.name });
            for (field, value) in [
                ("email", &c.email),
                ("document", &c.document),
                ("type", &c.kind),
            ] {
                if let Some(v) = value {
                    customer[field] = json!(v);
                }
            }
            body["customer"] = customer;
        }
        (None, None) => return Err("Pagar.me requires the order's customer".into()),
    }
    Ok(body)
}

/// The refund: `DELETE /core/v5/charges/{charge}` `{"amount": cents}`, under `key`. `Err` when `charge` is not a
/// Pagar.me charge id (it goes into the path).
pub(crate) fn refund_request(
    api: &ApiClient,
    key: &str,
    charge: &str,
    amount: i64,
) -> Result<reqwest::RequestBuilder, PostError> {
    if !is_pagarme_id(charge, "ch_") {
        return Err(PostError::Refused(format!(
            "{:?} is not a Pagar.me charge id",
            charge.chars().take(80).collect::<String>()
        )));
    }
    Ok(request(
        api,
        reqwest::Method::DELETE,
        &format!("core/v5/charges/{charge}"),
    )?
    .header("Idempotency-Key", key)
    .json(&json!({ "amount": amount })))
}

/// A Pagar.me charge id, checked before it goes in a path.
fn checked_charge(charge: &str) -> Result<&str, PostError> {
    if is_pagarme_id(charge, "ch_") {
        Ok(charge)
    } else {
        Err(PostError::Refused(format!(
            "{:?} is not a Pagar.me charge id",
            charge.chars().take(80).collect::<String>()
        )))
    }
}

/// The cancel of a charge not paid (an authorization: the void; a Pix or boleto waiting): `DELETE
/// /core/v5/charges/{id}` without an amount, under `key`. On a PAID charge the same call is a refund: the
/// dispatcher reads the charge first and never sends this for one ([`Api::cancel_may_refund`]).
///
/// [`Api::cancel_may_refund`]: super::Api::cancel_may_refund
pub(crate) fn cancel_request(
    api: &ApiClient,
    key: &str,
    charge: &str,
) -> Result<reqwest::RequestBuilder, PostError> {
    let charge = checked_charge(charge)?;
    Ok(request(
        api,
        reqwest::Method::DELETE,
        &format!("core/v5/charges/{charge}"),
    )?
    .header("Idempotency-Key", key))
}

/// The capture of an authorized charge: `POST /core/v5/charges/{id}/capture` with `amount` when less than all
/// is taken, under `key`.
pub(crate) fn capture_request(
    api: &ApiClient,
    key: &str,
    charge: &str,
    amount: Option<i64>,
) -> Result<reqwest::RequestBuilder, PostError> {
    let charge = checked_charge(charge)?;
    let body = match amount {
        Some(a) => json!({ "amount": a }),
        None => json!({}),
    };
    Ok(request(
        api,
        reqwest::Method::POST,
        &format!("core/v5/charges/{charge}/capture"),
    )?
    .header("Idempotency-Key", key)
    .json(&body))
}

/// The charge `charge` as it is now: `GET /core/v5/charges/{id}`.
pub async fn get_charge(api: &ApiClient, charge: &str) -> Result<Value, String> {
    let charge =
        checked_charge(charge).map_err(|_| format!("{charge:?} is not a Pagar.me charge id"))?;
    get_json(api, &format!("core/v5/charges/{charge}"), &[]).await
}

/// The order's one charge (`charges[0]`), if it has one.
fn first_charge(order: &Value) -> Option<&Value> {
    order["charges"].as_array().and_then(|c| c.first())
}

/// An order (the answer to its creation, or one found by lookup) as the outcome of its one charge:
/// `paid` → succeeded; `failed` → declined with the acquirer's code (`acquirer_return_code`, else the
/// transaction's status such as `not_authorized`) and message; `canceled` → failed; `pending` with a Pix QR
/// code or a boleto line → requires_action (what to show the customer); anything else (`processing`,
/// `pending`) → processing. The object's id is the charge's (`ch_…`).
pub fn read_order(json: &Value) -> Result<Object, String> {
    if !json.is_object() {
        return Err("not a JSON object".into());
    }
    match json["id"].as_str() {
        Some(id) if is_pagarme_id(id, "or_") => {}
        _ => return Err("no order \"id\" (or_…)".into()),
    }
    let charge = first_charge(json).ok_or("the order has no charge")?;
    read_charge(charge)
}

/// A charge as an outcome (see [`read_order`]).
pub fn read_charge(charge: &Value) -> Result<Object, String> {
    let id = match charge["id"].as_str() {
        Some(id) if is_pagarme_id(id, "ch_") => id.to_owned(),
        _ => return Err("no charge \"id\" (ch_…)".into()),
    };
    let status = charge["status"].as_str().ok_or("no charge \"status\"")?;
    let t = &charge["last_transaction"];
    let plain = |status| Verdict::Status {
        status,
        next_action: None,
    };
    let verdict = match status {
        "paid" | "overpaid" | "underpaid" => plain("succeeded"),
        "failed" => {
            let code = bounded(&t["acquirer_return_code"], 100)
                .filter(|c| !c.is_empty())
                .or_else(|| bounded(&t["status"], 100))
                .unwrap_or_else(|| "failed".to_owned());
            let message = bounded(&t["acquirer_message"], 300)
                .filter(|m| !m.is_empty())
                .or_else(|| {
                    t["gateway_response"]["errors"]
                        .as_array()
                        .and_then(|e| e.first())
                        .and_then(|e| bounded(&e["message"], 300))
                })
                .unwrap_or_else(|| "Pagar.me declined the charge".to_owned());
            Verdict::Declined { code, message }
        }
        "canceled" => plain("canceled"),
        // `auth_only`: authorized, waiting for its capture.
        _ if t["status"].as_str() == Some("authorized_pending_capture") => {
            plain("requires_capture")
        }
        "pending" if t["qr_code"].is_string() => Verdict::Status {
            status: "requires_action",
            next_action: Some(json!({
                "type": "pix_qr_code",
                "qr_code": bounded(&t["qr_code"], 4096),
                "qr_code_url": bounded(&t["qr_code_url"], 2000),
                "expires_at": bounded(&t["expires_at"], 64),
            })),
        },
        "pending" if t["line"].is_string() => Verdict::Status {
            status: "requires_action",
            next_action: Some(json!({
                "type": "boleto",
                "line": bounded(&t["line"], 200),
                "barcode": bounded(&t["barcode"], 200),
                "url": bounded(&t["url"], 2000),
                "pdf": bounded(&t["pdf"], 2000),
            })),
        },
        _ => plain("processing"),
    };
    Ok(Object { id, verdict })
}

/// The id a refund of `charge` is recorded under: Pagar.me gives a refund no id of its own.
pub fn refund_record_id(charge: &str, refund_public_id: &str) -> String {
    format!("{charge}-{refund_public_id}")
}

/// The answer to a refund (the charge, `canceled_amount` grown) for hookline's refund `refund_public_id`:
/// succeeded when the charge shows a cancelled amount (`canceled`, or still `paid` after a partial refund);
/// anything else is still pending at the gateway.
pub fn read_refund(json: &Value, refund_public_id: &str) -> Result<Object, String> {
    let id = match json["id"].as_str() {
        Some(id) if is_pagarme_id(id, "ch_") => id.to_owned(),
        _ => return Err("no charge \"id\" (ch_…)".into()),
    };
    let canceled = json["canceled_amount"].as_i64().unwrap_or(0);
    let status = match json["status"].as_str() {
        Some("canceled") => "succeeded",
        Some(_) if canceled > 0 => "succeeded",
        Some(_) => "requires_dispatch",
        None => return Err("no charge \"status\"".into()),
    };
    Ok(Object {
        id: refund_record_id(&id, refund_public_id),
        verdict: Verdict::Status {
            status,
            next_action: None,
        },
    })
}

/// Pagar.me's refusals that are outcomes, not hookline's problem: a refund answered 412 (the charge cannot be
/// cancelled, or by that amount: already refunded, failed, charged back) fails that refund and releases its
/// amount; a charge whose saved card or customer Pagar.me does not find (404), refuses for that customer (412: the
/// card belongs to another customer) or refuses as invalid (422 naming `card_id`, `card_token` or the customer)
/// is a decline, [`PAYMENT_METHOD_UNUSABLE`]: the customer's method must change, not hookline (billing parks the
/// subscription as `needs_payment_method`).
pub fn read_refusal(refund: bool, status: u16, body: &[u8]) -> Option<Decline> {
    let json = serde_json::from_slice::<Value>(body).unwrap_or(Value::Null);
    let message = bounded(&json["message"], 300).unwrap_or_else(|| excerpt(body, 300));
    if refund {
        return (status == 412).then(|| Decline {
            id: None,
            code: "refund_refused".to_owned(),
            message,
        });
    }
    let about_method = json["errors"].as_object().is_some_and(|errors| {
        errors
            .keys()
            .any(|k| k.contains("card_id") || k.contains("card_token") || k.contains("customer_id"))
    });
    (status == 404 || status == 412 || (status == 422 && about_method)).then(|| Decline {
        id: None,
        code: PAYMENT_METHOD_UNUSABLE.to_owned(),
        message,
    })
}

/// `GET {base}/{path}?{query}` with Pagar.me's authentication, its JSON (bounded, classified as
/// [`ApiClient::get`] classifies).
pub async fn get_json(
    api: &ApiClient,
    path: &str,
    query: &[(&str, String)],
) -> Result<Value, String> {
    let mut url = api.url(path)?;
    if !query.is_empty() {
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
    }
    let req = match request(api, reqwest::Method::GET, path) {
        Ok(r) => r,
        Err(PostError::Refused(e) | PostError::NoClient(e)) => return Err(e),
    };
    // The query is set on the built URL: `request` took only the path.
    let req = req.query(query);
    let body = api.read(req, &url).await.map_err(|(_, e)| format!("{e}"))?;
    serde_json::from_slice(&body).map_err(|e| format!("GET {url}: the answer is not JSON: {e}"))
}

/// The charge (`ch_…`) or order (`or_…`) `id` for the worker, which applies what the API says of it rather than
/// the unsigned webhook: `GET /core/v5/charges/{id}` or `/core/v5/orders/{id}`, classified as
/// [`ApiClient::get`] classifies (transient: no answer, 5xx, 429; permanent: 404, refused credentials, a
/// redirect, another id). Read-only, so it may run several times for one event.
pub async fn fetch_object(api: &ApiClient, id: &str) -> Result<Vec<u8>, HandleError> {
    let path = if is_pagarme_id(id, "ch_") {
        format!("core/v5/charges/{id}")
    } else if is_pagarme_id(id, "or_") {
        format!("core/v5/orders/{id}")
    } else {
        return Err(HandleError::permanent(format!(
            "{:?} is neither a Pagar.me charge nor an order id",
            id.chars().take(80).collect::<String>()
        )));
    };
    let url = api.url(&path).map_err(HandleError::permanent)?;
    let req = match request(api, reqwest::Method::GET, &path) {
        Ok(req) => Ok(req),
        Err(PostError::Refused(e)) => return Err(HandleError::permanent(e)),
        Err(PostError::NoClient(e)) => Err(e),
    };
    let body = api.get_counted(req, url.clone()).await?;
    let json: Value = serde_json::from_slice(&body)
        .map_err(|e| HandleError::permanent(format!("GET {url}: the answer is not JSON: {e}")))?;
    if json["id"].as_str() != Some(id) {
        return Err(HandleError::permanent(format!(
            "GET {url}: the answer is not {id} (check providers.{}.api_base)",
            api.provider()
        )));
    }
    Ok(body)
}

/// The order whose `code` is `public_id`, if any: `GET /core/v5/orders?code=…` (only an exact match counts).
pub async fn find_order(api: &ApiClient, public_id: &str) -> Result<Option<Value>, String> {
    let page = get_json(api, "core/v5/orders", &[("code", public_id.to_owned())]).await?;
    let Some(data) = page["data"].as_array() else {
        return Err("the order list has no \"data\" list".into());
    };
    Ok(data
        .iter()
        .find(|o| o["code"].as_str() == Some(public_id))
        .cloned())
}

/// Whether hookline's refund of `amount` on `charge` happened, once its key has expired
/// (`GET /core/v5/charges/{charge}`). Pagar.me gives a refund no identity of its own and takes no reference of
/// hookline's with it: all the charge shows is its `canceled_amount`, which a cancellation made outside hookline
/// (the dashboard, another system) grows too. So the lookup never decides by an amount that happens to fit:
/// - `canceled_amount` < `recorded` (what hookline's other refunds of the charge took) + `amount`: this refund
///   cannot have happened → `Ok(None)` (sent again under the next key);
/// - otherwise it may or may not have → `Err` with the reason, so the request stays `unknown` for an operator,
///   who checks the charge at Pagar.me (nothing is sent again).
pub async fn find_refund(
    api: &ApiClient,
    charge: &str,
    amount: i64,
    recorded: i64,
) -> Result<Option<Value>, String> {
    if !is_pagarme_id(charge, "ch_") {
        return Err(format!("{charge:?} is not a Pagar.me charge id"));
    }
    let json = get_json(api, &format!("core/v5/charges/{charge}"), &[]).await?;
    if json["id"].as_str() != Some(charge) {
        return Err(format!("the answer is not charge {charge}"));
    }
    refund_by_cancelled_amount(&json, charge, amount, recorded)
}

/// [`find_refund`]'s decision over the charge.
fn refund_by_cancelled_amount(
    json: &Value,
    charge: &str,
    amount: i64,
    recorded: i64,
) -> Result<Option<Value>, String> {
    let canceled = json["canceled_amount"].as_i64().unwrap_or(0);
    if canceled < recorded.saturating_add(amount) {
        return Ok(None);
    }
    Err(format!(
        "Pagar.me gives a refund no reference of hookline's: charge {charge} has {canceled} cancelled, enough to \
         hold this refund of {amount} besides the {recorded} hookline recorded, but a cancellation made elsewhere \
         would show the same; an operator decides (nothing is sent again)"
    ))
}

/// Reconciliation's listing: `GET /core/v5/charges` created in the window (Pagar.me filters lists by creation, not
/// by update: a charge created before `--since` and refunded inside the window is not listed), page by page
/// (`page`/`size`, the page number is the cursor). A charge whose state differs from hookline's gets a
/// notification with the key `pgv5:{charge}:reconcile:{updated_at}`: the worker reads the charge from the API and
/// applies it, as for a webhook.
pub async fn list_payments(
    api: &ApiClient,
    window: super::Window,
    cursor: Option<&str>,
) -> anyhow::Result<super::PaymentsPage> {
    use anyhow::Context;
    use hookline_payments::model::PaymentFact;
    const SIZE: u64 = 30;
    let page: u64 = cursor.and_then(|c| c.parse().ok()).unwrap_or(1).max(1);
    let query = vec![
        ("created_since", super::Window::rfc3339(window.since)),
        ("created_until", super::Window::rfc3339(window.until)),
        ("page", page.to_string()),
        ("size", SIZE.to_string()),
    ];
    let list = get_json(api, "core/v5/charges", &query)
        .await
        .map_err(anyhow::Error::msg)
        .context("list the charges (the provider's API may be unavailable; run again)")?;
    let Some(charges) = list["data"].as_array() else {
        anyhow::bail!("the charge list has no \"data\" list");
    };
    let charges = &charges[..charges.len().min(SIZE as usize)];
    let mut listed = super::PaymentsPage {
        seen: charges.len() as u64,
        ..Default::default()
    };
    for charge in charges {
        let read = listed.read(
            "charge",
            charge,
            |c| {
                c["id"]
                    .as_str()
                    .filter(|id| is_pagarme_id(id, "ch_"))
                    .map(str::to_owned)
            },
            hookline_payments::normalize::pagarme_v5_object_resource,
        )?;
        let Some((id, facts)) = read else {
            continue;
        };
        let refunded: i64 = facts
            .iter()
            .map(|f| match f {
                PaymentFact::RefundedTotal { total, .. } => total.amount,
                _ => 0,
            })
            .sum();
        let updated: String = charge["updated_at"]
            .as_str()
            .unwrap_or("unknown")
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | ':' | '.' | '+'))
            .take(40)
            .collect();
        let kind: String = charge["status"]
            .as_str()
            .unwrap_or("updated")
            .chars()
            .filter(char::is_ascii_alphanumeric)
            .take(20)
            .collect();
        let event_type = format!("charge.{kind}");
        let notification = json!({
            "id": format!("reconcile-{id}-{updated}"),
            "type": event_type,
            "data": { "id": id },
        });
        listed.payments.push(super::ListedPayment {
            label: format!("charge {id}"),
            notification: super::reconcile_notification(
                api,
                hookline_signature::pagarme_v5_dedupe_key(
                    Some(&id),
                    &format!("reconcile:{updated}"),
                ),
                event_type,
                String::new(),
                &notification,
            )?,
            id,
            facts,
            refunded,
        });
    }
    listed.cursor = (page + 1).to_string();
    listed.more = !charges.is_empty() && list["paging"]["next"].as_str().is_some();
    Ok(listed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookline_payments::params::PagarmeCustomer;

    fn saved() -> PagarmeParams {
        PagarmeParams {
            payment_method: Some("credit_card".into()),
            card_id: Some("card_xK8yZ3m".into()),
            customer_id: Some("cus_Ab12".into()),
            installments: Some(1),
            ..PagarmeParams::default()
        }
    }

    fn order() -> OrderFor<'static> {
        OrderFor {
            public_id: "pi_hl_abc",
            amount: 2550,
            description: Some("Plano"),
            subscription_id: Some(7),
            authorize_only: false,
        }
    }

    #[test]
    fn a_saved_card_order_carries_hookline_reference_as_its_code() {
        let body = order_body(&order(), &saved()).expect("body");
        assert_eq!(
            body,
            json!({
                "code": "pi_hl_abc",
                "customer_id": "cus_Ab12",
                "items": [{"amount": 2550, "description": "Plano", "quantity": 1, "code": "pi_hl_abc"}],
                "payments": [{"payment_method": "credit_card", "amount": 2550,
                    "credit_card": {"card_id": "card_xK8yZ3m", "installments": 1, "operation_type": "auth_and_capture"}}],
                "closed": true,
                "metadata": {"hookline_intent": "pi_hl_abc", "hookline_subscription": "7"}
            })
        );
        // Every attempt sends the same body.
        assert_eq!(order_body(&order(), &saved()), Ok(body));
    }

    #[test]
    fn tokens_pix_and_boleto_orders_and_what_is_never_sent() {
        let customer = PagarmeCustomer {
            name: Some("Tony Stark".into()),
            email: Some("t@x.com".into()),
            document: Some("12345678909".into()),
            kind: Some("individual".into()),
        };
        let token = PagarmeParams {
            payment_method: Some("credit_card".into()),
            card_token: Some("token_1".into()),
            customer: Some(customer.clone()),
            installments: Some(3),
            ..PagarmeParams::default()
        };
        let body = order_body(&order(), &token).expect("body");
        assert_eq!(body["payments"][0]["credit_card"]["card_token"], "token_1");
        assert_eq!(body["payments"][0]["credit_card"]["installments"], 3);
        assert_eq!(body["customer"]["document"], "12345678909");
        assert_eq!(body.get("customer_id"), None);
        let pix = PagarmeParams {
            payment_method: Some("pix".into()),
            customer: Some(customer.clone()),
            ..PagarmeParams::default()
        };
        let body = order_body(&order(), &pix).expect("pix");
        assert_eq!(body["payments"][0]["pix"]["expires_in"], 86_400);
        assert_eq!(body["payments"][0].get("credit_card"), None);
        for bad in [
            PagarmeParams {
                card_token: Some("token_1".into()),
                ..saved()
            },
            PagarmeParams {
                card_id: Some("card_../x".into()),
                ..saved()
            },
            PagarmeParams {
                customer_id: Some("cus_a/b".into()),
                ..saved()
            },
            PagarmeParams {
                customer_id: None,
                ..saved()
            },
            PagarmeParams {
                payment_method: Some("debit_card".into()),
                ..saved()
            },
        ] {
            assert!(order_body(&order(), &bad).is_err(), "{bad:?}");
        }
        let long = "p".repeat(53);
        assert!(order_body(
            &OrderFor {
                public_id: &long,
                ..order()
            },
            &saved()
        )
        .is_err());
        assert!(order_body(
            &OrderFor {
                amount: 0,
                ..order()
            },
            &saved()
        )
        .is_err());
    }

    #[test]
    fn requests_use_basic_auth_with_the_secret_key_and_the_idempotency_key() {
        let api = ApiClient::new(
            "pagarme",
            url::Url::parse("http://127.0.0.1:9/").expect("url"),
            Some(secrecy::SecretString::from("sk_test_x")),
        );
        let req = order_request(&api, "key-1", &order(), &saved())
            .expect("request")
            .build()
            .expect("built");
        assert_eq!(req.method(), reqwest::Method::POST);
        assert_eq!(req.url().as_str(), "http://127.0.0.1:9/core/v5/orders");
        // base64("sk_test_x:")
        assert_eq!(
            req.headers()["authorization"].to_str().ok(),
            Some("Basic c2tfdGVzdF94Og==")
        );
        assert_eq!(
            req.headers()["idempotency-key"].to_str().ok(),
            Some("key-1")
        );
        let refund = refund_request(&api, "key-2", "ch_1", 500)
            .expect("request")
            .build()
            .expect("built");
        assert_eq!(refund.method(), reqwest::Method::DELETE);
        assert_eq!(
            refund.url().as_str(),
            "http://127.0.0.1:9/core/v5/charges/ch_1"
        );
        let sent: Value =
            serde_json::from_slice(refund.body().and_then(|b| b.as_bytes()).expect("body"))
                .expect("json");
        assert_eq!(sent, json!({"amount": 500}));
        assert!(matches!(
            refund_request(&api, "k", "ch_1/../x", 1),
            Err(PostError::Refused(_))
        ));
    }

    #[test]
    fn orders_read_as_their_charge_outcome() {
        let order = |status: &str, t: Value| {
            json!({"id": "or_1", "code": "pi_hl_1", "status": "x",
                "charges": [{"id": "ch_1", "status": status, "last_transaction": t}]})
        };
        let paid = read_order(&order("paid", json!({"status": "captured"}))).expect("paid");
        assert_eq!(paid.id, "ch_1");
        assert_eq!(
            paid.verdict,
            Verdict::Status {
                status: "succeeded",
                next_action: None
            }
        );
        let declined = read_order(&order(
            "failed",
            json!({"status": "not_authorized", "acquirer_return_code": "1016", "acquirer_message": "Saldo insuficiente"}),
        ))
        .expect("failed");
        assert_eq!(
            declined.verdict,
            Verdict::Declined {
                code: "1016".into(),
                message: "Saldo insuficiente".into()
            }
        );
        let bare = read_order(&order("failed", json!({"status": "not_authorized"}))).expect("bare");
        assert!(
            matches!(bare.verdict, Verdict::Declined { ref code, .. } if code == "not_authorized")
        );
        let pix = read_order(&order(
            "pending",
            json!({"status": "waiting_payment", "qr_code": "000201", "qr_code_url": "https://x"}),
        ))
        .expect("pix");
        assert!(
            matches!(pix.verdict, Verdict::Status { status: "requires_action", next_action: Some(ref a) }
            if a["type"] == "pix_qr_code" && a["qr_code"] == "000201")
        );
        let boleto = read_order(&order(
            "pending",
            json!({"status": "generated", "line": "0019", "url": "https://b"}),
        ))
        .expect("boleto");
        assert!(
            matches!(boleto.verdict, Verdict::Status { status: "requires_action", next_action: Some(ref a) }
            if a["type"] == "boleto")
        );
        assert_eq!(
            read_order(&order("processing", json!({})))
                .expect("p")
                .verdict,
            Verdict::Status {
                status: "processing",
                next_action: None
            }
        );
        assert_eq!(
            read_order(&order("canceled", json!({})))
                .expect("c")
                .verdict,
            Verdict::Status {
                status: "canceled",
                next_action: None
            }
        );
        assert_eq!(
            read_order(&order(
                "pending",
                json!({"status": "authorized_pending_capture"})
            ))
            .expect("a")
            .verdict,
            Verdict::Status {
                status: "requires_capture",
                next_action: None
            }
        );
        assert!(read_order(&json!({"id": "or_1", "charges": []})).is_err());
        assert!(
            read_order(&json!({"id": "x", "charges": [{"id": "ch_1", "status": "paid"}]})).is_err()
        );
        assert!(
            read_order(&json!({"id": "or_1", "charges": [{"id": "ch/1", "status": "paid"}]}))
                .is_err()
        );
        assert!(read_order(&json!([])).is_err());
    }

    #[test]
    fn a_refund_is_never_found_by_a_cancelled_amount_that_fits() {
        let charge =
            |canceled: i64| json!({"id": "ch_1", "status": "paid", "canceled_amount": canceled});
        // Too little cancelled to hold this refund beside the confirmed ones: it never happened.
        assert_eq!(
            refund_by_cancelled_amount(&charge(1_000), "ch_1", 2_000, 0),
            Ok(None)
        );
        assert_eq!(
            refund_by_cancelled_amount(&charge(2_500), "ch_1", 2_000, 1_000),
            Ok(None)
        );
        // Enough to hold it: made by hookline or by someone else — never counted as ours.
        for (canceled, recorded) in [(2_000, 0), (5_000, 1_000)] {
            let why = refund_by_cancelled_amount(&charge(canceled), "ch_1", 2_000, recorded)
                .expect_err("ambiguous");
            assert!(why.contains("operator"), "{why}");
        }
    }

    #[test]
    fn refunds_read_from_the_charge() {
        let partial = read_refund(
            &json!({"id": "ch_1", "status": "paid", "canceled_amount": 500}),
            "re_hl_3",
        )
        .expect("partial");
        assert_eq!(partial.id, "ch_1-re_hl_3");
        assert_eq!(
            partial.verdict,
            Verdict::Status {
                status: "succeeded",
                next_action: None
            }
        );
        let total =
            read_refund(&json!({"id": "ch_1", "status": "canceled"}), "re_hl_4").expect("t");
        assert!(matches!(
            total.verdict,
            Verdict::Status {
                status: "succeeded",
                ..
            }
        ));
        let none = read_refund(&json!({"id": "ch_1", "status": "paid"}), "re_hl_5").expect("n");
        assert!(matches!(
            none.verdict,
            Verdict::Status {
                status: "requires_dispatch",
                ..
            }
        ));
        assert!(read_refund(&json!({"status": "paid"}), "re_hl_5").is_err());
    }
}
