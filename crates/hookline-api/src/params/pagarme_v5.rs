//! The `"pagarme"` provider object (Pagar.me Core API v5): what the merchant API accepts, field by field.

use super::*;

/// Pagar.me v5's provider object ([`params::PagarmeParams`]): ids by their documented prefixes (they go into the
/// order as they are, and a saved card's into no path but still bounded), the method one of
/// [`params::PAGARME_METHODS`], a card by `card_id` or `card_token` (never both) and only with `credit_card`.
pub(super) fn pagarme(fields: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
    refuse_unknown(
        PAGARME,
        fields,
        &[
            "payment_method",
            "card_id",
            "card_token",
            "installments",
            "customer_id",
            "customer",
            "statement_descriptor",
        ],
    )?;
    let id = |path: &str, v: &Value, prefix: &str, what: &str| match v.as_str() {
        Some(s) if params::is_pagarme_id(s, prefix) => Ok(v.clone()),
        _ => Err(invalid(
            path,
            &format!(
                "must be a Pagar.me {what} id ({prefix}…: letters and digits, at most {})",
                params::MAX_PAGARME_ID_BYTES
            ),
        )),
    };
    let out = checked(PAGARME, fields, |path, k, v| match k {
        "payment_method" => match v.as_str() {
            Some(m) if params::PAGARME_METHODS.contains(&m) => Ok(v.clone()),
            _ => Err(invalid(path, "must be credit_card, pix or boleto")),
        },
        "card_id" => id(path, v, "card_", "card"),
        "card_token" => id(path, v, "token_", "card token"),
        "customer_id" => id(path, v, "cus_", "customer"),
        "installments" => match v.as_u64() {
            Some(n) if (1..=MAX_PAGARME_INSTALLMENTS).contains(&n) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!("must be an integer from 1 to {MAX_PAGARME_INSTALLMENTS}"),
            )),
        },
        // Pagar.me cuts the statement descriptor at 13 characters; letters, digits and spaces.
        "statement_descriptor" => ascii(
            path,
            v,
            13,
            |b| b.is_ascii_alphanumeric() || b == b' ',
            "must be at most 13 letters, digits or spaces",
        ),
        _ => pagarme_customer(path, v),
    })?;
    let card = out.contains_key("card_id") || out.contains_key("card_token");
    if out.contains_key("card_id") && out.contains_key("card_token") {
        return Err(invalid(
            "pagarme.card_token",
            "cannot be sent with pagarme.card_id: a saved card or a new card's token, not both",
        ));
    }
    if card && matches!(out.get("payment_method"), Some(Value::String(m)) if m != "credit_card") {
        return Err(invalid(
            "pagarme.payment_method",
            "must be credit_card with a card_id or card_token",
        ));
    }
    if out.contains_key("customer_id") && out.contains_key("customer") {
        return Err(invalid(
            "pagarme.customer",
            "cannot be sent with pagarme.customer_id: a saved customer or a new one, not both",
        ));
    }
    Ok(out)
}

