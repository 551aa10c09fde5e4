//! What a sandbox plays and how it runs: [`Scheme`], [`SandboxProvider`], [`SandboxSettings`]. A leaf module
//! (re-exported by the crate root) so that the state, the handlers and the configuration can import these types
//! without importing the crate root, which imports all of them.

use std::net::SocketAddr;
use std::time::Duration;

use url::Url;

/// Which provider a sandbox provider plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Stripe: payment intents, refunds, events; `Stripe-Signature` webhooks.
    Stripe,
    /// Mercado Pago: payments, refunds, search; `x-signature` notifications.
    MercadoPago,
}

impl Scheme {
    /// `stripe` or `mercadopago` (hookline's scheme names).
    pub fn as_str(&self) -> &'static str {
        match self {
            Scheme::Stripe => "stripe",
            Scheme::MercadoPago => "mercadopago",
        }
    }

    /// The sandbox scheme playing a hookline signature scheme, if the sandbox plays it.
    pub fn from_signature(scheme: hookline_signature::Scheme) -> Option<Scheme> {
        match scheme {
            hookline_signature::Scheme::Stripe => Some(Scheme::Stripe),
            hookline_signature::Scheme::MercadoPago => Some(Scheme::MercadoPago),
            _ => None,
        }
    }
}

/// One provider the sandbox plays.
#[derive(Clone)]
pub struct SandboxProvider {
    /// The hookline provider name: webhooks go to `{edge_url}/webhooks/{name}`.
    pub name: String,
    /// Stripe or Mercado Pago.
    pub scheme: Scheme,
    /// The secret webhooks are signed with (hookline's `providers.NAME.secrets[0]`).
    pub webhook_secret: Vec<u8>,
    /// The Bearer token the API requires (hookline's `providers.NAME.api_token`); `None`: no authentication.
    pub api_token: Option<String>,
}

impl std::fmt::Debug for SandboxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxProvider")
            .field("name", &self.name)
            .field("scheme", &self.scheme)
            .field("webhook_secret", &"[redacted]")
            .field("api_token", &self.api_token.as_ref().map(|_| "[redacted]"))
            .finish()
    }
}

/// How to run a sandbox.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    /// Address to listen on (port 0 picks a free port; see
    /// [`RunningSandbox::base_url`](crate::RunningSandbox::base_url)).
    pub listen: SocketAddr,
    /// Seed of every id and random choice.
    pub seed: u64,
    /// Base URL of the hookline edge webhooks are sent to.
    pub edge_url: Url,
    /// The providers played.
    pub providers: Vec<SandboxProvider>,
    /// How long an idempotency key is remembered (Stripe: 24 h).
    pub idempotency_window: Duration,
    /// A webhook attempt without an answer within this time failed.
    pub webhook_timeout: Duration,
    /// Attempts per delivery before it is given up (`failed`).
    pub webhook_max_attempts: u32,
    /// Delay before the first retry; doubled for each further one.
    pub webhook_backoff: Duration,
    /// Longest delay between retries.
    pub webhook_max_backoff: Duration,
    /// How long an API operation executes: the window in which a concurrent retry with the same idempotency
    /// key gets 409.
    pub api_latency: Duration,
    /// HTTP worker threads.
    pub http_workers: usize,
}

impl SandboxSettings {
    /// Settings with defaults: seed 0, 24 h keys, 5 s webhook timeout, 8 attempts 500 ms → 60 s apart, 20 ms API
    /// latency, 2 HTTP workers.
    pub fn new(
        listen: SocketAddr,
        edge_url: Url,
        providers: Vec<SandboxProvider>,
    ) -> SandboxSettings {
        SandboxSettings {
            listen,
            seed: 0,
            edge_url,
            providers,
            idempotency_window: Duration::from_secs(24 * 3600),
            webhook_timeout: Duration::from_secs(5),
            webhook_max_attempts: 8,
            webhook_backoff: Duration::from_millis(500),
            webhook_max_backoff: Duration::from_secs(60),
            api_latency: Duration::from_millis(20),
            http_workers: 2,
        }
    }

    /// Refuses settings the sandbox cannot run with (checked by [`Sandbox::start`](crate::Sandbox::start)).
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if !matches!(self.edge_url.scheme(), "http" | "https") || self.edge_url.cannot_be_a_base() {
            anyhow::bail!("edge_url must be an http:// URL, not {}", self.edge_url);
        }
        if self.webhook_max_attempts == 0 {
            anyhow::bail!("webhook_max_attempts must be at least 1");
        }
        let mut names = std::collections::BTreeSet::new();
        for p in &self.providers {
            if p.name.is_empty()
                || !p
                    .name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
            {
                anyhow::bail!(
                    "provider name '{}' is not a URL segment of letters, digits, '-' or '_'",
                    p.name
                );
            }
            if !names.insert(p.name.as_str()) {
                anyhow::bail!("provider '{}' is configured twice", p.name);
            }
            if p.webhook_secret.is_empty() {
                anyhow::bail!("provider '{}' has an empty webhook secret", p.name);
            }
            if p.api_token.as_deref() == Some("") {
                anyhow::bail!("provider '{}' has an empty api_token", p.name);
            }
        }
        Ok(())
    }
}
