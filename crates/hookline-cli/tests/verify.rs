//! `hookline verify` as an operator runs it: the real binary, its exit code (0 valid, 1 invalid, 2 unusable
//! inputs) and what it prints.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

use hookline_signature::{sign, Request, Scheme, Verifier};

const BIN: &str = env!("CARGO_BIN_EXE_hookline");
const VECTORS: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../../shared/vectors/signatures.json"
);

const STRIPE_SECRET: &str = "whsec_cli_verify_secret";
const STRIPE_OLD_SECRET: &str = "whsec_cli_verify_previous";
const GITHUB_SECRET: &str = "It's a Secret to Everybody";
const MP_SECRET: &str = "mp_cli_verify_secret";
/// A fixed signing time, so every run prints the same thing.
const T: i64 = 1_767_225_600;

/// One finished run of the binary.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// Asserts the exit code, printing both streams on failure.
    fn expect_code(&self, code: i32) -> &Run {
        assert_eq!(self.code, code, "unexpected exit code: {self:#?}");
        self
    }

    /// Asserts that stdout contains every needle.
    fn stdout_has(&self, needles: &[&str]) -> &Run {
        for n in needles {
            assert!(self.stdout.contains(n), "stdout lacks {n:?}: {self:#?}");
        }
        self
    }

    /// Asserts that stderr contains every needle.
    fn stderr_has(&self, needles: &[&str]) -> &Run {
        for n in needles {
            assert!(self.stderr.contains(n), "stderr lacks {n:?}: {self:#?}");
        }
        self
    }
}

