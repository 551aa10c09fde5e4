//! The overview and the events: the pipeline's figures, the event list with its filters, an event's story
//! (its signature checked again, its markers, dead letters and facts) and its raw body.

use super::*;

// ---------------------------------------------------------------------------------------------- overview

/// The edge's acknowledgement latency metric (read from the edge's `/metrics`), for the overview's percentiles.
pub(crate) const ACK_METRIC: &str = "hookline_edge_ack_seconds";

fn figures(state: &ConsoleState, snap: &crate::Snapshot) -> Markup {
    let age = snap.at.elapsed().as_secs();
    let ack = snap
        .edge_metrics
        .as_ref()
        .map(|text| views::histogram_percentiles(text, ACK_METRIC, &[0.5, 0.95, 0.99]));
    let ms = |s: f64| {
        if s.is_finite() {
            format!("≤ {:.1} ms", s * 1000.0)
        } else {
            "> 5 s".to_string()
        }
    };
    // Subscriptions behind are the console's own attention line (`hookline status` is the pipeline's health
    // check and does not read billing), linking to the page that lists them.
    let billing = match &snap.billing {
        Ok(b) if b.past_due + b.needs_payment_method > 0 => Some(html! {
            div #billing-attention {
                "ATTENTION: " (b.past_due) " subscription(s) past due, " (b.needs_payment_method)
                " waiting for a payment method: see " a href="/billing" { "Billing" }
            }
        }),
        Ok(_) => None,
        Err(e) => Some(html! { div.bad #billing-error { (e) } }),
    };
    html! {
        p.muted { "Figures read from PostgreSQL and RabbitMQ at " (ts(snap.read_at)) " (" (age) " s ago); refreshed every 5 s." }
        @match &snap.result {
            Err(e) => { p.bad #overview-error { (e) } @if let Some(b) = &billing { (b) } }
            Ok(r) => {
                @if r.attention.is_empty() && billing.is_none() {
                    p.ok #status { "status: OK" }
                } @else {
                    div.attention #status {
                        // The console's own pages, not the CLI's commands or the database's columns.
                        @for a in &r.attention {
                            div.attention-item {
                                "ATTENTION: " (a.summary)
                                @if let Some((href, name)) = &a.page { ": see " a href=(href) { (name) } }
                            }
                        }
                        @if let Some(b) = &billing { (b) }
                    }
                }
                table #providers {
                    tr { th { "provider" } th { "consumer" } th { "received" } th { "unpublished" } th { "oldest unpublished (s)" }
                         th { "processed" } th { "applied" } th { "parked" } th { "ignored" } th { "fetch" } th { "dead" } }
                    @for p in r.providers.iter().chain(std::iter::once(&r.totals)) {
                        tr {
                            td { (p.provider) } td { (p.consumer) }
                            td.num { (p.received) } td.num { (p.unpublished) }
                            td.num { (p.oldest_unpublished_secs.map(|s| format!("{s:.0}")).unwrap_or_else(|| "-".into())) }
                            td.num { (p.processed) } td.num { (p.applied) } td.num { (p.parked) }
                            td.num { (p.ignored) } td.num { (p.needs_fetch) } td.num { (p.dead_lettered) }
                        }
                    }
                }
                table #pipeline {
                    tr { th { "relay backlog" } td.num #relay-backlog { (r.totals.unpublished) } }
                    tr { th { "relay lag (oldest unpublished)" } td.num { (r.totals.oldest_unpublished_secs.map(|s| format!("{s:.0} s")).unwrap_or_else(|| "0 s".into())) } }
                    tr { th { "payments queue ready" } td.num { (r.queues.payments_ready.map(|n| n.to_string()).unwrap_or_else(|| "?".into())) } }
                    tr { th { "dead-letter queue ready" } td.num { (r.queues.dead_letter_ready.map(|n| n.to_string()).unwrap_or_else(|| "?".into())) } }
                    tr { th { "dead letters (unresolved)" } td.num #dead-letter-count { (r.totals.dead_lettered) } }
                    tr { th { "outbound pending / failed / declined" } td.num { (r.outbound.pending) " / " (r.outbound.failed) " / " (r.outbound.declined) } }
                    tr { th { "outbound unknown (oldest, awaiting lookup)" } td.num #outbound-unknown { (r.outbound.unknown) @if let Some(s) = r.outbound.oldest_unknown_secs { " (" (format!("{s:.0}")) " s)" } } }
                    tr {
                        th { "edge ack latency p50 / p95 / p99 (the edge at " (state.edge_metrics_url) ", since its start)" }
                        td.num #ack-latency {
                            @match &ack {
                                Ok(Some(p)) => { (ms(p[0])) " / " (ms(p[1])) " / " (ms(p[2])) }
                                Ok(None) => { "no webhook received yet" }
                                Err(why) => { (why) }
                            }
                        }
                    }
                }
                @if let Some(e) = &r.queues.error { p.bad { "RabbitMQ: " (e) } }
            }
        }
        (history_section(state))
    }
}

/// The last hour (per minute) and the last day (per 10 minutes) as pictures, from the console's own samples of
/// the figures above ([`crate::history`]: no query of their own).
fn history_section(state: &ConsoleState) -> Markup {
    use crate::charts::columns;
    let now = OffsetDateTime::now_utc();
    let (hour, day) = {
        let h = state.history.lock().unwrap_or_else(|e| e.into_inner());
        (
            h.window(now, 60, time::Duration::minutes(1)),
            h.window(now, 144, time::Duration::minutes(10)),
        )
    };
    let every = state.console.history_sample.as_secs();
    let since = |w: &crate::history::Window| match w.since {
        Some(t) => format!("sampled every {every} s since {}", ts(t)),
        None => format!("nothing sampled yet: the console samples every {every} s from its start"),
    };
    html! {
        div #history {
            @for (key, name, w) in [("hour", "Last hour, per minute", &hour), ("day", "Last day, per 10 minutes", &day)] {
                h2 { (name) }
                p.muted { (since(w)) "; blank where nothing was sampled." }
                (columns(&format!("chart-{key}-flow"), "events per minute", "events/min", w.start, w.bucket, &w.flow))
                (columns(&format!("chart-{key}-ack"), "edge ack latency (bucket bound)", "ms", w.start, w.bucket, &w.ack))
                (columns(&format!("chart-{key}-relay-lag"), "relay lag (oldest unpublished)", "s", w.start, w.bucket, &w.relay_lag))
                @if w.backlog.is_empty() {
                    p.muted id={ "chart-" (key) "-backlog" } { "No destination: no delivery backlog to draw." }
                } @else {
                    (columns(&format!("chart-{key}-backlog"), "pending deliveries per destination", "deliveries", w.start, w.bucket, &w.backlog))
                }
            }
        }
    }
}

