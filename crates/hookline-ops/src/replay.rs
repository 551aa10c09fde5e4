//! The replay engine: re-deliver stored events to the workers, safely. Used by `hookline replay`, `hookline dlq
//! redrive` and the operator console (`hookline console serve`), so that there is one implementation of what a
//! replay does.
//!
//! A replay RE-DELIVERS event references onto the events exchange. The worker's processed marker makes that
//! safe: an event whose effect was applied changes nothing, an event never applied is applied once. There is no
//! way to re-apply an applied effect — that would be a new business operation, not a replay.
//!
//! Selections stream in pages ordered by event id (keyset pagination: memory stays flat whatever the size),
//! publishes are confirmed by RabbitMQ before the run's cursor advances, and every run is audited in
//! `replay_runs` ([`crate::audit`]). An interrupted run resumes from its cursor ([`resume`]): nothing is
//! skipped; at most the last unconfirmed page is published twice, which the worker deduplicates.
//!
//! Nothing here prints: callers report progress and outcomes their own way (the CLI on the terminal, the
//! console in its pages).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use hookline_core::{audit, consumers, events};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use hookline_bus::{EventMessage, Publisher, Topology};

/// Which events a run selects (stored as JSON in the audit row, so a run resumes with the same selection).
pub use hookline_core::events::Selection as Filter;

/// One selected event.
pub use hookline_core::events::SelectedEvent as Row;

/// Where and how a run publishes.
#[derive(Debug, Clone)]
pub struct Target {
    /// RabbitMQ nodes (any reachable one is used).
    pub amqp_urls: hookline_core::config::AmqpEndpoints,
    /// The deployment's names.
    pub topology: Topology,
    /// How long to wait for RabbitMQ's confirms of a page.
    pub confirm_timeout: Duration,
    /// Maximum events per second (0 = unlimited): keeps a large replay from starving live traffic.
    pub rate: u32,
    /// Events read per page.
    pub page_size: u32,
}

fn message(r: &Row) -> EventMessage {
    EventMessage {
        id: r.id,
        provider: r.provider.clone(),
        provider_event_id: r.provider_event_id.clone(),
        event_type: r.event_type.clone(),
        // The replay's publish continues the event's own trace (linked to the run's span): what the worker does
        // with it is found where the event's first delivery is.
        traceparent: r.traceparent.clone(),
    }
}

/// Counts the selection after `cursor`, over every consumer.
pub async fn count(pool: &PgPool, f: &Filter, cursor: i64) -> anyhow::Result<i64> {
    events::count_selection(pool, f, consumers::ALL, cursor)
        .await
        .context("count the selection")
}

/// One page of the selection after `cursor`, in id order.
pub async fn page(pool: &PgPool, f: &Filter, cursor: i64, limit: u32) -> anyhow::Result<Vec<Row>> {
    events::select_page(pool, f, consumers::ALL, cursor, limit)
        .await
        .context("read a page of the selection")
}

/// The kind of an audited run: what `replay_runs.kind` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// A replay of a selection.
    Replay,
    /// A dead-letter redrive: a replay of the dead-lettered events.
    DlqRedrive,
}

impl RunKind {
    /// Database spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Replay => "replay",
            RunKind::DlqRedrive => "dlq_redrive",
        }
    }
}

/// A run in progress: its audit row, selection, cursor and how many it re-delivered so far.
#[derive(Debug)]
pub struct Run {
    /// `replay_runs.id`.
    pub id: i64,
    /// Replay or redrive.
    pub kind: RunKind,
    /// What it selects.
    pub filter: Filter,
    /// Events up to this id were confirmed.
    pub cursor: i64,
    /// Events re-delivered so far (over every call).
    pub published: i64,
    /// Events selected when it started (for a resumed run: still to go when it resumed).
    pub selected: i64,
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every selected event was re-delivered and confirmed.
    Done,
    /// Cancelled (Ctrl-C, SIGTERM, shutdown): resumable.
    Interrupted,
    /// RabbitMQ did not confirm this many: resumable.
    Unconfirmed(usize),
}

