//! The one constructor of every outbound HTTP client of the worker: the dispatcher (charges and refunds), the
//! provider API reads (Mercado Pago's payment fetch, reconciliation) and the domain-event delivery.
//!
//! Why one constructor: each of these clients sends credentials (a gateway token, an `Idempotency-Key`, a
//! signed fact) to an address taken from the configuration, and each decides what the answer means. reqwest's
//! default client follows up to 10 redirects, re-sending a `307`/`308` request with its body and headers to
//! wherever `Location` points (an internal admin endpoint, a metadata service), and then reports the final
//! answer as if the configured server had given it; it also sends through any `HTTP(S)_PROXY` found in the
//! environment. Here:
//! * redirects are never followed ([`reqwest::redirect::Policy::none`]): a `3xx` reaches the caller as the
//!   answer it is, and each caller classifies it (the dispatcher marks the request for attention, the payment
//!   fetch dead-letters the event, the delivery retries; all record the reason);
//! * no proxy is taken from the environment ([`reqwest::ClientBuilder::no_proxy`]): where the requests go is
//!   decided by the configuration alone;
//! * every client has a connect and a whole-request timeout, and says who it is (`hookline/VERSION`).
//!
//! Building can fail only when the TLS backend cannot be initialised; callers report that instead of falling
//! back to a default client (which would follow redirects again).

use std::time::Duration;

use anyhow::Context;

/// The `User-Agent` of every outbound request.
pub const USER_AGENT: &str = concat!("hookline/", env!("CARGO_PKG_VERSION"));

/// An HTTP client that follows no redirect, uses no proxy from the environment, connects within
/// `connect_timeout` and gives up on a whole request (answer body included) after `request_timeout`.
pub fn client(
    connect_timeout: Duration,
    request_timeout: Duration,
) -> anyhow::Result<reqwest::Client> {
    builder(connect_timeout, request_timeout)
        .build()
        .context("build the outbound HTTP client")
}

/// [`client`]'s settings, not yet built: for a caller that adds to them (the delivery to merchant-made webhook
/// endpoints adds a resolver that refuses non-public addresses). Nothing added may undo them.
pub fn builder(connect_timeout: Duration, request_timeout: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(connect_timeout)
        .timeout(request_timeout)
        .user_agent(USER_AGENT)
}

/// `Location` of a redirect answer, for the reason recorded with it: scheme, host, port and path only (a
/// query may carry a token), without control characters, at most 200 characters. `"(none)"` when absent or
/// unreadable.
pub fn redirect_target(headers: &reqwest::header::HeaderMap) -> String {
    let Some(raw) = headers
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
    else {
        return "(none)".into();
    };
    let shown = match url::Url::parse(raw) {
        Ok(mut u) => {
            u.set_query(None);
            u.set_fragment(None);
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        // A relative Location: its path without the query.
        Err(_) => raw.split(['?', '#']).next().unwrap_or_default().to_owned(),
    };
    shown
        .chars()
        .filter(|c| !c.is_control())
        .take(200)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_targets_hide_queries_and_userinfo() {
        let mut h = reqwest::header::HeaderMap::new();
        assert_eq!(redirect_target(&h), "(none)");
        h.insert(
            reqwest::header::LOCATION,
            "http://u:p@127.0.0.1:9/internal-admin?token=s3cret#x"
                .parse()
                .unwrap(),
        );
        assert_eq!(redirect_target(&h), "http://127.0.0.1:9/internal-admin");
        h.insert(
            reqwest::header::LOCATION,
            "/elsewhere?key=1".parse().unwrap(),
        );
        assert_eq!(redirect_target(&h), "/elsewhere");
    }
}
