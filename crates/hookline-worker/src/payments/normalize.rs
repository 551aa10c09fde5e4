//! Raw provider events → provider-neutral [`PaymentFact`]s: the one place that knows each provider's payload.
//!
//! [`normalize`] is pure (no I/O, no clock), so a stored event can be normalized again at any time, e.g. when
//! it is replayed after a bug fix, and yields the same facts.
//!
//! Two outcomes are kept apart on purpose:
//! - `Ok([PaymentFact::Ignored { .. }])`: the event is well-formed but means nothing for payments (an unhandled
//!   type, a failed refund, a one-off invoice). The worker records it and acknowledges it.
//! - `Err(PermanentError)`: the payload can never be applied (not JSON, a missing id, a malformed amount). It
//!   becomes a dead letter that a person reads, so every message starts with the field's path in the payload
//!   (`data.object.amount_received`, `transaction[paid_amount]`) and shows the offending value.
//!
//! Validation is strict because a lenient reading of money is worse than a dead letter: an amount is an integer
//! number of minor units in `1..=`[`MAX_AMOUNT`] (no floats, no strings in JSON, digits only in forms) and a
//! currency is three ASCII letters. Every [`Money`] returned therefore has `amount > 0` and a lower-case
//! three-letter currency. Only the fields a mapping needs are read: an event type that is not handled is ignored
//! without looking at the rest of its body.

use std::fmt::Display;

use hookline_signature::Scheme;
use serde_json::{Map, Value};

use super::model::{DisputeStatus, Money, PaymentFact, PaymentStatus, PermanentError};

/// The largest amount accepted, in minor units (10^15, i.e. 10 trillion in a two-decimal currency).
///
/// No real payment comes near it; a larger value means a unit mix-up or a corrupt payload, and keeping amounts
/// this small leaves ledger sums far from `i64` overflow.
pub const MAX_AMOUNT: i64 = 1_000_000_000_000_000;

/// Longest provider id accepted. Ids become database keys and log fields; real ones are far shorter.
const MAX_ID_LEN: usize = 255;

/// How much of an offending value an error message or ignore reason quotes: enough to recognise it, while a
/// hostile payload cannot blow up the dead-letter record.
const EXCERPT_CHARS: usize = 80;

