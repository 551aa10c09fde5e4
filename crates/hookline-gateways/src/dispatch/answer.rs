//! What the gateway answered to one attempt, classified (see the module documentation of [`super`] for the
//! rules and why each exists).

use std::time::Duration;

use serde_json::Value;

use crate::gateway::{bounded, excerpt, Api, Object, Raw, Verdict, PAYMENT_METHOD_UNUSABLE};

/// Attempts after which a 2xx answer that is not the provider's object needs attention instead of another
/// retry (with the default backoff, about two minutes after the first).
pub const MAX_UNREADABLE_ATTEMPTS: i32 = 8;

/// What the gateway answered to one attempt (or what a lookup found).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// 2xx with the provider's object: its id and what it says of it.
    Accepted {
        /// HTTP status (200 for an object found by lookup).
        status: u16,
        /// The payment (charge) or refund id at the gateway (always present: a 2xx without it is not accepted).
        provider_id: String,
        /// `processing`, `requires_action`, `succeeded` or `failed` (charges); `succeeded`, `failed` or
        /// `requires_dispatch` (refunds still pending at the gateway).
        final_status: &'static str,
        /// `requires_action`: what the customer must do (Stripe's `next_action`, Pix QR data).
        next_action: Option<Value>,
    },
    /// The gateway declined it (Stripe 402 `card_error`, a PaymentIntent back to `requires_payment_method`
    /// with its `last_payment_error`, or a 4xx `invalid_request_error` about `payment_method`/`customer`;
    /// Mercado Pago `rejected`, or a saved card its API no longer finds or tokenizes): an outcome, recorded as
    /// such.
    Declined {
        /// HTTP status, when there was an answer.
        status: Option<u16>,
        /// The gateway's object id, when the answer carried it.
        provider_id: Option<String>,
        /// The decline code.
        code: String,
        /// The gateway's message.
        message: String,
    },
    /// Try again later with the same key (within the key's lifetime).
    Retry {
        /// HTTP status, when there was an answer.
        status: Option<u16>,
        /// The gateway's `Retry-After`.
        retry_after: Option<Duration>,
        /// What happened.
        error: String,
    },
    /// The gateway would not do the cancel or capture asked (or it was not sent: the intent had ended) because
    /// the payment had moved on — captured, canceled, paid by the customer a second before: the payment as it is
    /// now, recorded as the intent's state, the operation ended, the request `declined` with why.
    Overtaken {
        /// HTTP status of the refusal, when there was one.
        status: Option<u16>,
        /// The payment's id at the gateway.
        provider_id: String,
        /// The payment's status now (an intent status).
        final_status: &'static str,
        /// Why the operation did not happen.
        reason: String,
    },
    /// Final refusal, hookline's own problem (a 3xx or another 4xx, a 2xx still unreadable after
    /// [`MAX_UNREADABLE_ATTEMPTS`], or nothing we can send: no configuration, no payment parameters).
    Refused {
        /// HTTP status, when there was an answer.
        status: Option<u16>,
        /// Why.
        error: String,
    },
}

impl Answer {
    /// The classification, as spans and logs name it: `accepted`, `declined`, `retry`, `refused`.
    pub fn classification(&self) -> &'static str {
        match self {
            Answer::Accepted { .. } => "accepted",
            Answer::Declined { .. } => "declined",
            Answer::Overtaken { .. } => "overtaken",
            Answer::Retry { .. } => "retry",
            Answer::Refused { .. } => "refused",
        }
    }

    /// The HTTP status the gateway answered with, when there was an answer.
    pub fn http_status(&self) -> Option<u16> {
        match self {
            Answer::Accepted { status, .. } => Some(*status),
            Answer::Declined { status, .. }
            | Answer::Overtaken { status, .. }
            | Answer::Retry { status, .. }
            | Answer::Refused { status, .. } => *status,
        }
    }

    /// The answer a gateway object stands for (`status`: the HTTP status it came with).
    pub fn from_object(status: u16, object: Object) -> Answer {
        match object.verdict {
            Verdict::Status {
                status: final_status,
                next_action,
            } => Answer::Accepted {
                status,
                provider_id: object.id,
                final_status,
                next_action,
            },
            Verdict::Declined { code, message } => Answer::Declined {
                status: Some(status),
                provider_id: Some(object.id),
                code,
                message,
            },
        }
    }
}

