//! Mercado Pago: the payment (`POST /v1/payments` with the intent's [`MercadoPagoParams`]: card token or Pix,
//! payer), the refund, the lookups by hookline's own reference (`external_reference`), the worker's payment
//! fetch, and how its objects read.

use hookline_core::handler::HandleError;
use serde_json::{json, Value};

use super::{bounded, valid_id, ApiClient, Object, PostError, Verdict};
use crate::intents::Intent;
use crate::params::{MercadoPagoParams, MERCADOPAGO_NON_CARD_METHODS};

/// Minor units as the decimal major amount Mercado Pago expects (`2550` → `25.5`).
pub fn major_units(amount: i64) -> f64 {
    amount as f64 / 100.0
}

/// A decimal major amount as minor units (`25.5` → `2550`), if it is one.
fn minor_units(value: &Value) -> Option<i64> {
    let v = value.as_f64()?;
    (v.is_finite() && (0.0..1e15).contains(&v)).then(|| (v * 100.0).round() as i64)
}

/// The payment: `POST /v1/payments` with the card token (or a non-card method such as Pix), the installments,
/// the issuer, the payer and hookline's reference in `external_reference` (what the lookup searches), under `key`.
pub(crate) fn charge_request(
    api: &ApiClient,
    key: &str,
    intent: &Intent,
    params: &MercadoPagoParams,
) -> Result<reqwest::RequestBuilder, PostError> {
    let method = params.payment_method_id.clone().unwrap_or_default();
    let card = !MERCADOPAGO_NON_CARD_METHODS.contains(&method.as_str());
    let mut body = json!({
        "transaction_amount": major_units(intent.amount),
        "description": intent.description.clone().unwrap_or_else(|| intent.public_id.clone()),
        "payment_method_id": method,
        "external_reference": intent.public_id,
    });
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
    if let Some(issuer) = &params.issuer_id {
        body["issuer_id"] = json!(issuer);
    }
    Ok(api
        .post("v1/payments")?
        .header("X-Idempotency-Key", key)
        .json(&body))
}

/// The refund: `POST /v1/payments/{payment}/refunds` of `amount`, under `key`. `Err` when `payment` is not a
/// Mercado Pago id (it goes into the path).
pub(crate) fn refund_request(
    api: &ApiClient,
    key: &str,
    payment: &str,
    amount: i64,
) -> Result<reqwest::RequestBuilder, PostError> {
    if payment.is_empty() || !payment.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(PostError::Refused(format!(
            "{payment:?} is not a Mercado Pago payment id"
        )));
    }
    Ok(api
        .post(&format!("v1/payments/{payment}/refunds"))?
        .header("X-Idempotency-Key", key)
        .json(&json!({ "amount": major_units(amount) })))
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

/// The refund of `payment` that is hookline's `refund_public_id`: the one whose `metadata.hookline_refund` says
/// so, else one of `amount` not already linked to another refund of the intent (`linked`).
/// `GET /v1/payments/{payment}/refunds`.
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
    if let Some(r) = refunds
        .iter()
        .find(|r| r["metadata"]["hookline_refund"].as_str() == Some(refund_public_id))
    {
        return Ok(Some(r.clone()));
    }
    Ok(refunds
        .iter()
        .find(|r| {
            minor_units(&r["amount"]) == Some(amount)
                && id_text(&r["id"]).is_some_and(|id| !linked.contains(&id))
                && r["metadata"]["hookline_refund"].as_str().is_none()
        })
        .cloned())
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
/// `cancelled` → failed; `pending`/`in_process` with `point_of_interaction.transaction_data` (Pix: the QR code
/// to pay) → requires_action; anything else (pending, in_process, authorized) → processing.
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
            status: "failed",
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
    let Some(status) = json["status"].as_str() else {
        return Err("no \"status\"".into());
    };
    let status = match status {
        "approved" => "succeeded",
        "rejected" | "cancelled" => "failed",
        _ => "requires_dispatch",
    };
    Ok(Object {
        id,
        verdict: Verdict::Status {
            status,
            next_action: None,
        },
    })
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
}
