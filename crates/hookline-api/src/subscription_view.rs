//! A subscription as the merchant API shows it (the OpenAPI schema `Subscription`), and the execution of its writes
//! in the request's transaction: the rules, statements and facts are `hookline_billing::manage`'s, the same the CLI
//! runs; this maps them to the API's answers (a refused input names its field, `param`). Here, not in the handler
//! module, so that [`crate::operation`] imports no handler.

use std::collections::HashMap;

use actix_web::http::StatusCode;
use hookline_billing::claims::Claim;
use hookline_billing::manage::{self, Change, Checked, Field, ManageError};
use hookline_billing::period;
use hookline_billing::{Subscription, SubscriptionStatus};
use hookline_core::config::ProviderConfig;
use hookline_signature::Scheme;
use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::error::ApiError;
use crate::params;
use crate::Reply;

/// The names of a scheme's saved method in its provider object: (customer, payment method) — the names the
/// payment-intent create takes for a saved card (`stripe.customer` + `stripe.payment_method`,
/// `mercadopago.customer_id` + `mercadopago.card_id`, `pagarme.customer_id` + `pagarme.card_id`).
pub(crate) fn method_names(object: &str) -> (&'static str, &'static str) {
    match object {
        "stripe" => ("customer", "payment_method"),
        _ => ("customer_id", "card_id"),
    }
}

/// A saved method from a request's provider object, its field names checked ([`method_names`]).
#[derive(Debug, Clone)]
pub struct SavedMethod {
    /// The provider object it came in (`stripe`, `mercadopago`, `pagarme`).
    pub(crate) object: &'static str,
    /// The customer at the provider.
    pub(crate) customer: Option<String>,
    /// The saved payment method.
    pub(crate) payment_method: Option<String>,
}

/// A validated `POST /v1/subscriptions/{id}` body.
#[derive(Debug, Clone)]
pub struct SubscriptionChange {
    /// The new saved method, if any.
    pub(crate) method: Option<SavedMethod>,
    /// The new amount, if any.
    pub(crate) amount: Option<i64>,
}

/// A subscription (the OpenAPI schema `Subscription`).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = Subscription)]
pub struct SubscriptionView {
    /// `sub_hl_…`.
    #[schema(example = "sub_hl_4f9c2a7e1b3d5f60718293a4b5c6d7e8")]
    pub id: String,
    /// Always `subscription`.
    #[schema(value_type = String, example = "subscription")]
    pub object: &'static str,
    /// The configured provider that charges it.
    #[schema(example = "stripe")]
    pub provider: String,
    /// Minor units charged per cycle (from the next charge on, after an update).
    #[schema(example = 2000)]
    pub amount: i64,
    /// Lower-case ISO 4217.
    #[schema(example = "brl")]
    pub currency: String,
    /// `month` or `year`.
    #[schema(value_type = String, example = "month")]
    pub interval: &'static str,
    /// Periods start on its day (yearly: its month and day) at its time of day, UTC.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub anchor: OffsetDateTime,
    /// Where it stands.
    pub status: SubscriptionStatus,
    /// Canceled when its running period ends: no new cycle is charged.
    pub cancel_at_period_end: bool,
    /// The period running now (`null` before the anchor).
    pub current_period: Option<Period>,
    /// Its latest billing cycle's charge (`null`: never charged yet).
    pub latest_charge: Option<LatestCharge>,
    /// When the latest cycle's declined charge is retried (`retry_scheduled`), else `null`.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub next_retry_at: Option<OffsetDateTime>,
    /// Why it is past due or needs a payment method (the last decline), else `null`.
    pub decline_reason: Option<String>,
    /// The latest cycle's last decline code.
    pub failure_code: Option<String>,
    /// The latest cycle's last decline message.
    pub failure_message: Option<String>,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub created: OffsetDateTime,
    /// When it was canceled.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub canceled_at: Option<OffsetDateTime>,
    /// Stripe's saved method (a `stripe` provider).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stripe: Option<StripeMethod>,
    /// Mercado Pago's saved card (a `mercadopago` provider).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mercadopago: Option<SavedCard>,
    /// Pagar.me's saved card (a `pagarme-v5` provider).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pagarme: Option<SavedCard>,
}

/// A billing period.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SubscriptionPeriod)]
pub struct Period {
    /// `YYYY-MM`.
    #[schema(example = "2026-12")]
    pub cycle: String,
    /// When it starts.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub start: OffsetDateTime,
    /// When it ends (the next one starts).
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub end: Option<OffsetDateTime>,
}

