//! `[telemetry]`: traces exported over OTLP (off by default) and the log format.

use std::time::Duration;

use serde::Deserialize;

use super::{between, ConfigError};

/// Longest accepted `telemetry.otlp_endpoint`.
pub const MAX_OTLP_ENDPOINT_BYTES: usize = 2048;
/// Largest accepted `telemetry.max_queue_size`: the bound on memory held for a collector that does not answer.
pub const MAX_TRACE_QUEUE: usize = 65_536;

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (the default).
    Text,
    /// One JSON object per line, for log shippers.
    Json,
}

/// `[telemetry]`: where spans go and how logs look.
#[derive(Debug, Clone)]
pub struct TelemetryConfig {
    /// The collector's base URL (`http://127.0.0.1:4318`): spans are POSTed as OTLP HTTP/protobuf to
    /// `{otlp_endpoint}/v1/traces`. `None` (the default): no span leaves the process (trace ids are still made,
    /// carried and logged).
    pub otlp_endpoint: Option<url::Url>,
    /// The `service.name` resource attribute; `None` = the process's own name (`hookline-edge`, …).
    pub service_name: Option<String>,
    /// Fraction of new traces recorded, 0.0–1.0 (a trace continued from a caller follows the caller's decision).
    pub sampling_ratio: f64,
    /// Spans held for export at most; past it new spans are dropped (and counted), never queued without bound.
    pub max_queue_size: usize,
    /// How often the batch processor exports what it holds.
    pub batch_delay: Duration,
    /// One export request's deadline: a collector that accepts connections and never answers costs this.
    pub export_timeout: Duration,
    /// Log line format (`log_format = "text" | "json"`; `HOOKLINE_LOG_FORMAT` overrides it).
    pub log_format: LogFormat,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: None,
            service_name: None,
            sampling_ratio: 1.0,
            max_queue_size: 2048,
            batch_delay: Duration::from_millis(1000),
            export_timeout: Duration::from_millis(3000),
            log_format: LogFormat::Text,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    otlp_endpoint: Option<String>,
    service_name: Option<String>,
    sampling_ratio: Option<f64>,
    max_queue_size: Option<u64>,
    batch_delay_ms: Option<u64>,
    export_timeout_ms: Option<u64>,
    log_format: Option<String>,
}

pub(super) fn telemetry(r: RawTelemetry) -> Result<TelemetryConfig, ConfigError> {
    let d = TelemetryConfig::default();
    let otlp_endpoint = match r.otlp_endpoint {
        None => None,
        Some(s) => Some(endpoint(&s)?),
    };
    let service_name = match r.service_name {
        None => None,
        Some(s)
            if (1..=64).contains(&s.len())
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) =>
        {
            Some(s)
        }
        Some(_) => {
            return Err(ConfigError::invalid(
                "telemetry.service_name",
                "must be 1 to 64 characters among A-Z a-z 0-9 - _ .",
            ))
        }
    };
    let sampling_ratio = match r.sampling_ratio {
        None => d.sampling_ratio,
        Some(x) if (0.0..=1.0).contains(&x) => x,
        Some(_) => {
            return Err(ConfigError::invalid(
                "telemetry.sampling_ratio",
                "must be between 0.0 and 1.0",
            ))
        }
    };
    let max_queue_size = between(
        r.max_queue_size,
        d.max_queue_size as u64,
        MAX_TRACE_QUEUE as u64,
        "telemetry.max_queue_size",
    )? as usize;
    let millis = |v: Option<u64>, default: Duration, field: &str| {
        between(v, default.as_millis() as u64, 60_000, field).map(Duration::from_millis)
    };
    let log_format = match r.log_format.as_deref() {
        None | Some("text") => LogFormat::Text,
        Some("json") => LogFormat::Json,
        Some(_) => {
            return Err(ConfigError::invalid(
                "telemetry.log_format",
                "must be \"text\" or \"json\"",
            ))
        }
    };
    Ok(TelemetryConfig {
        otlp_endpoint,
        service_name,
        sampling_ratio,
        max_queue_size,
        batch_delay: millis(r.batch_delay_ms, d.batch_delay, "telemetry.batch_delay_ms")?,
        export_timeout: millis(
            r.export_timeout_ms,
            d.export_timeout,
            "telemetry.export_timeout_ms",
        )?,
        log_format,
    })
}

