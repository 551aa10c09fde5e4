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
    /// Pagar.me Core API v5: orders, charges, customers, cards, tokens; unsigned JSON webhooks (`hook_…`), sent
    /// with HTTP Basic credentials when the provider has them ([`SandboxProvider::webhook_basic_auth`]).
    PagarmeV5,
}

impl Scheme {
    /// `stripe`, `mercadopago` or `pagarme-v5` (hookline's scheme names).
    pub fn as_str(&self) -> &'static str {
        match self {
            Scheme::Stripe => "stripe",
            Scheme::MercadoPago => "mercadopago",
            Scheme::PagarmeV5 => "pagarme-v5",
        }
    }

    /// The sandbox scheme playing a hookline signature scheme, if the sandbox plays it (the legacy `pagarme`
    /// postback scheme is another API and is not played).
    pub fn from_signature(scheme: hookline_signature::Scheme) -> Option<Scheme> {
        match scheme {
            hookline_signature::Scheme::Stripe => Some(Scheme::Stripe),
            hookline_signature::Scheme::MercadoPago => Some(Scheme::MercadoPago),
            hookline_signature::Scheme::PagarmeV5 => Some(Scheme::PagarmeV5),
            _ => None,
        }
    }
}

/// One provider the sandbox plays.
#[derive(Clone)]
pub struct SandboxProvider {
    /// The hookline provider name: webhooks go to `{edge_url}/webhooks/{name}`.
    pub name: String,
    /// Stripe, Mercado Pago or Pagar.me v5.
    pub scheme: Scheme,
    /// The secret webhooks are signed with (hookline's `providers.NAME.secrets[0]`). Pagar.me v5 signs nothing:
    /// unused (and may be empty) for it.
    pub webhook_secret: Vec<u8>,
    /// The API key the API requires (hookline's `providers.NAME.api_token`): Stripe and Mercado Pago as a Bearer
    /// token (Stripe also as the Basic user name), Pagar.me's secret key (`sk_test_…`) as the Basic user name with
    /// an empty password; `None`: no authentication.
    pub api_token: Option<String>,
    /// Pagar.me v5: the `user:password` its webhooks carry as `Authorization: Basic base64(user:password)` (the
    /// credentials configured on the webhook in Pagar.me's dashboard; hookline's
    /// `providers.NAME.webhook_basic_auth[0]`); `None`: no `Authorization` header. Ignored for the other schemes.
    pub webhook_basic_auth: Option<String>,
}

impl SandboxProvider {
    /// A provider without API authentication or webhook credentials; see [`SandboxProvider::with_api_token`] and
    /// [`SandboxProvider::with_webhook_basic_auth`].
    pub fn new(
        name: impl Into<String>,
        scheme: Scheme,
        webhook_secret: impl Into<Vec<u8>>,
    ) -> Self {
        SandboxProvider {
            name: name.into(),
            scheme,
            webhook_secret: webhook_secret.into(),
            api_token: None,
            webhook_basic_auth: None,
        }
    }

    /// The same provider requiring `token` as its API key.
    pub fn with_api_token(mut self, token: impl Into<String>) -> Self {
        self.api_token = Some(token.into());
        self
    }

    /// The same provider sending `user:password` as the webhooks' HTTP Basic credentials (Pagar.me v5).
    pub fn with_webhook_basic_auth(mut self, credentials: impl Into<String>) -> Self {
        self.webhook_basic_auth = Some(credentials.into());
        self
    }
}

impl std::fmt::Debug for SandboxProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxProvider")
            .field("name", &self.name)
            .field("scheme", &self.scheme)
            .field("webhook_secret", &"[redacted]")
            .field("api_token", &self.api_token.as_ref().map(|_| "[redacted]"))
            .field(
                "webhook_basic_auth",
                &self.webhook_basic_auth.as_ref().map(|_| "[redacted]"),
            )
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
            // Pagar.me v5 signs nothing: its webhooks carry Basic credentials instead of a signature.
            if p.webhook_secret.is_empty() && p.scheme != Scheme::PagarmeV5 {
                anyhow::bail!("provider '{}' has an empty webhook secret", p.name);
            }
            if p.api_token.as_deref() == Some("") {
                anyhow::bail!("provider '{}' has an empty api_token", p.name);
            }
            if let Some(credentials) = &p.webhook_basic_auth {
                // `user:password`, as RFC 7617 allows it: a user without a colon, the password anything.
                let valid = credentials
                    .split_once(':')
                    .is_some_and(|(user, _)| !user.is_empty())
                    && credentials.len() <= 512
                    && !credentials.chars().any(char::is_control);
                if !valid {
                    anyhow::bail!(
                        "provider '{}': webhook_basic_auth must be 'user:password' (a user without ':', at most 512 bytes)",
                        p.name
                    );
                }
            }
        }
        Ok(())
    }
}
