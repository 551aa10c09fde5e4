//! The console's login under attack, against the real `hookline console serve` and `hookline-edge` binaries
//! (issue 25, findings 1, 2 and 7):
//! concurrent wrong passwords are counted before they are checked, the check pool is bounded (its excess is
//! answered 429 at once, without hashing), a flood of logins neither grows the process past its memory target
//! nor stops the webhook acks, and failures with made-up names or from another address do not lock an operator
//! out.
//!
//! The number of Argon2 checks actually run is read from the console process's `/metrics`
//! (`hookline_console_password_checks_total`). Client addresses are told apart by binding the client sockets to
//! other loopback addresses (127.0.0.2, …), which the console sees as peers.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hookline_tests::console::{hash_password, PASSWORD};
use hookline_tests::*;

/// Anything a healthy edge does quickly.
const WAIT: Duration = Duration::from_secs(15);
/// `MAX_FAILURES` of the console: failed logins per (address, name) per 15 minutes.
const MAX_FAILURES: usize = 5;
/// The memory target: at most this much above the idle RSS during a login flood.
const MEMORY_BUDGET_KIB: u64 = 64 * 1024;

/// The real edge and the real console as child processes, the console's one operator `alice` / [`PASSWORD`].
struct ConsoleEdge {
    _child: Child,
    console_process: ConsoleProcess,
    edge: String,
    console: String,
    config: PathBuf,
    _db: TestDb,
}

impl Drop for ConsoleEdge {
    fn drop(&mut self) {
        std::fs::remove_file(&self.config).ok();
    }
}

impl ConsoleEdge {
    async fn start() -> ConsoleEdge {
        let hash = hash_password(PASSWORD).await;
        let db = TestDb::new().await;
        // The edge ignores [console]; its listen must still differ from edge.listen for the file to be valid.
        // The console process gets a port of its own from `ConsoleProcess::start`.
        let (edge_port, console_port) = (free_port(), free_port());
        let toml = test_config_toml(
            &db.url,
            "",
            &format!(
                "[relay]\nembedded = false\n[console]\nlisten = \"127.0.0.1:{console_port}\"\n\
                 [[console.operators]]\nname = \"alice\"\npassword_hash = \"{hash}\"\n"
            ),
        )
        .replace(
            "listen = \"127.0.0.1:0\"",
            &format!("listen = \"127.0.0.1:{edge_port}\""),
        );
        let config = std::env::temp_dir().join(format!(
            "hookline-console-login-{}.toml",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::write(&config, &toml).expect("write the config file");
        let path = config.to_str().expect("UTF-8 path").to_string();
        let child = Child::spawn("hookline-edge", &["--config", &path], &[]);
        let console_process = ConsoleProcess::start(&toml, edge_port).await;
        let edge = ConsoleEdge {
            _child: child,
            edge: format!("http://127.0.0.1:{edge_port}"),
            console: console_process.base.clone(),
            console_process,
            config,
            _db: db,
        };
        let probe = reqwest::Client::new();
        for url in [
            format!("{}/healthz", edge.edge),
            format!("{}/login", edge.console),
        ] {
            wait_until(WAIT, &format!("the child process answers {url}"), || {
                let (probe, url) = (probe.clone(), url.clone());
                async move { probe.get(url).send().await.is_ok_and(|r| r.status() == 200) }
            })
            .await;
        }
        edge
    }

    /// The console process's pid: the password checks (and their memory) are there, not in the edge.
    fn pid(&self) -> u32 {
        self.console_process.child.0.id()
    }

    /// `hookline_console_password_checks_total` from the console process's `/metrics` (0 before the first check).
    async fn password_checks(&self) -> u64 {
        let text = reqwest::get(format!("{}/metrics", self.console))
            .await
            .expect("GET /metrics")
            .text()
            .await
            .expect("metrics text");
        text.lines()
            .find_map(|l| l.strip_prefix("hookline_console_password_checks_total "))
            .map(|v| v.trim().parse::<f64>().expect("a number") as u64)
            .unwrap_or(0)
    }

    /// A login form (pre-login cookie and its token) for a client.
    async fn form(&self, client: &reqwest::Client) -> LoginForm {
        let res = client
            .get(format!("{}/login", self.console))
            .send()
            .await
            .expect("GET /login");
        let cookie = res
            .headers()
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|c| c.starts_with("hookline_console_login="))
            .and_then(|c| c.split(';').next())
            .expect("a pre-login cookie")
            .to_string();
        let text = res.text().await.expect("login page");
        let marker = "name=\"csrf\" value=\"";
        let start = text.find(marker).expect("a csrf field") + marker.len();
        LoginForm {
            cookie,
            csrf: text[start..start + 64].to_string(),
        }
    }
}

struct LoginForm {
    cookie: String,
    csrf: String,
}

/// What a login POST answered.
#[derive(Debug)]
struct Attempt {
    status: u16,
    text: String,
    elapsed: Duration,
    device: Option<String>,
}

impl Attempt {
    fn busy(&self) -> bool {
        self.status == 429 && self.text.contains("busy")
    }

