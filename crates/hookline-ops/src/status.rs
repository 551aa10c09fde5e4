//! The state of the pipeline at a glance: what `hookline status` prints and the console's overview shows, from
//! one function ([`report`]), so both always say the same thing. Every figure is read from PostgreSQL and
//! RabbitMQ at the time of the call, never from memory.

use std::time::Duration;

use anyhow::Context;
use hookline_core::{consumers, events, Config};
use serde::Serialize;
use sqlx::PgPool;

use hookline_bus::Topology;

/// Per (provider, consumer) counts.
pub use hookline_core::events::ProviderStatus;

/// Queue depths, when RabbitMQ answers.
#[derive(Debug, Clone, Serialize)]
pub struct Queues {
    /// Messages ready in the payments queue.
    pub payments_ready: Option<u32>,
    /// Messages ready in the dead-letter queue.
    pub dead_letter_ready: Option<u32>,
    /// Why RabbitMQ could not be read.
    pub error: Option<String>,
}

/// Requests to the gateway (the outbox of charges and refunds).
#[derive(Debug, Clone, Serialize)]
pub struct Outbound {
    /// Still to send.
    pub pending: i64,
    /// Failed for good: hookline's own problem (configuration, an answer it cannot interpret). Counted in
    /// `attention`.
    pub failed: i64,
    /// Declined by the gateway: outcomes (the intent is `failed` with the decline's code), never attention.
    pub declined: i64,
    /// `unknown`: retried until their key's lifetime, resolved by lookup once it expired.
    pub unknown: i64,
    /// Unknown requests whose key expired more than [`UNKNOWN_GRACE`] ago (counted in `attention`).
    pub unknown_overdue: i64,
    /// How long the oldest unknown request has been unknown.
    pub oldest_unknown_secs: Option<f64>,
    /// Age of the oldest pending one.
    pub oldest_pending_secs: Option<f64>,
    /// Payment intents still `requires_dispatch` or `processing` after [`UNRESOLVED_AFTER`].
    pub unresolved_intents: i64,
    /// Refunds still `requires_dispatch` after [`UNRESOLVED_AFTER`].
    pub unresolved_refunds: i64,
    /// Seconds since the oldest of those last changed.
    pub oldest_unresolved_secs: Option<f64>,
}

/// How long a payment intent may stay `requires_dispatch` or `processing` (and a refund `requires_dispatch`)
/// before it needs attention: the dispatcher's retries (1 s … 5 min) and a provider's webhook normally settle it
/// within minutes; 15 minutes without a final word means an answer that was never readable, a lost webhook
/// (`hookline reconcile` recovers it) or a dispatcher that is not running.
pub const UNRESOLVED_AFTER: Duration = Duration::from_secs(15 * 60);

/// How long after its key expired an `unknown` request may stay unknown before it needs attention. The lookup
/// starts when the key expires and is retried with the dispatcher's backoff (at most 5 min apart): an hour is
/// many lookups. Before that an unknown request is shown with its age but is not a problem — it is the
/// dispatcher refusing to risk a second charge, and resolving itself.
pub const UNKNOWN_GRACE: Duration = Duration::from_secs(3600);

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// One row per (provider, consumer).
    pub providers: Vec<ProviderStatus>,
    /// Their sum.
    pub totals: ProviderStatus,
    /// RabbitMQ's view.
    pub queues: Queues,
    /// The gateway outbox.
    pub outbound: Outbound,
    /// What billing has due (the workers' scheduler charges it every `billing.schedule_secs`) and what is behind.
    pub billing: hookline_billing::ScheduleGauges,
    /// What needs an operator (empty = OK).
    pub attention: Vec<Attention>,
}

/// One thing that needs an operator: what is wrong, where the CLI looks and which console page shows it. In JSON
/// (and as text) it is the CLI's line, as `hookline status --json` always printed it.
#[derive(Debug, Clone)]
pub struct Attention {
    /// What is wrong, with its figures (no pointer to a tool).
    pub summary: String,
    /// Where to look from the command line (a command, a column), appended to `summary` in the CLI's line.
    pub cli_hint: Option<String>,
    /// The console page that lists it (`path?query`) and its name; `None` when no page does (the broker).
    pub page: Option<(String, &'static str)>,
}

impl Attention {
    fn new(summary: String) -> Attention {
        Attention {
            summary,
            cli_hint: None,
            page: None,
        }
    }

    fn cli(mut self, hint: impl Into<String>) -> Attention {
        self.cli_hint = Some(hint.into());
        self
    }

    fn page(mut self, path: impl Into<String>, name: &'static str) -> Attention {
        self.page = Some((path.into(), name));
        self
    }
}

impl std::fmt::Display for Attention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.cli_hint {
            Some(hint) => write!(f, "{}: {hint}", self.summary),
            None => f.write_str(&self.summary),
        }
    }
}