/// `GET /`: the figures of `hookline status`, refreshed live.
pub async fn overview(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let snap = state.clone().into_inner().overview().await;
    Ok(html_response(page(
        "Overview",
        Some(&s),
        html! {
            h1 { "Overview" }
            div #overview { div #figures { (figures(&state, &snap)) } }
        },
    )))
}

/// `GET /overview/figures`: the overview's figures alone (what the page's script swaps in).
pub async fn overview_figures(
    req: HttpRequest,
    state: State,
) -> Result<HttpResponse, ConsoleError> {
    session(&req, &state)?;
    let snap = state.clone().into_inner().overview().await;
    Ok(html_response(figures(&state, &snap)))
}

// ---------------------------------------------------------------------------------------------- events

/// `GET /events`: filters (provider, type, state, since, until, q) and keyset pagination (`before`).
pub async fn events(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let q = Form::query(&req)?;
    let state_filter = q.filter_value("state")?;
    if let Some(st) = &state_filter {
        if !events::LIST_STATES.contains(&st.as_str()) {
            return Err(ConsoleError::BadRequest(format!(
                "state must be one of {}",
                events::LIST_STATES.join(", ")
            )));
        }
    }
    let before = match q.get("before") {
        Some(b) => Some(
            b.parse::<i64>()
                .map_err(|_| ConsoleError::BadRequest("before: not an event id".into()))?,
        ),
        None => None,
    };
    let filter = events::ListFilter {
        provider: q.filter_value("provider")?,
        event_type: q.filter_value("type")?,
        state: state_filter,
        since: q.instant("since")?,
        until: q.instant("until")?,
        search: q.filter_value("q")?,
    };
    let rows = events::list_page(&state.pool, &filter, consumers::ALL, before, PAGE_ROWS)
        .await
        .context("list events")?;
    let keep = |name: &str| q.filter_value(name).ok().flatten();
    let base = [
        ("provider", keep("provider")),
        ("type", keep("type")),
        ("state", keep("state")),
        ("since", keep("since")),
        ("until", keep("until")),
        ("q", keep("q")),
    ];
    let next = (rows.len() == PAGE_ROWS as usize)
        .then(|| rows.last().map(|r| r.id))
        .flatten()
        .map(|last| {
            let mut pairs = base.to_vec();
            pairs.push(("before", Some(last.to_string())));
            format!("/events?{}", query_string(&pairs))
        });
    let first = format!("/events?{}", query_string(&base));
    let providers: Vec<&String> = state.config.providers.keys().collect();
    let selected = |name: &str, value: &str| keep(name).as_deref() == Some(value);
    Ok(html_response(page(
        "Events",
        Some(&s),
        html! {
            h1 { "Events" }
            form.filters #event-filters method="get" action="/events" {
                label { "provider "
                    select name="provider" {
                        option value="" { "any" }
                        @for p in &providers { option value=(p) selected[selected("provider", p)] { (p) } }
                    }
                }
                label { "type " input type="text" name="type" value=(keep("type").unwrap_or_default()); }
                label { "state "
                    select name="state" {
                        option value="" { "any" }
                        @for st in events::LIST_STATES { option value=(st) selected[selected("state", st)] { (st) } }
                    }
                }
                label { "since " input type="text" name="since" placeholder="2h or 2026-11-30T04:00:00Z" value=(keep("since").unwrap_or_default()); }
                label { "until " input type="text" name="until" value=(keep("until").unwrap_or_default()); }
                label { "id " input #event-search type="text" name="q" placeholder="stored id or provider event id" value=(keep("q").unwrap_or_default()); }
                button #event-filter-submit type="submit" { "Filter" }
            }
            table #events {
                tr { th { "id" } th { "received" } th { "provider" } th { "type" } th { "provider event id" } th { "state" } th { "published" } }
                @for r in &rows {
                    tr.event-row data-id=(r.id) {
                        td { a.event-link href={ "/events/" (r.id) } { (r.id) } }
                        td { (ts(r.received_at)) }
                        td { (r.provider) }
                        td { (r.event_type.as_deref().unwrap_or("-")) }
                        td { (r.provider_event_id) }
                        td { (r.state) }
                        td { (if r.published { "yes" } else { "no" }) }
                    }
                }
            }
            @if rows.is_empty() { p.muted { "No event matches." } }
            p {
                @if before.is_some() { a href=(first) { "« newest" } " " }
                @if let Some(n) = &next { a #events-older href=(n) { "older »" } }
            }
            h2 { "Replay a filtered set" }
            form.card #replay-set method="post" action="/replay" {
                p.muted { "Selects the events of the provider, type and time range above (not the list's state filter), then shows how many a replay would re-deliver before doing anything. A replay re-delivers: an applied event changes nothing." }
                input type="hidden" name="csrf" value=(s.csrf);
                input type="hidden" name="provider" value=(keep("provider").unwrap_or_default());
                input type="hidden" name="type" value=(keep("type").unwrap_or_default());
                input type="hidden" name="since" value=(keep("since").unwrap_or_default());
                input type="hidden" name="until" value=(keep("until").unwrap_or_default());
                label { "which "
                    select name="selection" {
                        option value="unprocessed" { "unprocessed (never applied)" }
                        option value="dead" { "dead-lettered" }
                        option value="all" { "all (applied ones change nothing)" }
                    }
                }
                " "
                label { "reason " input type="text" name="reason" required; }
                " "
                button type="submit" { "Count (dry run)" }
            }
        },
    )))
}

