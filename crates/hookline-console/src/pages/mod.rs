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

use crate::auth::{self, LoginRefused, Session, LOGIN_COOKIE, SESSION_COOKIE};
use crate::views::{self, money, ots, page, ts};
use crate::{html as html_response, secure, ConsoleError, ConsoleState, MAX_REASON_CHARS};

type State = web::Data<ConsoleState>;

mod billing;
mod event_pages;
mod login;
mod replays;
mod tables;

pub use billing::billing;
use event_pages::path_id;
pub(crate) use event_pages::ACK_METRIC;
pub use event_pages::{event_body, event_detail, events, overview, overview_figures};
pub use login::{login, login_form, logout};
pub use replays::{dead_letters, redrive, replay_one, replay_set};
pub use tables::{audit, deliveries, intents, payment_detail, payments, redeliver};

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
/// [`hookline_web::body::read_bounded`] (413 past [`crate::MAX_FORM_BYTES`]); GET handlers build it with
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
                .map(|s| s.edge.body_read_timeout)
                .unwrap_or(std::time::Duration::from_secs(10));
            let body =
                hookline_web::body::read_bounded(&req, payload, crate::MAX_FORM_BYTES, timeout)
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
