//! The operator console's test harness, shared by the console's test modules: the real binary hashes the
//! password, and an edge without broker is started with the console (its own process, `hookline console
//! serve`, started by [`crate::TestEdge::spawn_on`] when the configuration has `[console]`).

use crate::{binary, parse_config, test_config_toml, TestDb, TestEdge};

/// The password of the console's test operator, `alice`.
pub const PASSWORD: &str = "correct horse battery staple";

/// The Argon2id hash of `password`, made by the real `hookline console hash-password` (password on stdin).
pub async fn hash_password(password: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(binary("hookline"))
        .args(["console", "hash-password"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run hookline console hash-password");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(format!("{password}\n").as_bytes())
        .await
        .expect("write the password");
    drop(stdin);
    let out = child
        .wait_with_output()
        .await
        .expect("hash-password output");
    assert!(out.status.success(), "hash-password failed");
    let hash = String::from_utf8(out.stdout)
        .expect("UTF-8")
        .trim()
        .to_string();
    assert!(hash.starts_with("$argon2id$"), "{hash}");
    hash
}

/// A `[console]` section on an ephemeral port with one operator, `alice`, whose hash is `hash`.
pub fn console_toml(hash: &str) -> String {
    format!(
        "[console]\nlisten = \"127.0.0.1:0\"\n[[console.operators]]\nname = \"alice\"\npassword_hash = \"{hash}\"\n"
    )
}

/// An edge without broker (no relay) and with the console.
pub async fn console_edge() -> TestEdge {
    let hash = hash_password(PASSWORD).await;
    let db = TestDb::new().await;
    let config = parse_config(&test_config_toml(
        &db.url,
        "",
        &format!("[relay]\nembedded = false\n{}", console_toml(&hash)),
    ));
    TestEdge::spawn_on(db, config).await
}

/// An answer of the console: status, headers, body text.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Response headers.
    pub headers: reqwest::header::HeaderMap,
    /// Body.
    pub text: String,
}

impl Answer {
    /// The `Location` header.
    pub fn location(&self) -> Option<&str> {
        self.headers.get("location").and_then(|v| v.to_str().ok())
    }

    /// Every `Set-Cookie` header.
    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    }

    /// The value of the page's first hidden field `name`.
    pub fn hidden(&self, name: &str) -> String {
        let marker = format!("name=\"{name}\" value=\"");
        let start = self
            .text
            .find(&marker)
            .unwrap_or_else(|| panic!("a {name} field: {}", self.text))
            + marker.len();
        let end = self.text[start..].find('"').expect("end of the value");
        self.text[start..start + end].to_string()
    }

    /// The value of the page's first hidden `csrf` field.
    pub fn csrf(&self) -> String {
        self.hidden("csrf")
    }
}

/// A cookie-keeping HTTP client of the console, as a browser without JavaScript: never follows redirects (the
/// tests assert on them), keeps and drops cookies as the console sets and expires them.
pub struct ConsoleHttp {
    client: reqwest::Client,
    base: String,
    cookies: std::collections::HashMap<String, String>,
}

impl ConsoleHttp {
    /// A client of the console at `base` (`http://127.0.0.1:port`).
    pub fn new(base: &str) -> ConsoleHttp {
        ConsoleHttp {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            base: base.to_string(),
            cookies: std::collections::HashMap::new(),
        }
    }

    /// The underlying client (for requests the helpers below do not build).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Whether the client holds cookie `name` (the console set it and has not expired it).
    pub fn has_cookie(&self, name: &str) -> bool {
        self.cookies.contains_key(name)
    }

    /// `base` joined with `path`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends `req` with the kept cookies and keeps what the answer sets.
    pub async fn send(&mut self, req: reqwest::RequestBuilder) -> Answer {
        let cookie = self
            .cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ");
        let res = req
            .header("cookie", cookie)
            .send()
            .await
            .expect("the console answers");
        let status = res.status().as_u16();
        let headers = res.headers().clone();
        let text = res.text().await.unwrap_or_default();
        let answer = Answer {
            status,
            headers,
            text,
        };
        for c in answer.set_cookies() {
            if let Some((k, v)) = c.split(';').next().unwrap_or("").split_once('=') {
                if v.is_empty() || c.contains("Max-Age=0") {
                    self.cookies.remove(k);
                } else {
                    self.cookies.insert(k.to_string(), v.to_string());
                }
            }
        }
        answer
    }

    /// `GET path` (with its query, already encoded).
    pub async fn get(&mut self, path_and_query: &str) -> Answer {
        let req = self.client.get(self.url(path_and_query));
        self.send(req).await
    }

    /// POSTs an already encoded form body.
    pub async fn post_raw(&mut self, path: &str, body: String) -> Answer {
        let req = self
            .client
            .post(self.url(path))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        self.send(req).await
    }

    /// POSTs a form.
    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Answer {
        let mut ser = form_urlencoded::Serializer::new(String::new());
        for (k, v) in form {
            ser.append_pair(k, v);
        }
        self.post_raw(path, ser.finish()).await
    }

    /// Logs in as the test operator `alice` and returns the session's CSRF token.
    pub async fn login(&mut self) -> String {
        let form = self.get("/login").await;
        assert_eq!(form.status, 200, "login form: {}", form.text);
        let token = form.csrf();
        let res = self
            .post(
                "/login",
                &[("csrf", &token), ("name", "alice"), ("password", PASSWORD)],
            )
            .await;
        assert_eq!(res.status, 303, "login: {}", res.text);
        self.get("/").await.csrf()
    }
}
