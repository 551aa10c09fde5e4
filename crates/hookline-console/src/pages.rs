//! The console's handlers: one function per page or action. Reads go through the hookline-core module that owns
//! each table; actions through [`hookline_ops::replay`] (the CLI's engine).

use std::sync::Arc;

use actix_web::cookie::{time::Duration as CookieDuration, Cookie, SameSite};
use actix_web::http::header;
use actix_web::{web, HttpRequest, HttpResponse};
use anyhow::Context;
use hookline_core::{audit, consumers, dead_letters, events, markers};
use hookline_delivery::destinations;
use hookline_ops::replay::{self, Filter, Outcome, RunKind, Target};
use hookline_payments::{intents, outbound_requests, view as payments_view};
use maud::{html, Markup};
use secrecy::SecretString;
use time::OffsetDateTime;

use super::auth::{self, LoginRefused, Session, LOGIN_COOKIE, SESSION_COOKIE};
use super::views::{self, money, ots, page, ts};
use super::{html as html_response, secure, ConsoleError, ConsoleState, MAX_REASON_CHARS};

type State = web::Data<ConsoleState>;

/// Rows per page of the lists.
const PAGE_ROWS: u32 = 50;
/// Longest accepted filter value (ids, types, names).
const MAX_FILTER_CHARS: usize = 200;

/// Longest key of a form or query field.
const MAX_KEY_CHARS: usize = 64;
/// Longest value of any form or query field (the longest legitimate one is a reason, or a replay's
/// confirmation token); each field has its own, smaller, bound on top ([`MAX_FILTER_CHARS`], [`MAX_REASON_CHARS`]).
const MAX_VALUE_CHARS: usize = 4096;

/// A parsed `application/x-www-form-urlencoded` body or query string (repeated keys kept), every key and value
/// already checked with [`hookline_core::input`] (no NUL, bounded): the ONE place console input enters, so no
/// handler can skip the check. POST handlers take it as an extractor, which reads the body through
/// [`hookline_web::body::read_bounded`] (413 past [`super::MAX_FORM_BYTES`]); GET handlers build it with
/// [`Form::query`].
pub(super) struct Form(Vec<(String, String)>);

impl Form {
    fn parse(bytes: &[u8]) -> Result<Form, ConsoleError> {
        let pairs: Vec<(String, String)> = form_urlencoded::parse(bytes).into_owned().collect();
        for (k, v) in &pairs {
            hookline_core::input::line("field name", k, MAX_KEY_CHARS)?;
            hookline_core::input::text(k, v, MAX_VALUE_CHARS)?;
        }
        Ok(Form(pairs))
    }

    /// The request's query string, checked.
    fn query(req: &HttpRequest) -> Result<Form, ConsoleError> {
        Form::parse(req.query_string().as_bytes())
    }

    /// The first value of `name`, trimmed, `None` when absent or empty.
    fn get(&self, name: &str) -> Option<String> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.trim().to_string())
            .filter(|v| !v.is_empty())
    }

    fn all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A bounded filter value.
    fn filter_value(&self, name: &str) -> Result<Option<String>, ConsoleError> {
        match self.get(name) {
            Some(v) => Ok(Some(
                hookline_core::input::text(name, &v, MAX_FILTER_CHARS)?.to_string(),
            )),
            None => Ok(None),
        }
    }

    fn instant(&self, name: &str) -> Result<Option<OffsetDateTime>, ConsoleError> {
        self.filter_value(name)?
            .map(|v| {
                parse_instant(&v).ok_or_else(|| {
                    ConsoleError::BadRequest(format!(
                        "{name}: '{v}' is neither an RFC 3339 time nor a duration ago like 2h"
                    ))
                })
            })
            .transpose()
    }

    fn reason(&self) -> Result<String, ConsoleError> {
        let reason = self.get("reason").ok_or_else(|| {
            ConsoleError::BadRequest(
                "a reason is required: say why (it is recorded in the audit log)".into(),
            )
        })?;
        hookline_core::input::text("reason", &reason, MAX_REASON_CHARS)?;
        if reason
            .chars()
            .any(|c| c.is_control() && c != '\n' && c != '\r' && c != '\t')
        {
            return Err(ConsoleError::BadRequest(
                "the reason contains control characters".into(),
            ));
        }
        Ok(reason)
    }
}

impl actix_web::FromRequest for Form {
    type Error = ConsoleError;
    type Future = futures::future::LocalBoxFuture<'static, Result<Form, ConsoleError>>;

