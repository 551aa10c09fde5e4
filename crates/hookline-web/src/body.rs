//! Reading a request body with both bounds every listener needs: never buffered past a size limit (declared or
//! streamed) and never waited for past a time limit (a trickled body). Shared by the webhook route and the
//! merchant API; each maps [`BodyError`] to its own error boundary.

use std::time::Duration;

use actix_web::http::header;
use actix_web::{web, HttpRequest};
use bytes::BytesMut;
use futures::StreamExt;

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// Declared or streamed past `limit` bytes.
    #[error("request body exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// Not delivered within the time limit.
    #[error("request body was not received within {0:?}")]
    Timeout(Duration),
    /// The connection failed while it was read.
    #[error("could not read the request body")]
    Read(#[source] actix_web::error::PayloadError),
}

/// Reads the whole body: at most `limit` bytes, within `timeout`.
pub async fn read_bounded(
    req: &HttpRequest,
    mut payload: web::Payload,
    limit: usize,
    timeout: Duration,
) -> Result<BytesMut, BodyError> {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > limit) {
        return Err(BodyError::TooLarge { limit });
    }
    let mut body = BytesMut::with_capacity(declared.unwrap_or(8 * 1024).min(limit));
    let read = async {
        while let Some(chunk) = payload.next().await {
            let chunk = chunk.map_err(BodyError::Read)?;
            if body.len() + chunk.len() > limit {
                return Err(BodyError::TooLarge { limit });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(())
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| BodyError::Timeout(timeout))??;
    Ok(body)
}
