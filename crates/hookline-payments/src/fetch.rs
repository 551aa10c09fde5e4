//! Reading a payment from its provider's API, for providers whose notifications only name the resource
//! (Mercado Pago). Runs in [`hookline_core::handler::Handler::prepare`]: before the transaction, with no row locked and no pooled
//! connection held, and with no side effect (a `GET`), so it may run several times for one event.
//!
//! Classification decides what the worker does next: a timeout, a connection error, a 5xx or a 429 is
//! transient (retried in-process with backoff, without burning the delivery limit); 404 and refused
//! credentials are permanent and visible — dead-lettered with the status and what to check — never silent.
//! A redirect is never followed ([`hookline_core::http::client`]: it would send the access token wherever `Location`
//! points) and is permanent too: the provider's API does not redirect, the configured `api_base` is wrong.
//! A 2xx that is not the payment asked for (not JSON, no id, another id) is permanent as well: whatever
//! answered is not the provider's API, retrying in-process would stall the consumer on a misconfiguration, and
//! a dead-lettered event is redriven once `api_base` is fixed.

use std::sync::Arc;
use std::time::{Duration, Instant};

use secrecy::{ExposeSecret, SecretString};

use hookline_core::handler::HandleError;

/// Largest resource body read; a payment is a few KB.
const MAX_RESOURCE_BYTES: usize = 1024 * 1024;

/// Metric names of API reads.
pub mod metric {
    /// Counter: API reads by `provider` and `outcome` (ok, not_found, refused, redirect, transient, error).
    pub const REQUESTS: &str = "hookline_worker_api_requests_total";
    /// Histogram: seconds per API read, by `provider`.
    pub const SECONDS: &str = "hookline_worker_api_seconds";
}

/// One provider's API: base URL, token and a client with generous, bounded timeouts.
#[derive(Clone)]
pub struct ApiClient {
    provider: String,
    base: url::Url,
    token: Option<SecretString>,
    /// [`hookline_core::http::client`], or why it could not be built (then every read fails transiently with that
    /// reason, never through a default client that would follow redirects).
    http: Result<reqwest::Client, Arc<str>>,
}

impl std::fmt::Debug for ApiClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiClient")
            .field("provider", &self.provider)
            .field("base", &self.base.as_str())
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

impl ApiClient {
    /// A client for `provider` at `base`. Payment APIs are slow under load: 5 s to connect, 30 s per request.
    pub fn new(provider: &str, base: url::Url, token: Option<SecretString>) -> ApiClient {
        let http = hookline_core::http::client(Duration::from_secs(5), Duration::from_secs(30))
            .map_err(|e| Arc::from(format!("{e:#}")));
        ApiClient {
            provider: provider.to_owned(),
            base,
            token,
            http,
        }
    }