    fn limited(&self) -> bool {
        self.status == 429 && self.text.contains("Too many failed logins")
    }
}

/// A client whose connections come from `from` (a loopback address), not following redirects.
fn client_from(from: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(from.parse::<IpAddr>().expect("address"))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

async fn login(
    edge: &ConsoleEdge,
    client: &reqwest::Client,
    form: &LoginForm,
    name: &str,
    password: &str,
    device: Option<&str>,
) -> Attempt {
    let mut cookie = form.cookie.clone();
    if let Some(d) = device {
        cookie.push_str(&format!("; hookline_console_device={d}"));
    }
    let body = form_urlencoded::Serializer::new(String::new())
        .append_pair("csrf", &form.csrf)
        .append_pair("name", name)
        .append_pair("password", password)
        .finish();
    let started = Instant::now();
    let sent = client
        .post(format!("{}/login", edge.console))
        .header("cookie", cookie)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await;
    let res = match sent {
        Ok(res) => res,
        // Status 0: no answer (the assertions say what they saw).
        Err(e) => {
            return Attempt {
                status: 0,
                text: format!("no answer: {e}"),
                elapsed: started.elapsed(),
                device: None,
            }
        }
    };
    let status = res.status().as_u16();
    let device = res
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|c| c.strip_prefix("hookline_console_device="))
        .and_then(|c| c.split(';').next())
        .map(str::to_string);
    let text = res.text().await.unwrap_or_default();
    Attempt {
        status,
        text,
        elapsed: started.elapsed(),
        device,
    }
}

/// `VmRSS` and `VmHWM` (peak) of `pid`, KiB; `None` once the process has exited.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// Finding 1: 100 wrong passwords for one operator sent at once from one address. At most `MAX_FAILURES` are
/// checked (401), every other one is 429, and Argon2 ran exactly as many times as there were 401s; after the
/// burst the pair's budget is spent, so the burst counted every attempt it checked.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_wrong_passwords_for_one_operator_are_counted_before_the_check() {
    let edge = ConsoleEdge::start().await;
    let client = client_from("127.0.0.1");
    let form = edge.form(&client).await;
    let before = edge.password_checks().await;

    let burst = (0..100).map(|i| {
        let (edge, client, form) = (&edge, &client, &form);
        async move { login(edge, client, form, "alice", &format!("wrong {i}"), None).await }
    });
    let answers = futures::future::join_all(burst).await;
    let unauthorized = answers.iter().filter(|a| a.status == 401).count();
    let too_many = answers.iter().filter(|a| a.status == 429).count();
    assert_eq!(
        unauthorized + too_many,
        100,
        "every answer is 401 or 429: {:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert!(
        unauthorized <= MAX_FAILURES,
        "{unauthorized} wrong passwords were checked in one burst (limit {MAX_FAILURES})"
    );
    assert!(unauthorized >= 1, "the burst checked nothing at all");
    let checks = edge.password_checks().await - before;
    assert_eq!(
        checks, unauthorized as u64,
        "Argon2 ran {checks} times for {unauthorized} answers 401"
    );

    // The attempts checked in the burst were counted: only what is left of the budget can still be tried.
    let mut later = 0;
    loop {
        let a = login(&edge, &client, &form, "alice", "still wrong", None).await;
        if a.limited() {
            break;
        }
        assert_eq!(a.status, 401, "sequential attempt: {} {}", a.status, a.text);
        later += 1;
        assert!(later <= MAX_FAILURES, "the limit never trips");
    }
    assert_eq!(
        unauthorized + later,
        MAX_FAILURES,
        "the burst's checked attempts and the later ones add up to the limit"
    );
    let right = login(&edge, &client, &form, "alice", PASSWORD, None).await;
    assert!(
        right.limited(),
        "past the limit even the right password waits: {right:?}"
    );
    assert_eq!(
        edge.password_checks().await - before,
        MAX_FAILURES as u64,
        "no check past the limit"
    );
}