/// Runs `hookline verify ARGS`, feeding `stdin` (or nothing) and setting/removing environment variables
/// (`Some(value)` sets, `None` removes).
fn verify_with(args: &[String], stdin: Option<&[u8]>, env: &[(&str, Option<&str>)]) -> Run {
    let mut cmd = Command::new(BIN);
    cmd.arg("verify")
        .args(args)
        .env_remove("HOOKLINE_CONFIG")
        .env("RUST_LOG", "warn")
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        match v {
            Some(v) => cmd.env(k, v),
            None => cmd.env_remove(k),
        };
    }
    let mut child = cmd.spawn().expect("spawn hookline");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin pipe");
        pipe.write_all(input).expect("write stdin");
        // Dropping the pipe closes it: the binary sees end of input.
    }
    let out = child.wait_with_output().expect("wait for hookline");
    Run {
        code: out.status.code().expect("exited, not killed by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

fn verify(args: &[String]) -> Run {
    verify_with(args, None, &[])
}

/// A body file in the temporary directory, removed on drop.
struct BodyFile(PathBuf);

impl BodyFile {
    fn new(body: &[u8]) -> BodyFile {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "hookline-cli-verify-{}-{}.body",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::write(&path, body).expect("write body file");
        BodyFile(path)
    }

    /// `--body-file=PATH`.
    fn arg(&self) -> String {
        format!("--body-file={}", self.0.display())
    }
}

impl Drop for BodyFile {
    fn drop(&mut self) {
        std::fs::remove_file(&self.0).ok();
    }
}

/// `--flag=value` (the `=` form, so values starting with `-` are never taken for flags).
fn opt(flag: &str, value: impl std::fmt::Display) -> String {
    format!("--{flag}={value}")
}

fn header(name: &str, value: &str) -> String {
    opt("header", format!("{name}: {value}"))
}

fn stripe_body(event_id: &str) -> Vec<u8> {
    format!(
        r#"{{"id":"{event_id}","object":"event","type":"payment_intent.succeeded","data":{{"object":{{"id":"pi_1","amount":1000}}}}}}"#
    )
    .into_bytes()
}

/// Arguments of a Stripe check: scheme, the signature header, the secrets and `--now`.
fn stripe_args(signature: &str, secrets: &[&str], now: i64, body: &BodyFile) -> Vec<String> {
    let mut args = vec![
        opt("scheme", "stripe"),
        header("Stripe-Signature", signature),
        opt("now", now),
        body.arg(),
    ];
    args.extend(secrets.iter().map(|s| opt("secret", s)));
    args
}

// ---------------------------------------------------------------------------------------------------------------
// Stripe

#[test]
fn valid_stripe_event_prints_event_id_type_age_and_secret() {
    let body = stripe_body("evt_cli_valid_1");
    let file = BodyFile::new(&body);
    let sig = sign::stripe(STRIPE_SECRET.as_bytes(), T, &body);
    verify(&stripe_args(&sig, &[STRIPE_SECRET], T + 10, &file))
        .expect_code(0)
        .stdout_has(&[
            "valid",
            "event_id: evt_cli_valid_1",
            "event_type: payment_intent.succeeded",
            &format!("signed_at: {T} (10 s before --now)"),
            "matched secret: #1 of 1",
        ]);
}

#[test]
fn rotation_reports_that_the_second_secret_matched() {
    let body = stripe_body("evt_cli_rotation");
    let file = BodyFile::new(&body);
    let sig = sign::stripe(STRIPE_SECRET.as_bytes(), T, &body);
    verify(&stripe_args(
        &sig,
        &[STRIPE_OLD_SECRET, STRIPE_SECRET],
        T,
        &file,
    ))
    .expect_code(0)
    .stdout_has(&["event_id: evt_cli_rotation", "matched secret: #2 of 2"]);
}

#[test]
fn wrong_secret_is_a_signature_mismatch_on_the_header() {
    let body = stripe_body("evt_cli_wrong_secret");
    let file = BodyFile::new(&body);
    let sig = sign::stripe(b"whsec_someone_else", T, &body);
    let run = verify(&stripe_args(&sig, &[STRIPE_SECRET], T, &file));
    run.expect_code(1).stdout_has(&[
        "invalid (signature_mismatch)",
        "v1 signature",
        "header Stripe-Signature",
        "the configured secret",
    ]);
    assert!(
        !run.stdout.contains("event_id"),
        "an invalid request reports no event id: {run:#?}"
    );

    // With two secrets the message says both were tried.
    verify(&stripe_args(
        &sig,
        &[STRIPE_OLD_SECRET, STRIPE_SECRET],
        T,
        &file,
    ))
    .expect_code(1)
    .stdout_has(&["signature_mismatch", "any of 2 configured secrets"]);
}

#[test]
fn stale_timestamp_is_rejected_with_the_skew_and_tolerance() {
    let body = stripe_body("evt_cli_stale");
    let file = BodyFile::new(&body);
    let sig = sign::stripe(STRIPE_SECRET.as_bytes(), T, &body);
    verify(&stripe_args(&sig, &[STRIPE_SECRET], T + 400, &file))
        .expect_code(1)
        .stdout_has(&[
            "invalid (timestamp_out_of_tolerance)",
            &format!("timestamp {T} is 400 s old"),
            "tolerance 300 s",
        ]);

    // A wider --tolerance accepts the same delivery; a narrower one rejects a fresher one.
    let mut args = stripe_args(&sig, &[STRIPE_SECRET], T + 400, &file);
    args.push(opt("tolerance", 600));
    verify(&args)
        .expect_code(0)
        .stdout_has(&["event_id: evt_cli_stale"]);
    let mut args = stripe_args(&sig, &[STRIPE_SECRET], T - 20, &file);
    args.push(opt("tolerance", 10));
    verify(&args)
        .expect_code(1)
        .stdout_has(&["20 s in the future", "tolerance 10 s"]);
}

#[test]
fn missing_signature_header_is_named() {
    let body = stripe_body("evt_cli_no_header");
    let file = BodyFile::new(&body);
    verify(&[
        opt("scheme", "stripe"),
        opt("secret", STRIPE_SECRET),
        opt("now", T),
        header("Content-Type", "application/json"),
        file.arg(),
    ])
    .expect_code(1)
    .stdout_has(&[
        "invalid (missing_signature)",
        "header Stripe-Signature is missing",
    ]);
}

#[test]
fn tampered_body_does_not_verify() {
    let body = stripe_body("evt_cli_tampered");
    let sig = sign::stripe(STRIPE_SECRET.as_bytes(), T, &body);
    let tampered = String::from_utf8(body)
        .unwrap()
        .replace("\"amount\":1000", "\"amount\":9000");
    let file = BodyFile::new(tampered.as_bytes());
    verify(&stripe_args(&sig, &[STRIPE_SECRET], T, &file))
        .expect_code(1)
        .stdout_has(&["invalid (signature_mismatch)", "header Stripe-Signature"]);
}

#[test]
fn body_is_read_from_stdin_with_dash() {
    let body = stripe_body("evt_cli_stdin");
    let sig = sign::stripe(STRIPE_SECRET.as_bytes(), T, &body);
    let args = [
        opt("scheme", "stripe"),
        opt("secret", STRIPE_SECRET),
        header("Stripe-Signature", &sig),
        opt("now", T),
        "--body-file".to_string(),
        "-".to_string(),
    ];
    verify_with(&args, Some(&body), &[])
        .expect_code(0)
        .stdout_has(&["event_id: evt_cli_stdin"]);
    // Different bytes on stdin: the signature no longer matches, so stdin really is the body.
    verify_with(&args, Some(b"{\"id\":\"evt_cli_stdin\"}"), &[])
        .expect_code(1)
        .stdout_has(&["signature_mismatch"]);
}

// ---------------------------------------------------------------------------------------------------------------
// Other schemes

#[test]
fn valid_github_delivery_prints_the_delivery_id() {
    let body = br#"{"action":"opened","issue":{"number":1}}"#;
    let file = BodyFile::new(body);
    let delivery = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
    let args = [
        opt("scheme", "github"),
        opt("secret", GITHUB_SECRET),
        header(
            "X-Hub-Signature-256",
            &sign::github(GITHUB_SECRET.as_bytes(), body),
        ),
        header("X-GitHub-Delivery", delivery),
        header("X-GitHub-Event", "issues"),
        file.arg(),
    ];
    let run = verify(&args);
    run.expect_code(0).stdout_has(&[
        "valid",
        &format!("event_id: {delivery}"),
        "event_type: issues.opened",
        "matched secret: #1 of 1",
    ]);
    assert!(
        !run.stdout.contains("signed_at"),
        "github signs no timestamp: {run:#?}"
    );

    // The same delivery under another secret names the GitHub header.
    let mut wrong = args.to_vec();
    wrong[1] = opt("secret", "not the secret");
    verify(&wrong)
        .expect_code(1)
        .stdout_has(&["signature_mismatch", "header X-Hub-Signature-256"]);
}

#[test]
fn valid_mercadopago_notification_uses_the_query() {
    let ts = T;
    let body = br#"{"id":98765,"type":"payment","action":"payment.updated","data":{"id":"123"}}"#;
    let file = BodyFile::new(body);
    let sig = sign::mercadopago(MP_SECRET.as_bytes(), Some("123"), Some("req-cli-1"), ts);
    let args = |query: &str| {
        vec![
            opt("scheme", "mercadopago"),
            opt("secret", MP_SECRET),
            header("x-signature", &sig),
            header("x-request-id", "req-cli-1"),
            opt("query", query),
            opt("now", ts + 5),
            file.arg(),
        ]
    };
    verify(&args("data.id=123&type=payment"))
        .expect_code(0)
        .stdout_has(&[
            "event_id: 98765",
            "event_type: payment",
            "matched secret: #1 of 1",
        ]);
    // data.id is signed from the query: another id in the query breaks the signature.
    verify(&args("data.id=124&type=payment"))
        .expect_code(1)
        .stdout_has(&["signature_mismatch", "header x-signature"]);
}

// ---------------------------------------------------------------------------------------------------------------
// Secrets from the environment

#[test]
fn secret_can_come_from_the_environment() {
    let body = stripe_body("evt_cli_env");
    let file = BodyFile::new(&body);
    let sig = sign::stripe(STRIPE_SECRET.as_bytes(), T, &body);
    let args = stripe_args(&sig, &["env:HOOKLINE_CLI_TEST_SECRET"], T, &file);
    let run = verify_with(
        &args,
        None,
        &[("HOOKLINE_CLI_TEST_SECRET", Some(STRIPE_SECRET))],
    );
    run.expect_code(0)
        .stdout_has(&["event_id: evt_cli_env", "matched secret: #1 of 1"]);
    assert!(
        !run.stdout.contains(STRIPE_SECRET) && !run.stderr.contains(STRIPE_SECRET),
        "the secret is never printed: {run:#?}"
    );

    // The variable holds the wrong secret: a normal mismatch, not a usage error.
    verify_with(
        &args,
        None,
        &[("HOOKLINE_CLI_TEST_SECRET", Some("whsec_wrong"))],
    )
    .expect_code(1)
    .stdout_has(&["signature_mismatch"]);
}

#[test]
fn unset_secret_variable_is_a_usage_error() {
    let body = stripe_body("evt_cli_env_unset");
    let file = BodyFile::new(&body);
    let sig = sign::stripe(STRIPE_SECRET.as_bytes(), T, &body);
    let run = verify_with(
        &stripe_args(
            &sig,
            &[STRIPE_SECRET, "env:HOOKLINE_CLI_TEST_UNSET"],
            T,
            &file,
        ),
        None,
        &[("HOOKLINE_CLI_TEST_UNSET", None)],
    );
    run.expect_code(2).stderr_has(&[
        "--secret #2",
        "environment variable HOOKLINE_CLI_TEST_UNSET is not set",
    ]);
    assert!(
        !run.stdout.contains("valid"),
        "no verdict on usage errors: {run:#?}"
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Usage errors: exit 2, reason on stderr, no verdict on stdout

fn assert_usage_error(run: &Run, needles: &[&str]) {
    run.expect_code(2).stderr_has(needles);
    assert!(
        !run.stdout.contains("valid"),
        "no verdict on usage errors: {run:#?}"
    );
}

#[test]
fn unknown_scheme_is_a_usage_error() {
    let file = BodyFile::new(b"{}");
    let run = verify(&[
        "--scheme".into(),
        "nope".into(),
        opt("secret", "x"),
        file.arg(),
    ]);
    assert_usage_error(&run, &["--scheme", "nope", "unknown signature scheme"]);
}

#[test]
fn missing_body_file_is_a_usage_error() {
    let run = verify(&[
        opt("scheme", "stripe"),
        opt("secret", STRIPE_SECRET),
        header("Stripe-Signature", "t=1,v1=00"),
    ]);
    assert_usage_error(&run, &["--body-file"]);
}

#[test]
fn malformed_header_is_a_usage_error() {
    let file = BodyFile::new(b"{}");
    let run = verify(&[
        opt("scheme", "stripe"),
        opt("secret", STRIPE_SECRET),
        "--header".into(),
        "NoColon".into(),
        file.arg(),
    ]);
    assert_usage_error(&run, &["--header", "'NoColon' is not 'Name: value'"]);

    let run = verify(&[
        opt("scheme", "stripe"),
        opt("secret", STRIPE_SECRET),
        "--header".into(),
        ": value".into(),
        file.arg(),
    ]);
    assert_usage_error(&run, &["--header", "empty header name"]);
}

#[test]
fn tolerance_with_an_untimestamped_scheme_is_a_usage_error() {
    let body = br#"{"action":"opened"}"#;
    let file = BodyFile::new(body);
    let run = verify(&[
        opt("scheme", "github"),
        opt("secret", GITHUB_SECRET),
        header(
            "X-Hub-Signature-256",
            &sign::github(GITHUB_SECRET.as_bytes(), body),
        ),
        header("X-GitHub-Delivery", "d-1"),
        opt("tolerance", 60),
        file.arg(),
    ]);
    assert_usage_error(&run, &["--tolerance", "github signs no timestamp"]);
}

#[test]
fn unreadable_body_file_is_a_usage_error() {
    let missing = std::env::temp_dir().join(format!(
        "hookline-cli-verify-{}-does-not-exist.body",
        std::process::id()
    ));
    let run = verify(&[
        opt("scheme", "stripe"),
        opt("secret", STRIPE_SECRET),
        header("Stripe-Signature", "t=1,v1=00"),
        format!("--body-file={}", missing.display()),
    ]);
    assert_usage_error(
        &run,
        &["cannot read body file", &missing.display().to_string()],
    );

    // A directory is not a readable body either.
    let run = verify(&[
        opt("scheme", "stripe"),
        opt("secret", STRIPE_SECRET),
        header("Stripe-Signature", "t=1,v1=00"),
        format!("--body-file={}", std::env::temp_dir().display()),
    ]);
    assert_usage_error(&run, &["cannot read body file"]);
}

#[test]
fn unusable_secret_is_a_usage_error() {
    let file = BodyFile::new(b"{}");
    let run = verify(&[
        opt("scheme", "stripe"),
        opt("secret", STRIPE_SECRET),
        opt("secret", " whsec_with_space"),
        header("Stripe-Signature", "t=1,v1=00"),
        file.arg(),
    ]);
    assert_usage_error(&run, &["--secret #2"]);
    assert!(
        !run.stderr.contains("whsec_with_space"),
        "the secret is never echoed: {run:#?}"
    );
}

// ---------------------------------------------------------------------------------------------------------------
// Known-answer vectors through the binary

/// The first three valid and first three invalid Stripe vectors, run through the binary: it must reach the same
/// verdict (and, for invalid ones, the same error code) as the library on the same inputs.
#[test]
fn stripe_vectors_give_the_same_verdict_as_the_library() {
    let text =
        std::fs::read_to_string(VECTORS).unwrap_or_else(|e| panic!("cannot read {VECTORS}: {e}"));
    let vectors: Vec<serde_json::Value> = serde_json::from_str(&text).expect("vectors are JSON");
    let stripe: Vec<&serde_json::Value> =
        vectors.iter().filter(|v| v["scheme"] == "stripe").collect();
    let pick = |expect: &str| -> Vec<&serde_json::Value> {
        stripe
            .iter()
            .copied()
            .filter(|v| v["expect"] == expect)
            .take(3)
            .collect()
    };
    let (valid, invalid) = (pick("valid"), pick("invalid"));
    assert_eq!(
        (valid.len(), invalid.len()),
        (3, 3),
        "not enough stripe vectors"
    );

    for v in valid.iter().chain(&invalid) {
        let name = v["name"].as_str().expect("name");
        let str_of = |key: &str| v[key].as_str().unwrap_or_else(|| panic!("{name}: {key}"));
        let secrets: Vec<&str> = std::iter::once(str_of("secret"))
            .chain(
                v["additional_secrets"]
                    .as_array()
                    .expect("additional_secrets")
                    .iter()
                    .map(|s| s.as_str().expect("secret string")),
            )
            .collect();
        let headers: Vec<(&str, &str)> = v["headers"]
            .as_object()
            .expect("headers")
            .iter()
            .map(|(k, val)| (k.as_str(), val.as_str().expect("header value")))
            .collect();
        let now = v["now"].as_i64().expect("now");
        let tolerance = v["tolerance_s"].as_u64();
        let query = str_of("query");
        let body = str_of("body").as_bytes();

        let mut args = vec![opt("scheme", "stripe"), opt("now", now)];
        args.extend(secrets.iter().map(|s| opt("secret", s)));
        args.extend(headers.iter().map(|(k, val)| header(k, val)));
        if !query.is_empty() {
            args.push(opt("query", query));
        }
        if let Some(t) = tolerance {
            args.push(opt("tolerance", t));
        }
        let file = BodyFile::new(body);
        args.push(file.arg());
        let run = verify(&args);

        // The library's verdict on the same inputs.
        let secret_bytes: Vec<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
        let header_bytes: Vec<(&str, &[u8])> = headers
            .iter()
            .map(|(k, val)| (*k, val.as_bytes()))
            .collect();
        let library = Verifier {
            scheme: Scheme::Stripe,
            secrets: &secret_bytes,
            tolerance_secs: tolerance,
            now_unix: now,
        }
        .verify(&Request {
            headers: &header_bytes,
            query,
            body,
        });

        match v["expect"].as_str() {
            Some("valid") => {
                run.expect_code(0);
                let event_id = v["event_id"]
                    .as_str()
                    .expect("valid vectors name the event id");
                run.stdout_has(&[&format!("event_id: {event_id}")]);
                let ok = library.unwrap_or_else(|e| panic!("{name}: library rejects: {e}"));
                run.stdout_has(&[&format!(
                    "matched secret: #{} of {}",
                    ok.secret_index + 1,
                    secrets.len()
                )]);
            }
            Some("invalid") => {
                run.expect_code(1);
                let e = library.expect_err(name);
                run.stdout_has(&[&format!("invalid ({}): {e}", e.code())]);
            }
            other => panic!("{name}: unknown expect {other:?}"),
        }
    }
}
