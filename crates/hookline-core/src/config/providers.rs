//! `[providers.NAME]`: the webhook sources, their signature schemes, secrets, fees and API access.

use hookline_signature::Scheme;
use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use super::{resolve_env, ConfigError, Env};

/// `[providers.NAME]`: one webhook source.
#[derive(Clone)]
pub struct ProviderConfig {
    /// The provider's name (the URL segment).
    pub name: String,
    /// How its signatures are computed.
    pub scheme: Scheme,
    /// Accepted secrets, current first. Several are accepted at once during rotation. For `pagarme-v5`, which
    /// signs nothing, these are the `webhook_basic_auth` credentials (`user:password`) the verifier compares with
    /// the webhook's `Authorization: Basic` header.
    pub secrets: Vec<SecretString>,
    /// Accepted clock skew for schemes that sign a timestamp; `None` for schemes that sign none.
    pub tolerance_secs: Option<u64>,
    /// Provider fee in basis points of the amount (used by the ledger).
    pub fee_bps: i64,
    /// Fixed provider fee per payment, in minor units (used by the ledger).
    pub fee_fixed: i64,
    /// Base URL of the provider's API (`https://api.stripe.com`, `https://api.mercadopago.com`, or the local
    /// sandbox): what the worker fetches resources from and where outbound calls and reconciliation go.
    pub api_base: Option<url::Url>,
    /// Bearer token for that API (`env:VAR` allowed); never logged.
    pub api_token: Option<SecretString>,
    /// How long the provider keeps an idempotency key (`idempotency_key_ttl_secs`): the dispatcher stops
    /// retrying a request a margin before its key expires and resolves it by lookup instead (issue 27).
    pub idempotency_key_ttl: std::time::Duration,
    /// Dunning (`dunning_retry_secs`): how long a billing cycle whose charge was declined waits before its next
    /// attempt, after the 1st, 2nd, … decline; once every retry declined, the cycle is `past_due` (issue 28).
    pub dunning_retry: Vec<std::time::Duration>,
}

impl std::fmt::Debug for ProviderConfig {
    // Written by hand so the number of secrets is visible but never their values.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("name", &self.name)
            .field("scheme", &self.scheme.as_str())
            .field(
                "secrets",
                &format_args!("[{} redacted]", self.secrets.len()),
            )
            .field("tolerance_secs", &self.tolerance_secs)
            .field("fee_bps", &self.fee_bps)
            .field("fee_fixed", &self.fee_fixed)
            .field("api_base", &self.api_base.as_ref().map(url::Url::as_str))
            .field("api_token", &self.api_token.as_ref().map(|_| "[redacted]"))
            .field("idempotency_key_ttl", &self.idempotency_key_ttl)
            .field("dunning_retry", &self.dunning_retry)
            .finish()
    }
}

