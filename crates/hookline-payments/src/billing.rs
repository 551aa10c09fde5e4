//! `subscriptions` and `billing_claims`: what the merchant bills through hookline every cycle, and the business
//! key of a billing run. This module owns the two tables' SQL.
//!
//! A billing run charges each active subscription **once per cycle**, however often it runs, in parallel or
//! after being killed midway: each subscription is billed in ONE transaction that creates the intent (and its
//! outbound charge request, [`crate::intents::create_intent`]) and then claims `(subscription_id, billing_cycle)`
//! with `INSERT … ON CONFLICT ON CONSTRAINT billing_claims_cycle_key DO NOTHING RETURNING`. When the claim
//! already existed nothing is returned and the transaction is rolled back, so the intent is not kept. A
//! concurrent run inserting the same key waits on the UNIQUE index until the first commits, then finds it.
//!
//! A subscription is charged off-session with the method saved at its provider (issue 28): `customer` is the
//! customer AT THE PROVIDER and `payment_method` the saved method ([`charge_params`]). Stripe: `cus_…` + `pm_…`,
//! sent as `{payment_method, customer, off_session: true}`. Mercado Pago: a saved card cannot be charged by the
//! merchant alone — its payments API takes a fresh single-use card `token`, made from the card id AND the
//! security code the customer types again (Mercado Pago does not store it) — so a Mercado Pago billing intent
//! carries no parameters and the dispatcher leaves it needing attention, naming what is missing, instead of
//! inventing a card.

use hookline_signature::Scheme;
use sqlx::{PgConnection, PgPool};
use time::OffsetDateTime;

use crate::intents::{self, NewIntent};
use crate::params::{PaymentParams, StripeParams, STRIPE_CUSTOMER_PREFIXES};

/// A subscription.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize)]
pub struct Subscription {
    /// Its id.
    pub id: i64,
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
    /// `active` or `canceled`.
    pub status: String,
    /// When it was created.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: OffsetDateTime,
    /// When it was canceled.
    #[serde(with = "time::serde::rfc3339::option")]
    pub canceled_at: Option<OffsetDateTime>,
}

const COLUMNS: &str =
    "id, provider, customer, payment_method, amount, currency, status, created_at, canceled_at";

/// Whether `cycle` is a billing cycle (`YYYY-MM`, month 01–12).
pub fn valid_cycle(cycle: &str) -> bool {
    let b = cycle.as_bytes();
    b.len() == 7
        && b[..4].iter().all(u8::is_ascii_digit)
        && b[4] == b'-'
        && matches!((b[5], b[6]), (b'0', b'1'..=b'9') | (b'1', b'0'..=b'2'))
}

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
}

/// Whether `customer` and `payment_method` are shaped like what `scheme` saves: Stripe `cus_…` and a
/// PaymentMethod (`pm_…`, or an older `card_…`/`src_…`); Mercado Pago a customer id (letters, digits, `-`, at
/// most 64) and a card id (digits, at most 32). Returns which flag is wrong and why.
pub fn valid_saved_method(
    scheme: Scheme,
    customer: &str,
    payment_method: &str,
) -> Result<(), (&'static str, &'static str)> {
    match scheme {
        Scheme::Stripe => {
            if !crate::params::is_stripe_id(customer, STRIPE_CUSTOMER_PREFIXES) {
                return Err(("--customer", "a Stripe customer id (cus_…)"));
            }
            if !crate::params::is_stripe_id(
                payment_method,
                crate::params::STRIPE_PAYMENT_METHOD_PREFIXES,
            ) {
                return Err(("--payment-method", "a Stripe PaymentMethod id (pm_…)"));
            }
            Ok(())
        }
        Scheme::MercadoPago => {
            let id = |s: &str, max: usize, ok: fn(u8) -> bool| {
                !s.is_empty() && s.len() <= max && s.bytes().all(ok)
            };
            if !id(customer, 64, |b| b.is_ascii_alphanumeric() || b == b'-') {
                return Err((
                    "--customer",
                    "a Mercado Pago customer id (letters, digits and -, at most 64)",
                ));
            }
            if !id(payment_method, 32, |b| b.is_ascii_digit()) {
                return Err((
                    "--payment-method",
                    "a Mercado Pago card id (digits, at most 32)",
                ));
            }
            Ok(())
        }
        _ => Err(("--provider", "a stripe or mercadopago provider")),
    }
}

