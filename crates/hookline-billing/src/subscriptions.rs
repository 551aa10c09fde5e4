//! `subscriptions`: what the merchant bills through hookline every cycle. This module owns the table's SQL.
//!
//! A subscription is charged off-session with the method saved at its provider (issue 28): `customer` is the
//! customer AT THE PROVIDER and `payment_method` the saved method ([`charge_params`]). Stripe: `cus_…` + `pm_…`,
//! sent as `{payment_method, customer, off_session: true}`. Mercado Pago: the customer and the saved card's id,
//! charged as a merchant-initiated payment ("Pagamentos automáticos", card on file): the dispatcher mints the card
//! token from the card id itself ([`hookline_payments::params::MercadoPagoParams`]). Pagar.me v5: the customer `cus_…` and
//! the card saved to it `card_…`, charged as an order with `customer_id` + `credit_card.card_id`
//! ([`hookline_payments::params::PagarmeParams`]).
//!
//! Its status follows its cycles ([`crate::claims`]): `active`; `past_due` when every attempt of a cycle was
//! declined; `needs_payment_method` when the gateway called the method unusable. Both park it: the run charges
//! no new cycle until [`update_payment_method`] gives it a method again. `canceled` ends it (immediately, or at
//! the end of the running period with `cancel_at_period_end`).

use hookline_signature::Scheme;
use sqlx::PgConnection;
use time::OffsetDateTime;

use crate::period::Interval;
use hookline_payments::model::UnknownStatus;
use hookline_payments::params::{
    is_pagarme_id, MercadoPagoParams, PagarmeParams, PaymentParams, StripeParams,
    STRIPE_CUSTOMER_PREFIXES,
};

/// Where a subscription stands (the column's CHECK lists the same values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubscriptionStatus {
    /// Charged every cycle.
    Active,
    /// Every attempt of a cycle was declined: parked until its payment method is updated.
    PastDue,
    /// The gateway called its payment method unusable: parked until it is updated.
    NeedsPaymentMethod,
    /// Ended: never charged again.
    Canceled,
}

impl SubscriptionStatus {
    /// Every status.
    pub const ALL: [SubscriptionStatus; 4] = [
        SubscriptionStatus::Active,
        SubscriptionStatus::PastDue,
        SubscriptionStatus::NeedsPaymentMethod,
        SubscriptionStatus::Canceled,
    ];

    /// The database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionStatus::Active => "active",
            SubscriptionStatus::PastDue => "past_due",
            SubscriptionStatus::NeedsPaymentMethod => "needs_payment_method",
            SubscriptionStatus::Canceled => "canceled",
        }
    }

    /// Parses the database spelling; anything else is refused.
    pub fn parse(s: &str) -> Result<SubscriptionStatus, UnknownStatus> {
        Ok(match s {
            "active" => SubscriptionStatus::Active,
            "past_due" => SubscriptionStatus::PastDue,
            "needs_payment_method" => SubscriptionStatus::NeedsPaymentMethod,
            "canceled" => SubscriptionStatus::Canceled,
            _ => return Err(UnknownStatus::new("subscription", s)),
        })
    }

    /// Parked: no new cycle is charged until the payment method is updated.
    pub fn is_parked(self) -> bool {
        matches!(
            self,
            SubscriptionStatus::PastDue | SubscriptionStatus::NeedsPaymentMethod
        )
    }
}

hookline_payments::model::text_status!(SubscriptionStatus);
hookline_payments::string_enum_schema!(SubscriptionStatus, SubscriptionStatus::ALL);

