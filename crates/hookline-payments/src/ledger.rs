//! The double-entry ledger: its accounts, the provider fee rule, and the only code that writes
//! `ledger_transactions` and `ledger_entries`.
//!
//! The payment state machine ([`crate::apply`]) decides *when* money moves (a capture, an applied refund, a lost
//! dispute) and describes it as a `Posting`; this module decides *how* it is recorded. Keeping the two tables'
//! SQL here means one place knows the posting key, the balanced-legs rule and the account vocabulary.
//!
//! Both tables are append-only and every posting is unique by `(provider, kind, reference)`: the constraint, not
//! code, prevents a second posting of the same fact, so `post` can be called again for a fact already posted
//! and changes nothing.

use sqlx::PgConnection;

/// Ledger account names (fixed vocabulary).
pub mod account {
    /// What the provider owes us: captured amount minus its fee.
    pub const RECEIVABLE: &str = "provider_receivable";
    /// Provider fees (expense).
    pub const FEES: &str = "provider_fees";
    /// Revenue (credit on capture, debited back by refunds).
    pub const REVENUE: &str = "revenue";
    /// Money lost to disputes (expense).
    pub const DISPUTE_LOSSES: &str = "dispute_losses";
}

/// The provider fee on `amount`: `amount × bps / 10000` rounded half up, plus the fixed part, never more than
/// the amount itself.
pub fn fee(amount: i64, fee_bps: i64, fee_fixed: i64) -> i64 {
    let variable = (i128::from(amount) * i128::from(fee_bps) + 5_000) / 10_000;
    (variable as i64).saturating_add(fee_fixed).min(amount)
}

/// What a ledger transaction records; part of its key. The spellings are the `ledger_transactions.kind` CHECK.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PostingKind {
    /// A captured payment (keyed by the provider's payment id).
    Payment,
    /// An applied refund (keyed by the provider's refund id).
    Refund,
    /// A lost dispute (keyed by the provider's dispute id).
    Dispute,
}

impl PostingKind {
    /// Database spelling.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            PostingKind::Payment => "payment",
            PostingKind::Refund => "refund",
            PostingKind::Dispute => "dispute",
        }
    }
}

/// One balanced ledger transaction, as the state machine describes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Posting<'a> {
    /// Configured provider name.
    pub(crate) provider: &'a str,
    /// What is posted.
    pub(crate) kind: PostingKind,
    /// The provider's id of what is posted (payment, refund or dispute id); with `provider` and `kind`, the
    /// posting's unique key.
    pub(crate) reference: &'a str,
    /// The payment the money belongs to.
    pub(crate) payment_id: i64,
    /// The stored event whose processing posts it.
    pub(crate) event_id: i64,
    /// Lower-case ISO 4217 code.
    pub(crate) currency: &'a str,
    /// `(account, signed amount)`: debit > 0, credit < 0; they must sum to zero. Zero-amount legs are allowed
    /// and not written.
    pub(crate) legs: &'a [(&'a str, i64)],
}

/// Posts one balanced ledger transaction, unless the constraint says this posting already exists. Zero-amount
/// legs (no fee configured) are omitted. Returns whether entries were written.
pub(crate) async fn post(
    tx: &mut PgConnection,
    posting: &Posting<'_>,
) -> Result<bool, sqlx::Error> {
    debug_assert_eq!(posting.legs.iter().map(|(_, a)| a).sum::<i64>(), 0);
    let (accounts, amounts): (Vec<&str>, Vec<i64>) = posting
        .legs
        .iter()
        .filter(|(_, a)| *a != 0)
        .copied()
        .unzip();
    // One statement: the posting (unless the constraint says it exists) and its entries.
    let entries = sqlx::query(
        "WITH posting AS (
             INSERT INTO ledger_transactions (provider, kind, reference, payment_id, event_id, currency)
             VALUES ($1, $2, $3, $4, $5, $6)
             ON CONFLICT ON CONSTRAINT ledger_transactions_posting_key DO NOTHING
             RETURNING id)
         INSERT INTO ledger_entries (transaction_id, account, amount)
         SELECT posting.id, l.account, l.amount
         FROM posting, unnest($7::text[], $8::bigint[]) AS l(account, amount)",
    )
    .bind(posting.provider)
    .bind(posting.kind.as_str())
    .bind(posting.reference)
    .bind(posting.payment_id)
    .bind(posting.event_id)
    .bind(posting.currency)
    .bind(&accounts)
    .bind(&amounts)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(entries > 0)
}