/// A cycle's charge (its billing claim).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SubscriptionCharge)]
pub struct LatestCharge {
    /// `YYYY-MM`.
    #[schema(example = "2026-12")]
    pub cycle: String,
    /// Its latest payment intent (`pi_hl_…`).
    pub intent: String,
    /// `charging`, `paid`, `retry_scheduled`, `past_due`, `needs_payment_method`, `canceled`…: where the cycle
    /// stands.
    #[schema(value_type = String, example = "paid")]
    pub status: &'static str,
    /// Charges made for it.
    pub attempts: i32,
}

/// Stripe's saved method.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SubscriptionStripeMethod)]
pub struct StripeMethod {
    /// `cus_…`.
    pub customer: String,
    /// `pm_…`.
    pub payment_method: Option<String>,
}

/// A card saved at Mercado Pago or Pagar.me.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SubscriptionSavedCard)]
pub struct SavedCard {
    /// The customer at the provider.
    pub customer_id: String,
    /// The saved card.
    pub card_id: Option<String>,
}

/// The scheme of a configured provider that can be charged through the API.
fn scheme_of(providers: &HashMap<String, ProviderConfig>, provider: &str) -> Option<Scheme> {
    providers
        .get(provider)
        .map(|p| p.scheme)
        .filter(|s| params::field_of(*s).is_some())
}

/// The view of `sub` with its latest claim, at `now`.
pub(crate) fn view_of(
    sub: Subscription,
    claim: Option<Claim>,
    scheme: Option<Scheme>,
    now: OffsetDateTime,
) -> SubscriptionView {
    let current_period = period::current_cycle(sub.anchor, sub.interval, now).and_then(|cycle| {
        Some(Period {
            cycle: cycle.to_string(),
            start: period::period_start(sub.anchor, sub.interval, cycle)?,
            end: period::period_end(sub.anchor, sub.interval, cycle),
        })
    });
    let next_retry_at = claim
        .as_ref()
        .filter(|c| c.status.as_str() == "retry_scheduled")
        .and_then(|c| c.next_attempt_at);
    let (failure_code, failure_message) = claim.as_ref().map_or((None, None), |c| {
        (c.last_failure_code.clone(), c.last_failure_message.clone())
    });
    let latest_charge = claim.map(|c| LatestCharge {
        cycle: c.billing_cycle,
        intent: c.intent,
        status: c.status.as_str(),
        attempts: c.attempts,
    });
    let object = scheme.and_then(params::field_of);
    SubscriptionView {
        object: "subscription",
        provider: sub.provider,
        amount: sub.amount,
        currency: sub.currency,
        interval: sub.interval.as_str(),
        anchor: sub.anchor,
        status: sub.status,
        cancel_at_period_end: sub.cancel_at_period_end,
        current_period,
        latest_charge,
        next_retry_at,
        decline_reason: sub.status_reason,
        failure_code,
        failure_message,
        created: sub.created_at,
        canceled_at: sub.canceled_at,
        stripe: (object == Some("stripe")).then(|| StripeMethod {
            customer: sub.customer.clone(),
            payment_method: sub.payment_method.clone(),
        }),
        mercadopago: (object == Some("mercadopago")).then(|| SavedCard {
            customer_id: sub.customer.clone(),
            card_id: sub.payment_method.clone(),
        }),
        pagarme: (object == Some("pagarme")).then(|| SavedCard {
            customer_id: sub.customer.clone(),
            card_id: sub.payment_method.clone(),
        }),
        id: sub.public_id,
    }
}

/// Reads `sub`'s latest claim and builds its view.
pub(crate) async fn view(
    conn: &mut PgConnection,
    sub: Subscription,
    providers: &HashMap<String, ProviderConfig>,
) -> Result<SubscriptionView, ApiError> {
    let claim = hookline_billing::claims::latest(conn, sub.id)
        .await
        .map_err(|e| ApiError::database(e, "read the subscription's latest charge"))?;
    let scheme = scheme_of(providers, &sub.provider);
    Ok(view_of(sub, claim, scheme, OffsetDateTime::now_utc()))
}

/// The views of a list page's subscriptions, their latest claims read in one statement.
pub(crate) async fn views(
    conn: &mut PgConnection,
    subs: Vec<Subscription>,
    providers: &HashMap<String, ProviderConfig>,
) -> Result<Vec<SubscriptionView>, ApiError> {
    let ids: Vec<i64> = subs.iter().map(|s| s.id).collect();
    let mut claims: HashMap<i64, hookline_billing::claims::Claim> =
        hookline_billing::claims::latest_of(conn, &ids)
            .await
            .map_err(|e| ApiError::database(e, "read the subscriptions' latest charges"))?
            .into_iter()
            .map(|c| (c.subscription_id, c))
            .collect();
    let now = OffsetDateTime::now_utc();
    Ok(subs
        .into_iter()
        .map(|sub| {
            let claim = claims.remove(&sub.id);
            let scheme = scheme_of(providers, &sub.provider);
            view_of(sub, claim, scheme, now)
        })
        .collect())
}