/// A subscription.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct Subscription {
    /// Its id.
    pub id: i64,
    /// What the merchant API shows (`sub_hl_…`).
    pub public_id: String,
    /// The merchant API client that owns it (`None`: the operator's).
    pub client: Option<String>,
    /// Configured provider name.
    pub provider: String,
    /// The customer at the provider (Stripe `cus_…`, Mercado Pago's customer id); a merchant's reference in
    /// subscriptions of older versions.
    pub customer: String,
    /// The payment method saved at the provider (Stripe `pm_…`, Mercado Pago's card id); `None` in
    /// subscriptions of older versions (their charges need attention).
    pub payment_method: Option<String>,
    /// Minor units charged per cycle.
    pub amount: i64,
    /// Lower-case ISO 4217.
    pub currency: String,
    /// `month` or `year`.
    #[sqlx(try_from = "String")]
    pub interval: Interval,
    /// Periods start on its day (yearly: its month and day) at its time of day, UTC ([`crate::period`]).
    #[serde(with = "time::serde::rfc3339")]
    pub anchor: OffsetDateTime,
    /// Where it stands.
    pub status: SubscriptionStatus,
    /// Why it is past due or needs a payment method (the last decline).
    pub status_reason: Option<String>,
    /// Canceled when its running period ends: no new cycle is charged.
    pub cancel_at_period_end: bool,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it was canceled.
    #[serde(with = "time::serde::rfc3339::option")]
    pub canceled_at: Option<OffsetDateTime>,
    /// The first cycle billing has not decided yet (`YYYY-MM`): where the scheduler looks next.
    pub next_cycle: String,
    /// When `next_cycle`'s period starts: the subscription is due for the scheduler from then.
    #[serde(with = "time::serde::rfc3339")]
    pub next_period_at: OffsetDateTime,
}

impl TryFrom<String> for Interval {
    type Error = String;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

const COLUMNS: &str =
    "id, public_id, client, provider, customer, payment_method, amount, currency, interval, anchor, status, \
     status_reason, cancel_at_period_end, created_at, canceled_at, next_cycle, next_period_at";

/// What a new subscription charges, and with what.
#[derive(Debug, Clone)]
pub struct NewSubscription<'a> {
    /// Configured provider name.
    pub provider: &'a str,
    /// The customer at the provider ([`valid_saved_method`]).
    pub customer: &'a str,
    /// The payment method saved at the provider.
    pub payment_method: &'a str,
    /// Minor units charged per cycle.
    pub amount: i64,
    /// Lower-case ISO 4217.
    pub currency: &'a str,
    /// How often.
    pub interval: Interval,
    /// Where its periods start.
    pub anchor: OffsetDateTime,
}

/// Whether `customer` and `payment_method` are shaped like what `scheme` saves: Stripe `cus_…` and a
/// PaymentMethod (`pm_…`, or an older `card_…`/`src_…`); Mercado Pago a customer id (letters, digits, `-`, at
/// most 64) and a card id (digits, at most 32); Pagar.me v5 `cus_…` and `card_…` ([`is_pagarme_id`], the rule the
/// merchant API and the order builder apply). Returns which flag is wrong and why.
pub fn valid_saved_method(
    scheme: Scheme,
    customer: &str,
    payment_method: &str,
) -> Result<(), (&'static str, &'static str)> {
    match scheme {
        Scheme::Stripe => {
            if !hookline_payments::params::is_stripe_id(customer, STRIPE_CUSTOMER_PREFIXES) {
                return Err(("--customer", "a Stripe customer id (cus_…)"));
            }
            if !hookline_payments::params::is_stripe_id(
                payment_method,
                hookline_payments::params::STRIPE_PAYMENT_METHOD_PREFIXES,
            ) {
                return Err(("--payment-method", "a Stripe PaymentMethod id (pm_…)"));
            }
            Ok(())
        }
        Scheme::MercadoPago => {
            // The rules the merchant API and the dispatcher apply to the same ids (they go into URL paths).
            if !hookline_payments::params::is_mercadopago_customer_id(customer) {
                return Err((
                    "--customer",
                    "a Mercado Pago customer id (letters, digits and -, at most 64)",
                ));
            }
            if !hookline_payments::params::is_mercadopago_card_id(payment_method) {
                return Err((
                    "--payment-method",
                    "a Mercado Pago card id (digits, at most 32)",
                ));
            }
            Ok(())
        }
        Scheme::PagarmeV5 => {
            if !is_pagarme_id(customer, "cus_") {
                return Err(("--customer", "a Pagar.me customer id (cus_…)"));
            }
            if !is_pagarme_id(payment_method, "card_") {
                return Err((
                    "--payment-method",
                    "a Pagar.me card id saved to the customer (card_…)",
                ));
            }
            Ok(())
        }
        _ => Err(("--provider", "a stripe, mercadopago or pagarme-v5 provider")),
    }
}

