//! Reading a payment from its provider's API, for providers whose notifications only name the resource
//! (Mercado Pago). Runs in [`crate::Handler::prepare`]: before the transaction, with no row locked and no pooled
//! connection held, and with no side effect (a `GET`), so it may run several times for one event.
//!
//! Classification decides what the worker does next: a timeout, a connection error, a 5xx or a 429 is
//! transient (retried in-process with backoff, without burning the delivery limit); 404 and refused
//! credentials are permanent and visible — dead-lettered with the status and what to check — never silent.

use std::time::{Duration, Instant};

use secrecy::{ExposeSecret, SecretString};

use crate::handler::HandleError;

/// Largest resource body read; a payment is a few KB.
const MAX_RESOURCE_BYTES: usize = 1024 * 1024;

/// Metric names of API reads.
pub mod metric {
    /// Counter: API reads by `provider` and `outcome` (ok, not_found, refused, transient, error).
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
    http: reqwest::Client,
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
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("hookline/", env!("CARGO_PKG_VERSION")))
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
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
        self.get(url).await
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
        let mut req = self.http.get(url.clone());
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