    fn from_request(req: &HttpRequest, payload: &mut actix_web::dev::Payload) -> Self::Future {
        let req = req.clone();
        let payload = <web::Payload as actix_web::FromRequest>::from_request(&req, payload);
        Box::pin(async move {
            let payload = payload
                .await
                .map_err(|_| ConsoleError::BadRequest("the form could not be read".into()))?;
            let timeout = req
                .app_data::<State>()
                .map(|s| s.config.edge.body_read_timeout)
                .unwrap_or(std::time::Duration::from_secs(10));
            let body =
                hookline_web::body::read_bounded(&req, payload, super::MAX_FORM_BYTES, timeout)
                    .await?;
            Form::parse(&body)
        })
    }
}

/// A point in time: RFC 3339 (`2026-11-30T04:00:00Z`) or a duration ago (`2h`), as `hookline replay` accepts.
fn parse_instant(s: &str) -> Option<OffsetDateTime> {
    if let Ok(t) = OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339) {
        return Some(t);
    }
    let ago = humantime::parse_duration(s).ok()?;
    OffsetDateTime::now_utc().checked_sub(time::Duration::try_from(ago).ok()?)
}

fn cookie(
    name: &str,
    value: String,
    max_age: std::time::Duration,
    secure_flag: bool,
) -> Cookie<'static> {
    Cookie::build(name.to_string(), value)
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .secure(secure_flag)
        .max_age(CookieDuration::seconds(max_age.as_secs() as i64))
        .finish()
}

fn expired_cookie(name: &str) -> Cookie<'static> {
    let mut c = Cookie::build(name.to_string(), "")
        .path("/")
        .http_only(true)
        .same_site(SameSite::Strict)
        .finish();
    c.make_removal();
    c
}

/// The live session of the request, or a redirect to the login page.
fn session(req: &HttpRequest, state: &ConsoleState) -> Result<Session, ConsoleError> {
    req.cookie(SESSION_COOKIE)
        .and_then(|c| state.auth.session(c.value()))
        .ok_or(ConsoleError::LoginRequired)
}

/// The session of a POST whose form carries its CSRF token; 403 otherwise.
fn session_with_csrf(
    req: &HttpRequest,
    state: &ConsoleState,
    form: &Form,
) -> Result<Session, ConsoleError> {
    let s = session(req, state)?;
    match form.get("csrf") {
        Some(token) if auth::same_token(&token, &s.csrf) => Ok(s),
        _ => {
            tracing::warn!(operator = %s.operator, "console POST refused: missing or wrong CSRF token");
            Err(ConsoleError::Csrf)
        }
    }
}

/// Who an action is audited as: the console operator, marked as such.
fn audit_operator(s: &Session) -> String {
    format!("console:{}", s.operator)
}

fn see_other(location: &str) -> HttpResponse {
    secure(HttpResponse::SeeOther())
        .insert_header((header::LOCATION, location.to_string()))
        .finish()
}

fn query_string(pairs: &[(&str, Option<String>)]) -> String {
    let mut ser = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        if let Some(v) = v {
            ser.append_pair(k, v);
        }
    }
    ser.finish()
}

// ---------------------------------------------------------------------------------------------- login

