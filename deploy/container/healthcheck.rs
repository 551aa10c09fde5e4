//! `hookline-healthcheck [--wait SECS] http://HOST:PORT/PATH`: exits 0 when `GET PATH` answers 200, 1 otherwise.
//!
//! The images have no shell and no curl (nothing in them should run but hookline), and none of the hookline
//! binaries has a health-check subcommand, so a container's HEALTHCHECK and a systemd unit's readiness
//! (`ExecStartPost=`) run this: one file of the standard library only, compiled with `rustc` beside the binaries
//! (deploy/container/build.sh, the Containerfile's builder stage), a few hundred kilobytes.
//!
//! Without `--wait` it tries once (container health checks repeat on their own); with `--wait SECS` it retries
//! every 250 ms until 200 or the deadline, which is what a unit's start-up needs. Every attempt is bounded: 2 s to
//! connect, 2 s for the answer, 1 KiB of status line at most. Exit codes: 0 healthy, 1 unhealthy or unreachable
//! (the last reason on stderr), 64 a usage error (2 is reserved by Docker's HEALTHCHECK).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Connect and answer budget of one attempt.
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);
/// Pause between attempts under `--wait`.
const RETRY_PAUSE: Duration = Duration::from_millis(250);
/// Longest `--wait` accepted (a unit's start timeout is the real bound; this only refuses nonsense).
const MAX_WAIT_SECS: u64 = 3600;
/// Most bytes read looking for the status line.
const MAX_STATUS_LINE: usize = 1024;

const USAGE: &str = "usage: hookline-healthcheck [--wait SECS] http://HOST:PORT/PATH";

/// A parsed `http://host:port/path` target.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    /// `host:port` as written (sent as the Host header, resolved for each attempt).
    authority: String,
    /// Absolute path, with its query if any.
    path: String,
}

/// Parses `http://HOST:PORT/PATH`: plain HTTP only (health listeners are local), the port required, the path
/// defaulting to `/`. Printable ASCII only, so nothing can smuggle a header into the request.
fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("'{url}': only http:// URLs are probed"))?;
    if rest.is_empty() || rest.len() > 512 || !rest.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "'{url}': expected http://HOST:PORT/PATH in printable ASCII"
        ));
    }
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let port = authority
        .rsplit_once(':')
        .map(|(_, p)| p)
        .ok_or_else(|| format!("'{url}': the port is required (http://HOST:PORT/PATH)"))?;
    if port.parse::<u16>().map_or(true, |p| p == 0) {
        return Err(format!("'{url}': '{port}' is not a port"));
    }
    Ok(Target {
        authority: authority.to_string(),
        path: path.to_string(),
    })
}

/// The status code of an HTTP/1.x status line (`HTTP/1.1 200 OK`).
fn status_code(line: &str) -> Option<u16> {
    let mut parts = line.split(' ');
    let version = parts.next()?;
    if !version.starts_with("HTTP/1.") {
        return None;
    }
    let code = parts.next()?;
    if code.len() != 3 {
        return None;
    }
    code.parse().ok()
}

/// One GET: `Ok(())` on 200, the reason otherwise.
fn probe(target: &Target) -> Result<(), String> {
    let addrs: Vec<SocketAddr> = target
        .authority
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", target.authority))?
        .collect();
    let mut last = format!("{} resolves to no address", target.authority);
    for addr in addrs {
        match probe_addr(addr, target) {
            Ok(()) => return Ok(()),
            Err(e) => last = e,
        }
    }
    Err(last)
}

fn probe_addr(addr: SocketAddr, target: &Target) -> Result<(), String> {
    let mut stream = TcpStream::connect_timeout(&addr, ATTEMPT_TIMEOUT)
        .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
    stream
        .set_read_timeout(Some(ATTEMPT_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(ATTEMPT_TIMEOUT)))
        .map_err(|e| format!("{addr}: {e}"))?;
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: hookline-healthcheck\r\nConnection: close\r\n\r\n",
        target.path, target.authority
    );
    stream
        .write_all(request.as_bytes())
        .map_err(|e| format!("{addr}: cannot send the request: {e}"))?;
    let mut head = Vec::with_capacity(128);
    let mut buf = [0u8; 256];
    while !head.contains(&b'\n') && head.len() < MAX_STATUS_LINE {
        let n = stream
            .read(&mut buf)
            .map_err(|e| format!("{addr}: no answer: {e}"))?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let line = line.trim_end();
    match status_code(line) {
        Some(200) => Ok(()),
        Some(code) => Err(format!(
            "GET http://{}{} answered {code}",
            target.authority, target.path
        )),
        None => Err(format!("{addr}: not an HTTP/1 answer")),
    }
}

