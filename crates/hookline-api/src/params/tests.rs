//! The provider objects' validation, by example.

use super::*;
use serde_json::json;

fn parse(body: Value, scheme: Option<Scheme>) -> Result<Option<ProviderObject>, ApiError> {
    from_body(body.as_object().expect("object"), scheme)
}

fn refused(body: Value, scheme: Option<Scheme>) -> (String, String) {
    let e = parse(body.clone(), scheme).expect_err(&body.to_string());
    let param = match &e {
        ApiError::InvalidField { param, .. } => param.clone(),
        ApiError::ProviderObjectMismatch { param, .. } => param.clone(),
        ApiError::ParameterMissing { param } => param.clone(),
        other => panic!("{other:?}"),
    };
    (e.code().to_owned(), param)
}

#[test]
fn a_complete_object_of_each_scheme_is_accepted_as_sent() {
    let st = parse(
        json!({"stripe": {"payment_method": "pm_card_visa", "customer": "cus_1", "off_session": true,
               "return_url": "https://shop.example/back?o=1"}}),
        Some(Scheme::Stripe),
    )
    .unwrap()
    .unwrap();
    assert_eq!(st.to_params().unwrap().missing_for_confirm(), None);
    let mp = parse(
        json!({"mercadopago": {"token": "ff8080814c11e237014c1ff593b57b4d", "payment_method_id": "visa",
               "installments": 3, "issuer_id": 24,
               "payer": {"email": "comprador@example.com.br",
                         "identification": {"type": "CPF", "number": "191.000.000-00"}}}}),
        Some(Scheme::MercadoPago),
    )
    .unwrap()
    .unwrap();
    let params = mp.to_params().unwrap();
    assert_eq!(params.missing_for_confirm(), None);
    let PaymentParams::MercadoPago(m) = params else {
        panic!("scheme")
    };
    assert_eq!(m.issuer_id.as_deref(), Some("24"));
    assert_eq!(
        parse(json!({"amount": 1, "stripe": null}), Some(Scheme::Stripe))
            .unwrap()
            .map(|o| o.field()),
        None
    );
}

