//! Reconciliation: what the provider says happened vs what we stored. Owns `reconcile_runs`.
//!
//! Webhooks are at least once only while the provider keeps retrying; an endpoint that was down longer than the
//! provider's retry horizon, or a provider that gave up, leaves events we never received. Reconciliation reads
//! the provider's own record through its API and stores whatever is missing through the SAME storage path as
//! the edge (`events::insert_reconciled`: same statement, same UNIQUE key, so a webhook that arrives later is a
//! duplicate, and a second reconciliation stores nothing), marked `source = 'reconcile'`. The relay publishes
//! those rows and the worker applies them under the usual marker-first rules, so nothing is applied twice.
//!
//! - **Stripe**: `GET /v1/events` over the window (`created[gte]`/`created[lte]`, `starting_after`): every event
//!   we do not have is stored as received from the API; a payment whose stored events report a further status
//!   than ours (events stored but not applied: pending or dead-lettered) is reported as mismatched.
//! - **Mercado Pago**: `GET /v1/payments/search` over the window (by `date_last_updated`): a payment whose state
//!   differs from ours (unknown, lower status, other refunded amount, a dispute hookline does not know or holds
//!   at an earlier status: `in_mediation` open, `charged_back` lost) gets a notification stored with the key
//!   `mp:{id}:reconcile:{date_last_updated}` — the worker fetches the payment and applies it, as for a webhook.
//!
//! Disputes are part of a payment's state: a chargeback whose webhook was lost is recovered like a refund whose
//! webhook was lost — Stripe's `charge.dispute.*` events are in its Events list; Mercado Pago's and Pagar.me's
//! are read off the payment or charge — and applied by the worker through the same state machine, ledger posting
//! and `dispute.*` facts as the webhook, once (the dispute's UNIQUE key and its forward-only status).
//!
//! - **Pagar.me v5**: `GET /core/v5/charges` created in the window: a charge whose state differs from ours (its
//!   chargeback included: `chargedback` open or lost, `paid` again after an open one: won) gets a
//!   notification stored with the key `pgv5:{charge}:reconcile:{updated_at}` — the worker reads the charge and
//!   applies it, as for a webhook (Pagar.me's webhooks are not signed: both paths apply only what the API says).
//!
//! The API calls go through the provider's one client ([`crate::gateway::ApiClient`], shared with the dispatcher
//! and the worker's fetch). What is listed and how an object becomes its notification is each provider's gateway
//! file ([`Api::list_payments`]); the loop that compares and stores is written once here (`Ctx::payments`),
//! beside Stripe's Events loop.
//!
//! Runs are audited in `reconcile_runs` with a cursor advanced after each stored page: `--resume RUN`
//! continues an interrupted run. API calls are rate-limited.

use std::time::Duration;

use anyhow::Context;
use hookline_core::events::{self, OwnedEvent};
use hookline_core::ProviderConfig;
use serde::Serialize;
use sqlx::PgPool;
use time::OffsetDateTime;

use crate::gateway::{unavailable, Api, ApiClient, Window};
use hookline_payments::apply::{dispute_status, payment_state};
use hookline_payments::model::{DisputeStatus, PaymentFact, PaymentStatus};
use hookline_payments::normalize::normalize;

/// Settings of one run.
#[derive(Debug, Clone)]
pub struct Options {
    /// Window start.
    pub since: OffsetDateTime,
    /// Window end.
    pub until: OffsetDateTime,
    /// Report only; store nothing.
    pub dry_run: bool,
    /// API requests per second at most (0 = unlimited).
    pub rate: u32,
    /// Who runs it (audit).
    pub operator: String,
}

/// What a run found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// `reconcile_runs.id`.
    pub run_id: i64,
    /// Provider name.
    pub provider: String,
    /// Events or payments read from the API.
    pub seen: u64,
    /// Already stored and consistent.
    pub present: u64,
    /// Unknown to us (Stripe events never received; Mercado Pago payments never notified).
    pub missing: u64,
    /// Known but in another state than the provider says (Mercado Pago).
    pub mismatched: u64,
    /// Rows stored by this run (0 in a dry run).
    pub stored: u64,
    /// Provider ids that need an operator (could not be stored or compared), with the reason.
    pub attention: Vec<String>,
    /// Whether it was a dry run.
    pub dry_run: bool,
}