/// Finding 7: failures with made-up names from an address do not lock the real operator out of it, and a
/// stranger guessing the operator's name from another address does not either. A name's budget across
/// addresses is independent of the pair's, and a device cookie from an earlier login is exempt from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stranger_cannot_lock_an_operator_out() {
    let edge = ConsoleEdge::start().await;

    // An earlier login from 127.0.0.4 leaves a device cookie in that browser.
    let browser = client_from("127.0.0.4");
    let browser_form = edge.form(&browser).await;
    let first = login(&edge, &browser, &browser_form, "alice", PASSWORD, None).await;
    assert_eq!(first.status, 303, "first login: {first:?}");
    let device = first.device.clone().expect("a device cookie");

    // As in the issue: 5 failures with made-up names from one address, then the operator from that address.
    let shared = client_from("127.0.0.2");
    let form = edge.form(&shared).await;
    for i in 0..MAX_FAILURES {
        let a = login(
            &edge,
            &shared,
            &form,
            &format!("made-up-{i}"),
            "guess",
            None,
        )
        .await;
        assert_eq!(a.status, 401, "made-up name {i}: {a:?}");
    }
    let operator = login(&edge, &shared, &form, "alice", PASSWORD, None).await;
    assert_eq!(
        operator.status, 303,
        "the operator from the same address is logged in: {} {}",
        operator.status, operator.text
    );

    // A stranger guessing alice's password from 127.0.0.3 spends only the (127.0.0.3, alice) budget.
    let stranger = client_from("127.0.0.3");
    let stranger_form = edge.form(&stranger).await;
    for i in 0..MAX_FAILURES {
        let a = login(
            &edge,
            &stranger,
            &stranger_form,
            "alice",
            &format!("guess {i}"),
            None,
        )
        .await;
        assert_eq!(a.status, 401, "guess {i}: {a:?}");
    }
    let blocked = login(
        &edge,
        &stranger,
        &stranger_form,
        "alice",
        "guess again",
        None,
    )
    .await;
    assert!(
        blocked.limited(),
        "the stranger's pair is limited: {blocked:?}"
    );
    let elsewhere = client_from("127.0.0.5");
    let elsewhere_form = edge.form(&elsewhere).await;
    let ok = login(&edge, &elsewhere, &elsewhere_form, "alice", PASSWORD, None).await;
    assert_eq!(ok.status, 303, "alice from another address: {ok:?}");

    // Brute force of the name from many addresses: 20 failures in all (NAME_MAX_FAILURES) close the name to
    // new browsers, whatever the address...
    for n in 10..13 {
        let c = client_from(&format!("127.0.0.{n}"));
        let f = edge.form(&c).await;
        for i in 0..MAX_FAILURES {
            let a = login(&edge, &c, &f, "alice", &format!("spray {n} {i}"), None).await;
            assert_eq!(a.status, 401, "spray from 127.0.0.{n}: {a:?}");
        }
    }
    let fresh = client_from("127.0.0.20");
    let fresh_form = edge.form(&fresh).await;
    let refused = login(&edge, &fresh, &fresh_form, "alice", PASSWORD, None).await;
    assert!(
        refused.limited(),
        "the name's budget across addresses is spent: {refused:?}"
    );
    // ...but not to the browser alice logged in with before, from any address.
    let with_device = login(&edge, &fresh, &fresh_form, "alice", PASSWORD, Some(&device)).await;
    assert_eq!(
        with_device.status, 303,
        "alice with her device cookie: {with_device:?}"
    );
}

/// Finding 2 (the pool): logins beyond the check pool's places are answered 429 at once, without hashing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_excess_of_the_check_pool_is_answered_429_at_once_without_hashing() {
    let edge = ConsoleEdge::start().await;
    let client = client_from("127.0.0.1");
    let form = edge.form(&client).await;
    let before = edge.password_checks().await;

    // 40 different made-up names (no pair limit applies; the address's 20 failures may trip).
    let burst = (0..40).map(|i| {
        let (edge, client, form) = (&edge, &client, &form);
        async move { login(edge, client, form, &format!("nobody-{i}"), "guess", None).await }
    });
    let answers = futures::future::join_all(burst).await;
    let checked = answers.iter().filter(|a| a.status == 401).count();
    let busy: Vec<&Attempt> = answers.iter().filter(|a| a.busy()).collect();
    assert!(
        answers.iter().all(|a| a.status == 401 || a.status == 429),
        "{:?}",
        answers.iter().map(|a| a.status).collect::<Vec<_>>()
    );
    assert!(
        busy.len() >= 20,
        "only {} of 40 simultaneous logins were turned away by the pool ({checked} checked)",
        busy.len()
    );
    let checks = edge.password_checks().await - before;
    assert_eq!(checks, checked as u64, "only the 401s were hashed");
    let slowest_busy = busy.iter().map(|a| a.elapsed).max().unwrap_or_default();
    let slowest_check = answers
        .iter()
        .filter(|a| a.status == 401)
        .map(|a| a.elapsed)
        .min()
        .unwrap_or_default();
    assert!(
        slowest_busy < Duration::from_millis(1500),
        "a busy answer took {slowest_busy:?} (fastest checked answer {slowest_check:?})"
    );
}