impl std::ops::Deref for Attention {
    type Target = str;
    /// The summary, so that `attention.contains(…)` reads what is wrong.
    fn deref(&self) -> &str {
        &self.summary
    }
}

impl Serialize for Attention {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Builds the report. `max_unpublished_age`: unpublished events older than this need attention (default
/// `relay.max_unpublished_age`); `client` names the RabbitMQ connection that reads the queue depths.
pub async fn report(
    pool: &PgPool,
    config: &Config,
    max_unpublished_age: Option<Duration>,
    client: &str,
) -> anyhow::Result<Report> {
    let mut providers = events::status_by_provider(pool, consumers::ALL)
        .await
        .context("count events by provider")?;
    let waiting = hookline_payments::apply::parked_by_provider(pool)
        .await
        .context("count the parked refunds and disputes")?;
    parked_now(&mut providers, &waiting);
    // Received and unpublished do not depend on the consumer: counted once, from the first consumer's rows.
    let first = consumers::ALL.first().copied().unwrap_or_default();
    let once = || providers.iter().filter(|p| p.consumer == first);
    let totals = ProviderStatus {
        provider: "TOTAL".into(),
        consumer: consumers::ALL.join(","),
        received: once().map(|p| p.received).sum(),
        unpublished: once().map(|p| p.unpublished).sum(),
        oldest_unpublished_secs: once()
            .filter_map(|p| p.oldest_unpublished_secs)
            .reduce(f64::max),
        processed: providers.iter().map(|p| p.processed).sum(),
        applied: providers.iter().map(|p| p.applied).sum(),
        parked: providers.iter().map(|p| p.parked).sum(),
        ignored: providers.iter().map(|p| p.ignored).sum(),
        needs_fetch: providers.iter().map(|p| p.needs_fetch).sum(),
        dead_lettered: providers.iter().map(|p| p.dead_lettered).sum(),
        discarded: providers.iter().map(|p| p.discarded).sum(),
        in_flight: providers.iter().map(|p| p.in_flight).sum(),
    };
    let queues = queue_depths(config, client).await;

    let mut attention = Vec::new();
    if let Some(age) = totals.oldest_unpublished_secs {
        let max_age = match max_unpublished_age {
            Some(age) => age,
            None => hookline_bus::RelayConfig::from_config(config)?.max_unpublished_age,
        };
        if age > max_age.as_secs_f64() {
            attention.push(
                Attention::new(format!(
                    "{} unpublished event(s), oldest {:.0}s (> {:?})",
                    totals.unpublished, age, max_age
                ))
                .cli("is the relay running and RabbitMQ up?")
                .page("/events?state=unpublished", "Events (unpublished)"),
            );
        }
    }
    if totals.dead_lettered > 0 {
        attention.push(
            Attention::new(format!("{} dead letter(s)", totals.dead_lettered))
                .cli("see `hookline dlq list`")
                .page("/dead-letters", "Dead letters"),
        );
    }
    if let Some(n) = queues.dead_letter_ready.filter(|n| *n > 0) {
        attention.push(
            Attention::new(format!("{n} message(s) in the dead-letter queue"))
                .page("/dead-letters", "Dead letters"),
        );
    }
    if let Some(e) = &queues.error {
        attention.push(Attention::new(format!("RabbitMQ: {e}")));
    }
    let ttls: Vec<(&str, Duration)> = config
        .providers
        .values()
        .map(|p| (p.name.as_str(), p.idempotency_key_ttl))
        .collect();
    let summary = hookline_payments::outbound_requests::summary(pool, &ttls, UNKNOWN_GRACE)
        .await
        .context("count outbound requests")?;
    let (pending, failed, oldest_pending_secs) =
        (summary.pending, summary.failed, summary.oldest_pending_secs);
    let unresolved = hookline_payments::outbound_requests::unresolved(pool, UNRESOLVED_AFTER)
        .await
        .context("count unresolved payment intents")?;
    let outbound = Outbound {
        pending,
        failed,
        declined: summary.declined,
        unknown: summary.unknown,
        unknown_overdue: summary.unknown_overdue,
        oldest_unknown_secs: summary.oldest_unknown_secs,
        oldest_pending_secs,
        unresolved_intents: unresolved.intents,
        unresolved_refunds: unresolved.refunds,
        oldest_unresolved_secs: unresolved.oldest_secs,
    };
    if unresolved.intents + unresolved.refunds > 0 {
        attention.push(
            Attention::new(format!(
                "{} payment intent(s) and {} refund(s) without the gateway's final answer for more than {} min \
                 (oldest {:.0}s)",
                unresolved.intents,
                unresolved.refunds,
                UNRESOLVED_AFTER.as_secs() / 60,
                unresolved.oldest_secs.unwrap_or_default()
            ))
            .cli(
                "see the console's /intents (outbound_requests.last_error); a lost webhook is recovered by \
                 `hookline reconcile`",
            )
            .page("/intents?status=requires_dispatch,processing", "Outbound (unresolved)"),
        );
    }
    // Declined requests are the gateway's answer, not hookline's problem: never attention.
    if failed > 0 {
        attention.push(
            Attention::new(format!(
                "{failed} request(s) to the gateway failed for good"
            ))
            .cli("see outbound_requests.last_error")
            .page(
                "/intents?status=needs_attention",
                "Outbound (needs attention)",
            ),
        );
    }
    if summary.unknown_overdue > 0 {
        attention.push(
            Attention::new(format!(
                "{} request(s) to the gateway unknown more than {} min after their idempotency key expired \
                 (oldest unknown {:.0}s): the lookup by hookline's reference keeps failing",
                summary.unknown_overdue,
                UNKNOWN_GRACE.as_secs() / 60,
                summary.oldest_unknown_secs.unwrap_or_default()
            ))
            .cli("see outbound_requests.last_error")
            .page("/intents?status=processing", "Outbound (processing)"),
        );
    }
    if let Some(age) = oldest_pending_secs.filter(|a| *a > 300.0) {
        attention.push(
            Attention::new(format!(
                "{pending} request(s) to the gateway pending, oldest {age:.0}s"
            ))
            .cli("is a dispatcher running and the gateway up?")
            .page("/intents?status=requires_dispatch", "Outbound (queued)"),
        );
    }
    let billing = {
        let mut conn = pool.acquire().await.context("a connection")?;
        hookline_billing::schedule_gauges(&mut conn, time::OffsetDateTime::now_utc())
            .await
            .context("read what billing has due")?
    };
    // The alert's rule (HooklineBillingBehind): later than three rounds and ten minutes.
    let late_after = 3 * hookline_billing::BillingConfig::from_config(config)?
        .schedule
        .as_secs()
        + 600;
    if billing.oldest_due_secs > i64::try_from(late_after).unwrap_or(i64::MAX) {
        attention.push(
            Attention::new(format!(
                "{} subscription period(s) and {} dunning retr(ies) due, oldest for {}s (> {late_after}s)",
                billing.due_periods, billing.due_retries, billing.oldest_due_secs
            ))
            .cli("is a worker billing ([billing] enabled)? see `hookline billing status`")
            .page("/billing", "Billing"),
        );
    }
    Ok(Report {
        outbound,
        billing,
        providers,
        totals,
        queues,
        attention,
    })
}

/// Makes `parked` say what waits now: the payments consumer's refunds and lost disputes whose payment has not
/// succeeded (`waiting`, per provider). The markers of events parked earlier and applied since (by the
/// transaction that made their payment succeed) count as `applied`, so a fully settled history shows no parked.
fn parked_now(providers: &mut [ProviderStatus], waiting: &[(String, i64)]) {
    for p in providers
        .iter_mut()
        .filter(|p| p.consumer == consumers::PAYMENTS)
    {
        let now = waiting
            .iter()
            .find(|(provider, _)| *provider == p.provider)
            .map_or(0, |(_, n)| *n);
        // A dispute reported lost twice before its payment succeeded has two parked markers for one waiting
        // item: never move more markers to `applied` than there are.
        p.applied += (p.parked - now).max(0);
        p.parked = now;
    }
}

async fn queue_depths(config: &Config, client: &str) -> Queues {
    let t = Topology::new(&config.amqp.prefix, config.amqp.delivery_limit);
    let result = tokio::time::timeout(
        Duration::from_secs(5),
        crate::inspect::queue_depths(
            &config.amqp_urls,
            client,
            &[&t.payments_queue, &t.dead_letter_queue],
        ),
    )
    .await;
    match result {
        Ok(Ok(d)) => Queues {
            payments_ready: d.first().copied().flatten().map(|q| q.messages),
            dead_letter_ready: d.get(1).copied().flatten().map(|q| q.messages),
            error: None,
        },
        Ok(Err(e)) => Queues {
            payments_ready: None,
            dead_letter_ready: None,
            error: Some(format!("{e:#}")),
        },
        Err(_) => Queues {
            payments_ready: None,
            dead_letter_ready: None,
            error: Some("no answer within 5 s".into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(provider: &str, applied: i64, parked: i64) -> ProviderStatus {
        ProviderStatus {
            provider: provider.into(),
            consumer: consumers::PAYMENTS.into(),
            processed: applied + parked,
            applied,
            parked,
            ..ProviderStatus::default()
        }
    }

    #[test]
    fn parked_counts_what_waits_now_and_the_rest_is_applied() {
        let mut rows = vec![row("stripe", 5, 10), row("mercadopago", 3, 2)];
        parked_now(&mut rows, &[("mercadopago".into(), 1)]);
        assert_eq!((rows[0].applied, rows[0].parked), (15, 0));
        assert_eq!((rows[1].applied, rows[1].parked), (4, 1));
    }
}