/// The `{id}` of the path: a stored event or payment id, checked with [`hookline_core::input`] like every other value;
/// anything that is not one (NUL, too long, not a number) is 404, as an id that does not exist.
pub(super) fn path_id(req: &HttpRequest) -> Result<i64, ConsoleError> {
    req.match_info()
        .get("id")
        .and_then(|v| hookline_core::input::line("id", v, 20).ok())
        .and_then(|v| v.parse::<i64>().ok())
        .filter(|id| *id > 0)
        .ok_or(ConsoleError::NotFound)
}

/// The signature re-verified now and at the time of receipt, with the provider's configured secrets.
fn signature_section(state: &ConsoleState, ev: &events::FullRow) -> Markup {
    let Some(provider) = state.config.providers.get(&ev.provider) else {
        return html! { p.bad { "Provider " (ev.provider) " is no longer configured: nothing to verify with." } };
    };
    if ev.source == "reconcile" {
        return html! { p.muted { "Stored by reconciliation from the provider's API: there was no webhook signature." } };
    }
    let header_pairs: Vec<(String, String)> = ev
        .headers
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| {
            Some((
                h.get(0)?.as_str()?.to_string(),
                h.get(1)?.as_str()?.to_string(),
            ))
        })
        .collect();
    let headers: Vec<(&str, &[u8])> = header_pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    let secrets = provider.secret_bytes();
    let check_with = |now: i64, tolerance_secs: Option<u64>| {
        hookline_signature::Verifier {
            scheme: provider.scheme,
            secrets: &secrets,
            tolerance_secs,
            now_unix: now,
        }
        .verify(&hookline_signature::Request {
            headers: &headers,
            query: &ev.query,
            body: &ev.body,
        })
    };
    let check = |now: i64| check_with(now, provider.tolerance_secs);
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let received = ev.received_at.unix_timestamp();
    let now_result = check(now);
    let then_result = check(received);
    let lines = |r, at, label| hookline_signature::outcome_lines(r, secrets.len(), at, label);
    // An event older than the tolerance fails today's timestamp check whatever its signature (the check the
    // Runbook uses after a rotation): verify the signature alone, ignoring the tolerance as the providers'
    // SDKs allow, and say which of the two it is. The MAC is checked before the timestamp, so this error
    // always means an authentic signature.
    let (now_class, now_lines) = match &now_result {
        Err(hookline_signature::VerifyError::TimestampOutOfTolerance { tolerance, .. }) => {
            let relaxed = check_with(now, Some(u64::MAX));
            match &relaxed {
                Ok(_) => {
                    let mut l = vec![format!(
                        "valid signature, outside today's tolerance ({tolerance} s): the signature matches; \
                         only its timestamp is older than a new delivery's may be"
                    )];
                    l.extend(
                        hookline_signature::outcome_lines(&relaxed, secrets.len(), now, "now")
                            .into_iter()
                            .skip(1),
                    );
                    ("stale", l)
                }
                Err(_) => (
                    "bad",
                    hookline_signature::outcome_lines(&relaxed, secrets.len(), now, "now"),
                ),
            }
        }
        r => (if r.is_ok() { "ok" } else { "bad" }, lines(r, now, "now")),
    };
    html! {
        table #signature {
            tr {
                th { "verified now, with the " (secrets.len()) " configured secret(s) of " (ev.provider) " (" (provider.scheme.as_str()) ")" }
                td class=(now_class) {
                    pre #signature-now { (now_lines.join("\n")) }
                }
            }
            tr {
                th { "verified as at its receipt (" (ts(ev.received_at)) ")" }
                td class=(if then_result.is_ok() { "ok" } else { "bad" }) {
                    pre #signature-at-receipt { (lines(&then_result, received, "receipt").join("\n")) }
                }
            }
        }
    }
}

