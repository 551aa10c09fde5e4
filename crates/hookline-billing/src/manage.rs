//! What an operator or a merchant does to a subscription, across its two tables: create it, change its payment
//! method or amount, cancel it. Each is one transaction's worth of statements, run in the caller's, with its
//! fact (`subscription.created`, `subscription.updated`, `subscription.canceled`) recorded in the same
//! transaction. The merchant API and `hookline subscriptions …` call these same functions: the caller finds the
//! subscription (the API by the client's `sub_hl_…`, the CLI by its numeric id) and locks it; the rules, the
//! statements and the facts are here.

use hookline_core::config::ProviderConfig;
use hookline_core::domain_events::{self, EventType, Owner, RecordError};
use hookline_signature::Scheme;
use serde::Serialize;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::claims;
use crate::period::Interval;
use crate::subscriptions::{self, NewSubscription, Subscription, SubscriptionStatus};

/// Cancels a subscription: now (later cycles are not charged, and its scheduled retries and parked cycles stop
/// — a charge in flight is left to finish: the gateway may already have it), or, with `at_period_end`, when its
/// running period ends (the run cancels it instead of charging the next cycle). `None` when it does not exist,
/// `Some(false)` when it was already canceled (or already set to cancel at period end).
pub async fn cancel(
    conn: &mut PgConnection,
    id: i64,
    at_period_end: bool,
) -> Result<Option<bool>, sqlx::Error> {
    let changed = subscriptions::mark_canceled(conn, id, at_period_end).await?;
    if changed == Some(true) && !at_period_end {
        claims::cancel_open(conn, id).await?;
    }
    Ok(changed)
}

/// Gives a subscription a new saved payment method: it is `active` again, and its parked cycles (past due, or
/// waiting for a method) are due again now, for the next run. `None` when it does not exist or is canceled.
pub async fn update_payment_method(
    conn: &mut PgConnection,
    id: i64,
    payment_method: &str,
) -> Result<Option<Subscription>, sqlx::Error> {
    let updated = subscriptions::set_payment_method(conn, id, payment_method).await?;
    if let Some(sub) = &updated {
        claims::retry_parked_now(conn, id).await?;
        // Periods that started while it was parked were not charged, and are not now: the scheduler resumes
        // at the running period (its unpaid cycle is the retry above).
        let now = time::OffsetDateTime::now_utc();
        if let Some(current) = crate::period::current_cycle(sub.anchor, sub.interval, now) {
            if let Some(starts) = crate::period::period_start(sub.anchor, sub.interval, current) {
                subscriptions::advance(conn, id, current, starts).await?;
            }
        }
    }
    Ok(updated)
}

/// Largest amount per cycle, in minor units (the same bound as a payment intent's: the database's).
pub const MAX_AMOUNT: i64 = 1_000_000_000_000_000;
/// How far back an anchor may lie, in days (ten years): a typo must not bill from the year 1.
pub const ANCHOR_MAX_PAST_DAYS: i64 = 3653;
/// How far ahead an anchor may lie, in days (one year).
pub const ANCHOR_MAX_FUTURE_DAYS: i64 = 366;

/// Which input of a subscription is wrong: the CLI names its flag, the API its field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// The configured provider.
    Provider,
    /// The customer at the provider.
    Customer,
    /// The saved payment method.
    PaymentMethod,
    /// Minor units per cycle.
    Amount,
    /// ISO 4217.
    Currency,
    /// Where its periods start.
    Anchor,
}

