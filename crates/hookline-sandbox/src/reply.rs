//! A response before it becomes HTTP: what the idempotency layers save and replay.

use actix_web::http::StatusCode;
use actix_web::HttpResponse;
use serde_json::Value;

/// Status, JSON body and extra headers of one API answer.
#[derive(Debug, Clone)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
    pub(crate) headers: Vec<(&'static str, String)>,
}

impl Reply {
    pub(crate) fn json(status: u16, body: &Value) -> Reply {
        Reply {
            status,
            body: serde_json::to_vec(body).unwrap_or_default(),
            headers: Vec::new(),
        }
    }

    pub(crate) fn header(mut self, name: &'static str, value: impl Into<String>) -> Reply {
        self.headers.push((name, value.into()));
        self
    }

    pub(crate) fn into_response(self) -> HttpResponse {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut builder = HttpResponse::build(status);
        builder.content_type("application/json; charset=utf-8");
        for (name, value) in self.headers {
            builder.insert_header((name, value));
        }
        builder.body(self.body)
    }
}
