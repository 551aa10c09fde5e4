//! The login and logout pages: the login form with its token, the rate-limited check, the session cookies.

use super::*;

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
