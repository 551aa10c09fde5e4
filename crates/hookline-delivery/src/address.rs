//! Which addresses a webhook endpoint made through the merchant API may reach (no SSRF), in one place.
//!
//! A merchant's API key must not become a way to make hookline's worker POST to what only hookline's own network
//! can reach: loopback, private ranges, link-local (the cloud metadata service at 169.254.169.254), CGNAT,
//! multicast, and the same behind IPv4-mapped or NAT64 IPv6. The policy is [`is_public`], a pure function of the
//! address; it is applied twice:
//! - when an endpoint is made or changed (`hookline-api`): a literal address is refused, a name is resolved and
//!   refused when ANY of its addresses is not public ([`check_resolved`]);
//! - on the address actually connected to, at every delivery: the delivery's HTTP client resolves names through
//!   [`GuardedResolver`], which drops non-public answers (none left: the attempt fails without connecting), and
//!   a literal address — which reqwest connects to without asking a resolver — is checked by [`check_url_host`]
//!   before sending. A name whose DNS answer changed after it was validated (DNS rebinding) is caught here.
//!
//! Redirects are never followed by the delivery (`hookline_core::http::client`), so a public endpoint cannot bounce
//! the request to a private one. The operator's configured `[[destinations]]` are not restricted, nor are
//! endpoints made while `[api] allow_private_webhook_urls = true` (tests, one-host deployments).

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;

/// Why an address may not be reached.
pub const REFUSED: &str =
    "the address is not public (loopback, private, link-local, multicast or reserved)";

/// Whether `ip` is an ordinary public unicast address a webhook may be sent to.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => is_public_v6(v6),
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(ip.is_unspecified()                       // 0.0.0.0
        || a == 0                               // 0.0.0.0/8 "this network"
        || ip.is_loopback()                     // 127.0.0.0/8
        || ip.is_private()                      // 10/8, 172.16/12, 192.168/16
        || ip.is_link_local()                   // 169.254/16: cloud metadata
        || (a == 100 && (b & 0xc0) == 64)       // 100.64/10 CGNAT
        || (a == 192 && b == 0 && c == 0)       // 192.0.0/24 IETF protocol assignments
        || (a == 192 && b == 0 && c == 2)       // TEST-NET-1
        || (a == 198 && (b & 0xfe) == 18)       // 198.18/15 benchmarking
        || (a == 198 && b == 51 && c == 100)    // TEST-NET-2
        || (a == 203 && b == 0 && c == 113)     // TEST-NET-3
        || ip.is_multicast()                    // 224/4
        || a >= 240) // 240/4 reserved, 255.255.255.255 broadcast
}

fn is_public_v6(ip: Ipv6Addr) -> bool {
    // An IPv4 address written as IPv6 is judged as that IPv4 address: `::ffff:127.0.0.1` is loopback.
    if let Some(v4) = ip.to_ipv4_mapped() {
        return is_public_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) reaches the embedded IPv4 address.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        let [a, b] = s[6].to_be_bytes();
        let [c, d] = s[7].to_be_bytes();
        return is_public_v4(Ipv4Addr::new(a, b, c, d));
    }
    !(ip.is_unspecified()                       // ::
        || ip.is_loopback()                     // ::1
        || s[0..6] == [0, 0, 0, 0, 0, 0]        // ::/96 IPv4-compatible (deprecated)
        || (s[0] & 0xfe00) == 0xfc00            // fc00::/7 unique local
        || (s[0] & 0xffc0) == 0xfe80            // fe80::/10 link-local
        || (s[0] & 0xffc0) == 0xfec0            // fec0::/10 site-local (deprecated)
        || (s[0] & 0xff00) == 0xff00            // ff00::/8 multicast
        || (s[0] == 0x2001 && s[1] == 0x0db8)   // documentation
        || s[0] == 0x0100 && s[1..4] == [0, 0, 0] // 100::/64 discard
        || (s[0] == 0x2002)) // 6to4: embeds an IPv4 address that may be private
}