/// `GET /events/{id}`: everything about one event, and the replay form.
pub async fn event_detail(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let id = path_id(&req)?;
    let ev = events::get_full(&state.pool, id)
        .await
        .context("read the event")?
        .ok_or(ConsoleError::NotFound)?;
    let marks = markers::of_event(&state.pool, consumers::ALL, id)
        .await
        .context("read the markers")?;
    let dead = dead_letters::of_event(&state.pool, consumers::ALL, id)
        .await
        .context("read the dead letters")?;
    let payments = payments_view::payments_of_event(&state.pool, id)
        .await
        .context("read the payments")?;
    let payment_ids: Vec<i64> = payments.iter().map(|p| p.id).collect();
    let transitions = payments_view::transitions(&state.pool, &payment_ids)
        .await
        .context("read the transitions")?;
    let postings = payments_view::postings(&state.pool, &payment_ids)
        .await
        .context("read the postings")?;
    let facts = fact_moments(&state, &payments, &postings, Some(id)).await?;
    let story = event_story(&ev, &marks, &dead, &transitions, &postings, facts);
    let (body, body_kind) = views::body_text(&ev.body);
    let headers: Vec<(String, String)> = ev
        .headers
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            (
                h.get(0).and_then(|v| v.as_str()).unwrap_or("").to_string(),
                h.get(1).and_then(|v| v.as_str()).unwrap_or("").to_string(),
            )
        })
        .collect();
    Ok(html_response(page(
        &format!("Event {id}"),
        Some(&s),
        html! {
            h1 { "Event " (id) }
            div #event-detail data-id=(id) {
                table {
                    tr { th { "stored id" } td #event-id { (ev.id) } }
                    tr { th { "provider" } td #event-provider { (ev.provider) } }
                    tr { th { "provider event id" } td #event-provider-event-id { (ev.provider_event_id) } }
                    tr { th { "type" } td { (ev.event_type.as_deref().unwrap_or("-")) } }
                    tr { th { "received" } td { (ts(ev.received_at)) } }
                    tr { th { "signed at" } td { (ots(ev.signed_at)) } }
                    tr { th { "published to RabbitMQ" } td { (match ev.unpublished_since {
                        Some(t) => format!("not yet: in the outbox since {}", ts(t)),
                        None => "yes".to_string(),
                    }) } }
                    tr { th { "source" } td { (ev.source) } }
                    // Its trace id: what to search the tracing backend for (docs/operations.md, "Tracing").
                    tr { th { "trace id" } td #event-trace-id { (ev.traceparent.as_deref()
                        .and_then(|t| t.get(3..35)).unwrap_or("-")) } }
                }
                (story)
                h2 { "Signature" }
                (signature_section(&state, &ev))
                h2 { "Processing" }
                @if marks.is_empty() && dead.is_empty() { p #processing { "Not processed yet (no marker, no dead letter)." } }
                table #processing {
                    tr { th { "consumer" } th { "outcome" } th { "detail" } th { "at" } }
                    @for m in &marks {
                        tr { td { (m.consumer) } td { (m.outcome) } td { (m.detail.as_deref().unwrap_or("")) } td { (ts(m.processed_at)) } }
                    }
                }
                @if !dead.is_empty() {
                    h2 { "Dead letters" }
                    table #event-dead-letters {
                        tr { th { "consumer" } th { "attempts" } th { "first failed" } th { "last failed" } th { "resolved" } th { "reason" } }
                        @for d in &dead {
                            tr {
                                td { (d.consumer) } td.num { (d.attempts) } td { (ts(d.first_failed_at)) } td { (ts(d.last_failed_at)) }
                                td { (d.resolved_at.map(|t| format!("{} ({})", ts(t), d.resolution.as_deref().unwrap_or("resolved"))).unwrap_or_else(|| "no".into())) }
                                td { pre { (d.reason) } }
                            }
                        }
                    }
                }
                (payments_section(&payments, &transitions, &postings))
                h2 { "Headers" }
                table #headers {
                    @for (k, v) in &headers { tr { th { (k) } td { (v) } } }
                }
                @if !ev.query.is_empty() { p { "query: " code { (ev.query) } } }
                h2 { "Body" }
                p { (ev.body.len()) " bytes, " (body_kind) ". " a #download-body href={ "/events/" (id) "/body" } { "Download the exact bytes" } }
                pre #event-body { (body) }
            }
            h2 { "Replay" }
            form.card #replay method="post" action={ "/events/" (id) "/replay" } {
                p.muted { "Re-delivers this event to the workers. If its effect was applied, nothing changes (the worker's marker); if it never was, it is applied once." }
                input type="hidden" name="csrf" value=(s.csrf);
                label { "reason " input #replay-reason type="text" name="reason" required maxlength=(MAX_REASON_CHARS); }
                " "
                button #replay-submit type="submit" { "Replay" }
            }
        },
    )))
}

