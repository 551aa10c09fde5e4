//! `hookline verify`: offline signature check for operators.

use std::io::Read;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use clap::Args;
use hookline_signature::{Request, Scheme, Verifier};

/// Arguments of `hookline verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// Signature scheme: stripe, standard-webhooks, svix, github, mercadopago, shopify, pagarme, adyen.
    #[arg(long)]
    scheme: Scheme,
    /// A secret to try (repeat for rotation). `env:NAME` reads it from the environment, which keeps it out of
    /// the shell history and the process list.
    #[arg(long = "secret", required = true)]
    secrets: Vec<String>,
    /// Accepted clock skew in seconds, for schemes that sign a timestamp (default: the scheme's).
    #[arg(long)]
    tolerance: Option<u64>,
    /// A request header, `Name: value` (repeatable).
    #[arg(long = "header", value_parser = parse_header)]
    headers: Vec<(String, String)>,
    /// The raw query string (Mercado Pago signs `data.id` from it).
    #[arg(long, default_value = "")]
    query: String,
    /// File holding the exact raw body; `-` reads standard input.
    #[arg(long)]
    body_file: PathBuf,
    /// The receiver's clock, unix seconds (default: now). Use the delivery's time to check a captured request.
    #[arg(long)]
    now: Option<i64>,
}

fn parse_header(s: &str) -> Result<(String, String), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| format!("'{s}' is not 'Name: value'"))?;
    let name = name.trim();
    if name.is_empty() {
        return Err(format!("'{s}' has an empty header name"));
    }
    Ok((name.to_string(), value.trim_start().to_string()))
}

/// Runs the check: 0 and the event id when valid, 1 and the reason when not, 2 when the inputs are unusable.
pub fn run(args: &VerifyArgs) -> ExitCode {
    let body = if args.body_file.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin().read_to_end(&mut buf).map(|_| buf)
    } else {
        std::fs::read(&args.body_file)
    };
    let body = match body {
        Ok(b) => b,
        Err(e) => {
            eprintln!(
                "error: cannot read body file {}: {e}",
                args.body_file.display()
            );
            return ExitCode::from(2);
        }
    };
    let mut secrets = Vec::with_capacity(args.secrets.len());
    for (i, s) in args.secrets.iter().enumerate() {
        // Core's one `env:NAME` resolution, the configuration's: the error names the argument.
        let field = format!("--secret #{}", i + 1);
        let value = match hookline_core::config::resolve_env(
            &field,
            s.clone(),
            &hookline_core::config::ProcessEnv,
        ) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        };
        if let Err(why) = hookline_signature::validate_secret(args.scheme, value.as_bytes()) {
            eprintln!("error: --secret #{}: {why}", i + 1);
            return ExitCode::from(2);
        }
        secrets.push(value);
    }
    if args.tolerance.is_some() && !args.scheme.signs_timestamp() {
        eprintln!(
            "error: --tolerance: scheme {} signs no timestamp",
            args.scheme.as_str()
        );
        return ExitCode::from(2);
    }
    let secret_bytes: Vec<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
    let headers: Vec<(&str, &[u8])> = args
        .headers
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_bytes()))
        .collect();
    let now = args.now.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    });
    let verifier = Verifier {
        scheme: args.scheme,
        secrets: &secret_bytes,
        tolerance_secs: args.tolerance,
        now_unix: now,
    };
    let result = verifier.verify(&Request {
        headers: &headers,
        query: &args.query,
        body: &body,
    });
    for line in hookline_signature::outcome_lines(&result, secrets.len(), now, "--now") {
        println!("{line}");
    }
    if result.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
