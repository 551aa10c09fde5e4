//! The writes the API performs once per idempotency key, and how each is executed in the request's transaction.
//! Parsed by the handlers ([`crate::intents`]), run once by [`crate::idempotency`]; neither imports the other.

use std::collections::HashMap;

use actix_web::http::StatusCode;
use hookline_core::config::ProviderConfig;
use hookline_core::domain_events::RecordError;
use hookline_payments::intents::{
    self, CancelOutcome, CancellationReason, CaptureMethod, CaptureOutcome, CreateError, CycleRef,
    NewIntent, RefundError,
};
use hookline_payments::model::IntentStatus;
use hookline_payments::params::PaymentParams;
use sqlx::PgConnection;

use crate::error::ApiError;
use crate::params::{self, ProviderObject};
use crate::subscription_view::{self, SubscriptionChange};
use crate::Reply;

/// A write the API performs once per idempotency key.
pub enum Operation {
    /// Create an intent (and its outbound charge unless it waits for a confirm).
    CreateIntent(Box<CreateIntent>),
    /// Confirm an intent created with `confirm: false`, optionally supplying (part of) its provider object.
    Confirm {
        /// The intent's public id.
        intent: String,
        /// The provider object sent with the confirm, laid over the stored one.
        supplied: Option<ProviderObject>,
    },
    /// Cancel an intent: at once while its charge was not sent, at the gateway while it is open there.
    Cancel {
        /// The intent's public id.
        intent: String,
        /// The merchant's reason (`requested_by_customer` when none was given).
        reason: CancellationReason,
    },
    /// Capture (all or part of) an intent's authorization.
    Capture {
        /// The intent's public id.
        intent: String,
        /// Minor units (`None`: all that was authorized).
        amount: Option<i64>,
    },
    /// Request a refund on an intent.
    Refund {
        /// The intent's public id.
        intent: String,
        /// Minor units.
        amount: i64,
        /// Why.
        reason: String,
    },
    /// Make a webhook endpoint (`POST /v1/webhook_endpoints` with an `Idempotency-Key`).
    CreateWebhookEndpoint(Box<CreateEndpoint>),
    /// Create a subscription (`POST /v1/subscriptions`), checked by `hookline_billing::manage::check_new`.
    CreateSubscription {
        /// The checked subscription.
        checked: Box<hookline_billing::manage::Checked>,
        /// Its provider object's name (`stripe`, `mercadopago`, `pagarme`).
        object: &'static str,
    },
    /// Change a subscription's payment method and/or amount (`POST /v1/subscriptions/{id}`).
    UpdateSubscription {
        /// The subscription's public id.
        subscription: String,
        /// What changes.
        change: Box<SubscriptionChange>,
    },
    /// Cancel a subscription, now or at its period's end (`POST /v1/subscriptions/{id}/cancel`).
    CancelSubscription {
        /// The subscription's public id.
        subscription: String,
        /// At the end of its running period.
        at_period_end: bool,
    },
}

/// A validated `POST /v1/payment_intents` body.
pub struct CreateIntent {
    pub(crate) provider: String,
    pub(crate) amount: i64,
    pub(crate) currency: String,
    pub(crate) customer: Option<String>,
    pub(crate) description: Option<String>,
    pub(crate) order_reference: Option<String>,
    /// What the gateway needs (checked against `missing_for_confirm` already when `confirm`).
    pub(crate) params: Option<PaymentParams>,
    pub(crate) confirm: bool,
    /// The subscription cycle it pays (`subscription_id`, `billing_cycle`), checked against the subscription
    /// in the request's transaction.
    pub(crate) cycle: Option<(i64, String)>,
    /// `automatic` (default) or `manual`.
    pub(crate) capture_method: CaptureMethod,
}