    /// `GET {base}/v1/payments/{id}` (Mercado Pago), the raw JSON body.
    pub async fn mercadopago_payment(&self, id: &str) -> Result<Vec<u8>, HandleError> {
        // The id came from signed material and was checked by the caller; still, only path-safe characters.
        if id.is_empty()
            || id.len() > 128
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(HandleError::permanent(format!(
                "payment id {id:?} is not a Mercado Pago resource id"
            )));
        }
        let url = self
            .base
            .join(&format!("v1/payments/{id}"))
            .map_err(|e| HandleError::permanent(format!("cannot build the API URL: {e}")))?;
        let body = self.get(url.clone()).await?;
        // Only the payment asked for is applied: a 2xx from something that is not the provider's API (a
        // portal, a proxy's page, another resource) is not a payment.
        let payment: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
            HandleError::permanent(format!(
                "GET {url}: the answer is not a Mercado Pago payment (not JSON: {e}); check providers.{}.api_base",
                self.provider
            ))
        })?;
        let answered = match &payment["id"] {
            serde_json::Value::Number(n) => Some(n.to_string()),
            serde_json::Value::String(s) => Some(s.clone()),
            _ => None,
        };
        if answered.as_deref() != Some(id) {
            return Err(HandleError::permanent(format!(
                "GET {url}: the answer is not Mercado Pago payment {id} (its \"id\" is {}); check providers.{}.api_base",
                answered.map_or_else(|| "missing".to_owned(), |a| format!("{:?}", a.chars().take(40).collect::<String>())),
                self.provider
            )));
        }
        Ok(body)
    }

    /// `GET {base}/{path}?{query}` and its JSON (list endpoints: Stripe events, Mercado Pago payment search).
    pub async fn get_json(
        &self,
        path: &str,
        query: &[(&str, String)],
    ) -> Result<serde_json::Value, HandleError> {
        let mut url = self
            .base
            .join(path)
            .map_err(|e| HandleError::permanent(format!("cannot build the API URL: {e}")))?;
        url.query_pairs_mut()
            .extend_pairs(query.iter().map(|(k, v)| (*k, v.as_str())));
        let body = self.get(url.clone()).await?;
        serde_json::from_slice(&body)
            .map_err(|e| HandleError::permanent(format!("GET {url}: the answer is not JSON: {e}")))
    }

    async fn get(&self, url: url::Url) -> Result<Vec<u8>, HandleError> {
        let started = Instant::now();
        let http = match &self.http {
            Ok(h) => h,
            Err(e) => {
                return Err(HandleError::Transient(anyhow::anyhow!(
                    "GET {url}: no HTTP client: {e}"
                )))
            }
        };
        let mut req = http.get(url.clone());
        if let Some(token) = &self.token {
            req = req.bearer_auth(token.expose_secret());
        }
        let result = self.read(req, &url).await;
        let outcome = match &result {
            Ok(_) => "ok",
            Err((kind, _)) => kind,
        };
        metrics::counter!(metric::REQUESTS, "provider" => self.provider.clone(), "outcome" => outcome.to_string())
            .increment(1);
        metrics::histogram!(metric::SECONDS, "provider" => self.provider.clone())
            .record(started.elapsed().as_secs_f64());
        result.map_err(|(_, e)| e)
    }

    async fn read(
        &self,
        req: reqwest::RequestBuilder,
        url: &url::Url,
    ) -> Result<Vec<u8>, (&'static str, HandleError)> {
        let transient = |e: anyhow::Error| ("transient", HandleError::Transient(e));
        let mut res = req
            .send()
            .await
            .map_err(|e| transient(anyhow::Error::new(e).context(format!("GET {url}"))))?;
        let status = res.status();
        if status.is_redirection() {
            return Err((
                "redirect",
                HandleError::permanent(format!(
                    "GET {url}: {status}, the API redirected to {} — redirects are not followed; \
                     check providers.{}.api_base",
                    hookline_core::http::redirect_target(res.headers()),
                    self.provider
                )),
            ));
        }
        let mut body = Vec::new();
        while let Some(chunk) = res
            .chunk()
            .await
            .map_err(|e| transient(anyhow::Error::new(e).context(format!("reading {url}"))))?
        {
            if body.len() + chunk.len() > MAX_RESOURCE_BYTES {
                return Err((
                    "error",
                    HandleError::permanent(format!(
                        "GET {url}: the answer is larger than {MAX_RESOURCE_BYTES} bytes"
                    )),
                ));
            }
            body.extend_from_slice(&chunk);
        }
        if status.is_success() {
            return Ok(body);
        }
        let excerpt: String = String::from_utf8_lossy(&body)
            .chars()
            .take(200)
            .filter(|c| !c.is_control())
            .collect();
        match status.as_u16() {
            429 | 500..=599 => Err(transient(anyhow::anyhow!(
                "GET {url}: {status} (will retry): {excerpt}"
            ))),
            404 => Err((
                "not_found",
                HandleError::permanent(format!(
                    "GET {url}: 404, the provider does not know this resource: {excerpt}"
                )),
            )),
            401 | 403 => Err((
                "refused",
                HandleError::permanent(format!(
                    "GET {url}: {status}, the provider refused our credentials \
                     (check providers.{}.api_token): {excerpt}",
                    self.provider
                )),
            )),
            _ => Err((
                "error",
                HandleError::permanent(format!("GET {url}: {status}: {excerpt}")),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// A local server answering every connection with `response` (a whole HTTP/1.1 answer); counts them.
    async fn serve(response: String) -> (url::Url, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = url::Url::parse(&format!("http://{}/", listener.local_addr().expect("addr")))
            .expect("url");
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let response = response.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut read = 0;
                    while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf[read..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => read += n,
                        }
                    }
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (base, hits)
    }

    fn answer(status: &str, extra: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn permanent_reason(r: Result<Vec<u8>, HandleError>) -> String {
        match r {
            Err(HandleError::Permanent(e)) => format!("{e:#}"),
            other => panic!("expected a permanent failure, got {other:?}"),
        }
    }

    /// Issue 25: the payment fetch followed redirects (with the access token) like the dispatcher did. A
    /// redirect to an internal address is not followed: the address receives nothing, the read fails for
    /// good with the reason (the event is dead-lettered, visible), where it pointed shown without its query.
    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        let (internal, internal_hits) = serve(answer(
            "200 OK",
            "content-type: application/json\r\n",
            r#"{"id": 123, "status": "approved"}"#,
        ))
        .await;
        for status in [
            "302 Found",
            "307 Temporary Redirect",
            "308 Permanent Redirect",
        ] {
            let location = format!("location: {internal}internal-admin?token=hidden\r\n");
            let (api, api_hits) = serve(answer(status, &location, "")).await;
            let client = ApiClient::new("mp", api, Some(SecretString::from("TEST-token")));
            let reason = permanent_reason(client.mercadopago_payment("123").await);
            assert!(
                reason.contains("redirects are not followed")
                    && reason.contains("/internal-admin")
                    && reason.contains("providers.mp.api_base")
                    && !reason.contains("hidden"),
                "{reason}"
            );
            assert_eq!(api_hits.load(Ordering::SeqCst), 1);
        }
        assert_eq!(
            internal_hits.load(Ordering::SeqCst),
            0,
            "the redirect was followed"
        );
    }

    /// A 2xx that is not the payment asked for is not applied: not JSON, no id, another payment's id.
    #[tokio::test]
    async fn a_2xx_that_is_not_the_payment_is_refused() {
        for (body, expect) in [
            ("<html>portal</html>", "not JSON"),
            (r#"{"status": "approved"}"#, "missing"),
            (r#"{"id": 999, "status": "approved"}"#, "\"999\""),
        ] {
            let (api, _) = serve(answer("200 OK", "", body)).await;
            let client = ApiClient::new("mp", api, None);
            let reason = permanent_reason(client.mercadopago_payment("123").await);
            assert!(reason.contains(expect), "{body}: {reason}");
        }
        let (api, _) = serve(answer(
            "200 OK",
            "content-type: application/json\r\n",
            r#"{"id": 123, "status": "approved"}"#,
        ))
        .await;
        let client = ApiClient::new("mp", api, None);
        assert!(client.mercadopago_payment("123").await.is_ok());
    }
}