/// The API's answer to a refusal of [`hookline_billing::manage`]: an input names its field (`object`: the
/// provider object the saved method is in), a canceled subscription is 409 `subscription_canceled`.
pub(crate) fn manage_error(e: ManageError, object: Option<&str>) -> ApiError {
    match e {
        ManageError::Invalid {
            field,
            code,
            message,
        } => {
            let object = object.unwrap_or("provider object");
            let (customer, method) = method_names(object);
            let param = match field {
                Field::Provider => "provider".to_owned(),
                Field::Amount => "amount".to_owned(),
                Field::Currency => "currency".to_owned(),
                Field::Anchor => "anchor".to_owned(),
                Field::Customer => format!("{object}.{customer}"),
                Field::PaymentMethod => format!("{object}.{method}"),
            };
            let message = match field {
                Field::Customer | Field::PaymentMethod if code == "parameter_invalid" => {
                    format!("{param} must be {message}")
                }
                Field::Anchor => format!("anchor {message}"),
                _ => message,
            };
            ApiError::field(code, param, message)
        }
        ManageError::Canceled => ApiError::SubscriptionCanceled,
        ManageError::Database(e) => ApiError::database(e, "write the subscription"),
        ManageError::Record(e) => ApiError::Unexpected(anyhow::Error::new(e)),
    }
}

/// Creates the client's checked subscription and its `subscription.created`: 201 with the subscription.
pub(crate) async fn execute_create(
    tx: &mut PgConnection,
    client: &str,
    checked: &Checked,
    object: &'static str,
    providers: &HashMap<String, ProviderConfig>,
) -> Result<Reply, ApiError> {
    let sub = manage::create(tx, Some(client), checked, OffsetDateTime::now_utc())
        .await
        .map_err(|e| manage_error(e, Some(object)))?;
    let view = view(tx, sub, providers).await?;
    Reply::json(StatusCode::CREATED, &view)
}

/// Changes the client's subscription `public_id` (locked first: after or before the billing run's decision about
/// it, never beside it) and records `subscription.updated`: 200 with the subscription.
pub(crate) async fn execute_update(
    tx: &mut PgConnection,
    client: &str,
    public_id: &str,
    change: &SubscriptionChange,
    providers: &HashMap<String, ProviderConfig>,
) -> Result<Reply, ApiError> {
    let sub = hookline_billing::subscriptions::lock_for_client(tx, client, public_id)
        .await
        .map_err(|e| ApiError::database(e, "lock the subscription"))?
        .ok_or(ApiError::SubscriptionNotFound)?;
    if sub.status == SubscriptionStatus::Canceled {
        return Err(ApiError::SubscriptionCanceled);
    }
    let config = providers.get(&sub.provider);
    let expected = scheme_of(providers, &sub.provider).and_then(params::field_of);
    if let Some(method) = &change.method {
        if Some(method.object) != expected {
            return Err(ApiError::ProviderObjectMismatch {
                param: method.object.to_owned(),
                expected: expected.unwrap_or("none: its provider is no longer configured"),
            });
        }
        if method.payment_method.is_none() {
            let (_, name) = method_names(method.object);
            return Err(ApiError::ParameterMissing {
                param: format!("{}.{name}", method.object),
            });
        }
    }
    let method = change.method.as_ref();
    let updated = manage::update(
        tx,
        sub,
        config,
        &Change {
            payment_method: method.and_then(|m| m.payment_method.as_deref()),
            customer: method.and_then(|m| m.customer.as_deref()),
            amount: change.amount,
        },
    )
    .await
    .map_err(|e| manage_error(e, expected))?;
    let view = view(tx, updated, providers).await?;
    Reply::json(StatusCode::OK, &view)
}

/// Cancels the client's subscription `public_id`, now or at its period's end, with its fact: 200 with the
/// subscription. A repeat (already canceled, or already set to end) answers it as it is, nothing recorded.
pub(crate) async fn execute_cancel(
    tx: &mut PgConnection,
    client: &str,
    public_id: &str,
    at_period_end: bool,
    providers: &HashMap<String, ProviderConfig>,
) -> Result<Reply, ApiError> {
    let sub = hookline_billing::subscriptions::lock_for_client(tx, client, public_id)
        .await
        .map_err(|e| ApiError::database(e, "lock the subscription"))?
        .ok_or(ApiError::SubscriptionNotFound)?;
    let (_, now) = manage::cancel_subscription(tx, &sub, at_period_end)
        .await
        .map_err(|e| manage_error(e, None))?;
    let view = view(tx, now, providers).await?;
    Reply::json(StatusCode::OK, &view)
}