impl Report {
    /// Exit-code meaning: everything matched or was repaired.
    pub fn is_clean(&self) -> bool {
        self.attention.is_empty() && (!self.dry_run || self.missing + self.mismatched == 0)
    }
}

/// Whether this provider can be reconciled (scheme with an implementation and `api_base` configured).
pub fn supported(provider: &ProviderConfig) -> Result<ApiClient, String> {
    if Api::of(provider.scheme).is_none() {
        return Err(format!(
            "provider {}: reconciliation supports the stripe, mercadopago and pagarme-v5 schemes, not {}",
            provider.name,
            provider.scheme.as_str()
        ));
    }
    let base = provider.api_base.clone().ok_or_else(|| {
        format!(
            "provider {}: providers.{}.api_base is not configured",
            provider.name, provider.name
        )
    })?;
    Ok(ApiClient::new(
        &provider.name,
        base,
        provider.api_token.clone(),
    ))
}

/// Starts a run (or resumes `resume`) and reconciles the window; `progress` is called with each item seen.
pub async fn run(
    pool: &PgPool,
    provider: &ProviderConfig,
    opts: &Options,
    resume: Option<i64>,
    progress: &(dyn Fn(u64) + Sync),
) -> anyhow::Result<Report> {
    let api = supported(provider).map_err(anyhow::Error::msg)?;
    let mut opts = opts.clone();
    let mut report = Report {
        provider: provider.name.clone(),
        ..Report::default()
    };
    let (run_id, cursor) = match resume {
        Some(id) => {
            let saved: Option<SavedRun> = sqlx::query_as(
                "SELECT cursor, since, until, dry_run, seen, present, missing, mismatched, stored
                 FROM reconcile_runs WHERE id = $1 AND provider = $2 AND finished_at IS NULL",
            )
            .bind(id)
            .bind(&provider.name)
            .fetch_optional(pool)
            .await
            .context("read the run to resume")?;
            let saved = saved.with_context(|| {
                format!(
                    "no unfinished reconcile run {id} of provider {}",
                    provider.name
                )
            })?;
            // The run's own window, mode and counts so far, not today's defaults.
            (opts.since, opts.until, opts.dry_run) = (saved.since, saved.until, saved.dry_run);
            let count = |n: i64| n.max(0) as u64;
            report.seen = count(saved.seen);
            report.present = count(saved.present);
            report.missing = count(saved.missing);
            report.mismatched = count(saved.mismatched);
            report.stored = count(saved.stored);
            (id, saved.cursor)
        }
        None => {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO reconcile_runs (provider, operator, since, until, dry_run)
                 VALUES ($1, $2, $3, $4, $5) RETURNING id",
            )
            .bind(&provider.name)
            .bind(&opts.operator)
            .bind(opts.since)
            .bind(opts.until)
            .bind(opts.dry_run)
            .fetch_one(pool)
            .await
            .context("write the audit row")?;
            (id, None)
        }
    };
    report.run_id = run_id;
    report.dry_run = opts.dry_run;
    let mut ctx = Ctx {
        pool,
        provider,
        api,
        opts: &opts,
        report,
        pace: Pace::new(opts.rate),
        progress,
    };
    match Api::of(provider.scheme) {
        Some(api) if !api.reconciles_events() => ctx.payments(api, cursor).await?,
        _ => ctx.events(cursor).await?,
    }
    let report = ctx.report;
    save(pool, &report, None, true).await?;
    Ok(report)
}

/// An unfinished run as stored in `reconcile_runs`.
#[derive(sqlx::FromRow)]
struct SavedRun {
    cursor: Option<String>,
    since: OffsetDateTime,
    until: OffsetDateTime,
    dry_run: bool,
    seen: i64,
    present: i64,
    missing: i64,
    mismatched: i64,
    stored: i64,
}

