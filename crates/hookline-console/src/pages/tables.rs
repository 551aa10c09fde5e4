//! The read-mostly tables: payments and balances, payment intents and their requests, deliveries of facts
//! (and their redelivery), the audit trail.

use super::*;
use hookline_payments::model::IntentStatus;

/// `GET /payments`: balances by account, and payments (keyset pagination).
pub async fn payments(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let q = Form::query(&req)?;
    let before = q.get("before").and_then(|b| b.parse::<i64>().ok());
    let balances = payments_view::balances(&state.pool)
        .await
        .context("read balances")?;
    let rows = payments_view::payments(&state.pool, before, i64::from(PAGE_ROWS))
        .await
        .context("list payments")?;
    let next = (rows.len() == PAGE_ROWS as usize)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    Ok(html_response(page(
        "Payments",
        Some(&s),
        html! {
            h1 { "Ledger balances" }
            table #balances {
                tr { th { "account" } th { "currency" } th { "balance" } th { "entries" } }
                @for b in &balances {
                    tr { td { (b.account) } td { (b.currency) } td.num { (money(b.balance)) } td.num { (b.entries) } }
                }
            }
            p.muted { "Debits are positive, credits negative; every transaction sums to zero, so the balances do too." }
            h1 { "Payments" }
            table #payments {
                tr { th { "id" } th { "provider" } th { "provider payment id" } th { "status" } th { "amount" } th { "refunded" } th { "updated" } }
                @for p in &rows {
                    tr {
                        td.num { a href={ "/payments/" (p.id) } { (p.id) } } td { (p.provider) } td { (p.provider_payment_id) } td { (p.status) }
                        td.num { (p.amount.map(money).unwrap_or_else(|| "?".into())) " " (p.currency.as_deref().unwrap_or("")) }
                        td.num { (money(p.amount_refunded)) } td { (ts(p.updated_at)) }
                    }
                }
            }
            @if let Some(n) = next { p { a href={ "/payments?before=" (n) } { "older »" } } }
        },
    )))
}

/// `GET /payments/{id}`: one payment's story — its transitions, postings, and the facts told about it with each
/// delivery attempt, over time as a picture (from `payment_transitions` and `ledger_transactions`, each read by
/// the payment's index, and [`super::event_pages::fact_moments`]), then the transitions and postings as tables.
pub async fn payment_detail(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    use crate::charts::{timeline, Mark, Tone};
    let s = session(&req, &state)?;
    let id = path_id(&req)?;
    let p = payments_view::payment(&state.pool, id)
        .await
        .context("read the payment")?
        .ok_or(ConsoleError::NotFound)?;
    let transitions = payments_view::transitions(&state.pool, &[id])
        .await
        .context("read the transitions")?;
    let postings = payments_view::postings(&state.pool, &[id])
        .await
        .context("read the postings")?;
    let facts =
        super::event_pages::fact_moments(&state, std::slice::from_ref(&p), &postings, None).await?;
    let mut story: Vec<Mark> = Vec::new();
    story.extend(transitions.iter().map(|t| {
        let tone = match t.to_status.as_str() {
            "failed" | "canceled" => Tone::Bad,
            "succeeded" => Tone::Ok,
            _ => Tone::Neutral,
        };
        Mark::new(t.at, format!("{} → {}", t.from_status, t.to_status), tone)
    }));
    let mut posted = std::collections::BTreeSet::new();
    for l in &postings {
        if posted.insert(l.transaction_id) {
            story.push(Mark::new(
                l.created_at,
                format!("{} {} posted", l.kind, l.reference),
                Tone::Ok,
            ));
        }
    }
    // Last, as on the event page: a fact shares its change's timestamp and follows it.
    story.extend(facts);
    Ok(html_response(page(
        &format!("Payment {id}"),
        Some(&s),
        html! {
            h1 { "Payment " (id) }
            h2 { "Timeline" }
            (timeline("payment-timeline", &format!("Payment {id}"), &story))
            (super::event_pages::payments_section(std::slice::from_ref(&p), &transitions, &postings))
        },
    )))
}

