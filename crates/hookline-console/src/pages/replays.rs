//! Replays and dead-letter redrives from the console, through the CLI's engine (`hookline_ops::replay`), audited
//! as the operator `console:NAME`.

use super::*;

fn target(state: &ConsoleState) -> Target {
    Target {
        amqp_urls: state.config.amqp_urls.clone(),
        topology: hookline_bus::Topology::new(
            &state.config.amqp.prefix,
            state.config.amqp.delivery_limit,
        ),
        confirm_timeout: state.relay.confirm_timeout,
        // The CLI's defaults: a large replay must not starve live traffic.
        rate: 500,
        page_size: 500,
    }
}

fn unavailable(run: i64, e: &anyhow::Error) -> ConsoleError {
    // The cause chain goes to the log; the page says what happened and what to do, naming no internals.
    tracing::error!(run, error.cause_chain = ?format!("{e:#}"), "console replay failed");
    ConsoleError::Unavailable(format!(
        "run {run} is recorded but could not complete (is RabbitMQ reachable?); resume it with \
         `hookline replay --resume {run}`"
    ))
}

/// Executes a started run in the background (sets can be large); the audit page shows its progress. When it
/// fails or the console stops, the run stays resumable (`hookline replay --resume ID`).
fn spawn_run(state: Arc<ConsoleState>, mut run: replay::Run) {
    actix_web::rt::spawn(async move {
        let target = target(&state);
        let id = run.id;
        let result = match run.kind {
            RunKind::Replay => replay::execute(&state.pool, &target, &mut run, &state.runs, |_| {})
                .await
                .map(|(o, _)| o),
            RunKind::DlqRedrive => {
                replay::redrive(&state.pool, &target, &mut run, &state.runs, |_| {})
                    .await
                    .map(|r| r.outcome)
            }
        };
        match result {
            Ok(Outcome::Done) => {
                tracing::info!(run = id, published = run.published, "console run finished")
            }
            Ok(other) => {
                tracing::warn!(run = id, outcome = ?other, "console run stopped; resumable with hookline replay --resume")
            }
            Err(e) => {
                tracing::error!(run = id, error.cause_chain = ?format!("{e:#}"), "console run failed; resumable with hookline replay --resume")
            }
        }
    });
}

/// `POST /events/{id}/replay`: replays one event now (one event: done within the request), audited.
pub async fn replay_one(
    req: HttpRequest,
    state: State,
    form: Form,
) -> Result<HttpResponse, ConsoleError> {
    let s = session_with_csrf(&req, &state, &form)?;
    let id = path_id(&req)?;
    let reason = form.reason()?;
    if !events::exists(&state.pool, id)
        .await
        .context("look the event up")?
    {
        return Err(ConsoleError::NotFound);
    }
    let filter = Filter {
        ids: vec![id],
        state: "all".into(),
        ..Filter::default()
    };
    let mut run = replay::start(
        &state.pool,
        RunKind::Replay,
        filter,
        &reason,
        &audit_operator(&s),
    )
    .await?;
    tracing::info!(operator = %s.operator, run = run.id, event = id, "console replay of one event");
    let outcome = replay::execute(&state.pool, &target(&state), &mut run, &state.runs, |_| {})
        .await
        .map_err(|e| unavailable(run.id, &e))?
        .0;
    if outcome != Outcome::Done {
        return Err(unavailable(run.id, &anyhow::anyhow!("{outcome:?}")));
    }
    Ok(see_other(&format!("/audit?run={}#run-{}", run.id, run.id)))
}

