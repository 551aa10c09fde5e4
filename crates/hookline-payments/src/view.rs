//! Read-only views of the worker's money tables (`payments`, `payment_transitions`, `ledger_transactions`,
//! `ledger_entries`) for operators: the console's event detail, payments and balances pages.
//!
//! Every WRITE to these tables stays in hookline-worker (`payments::apply` and `payments::ledger`); the reads
//! live here because the console (its own process, `hookline console serve`) must not depend on the worker.
//! Nothing here takes a lock or writes.

use sqlx::PgExecutor;
use time::OffsetDateTime;

/// A payment as operators see it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Payment {
    /// `payments.id`.
    pub id: i64,
    /// Provider name.
    pub provider: String,
    /// The provider's payment id.
    pub provider_payment_id: String,
    /// Status.
    pub status: String,
    /// Minor units.
    pub amount: Option<i64>,
    /// ISO 4217, lower case.
    pub currency: Option<String>,
    /// Refunded so far.
    pub amount_refunded: i64,
    /// Last change.
    pub updated_at: OffsetDateTime,
}

/// The columns of a [`Payment`], for every query that reads one.
const PAYMENT_SELECT: &str = "SELECT id, provider, provider_payment_id, status, amount, currency,
                                     amount_refunded, updated_at FROM payments";

/// Payments, newest first, with `id < before` (keyset pagination).
pub async fn payments<'c>(
    conn: impl PgExecutor<'c>,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<Payment>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{PAYMENT_SELECT} WHERE id < coalesce($1, 9223372036854775807) ORDER BY id DESC LIMIT $2"
    ))
    .bind(before)
    .bind(limit)
    .fetch_all(conn)
    .await
}

/// Payment `id`, if it exists.
pub async fn payment<'c>(
    conn: impl PgExecutor<'c>,
    id: i64,
) -> Result<Option<Payment>, sqlx::Error> {
    sqlx::query_as(&format!("{PAYMENT_SELECT} WHERE id = $1"))
        .bind(id)
        .fetch_optional(conn)
        .await
}

/// The payments stored event `event_id` touched (a transition or a posting names it).
pub async fn payments_of_event<'c>(
    conn: impl PgExecutor<'c>,
    event_id: i64,
) -> Result<Vec<Payment>, sqlx::Error> {
    sqlx::query_as(&format!(
        "{PAYMENT_SELECT} WHERE id IN (
             SELECT payment_id FROM payment_transitions WHERE event_id = $1
             UNION SELECT payment_id FROM ledger_transactions WHERE event_id = $1)
         ORDER BY id"
    ))
    .bind(event_id)
    .fetch_all(conn)
    .await
}

/// One status change of a payment.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Transition {
    /// The payment.
    pub payment_id: i64,
    /// The stored event that caused it.
    pub event_id: i64,
    /// From.
    pub from_status: String,
    /// To.
    pub to_status: String,
    /// When.
    pub at: OffsetDateTime,
}

/// The transitions of `payment_ids`, in order.
pub async fn transitions<'c>(
    conn: impl PgExecutor<'c>,
    payment_ids: &[i64],
) -> Result<Vec<Transition>, sqlx::Error> {
    sqlx::query_as(
        "SELECT payment_id, event_id, from_status, to_status, at FROM payment_transitions
         WHERE payment_id = ANY($1) ORDER BY payment_id, id",
    )
    .bind(payment_ids)
    .fetch_all(conn)
    .await
}

/// One leg of a ledger posting.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Posting {
    /// `ledger_transactions.id`.
    pub transaction_id: i64,
    /// `payment`, `refund`, `dispute`.
    pub kind: String,
    /// The provider's payment / refund / dispute id.
    pub reference: String,
    /// The stored event whose processing posted it.
    pub event_id: i64,
    /// Account.
    pub account: String,
    /// Signed minor units (debit > 0).
    pub amount: i64,
    /// Currency.
    pub currency: String,
    /// When.
    pub created_at: OffsetDateTime,
}

/// The postings of `payment_ids` (every leg), in order.
pub async fn postings<'c>(
    conn: impl PgExecutor<'c>,
    payment_ids: &[i64],
) -> Result<Vec<Posting>, sqlx::Error> {
    sqlx::query_as(
        "SELECT t.id AS transaction_id, t.kind, t.reference, t.event_id, e.account, e.amount, t.currency,
                t.created_at
         FROM ledger_transactions t JOIN ledger_entries e ON e.transaction_id = t.id
         WHERE t.payment_id = ANY($1) ORDER BY t.id, e.account",
    )
    .bind(payment_ids)
    .fetch_all(conn)
    .await
}

/// The balance of one account in one currency.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Balance {
    /// Account.
    pub account: String,
    /// Currency.
    pub currency: String,
    /// Sum of its legs (debit > 0).
    pub balance: i64,
    /// Number of legs.
    pub entries: i64,
}

/// Every account's balance by currency (sums of the append-only ledger).
pub async fn balances<'c>(conn: impl PgExecutor<'c>) -> Result<Vec<Balance>, sqlx::Error> {
    sqlx::query_as(
        "SELECT e.account, t.currency, sum(e.amount)::bigint AS balance, count(*) AS entries
         FROM ledger_entries e JOIN ledger_transactions t ON t.id = e.transaction_id
         GROUP BY e.account, t.currency ORDER BY e.account, t.currency",
    )
    .fetch_all(conn)
    .await
}