/// Opens an audited run of `kind` over `filter` (the audit row records who, why, what and how many).
pub async fn start(
    pool: &PgPool,
    kind: RunKind,
    filter: Filter,
    reason: &str,
    operator: &str,
) -> anyhow::Result<Run> {
    let selected = count(pool, &filter, 0).await?;
    let id = audit::insert_run(pool, kind.as_str(), operator, reason, &filter, selected)
        .await
        .context("write the audit row")?;
    Ok(Run {
        id,
        kind,
        filter,
        cursor: 0,
        published: 0,
        selected,
    })
}

/// What a dry run counted: the selection (times already resolved, so `--since 2h` means the same instant when
/// it is confirmed) and its size. A confirmed run starts only while the selection still holds exactly that
/// many events ([`start_confirmed`]); otherwise the operator re-runs the dry run and looks again.
///
/// Carried as one opaque token (the console's hidden `confirmation` field, the CLI's `--confirm`):
/// hex of the JSON, a dot, and a SHA-256 digest of that JSON, so a truncated or edited token is refused
/// rather than read as another selection. It is a checksum, not a secret: whoever can confirm a replay can
/// start any replay.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Confirmation {
    /// The selection that was counted.
    pub filter: Filter,
    /// How many events it held.
    pub count: i64,
}

/// Longest provider or type in a confirmation (as the console's filters).
const MAX_CONFIRMED_TEXT: usize = 200;
/// Most explicit ids in a confirmation.
const MAX_CONFIRMED_IDS: usize = 10_000;

/// Why a confirmation was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfirmError {
    /// Not a token a dry run printed (truncated, edited, or from another tool).
    #[error("the confirmation is not one a dry run produced (truncated or edited?): run the dry run again")]
    Malformed,
    /// The token's selection holds a value that cannot be used.
    #[error("the confirmation's selection is not usable: {0}")]
    Input(#[from] hookline_core::input::InputError),
    /// The selection no longer holds what was counted: nothing was started.
    #[error(
        "the selection changed since the dry run: it counted {counted} events, it now holds {now};          nothing was replayed — run the dry run again and confirm the new count"
    )]
    Changed {
        /// What the dry run counted.
        counted: i64,
        /// What the selection holds now.
        now: i64,
    },
    /// Reading the database failed.
    #[error(transparent)]
    Other(#[from] anyhow::Error),
}

impl Confirmation {
    fn digest(json: &[u8]) -> String {
        use sha2::Digest;
        hex::encode(&sha2::Sha256::digest(json)[..16])
    }

    /// The token that carries this confirmation.
    pub fn token(&self) -> String {
        // Serializing plain data to JSON cannot fail; an empty token would only be refused later.
        let json = serde_json::to_vec(self).unwrap_or_default();
        format!("{}.{}", hex::encode(&json), Self::digest(&json))
    }

    /// Reads a token made by [`Confirmation::token`]; its provider and type are checked with
    /// [`hookline_core::input`] (the token comes back from outside).
    pub fn parse(token: &str) -> Result<Confirmation, ConfirmError> {
        let (data, digest) = token
            .trim()
            .split_once('.')
            .ok_or(ConfirmError::Malformed)?;
        let json = hex::decode(data).map_err(|_| ConfirmError::Malformed)?;
        if Self::digest(&json) != digest {
            return Err(ConfirmError::Malformed);
        }
        let c: Confirmation = serde_json::from_slice(&json).map_err(|_| ConfirmError::Malformed)?;
        if let Some(p) = &c.filter.provider {
            hookline_core::input::line("provider", p, MAX_CONFIRMED_TEXT)?;
        }
        if let Some(t) = &c.filter.event_type {
            hookline_core::input::text("type", t, MAX_CONFIRMED_TEXT)?;
        }
        if !["all", "unprocessed", "dead"].contains(&c.filter.state.as_str())
            || c.filter.ids.len() > MAX_CONFIRMED_IDS
            || c.count < 0
        {
            return Err(ConfirmError::Malformed);
        }
        Ok(c)
    }
}