fn pagarme_customer(path: &str, v: &Value) -> Result<Value, ApiError> {
    let Value::Object(fields) = v else {
        return Err(invalid(path, "must be an object"));
    };
    refuse_unknown(path, fields, &["name", "email", "document", "type"])?;
    let out = checked(path, fields, |path, k, v| match k {
        "name" => match v.as_str() {
            Some(s)
                if !s.trim().is_empty()
                    && s.chars().count() <= 64
                    && !s.chars().any(char::is_control) =>
            {
                Ok(v.clone())
            }
            _ => Err(invalid(path, "must be a name of 1 to 64 characters")),
        },
        "email" => match v.as_str() {
            Some(s) if email(s) => Ok(v.clone()),
            _ => Err(invalid(
                path,
                &format!("must be an e-mail address (name@domain.tld, at most {MAX_EMAIL_BYTES})"),
            )),
        },
        "document" => ascii(
            path,
            v,
            16,
            |b| b.is_ascii_digit(),
            "must be a CPF or CNPJ: digits only, at most 16",
        ),
        _ => match v.as_str() {
            Some("individual" | "company") => Ok(v.clone()),
            _ => Err(invalid(path, "must be individual or company")),
        },
    })?;
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(v: Value) -> Result<Option<ProviderObject>, ApiError> {
        from_body(v.as_object().expect("object"), None)
    }

    fn param_of(e: ApiError) -> String {
        match e {
            ApiError::InvalidField { param, .. } | ApiError::ParameterMissing { param } => param,
            other => format!("{other:?}"),
        }
    }

    #[test]
    fn a_pagarme_object_is_checked_field_by_field() {
        let ok = object(
            json!({"pagarme": {"payment_method": "credit_card", "card_id": "card_abc",
            "customer_id": "cus_x1", "installments": 1}}),
        )
        .expect("valid")
        .expect("present");
        assert_eq!(ok.field(), "pagarme");
        let params = ok.to_params().expect("params");
        assert_eq!(params.missing_for_confirm(), None);
        let new = object(json!({"pagarme": {"payment_method": "pix",
            "customer": {"name": "Tony", "email": "t@x.com", "document": "12345678909", "type": "individual"}}}))
        .expect("valid")
        .expect("present");
        assert_eq!(new.to_params().expect("params").missing_for_confirm(), None);
        for (body, param) in [
            (
                json!({"pagarme": {"payment_method": "debit"}}),
                "pagarme.payment_method",
            ),
            (
                json!({"pagarme": {"card_id": "card_a/b"}}),
                "pagarme.card_id",
            ),
            (
                json!({"pagarme": {"card_token": "card_1"}}),
                "pagarme.card_token",
            ),
            (
                json!({"pagarme": {"customer_id": "c_1"}}),
                "pagarme.customer_id",
            ),
            (
                json!({"pagarme": {"installments": 13}}),
                "pagarme.installments",
            ),
            (
                json!({"pagarme": {"card_number": "4000000000000010"}}),
                "pagarme.card_number",
            ),
            (
                json!({"pagarme": {"card_id": "card_1", "card_token": "token_1"}}),
                "pagarme.card_token",
            ),
            (
                json!({"pagarme": {"payment_method": "pix", "card_id": "card_1"}}),
                "pagarme.payment_method",
            ),
            (
                json!({"pagarme": {"customer_id": "cus_1", "customer": {"name": "x"}}}),
                "pagarme.customer",
            ),
            (
                json!({"pagarme": {"customer": {"document": "123.456"}}}),
                "pagarme.customer.document",
            ),
            (
                json!({"pagarme": {"customer": {"type": "person"}}}),
                "pagarme.customer.type",
            ),
            (
                json!({"pagarme": {"customer": {"cpf": "1"}}}),
                "pagarme.customer.cpf",
            ),
        ] {
            let e = object(body.clone()).expect_err("invalid");
            assert_eq!(param_of(e), param, "{body}");
        }
        // A pagarme-v5 provider takes its own object, and only it; its empty object names what is missing.
        assert_eq!(field_of(Scheme::PagarmeV5), Some("pagarme"));
        assert_eq!(
            field_of(Scheme::Pagarme),
            None,
            "legacy postbacks are not charged"
        );
        let own = from_body(
            json!({"pagarme": {"payment_method": "pix", "customer_id": "cus_1"}})
                .as_object()
                .expect("object"),
            Some(Scheme::PagarmeV5),
        )
        .expect("accepted")
        .expect("present");
        assert_eq!(own.field(), "pagarme");
        for other in ["stripe", "mercadopago"] {
            let e = from_body(
                json!({ other: {} }).as_object().expect("object"),
                Some(Scheme::PagarmeV5),
            )
            .expect_err("mismatch");
            assert!(
                matches!(&e, ApiError::ProviderObjectMismatch { param, expected: "pagarme" } if param == other),
                "{e:?}"
            );
        }
        assert_eq!(
            empty(Scheme::PagarmeV5).and_then(|p| p.missing_for_confirm()),
            Some("pagarme.payment_method")
        );
        // Named after another scheme than the provider's: refused.
        let e = from_body(
            json!({"pagarme": {}}).as_object().expect("object"),
            Some(Scheme::Stripe),
        )
        .expect_err("mismatch");
        assert!(
            matches!(e, ApiError::ProviderObjectMismatch { .. }),
            "{e:?}"
        );
    }

    #[test]
    fn a_confirm_replaces_the_other_way_to_pay() {
        let stored = object(
            json!({"pagarme": {"payment_method": "credit_card", "card_token": "token_1",
            "customer": {"name": "Tony"}}}),
        )
        .expect("valid")
        .expect("present")
        .to_params()
        .expect("params");
        let merged = object(json!({"pagarme": {"card_id": "card_2", "customer_id": "cus_2"}}))
            .expect("valid")
            .expect("present")
            .merged_over(Some(&stored))
            .expect("merged");
        let PaymentParams::Pagarme(p) = merged else {
            panic!("scheme")
        };
        assert_eq!(p.card_token, None);
        assert_eq!(p.customer, None);
        assert_eq!(p.card_id.as_deref(), Some("card_2"));
        assert_eq!(p.payment_method.as_deref(), Some("credit_card"));
    }
}