/// Spaces API requests `1/rate` seconds apart.
struct Pace {
    every: Option<Duration>,
    next: tokio::time::Instant,
}

impl Pace {
    fn new(rate: u32) -> Pace {
        Pace {
            every: (rate > 0).then(|| Duration::from_secs_f64(1.0 / f64::from(rate))),
            next: tokio::time::Instant::now(),
        }
    }

    async fn wait(&mut self) {
        if let Some(every) = self.every {
            tokio::time::sleep_until(self.next).await;
            self.next = tokio::time::Instant::now() + every;
        }
    }
}

async fn save(
    pool: &PgPool,
    r: &Report,
    cursor: Option<&str>,
    finished: bool,
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE reconcile_runs SET seen = $2, present = $3, missing = $4, mismatched = $5, stored = $6,
                cursor = coalesce($7, cursor), updated_at = now(),
                finished_at = CASE WHEN $8 THEN now() ELSE finished_at END
         WHERE id = $1",
    )
    .bind(r.run_id)
    .bind(r.seen as i64)
    .bind(r.present as i64)
    .bind(r.missing as i64)
    .bind(r.mismatched as i64)
    .bind(r.stored as i64)
    .bind(cursor)
    .bind(finished)
    .execute(pool)
    .await
    .context("advance the reconcile run")?;
    Ok(())
}

/// Stores `rows` (unless a dry run) and counts what was stored.
async fn store(
    pool: &PgPool,
    rows: Vec<OwnedEvent>,
    report: &mut Report,
    dry_run: bool,
) -> anyhow::Result<()> {
    let mut storable = Vec::with_capacity(rows.len());
    for row in rows {
        match row.check_storable() {
            Ok(()) => storable.push(row),
            Err(e) => report
                .attention
                .push(format!("{:?}: {e}", row.provider_event_id)),
        }
    }
    if dry_run || storable.is_empty() {
        return Ok(());
    }
    let outcomes = events::insert_reconciled(pool, &storable)
        .await
        .context("store the missing events")?;
    report.stored += outcomes
        .iter()
        .filter(|o| matches!(o, events::StoreOutcome::Inserted(_)))
        .count() as u64;
    Ok(())
}

/// One run's state: what it reads with, where it writes, what it found so far.
struct Ctx<'a> {
    pool: &'a PgPool,
    provider: &'a ProviderConfig,
    api: ApiClient,
    opts: &'a Options,
    report: Report,
    pace: Pace,
    progress: &'a (dyn Fn(u64) + Sync),
}

