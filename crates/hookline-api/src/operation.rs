//! The writes the API performs once per idempotency key, and how each is executed in the request's transaction.
//! Parsed by the handlers ([`crate::intents`]), run once by [`crate::idempotency`]; neither imports the other.

use actix_web::http::StatusCode;
use hookline_payments::intents::{self, NewIntent, RefundError};
use sqlx::PgConnection;

use crate::error::ApiError;
use crate::Reply;

/// A write the API performs once per idempotency key.
pub enum Operation {
    /// Create an intent (and its outbound charge).
    CreateIntent(CreateIntent),
    /// Request a refund on an intent.
    Refund {
        /// The intent's public id.
        intent: String,
        /// Minor units.
        amount: i64,
        /// Why.
        reason: String,
    },
}

/// A validated `POST /v1/payment_intents` body.
pub struct CreateIntent {
    pub(crate) provider: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) description: Option<String>,
}

impl Operation {
    /// Performs the write in the request's transaction and builds the response to store and send.
    pub async fn execute(self, tx: &mut PgConnection, client: &str) -> Result<Reply, ApiError> {
        match self {
            Operation::CreateIntent(c) => {
                let intent = intents::create_intent_for_client(
                    tx,
                    client,
                    &NewIntent {
                        provider: &c.provider,
                        amount: c.amount,
                        currency: &c.currency,
                        customer: c.customer.as_deref(),
                        description: c.description.as_deref(),
                        order_reference: None,
                        payment_params: None,
                        confirm: true,
                    },
                )
                .await
                .map_err(|e| ApiError::database(e, "create the payment intent"))?;
                Reply::json(StatusCode::CREATED, &intent)
            }
            Operation::Refund {
                intent,
                amount,
                reason,
            } => {
                let id = intents::request_refund_for_client(tx, client, &intent, amount, &reason)
                    .await
                    .map_err(|e| match e {
                        RefundError::UnknownIntent(_) => ApiError::IntentNotFound,
                        RefundError::NotCaptured(_) => ApiError::IntentNotCaptured,
                        RefundError::AboveCaptured { amount, left } => {
                            ApiError::RefundAboveCaptured { amount, left }
                        }
                        RefundError::Database(e) => ApiError::database(e, "request the refund"),
                    })?;
                Reply::json(
                    StatusCode::CREATED,
                    &serde_json::json!({
                        "id": format!("re_hl_{id}"),
                        "intent": intent,
                        "amount": amount,
                        "status": "requires_dispatch",
                    }),
                )
            }
        }
    }
}
