//! Logging, traces and metrics set-up shared by every hookline process, and the W3C `traceparent` helpers
//! every hop uses to hand a trace on (see the README's "Tracing").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt, TracerProvider as _};
use opentelemetry::Context;
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::{filter, fmt, prelude::*, EnvFilter, Layer};

use crate::config::{LogFormat, TelemetryConfig};

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

/// Installs logging with the defaults (text, or JSON with `HOOKLINE_LOG_FORMAT=json`) and no trace export, for
/// commands that run before or without a configuration, and for tests. Calling it (or [`init`]) twice is
/// harmless: the first subscriber stays, which tests rely on.
pub fn init_tracing() {
    // No exporter: nothing to shut down, so the guard can be forgotten.
    std::mem::forget(init(&TelemetryConfig::default(), "hookline"));
}

/// What [`init`] installed; dropping it flushes the spans still queued (bounded by the export timeout) and stops
/// the exporter's thread. Keep it alive in `main` until the process ends.
#[must_use = "dropping it stops the trace exporter"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take() {
            // Bounded: the processor waits at most its export timeout for the last batch.
            let _ = provider.shutdown();
        }
    }
}

/// Installs the global subscriber: log lines on stderr (filtered by `RUST_LOG`, else [`DEFAULT_FILTER`]; the
/// format from `telemetry.log_format`, which `HOOKLINE_LOG_FORMAT=text|json` overrides) and the
/// OpenTelemetry layer that turns hookline's spans into traces.
///
/// The OpenTelemetry layer is always installed, whether or not spans are exported: every span then has a trace
/// id, which log lines carry (`trace_id` on each root span) and which hookline hands on (the event row, the AMQP
/// headers, the `traceparent` sent to the merchant). With `otlp_endpoint` set, sampled spans are batched on
/// the SDK's own thread and POSTed to `{otlp_endpoint}/v1/traces`; the queue holds at most `max_queue_size`
/// spans and drops new ones past it, so a dead collector costs neither memory nor latency. Without it, spans
/// are never recorded (the sampler drops them: no attribute is kept, nothing is queued).
///
/// The layer has its own filter, independent of `RUST_LOG`: hookline's spans and events (targets `hookline…`, INFO
/// and above; an event becomes an event of its span). A quieter log level never loses a trace.
///
/// Must be called outside any async runtime (the exporter's blocking HTTP client owns its own).
pub fn init(config: &TelemetryConfig, default_service: &str) -> Telemetry {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let json = match std::env::var("HOOKLINE_LOG_FORMAT").ok().as_deref() {
        Some("json") => true,
        Some("text") => false,
        _ => config.log_format == LogFormat::Json,
    };
    let fmt_layer = if json {
        fmt::layer()
            .json()
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    } else {
        // Colours only on a terminal: in a log file, escape sequences are noise (and would hide injected ones).
        let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
        fmt::layer()
            .with_ansi(ansi)
            .with_writer(std::io::stderr)
            .with_filter(filter)
            .boxed()
    };
    let service = config
        .service_name
        .clone()
        .unwrap_or_else(|| default_service.to_string());
    let (provider, export_error) = tracer_provider(config, &service);
    let tracer = provider.tracer("hookline");
    let otel_layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        // Fewer attributes per span: the code location, thread and busy/idle times are not what an operator
        // reads a payment's trace for, and each one is an allocation on every span.
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_target(false)
        // A static filter (decided once per call site): hookline's own spans and events at INFO and above; an
        // event inside a span becomes a span event. (A dynamic `filter_fn` here lost spans created on some
        // threads: the per-layer filter state of a dynamic filter did not reach the layer.)
        .with_filter(filter::Targets::new().with_target("hookline", tracing::Level::INFO));
    let installed = tracing_subscriber::registry()
        .with(fmt_layer)
        .with(otel_layer)
        .try_init()
        .is_ok();
    if let Some(e) = export_error {
        tracing::error!(error.message = %e, "trace export is off: the OTLP exporter could not be built");
    }
    if installed {
        if let Some(url) = config.traces_url() {
            tracing::info!(
                otlp.url = %url,
                service.name = %service,
                sampling_ratio = config.sampling_ratio,
                max_queue_size = config.max_queue_size,
                "exporting traces"
            );
        }
        Telemetry {
            provider: Some(provider),
        }
    } else {
        // Another subscriber was installed first (tests): this provider is unused.
        let _ = provider.shutdown();
        Telemetry { provider: None }
    }
}

