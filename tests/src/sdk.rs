//! The official Python SDKs (PyPI `stripe`, `mercadopago`, pinned in `tests/sdk/requirements.txt`) and Pagar.me's
//! official Node SDK (npm `@pagarme/pagarme-nodejs-sdk`, pinned by `tests/sdk/package-lock.json`) as clients
//! nobody here wrote: a venv and a `node_modules` made once per machine under the cargo target dir, runners for
//! the scripts of `tests/sdk/` (one line per check, non-zero exit on a failed one), and the TLS forward proxy
//! that lets the Node SDK, whose base URL is a constant, reach the sandbox. See `tests/sdk/README.md`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{crypto, ServerConfig};
use tokio_rustls::TlsAcceptor;

/// Longest a script may run before it is killed (its own HTTP calls time out after 20 s each).
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(180);

/// `tests/sdk/`.
pub fn sdk_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("sdk")
}

/// The cargo target dir: `$CARGO_TARGET_DIR`, else the workspace's `target/`.
fn target_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"),
    }
}

/// The venv's python, making the venv first if needed: `{target}/sdk-venv/`, with the requirements installed
/// by pip. A stamp (the requirements' SHA-256) says it is complete and current; a changed requirements file
/// re-creates it. Parallel tests (and parallel `cargo test` processes) serialise on `{target}/sdk-venv.lock`
/// through `flock(1)`: one makes it, the others wait and find the stamp.
pub fn python() -> anyhow::Result<PathBuf> {
    venv_python(&sdk_dir().join("requirements.txt"), "sdk-venv")
}

/// `tests/contract/`: the tools that check the API against its OpenAPI document (schemathesis,
/// openapi-python-client) and the scripts that drive them.
pub fn contract_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("contract")
}

/// The python of the contract tools' venv, `{target}/contract-venv/` (`tests/contract/requirements.txt`; a venv of
/// its own: its pins need not agree with the SDKs'). Its `bin/` also holds `st` and `openapi-python-client`.
pub fn contract_python() -> anyhow::Result<PathBuf> {
    venv_python(&contract_dir().join("requirements.txt"), "contract-venv")
}

/// The python of the venv `{target}/{name}/` with `requirements` installed, made first if needed (see [`python`]).
fn venv_python(requirements: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let text =
        std::fs::read(requirements).with_context(|| format!("read {}", requirements.display()))?;
    let digest = hex::encode(Sha256::digest(&text));
    let target = target_dir();
    std::fs::create_dir_all(&target).with_context(|| format!("create {}", target.display()))?;
    let venv = target.join(name);
    let python = venv.join("bin").join("python");
    let stamp = venv.join("hookline-requirements.sha256");
    let current = || std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == digest);
    if current() {
        return Ok(python);
    }
    // Under the lock: check again, else (re)make the venv and write the stamp last.
    let script = format!(
        "set -e\n\
         if [ \"$(cat '{stamp}' 2>/dev/null)\" = '{digest}' ]; then exit 0; fi\n\
         rm -rf '{venv}'\n\
         python3 -m venv '{venv}'\n\
         '{venv}/bin/python' -m pip install --disable-pip-version-check --no-input -q -r '{req}'\n\
         echo '{digest}' > '{stamp}'\n",
        stamp = stamp.display(),
        venv = venv.display(),
        req = requirements.display(),
    );
    let output = Command::new("flock")
        .arg(target.join(format!("{name}.lock")))
        .args(["sh", "-c", &script])
        .output()
        .context("run flock sh (util-linux flock and python3 with venv are needed)")?;
    if !output.status.success() || !current() {
        bail!(
            "making the SDK venv failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(python)
}

/// What one script run printed, and whether every check passed.
#[derive(Debug, Clone)]
pub struct ScriptRun {
    /// Exit status 0: every check passed.
    pub passed: bool,
    /// stdout then stderr: one line per check, and any traceback.
    pub output: String,
}

impl ScriptRun {
    /// Lines of checks that passed (`ok - …`).
    pub fn passed_checks(&self) -> usize {
        self.output
            .lines()
            .filter(|l| l.starts_with("ok - "))
            .count()
    }
}

/// Runs `tests/sdk/{script}` with the venv's python and `env` added to the environment (nothing else of this
/// process's environment is changed), capturing its output; killed after [`SCRIPT_TIMEOUT`]. Blocking work runs
/// on tokio's blocking pool, so an in-process sandbox keeps serving meanwhile.
pub async fn run_script(script: &str, env: &[(&str, String)]) -> anyhow::Result<ScriptRun> {
    let script = sdk_dir().join(script);
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let python = python()?;
        let output = Command::new("timeout")
            .arg(format!("{}s", SCRIPT_TIMEOUT.as_secs()))
            .arg(&python)
            .arg(&script)
            .current_dir(sdk_dir())
            .envs(env)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONUNBUFFERED", "1")
            .output()
            .with_context(|| format!("run {}", script.display()))?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Ok(ScriptRun {
            passed: output.status.success(),
            output: text,
        })
    })
    .await
    .context("script task")?
}