/// `GET /intents`: outbound payment intents and their requests to the gateway (attempts, last answer).
pub async fn intents(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let q = Form::query(&req)?;
    let before = q.get("before").and_then(|b| b.parse::<i64>().ok());
    // `?status=processing` or several, comma-separated (the overview's ATTENTION lines link here so).
    let status_filter = q.filter_value("status")?.unwrap_or_default();
    let statuses = status_filter
        .split(',')
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(|v| {
            IntentStatus::parse(v).map_err(|_| {
                ConsoleError::BadRequest(format!(
                    "status must be among {}",
                    intent_statuses().collect::<Vec<_>>().join(", ")
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rows = intents::recent(&state.pool, before, &statuses, i64::from(PAGE_ROWS))
        .await
        .context("list intents")?;
    let filter_query: String = form_urlencoded::byte_serialize(status_filter.as_bytes()).collect();
    let ids: Vec<i64> = rows.iter().map(|i| i.id).collect();
    let requests = outbound_requests::of_intents(&state.pool, &ids)
        .await
        .context("list requests")?;
    let next = (rows.len() == PAGE_ROWS as usize)
        .then(|| rows.last().map(|r| r.id))
        .flatten();
    Ok(html_response(page(
        "Outbound",
        Some(&s),
        html! {
            h1 { "Outbound payment intents" }
            form #intent-filter method="get" action="/intents" {
                label { "status " select #intent-status name="status" {
                    option value="" selected[statuses.is_empty()] { "any" }
                    @for st in intent_statuses() {
                        option value=(st) selected[status_filter == *st] { (st) }
                    }
                    @if statuses.len() > 1 {
                        option value=(status_filter) selected { (status_filter) }
                    }
                } }
                " " button #intent-filter-submit type="submit" { "Filter" }
            }
            table #intents {
                tr { th { "intent" } th { "provider" } th { "amount" } th { "status" } th { "gateway id" } th { "refunded" } th { "created" } th { "requests (kind: status, attempts, last answer)" } }
                @for i in &rows {
                    tr #{ "intent-" (i.public_id) } {
                        td {
                            (i.public_id)
                            @if let (Some(sub), Some(cycle)) = (i.subscription_id, &i.billing_cycle) {
                                br; span.muted { "subscription " (sub) ", cycle " (cycle) }
                            }
                        } td { (i.provider) } td.num { (money(i.amount)) " " (i.currency) } td { (i.status) }
                        td { (i.provider_payment_id.as_deref().unwrap_or("-")) } td.num { (money(i.refunded)) } td { (ts(i.created_at)) }
                        td {
                            @for r in requests.iter().filter(|r| r.intent_id == i.id) {
                                div {
                                    (r.kind) ": " (r.status) ", " (r.attempts) " attempt(s)"
                                    @if r.key_generation > 0 { ", key generation " (r.key_generation) }
                                    @if let Some(since) = r.unknown_since {
                                        ", unknown for " (format!("{:.0}", (time::OffsetDateTime::now_utc() - since).as_seconds_f64().max(0.0))) " s (since " (ts(since)) ")"
                                    }
                                    @if let Some(st) = r.last_status { ", HTTP " (st) }
                                    @if let Some(e) = &r.last_error { ", " (e) }
                                    @if r.status == "pending" || r.status == "unknown" { ", next " (ts(r.next_attempt_at)) }
                                }
                            }
                        }
                    }
                }
            }
            @if rows.is_empty() {
                @if statuses.is_empty() { p.muted { "No outbound intent yet." } }
                @else { p.muted #intents-none { "No outbound intent with status " (status_filter) "." } }
            }
            @if let Some(n) = next { p { a #intents-older href={ "/intents?before=" (n) "&status=" (filter_query) } { "older »" } } }
        },
    )))
}

/// The statuses `/intents?status=` accepts (the `payment_intents.status` spellings).
fn intent_statuses() -> impl Iterator<Item = &'static str> {
    IntentStatus::ALL.into_iter().map(|s| s.as_str())
}

// ---------------------------------------------------------------------------------------------- deliveries

/// `GET /deliveries`: domain events out — the domain relay's backlog, each destination's state, backlog, dead
/// deliveries, last success and failure and its latest attempts (status, latency, the answer's first bytes), and a
/// redelivery form (the same `destinations::redeliver` as `hookline events redeliver`).
pub async fn deliveries(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let (unpublished, oldest) = hookline_core::domain_events::unpublished_backlog(&state.pool)
        .await
        .context("read the domain relay's backlog")?;
    let all = destinations::status(&state.pool)
        .await
        .context("read destinations")?;
    let mut attempts = Vec::with_capacity(all.len());
    for d in &all {
        attempts.push(
            destinations::recent_attempts(&state.pool, &d.name, 10)
                .await
                .context("read attempts")?,
        );
    }
    Ok(html_response(page(
        "Deliveries",
        Some(&s),
        html! {
            h1 { "Domain events out" }
            p #domain-relay { "RabbitMQ " (state.config.amqp.prefix) ".domain: " (unpublished) " unpublished, oldest " (format!("{oldest:.0}")) " s" }
            table #destinations {
                tr { th { "destination" } th { "state" } th { "url" } th { "pending (failing)" } th { "oldest pending" } th { "dead" } th { "delivered" } th { "last success" } th { "last failure" } }
                @for d in &all {
                    tr {
                        td { (d.name) }
                        td { @if d.removed_at.is_some() { "removed" } @else if d.disabled_at.is_some() { "disabled: " (d.disabled_reason.as_deref().unwrap_or("")) } @else { "active" } }
                        td { (hookline_core::input::redacted_url(&d.url)) }
                        td.num { (d.pending) " (" (d.failing) ")" }
                        td.num { (format!("{:.0}", d.oldest_pending_secs)) " s" }
                        td.num { (d.dead) }
                        td.num { (d.delivered) }
                        td { (ots(d.last_success_at)) }
                        td {
                            (ots(d.last_failure_at))
                            @if let Some(st) = d.last_failure_status { " HTTP " (st) }
                            @if let Some(e) = &d.last_failure_error { " " (e) }
                        }
                    }
                }
            }
            @if all.is_empty() { p.muted { "No destination is configured ([[destinations]])." } }
            @for (d, rows) in all.iter().zip(&attempts) {
                h2 { "Latest attempts to " (d.name) }
                table.attempts {
                    tr { th { "at" } th { "event" } th { "attempt" } th { "outcome" } th { "status" } th { "latency" } th { "answer or error" } }
                    @for a in rows {
                        tr {
                            td { (ts(a.at)) } td { (a.event_id) } td.num { (a.attempt) } td { (a.outcome) }
                            td.num { (a.http_status.map(|x| x.to_string()).unwrap_or_else(|| "-".into())) }
                            td.num { (a.latency_ms) " ms" }
                            td { (a.error.as_deref().or(a.response.as_deref()).unwrap_or("")) }
                        }
                    }
                }
            }
            h2 { "Redeliver" }
            form #redeliver method="post" action="/deliveries/redeliver" {
                input type="hidden" name="csrf" value=(s.csrf);
                label { "destination " select name="destination" {
                    option value="" { "every subscribed destination" }
                    @for d in &all { option value=(d.name) { (d.name) } }
                } }
                label { " type " input name="type" placeholder="payment.succeeded"; }
                label { " event id " input name="id" placeholder="evt_…"; }
                label { " reason " input #redeliver-reason name="reason" required; }
                button #redeliver-submit type="submit" { "Redeliver" }
                p.muted { "Dead and delivered deliveries are queued again (and missing ones created); receivers get the same webhook-id and deduplicate. Audited like a replay." }
            }
        },
    )))
}

/// `POST /deliveries/redeliver`: `destinations::redeliver`, audited in `replay_runs` as `domain_redeliver`.
pub async fn redeliver(
    req: HttpRequest,
    state: State,
    form: Form,
) -> Result<HttpResponse, ConsoleError> {
    let s = session_with_csrf(&req, &state, &form)?;
    let reason = form.reason()?;
    let filter = destinations::RedeliverFilter {
        destination: form.filter_value("destination")?,
        event_type: form.filter_value("type")?,
        since: None,
        ids: form.filter_value("id")?.into_iter().collect(),
    };
    if let Some(t) = &filter.event_type {
        if hookline_core::domain_events::EventType::parse(t).is_none() {
            return Err(ConsoleError::BadRequest("type: not an event type".into()));
        }
    }
    if filter
        .ids
        .iter()
        .any(|id| id.len() != 36 || !id.starts_with("evt_"))
    {
        return Err(ConsoleError::BadRequest(
            "id: not an event id (evt_…)".into(),
        ));
    }
    if filter.destination.is_none() && filter.event_type.is_none() && filter.ids.is_empty() {
        return Err(ConsoleError::BadRequest(
            "say what to redeliver: a destination, a type or an event id".into(),
        ));
    }
    let mut tx = state.pool.begin().await?;
    let (run, queued) =
        destinations::redeliver(&mut tx, &filter, &audit_operator(&s), &reason).await?;
    tx.commit().await?;
    tracing::info!(operator = %s.operator, run, queued, "console redelivery of domain events");
    Ok(see_other(&format!("/audit?run={run}#run-{run}")))
}

// ---------------------------------------------------------------------------------------------- audit

/// `GET /audit`: replays, redrives, discards (replay_runs) and purges (purge_runs), newest first.
pub async fn audit(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let q = Form::query(&req)?;
    let before = q
        .get("before")
        .and_then(|b| b.parse::<i64>().ok())
        .unwrap_or(i64::MAX);
    let highlight = q.get("run").and_then(|b| b.parse::<i64>().ok());
    let runs = audit::recent_runs(&state.pool, before, i64::from(PAGE_ROWS))
        .await
        .context("list runs")?;
    let purges = hookline_ops::retention::recent_purges(&state.pool, 20)
        .await
        .context("list purges")?;
    let next = (runs.len() == PAGE_ROWS as usize)
        .then(|| runs.last().map(|r| r.id))
        .flatten();
    Ok(html_response(page(
        "Audit",
        Some(&s),
        html! {
            h1 { "Audit log" }
            @if let Some(h) = highlight { p.flash #audit-flash { "Run " (h) " recorded." } }
            table #audit {
                tr { th { "run" } th { "kind" } th { "operator" } th { "reason" } th { "selection" } th { "selected" } th { "re-delivered" } th { "started" } th { "finished" } }
                @for r in &runs {
                    tr #{ "run-" (r.id) } .audit-row data-run=(r.id) data-kind=(r.kind) data-finished=(r.finished_at.is_some()) {
                        td.num { (r.id) } td { (r.kind) } td { (r.operator) } td.reason { (r.reason) }
                        td { code { (r.filter) } }
                        td.num { (r.selected.map(|n| n.to_string()).unwrap_or_default()) }
                        td.num { (r.published) }
                        td { (ts(r.started_at)) }
                        td {
                            @match r.finished_at {
                                Some(t) => { (ts(t)) }
                                None => { "not finished: running, or resumable with " code { "hookline replay --resume " (r.id) } }
                            }
                        }
                    }
                }
            }
            @if let Some(n) = next { p { a href={ "/audit?before=" (n) } { "older »" } } }
            h2 { "Purges" }
            table #purges {
                tr { th { "id" } th { "operator" } th { "older than" } th { "forced" } th { "dry run" } th { "events deleted" } th { "markers deleted" } th { "started" } th { "finished" } }
                @for p in &purges {
                    tr {
                        td.num { (p.id) } td { (p.operator) } td { (p.older_than_secs / 86_400) " d" }
                        td { (p.forced) } td { (p.dry_run) } td.num { (p.events_deleted) } td.num { (p.markers_deleted) }
                        td { (ts(p.started_at)) } td { (ots(p.finished_at)) }
                    }
                }
            }
        },
    )))
}