/// Turns one stored provider event into payment facts. Pure: no I/O.
///
/// - `scheme`: the provider's signature scheme, which decides the payload format and mapping (the configured
///   provider name is irrelevant here).
/// - `event_type`: what the edge extracted at ingest (Stripe: body `type`; Pagar.me: form field `event`). The
///   body stays the source of truth; for Stripe and Pagar.me a value that disagrees with the body is an error,
///   because both were read from the same stored bytes and a mismatch means the record is corrupt. Mercado
///   Pago's ingest value (`type`, else `action`) is not compared.
/// - `body`: the raw stored body.
///
/// Returns usually one fact; `charge.refunded` may yield several refunds, and a Pagar.me `refunded` or
/// `chargedback` postback yields the payment plus the refund or dispute. Events without meaning for payments
/// yield `[Ignored { reason }]`. Never panics, whatever the input.
///
/// # Errors
///
/// A [`PermanentError`] naming the field when the body cannot be parsed, a required field is missing or has the
/// wrong type, an amount is not an integer in `1..=`[`MAX_AMOUNT`], a currency is not three letters, or the body
/// contradicts itself or `event_type`.
pub fn normalize(
    scheme: Scheme,
    event_type: Option<&str>,
    body: &[u8],
) -> Result<Vec<PaymentFact>, PermanentError> {
    match scheme {
        Scheme::Stripe => stripe::normalize(event_type, body),
        Scheme::Pagarme => pagarme::normalize(event_type, body),
        Scheme::MercadoPago => mercadopago::normalize(body),
        // Listed one by one rather than `_`, so that adding a scheme forces a decision here.
        Scheme::StandardWebhooks
        | Scheme::Svix
        | Scheme::Github
        | Scheme::Shopify
        | Scheme::Adyen => Ok(vec![ignored(format!(
            "no payments mapping for scheme {scheme}"
        ))]),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Stripe
// ---------------------------------------------------------------------------------------------------------------

mod stripe {
    use super::*;

    pub(super) fn normalize(
        event_type: Option<&str>,
        body: &[u8],
    ) -> Result<Vec<PaymentFact>, PermanentError> {
        let map = parse_json_object(body)?;
        let root = Obj::root(&map);
        let ty = root.text("type")?;
        check_event_type(event_type, "type", ty)?;
        // The object is fetched per arm, after the type is known, so an unhandled type is ignored even when its
        // `data` has a shape we would reject.
        let object = || data_object(&root);
        match ty {
            "payment_intent.created" => payment_intent(ty, &object()?, PaymentStatus::Created),
            "payment_intent.processing"
            | "payment_intent.requires_action"
            | "payment_intent.amount_capturable_updated" => {
                payment_intent(ty, &object()?, PaymentStatus::Processing)
            }
            "payment_intent.succeeded" => payment_intent(ty, &object()?, PaymentStatus::Succeeded),
            "payment_intent.payment_failed" => {
                payment_intent(ty, &object()?, PaymentStatus::Failed)
            }
            "payment_intent.canceled" => payment_intent(ty, &object()?, PaymentStatus::Canceled),
            "charge.succeeded" => charge_succeeded(ty, &object()?),
            // `refund.failed` moves no money, but routing it here gives the ignore a precise reason
            // ("refund re_… is failed") instead of "unhandled".
            "refund.created" | "refund.updated" | "refund.failed" | "charge.refund.updated" => {
                refund(ty, &object()?)
            }
            "charge.refunded" => charge_refunded(ty, &object()?),
            "charge.dispute.created"
            | "charge.dispute.updated"
            | "charge.dispute.funds_withdrawn" => dispute(ty, &object()?, false),
            "charge.dispute.closed" => dispute(ty, &object()?, true),
            "invoice.paid" | "invoice.payment_succeeded" => invoice_paid(ty, &object()?),
            _ => Ok(vec![ignored(format!(
                "unhandled stripe event type {}",
                excerpt(ty)
            ))]),
        }
    }

    fn data_object<'a>(root: &Obj<'a>) -> Result<Obj<'a>, PermanentError> {
        root.object("data")?.object("object")
    }

    /// Checks `object.object` when present. Real events always carry it; hand-written fixtures may not, and
    /// the mapping only needs the fields it reads.
    fn expect_kind(ty: &str, object: &Obj<'_>, kind: &str) -> Result<(), PermanentError> {
        match object.opt_text("object")? {
            Some(actual) if actual != kind => Err(field_error(
                &object.path_of("object"),
                format!(
                    "{} is not a {kind}, as event type {} requires",
                    quoted(actual),
                    excerpt(ty)
                ),
            )),
            _ => Ok(()),
        }
    }

    /// The payment a charge-like object (charge, refund, dispute) belongs to: its payment intent when it has
    /// one, so that facts from `payment_intent.*` and `charge.*` events converge on the same `pi_…` key;
    /// legacy charges created without a payment intent fall back to `fallback_key` (the charge id).
    fn owning_payment(object: &Obj<'_>, fallback_key: &str) -> Result<String, PermanentError> {
        match object.opt_id("payment_intent")? {
            Some(pi) => Ok(pi),
            None => object.id(fallback_key),
        }
    }

    fn payment_intent(
        ty: &str,
        object: &Obj<'_>,
        status: PaymentStatus,
    ) -> Result<Vec<PaymentFact>, PermanentError> {
        expect_kind(ty, object, "payment_intent")?;
        let payment_ref = object.id("id")?;
        let amount = if status == PaymentStatus::Succeeded {
            // `amount_received` is what was captured (it differs from `amount` after a partial capture).
            let key = if object.has("amount_received") {
                "amount_received"
            } else {
                "amount"
            };
            Some(object.money(key, "currency")?)
        } else {
            object.opt_money("amount", "currency")?
        };
        Ok(vec![PaymentFact::Payment {
            payment_ref,
            status,
            amount,
        }])
    }

    fn charge_succeeded(ty: &str, object: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
        expect_kind(ty, object, "charge")?;
        let payment_ref = owning_payment(object, "id")?;
        // With manual capture Stripe sends `charge.succeeded` when the card is *authorised* (`captured: false`,
        // `amount_captured: 0`). No money has moved yet, so that is Processing; the capture later brings
        // `payment_intent.succeeded` with the captured amount. Older payloads without `captured` are captured.
        if object.opt_bool("captured")? == Some(false) {
            return Ok(vec![PaymentFact::Payment {
                payment_ref,
                status: PaymentStatus::Processing,
                amount: object.opt_money("amount", "currency")?,
            }]);
        }
        let key = if object.has("amount_captured") {
            "amount_captured"
        } else {
            "amount"
        };
        Ok(vec![PaymentFact::Payment {
            payment_ref,
            status: PaymentStatus::Succeeded,
            amount: Some(object.money(key, "currency")?),
        }])
    }

    /// Whether a refund in this status has moved (or is committed to move) money. Pending refunds count: Stripe
    /// has accepted them and most complete; failed and canceled ones never moved money.
    fn refund_counts(status: &str) -> bool {
        matches!(status, "succeeded" | "pending")
    }

    fn refund(ty: &str, object: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
        expect_kind(ty, object, "refund")?;
        let refund_ref = object.id("id")?;
        let status = object.text("status")?;
        if !refund_counts(status) {
            return Ok(vec![ignored(format!(
                "refund {refund_ref} is {}, not succeeded or pending",
                excerpt(status)
            ))]);
        }
        Ok(vec![PaymentFact::Refund {
            payment_ref: owning_payment(object, "charge")?,
            amount: object.money("amount", "currency")?,
            refund_ref,
        }])
    }

    fn charge_refunded(ty: &str, object: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
        expect_kind(ty, object, "charge")?;
        let charge_id = object.id("id")?;
        let payment_ref = owning_payment(object, "id")?;
        let listed = match object.opt_object("refunds")? {
            Some(refunds) => refunds.opt_array("data")?.unwrap_or_default(),
            None => Vec::new(),
        };
        if !listed.is_empty() {
            let mut facts = Vec::new();
            let mut skipped = Vec::new();
            for refund in listed {
                let refund_ref = refund.id("id")?;
                let status = refund.text("status")?;
                if refund_counts(status) {
                    facts.push(PaymentFact::Refund {
                        refund_ref,
                        payment_ref: payment_ref.clone(),
                        amount: refund.money("amount", "currency")?,
                    });
                } else {
                    skipped.push(format!("{refund_ref} is {}", excerpt(status)));
                }
            }
            if facts.is_empty() {
                return Ok(vec![ignored(format!(
                    "charge {charge_id} lists no succeeded or pending refund ({})",
                    skipped.join(", ")
                ))]);
            }
            return Ok(facts);
        }
        // Since API version 2022-11-15 the charge no longer embeds its refunds: only the cumulative
        // `amount_refunded` is known, not which refund (`re_…`) it adds. Every refund also arrives as its own
        // `refund.*` event carrying its real id, which is the key the ledger posts under; deriving a second key
        // here would post the same money twice. So this event only records that it was seen.
        let refunded = object.amount_or_zero("amount_refunded")?;
        Ok(vec![ignored(format!(
            "charge {charge_id} embeds no refund list (amount_refunded {refunded}); refunds are applied from refund.* events"
        ))])
    }

    fn dispute(
        ty: &str,
        object: &Obj<'_>,
        closed: bool,
    ) -> Result<Vec<PaymentFact>, PermanentError> {
        expect_kind(ty, object, "dispute")?;
        let dispute_ref = object.id("id")?;
        let stripe_status = if closed {
            Some(object.text("status")?)
        } else {
            object.opt_text("status")?
        };
        // A decided status wins over the event type: `charge.dispute.updated` can be delivered after (or
        // instead of) `charge.dispute.closed`, and dispute statuses only move forward anyway. `warning_closed`
        // is an inquiry closed without becoming a chargeback: no money lost, so Won.
        let status = match stripe_status {
            Some("won" | "warning_closed") => DisputeStatus::Won,
            Some("lost") => DisputeStatus::Lost,
            _ if !closed => DisputeStatus::Open,
            other => {
                // A closed dispute whose outcome we cannot read must not be guessed: dead-letter it.
                return Err(field_error(
                    &object.path_of("status"),
                    format!(
                        "{} is not a final dispute status (won, lost, warning_closed)",
                        other.map(quoted).unwrap_or_default()
                    ),
                ));
            }
        };
        Ok(vec![PaymentFact::Dispute {
            dispute_ref,
            payment_ref: owning_payment(object, "charge")?,
            amount: object.money("amount", "currency")?,
            status,
        }])
    }

    fn invoice_paid(ty: &str, object: &Obj<'_>) -> Result<Vec<PaymentFact>, PermanentError> {
        expect_kind(ty, object, "invoice")?;
        let invoice_ref = object.id("id")?;
        // `subscription` moved to `parent.subscription_details.subscription` in API version 2025-03-31.
        let subscription_id = match object.opt_id("subscription")? {
            Some(id) => Some(id),
            None => match object.opt_object("parent")? {
                Some(parent) => match parent.opt_object("subscription_details")? {
                    Some(details) => details.opt_id("subscription")?,
                    None => None,
                },
                None => None,
            },
        };
        let Some(subscription_id) = subscription_id else {
            return Ok(vec![ignored("one-off invoice".to_owned())]);
        };
        let amount_paid = object.amount_or_zero("amount_paid")?;
        if amount_paid == 0 {
            // Trials and 100 % coupons produce paid invoices of 0: nothing to charge or post.
            return Ok(vec![ignored("zero-amount invoice".to_owned())]);
        }
        Ok(vec![PaymentFact::InvoicePaid {
            billing_cycle: billing_cycle(object)?,
            invoice_ref,
            subscription_id,
            amount: Money {
                amount: amount_paid,
                currency: object.currency("currency")?,
            },
        }])
    }

    /// The start of the service period the invoice bills, as decimal unix seconds.
    ///
    /// This is the invoice's `period_end`, not its `period_start`: Stripe documents that the invoice period
    /// "looks back one period for a subscription invoice". The first invoice of a subscription started at t0
    /// has period t0..t0 and bills t0..t1; the first renewal has period t0..t1 and bills t1..t2. Keyed on
    /// `period_start`, both would be cycle t0 and the renewal would be dropped as a duplicate; `period_end`
    /// (t0, then t1, …) is the start of the billed period (the subscription line's `period.start`) and is
    /// distinct per cycle. Without `period_end`, the first line's `period.start` is used.
    fn billing_cycle(object: &Obj<'_>) -> Result<String, PermanentError> {
        if let Some(end) = object.opt_timestamp("period_end")? {
            return Ok(end.to_string());
        }
        let first_line = match object.opt_object("lines")? {
            Some(lines) => lines
                .opt_array("data")?
                .unwrap_or_default()
                .into_iter()
                .next(),
            None => None,
        };
        match first_line {
            Some(line) => Ok(line.object("period")?.timestamp("start")?.to_string()),
            None => Err(field_error(
                &object.path_of("period_end"),
                "missing, and there is no lines.data[0].period.start to take the billing cycle from",
            )),
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Pagar.me
// ---------------------------------------------------------------------------------------------------------------

mod pagarme {
    use super::*;

    /// Pagar.me v4 only settles in reais.
    const CURRENCY: &str = "brl";

    fn brl(amount: i64) -> Money {
        Money {
            amount,
            currency: CURRENCY.to_owned(),
        }
    }

    pub(super) fn normalize(
        event_type: Option<&str>,
        body: &[u8],
    ) -> Result<Vec<PaymentFact>, PermanentError> {
        let text = std::str::from_utf8(body).map_err(|e| {
            PermanentError(format!(
                "body: not valid UTF-8 form data (invalid byte at offset {})",
                e.valid_up_to()
            ))
        })?;
        let form = Form::parse(text);
        let event = form.required("event")?;
        check_event_type(event_type, "event", event)?;
        if event != "transaction_status_changed" {
            return Ok(vec![ignored(format!(
                "unhandled pagar.me event {}",
                excerpt(event)
            ))]);
        }
        // v4 postbacks always say `object=transaction`; an absent field is tolerated because the event name
        // already says which object changed.
        if let Some(object) = form.get("object")? {
            if object != "transaction" {
                return Ok(vec![ignored(format!(
                    "unhandled pagar.me object {}",
                    excerpt(object)
                ))]);
            }
        }
        let id = check_id("id", form.required("id")?)?;
        if let Some(nested) = form.get("transaction[id]")? {
            if nested != id {
                return Err(field_error(
                    "transaction[id]",
                    format!("{} differs from id {}", quoted(nested), quoted(&id)),
                ));
            }
        }
        let status = form.required("current_status")?;

        let requested = || form.amount("transaction[amount]");
        // A paid, refunded or charged-back transaction moved money, so its amount is required.
        let paid = || -> Result<Money, PermanentError> {
            match form.amount("transaction[paid_amount]")? {
                Some(amount) => Ok(brl(amount)),
                None => requested()?.map(brl).ok_or_else(|| {
                    field_error(
                        "transaction[paid_amount]",
                        "missing, and so is transaction[amount]",
                    )
                }),
            }
        };
        let payment = |status: PaymentStatus, amount: Option<Money>| PaymentFact::Payment {
            payment_ref: id.clone(),
            status,
            amount,
        };

        Ok(match status {
            // `analyzing` and `pending_review` are the antifraud stages: still in flight.
            "processing" | "waiting_payment" | "authorized" | "analyzing" | "pending_review" => {
                vec![payment(PaymentStatus::Processing, requested()?.map(brl))]
            }
            "paid" => vec![payment(PaymentStatus::Succeeded, Some(paid()?))],
            "refused" => vec![payment(PaymentStatus::Failed, requested()?.map(brl))],
            "pending_refund" => vec![ignored(format!(
                "pagar.me transaction {id} is pending_refund: refund not final"
            ))],
            // A transaction only reaches `refunded` or `chargedback` after being paid, and the `paid` postback
            // may have been lost or may arrive later, so the payment fact is repeated here; facts converge.
            "refunded" => {
                let refunded = match form.amount("transaction[refunded_amount]")? {
                    Some(amount) => amount,
                    None => requested()?.ok_or_else(|| {
                        field_error(
                            "transaction[refunded_amount]",
                            "missing, and so is transaction[amount]",
                        )
                    })?,
                };
                vec![
                    payment(PaymentStatus::Succeeded, Some(paid()?)),
                    // Pagar.me postbacks carry no refund id. A transaction reaches `refunded` once, so the id
                    // plus the refunded total is a stable key: a redelivery of this postback maps to the same
                    // refund.
                    PaymentFact::Refund {
                        refund_ref: format!("{id}:refund:{refunded}"),
                        payment_ref: id.clone(),
                        amount: brl(refunded),
                    },
                ]
            }
            "chargedback" => {
                let paid = paid()?;
                vec![
                    payment(PaymentStatus::Succeeded, Some(paid.clone())),
                    // No dispute id either, and a transaction is charged back at most once.
                    PaymentFact::Dispute {
                        dispute_ref: format!("{id}:chargeback"),
                        payment_ref: id.clone(),
                        amount: paid,
                        status: DisputeStatus::Lost,
                    },
                ]
            }
            other => vec![ignored(format!(
                "unhandled pagar.me transaction status {}",
                excerpt(other)
            ))],
        })
    }

    /// A decoded `application/x-www-form-urlencoded` body.
    pub(super) struct Form {
        /// `(name, value)` in body order; the value is `None` when its percent-decoded bytes are not UTF-8.
        /// Pairs whose *name* is not UTF-8 are dropped: they cannot be a field we read.
        pairs: Vec<(String, Option<String>)>,
    }

    impl Form {
        /// Splits on `&` and each pair on its first `=`, decoding `+` and `%XX` like the WHATWG form parser
        /// (a `%` not followed by two hex digits stays literal). Unlike `form_urlencoded::parse`, invalid UTF-8
        /// is not replaced with U+FFFD: a mangled amount or id must be an error, not a silently altered value.
        pub(super) fn parse(text: &str) -> Form {
            let pairs = text
                .split('&')
                .filter(|segment| !segment.is_empty())
                .filter_map(|segment| {
                    let (name, value) = segment.split_once('=').unwrap_or((segment, ""));
                    let name = String::from_utf8(percent_decode(name)).ok()?;
                    Some((name, String::from_utf8(percent_decode(value)).ok()))
                })
                .collect();
            Form { pairs }
        }

        /// The value of field `name`. Empty values and the literal `null` (how Pagar.me serialises a null
        /// field, e.g. `transaction[refuse_reason]=null`) count as absent. A field repeated with different
        /// values is an error: the edge keys dedupe on the first occurrence, and guessing which copy is right
        /// about money is not safe.
        pub(super) fn get(&self, name: &str) -> Result<Option<&str>, PermanentError> {
            let mut found: Option<&str> = None;
            for (key, value) in &self.pairs {
                if key != name {
                    continue;
                }
                let value = value
                    .as_deref()
                    .ok_or_else(|| field_error(name, "not valid UTF-8 after percent-decoding"))?;
                if value.is_empty() || value == "null" {
                    continue;
                }
                match found {
                    None => found = Some(value),
                    Some(first) if first == value => {}
                    Some(first) => {
                        return Err(field_error(
                            name,
                            format!(
                                "appears more than once with different values ({} and {})",
                                quoted(first),
                                quoted(value)
                            ),
                        ))
                    }
                }
            }
            Ok(found)
        }

        fn required(&self, name: &str) -> Result<&str, PermanentError> {
            self.get(name)?.ok_or_else(|| field_error(name, "missing"))
        }

        /// An amount in cents. Pagar.me sends amounts as digit strings, parsed strictly: no sign, no decimal
        /// point, no spaces, because `10.50` or `1,050` would otherwise be misread by a factor of 100.
        fn amount(&self, name: &str) -> Result<Option<i64>, PermanentError> {
            let Some(text) = self.get(name)? else {
                return Ok(None);
            };
            if !text.bytes().all(|b| b.is_ascii_digit()) {
                return Err(field_error(
                    name,
                    format!(
                        "{} is not an integer amount in cents (digits only)",
                        quoted(text)
                    ),
                ));
            }
            let significant = text.trim_start_matches('0');
            // 16 digits already exceed MAX_AMOUNT while still fitting in i64, so parse cannot overflow.
            if significant.len() > 16 {
                return Err(field_error(
                    name,
                    format!("{} exceeds the maximum amount {MAX_AMOUNT}", excerpt(text)),
                ));
            }
            let value = if significant.is_empty() {
                0
            } else {
                significant.parse::<i64>().map_err(|_| {
                    field_error(
                        name,
                        format!("{} is not an integer amount in cents", quoted(text)),
                    )
                })?
            };
            check_amount(name, value, false).map(Some)
        }
    }

    fn percent_decode(input: &str) -> Vec<u8> {
        fn hex(byte: Option<&u8>) -> Option<u8> {
            byte.and_then(|b| char::from(*b).to_digit(16))
                .and_then(|d| u8::try_from(d).ok())
        }
        let bytes = input.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while let Some(&byte) = bytes.get(i) {
            match byte {
                b'+' => {
                    out.push(b' ');
                    i += 1;
                }
                b'%' => match (hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
                    (Some(high), Some(low)) => {
                        out.push(high * 16 + low);
                        i += 3;
                    }
                    _ => {
                        out.push(b'%');
                        i += 1;
                    }
                },
                other => {
                    out.push(other);
                    i += 1;
                }
            }
        }
        out
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn decodes_plus_percent_and_keeps_stray_percent() {
            assert_eq!(percent_decode("a+b%20c"), b"a b c");
            assert_eq!(percent_decode("100%"), b"100%");
            assert_eq!(percent_decode("%4"), b"%4");
            assert_eq!(percent_decode("%zz%C3%A3"), "%zzã".as_bytes());
        }

        #[test]
        fn form_names_are_decoded_and_invalid_utf8_is_kept_apart() {
            let form = Form::parse("transaction%5Bamount%5D=1000&bad=%FF&=x&&k");
            assert_eq!(form.get("transaction[amount]").unwrap(), Some("1000"));
            assert!(form.get("bad").is_err());
            assert_eq!(form.get("k").unwrap(), None);
            assert_eq!(form.get("absent").unwrap(), None);
        }

        #[test]
        fn null_and_empty_are_absent_and_conflicts_are_errors() {
            let form = Form::parse("a=null&b=&c=1&c=1&d=1&d=2");
            assert_eq!(form.get("a").unwrap(), None);
            assert_eq!(form.get("b").unwrap(), None);
            assert_eq!(form.get("c").unwrap(), Some("1"));
            assert!(form.get("d").is_err());
        }

        #[test]
        fn amounts_are_strict_digits() {
            let form =
                Form::parse("a=0001000&b=10.50&c=-5&d=0&e=99999999999999999999&f=1000000000000000");
            assert_eq!(form.amount("a").unwrap(), Some(1000));
            assert!(form.amount("b").is_err());
            assert!(form.amount("c").is_err());
            assert!(form.amount("d").is_err());
            assert!(form.amount("e").is_err());
            assert_eq!(form.amount("f").unwrap(), Some(MAX_AMOUNT));
        }
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Mercado Pago
// ---------------------------------------------------------------------------------------------------------------

mod mercadopago {
    use super::*;

    /// Longest resource id accepted for a fetch.
    const MAX_RESOURCE_ID_LEN: usize = 128;

    /// The body is not signed (only the query `data.id` is), so it is never trusted for amounts or statuses:
    /// it only says which resource to fetch from the API.
    pub(super) fn normalize(body: &[u8]) -> Result<Vec<PaymentFact>, PermanentError> {
        let map = parse_json_object(body)?;
        let root = Obj::root(&map);
        let data = root.object("data")?;
        let path = data.path_of("id");
        let resource_id = match data.value("id") {
            None => return Err(field_error(&path, "missing")),
            Some(Value::String(id)) => id.clone(),
            // Older notifications send the id as a JSON number.
            Some(Value::Number(n)) if n.is_u64() => n.to_string(),
            Some(other) => {
                return Err(field_error(
                    &path,
                    format!("{} is not a resource id", render(other)),
                ))
            }
        };
        // The id ends up in an API URL path. Restricting it to the characters real ids use (numbers, `ORD01…`,
        // hex ids) keeps an unsigned body from steering the fetch elsewhere (`../`, `?`, `/`).
        check_token(&path, &resource_id, MAX_RESOURCE_ID_LEN, &['-', '_'])?;
        let resource = root.text("type")?;
        check_token("type", resource, 64, &['-', '_', '.'])?;
        Ok(vec![PaymentFact::NeedsFetch {
            resource: resource.to_owned(),
            resource_id,
        }])
    }

    fn check_token(
        path: &str,
        value: &str,
        max_len: usize,
        extra: &[char],
    ) -> Result<(), PermanentError> {
        if value.is_empty() {
            return Err(field_error(path, "is empty"));
        }
        if value.len() > max_len {
            return Err(field_error(
                path,
                format!("is {} bytes long, more than {max_len}", value.len()),
            ));
        }
        if !value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || extra.contains(&c))
        {
            let allowed: Vec<String> = extra.iter().map(|c| format!("'{c}'")).collect();
            return Err(field_error(
                path,
                format!(
                    "{} has characters other than ASCII letters, digits and {}",
                    quoted(value),
                    allowed.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------------------------

fn ignored(reason: String) -> PaymentFact {
    PaymentFact::Ignored { reason }
}

/// `"{path}: {message}"`: every dead letter starts with the field it is about.
fn field_error(path: &str, message: impl Display) -> PermanentError {
    PermanentError(format!("{path}: {message}"))
}

/// The ingest-time event type must match the body it was extracted from.
fn check_event_type(recorded: Option<&str>, field: &str, body: &str) -> Result<(), PermanentError> {
    match recorded {
        Some(recorded) if recorded != body => Err(field_error(
            field,
            format!(
                "{} differs from the event type {} recorded at ingest",
                quoted(body),
                quoted(recorded)
            ),
        )),
        _ => Ok(()),
    }
}

/// At most [`EXCERPT_CHARS`] characters of `s`, cut on a character boundary.
fn excerpt(s: &str) -> String {
    match s.char_indices().nth(EXCERPT_CHARS) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_owned(),
    }
}

/// An excerpt in double quotes with control characters escaped, so a value is unambiguous in a message.
fn quoted(s: &str) -> String {
    format!("{:?}", excerpt(s))
}

/// How a JSON value is shown in an error message.
fn render(value: &Value) -> String {
    match value {
        Value::Null => "null".to_owned(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("the string {}", quoted(s)),
        Value::Array(_) => "an array".to_owned(),
        Value::Object(_) => "an object".to_owned(),
    }
}

/// A provider id used as a key: non-empty, bounded, without whitespace or control characters (none of the
/// providers' ids have them, and they would make keys ambiguous in logs and URLs).
fn check_id(path: &str, id: &str) -> Result<String, PermanentError> {
    if id.is_empty() {
        return Err(field_error(path, "is empty"));
    }
    if id.len() > MAX_ID_LEN {
        return Err(field_error(
            path,
            format!("is {} bytes long, more than {MAX_ID_LEN}", id.len()),
        ));
    }
    if id.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(field_error(
            path,
            format!("{} contains whitespace or control characters", quoted(id)),
        ));
    }
    Ok(id.to_owned())
}

/// Range check shared by both encodings. `allow_zero` is only for totals where 0 means "nothing happened"
/// (the caller then ignores the event); a [`Money`] is never built from 0.
fn check_amount(path: &str, value: i64, allow_zero: bool) -> Result<i64, PermanentError> {
    if value < 0 || (value == 0 && !allow_zero) {
        return Err(field_error(
            path,
            format!("{value} is not a positive amount"),
        ));
    }
    if value > MAX_AMOUNT {
        return Err(field_error(
            path,
            format!("{value} exceeds the maximum amount {MAX_AMOUNT}"),
        ));
    }
    Ok(value)
}

fn check_currency(path: &str, code: &str) -> Result<String, PermanentError> {
    if code.len() == 3 && code.bytes().all(|b| b.is_ascii_alphabetic()) {
        Ok(code.to_ascii_lowercase())
    } else {
        Err(field_error(
            path,
            format!("{} is not a 3-letter currency code", quoted(code)),
        ))
    }
}

/// Parses a JSON body whose top level must be an object.
fn parse_json_object(body: &[u8]) -> Result<Map<String, Value>, PermanentError> {
    let text = std::str::from_utf8(body).map_err(|e| {
        PermanentError(format!(
            "body: not valid UTF-8 (invalid byte at offset {})",
            e.valid_up_to()
        ))
    })?;
    // serde_json bounds nesting depth itself, so a deeply nested body is an error, not a stack overflow.
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => Err(PermanentError(format!(
            "body: is {}, expected a JSON object",
            render(&other)
        ))),
        Err(e) => Err(PermanentError(format!("body: not valid JSON ({e})"))),
    }
}

/// A JSON object together with its path from the payload root, so every error can name the exact field.
#[derive(Clone)]
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn root(map: &'a Map<String, Value>) -> Self {
        Obj {
            map,
            path: String::new(),
        }
    }

    fn path_of(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    /// A present, non-null value. Stripe sends `null` for every unset field, so null and absent are one case.
    fn value(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    fn has(&self, key: &str) -> bool {
        self.value(key).is_some()
    }

    fn missing(&self, key: &str) -> PermanentError {
        field_error(&self.path_of(key), "missing")
    }

    fn wrong_type(&self, key: &str, value: &Value, expected: &str) -> PermanentError {
        field_error(
            &self.path_of(key),
            format!("is {}, expected {expected}", render(value)),
        )
    }

    fn opt_object(&self, key: &str) -> Result<Option<Obj<'a>>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj {
                map,
                path: self.path_of(key),
            })),
            Some(other) => Err(self.wrong_type(key, other, "an object")),
        }
    }

    fn object(&self, key: &str) -> Result<Obj<'a>, PermanentError> {
        self.opt_object(key)?.ok_or_else(|| self.missing(key))
    }

    /// An optional array whose items must all be objects (Stripe lists only hold objects).
    fn opt_array(&self, key: &str) -> Result<Option<Vec<Obj<'a>>>, PermanentError> {
        let items = match self.value(key) {
            None => return Ok(None),
            Some(Value::Array(items)) => items,
            Some(other) => return Err(self.wrong_type(key, other, "an array")),
        };
        let base = self.path_of(key);
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let path = format!("{base}[{i}]");
                match item {
                    Value::Object(map) => Ok(Obj { map, path }),
                    other => Err(field_error(
                        &path,
                        format!("is {}, expected an object", render(other)),
                    )),
                }
            })
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }

    /// An optional non-empty string.
    fn opt_text(&self, key: &str) -> Result<Option<&'a str>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::String(s)) if s.is_empty() => {
                Err(field_error(&self.path_of(key), "is an empty string"))
            }
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong_type(key, other, "a string")),
        }
    }

    fn text(&self, key: &str) -> Result<&'a str, PermanentError> {
        self.opt_text(key)?.ok_or_else(|| self.missing(key))
    }

    fn opt_id(&self, key: &str) -> Result<Option<String>, PermanentError> {
        self.opt_text(key)?
            .map(|id| check_id(&self.path_of(key), id))
            .transpose()
    }

    fn id(&self, key: &str) -> Result<String, PermanentError> {
        self.opt_id(key)?.ok_or_else(|| self.missing(key))
    }

    fn opt_bool(&self, key: &str) -> Result<Option<bool>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong_type(key, other, "a boolean")),
        }
    }

    /// An integer from JSON. Floats are refused even when whole (`10.0`): providers send integers, and a
    /// float means someone converted units on the way.
    fn integer(&self, key: &str, value: &Value, what: &str) -> Result<i64, PermanentError> {
        let path = self.path_of(key);
        match value {
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    Ok(i)
                } else if n.is_u64() || n.as_f64().is_some_and(|f| f.abs() >= 9.2e18) {
                    Err(field_error(&path, format!("{n} is too large for {what}")))
                } else {
                    Err(field_error(&path, format!("{n} is not an integer {what}")))
                }
            }
            other => Err(field_error(
                &path,
                format!("{} is not an integer {what}", render(other)),
            )),
        }
    }

    fn opt_amount(&self, key: &str) -> Result<Option<i64>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(value) => {
                let amount = self.integer(key, value, "amount in minor units")?;
                check_amount(&self.path_of(key), amount, false).map(Some)
            }
        }
    }

    /// A required total that may legitimately be 0 (`amount_paid`, `amount_refunded`).
    fn amount_or_zero(&self, key: &str) -> Result<i64, PermanentError> {
        let value = self.value(key).ok_or_else(|| self.missing(key))?;
        let amount = self.integer(key, value, "amount in minor units")?;
        check_amount(&self.path_of(key), amount, true)
    }

    fn currency(&self, key: &str) -> Result<String, PermanentError> {
        check_currency(&self.path_of(key), self.text(key)?)
    }

    /// Required amount plus currency.
    fn money(&self, amount_key: &str, currency_key: &str) -> Result<Money, PermanentError> {
        let amount = self
            .opt_amount(amount_key)?
            .ok_or_else(|| self.missing(amount_key))?;
        Ok(Money {
            amount,
            currency: self.currency(currency_key)?,
        })
    }

    /// Optional amount; the currency is only required (and checked) when the amount is there.
    fn opt_money(
        &self,
        amount_key: &str,
        currency_key: &str,
    ) -> Result<Option<Money>, PermanentError> {
        match self.opt_amount(amount_key)? {
            None => Ok(None),
            Some(amount) => Ok(Some(Money {
                amount,
                currency: self.currency(currency_key)?,
            })),
        }
    }

    /// An optional unix timestamp in seconds (a positive integer).
    fn opt_timestamp(&self, key: &str) -> Result<Option<i64>, PermanentError> {
        match self.value(key) {
            None => Ok(None),
            Some(value) => {
                let ts = self.integer(key, value, "unix timestamp")?;
                if ts <= 0 {
                    return Err(field_error(
                        &self.path_of(key),
                        format!("{ts} is not a positive unix timestamp"),
                    ));
                }
                Ok(Some(ts))
            }
        }
    }

    fn timestamp(&self, key: &str) -> Result<i64, PermanentError> {
        self.opt_timestamp(key)?.ok_or_else(|| self.missing(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_cuts_on_char_boundaries() {
        let long = "ã".repeat(EXCERPT_CHARS + 5);
        let cut = excerpt(&long);
        assert_eq!(cut.chars().count(), EXCERPT_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(excerpt("short"), "short");
    }

    #[test]
    fn currency_is_lower_cased_and_checked() {
        assert_eq!(check_currency("c", "USD").unwrap(), "usd");
        assert!(check_currency("c", "us").is_err());
        assert!(check_currency("c", "u1d").is_err());
        // Three bytes but not three letters.
        assert!(check_currency("c", "é1").is_err());
    }
}