// --- Pagar.me's Node SDK ------------------------------------------------------------------------------------

/// `{target}/sdk-node/`, with `tests/sdk/package.json` and `package-lock.json` copied in and `npm ci` run there
/// (install scripts off: nothing the registry serves runs at install time). A stamp (the SHA-256 of both files)
/// says it is complete and current; parallel tests serialise on `{target}/sdk-node.lock` through `flock(1)`,
/// as the venv does. ES modules resolve packages from the importing file's directory, so scripts run from a copy
/// beside this `node_modules` ([`run_node_script`]).
pub fn node_dir() -> anyhow::Result<PathBuf> {
    let package = sdk_dir().join("package.json");
    let lock = sdk_dir().join("package-lock.json");
    let mut hasher = Sha256::new();
    for file in [&package, &lock] {
        hasher.update(std::fs::read(file).with_context(|| format!("read {}", file.display()))?);
    }
    let digest = hex::encode(hasher.finalize());
    let target = target_dir();
    std::fs::create_dir_all(&target).with_context(|| format!("create {}", target.display()))?;
    let dir = target.join("sdk-node");
    let stamp = dir.join("hookline-packages.sha256");
    let current = || std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == digest);
    if current() {
        return Ok(dir);
    }
    let script = format!(
        "set -e\n\
         if [ \"$(cat '{stamp}' 2>/dev/null)\" = '{digest}' ]; then exit 0; fi\n\
         rm -rf '{dir}'\n\
         mkdir -p '{dir}'\n\
         cp '{package}' '{lock}' '{dir}/'\n\
         cd '{dir}'\n\
         npm ci --ignore-scripts --no-audit --no-fund --loglevel=error\n\
         echo '{digest}' > '{stamp}'\n",
        stamp = stamp.display(),
        dir = dir.display(),
        package = package.display(),
        lock = lock.display(),
    );
    let output = Command::new("flock")
        .arg(target.join("sdk-node.lock"))
        .args(["sh", "-c", &script])
        .output()
        .context("run flock sh (util-linux flock, node and npm are needed)")?;
    if !output.status.success() || !current() {
        bail!(
            "installing the Node SDK failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(dir)
}

/// Runs `tests/sdk/{script}` (an ES module) with `node`, from a copy beside the installed `node_modules`, with
/// `env` added to the environment; killed after [`SCRIPT_TIMEOUT`]. The proxy exceptions of this process's
/// environment (`NO_PROXY`) are removed, so an `HTTPS_PROXY` in `env` applies to every host.
pub async fn run_node_script(script: &str, env: &[(&str, String)]) -> anyhow::Result<ScriptRun> {
    let source = sdk_dir().join(script);
    let script = script.to_owned();
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect();
    tokio::task::spawn_blocking(move || {
        let dir = node_dir()?;
        // Written under a unique name and renamed: a test running the same script at the same moment sees a whole
        // file either way (the content is the same).
        let copy = dir.join(&script);
        let tmp = dir.join(format!(
            ".{}.{}.tmp",
            std::process::id(),
            COPIES.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::copy(&source, &tmp).with_context(|| format!("copy {}", source.display()))?;
        std::fs::rename(&tmp, &copy).with_context(|| format!("rename to {}", copy.display()))?;
        let output = Command::new("timeout")
            .arg(format!("{}s", SCRIPT_TIMEOUT.as_secs()))
            .arg("node")
            .arg(&copy)
            .current_dir(&dir)
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .envs(env)
            .output()
            .with_context(|| format!("run node {}", copy.display()))?;
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        Ok(ScriptRun {
            passed: output.status.success(),
            output: text,
        })
    })
    .await
    .context("script task")?
}

static COPIES: AtomicUsize = AtomicUsize::new(0);

/// The only tunnel [`PagarmeProxy`] opens: Pagar.me's API host, the Node SDK's fixed base URL.
const PAGARME_HOST: &str = "api.pagar.me:443";
/// Longest CONNECT request head the proxy reads.
const MAX_CONNECT_HEAD: usize = 8 * 1024;
/// How long a client may take to send its CONNECT head and its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A forward proxy for `HTTPS_PROXY` that plays `api.pagar.me` for Pagar.me's Node SDK: it accepts
/// `CONNECT api.pagar.me:443` (nothing else: 403), answers the TLS handshake with a certificate for
/// `api.pagar.me` signed by the test CA of `tests/sdk/pagarme-tls/` (trusted by the script through
/// `NODE_EXTRA_CA_CERTS`), and forwards the decrypted HTTP to the sandbox. This is how a merchant's deployment
/// behind a TLS-inspecting egress proxy sends the SDK's calls elsewhere, with no change to the SDK or the
/// merchant's code: the SDK's base URL is a constant (`getBaseUri` in its `client.js`), and its axios, since
/// 1.x, tunnels HTTPS through a proxy with CONNECT rather than sending the absolute URL in plain HTTP.
pub struct PagarmeProxy {
    addr: SocketAddr,
    tunnels: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl PagarmeProxy {
    /// Listens on `127.0.0.1:0` and forwards every tunnel to `upstream` (the sandbox).
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<PagarmeProxy> {
        let dir = sdk_dir().join("pagarme-tls");
        let chain = CertificateDer::pem_file_iter(dir.join("api.pagar.me.pem"))
            .context("read api.pagar.me.pem")?
            .collect::<Result<Vec<_>, _>>()
            .context("parse api.pagar.me.pem")?;
        let key = PrivateKeyDer::from_pem_file(dir.join("api.pagar.me.key"))
            .context("read api.pagar.me.key")?;
        // ring explicitly: the process may have no default crypto provider installed.
        let config =
            ServerConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .context("TLS versions")?
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .context("the api.pagar.me certificate")?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("bind the proxy")?;
        let addr = listener.local_addr().context("proxy address")?;
        let tunnels = Arc::new(AtomicUsize::new(0));
        let counted = tunnels.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, counted) = (acceptor.clone(), counted.clone());
                tokio::spawn(async move {
                    // A client that misbehaves loses its own connection; the script's checks report it.
                    if let Err(e) = tunnel(client, acceptor, upstream, counted).await {
                        eprintln!("pagarme proxy: {e:#}");
                    }
                });
            }
        });
        Ok(PagarmeProxy {
            addr,
            tunnels,
            task,
        })
    }

    /// What a Node script needs to go through the proxy: `HTTPS_PROXY` (and `https_proxy`, which axios's
    /// proxy-from-env reads first) and `NODE_EXTRA_CA_CERTS` (the test CA).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let url = format!("http://{}", self.addr);
        let ca = sdk_dir().join("pagarme-tls").join("ca.pem");
        vec![
            ("HTTPS_PROXY", url.clone()),
            ("https_proxy", url),
            ("NODE_EXTRA_CA_CERTS", ca.display().to_string()),
        ]
    }

    /// Tunnels opened (CONNECT accepted) so far.
    pub fn tunnels(&self) -> usize {
        self.tunnels.load(Ordering::Relaxed)
    }
}