/// Why a subscription was not created or changed.
#[derive(Debug, thiserror::Error)]
pub enum ManageError {
    /// An input is wrong: `code` is stable (`provider_unknown`, `currency_unsupported`, …), `message` says why.
    #[error("{message}")]
    Invalid {
        /// The input at fault.
        field: Field,
        /// Stable code.
        code: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The subscription is canceled: it cannot change any more.
    #[error("the subscription is canceled")]
    Canceled,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// A fact could not be recorded.
    #[error(transparent)]
    Record(RecordError),
}

impl From<RecordError> for ManageError {
    fn from(e: RecordError) -> Self {
        match e {
            RecordError::Database(e) => ManageError::Database(e),
            other => ManageError::Record(other),
        }
    }
}

fn invalid(field: Field, code: &'static str, message: impl Into<String>) -> ManageError {
    ManageError::Invalid {
        field,
        code,
        message: message.into(),
    }
}

/// The scheme of the configured provider `name` (`config`: its configuration, `None` when there is none), when it
/// can be charged: stripe, mercadopago or pagarme-v5.
pub fn chargeable(name: &str, config: Option<&ProviderConfig>) -> Result<Scheme, ManageError> {
    match config {
        None => Err(invalid(
            Field::Provider,
            "provider_unknown",
            format!(
                "no provider named {:?} is configured",
                name.chars().take(64).collect::<String>()
            ),
        )),
        Some(p) if hookline_gateways::gateway::Api::of(p.scheme).is_none() => Err(invalid(
            Field::Provider,
            "provider_not_supported",
            format!(
                "provider {:?} is not a stripe, mercadopago or pagarme-v5 provider",
                name.chars().take(64).collect::<String>()
            ),
        )),
        Some(p) => Ok(p.scheme),
    }
}

/// An amount per cycle: 1 to [`MAX_AMOUNT`] minor units.
pub fn check_amount(amount: i64) -> Result<i64, ManageError> {
    if (1..=MAX_AMOUNT).contains(&amount) {
        Ok(amount)
    } else {
        Err(invalid(
            Field::Amount,
            "amount_invalid",
            format!("amount must be an integer number of minor units from 1 to {MAX_AMOUNT}"),
        ))
    }
}

/// An anchor within ten years before and one year after `now`.
pub fn check_anchor(anchor: OffsetDateTime, now: OffsetDateTime) -> Result<(), ManageError> {
    if anchor < now - time::Duration::days(ANCHOR_MAX_PAST_DAYS)
        || anchor > now + time::Duration::days(ANCHOR_MAX_FUTURE_DAYS)
    {
        return Err(invalid(
            Field::Anchor,
            "anchor_invalid",
            "must be within ten years before and one year after now",
        ));
    }
    Ok(())
}

fn saved_method(scheme: Scheme, customer: &str, payment_method: &str) -> Result<(), ManageError> {
    crate::subscriptions::valid_saved_method(scheme, customer, payment_method).map_err(
        |(flag, what)| {
            let field = if flag == "--customer" {
                Field::Customer
            } else {
                Field::PaymentMethod
            };
            invalid(field, "parameter_invalid", what)
        },
    )
}

/// A new subscription as its caller received it (the CLI's flags, the API's body), before [`check_new`].
#[derive(Debug, Clone)]
pub struct Create<'a> {
    /// Configured provider name.
    pub provider: &'a str,
    /// The customer at the provider.
    pub customer: &'a str,
    /// The payment method saved at the provider.
    pub payment_method: &'a str,
    /// Minor units per cycle.
    pub amount: i64,
    /// ISO 4217, either case.
    pub currency: &'a str,
    /// How often.
    pub interval: Interval,
    /// Where its periods start (`None`: now).
    pub anchor: Option<OffsetDateTime>,
}

/// A new subscription whose every input was checked by [`check_new`]: the only way to [`create`] one.
#[derive(Debug, Clone)]
pub struct Checked {
    provider: String,
    customer: String,
    payment_method: String,
    amount: i64,
    currency: String,
    interval: Interval,
    anchor: OffsetDateTime,
}

/// Checks a new subscription, in this order: the provider can be charged ([`chargeable`]; `config` is its
/// configuration), the currency is one it accepts ([`hookline_payments::currency::check`]), the customer and the
/// saved method are shaped like the provider's ids ([`crate::valid_saved_method`]), the amount and the anchor are
/// within their bounds.
pub fn check_new(
    new: &Create<'_>,
    config: Option<&ProviderConfig>,
    now: OffsetDateTime,
) -> Result<Checked, ManageError> {
    let scheme = chargeable(new.provider, config)?;
    let currency = hookline_payments::currency::check(scheme, new.provider, new.currency.trim())
        .map_err(|e| {
            let code = match e {
                hookline_payments::currency::CurrencyError::Invalid => "currency_invalid",
                hookline_payments::currency::CurrencyError::Unsupported { .. } => {
                    "currency_unsupported"
                }
            };
            invalid(Field::Currency, code, e.to_string())
        })?;
    let (customer, payment_method) = (new.customer.trim(), new.payment_method.trim());
    saved_method(scheme, customer, payment_method)?;
    let amount = check_amount(new.amount)?;
    let anchor = new.anchor.unwrap_or(now);
    check_anchor(anchor, now)?;
    Ok(Checked {
        provider: new.provider.to_owned(),
        customer: customer.to_owned(),
        payment_method: payment_method.to_owned(),
        amount,
        currency,
        interval: new.interval,
        anchor,
    })
}