/// What the gateway needs to charge `sub` off-session (see the module documentation): Stripe
/// `{payment_method, customer, off_session: true}`; Mercado Pago the saved card `{card_id, customer_id,
/// installments: 1}` (the dispatcher mints its token); Pagar.me v5 an order paid by the saved card
/// `{payment_method: credit_card, card_id, customer_id, installments: 1}`. Whatever is missing stays missing, and the dispatcher
/// names it; `None` for any other scheme.
pub fn charge_params(scheme: Scheme, sub: &Subscription) -> Option<PaymentParams> {
    match scheme {
        Scheme::Stripe => Some(PaymentParams::Stripe(StripeParams {
            payment_method: sub.payment_method.clone(),
            // An older subscription's customer is the merchant's reference, not a Stripe customer: not sent.
            customer: hookline_payments::params::is_stripe_id(
                &sub.customer,
                STRIPE_CUSTOMER_PREFIXES,
            )
            .then(|| sub.customer.clone()),
            off_session: true,
            return_url: None,
        })),
        Scheme::MercadoPago => Some(PaymentParams::MercadoPago(MercadoPagoParams {
            card_id: sub
                .payment_method
                .clone()
                .filter(|id| hookline_payments::params::is_mercadopago_card_id(id)),
            customer_id: hookline_payments::params::is_mercadopago_customer_id(&sub.customer)
                .then(|| sub.customer.clone()),
            installments: Some(1),
            ..MercadoPagoParams::default()
        })),
        // A malformed id stays missing rather than being sent: the dispatcher names it.
        Scheme::PagarmeV5 => Some(PaymentParams::Pagarme(PagarmeParams {
            payment_method: Some("credit_card".to_owned()),
            card_id: sub
                .payment_method
                .clone()
                .filter(|id| is_pagarme_id(id, "card_")),
            customer_id: is_pagarme_id(&sub.customer, "cus_").then(|| sub.customer.clone()),
            installments: Some(1),
            ..PagarmeParams::default()
        })),
        _ => None,
    }
}

/// Creates an active subscription owned by `client` (`None`: the operator's), created at `now`; returns it. Its
/// first cycle ([`crate::period::first_cycle`]) is where the scheduler starts.
pub async fn add(
    conn: &mut PgConnection,
    client: Option<&str>,
    new: &NewSubscription<'_>,
    now: OffsetDateTime,
) -> Result<Subscription, sqlx::Error> {
    let first = crate::period::first_cycle(new.anchor, new.interval, now);
    let starts = crate::period::period_start(new.anchor, new.interval, first).unwrap_or(new.anchor);
    sqlx::query_as(&format!(
        "INSERT INTO subscriptions (client, provider, customer, payment_method, amount, currency, interval, anchor,
                                    created_at, next_cycle, next_period_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
         RETURNING {COLUMNS}"
    ))
    .bind(client)
    .bind(new.provider)
    .bind(new.customer)
    .bind(new.payment_method)
    .bind(new.amount)
    .bind(new.currency)
    .bind(new.interval.as_str())
    .bind(new.anchor)
    .bind(now)
    .bind(first.to_string())
    .bind(starts)
    .fetch_one(conn)
    .await
}

/// The next active subscription whose next period has started at `now`, after `after` in the scheduler's order
/// (`next_period_at`, `id`), locked (`FOR UPDATE SKIP LOCKED`: another worker's round, a `billing run` or a
/// completing charge holding it is skipped, not waited for — it is decided there, or in the next round). The
/// partial index `subscriptions_due_idx` serves it.
pub async fn lock_next_due(
    conn: &mut PgConnection,
    now: OffsetDateTime,
    after: (OffsetDateTime, i64),
) -> Result<Option<Subscription>, sqlx::Error> {
    // `status = 'active'` stays literal: the partial index's predicate.
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions
          WHERE status = 'active' AND next_period_at <= $1 AND (next_period_at, id) > ($2, $3)
          ORDER BY next_period_at, id LIMIT 1
            FOR UPDATE SKIP LOCKED"
    ))
    .bind(now)
    .bind(after.0)
    .bind(after.1)
    .fetch_optional(conn)
    .await
}