impl Operation {
    /// Performs the write in the request's transaction and builds the response to store and send.
    /// `providers` names each configured provider's scheme (a confirm checks its object against it).
    pub async fn execute(
        self,
        tx: &mut PgConnection,
        client: &str,
        providers: &HashMap<String, ProviderConfig>,
    ) -> Result<Reply, ApiError> {
        match self {
            Operation::CreateIntent(c) => {
                if let Some((subscription_id, _)) = &c.cycle {
                    check_subscription(tx, *subscription_id, &c).await?;
                }
                let intent = intents::create_intent_for_client(
                    tx,
                    client,
                    &NewIntent {
                        provider: &c.provider,
                        amount: c.amount,
                        currency: &c.currency,
                        customer: c.customer.as_deref(),
                        description: c.description.as_deref(),
                        order_reference: c.order_reference.as_deref(),
                        payment_params: c.params.as_ref(),
                        confirm: c.confirm,
                        cycle: c.cycle.as_ref().map(|(id, cycle)| CycleRef {
                            subscription_id: *id,
                            billing_cycle: cycle,
                        }),
                        capture_method: c.capture_method,
                    },
                )
                .await
                .map_err(|e| match e {
                    CreateError::OrderReferenceInUse { intent } => {
                        ApiError::OrderReferenceInUse { intent }
                    }
                    CreateError::BillingCycleInUse { intent } => {
                        ApiError::BillingCycleInUse { intent }
                    }
                    CreateError::OrderReferenceContended => ApiError::Unavailable(anyhow::anyhow!(
                        "the order's live payment intent changed while it was read"
                    )),
                    CreateError::Database(e) => ApiError::database(e, "create the payment intent"),
                })?;
                Reply::json(StatusCode::CREATED, &intent)
            }
            Operation::Confirm { intent, supplied } => {
                confirm(tx, client, providers, &intent, supplied).await
            }
            Operation::Cancel { intent, reason } => {
                let intent = intents::lock_for_client(tx, client, &intent)
                    .await
                    .map_err(|e| ApiError::database(e, "lock the payment intent"))?
                    .ok_or(ApiError::IntentNotFound)?;
                // Billing's dunning is the composition's seam every final move goes through (a merchant's
                // cancel concerns no billing claim: dunning leaves it alone).
                let outcome = intents::cancel(tx, intent, reason, &hookline_billing::Dunning)
                    .await
                    .map_err(|e| match e {
                        RecordError::Database(e) => {
                            ApiError::database(e, "cancel the payment intent")
                        }
                        other => ApiError::Unexpected(anyhow::Error::new(other)),
                    })?;
                match outcome {
                    CancelOutcome::Canceled(intent) => Reply::json(StatusCode::OK, &intent),
                    // Asked of the gateway: `canceled` when it confirms (or `succeeded` if the payment completed
                    // first), told by the intent's fact and its GET.
                    CancelOutcome::Requested(intent) => Reply::json(StatusCode::ACCEPTED, &intent),
                    CancelOutcome::InFlight(intent) => Err(ApiError::IntentInFlight {
                        status: intent.status.as_str(),
                    }),
                    CancelOutcome::Final(intent) => Err(ApiError::IntentUnexpectedState {
                        status: intent.status.as_str(),
                        action: "canceled",
                        pending: "",
                    }),
                }
            }
            Operation::Capture { intent, amount } => {
                let intent = intents::lock_for_client(tx, client, &intent)
                    .await
                    .map_err(|e| ApiError::database(e, "lock the payment intent"))?
                    .ok_or(ApiError::IntentNotFound)?;
                if let Some(amount) = amount.filter(|a| *a > intent.amount_capturable) {
                    if intent.status == IntentStatus::RequiresCapture {
                        return Err(ApiError::AmountTooLarge {
                            amount,
                            capturable: intent.amount_capturable,
                        });
                    }
                }
                let outcome = intents::capture(tx, intent, amount)
                    .await
                    .map_err(|e| match e {
                        RecordError::Database(e) => {
                            ApiError::database(e, "capture the payment intent")
                        }
                        other => ApiError::Unexpected(anyhow::Error::new(other)),
                    })?;
                match outcome {
                    // Asked of the gateway: `succeeded` when it confirms, told by the fact and the GET.
                    CaptureOutcome::Requested(intent) => Reply::json(StatusCode::ACCEPTED, &intent),
                    CaptureOutcome::Refused(intent) => Err(ApiError::IntentUnexpectedState {
                        status: intent.status.as_str(),
                        action: "captured",
                        pending: match intent.pending_operation.as_deref() {
                            Some("capture") => ", its capture asked",
                            Some(_) => ", its cancel asked",
                            None => "",
                        },
                    }),
                }
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
                        // Only the CLI's keyed refunds can reuse a key; the API's keys are its own.
                        e @ RefundError::KeyReused { .. } => {
                            ApiError::Unexpected(anyhow::Error::new(e))
                        }
                    })?;
                Reply::json(
                    StatusCode::CREATED,
                    &RefundCreated {
                        id: intents::refund_public_id(id),
                        intent,
                        amount,
                        status: "requires_dispatch",
                    },
                )
            }
            Operation::CreateWebhookEndpoint(c) => execute_create(tx, client, &c).await,
            Operation::CreateSubscription { checked, object } => {
                subscription_view::execute_create(tx, client, &checked, object, providers).await
            }
            Operation::UpdateSubscription {
                subscription,
                change,
            } => {
                subscription_view::execute_update(tx, client, &subscription, &change, providers)
                    .await
            }
            Operation::CancelSubscription {
                subscription,
                at_period_end,
            } => {
                subscription_view::execute_cancel(
                    tx,
                    client,
                    &subscription,
                    at_period_end,
                    providers,
                )
                .await
            }
        }
    }
}