impl ProviderConfig {
    /// The secrets as byte slices, in configured order, for the verifier.
    pub fn secret_bytes(&self) -> Vec<&[u8]> {
        self.secrets
            .iter()
            .map(|s| s.expose_secret().as_bytes())
            .collect()
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProvider {
    scheme: Option<String>,
    secrets: Option<Vec<String>>,
    webhook_basic_auth: Option<Vec<String>>,
    tolerance_secs: Option<u64>,
    fee_bps: Option<i64>,
    fee_fixed: Option<i64>,
    api_base: Option<String>,
    api_token: Option<String>,
    idempotency_key_ttl_secs: Option<u64>,
    dunning_retry_secs: Option<Vec<u64>>,
}

/// Shortest `idempotency_key_ttl_secs` accepted: a minute (shorter leaves no room for retries).
pub const MIN_IDEMPOTENCY_KEY_TTL_SECS: u64 = 60;
/// Longest `idempotency_key_ttl_secs` accepted: 30 days (no provider keeps keys longer).
pub const MAX_IDEMPOTENCY_KEY_TTL_SECS: u64 = 30 * 24 * 3600;

/// The default dunning schedule: a declined cycle is retried 1, 3 and 5 days after its 1st, 2nd and 3rd
/// decline (card declines for insufficient funds clear around pay days; Stripe's default smart retries make up to
/// 4 attempts within a week or more), then it is `past_due`.
pub const DEFAULT_DUNNING_RETRY_SECS: [u64; 3] = [86_400, 3 * 86_400, 5 * 86_400];
/// Most retries in a dunning schedule.
pub const MAX_DUNNING_RETRIES: usize = 10;
/// Longest wait between two attempts of a cycle: 60 days.
pub const MAX_DUNNING_RETRY_SECS: u64 = 60 * 86_400;

/// The idempotency-key lifetime a provider documents, by scheme: Stripe and Pagar.me keep a key 24 hours after
/// its first use; Mercado Pago does not document one, so the same conservative 24 hours (a shorter real lifetime
/// is configured explicitly). Schemes hookline never sends requests to get the same value; it is not used.
pub fn default_idempotency_key_ttl_secs(scheme: Scheme) -> u64 {
    match scheme {
        Scheme::Stripe | Scheme::Pagarme | Scheme::PagarmeV5 | Scheme::MercadoPago => 24 * 3600,
        _ => 24 * 3600,
    }
}

pub(super) fn provider(
    name: String,
    p: RawProvider,
    env: &dyn Env,
) -> Result<ProviderConfig, ConfigError> {
    let field = |f: &str| format!("providers.{name}.{f}");
    if name.is_empty()
        || name.len() > crate::events::MAX_PROVIDER_NAME_BYTES
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'))
    {
        return Err(ConfigError::invalid(
            format!("providers.{name}"),
            format!(
                "a provider name is a URL segment of at most {} bytes: use only letters, digits, '-' or '_'",
                crate::events::MAX_PROVIDER_NAME_BYTES
            ),
        ));
    }
    let scheme_text = p
        .scheme
        .ok_or_else(|| ConfigError::invalid(field("scheme"), "is required"))?;
    let scheme: Scheme = scheme_text.parse().map_err(|_| {
        let valid: Vec<&str> = Scheme::ALL.iter().map(|s| s.as_str()).collect();
        ConfigError::invalid(
            field("scheme"),
            format!(
                "unknown scheme '{scheme_text}' (valid: {})",
                valid.join(", ")
            ),
        )
    })?;
    let secrets = match (scheme, p.secrets, p.webhook_basic_auth) {
        (Scheme::PagarmeV5, None, auth) => basic_auth(&name, auth.unwrap_or_default(), env)?,
        (Scheme::PagarmeV5, Some(_), _) => {
            return Err(ConfigError::invalid(
                field("secrets"),
                "scheme 'pagarme-v5' signs nothing: configure the webhook's credentials as webhook_basic_auth",
            ))
        }
        (_, _, Some(_)) => {
            return Err(ConfigError::invalid(
                field("webhook_basic_auth"),
                format!(
                    "is only for scheme 'pagarme-v5' (scheme '{}' uses secrets)",
                    scheme.as_str()
                ),
            ))
        }
        (_, raw, None) => secrets(&name, scheme, raw.unwrap_or_default(), env)?,
    };
    let tolerance_secs = match (p.tolerance_secs, scheme.signs_timestamp()) {
        (Some(_), false) => {
            return Err(ConfigError::invalid(
                field("tolerance_secs"),
                format!(
                    "scheme '{}' signs no timestamp, so a tolerance has no meaning",
                    scheme.as_str()
                ),
            ))
        }
        (Some(0), true) => {
            return Err(ConfigError::invalid(
                field("tolerance_secs"),
                "must be greater than 0",
            ))
        }
        (Some(t), true) => Some(t),
        (None, _) => scheme.default_tolerance_secs(),
    };
    let fee_bps = p.fee_bps.unwrap_or(0);
    if !(0..=10_000).contains(&fee_bps) {
        return Err(ConfigError::invalid(
            field("fee_bps"),
            "must be between 0 and 10000",
        ));
    }
    let fee_fixed = p.fee_fixed.unwrap_or(0);
    if fee_fixed < 0 {
        return Err(ConfigError::invalid(
            field("fee_fixed"),
            "must not be negative",
        ));
    }
    let api_base = p
        .api_base
        .map(|t| api_base(&field("api_base"), &t))
        .transpose()?;
    let api_token = p
        .api_token
        .map(|t| api_token(&field("api_token"), t, env))
        .transpose()?;
    if api_token.is_some() && api_base.is_none() {
        return Err(ConfigError::invalid(
            field("api_base"),
            "is required when api_token is set",
        ));
    }
    let ttl = p
        .idempotency_key_ttl_secs
        .unwrap_or_else(|| default_idempotency_key_ttl_secs(scheme));
    if !(MIN_IDEMPOTENCY_KEY_TTL_SECS..=MAX_IDEMPOTENCY_KEY_TTL_SECS).contains(&ttl) {
        return Err(ConfigError::invalid(
            field("idempotency_key_ttl_secs"),
            format!(
                "must be between {MIN_IDEMPOTENCY_KEY_TTL_SECS} and {MAX_IDEMPOTENCY_KEY_TTL_SECS} (30 days)"
            ),
        ));
    }
    let dunning_retry = p
        .dunning_retry_secs
        .unwrap_or_else(|| DEFAULT_DUNNING_RETRY_SECS.to_vec());
    if dunning_retry.len() > MAX_DUNNING_RETRIES
        || dunning_retry
            .iter()
            .any(|s| !(1..=MAX_DUNNING_RETRY_SECS).contains(s))
    {
        return Err(ConfigError::invalid(
            field("dunning_retry_secs"),
            format!(
                "at most {MAX_DUNNING_RETRIES} delays, each between 1 and {MAX_DUNNING_RETRY_SECS} seconds (60 days)"
            ),
        ));
    }
    Ok(ProviderConfig {
        name,
        scheme,
        secrets,
        tolerance_secs,
        fee_bps,
        fee_fixed,
        api_base,
        api_token,
        idempotency_key_ttl: std::time::Duration::from_secs(ttl),
        dunning_retry: dunning_retry
            .into_iter()
            .map(std::time::Duration::from_secs)
            .collect(),
    })
}

/// `providers.NAME.secrets`: at least one, each usable by the scheme (several at once for rotation).
fn secrets(
    name: &str,
    scheme: Scheme,
    raw: Vec<String>,
    env: &dyn Env,
) -> Result<Vec<SecretString>, ConfigError> {
    if raw.is_empty() {
        return Err(ConfigError::invalid(
            format!("providers.{name}.secrets"),
            "at least one secret is required",
        ));
    }
    let mut secrets = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        let f = format!("providers.{name}.secrets[{i}]");
        let value = resolve_env(&f, s, env)?;
        if value.is_empty() {
            return Err(ConfigError::invalid(&f, "is empty"));
        }
        hookline_signature::validate_secret(scheme, value.as_bytes())
            .map_err(|why| ConfigError::invalid(&f, why))?;
        secrets.push(SecretString::from(value));
    }
    Ok(secrets)
}

/// `providers.NAME.webhook_basic_auth` (`pagarme-v5`): at least one `user:password` (`env:VAR` allowed), each
/// non-empty, with a ':', at most 512 bytes, no control characters or surrounding whitespace; several at once for
/// rotation, current first. The messages never quote the credential.
fn basic_auth(
    name: &str,
    raw: Vec<String>,
    env: &dyn Env,
) -> Result<Vec<SecretString>, ConfigError> {
    if raw.is_empty() {
        return Err(ConfigError::invalid(
            format!("providers.{name}.webhook_basic_auth"),
            "at least one 'user:password' credential is required for scheme 'pagarme-v5'",
        ));
    }
    let mut credentials = Vec::with_capacity(raw.len());
    for (i, s) in raw.into_iter().enumerate() {
        let f = format!("providers.{name}.webhook_basic_auth[{i}]");
        let value = resolve_env(&f, s, env)?;
        if value.is_empty() {
            return Err(ConfigError::invalid(&f, "is empty"));
        }
        hookline_signature::validate_secret(Scheme::PagarmeV5, value.as_bytes())
            .map_err(|why| ConfigError::invalid(&f, why.replace("the secret", "the credential")))?;
        credentials.push(SecretString::from(value));
    }
    Ok(credentials)
}

/// `providers.NAME.api_base`: an http(s) URL with a host.
fn api_base(field: &str, text: &str) -> Result<url::Url, ConfigError> {
    let parsed = url::Url::parse(text)
        .map_err(|e| ConfigError::invalid(field, format!("is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
        return Err(ConfigError::invalid(
            field,
            "must be an http:// or https:// URL with a host",
        ));
    }
    Ok(parsed)
}

/// `providers.NAME.api_token`: a non-empty token without spaces or control characters (it goes into a header).
fn api_token(field: &str, raw: String, env: &dyn Env) -> Result<SecretString, ConfigError> {
    let value = resolve_env(field, raw, env)?;
    if value.is_empty() || value.chars().any(|c| c.is_control() || c == ' ') {
        return Err(ConfigError::invalid(
            field,
            "must be a non-empty token without spaces or control characters",
        ));
    }
    Ok(SecretString::from(value))
}

#[cfg(test)]
mod tests {
    use secrecy::ExposeSecret;

    use super::super::testing::err;
    use super::super::Config;

    #[test]
    fn api_base_and_token_are_validated_and_the_token_redacted() {
        let env = [("MP_TOKEN", "APP_USR-secret-token")];
        let c = Config::from_toml_str(
            "[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\n\
             api_base = \"http://127.0.0.1:8090\"\napi_token = \"env:MP_TOKEN\"\n",
            "t",
            &env,
        )
        .unwrap();
        let mp = &c.providers["mp"];
        assert_eq!(
            mp.api_base.as_ref().unwrap().as_str(),
            "http://127.0.0.1:8090/"
        );
        assert_eq!(
            mp.api_token.as_ref().unwrap().expose_secret(),
            "APP_USR-secret-token"
        );
        assert!(!format!("{mp:?}").contains("APP_USR"));
        let message = err(
            "[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\napi_base = \"ftp://x\"\n",
        );
        assert!(message.contains("providers.mp.api_base"), "{message}");
        let message =
            err("[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\napi_token = \"t\"\n");
        assert!(message.contains("required when api_token"), "{message}");
    }

    #[test]
    fn idempotency_key_ttl_defaults_per_scheme_and_is_bounded() {
        let c = Config::from_toml_str(
            "[providers.st]\nscheme = \"stripe\"\nsecrets = [\"whsec_x\"]\n\
             [providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\nidempotency_key_ttl_secs = 3600\n",
            "t",
            &[],
        )
        .unwrap();
        assert_eq!(c.providers["st"].idempotency_key_ttl.as_secs(), 86400);
        assert_eq!(c.providers["mp"].idempotency_key_ttl.as_secs(), 3600);
        for bad in ["59", "2592001", "0"] {
            let message = err(&format!(
                "[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\nidempotency_key_ttl_secs = {bad}\n"
            ));
            assert!(
                message.starts_with("providers.mp.idempotency_key_ttl_secs: must be between 60"),
                "{bad}: {message}"
            );
        }
        assert!(Config::from_toml_str(
            "[providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\nidempotency_key_ttl_secs = 2592000\n",
            "t",
            &[],
        )
        .is_ok());
    }

    #[test]
    fn provider_names_are_bounded() {
        let long = "p".repeat(crate::events::MAX_PROVIDER_NAME_BYTES + 1);
        let message = err(&format!(
            "[providers.{long}]\nscheme = \"github\"\nsecrets = [\"x\"]\n"
        ));
        assert!(message.contains("at most"), "{message}");
    }

    #[test]
    fn full_example_with_env_secret_and_shared_scheme() {
        let env = [("STRIPE_OLD_SECRET", "whsec_old")];
        let c = Config::from_toml_str(
            r#"
            [providers.stripe]
            scheme = "stripe"
            secrets = ["whsec_new", "env:STRIPE_OLD_SECRET"]
            tolerance_secs = 120
            [providers.stripe-eu]
            scheme = "stripe"
            secrets = ["whsec_eu"]
            [providers.gh]
            scheme = "github"
            secrets = ["s3cret"]
            "#,
            "t",
            &env,
        )
        .unwrap();
        let s = &c.providers["stripe"];
        assert_eq!(s.secret_bytes(), vec![&b"whsec_new"[..], &b"whsec_old"[..]]);
        assert_eq!(s.tolerance_secs, Some(120));
        assert_eq!(c.providers["stripe-eu"].tolerance_secs, Some(300));
        assert_eq!(c.providers["gh"].tolerance_secs, None);
    }

    #[test]
    fn unknown_scheme_names_the_field() {
        let e = err("[providers.p]\nscheme = \"strpe\"\nsecrets = [\"x\"]");
        assert!(
            e.starts_with("providers.p.scheme: unknown scheme 'strpe'"),
            "{e}"
        );
    }

    #[test]
    fn missing_and_empty_secrets_name_the_field() {
        assert_eq!(
            err("[providers.p]\nscheme = \"github\""),
            "providers.p.secrets: at least one secret is required"
        );
        assert_eq!(
            err("[providers.p]\nscheme = \"github\"\nsecrets = []"),
            "providers.p.secrets: at least one secret is required"
        );
        assert_eq!(
            err("[providers.p]\nscheme = \"github\"\nsecrets = [\"a\", \"\"]"),
            "providers.p.secrets[1]: is empty"
        );
        assert_eq!(
            err("[providers.p]\nscheme = \"github\"\nsecrets = [\"env:NOPE_NOT_SET\"]"),
            "providers.p.secrets[0]: environment variable NOPE_NOT_SET is not set"
        );
    }

    #[test]
    fn pagarme_v5_takes_basic_auth_credentials_instead_of_secrets() {
        let env = [("PGM_HOOK_OLD", "hookline:old")];
        let c = Config::from_toml_str(
            "[providers.pgm]\nscheme = \"pagarme-v5\"\n\
             webhook_basic_auth = [\"hookline:new\", \"env:PGM_HOOK_OLD\"]\n\
             api_base = \"http://127.0.0.1:1\"\napi_token = \"sk_test_x\"\n",
            "t",
            &env,
        )
        .unwrap();
        let p = &c.providers["pgm"];
        assert_eq!(
            p.secret_bytes(),
            vec![&b"hookline:new"[..], &b"hookline:old"[..]]
        );
        assert_eq!(p.tolerance_secs, None);
        assert!(!format!("{p:?}").contains("hookline:"));
        let base = "[providers.pgm]\nscheme = \"pagarme-v5\"\n";
        for (extra, message) in [
            ("", "providers.pgm.webhook_basic_auth: at least one 'user:password' credential is required"),
            ("webhook_basic_auth = []", "providers.pgm.webhook_basic_auth: at least one"),
            ("webhook_basic_auth = [\"a:b\", \"\"]", "providers.pgm.webhook_basic_auth[1]: is empty"),
            ("webhook_basic_auth = [\"nocolon\"]", "providers.pgm.webhook_basic_auth[0]: expected 'user:password'"),
            ("webhook_basic_auth = [\"a:b\\u0007\"]", "providers.pgm.webhook_basic_auth[0]: the credential contains control"),
            ("webhook_basic_auth = [\"env:NOPE_NOT_SET\"]", "providers.pgm.webhook_basic_auth[0]: environment variable NOPE_NOT_SET"),
            ("secrets = [\"s\"]", "providers.pgm.secrets: scheme 'pagarme-v5' signs nothing"),
        ] {
            let got = err(&format!("{base}{extra}\n"));
            assert!(got.starts_with(message), "{extra}: {got}");
            assert!(!got.contains("a:b"), "a credential leaked: {got}");
        }
        let long = format!("{base}webhook_basic_auth = [\"u:{}\"]\n", "p".repeat(600));
        assert!(err(&long).contains("longer than 512"), "{}", err(&long));
        let message = err("[providers.gh]\nscheme = \"github\"\nsecrets = [\"x\"]\nwebhook_basic_auth = [\"a:b\"]\n");
        assert!(
            message.starts_with("providers.gh.webhook_basic_auth: is only for scheme 'pagarme-v5'"),
            "{message}"
        );
    }

    #[test]
    fn tolerance_on_untimestamped_scheme_is_rejected() {
        let e = err("[providers.gh]\nscheme = \"github\"\nsecrets = [\"x\"]\ntolerance_secs = 300");
        assert!(e.starts_with("providers.gh.tolerance_secs:"), "{e}");
    }

    #[test]
    fn dunning_schedules_default_to_one_three_five_days_and_are_bounded() {
        let c = Config::from_toml_str(
            "[providers.st]\nscheme = \"stripe\"\nsecrets = [\"s\"]\n\
             [providers.mp]\nscheme = \"mercadopago\"\nsecrets = [\"s\"]\ndunning_retry_secs = [60, 7200]\n\
             [providers.none]\nscheme = \"stripe\"\nsecrets = [\"s\"]\ndunning_retry_secs = []\n",
            "t",
            &[],
        )
        .unwrap();
        let secs = |p: &str| -> Vec<u64> {
            c.providers[p]
                .dunning_retry
                .iter()
                .map(|d| d.as_secs())
                .collect()
        };
        assert_eq!(secs("st"), vec![86_400, 259_200, 432_000]);
        assert_eq!(secs("mp"), vec![60, 7200]);
        assert!(
            secs("none").is_empty(),
            "no retry: the first decline is past due"
        );
        for bad in ["[0]", "[5184001]", "[1,1,1,1,1,1,1,1,1,1,1]"] {
            let message = err(&format!(
                "[providers.st]\nscheme = \"stripe\"\nsecrets = [\"s\"]\ndunning_retry_secs = {bad}\n"
            ));
            assert!(
                message.contains("providers.st.dunning_retry_secs"),
                "{bad}: {message}"
            );
        }
    }
}
