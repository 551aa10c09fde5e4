//! Mercado Pago notifications name only a payment, which the worker reads from the provider's API (`api_base`).
//! Payment ids made up by `simulate` exist nowhere: with an API configured, the worker's read answers 404 and
//! every notification ends as a dead letter. So, when the provider's API is the local sandbox, `simulate` first
//! creates the payments there — a card token with Mercado Pago's approving test holder `APRO`, then the payment,
//! under an idempotency key of the run — and notifies those; when it is any other API (the real Mercado Pago), it
//! refuses before sending anything rather than invent payments the worker cannot read.
//!
//! Pagar.me v5 webhooks are not signed, so the worker applies only what the API shows of the charge a webhook
//! names: the same holds for them ([`create_pagarme`]: paid card orders — refunded in full for the `refunded`
//! scenario — with Pagar.me's approving test card, under keys of the run).

use std::time::Duration;

use futures::StreamExt;
use secrecy::ExposeSecret;
use serde_json::{json, Value};

/// Why the payments could not be prepared.
#[derive(Debug, thiserror::Error)]
pub(super) enum PrepareError {
    /// The API is not a sandbox playing this provider: a usage problem (exit 2).
    #[error(
        "provider '{provider}' has api_base {api_base}, which is not a hookline sandbox playing it: the worker \
         reads each notified payment from that API, and simulated payments exist only in the sandbox. Start \
         `hookline sandbox` there, or simulate with a provider without api_base (its notifications are \
         recorded as needs_fetch)"
    )]
    NotSandbox {
        /// The simulated provider.
        provider: String,
        /// Its configured API.
        api_base: String,
    },
    /// The sandbox did not create a payment (exit 3).
    #[error("the sandbox at {api_base} did not create payment {n}: {detail}")]
    Failed {
        /// The sandbox's address.
        api_base: String,
        /// Which payment of the run.
        n: usize,
        /// What went wrong (status and the sandbox's answer, or the transport error).
        detail: String,
    },
}

/// The approved card payment Mercado Pago's test card makes: `(amount in centavos, idempotency key)` → payment id.
async fn create_one(
    client: &reqwest::Client,
    api: &str,
    token: &str,
    n: usize,
    amount: i64,
    key: &str,
) -> Result<String, String> {
    let card: Value = post(
        client,
        &format!("{api}/v1/card_tokens"),
        token,
        None,
        &json!({
            "card_number": "5031433215406351", "expiration_month": 11, "expiration_year": 2030,
            "security_code": "123", "cardholder": {"name": "APRO"},
        }),
    )
    .await?;
    let card_token = card["id"].as_str().ok_or("a card token without an id")?;
    let payment = post(
        client,
        &format!("{api}/v1/payments"),
        token,
        Some(key),
        &json!({
            "transaction_amount": amount as f64 / 100.0,
            "description": format!("hookline simulate payment {n}"),
            "payment_method_id": "master",
            "token": card_token,
            "installments": 1,
            "payer": {"email": "simulate@example.com.br"},
            "external_reference": key,
        }),
    )
    .await?;
    match &payment["id"] {
        Value::Number(id) => Ok(id.to_string()),
        _ => Err("a payment without a numeric id".into()),
    }
}

async fn post(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    idempotency_key: Option<&str>,
    body: &Value,
) -> Result<Value, String> {
    let mut request = client.post(url).bearer_auth(token).json(body);
    if let Some(key) = idempotency_key {
        request = request.header("X-Idempotency-Key", key);
    }
    send_json(request).await
}