/// Moves a subscription's scheduler pointer forward to `cycle` (its period starting at `starts`); never back: a
/// pointer already past it stays (`billing run --cycle` of an older cycle, a concurrent decision). A pointer on
/// `cycle` itself gets `starts` again, so a `next_period_at` that disagrees with its cycle (a row edited by hand)
/// is set right instead of being picked by every round. Cycles (`YYYY-MM`) compare as text.
pub async fn advance(
    conn: &mut PgConnection,
    id: i64,
    cycle: crate::period::Cycle,
    starts: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE subscriptions SET next_cycle = $2, next_period_at = $3
          WHERE id = $1 AND next_cycle <= $2",
    )
    .bind(id)
    .bind(cycle.to_string())
    .bind(starts)
    .execute(conn)
    .await?;
    Ok(())
}

/// Moves a subscription's scheduler pointer past `decided` — to `next`, whose period starts at `starts` — when
/// the pointer names `decided`: a cycle decided after the pointer (a `billing run` of the running period while the
/// workers were down) leaves the pointer on the older undecided cycle, which the scheduler then catches up.
pub async fn advance_past(
    conn: &mut PgConnection,
    id: i64,
    decided: crate::period::Cycle,
    next: crate::period::Cycle,
    starts: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE subscriptions SET next_cycle = $3, next_period_at = $4
          WHERE id = $1 AND next_cycle = $2",
    )
    .bind(id)
    .bind(decided.to_string())
    .bind(next.to_string())
    .bind(starts)
    .execute(conn)
    .await?;
    Ok(())
}

/// The due periods at `now` (active subscriptions whose next period has started) and the oldest one's start.
pub async fn due_periods(
    conn: &mut PgConnection,
    now: OffsetDateTime,
) -> Result<(i64, Option<OffsetDateTime>), sqlx::Error> {
    sqlx::query_as(
        "SELECT count(*), min(next_period_at) FROM subscriptions
          WHERE status = 'active' AND next_period_at <= $1",
    )
    .bind(now)
    .fetch_one(conn)
    .await
}

/// Every subscription, oldest first.
pub async fn list(conn: &mut PgConnection) -> Result<Vec<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM subscriptions ORDER BY id"))
        .fetch_all(conn)
        .await
}

/// The subscriptions a run looks at (not canceled), oldest first: id, anchor and interval (what their cycle
/// is computed from).
pub async fn billable_periods(
    conn: &mut PgConnection,
) -> Result<Vec<(i64, OffsetDateTime, Interval)>, sqlx::Error> {
    let rows: Vec<(i64, OffsetDateTime, String)> = sqlx::query_as(
        "SELECT id, anchor, interval FROM subscriptions WHERE status <> 'canceled' ORDER BY id",
    )
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|(id, anchor, interval)| {
            let interval = interval
                .parse()
                .map_err(|e: String| sqlx::Error::Decode(e.into()))?;
            Ok((id, anchor, interval))
        })
        .collect()
}

/// The first `limit` subscriptions in `statuses`, oldest first.
pub async fn with_status(
    conn: &mut PgConnection,
    statuses: &[SubscriptionStatus],
    limit: i64,
) -> Result<Vec<Subscription>, sqlx::Error> {
    let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions WHERE status = ANY($1) ORDER BY id LIMIT $2"
    ))
    .bind(&statuses)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Subscriptions not canceled whose provider is listed in `accepted` but whose currency is not one of that
/// provider's: rows of an older version, written before every path checked the currency. At most `limit` of
/// them, oldest first, and how many there are in all.
pub async fn with_currency_not_accepted(
    conn: &mut PgConnection,
    accepted: &hookline_payments::currency::ProviderCurrencies,
    limit: i64,
) -> Result<(i64, Vec<Subscription>), sqlx::Error> {
    const WRONG: &str = "status <> 'canceled' AND provider = ANY($1::text[])
        AND NOT EXISTS (SELECT 1 FROM unnest($1::text[], $2::text[]) AS a(provider, currency)
                         WHERE a.provider = subscriptions.provider AND a.currency = subscriptions.currency)";
    let (providers, currencies) = accepted.arrays();
    let total: i64 =
        sqlx::query_scalar(&format!("SELECT count(*) FROM subscriptions WHERE {WRONG}"))
            .bind(providers)
            .bind(currencies)
            .fetch_one(&mut *conn)
            .await?;
    let rows = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions WHERE {WRONG} ORDER BY id LIMIT $3"
    ))
    .bind(providers)
    .bind(currencies)
    .bind(limit)
    .fetch_all(&mut *conn)
    .await?;
    Ok((total, rows))
}