/// The SDK's provider: with an endpoint, ratio-sampled spans exported in bounded batches; without one (or when
/// the exporter cannot be built), a sampler that records nothing but still makes trace ids.
fn tracer_provider(config: &TelemetryConfig, service: &str) -> (SdkTracerProvider, Option<String>) {
    let resource = Resource::builder()
        .with_service_name(service.to_string())
        .build();
    let off = || {
        SdkTracerProvider::builder()
            .with_sampler(Sampler::AlwaysOff)
            .with_resource(resource.clone())
            .build()
    };
    let Some(url) = config.traces_url() else {
        return (off(), None);
    };
    let client = match otlp_client(config.export_timeout) {
        Ok(c) => c,
        Err(e) => return (off(), Some(e)),
    };
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(client)
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(url)
        .with_timeout(config.export_timeout)
        .build();
    let exporter = match exporter {
        Ok(e) => e,
        Err(e) => return (off(), Some(e.to_string())),
    };
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(config.max_queue_size)
        .with_max_export_batch_size(config.max_queue_size.min(512))
        .with_scheduled_delay(config.batch_delay)
        .build();
    let processor = BatchSpanProcessor::builder(CountingExporter {
        inner: exporter,
        failing: AtomicBool::new(false),
    })
    .with_batch_config(batch)
    .build();
    let provider = SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.sampling_ratio,
        ))))
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    (provider, None)
}

/// The collector's HTTP client, bounded like every other outbound client of hookline: it follows **no redirect**
/// (a 3xx is a failed export — the spans never go to an address the configuration does not name), and it gives up
/// after the export timeout (connecting included). The exporter's own default would follow up to ten redirects.
/// Built on a thread of its own: the blocking client runs a runtime of its own, which may not be created inside
/// the caller's async runtime.
fn otlp_client(timeout: Duration) -> Result<reqwest::blocking::Client, String> {
    std::thread::spawn(move || {
        reqwest::blocking::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(|e| format!("the collector's HTTP client: {e}"))
    })
    .join()
    .map_err(|_| "the collector's HTTP client: its builder thread panicked".to_owned())?
}

/// Metric names of the trace export (fixed).
pub mod metric {
    /// Counter: spans handed to the collector, by `outcome` (`exported`, `failed`).
    pub const TRACE_SPANS: &str = "hookline_trace_spans_total";
}

/// The OTLP exporter, counting what it exported and what the collector refused or never received, and logging
/// the change between the two states (not every failed batch: a dead collector must not flood the log).
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    failing: AtomicBool,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len() as u64;
        let result = self.inner.export(batch).await;
        match &result {
            Ok(()) => {
                metrics::counter!(metric::TRACE_SPANS, "outcome" => "exported").increment(spans);
                if self.failing.swap(false, Ordering::Relaxed) {
                    tracing::info!("trace export recovered");
                }
            }
            Err(e) => {
                metrics::counter!(metric::TRACE_SPANS, "outcome" => "failed").increment(spans);
                if !self.failing.swap(true, Ordering::Relaxed) {
                    tracing::warn!(error.message = %e, "trace export failing; spans are dropped until the collector answers");
                }
            }
        }
        result
    }

    fn shutdown_with_timeout(&mut self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&mut self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource)
    }
}

/// Longest `traceparent` accepted from outside (version 00 is 55 bytes; a later version may append fields).
pub const MAX_TRACEPARENT_BYTES: usize = 512;