/// An http(s) base URL without credentials, query or fragment: it is logged at start, and a credential in it
/// would be too. A collector that needs authentication sits behind a local agent (the OpenTelemetry Collector).
fn endpoint(s: &str) -> Result<url::Url, ConfigError> {
    let field = "telemetry.otlp_endpoint";
    if s.len() > MAX_OTLP_ENDPOINT_BYTES {
        return Err(ConfigError::invalid(
            field,
            format!("must be at most {MAX_OTLP_ENDPOINT_BYTES} bytes"),
        ));
    }
    let url = url::Url::parse(s)
        .map_err(|e| ConfigError::invalid(field, format!("is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err(ConfigError::invalid(
            field,
            "must be an http:// or https:// URL with a host",
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(ConfigError::invalid(
            field,
            "must not carry credentials (it is logged); put an authenticating collector behind a local agent",
        ));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(ConfigError::invalid(
            field,
            "must be a base URL without query or fragment (spans go to {otlp_endpoint}/v1/traces)",
        ));
    }
    Ok(url)
}

impl TelemetryConfig {
    /// Where spans are POSTed: `{otlp_endpoint}/v1/traces` (one slash, whatever the base ends with).
    pub fn traces_url(&self) -> Option<String> {
        self.otlp_endpoint
            .as_ref()
            .map(|u| format!("{}/v1/traces", u.as_str().trim_end_matches('/')))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{err, NO_ENV};
    use super::super::Config;
    use super::LogFormat;
    use std::time::Duration;

    #[test]
    fn tracing_export_is_off_by_default_and_every_key_is_bounded() {
        let c = Config::from_toml_str("", "t", &NO_ENV).unwrap().telemetry;
        assert!(c.otlp_endpoint.is_none());
        assert_eq!(c.traces_url(), None);
        assert_eq!(c.sampling_ratio, 1.0);
        assert_eq!(c.max_queue_size, 2048);
        assert_eq!(c.log_format, LogFormat::Text);
        let c = Config::from_toml_str(
            "[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318/\"\nservice_name = \"edge-eu.1\"\nsampling_ratio = 0.25\nmax_queue_size = 10\nbatch_delay_ms = 100\nexport_timeout_ms = 500\nlog_format = \"json\"",
            "t",
            &NO_ENV,
        )
        .unwrap()
        .telemetry;
        assert_eq!(
            c.traces_url().as_deref(),
            Some("http://127.0.0.1:4318/v1/traces")
        );
        assert_eq!(c.service_name.as_deref(), Some("edge-eu.1"));
        assert_eq!(c.sampling_ratio, 0.25);
        assert_eq!(c.max_queue_size, 10);
        assert_eq!(c.batch_delay, Duration::from_millis(100));
        assert_eq!(c.export_timeout, Duration::from_millis(500));
        assert_eq!(c.log_format, LogFormat::Json);
        for bad in [
            "otlp_endpoint = \"ftp://collector\"",
            "otlp_endpoint = \"not a url\"",
            "otlp_endpoint = \"http://user:pass@collector:4318\"",
            "otlp_endpoint = \"http://collector:4318/?token=x\"",
        ] {
            let e = err(&format!("[telemetry]\n{bad}"));
            assert!(e.starts_with("telemetry.otlp_endpoint:"), "{e}");
            assert!(!e.contains("pass"), "{e}");
        }
        let long = format!("otlp_endpoint = \"http://c/{}\"", "a".repeat(3000));
        assert!(err(&format!("[telemetry]\n{long}")).starts_with("telemetry.otlp_endpoint:"));
        for (bad, field) in [
            ("sampling_ratio = 1.5", "telemetry.sampling_ratio:"),
            ("sampling_ratio = -0.1", "telemetry.sampling_ratio:"),
            ("max_queue_size = 0", "telemetry.max_queue_size:"),
            ("max_queue_size = 65537", "telemetry.max_queue_size:"),
            ("batch_delay_ms = 0", "telemetry.batch_delay_ms:"),
            ("export_timeout_ms = 60001", "telemetry.export_timeout_ms:"),
            ("service_name = \"a b\"", "telemetry.service_name:"),
            ("service_name = \"\"", "telemetry.service_name:"),
            ("log_format = \"xml\"", "telemetry.log_format:"),
        ] {
            let e = err(&format!("[telemetry]\n{bad}"));
            assert!(e.starts_with(field), "{bad}: {e}");
        }
        assert!(err("[telemetry]\nsampling = 1").contains("sampling"));
    }
}
