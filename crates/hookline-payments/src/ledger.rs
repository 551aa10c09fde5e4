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

/// One balanced ledger transaction, as the state machine describes it. Built only by its constructors, one
/// per kind ([`Posting::payment`], [`Posting::refund`], [`Posting::dispute_loss`]): the legs of each kind are
/// written once, here, and balance by construction.
#[derive(Debug, Clone)]
pub(crate) struct Posting<'a> {
    /// Configured provider name.
    provider: &'a str,
    /// What is posted.
    kind: PostingKind,
    /// The provider's id of what is posted (payment, refund or dispute id); with `provider` and `kind`, the
    /// posting's unique key.
    reference: &'a str,
    /// The payment the money belongs to.
    payment_id: i64,
    /// The stored event whose processing posts it.
    event_id: i64,
    /// Lower-case ISO 4217 code. Owned: a batch builds its postings from payments it is still moving.
    currency: String,
    /// The amount moved, minor units (> 0).
    amount: i64,
    /// The provider's fee on a payment (0 for the other kinds).
    fee: i64,
}

impl<'a> Posting<'a> {
    /// A captured payment of `amount` (the provider's payment id `reference`): the provider owes the amount
    /// minus its `fee`, the fee is an expense, the amount is revenue.
    pub(crate) fn payment(
        provider: &'a str,
        reference: &'a str,
        payment_id: i64,
        event_id: i64,
        currency: String,
        amount: i64,
        fee: i64,
    ) -> Posting<'a> {
        Posting {
            provider,
            kind: PostingKind::Payment,
            reference,
            payment_id,
            event_id,
            currency,
            amount,
            fee,
        }
    }

    /// An applied refund of `amount` (the provider's refund id `reference`): revenue is debited back and the
    /// provider owes that much less.
    pub(crate) fn refund(
        provider: &'a str,
        reference: &'a str,
        payment_id: i64,
        event_id: i64,
        currency: String,
        amount: i64,
    ) -> Posting<'a> {
        Posting {
            provider,
            kind: PostingKind::Refund,
            reference,
            payment_id,
            event_id,
            currency,
            amount,
            fee: 0,
        }
    }

    /// A lost dispute of `amount` (the provider's dispute id `reference`): the loss is an expense and the
    /// provider owes that much less.
    pub(crate) fn dispute_loss(
        provider: &'a str,
        reference: &'a str,
        payment_id: i64,
        event_id: i64,
        currency: String,
        amount: i64,
    ) -> Posting<'a> {
        Posting {
            provider,
            kind: PostingKind::Dispute,
            reference,
            payment_id,
            event_id,
            currency,
            amount,
            fee: 0,
        }
    }

    /// `(account, signed amount)`: debit > 0, credit < 0, summing to zero. Zero-amount legs (no fee
    /// configured) are left out: they are not written.
    fn legs(&self) -> Vec<(&'static str, i64)> {
        let legs = match self.kind {
            PostingKind::Payment => vec![
                (account::RECEIVABLE, self.amount - self.fee),
                (account::FEES, self.fee),
                (account::REVENUE, -self.amount),
            ],
            PostingKind::Refund => vec![
                (account::REVENUE, self.amount),
                (account::RECEIVABLE, -self.amount),
            ],
            PostingKind::Dispute => vec![
                (account::DISPUTE_LOSSES, self.amount),
                (account::RECEIVABLE, -self.amount),
            ],
        };
        legs.into_iter().filter(|(_, a)| *a != 0).collect()
    }
}

/// Posts one balanced ledger transaction, unless the constraint says this posting already exists. Returns
/// whether entries were written. It is [`post_many`] with one posting: one statement owns the posting key.
pub(crate) async fn post(
    tx: &mut PgConnection,
    posting: &Posting<'_>,
) -> Result<bool, sqlx::Error> {
    Ok(post_many(tx, std::slice::from_ref(posting)).await? > 0)
}

/// Posts several balanced ledger transactions in ONE statement (the set-based worker path; [`post`] is this
/// with one posting); each is skipped when the constraint says it exists. Returns how many entries were
/// written.
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
        let legs = p.legs();
        debug_assert_eq!(legs.iter().map(|(_, a)| a).sum::<i64>(), 0);
        providers.push(p.provider);
        kinds.push(p.kind.as_str());
        references.push(p.reference);
        payment_ids.push(p.payment_id);
        event_ids.push(p.event_id);
        currencies.push(p.currency.as_str());
        for (account, amount) in legs {
            leg_ord.push(i as i64 + 1);
            leg_account.push(account);
            leg_amount.push(amount);
        }
    }
    // Checked against the schema at compile time (`.sqlx/`, docs/development.md "Checked SQL").
    let entries = sqlx::query!(
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
        &providers as &[&str],
        &kinds as &[&str],
        &references as &[&str],
        &payment_ids,
        &event_ids,
        &currencies as &[&str],
        &leg_ord,
        &leg_account as &[&str],
        &leg_amount,
    )
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

    #[test]
    fn each_kind_of_posting_balances_and_omits_zero_legs() {
        let legs = |p: Posting<'_>| p.legs();
        assert_eq!(
            legs(Posting::payment("s", "pi_1", 1, 2, "brl".into(), 1000, 79)),
            [
                (account::RECEIVABLE, 921),
                (account::FEES, 79),
                (account::REVENUE, -1000)
            ]
        );
        // No fee configured: the fee leg is not written.
        assert_eq!(
            legs(Posting::payment("s", "pi_1", 1, 2, "brl".into(), 1000, 0)),
            [(account::RECEIVABLE, 1000), (account::REVENUE, -1000)]
        );
        assert_eq!(
            legs(Posting::refund("s", "re_1", 1, 2, "brl".into(), 300)),
            [(account::REVENUE, 300), (account::RECEIVABLE, -300)]
        );
        assert_eq!(
            legs(Posting::dispute_loss("s", "dp_1", 1, 2, "brl".into(), 500)),
            [(account::DISPUTE_LOSSES, 500), (account::RECEIVABLE, -500)]
        );
    }
}