/// How many subscriptions are in each status.
pub async fn count_by_status(
    conn: &mut PgConnection,
) -> Result<Vec<(SubscriptionStatus, i64)>, sqlx::Error> {
    sqlx::query_as("SELECT status, count(*) FROM subscriptions GROUP BY status")
        .fetch_all(conn)
        .await
}

/// One subscription.
pub async fn get(conn: &mut PgConnection, id: i64) -> Result<Option<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// One subscription, locked (`FOR UPDATE`) until the caller's transaction ends: what a run decides for it (charge,
/// cancel at period end, park) is decided by one run at a time.
pub async fn lock(conn: &mut PgConnection, id: i64) -> Result<Option<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions WHERE id = $1 FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(conn)
    .await
}

/// The client's subscription `public_id` (`sub_hl_…`); `None` when there is none, or it is another client's or an
/// operator's (`client` NULL): the merchant API answers both the same (404).
pub async fn get_for_client(
    conn: &mut PgConnection,
    client: &str,
    public_id: &str,
) -> Result<Option<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions WHERE public_id = $1 AND client = $2"
    ))
    .bind(public_id)
    .bind(client)
    .fetch_optional(conn)
    .await
}

/// [`get_for_client`], locked (`FOR UPDATE`) until the caller's transaction ends: a change decides after the
/// billing run's decision about it (or before it), never beside it.
pub async fn lock_for_client(
    conn: &mut PgConnection,
    client: &str,
    public_id: &str,
) -> Result<Option<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions WHERE public_id = $1 AND client = $2 FOR UPDATE"
    ))
    .bind(public_id)
    .bind(client)
    .fetch_optional(conn)
    .await
}

/// Most subscriptions in one page of [`page_for_client`].
pub const MAX_PAGE: i64 = 100;

/// A page of a client's subscriptions, newest first.
#[derive(Debug)]
pub struct SubscriptionPage {
    /// The page.
    pub subscriptions: Vec<Subscription>,
    /// Whether older ones follow the last.
    pub has_more: bool,
}

/// Why a page was not read.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// The cursor is not one of the client's subscriptions.
    #[error("no such subscription")]
    UnknownCursor,
    /// The database failed.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

/// The client's subscriptions (only those in `status` when given), newest first, `limit` (1 to [`MAX_PAGE`]) at a
/// time, after the cursor `starting_after` (one of the client's `sub_hl_…`). Served by
/// `subscriptions_client_idx (client, id)`: the cursor is a bound on `id`, so a deep page starts at the cursor.
pub async fn page_for_client(
    conn: &mut PgConnection,
    client: &str,
    status: Option<SubscriptionStatus>,
    starting_after: Option<&str>,
    limit: i64,
) -> Result<SubscriptionPage, PageError> {
    let limit = limit.clamp(1, MAX_PAGE);
    let cursor: Option<i64> = match starting_after {
        None => None,
        Some(public_id) => Some(
            sqlx::query_scalar("SELECT id FROM subscriptions WHERE public_id = $1 AND client = $2")
                .bind(public_id)
                .bind(client)
                .fetch_optional(&mut *conn)
                .await?
                .ok_or(PageError::UnknownCursor)?,
        ),
    };
    let mut subscriptions: Vec<Subscription> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions
          WHERE client = $1 AND id < coalesce($2::bigint, 9223372036854775807)
            AND ($3::text IS NULL OR status = $3)
          ORDER BY id DESC LIMIT $4"
    ))
    .bind(client)
    .bind(cursor)
    .bind(status.map(SubscriptionStatus::as_str))
    .bind(limit + 1)
    .fetch_all(&mut *conn)
    .await?;
    let has_more = subscriptions.len() as i64 > limit;
    subscriptions.truncate(limit as usize);
    Ok(SubscriptionPage {
        subscriptions,
        has_more,
    })
}