/// `subscription.created`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SubscriptionCreatedFact)]
pub struct CreatedFact<'a> {
    /// The subscription's public id (`sub_hl_…`), what the merchant API shows.
    subscription: &'a str,
    /// The subscription's internal id (the operator's CLI).
    subscription_id: String,
    provider: &'a str,
    /// Minor units per cycle.
    amount: i64,
    currency: &'a str,
    /// `month` or `year`.
    #[schema(value_type = String)]
    interval: &'static str,
    /// Where its periods start.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    anchor: OffsetDateTime,
    status: SubscriptionStatus,
}

/// `subscription.updated`: what changed, and the subscription as it is now.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SubscriptionUpdatedFact)]
pub struct UpdatedFact<'a> {
    /// The subscription's public id (`sub_hl_…`), what the merchant API shows.
    subscription: &'a str,
    /// The subscription's internal id (the operator's CLI).
    subscription_id: String,
    /// What changed: `payment_method`, `amount`, `cancel_at_period_end`.
    #[schema(value_type = Vec<String>)]
    changed: Vec<&'static str>,
    /// Minor units charged from the next charge on.
    amount: i64,
    /// The amount before, when it changed.
    previous_amount: Option<i64>,
    /// Canceled when its running period ends.
    cancel_at_period_end: bool,
    status: SubscriptionStatus,
}

/// `subscription.canceled`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[schema(as = SubscriptionCanceledFact)]
pub struct CanceledFact<'a> {
    /// The subscription's public id (`sub_hl_…`), what the merchant API shows.
    subscription: &'a str,
    /// The subscription's internal id (the operator's CLI).
    subscription_id: String,
    /// When it was canceled.
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    canceled_at: Option<OffsetDateTime>,
}

/// Creates a checked subscription for `client` (`None`: the operator's) and records `subscription.created` in the
/// same transaction, owned by that client.
pub async fn create(
    conn: &mut PgConnection,
    client: Option<&str>,
    new: &Checked,
    now: OffsetDateTime,
) -> Result<Subscription, ManageError> {
    let sub = subscriptions::add(
        conn,
        client,
        &NewSubscription {
            provider: &new.provider,
            customer: &new.customer,
            payment_method: &new.payment_method,
            amount: new.amount,
            currency: &new.currency,
            interval: new.interval,
            anchor: new.anchor,
        },
        now,
    )
    .await?;
    domain_events::record(
        conn,
        EventType::SubscriptionCreated,
        &sub.public_id,
        &CreatedFact {
            subscription: &sub.public_id,
            subscription_id: sub.id.to_string(),
            provider: &sub.provider,
            amount: sub.amount,
            currency: &sub.currency,
            interval: sub.interval.as_str(),
            anchor: sub.anchor,
            status: sub.status,
        },
        Owner::client(sub.client.as_deref()),
    )
    .await?;
    Ok(sub)
}

/// A change to a subscription, effective from its next charge (the run reads the row when it charges).
#[derive(Debug, Clone, Default)]
pub struct Change<'a> {
    /// A new saved payment method: the subscription is active again and its unpaid cycle retried
    /// ([`update_payment_method`]).
    pub payment_method: Option<&'a str>,
    /// The customer the new method is saved to, when given: it must be the subscription's own.
    pub customer: Option<&'a str>,
    /// A new amount per cycle.
    pub amount: Option<i64>,
}