/// `POST /replay`: replays a filtered set. Without `confirmation` it only counts (dry run) and shows a confirm
/// form carrying what it counted ([`replay::Confirmation`]: the selection with its times resolved, and the
/// count); with it, it starts the audited run in the background, only if the selection still holds exactly
/// that many events (409 otherwise: nothing replayed, the operator runs the dry run again).
pub async fn replay_set(
    req: HttpRequest,
    state: State,
    form: Form,
) -> Result<HttpResponse, ConsoleError> {
    let s = session_with_csrf(&req, &state, &form)?;
    let reason = form.reason()?;
    if let Some(token) = form.get("confirmation") {
        let confirmation = replay::Confirmation::parse(&token).map_err(confirm_error)?;
        if let Some(p) = &confirmation.filter.provider {
            if !state.config.providers.contains_key(p) {
                return Err(ConsoleError::BadRequest(format!(
                    "provider {p}: no such provider in the configuration"
                )));
            }
        }
        let run = replay::start_confirmed(
            &state.pool,
            RunKind::Replay,
            &confirmation,
            &reason,
            &audit_operator(&s),
        )
        .await
        .map_err(|e| {
            tracing::warn!(operator = %s.operator, error = %e, "console replay of a set refused");
            confirm_error(e)
        })?;
        tracing::info!(operator = %s.operator, run = run.id, selected = run.selected, confirmed = confirmation.count, "console replay of a set");
        let id = run.id;
        spawn_run(state.into_inner(), run);
        return Ok(see_other(&format!("/audit?run={id}#run-{id}")));
    }
    let selection = form.get("selection").unwrap_or_default();
    if !["unprocessed", "dead", "all"].contains(&selection.as_str()) {
        return Err(ConsoleError::BadRequest(
            "choose which events: unprocessed, dead or all".into(),
        ));
    }
    let provider = form.filter_value("provider")?;
    if let Some(p) = &provider {
        if !state.config.providers.contains_key(p) {
            return Err(ConsoleError::BadRequest(format!(
                "provider {p}: no such provider in the configuration"
            )));
        }
    }
    // Relative times (`2h`) are resolved now: the confirmation carries the instants that were counted.
    let filter = Filter {
        provider,
        event_type: form.filter_value("type")?,
        since: form.instant("since")?,
        until: form.instant("until")?,
        ids: Vec::new(),
        state: selection,
    };
    let selected = replay::count(&state.pool, &filter, 0).await?;
    let sample = replay::page(&state.pool, &filter, 0, 10).await?;
    let token = replay::Confirmation {
        filter,
        count: selected,
    }
    .token();
    Ok(html_response(page(
        "Replay: dry run",
        Some(&s),
        html! {
            h1 { "Replay: dry run" }
            p #replay-count data-count=(selected) { (selected) " events would be re-delivered (nothing changed yet)." }
            table {
                tr { th { "id" } th { "provider" } th { "provider event id" } th { "type" } th { "received" } th { "state" } }
                @for r in &sample {
                    tr { td { a href={ "/events/" (r.id) } { (r.id) } } td { (r.provider) } td { (r.provider_event_id) }
                         td { (r.event_type.as_deref().unwrap_or("-")) } td { (ts(r.received_at)) } td { (r.state) } }
                }
            }
            @if selected > 0 {
                form.card #replay-confirm method="post" action="/replay" {
                    input type="hidden" name="csrf" value=(s.csrf);
                    input type="hidden" name="reason" value=(reason);
                    input type="hidden" name="confirmation" value=(token);
                    p { "Reason: " (reason) }
                    p.muted { "The replay starts only if the selection still holds exactly " (selected) " events; otherwise nothing is replayed and you count again." }
                    button #replay-confirm-submit type="submit" { "Replay " (selected) " events" }
                }
            }
            p { a href="/events" { "Back to the events" } }
        },
    )))
}

fn confirm_error(e: replay::ConfirmError) -> ConsoleError {
    match e {
        replay::ConfirmError::Changed { .. } => ConsoleError::Conflict(e.to_string()),
        replay::ConfirmError::Other(e) => ConsoleError::Internal(e),
        other => ConsoleError::BadRequest(other.to_string()),
    }
}

// ---------------------------------------------------------------------------------------------- dead letters

/// Most dead letters listed on one page.
const MAX_DEAD_LETTERS_SHOWN: i64 = 500;