/// The event's story as a picture: what the database remembers of it, in time order — the provider's signed
/// timestamp, the edge's commit, the outbox if it still waits there, each consumer's marker, each failure and
/// dead letter, the transitions and postings THIS event caused (those of its payments' other events are on
/// the payment's page), and the facts its processing recorded with each attempt to deliver them (`facts`,
/// from [`fact_moments`]). The relay's publish time is not stored (its outbox row is deleted on RabbitMQ's
/// confirm), nor are the broker's deliveries to the worker: those are in the event's trace.
fn event_story(
    ev: &events::FullRow,
    marks: &[markers::Marker],
    dead: &[dead_letters::DeadLetter],
    transitions: &[payments_view::Transition],
    postings: &[payments_view::Posting],
    facts: Vec<crate::charts::Mark>,
) -> Markup {
    use crate::charts::{timeline, Mark, Tone};
    let mut story = Vec::new();
    if let Some(t) = ev.signed_at {
        story.push(Mark::new(
            t,
            format!("signed by {}", ev.provider),
            Tone::Neutral,
        ));
    }
    story.push(Mark::new(ev.received_at, "stored by the edge", Tone::Ok));
    if let Some(t) = ev.unpublished_since {
        story.push(Mark::new(t, "waiting in the outbox", Tone::Bad));
    }
    for m in marks {
        let tone = match m.outcome.as_str() {
            "applied" | "ignored" => Tone::Ok,
            _ => Tone::Neutral,
        };
        story.push(Mark::new(
            m.processed_at,
            format!("{} by {}", m.outcome, m.consumer),
            tone,
        ));
    }
    for d in dead {
        story.push(Mark::new(
            d.first_failed_at,
            format!("failed in {}", d.consumer),
            Tone::Bad,
        ));
        if d.last_failed_at != d.first_failed_at {
            story.push(Mark::new(
                d.last_failed_at,
                format!("dead-lettered after {} attempts", d.attempts),
                Tone::Bad,
            ));
        }
        if let Some(t) = d.resolved_at {
            let how = d.resolution.as_deref().unwrap_or("resolved");
            story.push(Mark::new(t, format!("dead letter {how}"), Tone::Neutral));
        }
    }
    for t in transitions.iter().filter(|t| t.event_id == ev.id) {
        story.push(Mark::new(
            t.at,
            format!("{} → {}", t.from_status, t.to_status),
            Tone::Neutral,
        ));
    }
    let mut posted = std::collections::BTreeSet::new();
    for l in postings.iter().filter(|l| l.event_id == ev.id) {
        if posted.insert(l.transaction_id) {
            story.push(Mark::new(
                l.created_at,
                format!("{} posted", l.kind),
                Tone::Ok,
            ));
        }
    }
    // Last: a fact is recorded after the change it tells, in the same transaction (same timestamp), and the
    // timeline keeps the order of equal moments.
    story.extend(facts);
    html! {
        h2 { "Timeline" }
        (timeline("event-timeline", &format!("Event {}", ev.id), &story))
    }
}