/// Sets the amount a subscription charges from its next charge on (the run reads the row when it charges);
/// `None` when it does not exist or is canceled.
pub async fn set_amount(
    conn: &mut PgConnection,
    id: i64,
    amount: i64,
) -> Result<Option<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE subscriptions SET amount = $2, updated_at = now()
          WHERE id = $1 AND status <> 'canceled'
         RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(amount)
    .fetch_optional(conn)
    .await
}

/// Marks a subscription canceled now (`None`: it does not exist; `Some(false)`: it already was), or, with
/// `at_period_end`, to be canceled when its running period ends (`Some(false)`: already so, or canceled). The
/// table's half of [`crate::manage::cancel`].
pub async fn mark_canceled(
    conn: &mut PgConnection,
    id: i64,
    at_period_end: bool,
) -> Result<Option<bool>, sqlx::Error> {
    let changed = if at_period_end {
        sqlx::query(
            "UPDATE subscriptions SET cancel_at_period_end = true, updated_at = now()
              WHERE id = $1 AND status <> 'canceled' AND NOT cancel_at_period_end",
        )
    } else {
        sqlx::query(
            "UPDATE subscriptions SET status = 'canceled', canceled_at = now(), updated_at = now()
              WHERE id = $1 AND status <> 'canceled'",
        )
    }
    .bind(id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if changed > 0 {
        return Ok(Some(true));
    }
    let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM subscriptions WHERE id = $1")
        .bind(id)
        .fetch_optional(conn)
        .await?;
    Ok(exists.map(|_| false))
}

/// Sets a subscription's saved payment method and makes it `active` again; `None` when it does not exist or
/// is canceled. The table's half of [`crate::manage::update_payment_method`].
pub async fn set_payment_method(
    conn: &mut PgConnection,
    id: i64,
    payment_method: &str,
) -> Result<Option<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!(
        "UPDATE subscriptions
            SET payment_method = $2, status = 'active', status_reason = NULL, updated_at = now()
          WHERE id = $1 AND status <> 'canceled'
         RETURNING {COLUMNS}"
    ))
    .bind(id)
    .bind(payment_method)
    .fetch_optional(conn)
    .await
}

/// Moves a subscription to `status` with `reason` (the run's and the dunning's decisions), in the caller's
/// transaction. A canceled subscription stays canceled.
pub async fn set_status(
    conn: &mut PgConnection,
    id: i64,
    status: SubscriptionStatus,
    reason: Option<&str>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE subscriptions
            SET status = $2, status_reason = $3, updated_at = now(),
                canceled_at = CASE WHEN $2 = 'canceled' THEN now() ELSE canceled_at END
          WHERE id = $1 AND status <> 'canceled'",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(reason.map(|r| r.chars().take(1000).collect::<String>()))
    .execute(conn)
    .await?;
    Ok(())
}