/// What the answer to one attempt must be: the provider's object of this kind.
pub(crate) struct Expected<'a> {
    pub(crate) api: Api,
    /// A refund (else a charge).
    pub(crate) refund: bool,
    /// Configured provider name (for the reasons).
    pub(crate) provider: &'a str,
    /// Attempts so far, this one included.
    pub(crate) attempts: i32,
    /// A refund's public id (`re_hl_N`): Pagar.me's refund answer is the charge, recorded under it.
    pub(crate) refund_public_id: Option<&'a str>,
    /// A cancel or capture of a sent charge: the answer is the payment as the gateway's payment API shows it
    /// ([`Api::read_payment`]); a 4xx is no decline (the dispatcher reads the payment to learn why).
    pub(crate) operation: bool,
}

impl Expected<'_> {
    /// Reads the provider's object of this kind from `json`.
    pub(crate) fn read(&self, json: &Value) -> Result<Object, String> {
        if self.operation {
            return self.api.read_payment(json);
        }
        self.api
            .read_object(json, self.refund, self.refund_public_id.unwrap_or_default())
    }
}

/// A 2xx hookline cannot read. The gateway may have acted: retrying with the same key is safe (it replays its
/// stored answer, which may be readable this time). A server that keeps answering so is not the gateway: after
/// [`MAX_UNREADABLE_ATTEMPTS`], an operator looks (the intent needs attention, the reason kept).
fn unreadable(expected: &Expected<'_>, status: u16, error: String) -> Answer {
    if expected.attempts >= MAX_UNREADABLE_ATTEMPTS {
        Answer::Refused {
            status: Some(status),
            error: format!("{error} (after {} attempts)", expected.attempts),
        }
    } else {
        Answer::Retry {
            status: Some(status),
            retry_after: None,
            error: format!("{error} (will retry)"),
        }
    }
}

/// Classifies one attempt's answer.
pub(crate) fn classify(expected: &Expected<'_>, sent: Result<Raw, String>) -> Answer {
    let raw = match sent {
        Ok(r) => r,
        // No answer, or a cut one: we do not know what the gateway did; the same key will tell.
        Err(e) => {
            return Answer::Retry {
                status: None,
                retry_after: None,
                error: e,
            }
        }
    };
    let status = raw.status;
    // A redirect is never followed (hookline_core::http::client) and never a success: the charge did not reach
    // the gateway we meant, and re-sending it (with its key and token) wherever `Location` points could reach
    // an internal service. A payment API does not redirect its POSTs: the configured `api_base` is wrong, which
    // retrying cannot fix — it needs an operator.
    if (300..=399).contains(&status) {
        return Answer::Refused {
            status: Some(status),
            error: format!(
                "{status}: the gateway redirected to {} — redirects are not followed; \
                 check providers.{}.api_base",
                raw.redirect_target, expected.provider
            ),
        };
    }
    match status {
        200..=299 => {
            let read = serde_json::from_slice::<Value>(&raw.body)
                .map_err(|e| format!("not JSON ({e})"))
                .and_then(|json| expected.read(&json));
            match read {
                Ok(object) => Answer::from_object(status, object),
                Err(why) => {
                    let error = format!(
                        "{status} but the answer is not {}: {why}: {}",
                        if expected.operation {
                            expected.api.payment_name()
                        } else {
                            expected.api.object_name(expected.refund)
                        },
                        excerpt(&raw.body, 200)
                    );
                    unreadable(expected, status, error)
                }
            }
        }
        // 409: the same key is still executing at the gateway (our earlier, lost attempt): ask again later.
        409 | 429 | 500..=599 => Answer::Retry {
            status: Some(status),
            retry_after: raw.retry_after,
            error: format!("{status} (will retry): {}", excerpt(&raw.body, 300)),
        },
        _ => {
            // A decline answered as an error (Stripe's 402 `card_error`: the customer's bank said no) or a
            // payment method the gateway refuses is an outcome, not hookline's problem: no operator can fix the
            // customer's card, and billing must learn that the method is unusable. Each provider's file says
            // which of its 4xx are ([`Api::refusal`]).
            let refusal = (!expected.operation)
                .then(|| expected.api.refusal(expected.refund, status, &raw.body))
                .flatten();
            if let Some(d) = refusal {
                return Answer::Declined {
                    status: Some(status),
                    provider_id: d.id,
                    code: d.code,
                    message: d.message,
                };
            }
            Answer::Refused {
                status: Some(status),
                error: format!("{status}: {}", excerpt(&raw.body, 300)),
            }
        }
    }
}