/// `(wait, url)` from the arguments.
fn parse_args(args: &[String]) -> Result<(Option<Duration>, Target), String> {
    match args {
        [url] => Ok((None, parse_url(url)?)),
        [flag, secs, url] if flag == "--wait" => {
            let secs: u64 = secs
                .parse()
                .ok()
                .filter(|s| (1..=MAX_WAIT_SECS).contains(s))
                .ok_or_else(|| format!("--wait takes 1 to {MAX_WAIT_SECS} seconds"))?;
            Ok((Some(Duration::from_secs(secs)), parse_url(url)?))
        }
        _ => Err(USAGE.to_string()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if matches!(args.as_slice(), [h] if h == "--help" || h == "-h") {
        println!("{USAGE}\nExits 0 when GET answers 200, 1 otherwise; --wait retries until then.");
        return ExitCode::SUCCESS;
    }
    let (wait, target) = match parse_args(&args) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("hookline-healthcheck: {e}");
            return ExitCode::from(64);
        }
    };
    let deadline = wait.map(|w| Instant::now() + w);
    loop {
        match probe(&target) {
            Ok(()) => return ExitCode::SUCCESS,
            Err(reason) => match deadline {
                Some(d) if Instant::now() + RETRY_PAUSE < d => std::thread::sleep(RETRY_PAUSE),
                _ => {
                    eprintln!("hookline-healthcheck: unhealthy: {reason}");
                    return ExitCode::from(1);
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn urls_need_http_a_port_and_printable_ascii() {
        assert_eq!(
            parse_url("http://127.0.0.1:8080/healthz"),
            Ok(Target {
                authority: "127.0.0.1:8080".into(),
                path: "/healthz".into()
            })
        );
        assert_eq!(
            parse_url("http://[::1]:9091").map(|t| t.path),
            Ok("/".into())
        );
        for bad in [
            "https://127.0.0.1:8080/healthz",
            "http://127.0.0.1/healthz",
            "http://127.0.0.1:0/healthz",
            "http://127.0.0.1:99999/",
            "http://127.0.0.1:8080/a b",
            "http://127.0.0.1:8080/\r\nX: y",
            "http://",
        ] {
            assert!(parse_url(bad).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_code("HTTP/1.1 200 OK"), Some(200));
        assert_eq!(status_code("HTTP/1.0 503 Service Unavailable"), Some(503));
        assert_eq!(status_code("SSH-2.0-OpenSSH"), None);
        assert_eq!(status_code("HTTP/1.1 20 OK"), None);
    }

    #[test]
    fn wait_is_bounded() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(parse_args(&args(&["--wait", "30", "http://h:1/"])).is_ok());
        assert!(parse_args(&args(&["--wait", "0", "http://h:1/"])).is_err());
        assert!(parse_args(&args(&["--wait", "x", "http://h:1/"])).is_err());
        assert!(parse_args(&args(&[])).is_err());
    }

    /// A listener that answers each connection with `status_line` (one connection per entry).
    fn serve(answers: Vec<&'static str>) -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        std::thread::spawn(move || {
            for answer in answers {
                let Ok((mut s, _)) = listener.accept() else {
                    return;
                };
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(answer.as_bytes());
            }
        });
        parse_url(&format!("http://127.0.0.1:{port}/healthz")).expect("url")
    }

    #[test]
    fn healthy_only_on_200() {
        assert_eq!(
            probe(&serve(vec!["HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"])),
            Ok(())
        );
        let err = probe(&serve(vec!["HTTP/1.1 503 Service Unavailable\r\n\r\n"]));
        assert!(err.is_err_and(|e| e.contains("503")));
        assert!(probe(&serve(vec!["garbage\r\n"])).is_err());
    }

    #[test]
    fn nothing_listening_is_unhealthy() {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let target = parse_url(&format!("http://127.0.0.1:{port}/healthz")).expect("url");
        assert!(probe(&target).is_err());
    }
}