fn login_page(message: Option<&str>, login_token: &str) -> Markup {
    page(
        "Log in",
        None,
        html! {
            h1 { "Operator console" }
            @if let Some(m) = message { p.bad { (m) } }
            form #login method="post" action="/login" {
                input type="hidden" name="csrf" value=(login_token);
                p { label { "Name " input #login-name type="text" name="name" autocomplete="username" autofocus; } }
                p { label { "Password " input #login-password type="password" name="password" autocomplete="current-password"; } }
                p { button #login-submit type="submit" { "Log in" } }
            }
        },
    )
}

/// The login form with its pre-login token (cookie + hidden field). The browser's current token is kept when it
/// has one: a page's own sub-requests (the favicon) land here too and must not invalidate the form on screen.
fn login_response(
    req: &HttpRequest,
    state: &ConsoleState,
    status: actix_web::http::StatusCode,
    message: Option<&str>,
) -> HttpResponse {
    let token = req
        .cookie(LOGIN_COOKIE)
        .map(|c| c.value().to_string())
        .filter(|t| t.len() == 64 && t.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_else(auth::random_token);
    secure(HttpResponse::build(status))
        .cookie(cookie(
            LOGIN_COOKIE,
            token.clone(),
            std::time::Duration::from_secs(600),
            state.console.secure_cookie,
        ))
        .content_type("text/html; charset=utf-8")
        .body(login_page(message, &token).into_string())
}

/// `GET /login`.
pub async fn login_form(req: HttpRequest, state: State) -> HttpResponse {
    if session(&req, &state).is_ok() {
        return see_other("/");
    }
    login_response(&req, &state, actix_web::http::StatusCode::OK, None)
}

/// `POST /login`: name, password and the pre-login token.
pub async fn login(req: HttpRequest, state: State, form: Form) -> HttpResponse {
    let expected = req.cookie(LOGIN_COOKIE).map(|c| c.value().to_string());
    let presented = form.get("csrf");
    let csrf_ok = matches!((&expected, &presented), (Some(e), Some(p)) if auth::same_token(e, p));
    if !csrf_ok {
        return ConsoleError::Csrf.error_response_of();
    }
    let name = form.get("name").unwrap_or_default();
    let password = SecretString::from(
        form.0
            .iter()
            .find(|(k, _)| k == "password")
            .map(|(_, v)| v.clone())
            .unwrap_or_default(),
    );
    let peer = req.peer_addr().map(|a| a.ip());
    let device = req
        .cookie(auth::DEVICE_COOKIE)
        .map(|c| c.value().to_string());
    let operator = name.chars().take(64).collect::<String>();
    let refused = |status: actix_web::http::StatusCode, message: &str, retry_after: Option<u64>| {
        let mut res = login_response(&req, &state, status, Some(message));
        if let Some(secs) = retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(secs));
        }
        res
    };
    match state
        .auth
        .login(&name, password, peer, device.as_deref())
        .await
    {
        Ok(ok) => {
            tracing::info!(operator = %ok.session.operator, "console login");
            secure(HttpResponse::SeeOther())
                .cookie(cookie(
                    SESSION_COOKIE,
                    ok.token,
                    state.auth.ttl(),
                    state.console.secure_cookie,
                ))
                .cookie(cookie(
                    auth::DEVICE_COOKIE,
                    ok.device,
                    auth::DEVICE_TTL,
                    state.console.secure_cookie,
                ))
                .cookie(expired_cookie(LOGIN_COOKIE))
                .insert_header((header::LOCATION, "/"))
                .finish()
        }
        Err(LoginRefused::BadCredentials) => {
            tracing::warn!(operator = ?operator, peer = ?peer, "console login refused: bad credentials");
            refused(
                actix_web::http::StatusCode::UNAUTHORIZED,
                "Wrong name or password.",
                None,
            )
        }
        Err(LoginRefused::RateLimited { retry_after }) => {
            tracing::warn!(operator = ?operator, peer = ?peer, "console login refused: too many failures");
            let minutes = retry_after.as_secs().div_ceil(60).max(1);
            refused(
                actix_web::http::StatusCode::TOO_MANY_REQUESTS,
                &format!("Too many failed logins: try again in {minutes} minutes."),
                Some(retry_after.as_secs().max(1)),
            )
        }
        Err(LoginRefused::Busy) => {
            // A flood answers here by the hundred: counted in hookline_console_logins_total, logged at debug only.
            tracing::debug!(operator = ?operator, peer = ?peer, "console login refused: check pool busy");
            refused(
                actix_web::http::StatusCode::TOO_MANY_REQUESTS,
                "The console is busy checking other logins: try again in a few seconds.",
                Some(1),
            )
        }
    }
}

/// `POST /logout`.
pub async fn logout(
    req: HttpRequest,
    state: State,
    form: Form,
) -> Result<HttpResponse, ConsoleError> {
    let s = session_with_csrf(&req, &state, &form)?;
    if let Some(c) = req.cookie(SESSION_COOKIE) {
        state.auth.logout(c.value());
    }
    tracing::info!(operator = %s.operator, "console logout");
    Ok(secure(HttpResponse::SeeOther())
        .cookie(expired_cookie(SESSION_COOKIE))
        .insert_header((header::LOCATION, "/login"))
        .finish())
}

impl ConsoleError {
    fn error_response_of(self) -> HttpResponse {
        actix_web::ResponseError::error_response(&self)
    }
}

/// Anything else: the login page for strangers, 404 for operators.
pub async fn not_found(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    session(&req, &state)?;
    Err(ConsoleError::NotFound)
}

// ---------------------------------------------------------------------------------------------- overview

/// The edge's acknowledgement latency metric (read from the edge's `/metrics`), for the overview's percentiles.
const ACK_METRIC: &str = "hookline_edge_ack_seconds";

fn figures(state: &ConsoleState, snap: &super::Snapshot) -> Markup {
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
    html! {
        p.muted { "Figures read from PostgreSQL and RabbitMQ at " (ts(snap.read_at)) " (" (age) " s ago); refreshed every 5 s." }
        @match &snap.result {
            Err(e) => { p.bad #overview-error { (e) } }
            Ok(r) => {
                @if r.attention.is_empty() {
                    p.ok #status { "status: OK" }
                } @else {
                    div.attention #status {
                        @for a in &r.attention { div { "ATTENTION: " (a) } }
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
                    tr { th { "outbound pending / failed" } td.num { (r.outbound.pending) " / " (r.outbound.failed) } }
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

/// The `{id}` of the path: a stored event id, checked with [`hookline_core::input`] like every other value;
/// anything that is not one (NUL, too long, not a number) is 404, as an id that does not exist.
fn event_id_from(req: &HttpRequest) -> Result<i64, ConsoleError> {
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
    let check = |now: i64| {
        hookline_signature::Verifier {
            scheme: provider.scheme,
            secrets: &secrets,
            tolerance_secs: provider.tolerance_secs,
            now_unix: now,
        }
        .verify(&hookline_signature::Request {
            headers: &headers,
            query: &ev.query,
            body: &ev.body,
        })
    };
    let now = OffsetDateTime::now_utc().unix_timestamp();
    let received = ev.received_at.unix_timestamp();
    let now_result = check(now);
    let then_result = check(received);
    let lines = |r, at, label| hookline_signature::outcome_lines(r, secrets.len(), at, label);
    html! {
        table #signature {
            tr {
                th { "verified now, with the " (secrets.len()) " configured secret(s) of " (ev.provider) " (" (provider.scheme.as_str()) ")" }
                td class=(if now_result.is_ok() { "ok" } else { "bad" }) {
                    pre #signature-now { (lines(&now_result, now, "now").join("\n")) }
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
    let id = event_id_from(&req)?;
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
                }
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
                h2 { "Payments" }
                @if payments.is_empty() { p.muted { "This event changed no payment." } }
                @for p in &payments {
                    div.card.payment {
                        p { strong { (p.provider) " " (p.provider_payment_id) } " — " (p.status) " — "
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
                    @for l in &postings {
                        tr {
                            td.num { (l.transaction_id) } td { (l.kind) } td { (l.reference) }
                            td { a href={ "/events/" (l.event_id) } { (l.event_id) } }
                            td { (l.account) } td.num { (money(l.amount)) } td { (l.currency) }
                        }
                    }
                }
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

/// `GET /events/{id}/body`: the stored body, byte for byte.
pub async fn event_body(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    session(&req, &state)?;
    let id = event_id_from(&req)?;
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

fn target(state: &ConsoleState) -> Target {
    Target {
        amqp_urls: state.config.amqp_urls.clone(),
        topology: hookline_bus::Topology::new(
            &state.config.amqp.prefix,
            state.config.amqp.delivery_limit,
        ),
        confirm_timeout: state.config.relay.confirm_timeout,
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
    let id = event_id_from(&req)?;
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
                        td.num { (p.id) } td { (p.provider) } td { (p.provider_payment_id) } td { (p.status) }
                        td.num { (p.amount.map(money).unwrap_or_else(|| "?".into())) " " (p.currency.as_deref().unwrap_or("")) }
                        td.num { (money(p.amount_refunded)) } td { (ts(p.updated_at)) }
                    }
                }
            }
            @if let Some(n) = next { p { a href={ "/payments?before=" (n) } { "older »" } } }
        },
    )))
}

/// `GET /intents`: outbound payment intents and their requests to the gateway (attempts, last answer).
pub async fn intents(req: HttpRequest, state: State) -> Result<HttpResponse, ConsoleError> {
    let s = session(&req, &state)?;
    let q = Form::query(&req)?;
    let before = q.get("before").and_then(|b| b.parse::<i64>().ok());
    let rows = intents::recent(&state.pool, before, i64::from(PAGE_ROWS))
        .await
        .context("list intents")?;
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
            table #intents {
                tr { th { "intent" } th { "provider" } th { "amount" } th { "status" } th { "gateway id" } th { "refunded" } th { "created" } th { "requests (kind: status, attempts, last answer)" } }
                @for i in &rows {
                    tr {
                        td { (i.public_id) } td { (i.provider) } td.num { (money(i.amount)) " " (i.currency) } td { (i.status) }
                        td { (i.provider_payment_id.as_deref().unwrap_or("-")) } td.num { (money(i.refunded)) } td { (ts(i.created_at)) }
                        td {
                            @for r in requests.iter().filter(|r| r.intent_id == i.id) {
                                div {
                                    (r.kind) ": " (r.status) ", " (r.attempts) " attempt(s)"
                                    @if let Some(st) = r.last_status { ", HTTP " (st) }
                                    @if let Some(e) = &r.last_error { ", " (e) }
                                    @if r.status == "pending" { ", next " (ts(r.next_attempt_at)) }
                                }
                            }
                        }
                    }
                }
            }
            @if rows.is_empty() { p.muted { "No outbound intent yet." } }
            @if let Some(n) = next { p { a href={ "/intents?before=" (n) } { "older »" } } }
        },
    )))
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