/// [`start`], only if the selection still holds exactly what the dry run counted; refused with
/// [`ConfirmError::Changed`] (nothing recorded, nothing replayed) otherwise.
///
/// The recount and the audit row's own count are a few milliseconds apart; the run re-delivers what its
/// audit row selected, and a difference in that window shows there (`selected`).
pub async fn start_confirmed(
    pool: &PgPool,
    kind: RunKind,
    confirmation: &Confirmation,
    reason: &str,
    operator: &str,
) -> Result<Run, ConfirmError> {
    let now = count(pool, &confirmation.filter, 0).await?;
    if now != confirmation.count {
        return Err(ConfirmError::Changed {
            counted: confirmation.count,
            now,
        });
    }
    Ok(start(pool, kind, confirmation.filter.clone(), reason, operator).await?)
}

/// What [`resume`] found.
#[derive(Debug)]
pub enum Resumed {
    /// No replay or redrive run with that id.
    NotFound,
    /// It already finished, having re-delivered this many.
    Finished {
        /// Events re-delivered.
        published: i64,
    },
    /// Re-opened at its cursor.
    Open(Run),
}

/// Re-opens an interrupted run (replay or redrive) at its cursor.
pub async fn resume(pool: &PgPool, id: i64) -> anyhow::Result<Resumed> {
    let Some((kind, filter, cursor, published, finished)) = audit::saved_run(pool, id).await?
    else {
        return Ok(Resumed::NotFound);
    };
    if finished.is_some() {
        return Ok(Resumed::Finished { published });
    }
    let kind = if kind == "dlq_redrive" {
        RunKind::DlqRedrive
    } else {
        RunKind::Replay
    };
    let selected = count(pool, &filter.0, cursor).await?;
    Ok(Resumed::Open(Run {
        id,
        kind,
        filter: filter.0,
        cursor,
        published,
        selected,
    }))
}

/// Re-delivers the rest of `run`'s selection, page by page in id order, at most `target.rate` events per second.
/// The cursor in the audit row advances only after RabbitMQ confirmed a page, so an interruption re-sends at
/// most one page (deduplicated by the workers). `progress` is called with the number of events each confirmed
/// page held. Returns how it ended and the ids it re-delivered in this call.
pub async fn execute(
    pool: &PgPool,
    target: &Target,
    run: &mut Run,
    interrupted: &CancellationToken,
    mut progress: impl FnMut(u64),
) -> anyhow::Result<(Outcome, Vec<i64>)> {
    let topology = &target.topology;
    let publisher = Publisher::open(&target.amqp_urls, topology, "hookline-replay").await?;
    let started = Instant::now();
    let mut sent = Vec::new();
    let rate = target.rate;
    let chunk = if rate == 0 {
        target.page_size
    } else {
        rate.clamp(1, target.page_size)
    };
    let outcome = loop {
        if interrupted.is_cancelled() {
            break Outcome::Interrupted;
        }
        let rows = page(pool, &run.filter, run.cursor, chunk).await?;
        if rows.is_empty() {
            break Outcome::Done;
        }
        let msgs: Vec<EventMessage> = rows.iter().map(message).collect();
        // Each event's publish continues the event's own trace; this span (the run's page) is what they are
        // linked to, so a trace shows "re-delivered by replay run N" beside the first delivery.
        let page_span = tracing::info_span!(
            "replay.page",
            replay_run = run.id,
            kind = run.kind.as_str(),
            events = msgs.len(),
        );
        let acked = publisher
            .publish(topology, &msgs, target.confirm_timeout)
            .instrument(page_span)
            .await
            .context("publish to RabbitMQ")?
            .acked;
        if acked.len() != msgs.len() {
            break Outcome::Unconfirmed(msgs.len() - acked.len());
        }
        run.cursor = rows.last().map(|r| r.id).unwrap_or(run.cursor);
        run.published += msgs.len() as i64;
        sent.extend(acked);
        // The cursor only moves past events RabbitMQ confirmed: a crash here re-sends at most this page.
        audit::advance(pool, run.id, run.cursor, run.published)
            .await
            .context("advance the run's cursor")?;
        progress(msgs.len() as u64);
        if rate > 0 {
            let due = Duration::from_secs_f64(sent.len() as f64 / f64::from(rate));
            let ahead = due.saturating_sub(started.elapsed());
            tokio::select! {
                _ = tokio::time::sleep(ahead) => {}
                _ = interrupted.cancelled() => {}
            }
        }
    };
    publisher.close().await;
    if outcome == Outcome::Done {
        audit::finish(pool, run.id)
            .await
            .context("mark the run finished")?;
    }
    Ok((outcome, sent))
}