/// The remote span a W3C `traceparent` names, if it is one: bounded, parsed by the SDK's W3C propagator,
/// valid (non-zero ids). Anything else (absent, malformed, oversized) is `None`, never an error: a bad header
/// only means a new trace.
pub fn parse_traceparent(value: &str) -> Option<SpanContext> {
    if value.len() > MAX_TRACEPARENT_BYTES || !w3c_shape(value.as_bytes()) {
        return None;
    }
    let carrier = Carrier(value);
    let cx = TraceContextPropagator::new().extract(&carrier);
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// The exact field layout of W3C Trace Context (`vv-{32}-{16}-ff`, lower-case hex; a later version may append
/// `-…`): the SDK's propagator alone accepts short ids (it pads them), which is not what was sent.
fn w3c_shape(b: &[u8]) -> bool {
    let hex = |r: std::ops::Range<usize>| {
        b.get(r)
            .is_some_and(|s| s.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')))
    };
    hex(0..2)
        && b.get(2) == Some(&b'-')
        && hex(3..35)
        && b.get(35) == Some(&b'-')
        && hex(36..52)
        && b.get(52) == Some(&b'-')
        && hex(53..55)
        && (b.len() == 55 || (b.get(55) == Some(&b'-') && b.get(0..2) != Some(b"00")))
}

/// A one-header carrier for the propagator.
struct Carrier<'a>(&'a str);

impl Extractor for Carrier<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        (key == "traceparent").then_some(self.0)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent"]
    }
}

/// The W3C `traceparent` of `span` (`00-{trace id}-{span id}-{flags}`), to hand on to the next hop; `None` for
/// a span the subscriber does not trace (a disabled span, no OpenTelemetry layer).
pub fn traceparent(span: &Span) -> Option<String> {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// [`traceparent`] of the current span.
pub fn current_traceparent() -> Option<String> {
    traceparent(&Span::current())
}

/// Makes `span` a child of the span `traceparent` names (when it names one). Call it right after creating the
/// span, before it is entered or its context read. Returns whether it did.
pub fn set_parent(span: &Span, traceparent: Option<&str>) -> bool {
    match traceparent.and_then(parse_traceparent) {
        Some(sc) => span
            .set_parent(Context::new().with_remote_span_context(sc))
            .is_ok(),
        None => false,
    }
}

/// Links `span` to the span `traceparent` names (another trace this work is about: the intent a webhook
/// completes, the trace of a replayed event).
pub fn add_link(span: &Span, traceparent: Option<&str>) {
    if let Some(sc) = traceparent.and_then(parse_traceparent) {
        span.add_link(sc);
    }
}

/// Records the span's trace id in its `trace_id` field (declared `trace_id = tracing::field::Empty`), so that
/// every log line inside it carries the id an operator searches the tracing backend for.
pub fn record_trace_id(span: &Span) {
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if sc.is_valid() {
        span.record("trace_id", tracing::field::display(sc.trace_id()));
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_is_followed_only_when_it_is_valid_w3c() {
        let sc = parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .expect("the W3C example");
        assert_eq!(
            sc.trace_id().to_string(),
            "0af7651916cd43dd8448eb211c80319c"
        );
        assert_eq!(sc.span_id().to_string(), "b7ad6b7169203331");
        assert!(sc.is_sampled() && sc.is_remote());
        let unsampled =
            parse_traceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00").unwrap();
        assert!(!unsampled.is_sampled());
        for bad in [
            "",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01", // zero trace id
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", // zero span id
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", // forbidden version
            "00-0af7651916cd43dd8448eb211c80319-b7ad6b7169203331-01",  // short trace id
            "00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01", // upper case
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",    // no flags
            "\u{0}\n-evil",
        ] {
            assert!(parse_traceparent(bad).is_none(), "{bad:?}");
        }
        let long = format!(
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01{}",
            "-x".repeat(300)
        );
        assert!(parse_traceparent(&long).is_none(), "over the bound");
    }

    proptest::proptest! {
        /// Whatever a caller sends, parsing never panics, and what it accepts is a valid remote context.
        #[test]
        fn any_header_value_parses_to_nothing_or_a_valid_remote_span(value in proptest::prelude::any::<String>()) {
            if let Some(sc) = parse_traceparent(&value) {
                proptest::prop_assert!(sc.is_valid() && sc.is_remote());
            }
        }
    }

    #[test]
    fn without_an_otel_layer_no_traceparent_is_made() {
        // No subscriber in this thread: spans are disabled, nothing to hand on.
        let span = tracing::info_span!("hookline.test");
        assert_eq!(traceparent(&span), None);
        assert!(!set_parent(&span, Some("garbage")));
    }
}
