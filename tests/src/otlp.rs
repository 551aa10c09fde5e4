//! An OpenTelemetry collector as the trace tests need one: a real HTTP server on loopback accepting OTLP
//! HTTP/protobuf (`POST /v1/traces`), decoding each request with the official protobuf definitions
//! (`opentelemetry-proto`, i.e. what any collector accepts), and keeping every span with its process's
//! `service.name`. A request that does not decode is answered 400 and counted, so a test can assert there were
//! none.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;

/// One received span, decoded.
#[derive(Debug, Clone)]
pub struct Span {
    /// `service.name` of the process that exported it.
    pub service: String,
    /// The span's name (`webhook.receive`, `worker.apply`, …).
    pub name: String,
    /// 32 hex digits.
    pub trace_id: String,
    /// 16 hex digits.
    pub span_id: String,
    /// 16 hex digits, empty for a root.
    pub parent_span_id: String,
    /// Attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// Links: `(trace id, span id)`.
    pub links: Vec<(String, String)>,
    /// Start and end, nanoseconds since the epoch.
    pub start_ns: u64,
    /// End.
    pub end_ns: u64,
}

impl Span {
    /// An attribute's value as text.
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Default)]
struct State {
    spans: Vec<Span>,
    requests: usize,
    undecodable: usize,
    content_types: Vec<String>,
    /// [`Collector::start_redirecting`]: every request is answered `307` to this URL, and only counted.
    redirect_to: Option<String>,
}

/// The running collector.
pub struct Collector {
    /// `http://127.0.0.1:PORT` — the `telemetry.otlp_endpoint`.
    pub base: String,
    state: Arc<Mutex<State>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl Collector {
    /// Starts on a free loopback port: a plain HTTP/1.1 server on its own threads (one per connection, keep-alive
    /// honoured), independent of the test's runtime, as a collector is of the processes that export to it.
    pub fn start() -> Collector {
        Collector::start_with(State::default())
    }

    /// An endpoint that is not a collector: it answers every request `307 Temporary Redirect` to `to` +
    /// `/v1/traces` (another collector), records no span and counts the requests. An exporter that follows the
    /// redirect sends its spans to `to`; one that does not fails the export.
    pub fn start_redirecting(to: &str) -> Collector {
        Collector::start_with(State {
            redirect_to: Some(format!("{to}/v1/traces")),
            ..State::default()
        })
    }

    fn start_with(state: State) -> Collector {
        let state = Arc::new(Mutex::new(state));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the collector");
        listener.set_nonblocking(true).expect("nonblocking accept");
        let port = listener.local_addr().expect("address").port();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (st, stopped) = (state.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let st = st.clone();
                        std::thread::spawn(move || serve(stream, &st));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Collector {
            base: format!("http://127.0.0.1:{port}"),
            state,
            stop,
        }
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Span> {
        self.state.lock().expect("collector").spans.clone()
    }

    /// Export requests received, and how many of them did not decode.
    pub fn requests(&self) -> (usize, usize) {
        let s = self.state.lock().expect("collector");
        (s.requests, s.undecodable)
    }

    /// The `Content-Type`s the exporters sent.
    pub fn content_types(&self) -> Vec<String> {
        self.state.lock().expect("collector").content_types.clone()
    }

    /// The spans of trace `trace_id`.
    pub fn trace(&self, trace_id: &str) -> Vec<Span> {
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }

    /// Waits (up to `timeout`) until `ready` holds for the spans received, and returns them.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        what: &str,
        ready: impl Fn(&[Span]) -> bool,
    ) -> Vec<Span> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if ready(&spans) {
                return spans;
            }
            if tokio::time::Instant::now() > deadline {
                let names: Vec<String> = spans
                    .iter()
                    .map(|s| format!("{}:{}:{}", s.service, s.name, &s.trace_id[..8]))
                    .collect();
                let (requests, undecodable) = self.requests();
                panic!(
                    "the collector never received {what}; after {requests} requests \
                     ({undecodable} undecodable) it has: {names:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Stops accepting connections.
    pub async fn stop(self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// One connection: requests read one after another (keep-alive), each answered 200 with an empty
/// `ExportTraceServiceResponse`, or 400 when its body does not decode.
fn serve(stream: std::net::TcpStream, state: &Mutex<State>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut length = 0usize;
        let mut content_type = String::new();
        loop {
            let mut header = String::new();
            if reader.read_line(&mut header).unwrap_or(0) == 0 {
                return;
            }
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "content-type" => content_type = value.trim().to_owned(),
                    _ => {}
                }
            }
        }
        let mut body = vec![0u8; length.min(64 * 1024 * 1024)];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let redirect = {
            let mut s = state.lock().expect("collector");
            let to = s.redirect_to.clone();
            if to.is_some() {
                s.requests += 1;
            }
            to
        };
        if let Some(to) = redirect {
            let answer = format!(
                "HTTP/1.1 307 Temporary Redirect\r\nlocation: {to}\r\ncontent-length: 0\r\n\r\n"
            );
            if writer.write_all(answer.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        let ok = line.starts_with("POST /v1/traces ") && record(state, content_type, &body);
        let status = if ok { "200 OK" } else { "400 Bad Request" };
        let answer = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
        );
        if writer.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn record(state: &Mutex<State>, content_type: String, body: &[u8]) -> bool {
    let mut s = state.lock().expect("collector");
    s.requests += 1;
    s.content_types.push(content_type);
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        s.undecodable += 1;
        return false;
    };
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
            .map(value_text)
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                s.spans.push(Span {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|kv| (kv.key.clone(), value_text(kv)))
                        .collect(),
                    links: span
                        .links
                        .iter()
                        .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
                        .collect(),
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                });
            }
        }
    }
    true
}

fn value_text(kv: &KeyValue) -> String {
    match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}