/// The host of `url` as an IP address, if it is written as one (`127.0.0.1`, `[::1]`).
fn literal_host(url: &url::Url) -> Option<IpAddr> {
    match url.host()? {
        url::Host::Ipv4(v4) => Some(IpAddr::V4(v4)),
        url::Host::Ipv6(v6) => Some(IpAddr::V6(v6)),
        url::Host::Domain(_) => None,
    }
}

/// A literal-address host must be public (a name is left to [`GuardedResolver`]): reqwest connects to a literal
/// address without asking any resolver, so the check must be made before sending.
pub fn check_url_host(url: &url::Url) -> Result<(), &'static str> {
    match literal_host(url) {
        Some(ip) if !is_public(ip) => Err(REFUSED),
        _ => Ok(()),
    }
}

/// What a name resolved to, judged: every address must be public (one private address among public ones is how a
/// rebinding attack would start).
pub fn check_resolved(addrs: &[IpAddr]) -> Result<(), &'static str> {
    if addrs.is_empty() {
        return Err("the host name does not resolve");
    }
    if addrs.iter().all(|ip| is_public(*ip)) {
        Ok(())
    } else {
        Err(REFUSED)
    }
}

/// A future resolving a host name.
pub type Lookup = Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'static>>;

/// How names are resolved: the system's resolver in production, a fixed table in tests (to play a DNS answer that
/// changes after validation).
pub trait Lookups: Send + Sync + 'static {
    /// The addresses of `host`.
    fn lookup(&self, host: String) -> Lookup;
}

/// The system's resolver (`getaddrinfo`, through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookups;

impl Lookups for SystemLookups {
    fn lookup(&self, host: String) -> Lookup {
        Box::pin(async move { Ok(tokio::net::lookup_host((host.as_str(), 0)).await?.collect()) })
    }
}

/// The addresses of `host`, judged by [`check_resolved`] (the API's check when an endpoint is made or changed).
pub async fn resolve_checked(lookups: &dyn Lookups, host: &str) -> Result<(), &'static str> {
    let addrs = lookups
        .lookup(host.to_owned())
        .await
        .map_err(|_| "the host name does not resolve")?;
    let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
    check_resolved(&ips)
}

/// reqwest's resolver for the deliveries to API endpoints: resolves through `lookups` and keeps only the public
/// addresses; none left is an error, so the connection is never attempted.
#[derive(Clone)]
pub struct GuardedResolver {
    lookups: Arc<dyn Lookups>,
}

impl GuardedResolver {
    /// A resolver over `lookups`.
    pub fn new(lookups: Arc<dyn Lookups>) -> GuardedResolver {
        GuardedResolver { lookups }
    }
}

impl std::fmt::Debug for GuardedResolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuardedResolver")
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let lookup = self.lookups.lookup(name.as_str().to_owned());
        Box::pin(async move {
            let addrs = lookup.await?;
            let public: Vec<SocketAddr> = addrs.into_iter().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(REFUSED.into());
            }
            let addrs: reqwest::dns::Addrs = Box::new(public.into_iter());
            Ok(addrs)
        })
    }
}

/// Resolves through `lookups` with no policy: the permissive client's resolver, so that a test's fixed table
/// applies to both clients alike.
#[derive(Clone)]
pub struct PlainResolver {
    lookups: Arc<dyn Lookups>,
}

impl PlainResolver {
    /// A resolver over `lookups`.
    pub fn new(lookups: Arc<dyn Lookups>) -> PlainResolver {
        PlainResolver { lookups }
    }
}