/// Posts several balanced ledger transactions in ONE statement (the set-based worker path); each is skipped
/// when the constraint says it exists, exactly like [`post`]. Returns how many entries were written.
pub(crate) async fn post_many(
    tx: &mut PgConnection,
    postings: &[Posting<'_>],
) -> Result<u64, sqlx::Error> {
    if postings.is_empty() {
        return Ok(0);
    }
    let mut providers = Vec::with_capacity(postings.len());
    let mut kinds = Vec::with_capacity(postings.len());
    let mut references = Vec::with_capacity(postings.len());
    let mut payment_ids = Vec::with_capacity(postings.len());
    let mut event_ids = Vec::with_capacity(postings.len());
    let mut currencies = Vec::with_capacity(postings.len());
    let (mut leg_ord, mut leg_account, mut leg_amount) = (Vec::new(), Vec::new(), Vec::new());
    for (i, p) in postings.iter().enumerate() {
        debug_assert_eq!(p.legs.iter().map(|(_, a)| a).sum::<i64>(), 0);
        providers.push(p.provider);
        kinds.push(p.kind.as_str());
        references.push(p.reference);
        payment_ids.push(p.payment_id);
        event_ids.push(p.event_id);
        currencies.push(p.currency);
        for (account, amount) in p.legs.iter().filter(|(_, a)| *a != 0) {
            leg_ord.push(i as i64 + 1);
            leg_account.push(*account);
            leg_amount.push(*amount);
        }
    }
    let entries = sqlx::query(
        "WITH input AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::text[])
                      WITH ORDINALITY AS t(provider, kind, reference, payment_id, event_id, currency, ord)),
         posting AS (
             INSERT INTO ledger_transactions (provider, kind, reference, payment_id, event_id, currency)
             SELECT provider, kind, reference, payment_id, event_id, currency FROM input ORDER BY ord
             ON CONFLICT ON CONSTRAINT ledger_transactions_posting_key DO NOTHING
             RETURNING id, provider, kind, reference)
         INSERT INTO ledger_entries (transaction_id, account, amount)
         SELECT posting.id, l.account, l.amount
           FROM posting
           JOIN input i ON i.provider = posting.provider AND i.kind = posting.kind AND i.reference = posting.reference
           JOIN unnest($7::bigint[], $8::text[], $9::bigint[]) AS l(ord, account, amount) ON l.ord = i.ord",
    )
    .bind(&providers)
    .bind(&kinds)
    .bind(&references)
    .bind(&payment_ids)
    .bind(&event_ids)
    .bind(&currencies)
    .bind(&leg_ord)
    .bind(&leg_account)
    .bind(&leg_amount)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fee_rounds_half_up_adds_the_fixed_part_and_never_exceeds_the_amount() {
        // 1000 × 399 / 10000 = 39.9 → 40, + 39.
        assert_eq!(fee(1000, 399, 39), 79);
        // 50 × 100 / 10000 = 0.5 → 1 (half up); 49 → 0.49 → 0.
        assert_eq!(fee(50, 100, 0), 1);
        assert_eq!(fee(49, 100, 0), 0);
        // The fixed part alone can exceed a tiny amount: capped at the amount.
        assert_eq!(fee(10, 399, 39), 10);
        // No fee configured.
        assert_eq!(fee(1000, 0, 0), 0);
        // No overflow at the largest accepted amount.
        let max = crate::normalize::MAX_AMOUNT;
        assert_eq!(fee(max, 10_000, 0), max);
    }
}