impl Drop for PagarmeProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One client: its CONNECT head (bounded, timed), 200, the TLS handshake as `api.pagar.me`, then bytes both
/// ways between the decrypted stream and a new connection to `upstream`.
async fn tunnel(
    mut client: TcpStream,
    acceptor: TlsAcceptor,
    upstream: SocketAddr,
    tunnels: Arc<AtomicUsize>,
) -> anyhow::Result<()> {
    let head = tokio::time::timeout(HANDSHAKE_TIMEOUT, connect_head(&mut client))
        .await
        .context("CONNECT head timed out")??;
    let first = head.lines().next().unwrap_or("");
    let mut words = first.split(' ');
    let (method, target) = (words.next(), words.next());
    if method != Some("CONNECT") || target != Some(PAGARME_HOST) {
        client
            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await?;
        bail!("refused {first:?}: this proxy tunnels only to {PAGARME_HOST}");
    }
    client
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await?;
    tunnels.fetch_add(1, Ordering::Relaxed);
    let mut tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(client))
        .await
        .context("TLS handshake timed out")?
        .context("TLS handshake")?;
    let mut server = TcpStream::connect(upstream)
        .await
        .with_context(|| format!("connect to {upstream}"))?;
    tokio::io::copy_bidirectional(&mut tls, &mut server)
        .await
        .context("forward")?;
    Ok(())
}

/// Reads up to the end of a CONNECT request's head (`\r\n\r\n`), at most [`MAX_CONNECT_HEAD`] bytes. A client
/// waits for the proxy's 200 before its TLS handshake, so bytes past the head are a protocol error.
async fn connect_head(client: &mut TcpStream) -> anyhow::Result<String> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = client.read(&mut chunk).await.context("read CONNECT")?;
        if n == 0 {
            bail!("closed before the end of the CONNECT head");
        }
        head.extend_from_slice(&chunk[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            if end + 4 != head.len() {
                bail!("bytes after the CONNECT head, before the proxy answered");
            }
            return String::from_utf8(head).context("CONNECT head is not UTF-8");
        }
        if head.len() > MAX_CONNECT_HEAD {
            bail!("CONNECT head longer than {MAX_CONNECT_HEAD} bytes");
        }
    }
}