/// What the gateway needs to charge `sub` off-session (see the module documentation): Stripe
/// `{payment_method, customer, off_session: true}` (whatever is missing stays missing, and the dispatcher
/// names it); `None` for Mercado Pago (a saved card needs a fresh token the merchant cannot make alone) and
/// for any other scheme.
pub fn charge_params(scheme: Scheme, sub: &Subscription) -> Option<PaymentParams> {
    match scheme {
        Scheme::Stripe => Some(PaymentParams::Stripe(StripeParams {
            payment_method: sub.payment_method.clone(),
            // An older subscription's customer is the merchant's reference, not a Stripe customer: not sent.
            customer: crate::params::is_stripe_id(&sub.customer, STRIPE_CUSTOMER_PREFIXES)
                .then(|| sub.customer.clone()),
            off_session: true,
            return_url: None,
        })),
        _ => None,
    }
}

/// Creates an active subscription; returns its id.
pub async fn add(conn: &mut PgConnection, new: &NewSubscription<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO subscriptions (provider, customer, payment_method, amount, currency)
         VALUES ($1, $2, $3, $4, $5)
         RETURNING id",
    )
    .bind(new.provider)
    .bind(new.customer)
    .bind(new.payment_method)
    .bind(new.amount)
    .bind(new.currency)
    .fetch_one(conn)
    .await
}

/// Every subscription, oldest first.
pub async fn list(conn: &mut PgConnection) -> Result<Vec<Subscription>, sqlx::Error> {
    sqlx::query_as(&format!("SELECT {COLUMNS} FROM subscriptions ORDER BY id"))
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

/// Cancels a subscription (later cycles do not charge it; claims already made stay). Returns `None` when it
/// does not exist, `Some(false)` when it was already canceled.
pub async fn cancel(conn: &mut PgConnection, id: i64) -> Result<Option<bool>, sqlx::Error> {
    let changed = sqlx::query(
        "UPDATE subscriptions SET status = 'canceled', canceled_at = now()
          WHERE id = $1 AND status = 'active'",
    )
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

/// What billing one subscription for one cycle did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Billed {
    /// This call claimed the cycle and created the intent (its public id).
    Charged(String),
    /// The cycle was already claimed (by an earlier or concurrent run): nothing created.
    AlreadyClaimed,
    /// The subscription is canceled (or gone): skipped.
    Canceled,
}

/// The claim of a cycle, if any: the intent's internal id.
pub async fn claim_of(
    conn: &mut PgConnection,
    subscription_id: i64,
    cycle: &str,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT intent_id FROM billing_claims WHERE subscription_id = $1 AND billing_cycle = $2",
    )
    .bind(subscription_id)
    .bind(cycle)
    .fetch_optional(conn)
    .await
}

/// Bills subscription `subscription_id` for `cycle` in ONE transaction (see the module documentation): charged
/// at most once per cycle, whoever else runs. `scheme_of` names the scheme of a configured provider (the
/// parameters of the charge depend on it; `None`: the charge carries none and needs attention).
pub async fn bill(
    pool: &PgPool,
    subscription_id: i64,
    cycle: &str,
    scheme_of: impl Fn(&str) -> Option<Scheme>,
) -> Result<Billed, sqlx::Error> {
    let mut tx = pool.begin().await?;
    // Read (and keep from being canceled under us) the subscription.
    let sub: Option<Subscription> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM subscriptions WHERE id = $1 FOR SHARE"
    ))
    .bind(subscription_id)
    .fetch_optional(&mut *tx)
    .await?;
    let Some(sub) = sub.filter(|s| s.status == "active") else {
        tx.rollback().await?;
        return Ok(Billed::Canceled);
    };
    // Cheap early answer for re-runs; the UNIQUE constraint below is what decides.
    if claim_of(&mut tx, sub.id, cycle).await?.is_some() {
        tx.rollback().await?;
        return Ok(Billed::AlreadyClaimed);
    }
    let description = format!("subscription {} {cycle}", sub.id);
    let params = scheme_of(&sub.provider).and_then(|scheme| charge_params(scheme, &sub));
    let intent = intents::create_intent(
        &mut tx,
        &NewIntent {
            provider: &sub.provider,
            amount: sub.amount,
            currency: &sub.currency,
            customer: Some(&sub.customer),
            description: Some(&description),
            order_reference: None,
            payment_params: params.as_ref(),
            confirm: true,
        },
    )
    .await?;
    let claimed: Option<i64> = sqlx::query_scalar(
        "INSERT INTO billing_claims (subscription_id, billing_cycle, intent_id) VALUES ($1, $2, $3)
         ON CONFLICT ON CONSTRAINT billing_claims_cycle_key DO NOTHING
         RETURNING subscription_id",
    )
    .bind(sub.id)
    .bind(cycle)
    .bind(intent.id)
    .fetch_optional(&mut *tx)
    .await?;
    if claimed.is_none() {
        // Someone claimed the cycle first: the intent (and its outbound request) must not exist.
        tx.rollback().await?;
        return Ok(Billed::AlreadyClaimed);
    }
    tx.commit().await?;
    Ok(Billed::Charged(intent.public_id))
}