/// A parked subscription whose cycles are all settled again (a past-due cycle paid through another channel) is
/// `active` again, in the caller's transaction.
pub async fn reactivate_if_clear(conn: &mut PgConnection, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE subscriptions SET status = 'active', status_reason = NULL, updated_at = now()
          WHERE id = $1 AND status IN ('past_due', 'needs_payment_method')
            AND NOT EXISTS (SELECT 1 FROM billing_claims
                             WHERE subscription_id = $1 AND status IN ('past_due', 'needs_payment_method'))",
    )
    .bind(id)
    .execute(conn)
    .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(customer: &str, payment_method: Option<&str>) -> Subscription {
        Subscription {
            id: 1,
            provider: "st".into(),
            customer: customer.into(),
            payment_method: payment_method.map(str::to_owned),
            amount: 1000,
            currency: "brl".into(),
            interval: Interval::Month,
            anchor: OffsetDateTime::UNIX_EPOCH,
            status: SubscriptionStatus::Active,
            status_reason: None,
            cancel_at_period_end: false,
            created_at: OffsetDateTime::UNIX_EPOCH,
            canceled_at: None,
            public_id: "sub_hl_1".into(),
            client: None,
            next_cycle: "2026-10".into(),
            next_period_at: OffsetDateTime::UNIX_EPOCH,
        }
    }

    #[test]
    fn stripe_subscriptions_are_charged_off_session_with_their_saved_method() {
        let params = charge_params(Scheme::Stripe, &sub("cus_1", Some("pm_card_visa")));
        assert_eq!(
            params,
            Some(PaymentParams::Stripe(StripeParams {
                payment_method: Some("pm_card_visa".into()),
                customer: Some("cus_1".into()),
                off_session: true,
                return_url: None,
            }))
        );
        assert_eq!(params.and_then(|p| p.missing_for_confirm()), None);
        // An older subscription: a merchant's reference, no saved method. Nothing invented; the dispatcher
        // names what is missing.
        let old = charge_params(Scheme::Stripe, &sub("cliente@example.com", None));
        assert_eq!(
            old.as_ref().and_then(PaymentParams::missing_for_confirm),
            Some("stripe.payment_method")
        );
        let no_customer = charge_params(Scheme::Stripe, &sub("cliente", Some("pm_1")));
        assert_eq!(
            no_customer
                .as_ref()
                .and_then(PaymentParams::missing_for_confirm),
            Some("stripe.customer")
        );
        // Mercado Pago: the saved card, its token minted by the dispatcher.
        let mp = charge_params(Scheme::MercadoPago, &sub("123-abc", Some("1518023392627")));
        assert_eq!(
            mp,
            Some(PaymentParams::MercadoPago(MercadoPagoParams {
                card_id: Some("1518023392627".into()),
                customer_id: Some("123-abc".into()),
                installments: Some(1),
                ..MercadoPagoParams::default()
            }))
        );
        assert_eq!(mp.and_then(|p| p.missing_for_confirm()), None);
        // Pagar.me v5: an order paid by the card saved to the customer.
        let pg = charge_params(Scheme::PagarmeV5, &sub("cus_Ab12", Some("card_xK8y")));
        assert_eq!(
            pg,
            Some(PaymentParams::Pagarme(PagarmeParams {
                payment_method: Some("credit_card".into()),
                card_id: Some("card_xK8y".into()),
                customer_id: Some("cus_Ab12".into()),
                installments: Some(1),
                ..PagarmeParams::default()
            }))
        );
        assert_eq!(pg.and_then(|p| p.missing_for_confirm()), None);
        let gone = charge_params(Scheme::PagarmeV5, &sub("cus_Ab12", Some("card_../x")));
        assert_eq!(
            gone.as_ref().and_then(PaymentParams::missing_for_confirm),
            Some("pagarme.card_id")
        );
    }

    #[test]
    fn saved_methods_are_shaped_like_the_providers_ids() {
        assert!(valid_saved_method(Scheme::Stripe, "cus_NffrFeUfNV2Hib", "pm_card_visa").is_ok());
        assert_eq!(
            valid_saved_method(Scheme::Stripe, "cliente@example.com", "pm_1").map_err(|e| e.0),
            Err("--customer")
        );
        assert_eq!(
            valid_saved_method(Scheme::Stripe, "cus_1", "cus_2").map_err(|e| e.0),
            Err("--payment-method")
        );
        assert!(valid_saved_method(
            Scheme::MercadoPago,
            "247711297-jxOV430go9fx2e",
            "1518023392627"
        )
        .is_ok());
        assert_eq!(
            valid_saved_method(Scheme::MercadoPago, "a b", "1").map_err(|e| e.0),
            Err("--customer")
        );
        assert_eq!(
            valid_saved_method(Scheme::MercadoPago, "c-1", "pm_1").map_err(|e| e.0),
            Err("--payment-method")
        );
        assert!(valid_saved_method(Scheme::PagarmeV5, "cus_Ab12", "card_xK8y").is_ok());
        assert_eq!(
            valid_saved_method(Scheme::PagarmeV5, "cus_a/b", "card_1").map_err(|e| e.0),
            Err("--customer")
        );
        assert_eq!(
            valid_saved_method(Scheme::PagarmeV5, "cus_1", "pm_card_visa").map_err(|e| e.0),
            Err("--payment-method")
        );
        assert!(valid_saved_method(Scheme::Pagarme, "cus_1", "card_1").is_err());
        assert!(valid_saved_method(Scheme::Github, "cus_1", "pm_1").is_err());
    }
}