/// Confirms the client's intent `public_id` (see [`crate::intents::confirm`]): the row is locked first, so
/// concurrent confirms decide one after the other; only `requires_confirmation` moves (to `requires_dispatch`,
/// its charge queued), any other status is answered as it is, nothing changed.
async fn confirm(
    tx: &mut PgConnection,
    client: &str,
    providers: &HashMap<String, ProviderConfig>,
    public_id: &str,
    supplied: Option<ProviderObject>,
) -> Result<Reply, ApiError> {
    let intent = intents::lock_for_client(tx, client, public_id)
        .await
        .map_err(|e| ApiError::database(e, "lock the payment intent"))?
        .ok_or(ApiError::IntentNotFound)?;
    if intent.status != IntentStatus::RequiresConfirmation {
        return Reply::json(StatusCode::OK, &intent);
    }
    let scheme = providers
        .get(&intent.provider)
        .map(|p| p.scheme)
        .filter(|s| params::field_of(*s).is_some())
        .ok_or_else(|| {
            ApiError::field(
                "provider_not_supported",
                "provider",
                "this payment intent's provider is no longer configured for charges",
            )
        })?;
    let expected = params::field_of(scheme).unwrap_or_default();
    let stored = intent.payment_params.as_ref().map(|p| &p.0);
    let params = match (&supplied, stored) {
        (Some(object), _) if object.field() != expected => {
            return Err(ApiError::ProviderObjectMismatch {
                param: object.field().to_owned(),
                expected,
            })
        }
        (Some(object), stored) => object.merged_over(stored)?,
        (None, Some(stored)) => stored.clone(),
        (None, None) => params::empty(scheme).ok_or_else(|| {
            ApiError::Unexpected(anyhow::anyhow!("no provider object for {expected}"))
        })?,
    };
    if let Some(param) = params.missing_for_confirm() {
        return Err(ApiError::ParameterMissing {
            param: param.to_owned(),
        });
    }
    if intent.capture_method == CaptureMethod::Manual {
        if let Some(param) = params.not_a_card() {
            return Err(ApiError::field(
                "capture_method_unsupported",
                param,
                "capture_method manual authorizes a card only; this payment method is captured as it is paid",
            ));
        }
    }
    let confirmed = intents::confirm(tx, intent.id, &params)
        .await
        .map_err(|e| ApiError::database(e, "confirm the payment intent"))?;
    // The row is locked: the UPDATE's condition holds. Should it not, the current state is the answer.
    let current = match confirmed {
        Some(i) => i,
        None => intents::get_for_client(tx, client, public_id)
            .await
            .map_err(|e| ApiError::database(e, "read the payment intent"))?
            .ok_or(ApiError::IntentNotFound)?,
    };
    Reply::json(StatusCode::OK, &current)
}

/// A checkout paying a subscription's cycle pays what the subscription charges: the subscription exists and is
/// not canceled, and the provider, currency and amount are its own (422 naming `subscription_id` otherwise).
async fn check_subscription(
    tx: &mut PgConnection,
    subscription_id: i64,
    c: &CreateIntent,
) -> Result<(), ApiError> {
    let sub = hookline_billing::get(tx, subscription_id)
        .await
        .map_err(|e| ApiError::database(e, "read the subscription"))?;
    let Some(sub) = sub.filter(|s| s.status != hookline_billing::SubscriptionStatus::Canceled)
    else {
        return Err(ApiError::field(
            "subscription_unknown",
            "subscription_id",
            "no active subscription has this id",
        ));
    };
    if sub.provider != c.provider || sub.currency != c.currency || sub.amount != c.amount {
        return Err(ApiError::field(
            "subscription_mismatch",
            "subscription_id",
            "a subscription's cycle is paid with its own provider, currency and amount",
        ));
    }
    Ok(())
}

/// The answer to `POST /v1/payment_intents/{id}/refunds` (the OpenAPI schema `Refund`).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Refund)]
pub struct RefundCreated {
    /// `re_hl_…`: the refund's id.
    #[schema(example = "re_hl_17")]
    pub id: String,
    /// The payment intent refunded.
    pub intent: String,
    /// Minor units.
    pub amount: i64,
    /// `requires_dispatch`: queued for the gateway under its own key; `refund.applied` tells when it is applied.
    #[schema(value_type = String, example = "requires_dispatch")]
    pub status: &'static str,
}

/// A validated `POST /v1/webhook_endpoints`, with what the client's configuration says.
pub struct CreateEndpoint {
    pub(crate) id: String,
    pub(crate) url: String,
    pub(crate) events: Vec<String>,
    pub(crate) description: Option<String>,
    pub(crate) secret: String,
    pub(crate) all_events: bool,
    pub(crate) allow_private: bool,
}

/// Runs a create in the request's transaction (through [`crate::idempotency`]): 201 with the endpoint and its secret, or
/// 409 when the client has its 16.
async fn execute_create(
    tx: &mut PgConnection,
    client: &str,
    c: &CreateEndpoint,
) -> Result<Reply, ApiError> {
    let made = hookline_delivery::destinations::create_endpoint(
        tx,
        &hookline_delivery::destinations::NewEndpoint {
            id: &c.id,
            client,
            url: &c.url,
            events: &c.events,
            description: c.description.as_deref(),
            secret: &c.secret,
            all_events: c.all_events,
            allow_private: c.allow_private,
        },
    )
    .await
    .map_err(|e| ApiError::database(e, "create the webhook endpoint"))?
    .ok_or(ApiError::EndpointLimitReached {
        limit: hookline_delivery::destinations::MAX_ENDPOINTS_PER_CLIENT,
    })?;
    Reply::json(
        StatusCode::CREATED,
        &crate::webhook_view::with_secret(&made, &c.secret),
    )
}
