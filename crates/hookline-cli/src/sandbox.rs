//! `hookline sandbox`: runs the local Stripe / Mercado Pago double (`hookline_sandbox`) until SIGTERM or SIGINT.
//!
//! Settings come from the hookline configuration, so the sandbox signs webhooks with exactly the secrets the edge
//! verifies and requires exactly the tokens the worker sends:
//!
//! - every `[providers.NAME]` whose `scheme` is `stripe`, `mercadopago` or `pagarme-v5` is played, under its NAME
//!   (webhooks go to `{sandbox.edge_url}/webhooks/NAME`), signing with `secrets[0]` (Pagar.me v5: sending
//!   `webhook_basic_auth[0]` as HTTP Basic) and requiring `api_token` when it is set (without one, the API is
//!   open);
//! - `[sandbox]`, owned by the sandbox crate ([`SandboxConfig`], read from the same file): `edge_url` (default
//!   `http://{edge.listen}`), `idempotency_window_secs` (86400), `webhook_timeout_ms` (5000),
//!   `webhook_max_attempts` (8);
//! - `--listen` (default 127.0.0.1:12111) and `--seed` (default: from the clock; printed, to reproduce a run).
//!
//! Point a provider's `api_base` at the printed URL for the worker and reconciliation to talk to the sandbox.

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use hookline_core::Config;
use hookline_sandbox::{Sandbox, SandboxConfig, SandboxProvider, SandboxSettings, Scheme};
use secrecy::ExposeSecret;

/// Arguments of `hookline sandbox`.
#[derive(Args, Debug)]
pub struct SandboxArgs {
    /// Address to listen on; port 0 picks a free port (the URL is printed).
    #[arg(long, default_value = "127.0.0.1:12111")]
    listen: SocketAddr,
    /// Seed of every generated id and random choice; the same seed and requests give the same ids. Default:
    /// derived from the clock (printed at start).
    #[arg(long)]
    seed: Option<u64>,
}

/// The sandbox settings the configuration (its providers and its `[sandbox]`) and arguments describe.
fn settings(
    config: &Config,
    sandbox: &SandboxConfig,
    listen: SocketAddr,
    seed: u64,
) -> SandboxSettings {
    let providers = config
        .providers
        .values()
        .filter_map(|p| {
            let scheme = Scheme::from_signature(p.scheme)?;
            let secret = p.secrets.first()?;
            // Pagar.me v5 signs nothing: its "secrets" are the webhook_basic_auth credentials, sent as HTTP Basic.
            let (webhook_secret, webhook_basic_auth) = match scheme {
                Scheme::PagarmeV5 => (Vec::new(), Some(secret.expose_secret().to_owned())),
                Scheme::Stripe | Scheme::MercadoPago => {
                    (secret.expose_secret().as_bytes().to_vec(), None)
                }
            };
            Some(SandboxProvider {
                name: p.name.clone(),
                scheme,
                webhook_secret,
                api_token: p.api_token.as_ref().map(|t| t.expose_secret().to_owned()),
                webhook_basic_auth,
            })
        })
        .collect();
    let mut settings = SandboxSettings::new(listen, sandbox.edge_url.clone(), providers);
    settings.seed = seed;
    sandbox.apply(&mut settings);
    settings
}

fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Runs the sandbox until SIGTERM/SIGINT. `config_path` is the file `config` was loaded from (`--config`; `None`:
/// `$HOOKLINE_CONFIG` or defaults), read again for its `[sandbox]` section. Exit 2 when that section is invalid
/// or no provider can be played, 3 when its delivery loop died.
pub async fn run(
    config: &Config,
    config_path: Option<&Path>,
    args: &SandboxArgs,
) -> anyhow::Result<ExitCode> {
    let sandbox = match hookline_web::EdgeConfig::from_config(config)
        .and_then(|edge| SandboxConfig::load(config_path, edge.listen))
    {
        Ok(s) => s,
        Err(e) => {
            // The same exit and form as any other configuration error (see `crate::main`).
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let seed = args.seed.unwrap_or_else(clock_seed);
    let settings = settings(config, &sandbox, args.listen, seed);
    if settings.providers.is_empty() {
        eprintln!(
            "error: no provider with scheme stripe, mercadopago or pagarme-v5 is configured; nothing to play"
        );
        return Ok(ExitCode::from(2));
    }
    let edge_url = settings.edge_url.clone();
    let providers: Vec<String> = settings
        .providers
        .iter()
        .map(|p| {
            let auth = if p.api_token.is_some() {
                "api_token required"
            } else {
                "no auth"
            };
            format!("{} ({}, {auth})", p.name, p.scheme.as_str())
        })
        .collect();
    let running = Sandbox::start(settings).await?;
    println!(
        "sandbox listening on {} (seed {seed}); webhooks to {}webhooks/{{provider}}; providers: {}",
        running.base_url(),
        edge_url,
        providers.join(", ")
    );
    let liveness = running.liveness().clone();
    tokio::select! {
        _ = hookline_core::supervisor::wait_for_shutdown_signal() => {}
        _ = liveness.fatal() => {}
    }
    running.stop().await;
    if liveness.is_alive() {
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "error: the sandbox's webhook delivery loop kept failing and was stopped; see the log"
        );
        Ok(ExitCode::from(3))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `edge.listen` of `config` (`[edge]` is the web crate's).
    fn edge_listen(config: &Config) -> std::net::SocketAddr {
        hookline_web::EdgeConfig::from_config(config)
            .unwrap()
            .listen
    }

    const CONFIG: &str = r#"
        [edge]
        listen = "0.0.0.0:18080"
        [sandbox]
        webhook_max_attempts = 3
        [providers.stripe]
        scheme = "stripe"
        secrets = ["whsec_new", "whsec_old"]
        api_base = "http://127.0.0.1:12111"
        api_token = "sk_test_sandbox"
        [providers.mp]
        scheme = "mercadopago"
        secrets = ["mp_secret"]
        [providers.gh]
        scheme = "github"
        secrets = ["gh"]
    "#;

    #[test]
    fn stripe_and_mercado_pago_providers_are_played_with_their_first_secret_and_token() {
        let env: [(&str, &str); 0] = [];
        let config = Config::from_toml_str(CONFIG, "t", &env).unwrap();
        let sandbox = SandboxConfig::from_toml_str(CONFIG, "t", edge_listen(&config)).unwrap();
        let s = settings(&config, &sandbox, "127.0.0.1:0".parse().unwrap(), 7);
        assert_eq!(s.seed, 7);
        assert_eq!(s.edge_url.as_str(), "http://127.0.0.1:18080/");
        assert_eq!(s.webhook_max_attempts, 3);
        assert_eq!(s.idempotency_window.as_secs(), 86_400);
        assert_eq!(s.webhook_timeout.as_millis(), 5_000);
        let names: Vec<&str> = s.providers.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["mp", "stripe"]);
        let stripe = &s.providers[1];
        assert_eq!(stripe.scheme, Scheme::Stripe);
        assert_eq!(stripe.webhook_secret, b"whsec_new");
        assert_eq!(stripe.api_token.as_deref(), Some("sk_test_sandbox"));
        assert_eq!(s.providers[0].api_token, None);
    }

    #[tokio::test]
    async fn the_configured_sandbox_serves_both_providers() {
        let env: [(&str, &str); 0] = [];
        let config = Config::from_toml_str(CONFIG, "t", &env).unwrap();
        let sandbox = SandboxConfig::from_toml_str(CONFIG, "t", edge_listen(&config)).unwrap();
        let running = Sandbox::start(settings(
            &config,
            &sandbox,
            "127.0.0.1:0".parse().unwrap(),
            1,
        ))
        .await
        .unwrap();
        let client = reqwest::Client::new();
        let health: serde_json::Value = client
            .get(running.url("/_sandbox/health"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(health["providers"].as_array().map(Vec::len), Some(2));
        // Stripe requires its token; Mercado Pago has none configured.
        let status = client
            .get(running.url("/v1/events"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 401);
        let status = client
            .get(running.url("/v1/events"))
            .bearer_auth("sk_test_sandbox")
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
        let status = client
            .get(running.url("/v1/payments/search"))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 200);
        running.stop().await;
    }
}