/// Changes `sub` (locked by the caller: `subscriptions::lock`, `lock_for_client`), whose provider is configured
/// as `config`, and records `subscription.updated` naming what changed, in the caller's transaction. A canceled
/// subscription is [`ManageError::Canceled`]; a change that changes nothing records nothing. Returns the row as
/// it is now.
pub async fn update(
    conn: &mut PgConnection,
    sub: Subscription,
    config: Option<&ProviderConfig>,
    change: &Change<'_>,
) -> Result<Subscription, ManageError> {
    if sub.status == SubscriptionStatus::Canceled {
        return Err(ManageError::Canceled);
    }
    let amount = change.amount.map(check_amount).transpose()?;
    let payment_method = change.payment_method.map(str::trim);
    if let Some(customer) = change.customer.map(str::trim) {
        if customer != sub.customer {
            return Err(invalid(
                Field::Customer,
                "customer_mismatch",
                "must be the subscription's own customer: a subscription's customer does not change (create \
                 a new subscription)",
            ));
        }
    }
    if let Some(pm) = payment_method {
        let scheme = chargeable(&sub.provider, config)?;
        saved_method(scheme, &sub.customer, pm)?;
    }
    let mut changed = Vec::new();
    let mut now = sub.clone();
    if let Some(pm) = payment_method {
        now = update_payment_method(conn, sub.id, pm)
            .await?
            .ok_or(ManageError::Canceled)?;
        changed.push("payment_method");
    }
    let previous_amount = match amount {
        Some(amount) if amount != sub.amount => {
            now = subscriptions::set_amount(conn, sub.id, amount)
                .await?
                .ok_or(ManageError::Canceled)?;
            changed.push("amount");
            Some(sub.amount)
        }
        _ => None,
    };
    if !changed.is_empty() {
        record_updated(conn, &now, changed, previous_amount).await?;
    }
    Ok(now)
}

async fn record_updated(
    conn: &mut PgConnection,
    sub: &Subscription,
    changed: Vec<&'static str>,
    previous_amount: Option<i64>,
) -> Result<(), ManageError> {
    // One fact per change: the subject names this change (the subscription and the moment).
    let subject = format!(
        "{}/{}",
        sub.public_id,
        OffsetDateTime::now_utc().unix_timestamp_nanos()
    );
    domain_events::record(
        conn,
        EventType::SubscriptionUpdated,
        &subject,
        &UpdatedFact {
            subscription: &sub.public_id,
            subscription_id: sub.id.to_string(),
            changed,
            amount: sub.amount,
            previous_amount,
            cancel_at_period_end: sub.cancel_at_period_end,
            status: sub.status,
        },
        Owner::client(sub.client.as_deref()),
    )
    .await?;
    Ok(())
}

/// Cancels `sub` ([`cancel`]): now, recording `subscription.canceled`, or at its period's end, recording
/// `subscription.updated` (`changed: ["cancel_at_period_end"]`; the run cancels it then), in the caller's
/// transaction. A cancel that changes nothing (already canceled, or already set to end) records nothing. Returns
/// whether it changed and the row as it is now.
pub async fn cancel_subscription(
    conn: &mut PgConnection,
    sub: &Subscription,
    at_period_end: bool,
) -> Result<(bool, Subscription), ManageError> {
    let changed = cancel(conn, sub.id, at_period_end).await? == Some(true);
    let now = subscriptions::get(conn, sub.id)
        .await?
        .ok_or(ManageError::Database(sqlx::Error::RowNotFound))?;
    if changed {
        if at_period_end {
            record_updated(conn, &now, vec!["cancel_at_period_end"], None).await?;
        } else {
            record_canceled(conn, &now).await?;
        }
    }
    Ok((changed, now))
}

/// Records `subscription.canceled` for `sub` (canceled now, or by billing when its period ended with
/// `cancel_at_period_end`), owned by its client, in the caller's transaction. Once per subscription: the fact's
/// subject is the subscription.
pub async fn record_canceled(
    conn: &mut PgConnection,
    sub: &Subscription,
) -> Result<(), domain_events::RecordError> {
    domain_events::record(
        conn,
        EventType::SubscriptionCanceled,
        &sub.public_id,
        &CanceledFact {
            subscription: &sub.public_id,
            subscription_id: sub.id.to_string(),
            canceled_at: sub.canceled_at,
        },
        Owner::client(sub.client.as_deref()),
    )
    .await?;
    Ok(())
}