/// Most delivery attempts read per destination for one page's facts.
const MAX_FACT_ATTEMPTS: i64 = 20;

/// The facts hookline told the merchant's systems about `payments` — `payment.*` about each payment, and
/// `refund.applied` / `dispute.*` about the refunds and disputes its postings name — with each attempt to
/// deliver them, as timeline moments. With `only_event`, only the facts that event's processing recorded (the
/// `webhook_event_id` their bodies carry). Each fact is found by its id ([`hookline_payments::facts::ids_about`],
/// the same rule that recorded it) and each destination's attempts by their index: the cost
/// is bounded by the page's payments and postings, not by the tables.
pub(super) async fn fact_moments(
    state: &ConsoleState,
    payments: &[payments_view::Payment],
    postings: &[payments_view::Posting],
    only_event: Option<i64>,
) -> Result<Vec<crate::charts::Mark>, ConsoleError> {
    use crate::charts::{Mark, Tone};
    use hookline_core::domain_events;
    use hookline_payments::facts::{ids_about, About};
    let mut ids = std::collections::BTreeSet::new();
    for p in payments {
        ids.extend(ids_about(
            &p.provider,
            About::Payment(&p.provider_payment_id),
        ));
        for l in postings {
            match l.kind.as_str() {
                "refund" => ids.extend(ids_about(&p.provider, About::Refund(&l.reference))),
                "dispute" => ids.extend(ids_about(&p.provider, About::Dispute(&l.reference))),
                _ => {}
            }
        }
    }
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<String> = ids.into_iter().collect();
    let facts: Vec<domain_events::Recorded> = domain_events::by_ids(&state.pool, &ids)
        .await
        .context("read the facts")?
        .into_iter()
        .filter(|f| only_event.is_none_or(|e| f.webhook_event_id == Some(e)))
        .collect();
    let seqs: Vec<i64> = facts.iter().map(|f| f.seq).collect();
    let attempts = if seqs.is_empty() {
        Vec::new()
    } else {
        destinations::attempts_of_facts(&state.pool, &seqs, MAX_FACT_ATTEMPTS)
            .await
            .context("read the facts' delivery attempts")?
    };
    let mut moments: Vec<Mark> = facts
        .iter()
        .map(|f| Mark::new(f.created_at, format!("fact {}", f.ty), Tone::Neutral))
        .collect();
    for a in &attempts {
        let status = a.http_status.map(|s| format!(" ({s})")).unwrap_or_default();
        let tone = if a.outcome == "delivered" {
            Tone::Ok
        } else {
            Tone::Bad
        };
        moments.push(Mark::new(
            a.at,
            format!("{} to {}{status}", a.outcome, a.destination),
            tone,
        ));
    }
    Ok(moments)
}