#[test]
fn each_bad_field_is_named_by_its_path() {
    let st = Some(Scheme::Stripe);
    let mp = Some(Scheme::MercadoPago);
    let long_url = format!("https://x.example/{}", "a".repeat(2000));
    for (body, scheme, code, param) in [
        (
            json!({"stripe": {"payment_method": "card_visa x"}}),
            st,
            "parameter_invalid",
            "stripe.payment_method",
        ),
        (
            json!({"stripe": {"payment_method": "cus_1"}}),
            st,
            "parameter_invalid",
            "stripe.payment_method",
        ),
        (
            json!({"stripe": {"customer": "pm_1"}}),
            st,
            "parameter_invalid",
            "stripe.customer",
        ),
        (
            json!({"stripe": {"off_session": "yes"}}),
            st,
            "parameter_invalid",
            "stripe.off_session",
        ),
        (
            json!({"stripe": {"return_url": "http://shop.example/back"}}),
            st,
            "parameter_invalid",
            "stripe.return_url",
        ),
        (
            json!({"stripe": {"return_url": "https://shop.example/a b"}}),
            st,
            "parameter_invalid",
            "stripe.return_url",
        ),
        (
            json!({"stripe": {"return_url": long_url}}),
            st,
            "parameter_invalid",
            "stripe.return_url",
        ),
        (
            json!({"stripe": {"pm": "pm_1"}}),
            st,
            "unknown_field",
            "stripe.pm",
        ),
        (json!({"stripe": "pm_1"}), st, "parameter_invalid", "stripe"),
        (
            json!({"mercadopago": {"token": "t"}}),
            st,
            "provider_object_mismatch",
            "mercadopago",
        ),
        (
            json!({"stripe": {}}),
            mp,
            "provider_object_mismatch",
            "stripe",
        ),
        (
            json!({"stripe": {}, "mercadopago": {}}),
            None,
            "provider_object_mismatch",
            "mercadopago",
        ),
        (
            json!({"mercadopago": {"installments": 0}}),
            mp,
            "parameter_invalid",
            "mercadopago.installments",
        ),
        (
            json!({"mercadopago": {"installments": 25}}),
            mp,
            "parameter_invalid",
            "mercadopago.installments",
        ),
        (
            json!({"mercadopago": {"installments": 1.5}}),
            mp,
            "parameter_invalid",
            "mercadopago.installments",
        ),
        (
            json!({"mercadopago": {"token": "a/b"}}),
            mp,
            "parameter_invalid",
            "mercadopago.token",
        ),
        (
            json!({"mercadopago": {"token": "t".repeat(129)}}),
            mp,
            "parameter_invalid",
            "mercadopago.token",
        ),
        (
            json!({"mercadopago": {"payment_method_id": "Visa"}}),
            mp,
            "parameter_invalid",
            "mercadopago.payment_method_id",
        ),
        (
            json!({"mercadopago": {"issuer_id": -1}}),
            mp,
            "parameter_invalid",
            "mercadopago.issuer_id",
        ),
        (
            json!({"mercadopago": {"payer": {"email": "a@b"}}}),
            mp,
            "parameter_invalid",
            "mercadopago.payer.email",
        ),
        (
            json!({"mercadopago": {"payer": {"email": "a b@c.de"}}}),
            mp,
            "parameter_invalid",
            "mercadopago.payer.email",
        ),
        (
            json!({"mercadopago": {"payer": {"email": "a@@c.de"}}}),
            mp,
            "parameter_invalid",
            "mercadopago.payer.email",
        ),
        (
            json!({"mercadopago": {"payer": {"mail": "a@c.de"}}}),
            mp,
            "unknown_field",
            "mercadopago.payer.mail",
        ),
        (
            json!({"mercadopago": {"payer": {"identification": {"type": "CPF"}}}}),
            mp,
            "parameter_missing",
            "mercadopago.payer.identification.number",
        ),
        (
            json!({"mercadopago": {"payer": {"identification": {"type": "C P F", "number": "1"}}}}),
            mp,
            "parameter_invalid",
            "mercadopago.payer.identification.type",
        ),
        (
            json!({"mercadopago": {"payer": {"identification": {"type": "CPF", "number": "1;2"}}}}),
            mp,
            "parameter_invalid",
            "mercadopago.payer.identification.number",
        ),
        (
            json!({"mercadopago": {"payer": {"identification": {"type": "CPF", "number": "1", "x": 1}}}}),
            mp,
            "unknown_field",
            "mercadopago.payer.identification.x",
        ),
        (
            json!({"mercadopago": {"card_id": "12a", "customer_id": "c-1"}}),
            mp,
            "parameter_invalid",
            "mercadopago.card_id",
        ),
        (
            json!({"mercadopago": {"card_id": "9".repeat(33), "customer_id": "c-1"}}),
            mp,
            "parameter_invalid",
            "mercadopago.card_id",
        ),
        (
            json!({"mercadopago": {"card_id": -1, "customer_id": "c-1"}}),
            mp,
            "parameter_invalid",
            "mercadopago.card_id",
        ),
        (
            json!({"mercadopago": {"card_id": "1", "customer_id": "../me"}}),
            mp,
            "parameter_invalid",
            "mercadopago.customer_id",
        ),
        (
            json!({"mercadopago": {"card_id": "1", "customer_id": "a".repeat(65)}}),
            mp,
            "parameter_invalid",
            "mercadopago.customer_id",
        ),
        (
            json!({"mercadopago": {"card_id": "1", "customer_id": "c-1", "token": "t1"}}),
            mp,
            "parameter_invalid",
            "mercadopago.token",
        ),
        (
            json!({"mercadopago": {"customer_id": "c-1", "token": "t1"}}),
            mp,
            "parameter_invalid",
            "mercadopago.token",
        ),
        (
            json!({"mercadopago": {"card_id": "1", "customer_id": "c-1", "payment_method_id": "pix"}}),
            mp,
            "parameter_invalid",
            "mercadopago.payment_method_id",
        ),
    ] {
        assert_eq!(
            refused(body.clone(), scheme),
            (code.to_owned(), param.to_owned()),
            "{body}"
        );
    }
}

