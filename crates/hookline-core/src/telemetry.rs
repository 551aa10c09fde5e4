//! Logging and metrics set-up shared by every hookline process.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing_subscriber::{fmt, prelude::*, EnvFilter};

/// Default log filter when `RUST_LOG` is not set.
pub const DEFAULT_FILTER: &str = "info,sqlx=warn,lapin=warn,actix_server=warn";

/// Stops *error values* from capturing backtraces, whatever `RUST_BACKTRACE` says; panics still print theirs.
///
/// With `RUST_BACKTRACE=1` (common in production, and set on our machines) every `anyhow::Error` captures a
/// backtrace when it is created, and formatting it with `{:?}` symbolizes it: the process maps its debug line
/// tables (measured: RSS 7 → 126 MiB and 0.3 s for one logged error, and it stays). Expected failures (a
/// database restart, a broker outage) are logged as cause chains; a backtrace belongs to a panic report.
/// `RUST_LIB_BACKTRACE`, when set, still decides (an operator can opt back in).
///
/// Call it first thing in `main`, before any thread is started (it sets an environment variable).
pub fn no_error_backtraces() {
    if std::env::var_os("RUST_LIB_BACKTRACE").is_none() {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

/// Installs the global tracing subscriber. `HOOKLINE_LOG_FORMAT=json` switches to JSON lines (for deployments);
/// the default is human-readable text. Calling it twice is harmless (the second call is ignored), which tests
/// rely on.
pub fn init_tracing() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let json = std::env::var("HOOKLINE_LOG_FORMAT").is_ok_and(|v| v == "json");
    let registry = tracing_subscriber::registry().with(filter);
    let result = if json {
        registry
            .with(fmt::layer().json().with_writer(std::io::stderr))
            .try_init()
    } else {
        // Colours only on a terminal: in a log file, escape sequences are noise (and would hide injected ones).
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        registry
            .with(fmt::layer().with_ansi(ansi).with_writer(std::io::stderr))
            .try_init()
    };
    // Already installed (tests): keep the first one.
    let _ = result;
}

/// Buckets for latency histograms, in seconds: fine-grained at the millisecond scale our edge answers in.
const LATENCY_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Installs the process-wide Prometheus recorder once and returns its handle for rendering `/metrics`.
///
/// The `metrics` facade has a single global recorder, so several applications in one process (tests) share it.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".to_string()), LATENCY_BUCKETS)
                .expect("static bucket list is non-empty")
                .install_recorder()
                .expect("no other metrics recorder is installed in this process")
        })
        .clone()
}

/// Formats an error with its whole cause chain, one `Caused by:` line per source, for logs and `Debug`.
pub fn error_chain_fmt(
    e: &impl std::error::Error,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    writeln!(f, "{e}")?;
    let mut current = e.source();
    while let Some(cause) = current {
        writeln!(f, "Caused by:\n\t{cause}")?;
        current = cause.source();
    }
    Ok(())
}