/// An event's payments with their transitions, and the ledger postings of those payments.
pub(super) fn payments_section(
    payments: &[payments_view::Payment],
    transitions: &[payments_view::Transition],
    postings: &[payments_view::Posting],
) -> Markup {
    html! {
        h2 { "Payments" }
        @if payments.is_empty() { p.muted { "This event changed no payment." } }
        @for p in payments {
            div.card.payment {
                p { strong { a href={ "/payments/" (p.id) } { "Payment " (p.id) } ": " (p.provider) " " (p.provider_payment_id) } " — " (p.status) " — "
                    (p.amount.map(money).unwrap_or_else(|| "?".into())) " " (p.currency.as_deref().unwrap_or(""))
                    " (refunded " (money(p.amount_refunded)) ")" }
                table.transitions {
                    tr { th { "from" } th { "to" } th { "event" } th { "at" } }
                    @for t in transitions.iter().filter(|t| t.payment_id == p.id) {
                        tr { td { (t.from_status) } td { (t.to_status) } td { a href={ "/events/" (t.event_id) } { (t.event_id) } } td { (ts(t.at)) } }
                    }
                }
            }
        }
        h2 { "Ledger postings" }
        table #postings {
            tr { th { "transaction" } th { "kind" } th { "reference" } th { "event" } th { "account" } th { "amount" } th { "currency" } }
            @for l in postings {
                tr {
                    td.num { (l.transaction_id) } td { (l.kind) } td { (l.reference) }
                    td { a href={ "/events/" (l.event_id) } { (l.event_id) } }
                    td { (l.account) } td.num { (money(l.amount)) } td { (l.currency) }
                }
            }
        }
    }
}

/// `GET /events/{id}/body`: the stored body, byte for byte.
pub async fn event_body(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    session(&req, &state)?;
    let id = path_id(&req)?;
    let ev = events::get(&state.pool, id)
        .await
        .context("read the event")?
        .ok_or(ConsoleError::NotFound)?;
    Ok(secure(HttpResponse::Ok())
        .content_type("application/octet-stream")
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!("attachment; filename=\"event-{id}.body\""),
        ))
        .body(ev.body))
}

// ---------------------------------------------------------------------------------------------- actions