impl Ctx<'_> {
    /// Stripe: its Events list over the window; every event hookline lacks is stored as received.
    async fn events(&mut self, mut cursor: Option<String>) -> anyhow::Result<()> {
        // Per payment, the furthest status the provider's events (already stored before this run) report.
        let mut reported: std::collections::BTreeMap<String, PaymentStatus> = Default::default();
        loop {
            self.pace.wait().await;
            let mut query = vec![
                ("limit", "100".to_string()),
                ("created[gte]", self.opts.since.unix_timestamp().to_string()),
                ("created[lte]", self.opts.until.unix_timestamp().to_string()),
            ];
            if let Some(after) = &cursor {
                query.push(("starting_after", after.clone()));
            }
            let page = self
                .api
                .get_json("v1/events", &query)
                .await
                .map_err(unavailable)?;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            let mut listed = Vec::with_capacity(data.len());
            for event in &data {
                match (event["id"].as_str(), event["type"].as_str()) {
                    (Some(id), Some(kind)) => listed.push((id.to_owned(), kind.to_owned(), event)),
                    _ => self
                        .report
                        .attention
                        .push("an event without id or type in the Events list".to_owned()),
                }
            }
            let keys: Vec<String> = listed.iter().map(|(id, _, _)| id.clone()).collect();
            let stored = events::stored_keys(self.pool, &self.provider.name, &keys)
                .await
                .context("look up stored events")?;
            let mut rows = Vec::new();
            for (id, kind, event) in listed {
                self.report.seen += 1;
                (self.progress)(1);
                if stored.contains(&id) {
                    self.report.present += 1;
                    let body = serde_json::to_vec(event).unwrap_or_default();
                    let facts =
                        normalize(self.provider.scheme, Some(&kind), &body).unwrap_or_default();
                    for fact in facts {
                        if let PaymentFact::Payment {
                            payment_ref,
                            status,
                            ..
                        } = fact
                        {
                            let entry = reported.entry(payment_ref).or_insert(status);
                            *entry = (*entry).max(status);
                        }
                    }
                    continue;
                }
                self.report.missing += 1;
                rows.push(OwnedEvent {
                    provider: self.provider.name.clone(),
                    provider_event_id: id,
                    event_type: Some(kind),
                    signed_at: None,
                    headers: vec![("x-hookline-source".into(), "reconcile".into())],
                    query: String::new(),
                    body: serde_json::to_vec(event)
                        .context("serialise an event")?
                        .into(),
                    traceparent: hookline_core::telemetry::current_traceparent(),
                });
            }
            store(self.pool, rows, &mut self.report, self.opts.dry_run).await?;
            cursor = data
                .last()
                .and_then(|e| e["id"].as_str())
                .map(str::to_owned);
            save(self.pool, &self.report, cursor.as_deref(), false).await?;
            if !page["has_more"].as_bool().unwrap_or(false) || cursor.is_none() {
                break;
            }
        }
        // Stored events the payment has not caught up with: not applied (pending, or dead-lettered). Storing
        // cannot repair that; an operator looks at `hookline status` and `hookline dlq list`.
        for (payment_ref, theirs) in reported {
            let ours = payment_state(self.pool, &self.provider.name, &payment_ref)
                .await
                .context("read our payment")?
                .map(|(status, _)| status);
            if ours.is_none_or(|ours| ours < theirs) {
                self.report.mismatched += 1;
                self.report.attention.push(format!(
                    "payment {payment_ref}: its stored events say {}, ours is {} (not applied yet, or \
                     dead-lettered: see hookline status and hookline dlq list)",
                    theirs.as_str(),
                    ours.map_or("unknown", |s| s.as_str())
                ));
            }
        }
        save(self.pool, &self.report, None, false).await?;
        Ok(())
    }

    /// Mercado Pago and Pagar.me: the provider's payments in the window, page by page, as its gateway file lists
    /// them ([`Api::list_payments`]): a payment whose state differs from ours (unknown, lower status, another
    /// refunded amount, a dispute hookline does not know or holds at an earlier status) gets the notification its
    /// listing built stored. The cursor is saved after each stored page.
    async fn payments(&mut self, api: Api, mut cursor: Option<String>) -> anyhow::Result<()> {
        let window = Window {
            since: self.opts.since,
            until: self.opts.until,
        };
        loop {
            self.pace.wait().await;
            let page = api
                .list_payments(&self.api, window, cursor.as_deref())
                .await?;
            self.report.seen += page.seen;
            (self.progress)(page.seen);
            self.report.attention.extend(page.unreadable);
            let mut rows = Vec::new();
            for listed in page.payments {
                let theirs = listed.facts.iter().find_map(|f| match f {
                    PaymentFact::Payment { status, .. } => Some(*status),
                    _ => None,
                });
                let ours = payment_state(self.pool, &self.provider.name, &listed.id)
                    .await
                    .context("read our payment")?;
                let disputes = self.disputes_behind(&listed.facts).await?;
                if self.differs(&listed.label, ours, theirs, listed.refunded, disputes) {
                    rows.push(listed.notification);
                }
            }
            store(self.pool, rows, &mut self.report, self.opts.dry_run).await?;
            save(self.pool, &self.report, Some(&page.cursor), false).await?;
            if !page.more {
                return Ok(());
            }
            cursor = Some(page.cursor);
        }
    }
}

