//! Reading a payment from its provider's API, for providers whose notifications only name the resource
//! (Mercado Pago). Runs in [`hookline_core::handler::Handler::prepare`]: before the transaction, with no row locked and no pooled
//! connection held, and with no side effect (a `GET`), so it may run several times for one event.
//!
//! Classification decides what the worker does next: a timeout, a connection error, a 5xx or a 429 is
//! transient (retried in-process with backoff, without burning the delivery limit); 404 and refused
//! credentials are permanent and visible — dead-lettered with the status and what to check — never silent.
//! A redirect is never followed ([`hookline_core::http::client`]: it would send the access token wherever `Location`
//! points) and is permanent too: the provider's API does not redirect, the configured `api_base` is wrong.
//! A 2xx that is not the payment asked for (not JSON, no id, another id) is permanent as well: whatever
//! answered is not the provider's API, retrying in-process would stall the consumer on a misconfiguration, and
//! a dead-lettered event is redriven once `api_base` is fixed.
//!
//! The client is the provider's one [`crate::gateway::ApiClient`] (also used by the dispatcher and
//! reconciliation); the request itself is [`ApiClient::mercadopago_payment`] in [`crate::gateway::mercadopago`].
//! The payments effect reaches it through its [`ProviderRead`] seam ([`reader`]): `hookline-payments` stands
//! below the gateway clients.

use std::sync::Arc;

use futures::future::BoxFuture;
use hookline_core::handler::HandleError;
use hookline_core::ProviderConfig;
use hookline_payments::apply::ProviderRead;

pub use crate::gateway::metric;
pub use crate::gateway::ApiClient;

impl ProviderRead for ApiClient {
    fn mercadopago_payment<'a>(
        &'a self,
        payment_id: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, HandleError>> {
        Box::pin(ApiClient::mercadopago_payment(self, payment_id))
    }

    fn pagarme_object<'a>(
        &'a self,
        object: &'a str,
    ) -> BoxFuture<'a, Result<Vec<u8>, HandleError>> {
        Box::pin(crate::gateway::pagarme_v5::fetch_object(self, object))
    }
}

/// The reader of `provider`'s API the payments effect uses, when its `api_base` is configured (else the events
/// that need a read stay recorded as fetches to do): the provider's one client.
pub fn reader(provider: &ProviderConfig) -> Option<Arc<dyn ProviderRead>> {
    let base = provider.api_base.clone()?;
    Some(Arc::new(ApiClient::new(
        &provider.name,
        base,
        provider.api_token.clone(),
    )))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use hookline_core::handler::HandleError;
    use secrecy::SecretString;

    /// A local server answering every connection with `response` (a whole HTTP/1.1 answer); counts them.
    async fn serve(response: String) -> (url::Url, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = url::Url::parse(&format!("http://{}/", listener.local_addr().expect("addr")))
            .expect("url");
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = hits.clone();
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                let response = response.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let mut read = 0;
                    while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                        match stream.read(&mut buf[read..]).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => read += n,
                        }
                    }
                    let _ = stream.write_all(response.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        (base, hits)
    }

    fn answer(status: &str, extra: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
    }

    fn permanent_reason(r: Result<Vec<u8>, HandleError>) -> String {
        match r {
            Err(HandleError::Permanent(e)) => format!("{e:#}"),
            other => panic!("expected a permanent failure, got {other:?}"),
        }
    }

    /// Issue 25: the payment fetch followed redirects (with the access token) like the dispatcher did. A
    /// redirect to an internal address is not followed: the address receives nothing, the read fails for
    /// good with the reason (the event is dead-lettered, visible), where it pointed shown without its query.
    #[tokio::test]
    async fn a_redirect_is_not_followed() {
        let (internal, internal_hits) = serve(answer(
            "200 OK",
            "content-type: application/json\r\n",
            r#"{"id": 123, "status": "approved"}"#,
        ))
        .await;
        for status in [
            "302 Found",
            "307 Temporary Redirect",
            "308 Permanent Redirect",
        ] {
            let location = format!("location: {internal}internal-admin?token=hidden\r\n");
            let (api, api_hits) = serve(answer(status, &location, "")).await;
            let client = ApiClient::new("mp", api, Some(SecretString::from("TEST-token")));
            let reason = permanent_reason(client.mercadopago_payment("123").await);
            assert!(
                reason.contains("redirects are not followed")
                    && reason.contains("/internal-admin")
                    && reason.contains("providers.mp.api_base")
                    && !reason.contains("hidden"),
                "{reason}"
            );
            assert_eq!(api_hits.load(Ordering::SeqCst), 1);
        }
        assert_eq!(
            internal_hits.load(Ordering::SeqCst),
            0,
            "the redirect was followed"
        );
    }

    /// A 2xx that is not the payment asked for is not applied: not JSON, no id, another payment's id.
    #[tokio::test]
    async fn a_2xx_that_is_not_the_payment_is_refused() {
        for (body, expect) in [
            ("<html>portal</html>", "not JSON"),
            (r#"{"status": "approved"}"#, "missing"),
            (r#"{"id": 999, "status": "approved"}"#, "\"999\""),
        ] {
            let (api, _) = serve(answer("200 OK", "", body)).await;
            let client = ApiClient::new("mp", api, None);
            let reason = permanent_reason(client.mercadopago_payment("123").await);
            assert!(reason.contains(expect), "{body}: {reason}");
        }
        let (api, _) = serve(answer(
            "200 OK",
            "content-type: application/json\r\n",
            r#"{"id": 123, "status": "approved"}"#,
        ))
        .await;
        let client = ApiClient::new("mp", api, None);
        assert!(client.mercadopago_payment("123").await.is_ok());
    }
}