/// What a dry run would do for one subscription.
pub async fn would_bill(
    conn: &mut PgConnection,
    subscription: &Subscription,
    cycle: &str,
) -> Result<Billed, sqlx::Error> {
    if subscription.status != "active" {
        return Ok(Billed::Canceled);
    }
    Ok(match claim_of(conn, subscription.id, cycle).await? {
        Some(_) => Billed::AlreadyClaimed,
        None => Billed::Charged(String::new()),
    })
}

/// The totals of a billing run.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct RunSummary {
    /// The cycle billed.
    pub cycle: String,
    /// Whether nothing was written.
    pub dry_run: bool,
    /// Subscriptions charged by this run (or that would be, dry).
    pub charged: u64,
    /// Subscriptions whose cycle was already claimed.
    pub already_claimed: u64,
    /// Canceled subscriptions skipped.
    pub canceled_skipped: u64,
    /// Subscriptions that could not be billed, with the reason (needs attention).
    pub errors: Vec<String>,
    /// Public ids of the intents created.
    pub intents: Vec<String>,
}

/// Bills every subscription for `cycle` (each in its own transaction, [`bill`]); `progress` is called after
/// each one with `(done, total)`. `scheme_of` names the scheme of a provider configured for charges;
/// subscriptions of any other provider are reported as errors.
pub async fn run_cycle(
    pool: &PgPool,
    cycle: &str,
    dry_run: bool,
    scheme_of: impl Fn(&str) -> Option<Scheme>,
    mut progress: impl FnMut(u64, u64),
) -> Result<RunSummary, sqlx::Error> {
    let subscriptions = {
        let mut conn = pool.acquire().await?;
        list(&mut conn).await?
    };
    let total = subscriptions.len() as u64;
    let mut summary = RunSummary {
        cycle: cycle.to_owned(),
        dry_run,
        ..RunSummary::default()
    };
    for (i, sub) in subscriptions.iter().enumerate() {
        let billed = if sub.status == "active" && scheme_of(&sub.provider).is_none() {
            Err(format!(
                "subscription {}: provider {} is not configured for charges",
                sub.id, sub.provider
            ))
        } else if dry_run {
            let mut conn = pool.acquire().await?;
            Ok(would_bill(&mut conn, sub, cycle).await?)
        } else {
            bill(pool, sub.id, cycle, &scheme_of)
                .await
                .map_err(|e| format!("subscription {}: {e}", sub.id))
        };
        match billed {
            Ok(Billed::Charged(id)) => {
                summary.charged += 1;
                if !id.is_empty() {
                    summary.intents.push(id);
                }
            }
            Ok(Billed::AlreadyClaimed) => summary.already_claimed += 1,
            Ok(Billed::Canceled) => summary.canceled_skipped += 1,
            Err(e) => summary.errors.push(e),
        }
        progress(i as u64 + 1, total);
    }
    Ok(summary)
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
            status: "active".into(),
            created_at: OffsetDateTime::UNIX_EPOCH,
            canceled_at: None,
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
        // Mercado Pago: a saved card needs a fresh token (card id + security code), not expressible here.
        assert_eq!(
            charge_params(Scheme::MercadoPago, &sub("123-abc", Some("1518023392627"))),
            None
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
        assert!(valid_saved_method(Scheme::Github, "cus_1", "pm_1").is_err());
    }

    #[test]
    fn cycles() {
        for ok in ["2026-01", "2026-09", "2026-10", "2026-12", "0001-05"] {
            assert!(valid_cycle(ok), "{ok}");
        }
        for bad in [
            "2026-00",
            "2026-13",
            "2026-1",
            "26-01",
            "2026/01",
            "2026-01-01",
            "",
            "abcd-01",
        ] {
            assert!(!valid_cycle(bad), "{bad}");
        }
    }
}