impl Ctx<'_> {
    /// Whether the provider's view of a payment (`facts`, its resource normalized) holds a dispute hookline does not
    /// know, or knows at an earlier status (open where the provider says won or lost; an open Pagar.me chargeback
    /// whose charge is `paid` again: won).
    async fn disputes_behind(&self, facts: &[PaymentFact]) -> anyhow::Result<bool> {
        for fact in facts {
            let (dispute_ref, theirs) = match fact {
                PaymentFact::Dispute {
                    dispute_ref,
                    status,
                    ..
                } => (dispute_ref, Some(*status)),
                PaymentFact::ChargebackReversed { dispute_ref, .. } => (dispute_ref, None),
                _ => continue,
            };
            let ours = dispute_status(self.pool, &self.provider.name, dispute_ref)
                .await
                .context("read our dispute")?;
            let behind = match (ours, theirs) {
                (None, Some(_)) => true,
                (Some(ours), Some(theirs)) => ours < theirs,
                // Reversed: won, if hookline still holds it open.
                (Some(ours), None) => ours == DisputeStatus::Open,
                (None, None) => false,
            };
            if behind {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Counts how our record of a payment (`ours`: status and refunded amount) compares with what the provider
    /// says (`theirs`, `refunded`, and whether its disputes are ahead of ours: `disputes_behind`): present,
    /// missing or mismatched. `true` when a notification must be stored; `false` when ours matches, or is further
    /// than the provider's (then `what` needs an operator: nothing we store can fix that).
    fn differs(
        &mut self,
        what: &str,
        ours: Option<(PaymentStatus, i64)>,
        theirs: Option<PaymentStatus>,
        refunded: i64,
        disputes_behind: bool,
    ) -> bool {
        match (ours, theirs) {
            (Some((status, ours_refunded)), Some(t))
                if status == t && ours_refunded == refunded && !disputes_behind =>
            {
                self.report.present += 1;
                false
            }
            (Some((status, _)), Some(t)) if status > t => {
                self.report.mismatched += 1;
                self.report.attention.push(format!(
                    "{what}: ours is {}, the provider says {}",
                    status.as_str(),
                    t.as_str()
                ));
                false
            }
            (Some(_), _) => {
                self.report.mismatched += 1;
                true
            }
            (None, _) => {
                self.report.missing += 1;
                true
            }
        }
    }
}

/// `purge_runs`-style operator name of the worker's own runs.
pub const OPERATOR: &str = "hookline-worker (auto_reconcile)";

/// Reconciles every provider that supports it every `reconcile.interval` (the first run one interval after the
/// start), looking back `reconcile.window`; returns when `cancel` fires — at once when it is not configured.
/// A failed run is logged and tried again at the next interval.
pub async fn run_periodic(
    pool: PgPool,
    config: hookline_core::Config,
    settings: crate::config::ReconcileConfig,
    cancel: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    let Some(every) = settings.interval else {
        cancel.cancelled().await;
        return Ok(());
    };
    let providers: Vec<&ProviderConfig> = config
        .providers
        .values()
        .filter(|p| supported(p).is_ok())
        .collect();
    tracing::info!(
        every_secs = every.as_secs(),
        providers = ?providers.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
        "periodic reconciliation enabled"
    );
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = ticks.tick() => {}
        }
        let until = OffsetDateTime::now_utc();
        let opts = Options {
            since: until - settings.window,
            until,
            dry_run: false,
            rate: settings.rate,
            operator: OPERATOR.to_owned(),
        };
        for provider in &providers {
            match run(&pool, provider, &opts, None, &|_| {}).await {
                Ok(r) => tracing::info!(
                    provider = %r.provider,
                    run_id = r.run_id,
                    seen = r.seen,
                    missing = r.missing,
                    mismatched = r.mismatched,
                    stored = r.stored,
                    attention = r.attention.len(),
                    "periodic reconciliation done"
                ),
                Err(e) => tracing::warn!(
                    provider = %provider.name,
                    error.cause_chain = %format!("{e:#}"),
                    "periodic reconciliation failed; trying again next interval"
                ),
            }
        }
    }
}