impl reqwest::dns::Resolve for PlainResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let lookup = self.lookups.lookup(name.as_str().to_owned());
        Box::pin(async move {
            let addrs: reqwest::dns::Addrs = Box::new(lookup.await?.into_iter());
            Ok(addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_not_public() {
        for s in [
            "127.0.0.1",
            "127.8.9.10",
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.0.1",
            "100.64.0.1",
            "100.127.255.254",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "192.0.0.8",
            "198.18.0.1",
            "::",
            "::1",
            "fc00::1",
            "fd12:3456::1",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe", // NAT64 of 169.254.169.254
            "::127.0.0.1",
            "2002:7f00:1::1",
            "2001:db8::1",
        ] {
            assert!(!is_public(ip(s)), "{s} must not be public");
        }
    }

    #[test]
    fn ordinary_addresses_are_public() {
        for s in [
            "8.8.8.8",
            "1.1.1.1",
            "172.15.255.255",
            "172.32.0.1",
            "100.63.255.255",
            "100.128.0.1",
            "169.253.1.1",
            "192.169.0.1",
            "2606:4700:4700::1111",
            "2a00:1450:4001::200e",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert!(is_public(ip(s)), "{s} must be public");
        }
    }

    #[test]
    fn literal_hosts_are_judged_and_names_are_left_to_the_resolver() {
        let check = |u: &str| check_url_host(&url::Url::parse(u).unwrap());
        assert!(check("https://127.0.0.1/x").is_err());
        assert!(check("https://[::1]:8443/x").is_err());
        assert!(check("https://[::ffff:7f00:1]/x").is_err());
        assert!(check("http://169.254.169.254/latest/meta-data").is_err());
        // The URL parser normalises the odd spellings of an address (decimal, hex, short forms) to the address.
        assert!(check("http://2130706433/").is_err());
        assert!(check("http://0x7f.1/").is_err());
        assert!(check("https://8.8.8.8/x").is_ok());
        assert!(check("https://hooks.example.com/x").is_ok());
    }

    #[test]
    fn a_name_with_one_private_address_among_public_ones_is_refused() {
        assert!(check_resolved(&[ip("8.8.8.8")]).is_ok());
        assert!(check_resolved(&[ip("8.8.8.8"), ip("10.0.0.1")]).is_err());
        assert!(check_resolved(&[]).is_err());
    }

    /// A table standing for DNS: `host` answers `addrs`.
    struct Table(Vec<SocketAddr>);

    impl Lookups for Table {
        fn lookup(&self, _host: String) -> Lookup {
            let addrs = self.0.clone();
            Box::pin(async move { Ok(addrs) })
        }
    }

    /// The rebinding case: a name that was public when the endpoint was validated now answers a loopback
    /// address. The guarded client never connects (the listener accepts nothing); the same request through a
    /// plain resolver with the same answer does reach it, so the refusal is the policy's doing.
    #[tokio::test]
    async fn the_guarded_resolver_refuses_a_loopback_answer_and_nothing_connects() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let table: Arc<dyn Lookups> =
            Arc::new(Table(vec![SocketAddr::from(([127, 0, 0, 1], port))]));
        fn build<R: reqwest::dns::Resolve + 'static>(resolver: R) -> reqwest::Client {
            reqwest::Client::builder()
                .no_proxy()
                .dns_resolver(Arc::new(resolver))
                .timeout(std::time::Duration::from_secs(5))
                .build()
                .unwrap()
        }
        let guarded = build(GuardedResolver::new(table.clone()));
        let url = format!("http://hooks.example.com:{port}/x");
        let refused = guarded.post(&url).body("{}").send().await;
        let err = refused.expect_err("the guarded client must not connect");
        assert!(format!("{err:?}").contains("not public"), "{err:?}");
        // A connection, had one been made, would already wait in the listener's queue: the kernel completes it
        // before the client could have an answer. One poll (a zero timeout polls the accept once) tells.
        let accepted = tokio::time::timeout(std::time::Duration::ZERO, listener.accept()).await;
        assert!(
            accepted.is_err(),
            "nothing connected to the loopback listener"
        );

        let plain = build(PlainResolver::new(table));
        let sent = tokio::spawn(async move { plain.post(&url).body("{}").send().await });
        let (conn, _) = tokio::time::timeout(std::time::Duration::from_secs(5), listener.accept())
            .await
            .expect("the plain client connects")
            .unwrap();
        drop(conn);
        let _ = sent.await;
    }
}
