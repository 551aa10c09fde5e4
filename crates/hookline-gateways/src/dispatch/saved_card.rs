//! A Mercado Pago saved card's preparation (see [`crate::gateway::mercadopago`]): per key generation, the card
//! lookup and the card token, stored with the outbound request before the payment is sent.

use time::OffsetDateTime;

use super::answer::{classify_card_step, Answer, Expected};
use super::{Dispatcher, Gateway, Subject};
use crate::gateway::mercadopago::{self, MintedCard};
use crate::gateway::{ApiClient, PostError};
use hookline_payments::outbound_requests::{self, Claimed};
use hookline_payments::params::PaymentParams;

impl Dispatcher {
    /// The card token of a saved card's charge for this key generation: the one stored with the request, else a
    /// new one (the card's payment method unless the intent names one, then the token) stored BEFORE the payment
    /// is sent — every attempt of the generation sends the identical body under the same key; a new generation
    /// mints anew. `Ok(None)`: not a saved card's charge (or an incomplete one, which [`super::build`] refuses
    /// with the reason). `Err(answer)`: a step answered a decline, a retry or a refusal; nothing was paid.
    pub(super) async fn saved_card(
        &self,
        gateway: &Gateway,
        claimed: &Claimed,
        subject: &Subject,
    ) -> Result<Result<Option<MintedCard>, Answer>, sqlx::Error> {
        if subject.refund.is_some() || !gateway.api.mints_saved_cards() {
            return Ok(Ok(None));
        }
        let Some(PaymentParams::MercadoPago(p)) =
            subject.intent.payment_params.as_ref().map(|j| &j.0)
        else {
            return Ok(Ok(None));
        };
        let (Some(card), Some(customer), None) = (
            p.card_id.as_deref(),
            p.customer_id.as_deref(),
            p.token.as_deref(),
        ) else {
            return Ok(Ok(None));
        };
        if let Some(stored) =
            outbound_requests::saved_card(&self.pool, claimed.id, claimed.key_generation).await?
        {
            return Ok(Ok(Some(stored)));
        }
        let expected = Expected {
            api: gateway.api,
            refund: false,
            provider: &claimed.provider,
            attempts: claimed.attempts,
            refund_public_id: None,
            operation: false,
        };
        let minted = match mint(
            &gateway.client,
            &expected,
            customer,
            card,
            p.payment_method_id.as_deref(),
        )
        .await
        {
            Ok(m) => m,
            Err(answer) => return Ok(Err(answer)),
        };
        let kept = outbound_requests::keep_saved_card(
            &self.pool,
            claimed.id,
            claimed.key_generation,
            &minted,
        )
        .await?;
        tracing::info!(
            request = claimed.id,
            generation = claimed.key_generation,
            kept = kept.is_some(),
            "dispatcher: minted a card token for the saved card"
        );
        Ok(match kept {
            Some(kept) => Ok(Some(kept)),
            // Resolved or moved to another generation meanwhile (a dispatcher whose lease expired): send nothing.
            None => Err(Answer::Retry {
                status: None,
                retry_after: None,
                error: "the request changed while its card token was minted; nothing sent".into(),
            }),
        })
    }
}

/// The card's payment method (unless `given`) and a new token of the card, for one payment.
async fn mint(
    api: &ApiClient,
    expected: &Expected<'_>,
    customer: &str,
    card: &str,
    given: Option<&str>,
) -> Result<MintedCard, Answer> {
    let payment_method_id = match given {
        Some(m) => m.to_owned(),
        None => {
            let req = mercadopago::saved_card_request(api, customer, card).map_err(unsendable)?;
            classify_card_step(
                expected,
                "the card lookup",
                ApiClient::exchange(req).await,
                |json| mercadopago::read_saved_card(json, card),
            )?
        }
    };
    let req = mercadopago::card_token_request(api, customer, card).map_err(unsendable)?;
    let token = classify_card_step(
        expected,
        "the card token",
        ApiClient::exchange(req).await,
        mercadopago::read_card_token,
    )?;
    Ok(MintedCard {
        token,
        payment_method_id,
        billing_date: MintedCard::billing_date_of(OffsetDateTime::now_utc()),
    })
}

/// A step that cannot be sent: refused (an operator fixes it) or retried (no HTTP client yet).
fn unsendable(e: PostError) -> Answer {
    match e {
        PostError::Refused(error) => Answer::Refused {
            status: None,
            error,
        },
        PostError::NoClient(error) => Answer::Retry {
            status: None,
            retry_after: None,
            error,
        },
    }
}