/// Sends `request` and reads its JSON answer; `Err`: the transport's error, a non-2xx status with an excerpt of the
/// answer, or an answer that is not JSON.
async fn send_json(request: reqwest::RequestBuilder) -> Result<Value, String> {
    let response = request.send().await.map_err(|e| format!("{e}"))?;
    let status = response.status();
    let text = response.text().await.map_err(|e| format!("{e}"))?;
    if !status.is_success() {
        let excerpt: String = text.chars().take(200).collect();
        return Err(format!("{status}: {excerpt}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("an answer that is not JSON: {e}"))
}

/// The sandbox `provider`'s `api_base` names: a client, the base without its trailing `/`, and the provider's
/// token. `Ok(None)` when the provider has no API; [`PrepareError::NotSandbox`] when the API is not a sandbox
/// playing it.
async fn sandbox(
    provider: &hookline_core::ProviderConfig,
) -> Result<Option<(reqwest::Client, String, String)>, PrepareError> {
    let Some(api_base) = &provider.api_base else {
        return Ok(None);
    };
    let api = api_base.as_str().trim_end_matches('/').to_string();
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()
        .map_err(|e| PrepareError::Failed {
            api_base: api.clone(),
            n: 0,
            detail: format!("cannot build the HTTP client: {e}"),
        })?;
    if !plays(&client, &api, &provider.name).await {
        return Err(PrepareError::NotSandbox {
            provider: provider.name.clone(),
            api_base: api,
        });
    }
    let token = provider
        .api_token
        .as_ref()
        .map(|t| t.expose_secret().to_owned())
        .unwrap_or_default();
    Ok(Some((client, api, token)))
}

/// Whether `api` is a hookline sandbox playing `provider` (its `GET /_sandbox/health` lists it).
async fn plays(client: &reqwest::Client, api: &str, provider: &str) -> bool {
    let Ok(response) = client.get(format!("{api}/_sandbox/health")).send().await else {
        return false;
    };
    if !response.status().is_success() {
        return false;
    }
    let Ok(health) = response.json::<Value>().await else {
        return false;
    };
    health["providers"]
        .as_array()
        .is_some_and(|list| list.iter().any(|p| p["name"] == provider))
}

/// Creates `amounts.len()` approved payments at the sandbox that `provider`'s `api_base` names and returns their
/// ids, in order; `Ok(None)` when the provider has no API (nothing is read, nothing to create).
pub(super) async fn create(
    provider: &hookline_core::ProviderConfig,
    run: &str,
    amounts: &[i64],
    concurrency: usize,
) -> Result<Option<Vec<String>>, PrepareError> {
    let Some((client, api, token)) = sandbox(provider).await? else {
        return Ok(None);
    };
    let results: Vec<Result<String, PrepareError>> =
        futures::stream::iter(amounts.iter().copied().enumerate())
            .map(|(n, amount)| {
                let (client, api, token) = (&client, &api, &token);
                async move {
                    let key = format!("hookline-simulate-{run}-{n}");
                    create_one(client, api, token, n, amount, &key)
                        .await
                        .map_err(|detail| PrepareError::Failed {
                            api_base: api.clone(),
                            n,
                            detail,
                        })
                }
            })
            .buffered(concurrency.max(1))
            .collect()
            .await;
    results.into_iter().collect::<Result<Vec<_>, _>>().map(Some)
}

/// A charge made at the sandbox for a Pagar.me v5 simulation: `(ch_…, or_…, amount)`.
pub(super) type PagarmeCharge = (String, String, i64);

/// Creates `amounts.len()` paid card orders at the sandbox that `provider`'s `api_base` names (and refunds each
/// in full when `refund`); their charges, in order. `Ok(None)` when the provider has no API.
pub(super) async fn create_pagarme(
    provider: &hookline_core::ProviderConfig,
    run: &str,
    amounts: &[i64],
    refund: bool,
    concurrency: usize,
) -> Result<Option<Vec<PagarmeCharge>>, PrepareError> {
    let Some((client, api, key)) = sandbox(provider).await? else {
        return Ok(None);
    };
    let failed = |n: usize, detail: String| PrepareError::Failed {
        api_base: api.clone(),
        n,
        detail,
    };
    let results: Vec<Result<PagarmeCharge, PrepareError>> =
        futures::stream::iter(amounts.iter().copied().enumerate())
            .map(|(n, amount)| {
                let (client, api, key) = (&client, &api, &key);
                async move {
                    let code = format!("hookline-simulate-{run}-{n}");
                    create_pagarme_one(client, api, key, amount, &code, refund)
                        .await
                        .map_err(|detail| failed(n, detail))
                }
            })
            .buffered(concurrency.max(1))
            .collect()
            .await;
    results.into_iter().collect::<Result<Vec<_>, _>>().map(Some)
}

/// One paid card order (Pagar.me's approving test card, through a card token made with the public key — the
/// sandbox's is the secret key with `pk_` for `sk_`), refunded in full when `refund`.
async fn create_pagarme_one(
    client: &reqwest::Client,
    api: &str,
    key: &str,
    amount: i64,
    code: &str,
    refund: bool,
) -> Result<PagarmeCharge, String> {
    let public = key.replacen("sk_", "pk_", 1);
    let token = send_json(
        client
            .post(format!("{api}/core/v5/tokens"))
            .query(&[("appId", public.as_str())])
            .json(&json!({"type": "card", "card": {"number": "4000000000000010",
                "holder_name": "Hookline Simulate", "exp_month": 12, "exp_year": 2035, "cvv": "123"}})),
    )
    .await?;
    let token = token["id"].as_str().ok_or("a card token without an id")?;
    let order = send_json(
        client
            .post(format!("{api}/core/v5/orders"))
            .basic_auth(key, Some(""))
            .header("Idempotency-Key", code)
            .json(&json!({
                "code": code,
                "customer": {"name": "Hookline Simulate", "email": "simulate@example.com.br",
                             "document": "12345678909", "type": "individual"},
                "items": [{"amount": amount, "description": "hookline simulate", "quantity": 1, "code": "simulate"}],
                "payments": [{"payment_method": "credit_card", "credit_card": {"card_token": token,
                              "installments": 1, "operation_type": "auth_and_capture"}}],
                "closed": true,
            })),
    )
    .await?;
    let order_id = order["id"]
        .as_str()
        .ok_or("an order without an id")?
        .to_owned();
    let charge = order["charges"][0]["id"]
        .as_str()
        .ok_or("an order without a charge")?
        .to_owned();
    if refund {
        send_json(
            client
                .delete(format!("{api}/core/v5/charges/{charge}"))
                .basic_auth(key, Some(""))
                .header("Idempotency-Key", format!("{code}-refund"))
                .json(&json!({"amount": amount})),
        )
        .await?;
    }
    Ok((charge, order_id, amount))
}
