//! The real `hookline-edge` binary as a child process: graceful shutdown on SIGTERM, start-up without a
//! database, and configuration errors at start-up.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use hookline_signature::sign;
use hookline_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Upper bound for anything a healthy edge does quickly (start, stop, answer).
const WAIT: Duration = Duration::from_secs(8);

/// A configuration file in the temporary directory, removed on drop.
struct ConfigFile(PathBuf);

impl ConfigFile {
    fn new(toml: &str) -> ConfigFile {
        let path = std::env::temp_dir().join(format!(
            "hookline-edge-process-{}.toml",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&path, toml).expect("write config file");
        ConfigFile(path)
    }

    fn path(&self) -> &str {
        self.0.to_str().expect("UTF-8 temp path")
    }
}

impl Drop for ConfigFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

/// The test configuration (relay not embedded: no broker needed) listening on `port`.
fn edge_toml(database_url: &str, extra_edge: &str, port: u16) -> String {
    let toml = test_config_toml(database_url, extra_edge, "[relay]\nembedded = false");
    let default_listen = "listen = \"127.0.0.1:0\"";
    assert!(
        toml.contains(default_listen),
        "test_config_toml no longer listens on port 0"
    );
    toml.replace(default_listen, &format!("listen = \"127.0.0.1:{port}\""))
}

/// A client that keeps no idle connection, so the probes never hold a connection open on the edge.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .expect("http client")
}

/// A running edge child process on its own port and configuration file.
struct EdgeProcess {
    child: Child,
    base: String,
    port: u16,
    _config: ConfigFile,
}

impl EdgeProcess {
    /// Starts `hookline-edge --config FILE` and waits until `/healthz` answers 200.
    async fn start(database_url: &str, extra_edge: &str) -> EdgeProcess {
        let port = free_port();
        let config = ConfigFile::new(&edge_toml(database_url, extra_edge, port));
        let child = Child::spawn("hookline-edge", &["--config", config.path()], &[]);
        let mut edge = EdgeProcess {
            child,
            base: format!("http://127.0.0.1:{port}"),
            port,
            _config: config,
        };
        let client = client();
        let url = format!("{}/healthz", edge.base);
        wait_until(WAIT, "the edge child answers /healthz", || {
            let (client, url) = (client.clone(), url.clone());
            async move {
                client
                    .get(url)
                    .send()
                    .await
                    .is_ok_and(|r| r.status() == 200)
            }
        })
        .await;
        assert!(edge.running(), "the edge exited right after start-up");
        edge
    }

    fn pid(&self) -> u32 {
        self.child.0.id()
    }

    /// Whether the child is still running (reaps it if it has exited).
    fn running(&mut self) -> bool {
        matches!(self.child.0.try_wait(), Ok(None))
    }

    /// Waits for the child to exit and returns its status.
    async fn wait_exit(&mut self, what: &str) -> std::process::ExitStatus {
        let mut status = None;
        wait_until(WAIT, what, || {
            status = self.child.0.try_wait().expect("try_wait");
            let exited = status.is_some();
            async move { exited }
        })
        .await;
        status.expect("exited")
    }
}

/// Sends SIGTERM to `pid` (graceful stop), without libc.
fn sigterm(pid: u32) {
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -TERM {pid} failed: {status}");
}

/// Whether a NEW connection to `port` gets `200` for `GET /healthz`. A refused connection, a reset, a closed
/// connection without an answer or no answer within a second all count as "not accepting".
async fn serves_new_requests(port: u16) -> bool {
    let attempt = async {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        Some(buf.starts_with(b"HTTP/1.1 200"))
    };
    tokio::time::timeout(Duration::from_secs(1), attempt)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Reads from `stream` until the end of a response head (`\r\n\r\n`) and returns the head.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(WAIT, stream.read(&mut byte))
            .await
            .expect("response head within the deadline")
            .expect("read response head");
        assert!(
            n > 0,
            "connection closed in the middle of a response head: {:?}",
            String::from_utf8_lossy(&head)
        );
        head.push(byte[0]);
    }
    String::from_utf8(head).expect("ASCII head")
}

