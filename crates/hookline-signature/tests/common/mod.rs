//! What several test files of this crate share: the fixed clock and one verification call with string secrets
//! and headers (the test files differ in what they assert, not in how they verify).

use hookline_signature::{Request, Scheme, Verified, Verifier, VerifyError};

/// The clock of every test: 2026-01-01T00:00:00Z.
pub const NOW: i64 = 1_767_225_600;

/// Verifies a request under `scheme` with `secrets`, the default tolerance and the clock at [`NOW`].
pub fn verify(
    scheme: Scheme,
    secrets: &[&str],
    headers: &[(&str, &str)],
    query: &str,
    body: &[u8],
) -> Result<Verified, VerifyError> {
    let secrets: Vec<&[u8]> = secrets.iter().map(|s| s.as_bytes()).collect();
    let headers: Vec<(&str, &[u8])> = headers.iter().map(|(k, v)| (*k, v.as_bytes())).collect();
    Verifier {
        scheme,
        secrets: &secrets,
        tolerance_secs: None,
        now_unix: NOW,
    }
    .verify(&Request {
        headers: &headers,
        query,
        body,
    })
}