/// Classifies the answer to one step of a saved card's preparation (`step`: the card lookup, the card token;
/// Mercado Pago) and reads it with `read`:
///
/// | the API answers | then |
/// |---|---|
/// | 2xx that `read` accepts | `Ok`: the next step |
/// | 400 or 404 (the card or its customer is gone, the card cannot be tokenized) | a decline, [`PAYMENT_METHOD_UNUSABLE`]: no payment is sent; billing asks for another method |
/// | a timeout, connection error, 5xx, 429, 409 | retried like any gateway error (same key: nothing was paid yet) |
/// | a 2xx `read` refuses (or cut) | retried, then hookline's problem after [`MAX_UNREADABLE_ATTEMPTS`] |
/// | a 3xx, 401, 403, another 4xx | hookline's problem (`api_base`, `api_token`) |
pub(crate) fn classify_card_step<T>(
    expected: &Expected<'_>,
    step: &str,
    sent: Result<Raw, String>,
    read: impl FnOnce(&Value) -> Result<T, String>,
) -> Result<T, Answer> {
    let raw = sent.map_err(|e| Answer::Retry {
        status: None,
        retry_after: None,
        error: format!("{step}: {e}"),
    })?;
    let status = raw.status;
    match status {
        200..=299 => {
            let read = if raw.truncated {
                Err("the answer was cut".to_owned())
            } else {
                serde_json::from_slice::<Value>(&raw.body)
                    .map_err(|e| format!("not JSON ({e})"))
                    .and_then(|json| read(&json))
            };
            read.map_err(|why| {
                let error = format!("{step}: {status} but {why}: {}", excerpt(&raw.body, 200));
                unreadable(expected, status, error)
            })
        }
        400 | 404 => {
            let said = serde_json::from_slice::<Value>(&raw.body)
                .ok()
                .and_then(|j| bounded(&j["message"], 300))
                .unwrap_or_else(|| excerpt(&raw.body, 300));
            Err(Answer::Declined {
                status: Some(status),
                provider_id: None,
                code: PAYMENT_METHOD_UNUSABLE.to_owned(),
                message: format!(
                    "the saved card cannot be charged: {step} answered {status}: {said}"
                ),
            })
        }
        409 | 429 | 500..=599 => Err(Answer::Retry {
            status: Some(status),
            retry_after: raw.retry_after,
            error: format!("{step}: {status} (will retry): {}", excerpt(&raw.body, 300)),
        }),
        300..=399 => Err(Answer::Refused {
            status: Some(status),
            error: format!(
                "{step}: {status}: the gateway redirected to {} — redirects are not followed; \
                 check providers.{}.api_base",
                raw.redirect_target, expected.provider
            ),
        }),
        _ => Err(Answer::Refused {
            status: Some(status),
            error: format!("{step}: {status}: {}", excerpt(&raw.body, 300)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(status: u16, body: &str) -> Result<Raw, String> {
        Ok(Raw {
            status,
            retry_after: None,
            redirect_target: String::new(),
            body: body.as_bytes().to_vec(),
            truncated: false,
        })
    }

    fn expected(api: Api, refund: bool) -> Expected<'static> {
        Expected {
            api,
            refund,
            provider: "p",
            attempts: 1,
            refund_public_id: None,
            operation: false,
        }
    }

    #[test]
    fn declines_are_outcomes_for_both_gateways() {
        let st = classify(
            &expected(Api::Stripe, false),
            raw(
                402,
                r#"{"error": {"type": "card_error", "code": "card_declined", "decline_code": "generic_decline",
                    "message": "Your card was declined.", "payment_intent": {"id": "pi_1"}}}"#,
            ),
        );
        assert_eq!(
            st,
            Answer::Declined {
                status: Some(402),
                provider_id: Some("pi_1".into()),
                code: "generic_decline".into(),
                message: "Your card was declined.".into()
            }
        );
        let mp = classify(
            &expected(Api::MercadoPago, false),
            raw(
                201,
                r#"{"id": 5, "status": "rejected", "status_detail": "cc_rejected_other_reason"}"#,
            ),
        );
        assert!(
            matches!(&mp, Answer::Declined { provider_id: Some(id), code, .. }
                if id == "5" && code == "cc_rejected_other_reason"),
            "{mp:?}"
        );
        // A 400 that is not a card error is hookline's problem.
        let bad = classify(
            &expected(Api::Stripe, false),
            raw(
                400,
                r#"{"error": {"type": "invalid_request_error", "code": "parameter_missing"}}"#,
            ),
        );
        assert!(
            matches!(
                bad,
                Answer::Refused {
                    status: Some(400),
                    ..
                }
            ),
            "{bad:?}"
        );
    }

    #[test]
    fn a_stripe_refusal_of_the_payment_method_or_customer_is_a_decline() {
        let refused = |param: &str, code: Option<&str>| {
            let mut error = serde_json::json!({"type": "invalid_request_error", "param": param,
                "message": format!("Stripe refuses this {param}.")});
            if let Some(c) = code {
                error["code"] = c.into();
            }
            serde_json::json!({ "error": error }).to_string()
        };
        for (param, code, want) in [
            (
                "payment_method",
                Some("resource_missing"),
                "resource_missing",
            ),
            ("payment_method", None, PAYMENT_METHOD_UNUSABLE),
            ("customer", Some("resource_missing"), "resource_missing"),
            ("customer", None, PAYMENT_METHOD_UNUSABLE),
        ] {
            let a = classify(
                &expected(Api::Stripe, false),
                raw(400, &refused(param, code)),
            );
            assert_eq!(
                a,
                Answer::Declined {
                    status: Some(400),
                    provider_id: None,
                    code: want.into(),
                    message: format!("Stripe refuses this {param}.")
                },
                "{param} {code:?}"
            );
        }
        // The same answer to a refund, a 5xx, or about another parameter: not a decline of the method.
        let a = classify(
            &expected(Api::Stripe, true),
            raw(400, &refused("payment_method", None)),
        );
        assert!(matches!(a, Answer::Refused { .. }), "{a:?}");
        let a = classify(
            &expected(Api::Stripe, false),
            raw(500, &refused("payment_method", None)),
        );
        assert!(matches!(a, Answer::Retry { .. }), "{a:?}");
        let a = classify(
            &expected(Api::Stripe, false),
            raw(400, &refused("amount", Some("parameter_invalid_integer"))),
        );
        assert!(matches!(a, Answer::Refused { .. }), "{a:?}");
        // Mercado Pago has no such error shape: its 400 stays hookline's problem.
        let a = classify(
            &expected(Api::MercadoPago, false),
            raw(400, &refused("payment_method", None)),
        );
        assert!(matches!(a, Answer::Refused { .. }), "{a:?}");
    }

    #[test]
    fn a_saved_card_step_declines_on_400_and_404_and_retries_what_a_charge_retries() {
        let read = |json: &Value| {
            json["id"]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| "no id".to_owned())
        };
        let step = |status: u16, body: &str| {
            classify_card_step(
                &expected(Api::MercadoPago, false),
                "the card token",
                raw(status, body),
                read,
            )
        };
        assert_eq!(step(201, r#"{"id": "tok1"}"#), Ok("tok1".to_owned()));
        for status in [400, 404] {
            match step(
                status,
                r#"{"message": "card not found", "error": "not_found", "status": 404}"#,
            ) {
                Err(Answer::Declined {
                    status: s,
                    provider_id: None,
                    code,
                    message,
                }) => {
                    assert_eq!((s, code.as_str()), (Some(status), PAYMENT_METHOD_UNUSABLE));
                    assert!(message.contains("card not found"), "{message}");
                    assert!(message.contains("the card token"), "{message}");
                }
                other => panic!("{status}: {other:?}"),
            }
        }
        for status in [409, 429, 500, 503] {
            let a = step(status, "busy");
            assert!(
                matches!(a, Err(Answer::Retry { status: Some(s), .. }) if s == status),
                "{a:?}"
            );
        }
        let timeout = classify_card_step(
            &expected(Api::MercadoPago, false),
            "the card lookup",
            Err("sending: timeout".into()),
            read,
        );
        assert!(
            matches!(&timeout, Err(Answer::Retry { status: None, error, .. }) if error.contains("the card lookup")),
            "{timeout:?}"
        );
        for status in [301, 401, 403, 422] {
            let a = step(status, "{}");
            assert!(
                matches!(a, Err(Answer::Refused { status: Some(s), .. }) if s == status),
                "{status}: {a:?}"
            );
        }
        // A 2xx that is not what was asked for: retried, then hookline's problem.
        assert!(matches!(step(200, "<html>"), Err(Answer::Retry { .. })));
        assert!(matches!(step(200, "{}"), Err(Answer::Retry { .. })));
        let last = classify_card_step(
            &Expected {
                attempts: MAX_UNREADABLE_ATTEMPTS,
                ..expected(Api::MercadoPago, false)
            },
            "the card token",
            raw(200, "{}"),
            read,
        );
        assert!(matches!(last, Err(Answer::Refused { .. })), "{last:?}");
        let mut cut = raw(200, r#"{"id": "tok1"}"#).expect("raw");
        cut.truncated = true;
        let a = classify_card_step(
            &expected(Api::MercadoPago, false),
            "the card token",
            Ok(cut),
            read,
        );
        assert!(matches!(a, Err(Answer::Retry { .. })), "{a:?}");
    }

    #[test]
    fn retryable_statuses_and_unreadable_2xx_are_retried() {
        for status in [409, 429, 500, 502, 503] {
            let a = classify(&expected(Api::Stripe, false), raw(status, "busy"));
            assert!(
                matches!(a, Answer::Retry { status: Some(s), .. } if s == status),
                "{a:?}"
            );
        }
        let a = classify(&expected(Api::MercadoPago, false), raw(200, "<html>"));
        assert!(matches!(a, Answer::Retry { .. }), "{a:?}");
        let a = classify(
            &Expected {
                attempts: MAX_UNREADABLE_ATTEMPTS,
                ..expected(Api::MercadoPago, false)
            },
            raw(200, "<html>"),
        );
        assert!(matches!(a, Answer::Refused { .. }), "{a:?}");
        let a = classify(&expected(Api::Stripe, true), Err("sending: timeout".into()));
        assert!(matches!(a, Answer::Retry { status: None, .. }), "{a:?}");
    }

    #[test]
    fn pagarme_answers_classify_as_the_others() {
        let order = r#"{"id": "or_1", "code": "pi_hl_1", "status": "failed", "charges": [{"id": "ch_1",
            "status": "failed", "last_transaction": {"status": "not_authorized",
            "acquirer_return_code": "1000", "acquirer_message": "Transação não autorizada"}}]}"#;
        let a = classify(&expected(Api::PagarmeV5, false), raw(200, order));
        assert_eq!(
            a,
            Answer::Declined {
                status: Some(200),
                provider_id: Some("ch_1".into()),
                code: "1000".into(),
                message: "Transação não autorizada".into()
            }
        );
        let paid = r#"{"id": "or_1", "charges": [{"id": "ch_2", "status": "paid"}]}"#;
        assert!(matches!(
            classify(&expected(Api::PagarmeV5, false), raw(200, paid)),
            Answer::Accepted { ref provider_id, final_status: "succeeded", .. } if provider_id == "ch_2"
        ));
        for status in [409, 429, 500, 503] {
            assert!(matches!(
                classify(&expected(Api::PagarmeV5, false), raw(status, "{}")),
                Answer::Retry { .. }
            ));
        }
        assert!(matches!(
            classify(
                &expected(Api::PagarmeV5, false),
                Err("sending: timeout".into())
            ),
            Answer::Retry { status: None, .. }
        ));
        // A 401 or an invalid order is hookline's problem; an unknown saved card is the method's.
        assert!(matches!(
            classify(
                &expected(Api::PagarmeV5, false),
                raw(
                    401,
                    r#"{"message": "Authorization has been denied for this request."}"#
                )
            ),
            Answer::Refused {
                status: Some(401),
                ..
            }
        ));
        assert!(matches!(
            classify(
                &expected(Api::PagarmeV5, false),
                raw(
                    422,
                    r#"{"message": "The request is invalid.", "errors": {"order.items[0].amount": ["x"]}}"#
                )
            ),
            Answer::Refused {
                status: Some(422),
                ..
            }
        ));
        assert!(matches!(
            classify(&expected(Api::PagarmeV5, false), raw(422, r#"{"message": "The request is invalid.", "errors": {"order.payments[0].credit_card.card_id": ["not found"]}}"#)),
            Answer::Declined { ref code, .. } if code == PAYMENT_METHOD_UNUSABLE
        ));
        for (status, body) in [
            (404, r#"{"message": "Card not found."}"#),
            (
                412,
                r#"{"message": "The card does not belong to the customer."}"#,
            ),
        ] {
            assert!(
                matches!(
                    classify(&expected(Api::PagarmeV5, false), raw(status, body)),
                    Answer::Declined { status: Some(s), ref code, .. } if s == status && code == PAYMENT_METHOD_UNUSABLE
                ),
                "{status}"
            );
        }
        // A refund beyond what is left: that refund fails (its amount is released), nothing is retried.
        let refund = Expected {
            refund_public_id: Some("re_hl_1"),
            ..expected(Api::PagarmeV5, true)
        };
        assert!(matches!(
            classify(&refund, raw(412, r#"{"message": "The charge has no amount left to cancel."}"#)),
            Answer::Declined { status: Some(412), ref code, .. } if code == "refund_refused"
        ));
        assert!(matches!(
            classify(&refund, raw(200, r#"{"id": "ch_1", "status": "paid", "canceled_amount": 100}"#)),
            Answer::Accepted { ref provider_id, final_status: "succeeded", .. } if provider_id == "ch_1-re_hl_1"
        ));
    }

    #[test]
    fn requires_action_carries_the_next_action() {
        let a = classify(
            &expected(Api::Stripe, false),
            raw(
                200,
                r#"{"id": "pi_3", "object": "payment_intent", "status": "requires_action",
                    "next_action": {"type": "redirect_to_url", "redirect_to_url": {"url": "https://hooks.stripe.com/3ds"}}}"#,
            ),
        );
        match a {
            Answer::Accepted {
                final_status: "requires_action",
                next_action: Some(n),
                ..
            } => assert_eq!(n["type"], "redirect_to_url"),
            other => panic!("{other:?}"),
        }
    }
}