/// The selection of a dead-letter redrive: the unresolved dead letters matching these (all when every part is
/// empty).
pub fn redrive_filter(
    ids: Vec<i64>,
    provider: Option<String>,
    event_type: Option<String>,
) -> Filter {
    Filter {
        provider,
        event_type,
        since: None,
        until: None,
        ids,
        state: "dead".into(),
    }
}

/// What a finished [`redrive`] call did.
#[derive(Debug)]
pub struct Redriven {
    /// How the run ended.
    pub outcome: Outcome,
    /// Event ids re-delivered.
    pub sent: Vec<i64>,
    /// Copies removed from the dead-letter queue (`None` when nothing was sent, so nothing was removed).
    pub removed: Option<u64>,
}

/// Executes a redrive run (opened by [`start`] with [`RunKind::DlqRedrive`]) and removes the copies it
/// re-delivered from the dead-letter queue: the worker resolves each dead letter in the transaction that finally
/// applies it.
pub async fn redrive(
    pool: &PgPool,
    target: &Target,
    run: &mut Run,
    interrupted: &CancellationToken,
    progress: impl FnMut(u64),
) -> anyhow::Result<Redriven> {
    // The copies this redrive replaces are taken out of the DLQ BEFORE anything is re-published (see
    // `dead_letters::Held`): an event that fails again at once gets a fresh copy, which must stay.
    let mut selected = HashSet::new();
    let mut cursor = run.cursor;
    loop {
        let rows = page(pool, &run.filter, cursor, target.page_size.max(1)).await?;
        let Some(last) = rows.last() else { break };
        cursor = last.id;
        selected.extend(rows.iter().map(|r| r.id));
    }
    let held = if selected.is_empty() {
        None
    } else {
        Some(
            hookline_bus::dead_letters::hold(&target.amqp_urls, &target.topology, &selected)
                .await?,
        )
    };
    let (outcome, sent) = match execute(pool, target, run, interrupted, progress).await {
        Ok(done) => done,
        Err(e) => {
            if let Some(held) = held {
                held.release().await;
            }
            return Err(e);
        }
    };
    if sent.is_empty() && outcome == Outcome::Done {
        if let Some(held) = held {
            held.release().await;
        }
        return Ok(Redriven {
            outcome,
            sent,
            removed: None,
        });
    }
    let removed = match held {
        Some(held) => {
            held.remove_sent(&sent.iter().copied().collect::<HashSet<i64>>())
                .await
        }
        None => 0,
    };
    Ok(Redriven {
        outcome,
        sent,
        removed: Some(removed),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Confirmation {
        Confirmation {
            filter: Filter {
                provider: Some("stripe".into()),
                event_type: Some("charge.refunded".into()),
                since: None,
                until: None,
                ids: vec![],
                state: "all".into(),
            },
            count: 93,
        }
    }

    #[test]
    fn a_token_carries_the_selection_and_the_count() {
        let c = sample();
        let back = Confirmation::parse(&c.token()).unwrap();
        assert_eq!(back.count, 93);
        assert_eq!(
            serde_json::to_string(&back.filter).unwrap(),
            serde_json::to_string(&c.filter).unwrap()
        );
    }

    #[test]
    fn an_edited_or_truncated_token_is_refused() {
        let token = sample().token();
        let (data, digest) = token.split_once('.').unwrap();
        let json = String::from_utf8(hex::decode(data).unwrap()).unwrap();
        let edited = hex::encode(json.replace("93", "94"));
        for bad in [
            "93".to_string(),
            format!("{edited}.{digest}"),
            token[..token.len() - 1].to_string(),
            String::new(),
        ] {
            assert!(
                matches!(Confirmation::parse(&bad), Err(ConfirmError::Malformed)),
                "{bad}"
            );
        }
    }
}