/// SIGTERM while a request is in flight: the edge stops accepting, finishes the request (200, row stored) and
/// exits successfully.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_the_in_flight_request_then_exits() {
    let db = TestDb::new().await;
    let mut edge = EdgeProcess::start(&db.url, "body_read_timeout_ms = 5000").await;

    let body = stripe_event("evt_sigterm_in_flight", "pi_sigterm", 4_200);
    let signature = sign::stripe(secrets::STRIPE.as_bytes(), now(), &body);
    let (first, rest) = body.split_at(body.len() / 2);

    // `Expect: 100-continue` makes the edge say when it has parsed the head and called the handler: from then on
    // the request is in flight, not a connection still waiting to be read.
    let mut stream = TcpStream::connect(("127.0.0.1", edge.port))
        .await
        .expect("connect");
    let head = format!(
        "POST /webhooks/stripe HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Stripe-Signature: {signature}\r\nContent-Length: {len}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n",
        port = edge.port,
        len = body.len(),
    );
    stream.write_all(head.as_bytes()).await.expect("send head");
    let interim = read_head(&mut stream).await;
    assert!(
        interim.starts_with("HTTP/1.1 100 Continue"),
        "expected 100 Continue, got {interim:?}"
    );
    stream.write_all(first).await.expect("send half the body");
    stream.flush().await.expect("flush");

    sigterm(edge.pid());

    // Stop accepting: new connections are refused or never get a 200.
    wait_until(WAIT, "the edge stops serving new connections", || {
        let port = edge.port;
        async move { !serves_new_requests(port).await }
    })
    .await;
    assert!(
        edge.running(),
        "the edge exited while a request was still in flight"
    );
    assert_eq!(
        db.event_count().await,
        0,
        "nothing stored before the body is complete"
    );

    // The in-flight request completes normally.
    stream
        .write_all(rest)
        .await
        .expect("send the rest of the body");
    let mut response = Vec::new();
    tokio::time::timeout(WAIT, stream.read_to_end(&mut response))
        .await
        .expect("response within the deadline")
        .expect("read response");
    // Closing our side lets the edge finish the connection without waiting out its disconnect timeout.
    drop(stream);
    let response = String::from_utf8_lossy(&response).into_owned();
    assert!(
        response.starts_with("HTTP/1.1 200"),
        "the in-flight request is answered 200 during shutdown: {response:?}"
    );
    assert!(
        response.contains("\"received\":true") && response.contains("\"duplicate\":false"),
        "{response:?}"
    );
    let stored: Vec<(String, String)> =
        sqlx::query_as("SELECT provider, provider_event_id FROM webhook_events")
            .fetch_all(&db.pool)
            .await
            .expect("read events");
    assert_eq!(
        stored,
        vec![("stripe".to_string(), "evt_sigterm_in_flight".to_string())]
    );

    // Then the process exits, successfully, and the port stays closed.
    let status = edge.wait_exit("the edge exits after SIGTERM").await;
    assert!(status.success(), "graceful stop exits 0, got {status}");
    assert!(
        TcpStream::connect(("127.0.0.1", edge.port)).await.is_err(),
        "nothing listens after exit"
    );
}

/// An edge whose database is unreachable still starts: alive, not ready, and asks providers to retry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starts_and_answers_503_while_the_database_is_down() {
    let mut edge = EdgeProcess::start("postgres://postgres@127.0.0.1:1/nowhere", "").await;
    let client = client();

    let ready = client
        .get(format!("{}/readyz", edge.base))
        .send()
        .await
        .expect("readyz answers");
    assert_eq!(ready.status(), 503);
    let ready: serde_json::Value = ready.json().await.expect("JSON readyz");
    assert_eq!(ready["status"], "not_ready", "{ready}");

    let body = stripe_event("evt_db_down", "pi_db_down", 1_000);
    let mut req = client
        .post(format!("{}/webhooks/stripe", edge.base))
        .body(body.clone());
    for (k, v) in stripe_headers(secrets::STRIPE, now(), &body) {
        req = req.header(k, v);
    }
    let res = req.send().await.expect("webhook answered");
    assert_eq!(res.status(), 503);
    let retry_after = res
        .headers()
        .get("retry-after")
        .expect("503 carries Retry-After")
        .to_str()
        .expect("ASCII Retry-After")
        .to_string();
    assert!(
        retry_after.parse::<u32>().is_ok_and(|s| s > 0),
        "Retry-After is a positive number of seconds: {retry_after:?}"
    );
    let res: serde_json::Value = res.json().await.expect("JSON error body");
    assert_eq!(res["error"], "unavailable", "{res}");
    assert!(
        !res.to_string().contains("127.0.0.1:1"),
        "the database address is not leaked to the client: {res}"
    );

    // Still alive and serving.
    assert!(
        edge.running(),
        "the edge must keep running without a database"
    );
    let health = client
        .get(format!("{}/healthz", edge.base))
        .send()
        .await
        .expect("healthz answers");
    assert_eq!(health.status(), 200);
    assert!(edge.running());
}

/// A typo in a provider's scheme stops start-up at once, naming the field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_scheme_fails_start_up_naming_the_field() {
    let port = free_port();
    let toml = edge_toml(&format!("{}/hookline_unused", pg_base_url()), "", port);
    let good = "[providers.github]\nscheme = \"github\"";
    assert!(
        toml.contains(good),
        "test_config_toml changed its github provider"
    );
    let config = ConfigFile::new(&toml.replacen(good, "[providers.github]\nscheme = \"strpe\"", 1));

    let mut child = Child(
        Command::new(binary("hookline-edge"))
            .args(["--config", config.path()])
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn hookline-edge"),
    );
    let mut status = None;
    wait_until(WAIT, "the edge exits on an invalid config", || {
        status = child.0.try_wait().expect("try_wait");
        let exited = status.is_some();
        async move { exited }
    })
    .await;
    let status = status.expect("exited");
    let mut stderr = String::new();
    std::io::Read::read_to_string(
        &mut child.0.stderr.take().expect("stderr pipe"),
        &mut stderr,
    )
    .expect("read stderr");

    assert!(
        !status.success(),
        "an invalid config must fail: {status}, {stderr}"
    );
    for needle in ["providers.", ".scheme", "providers.github.scheme", "strpe"] {
        assert!(stderr.contains(needle), "stderr lacks {needle:?}: {stderr}");
    }
    assert!(
        TcpStream::connect(("127.0.0.1", port)).await.is_err(),
        "nothing may listen after a failed start-up"
    );
}