/// Finding 2 (memory and the webhook path): 500 simultaneous logins with unknown names. The console process
/// stays within 64 MiB above its idle RSS (peak `VmHWM` and sampled `VmRSS`), and webhooks posted to the edge
/// during the flood are acked 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_flood_of_500_logins_stays_within_the_memory_target_and_webhooks_are_acked() {
    let edge = ConsoleEdge::start().await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(600)
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let form = edge.form(&client).await;
    // Warm: one check, one webhook.
    let warm = login(&edge, &client, &form, "alice", PASSWORD, None).await;
    assert_eq!(warm.status, 303, "warm-up login: {warm:?}");
    let hooks = reqwest::Client::new();
    let post_webhook = |i: usize| {
        let hooks = hooks.clone();
        let url = format!("{}/webhooks/stripe", edge.edge);
        async move {
            let body = stripe_event(&format!("evt_flood_{i}"), &format!("pi_flood_{i}"), 1_000);
            let mut req = hooks.post(url).body(body.clone());
            for (k, v) in stripe_headers(secrets::STRIPE, now(), &body) {
                req = req.header(k, v);
            }
            let started = Instant::now();
            let status = req.send().await.map(|r| r.status().as_u16()).unwrap_or(0);
            (status, started.elapsed())
        }
    };
    assert_eq!(post_webhook(0).await.0, 200, "warm-up webhook");
    let (idle, _) = memory_kib(edge.pid()).expect("the console runs");

    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (pid, sampling) = (edge.pid(), sampling.clone());
        tokio::spawn(async move {
            let mut max = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                let Some((rss, _)) = memory_kib(pid) else {
                    break;
                };
                max = max.max(rss);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            max
        })
    };
    let flood = futures::future::join_all((0..500).map(|i| {
        let (edge, client, form) = (&edge, &client, &form);
        async move { login(edge, client, form, &format!("flood-{i}"), "guess", None).await }
    }));
    let webhooks = async {
        let mut acks = Vec::new();
        for i in 1..=20 {
            acks.push(post_webhook(i).await);
        }
        acks
    };
    let (answers, acks) = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::join!(flood, webhooks)
    })
    .await
    .expect("the flood and the webhooks end within two minutes");
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let sampled = sampler.await.expect("sampler");
    let (after, peak) = memory_kib(edge.pid()).unwrap_or_else(|| {
        panic!(
            "the console exited during the flood (sampled VmRSS up to {sampled} KiB, idle {idle} KiB)"
        )
    });

    let checked = answers.iter().filter(|a| a.status == 401).count();
    let failed: Vec<_> = acks.iter().filter(|(s, _)| *s != 200).collect();
    assert!(
        failed.is_empty(),
        "webhooks not acked during the flood: {failed:?}"
    );
    let worst_ack = acks.iter().map(|(_, d)| *d).max().unwrap_or_default();
    eprintln!(
        "idle {idle} KiB, sampled max {sampled} KiB, after {after} KiB, peak (VmHWM) {peak} KiB; \
         {checked} of 500 checked; slowest webhook ack {worst_ack:?}"
    );
    for (what, kib) in [
        ("peak VmHWM", peak),
        ("sampled VmRSS", sampled),
        ("VmRSS after", after),
    ] {
        assert!(
            kib <= idle + MEMORY_BUDGET_KIB,
            "{what} {kib} KiB is more than 64 MiB above the idle {idle} KiB"
        );
    }
    let unanswered = answers.iter().filter(|a| a.status == 0).count();
    assert!(
        answers.iter().all(|a| a.status == 401 || a.status == 429),
        "every flood login is refused ({unanswered} got no answer at all): {:?}",
        answers
            .iter()
            .map(|a| a.status)
            .filter(|s| *s != 401 && *s != 429)
            .collect::<Vec<_>>()
    );
}