/// `GET /dead-letters`: unresolved dead letters with their reasons, and the redrive form.
pub async fn dead_letters(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let total = dead_letters::unresolved_count(&state.pool)
        .await
        .context("count dead letters")?;
    let rows = dead_letters::oldest_unresolved(&state.pool, consumers::ALL, MAX_DEAD_LETTERS_SHOWN)
        .await
        .context("list dead letters")?;
    Ok(html_response(page(
        "Dead letters",
        Some(&s),
        html! {
            h1 { "Dead letters" }
            p { (total) " unresolved dead letter(s)." @if total > MAX_DEAD_LETTERS_SHOWN { " The oldest " (MAX_DEAD_LETTERS_SHOWN) " are shown." } }
            form #redrive method="post" action="/dead-letters/redrive" {
                input type="hidden" name="csrf" value=(s.csrf);
                table #dead-letters {
                    tr { th { "redrive" } th { "event" } th { "consumer" } th { "provider" } th { "type" } th { "attempts" } th { "first failed" } th { "last failed" } th { "reason" } }
                    @for d in &rows {
                        tr {
                            td { input type="checkbox" name="id" value=(d.event_id); }
                            td { a href={ "/events/" (d.event_id) } { (d.event_id) } }
                            td { (d.consumer) }
                            td { (d.provider.as_deref().unwrap_or("(purged)")) }
                            td { (d.event_type.as_deref().unwrap_or("-")) }
                            td.num { (d.attempts) }
                            td { (ts(d.first_failed_at)) } td { (ts(d.last_failed_at)) }
                            td { pre { (d.reason) } }
                        }
                    }
                }
                p {
                    label { input type="checkbox" name="all" value="1"; " every unresolved dead letter" }
                    " "
                    label { "reason " input #redrive-reason type="text" name="reason" required maxlength=(MAX_REASON_CHARS); }
                    " "
                    button #redrive-submit type="submit" { "Redrive" }
                }
                p.muted { "Fix the cause first: a redrive re-delivers each selected event once; the worker applies it and resolves its dead letter." }
            }
        },
    )))
}

/// `POST /dead-letters/redrive`: the checked ids, or every unresolved one; audited as `dlq_redrive`.
pub async fn redrive(
    req: HttpRequest,
    state: State,
    form: Form,
) -> Result<HttpResponse, ConsoleError> {
    let s = session_with_csrf(&req, &state, &form)?;
    let reason = form.reason()?;
    let ids: Vec<i64> = form
        .all("id")
        .map(|v| {
            v.trim()
                .parse::<i64>()
                .map_err(|_| ConsoleError::BadRequest("id: not an event id".into()))
        })
        .collect::<Result<_, _>>()?;
    let all = form.get("all").is_some();
    if ids.is_empty() && !all {
        return Err(ConsoleError::BadRequest(
            "choose dead letters to redrive, or every one".into(),
        ));
    }
    if ids.len() > 10_000 {
        return Err(ConsoleError::BadRequest(
            "at most 10000 ids at once; use every one instead".into(),
        ));
    }
    // As `hookline dlq redrive` does first: record a reason for DLQ messages that have none.
    let topology =
        hookline_bus::Topology::new(&state.config.amqp.prefix, state.config.amqp.delivery_limit);
    for consumer in consumers::ALL {
        if let Err(e) = hookline_bus::dead_letters::reconcile(
            &state.pool,
            &state.config.amqp_urls,
            &topology,
            consumer,
            100_000,
        )
        .await
        {
            tracing::warn!(error.cause_chain = ?format!("{e:#}"), "console redrive: cannot inspect the dead-letter queue");
        }
    }
    let filter = replay::redrive_filter(if all { Vec::new() } else { ids }, None, None);
    let run = replay::start(
        &state.pool,
        RunKind::DlqRedrive,
        filter,
        &reason,
        &audit_operator(&s),
    )
    .await?;
    tracing::info!(operator = %s.operator, run = run.id, selected = run.selected, "console dead-letter redrive");
    let id = run.id;
    spawn_run(state.into_inner(), run);
    Ok(see_other(&format!("/audit?run={id}#run-{id}")))
}

// ---------------------------------------------------------------------------------------------- money