#[test]
fn a_saved_mercadopago_card_is_card_id_and_customer_id_without_a_token() {
    let mp = Some(Scheme::MercadoPago);
    let saved = parse(
        json!({"mercadopago": {"card_id": 1562188766852u64, "customer_id": "448870796-7ZjwhKGxILixxN"}}),
        mp,
    )
    .unwrap()
    .unwrap();
    let params = saved.to_params().unwrap();
    assert_eq!(params.missing_for_confirm(), None);
    let PaymentParams::MercadoPago(m) = &params else {
        panic!("scheme")
    };
    assert_eq!(m.card_id.as_deref(), Some("1562188766852"));
    assert_eq!(m.token, None);
    // Half a saved card is named by what is missing.
    let half = parse(json!({"mercadopago": {"card_id": "1"}}), mp)
        .unwrap()
        .unwrap();
    assert_eq!(
        half.to_params().unwrap().missing_for_confirm(),
        Some("mercadopago.customer_id")
    );
    // A confirm sending one way to pay replaces the other stored.
    let new_card = parse(
        json!({"mercadopago": {"token": "tok_1", "payment_method_id": "visa",
               "payer": {"email": "a@b.co"}}}),
        mp,
    )
    .unwrap()
    .unwrap();
    let PaymentParams::MercadoPago(m) = new_card.merged_over(Some(&params)).unwrap() else {
        panic!("scheme")
    };
    assert_eq!(
        (m.token.as_deref(), m.card_id, m.customer_id),
        (Some("tok_1"), None, None)
    );
    let stored_token = new_card.to_params().unwrap();
    let PaymentParams::MercadoPago(m) = saved.merged_over(Some(&stored_token)).unwrap() else {
        panic!("scheme")
    };
    assert_eq!(m.token, None);
    assert_eq!(m.card_id.as_deref(), Some("1562188766852"));
    assert_eq!(m.payment_method_id.as_deref(), Some("visa"));
}

#[test]
fn a_confirm_lays_its_fields_over_the_stored_ones() {
    let stored = parse(
        json!({"mercadopago": {"payment_method_id": "visa", "installments": 2,
               "payer": {"email": "a@b.co", "identification": {"type": "CPF", "number": "1"}}}}),
        None,
    )
    .unwrap()
    .unwrap()
    .to_params()
    .unwrap();
    assert_eq!(stored.missing_for_confirm(), Some("mercadopago.token"));
    let supplied = parse(
        json!({"mercadopago": {"token": "tok_1", "payer": {"email": "c@d.co"}}}),
        None,
    )
    .unwrap()
    .unwrap();
    let PaymentParams::MercadoPago(m) = supplied.merged_over(Some(&stored)).unwrap() else {
        panic!("scheme")
    };
    assert_eq!(m.token.as_deref(), Some("tok_1"));
    assert_eq!(m.installments, Some(2));
    assert_eq!(m.payer.email.as_deref(), Some("c@d.co"));
    assert_eq!(
        m.payer.identification.map(|i| i.number).as_deref(),
        Some("1")
    );
    // Nothing stored: the supplied object alone.
    let st = parse(json!({"stripe": {"payment_method": "pm_card_visa"}}), None)
        .unwrap()
        .unwrap();
    assert_eq!(st.merged_over(None).unwrap().missing_for_confirm(), None);
    assert_eq!(
        empty(Scheme::Stripe).and_then(|p| p.missing_for_confirm()),
        Some("stripe.payment_method")
    );
    assert!(empty(Scheme::Github).is_none());
}
