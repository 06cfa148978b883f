//! The one error answer of every route, and the request-id plumbing.

use std::borrow::Cow;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};
use switchboard_protocol::{Coded, ErrorCode};
use tracing::Instrument as _;
use uuid::Uuid;

tokio::task_local! {
    /// Id of the request being served, for error bodies and logs.
    static REQUEST_ID: String;
}

fn sane(v: &str) -> bool {
    !v.is_empty() && v.len() <= 64 && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// Gives each request an id (`x-request-id`, taken from the client when it sent a sane
/// one), answered in the `x-request-id` header and in every error body. Layered twice (a
/// router inside another), the inner layer keeps the outer one's id.
pub async fn request_id(req: Request, next: Next) -> Response {
    if REQUEST_ID.try_with(|_| ()).is_ok() {
        return next.run(req).await;
    }
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| sane(v))
        .map(str::to_string)
        .unwrap_or_else(|| Uuid::now_v7().to_string());
    // One span per request: what happens while serving it (and the run it starts, for a
    // trace exporter) is found by its request id and session.
    let path = req.uri().path().to_owned();
    let session = path
        .strip_prefix("/v1/sessions/")
        .and_then(|rest| rest.split('/').next())
        .filter(|s| Uuid::parse_str(s).is_ok())
        .unwrap_or_default()
        .to_owned();
    let span = tracing::info_span!(
        "request",
        method = %req.method(),
        path = %path,
        request_id = %id,
        session_id = %session,
        status = tracing::field::Empty,
    );
    let mut resp = REQUEST_ID
        .scope(id.clone(), next.run(req).instrument(span.clone()))
        .await;
    span.record("status", resp.status().as_u16());
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// The id of the request being served (a new one outside the middleware, so an error body
/// never has an empty id).
pub fn current_request_id() -> String {
    REQUEST_ID
        .try_with(Clone::clone)
        .unwrap_or_else(|_| Uuid::now_v7().to_string())
}

/// An error answer: the status, and the JSON body `{error, code, request_id}` (an
/// [`switchboard_protocol::ErrorBody`]) plus any fields a surface adds (the relay's
/// `schema_version`, `message` and `details`).
///
/// Any error type that implements [`Coded`] converts into it, so handlers use `?`; an
/// `internal` error's text goes to the log, never to the client.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: Cow<'static, str>,
    message: String,
    /// Boxed: most errors have none, and a `Result<_, ApiError>` stays small.
    fields: Option<Box<Map<String, Value>>>,
    /// `Retry-After`, in seconds (every 503 has one; see [`RETRY_AFTER_SECS`]).
    retry_after: Option<u64>,
}

impl ApiError {
    /// An error with one of the stable codes; the status goes with the code.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::from_u16(code.http_status())
                .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code: Cow::Borrowed(code.as_str()),
            message: message.into(),
            fields: None,
            retry_after: None,
        }
    }

    /// An error with a surface's own code (the relay's `validation_*`, `authorization_*` …)
    /// and status.
    pub fn custom(status: u16, code: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            code: Cow::Owned(code.into()),
            message: message.into(),
            fields: None,
            retry_after: None,
        }
    }

    /// Adds a field to the body, next to `error`, `code` and `request_id` (which it cannot
    /// replace).
    pub fn with_field(mut self, name: impl Into<String>, value: Value) -> Self {
        let name = name.into();
        if !matches!(name.as_str(), "error" | "code" | "request_id") {
            self.fields.get_or_insert_default().insert(name, value);
        }
        self
    }

    /// Tells the client when to try again (`Retry-After: secs`).
    pub fn with_retry_after(mut self, secs: u64) -> Self {
        self.retry_after = Some(secs);
        self
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &str {
        &self.code
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

impl<E: Coded> From<E> for ApiError {
    fn from(e: E) -> Self {
        let code = e.code();
        if code == ErrorCode::Internal {
            // Details go to the log, never to the client.
            tracing::error!(error = %e, request_id = %current_request_id(), "internal error");
            Self::new(code, "internal server error")
        } else if code == ErrorCode::StoreUnavailable {
            // A database's error text can name hosts, tables or statements: logged only.
            metrics::counter!("switchboard_store_unavailable_answers_total").increment(1);
            tracing::warn!(error = %e, request_id = %current_request_id(), "store unavailable");
            Self::new(
                code,
                "the database is not answering; nothing of this request was kept, retry shortly",
            )
        } else {
            Self::new(code, e.to_string())
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = self.fields.map(|b| *b).unwrap_or_default();
        body.insert("error".into(), Value::String(self.message));
        body.insert("code".into(), Value::String(self.code.into_owned()));
        body.insert("request_id".into(), Value::String(current_request_id()));
        let mut resp = (self.status, axum::Json(Value::Object(body))).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert("www-authenticate", HeaderValue::from_static("Bearer"));
        }
        // Every 503 says when to try again (RFC 9110 §10.2.3), and so does a 429 that knows.
        if let Some(secs) = self.retry_after {
            resp.headers_mut()
                .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(secs));
        } else if self.status == StatusCode::SERVICE_UNAVAILABLE {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECS),
            );
        }
        resp
    }
}

/// The `Retry-After` of every 503 answer, in seconds: long enough not to hammer a database
/// that is restarting, short enough that a client's retry lands soon after it is back.
pub const RETRY_AFTER_SECS: &str = "2";

/// Fallback: 404 `not_found`.
pub async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

/// Fallback for a known path with another method: 405 `method_not_allowed`.
pub async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "method not allowed on this route",
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Debug)]
    struct Boom(ErrorCode);
    impl std::fmt::Display for Boom {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("secret detail")
        }
    }
    impl Coded for Boom {
        fn code(&self) -> ErrorCode {
            self.0
        }
    }

    #[test]
    fn coded_errors_convert_and_internal_ones_hide_their_text() {
        let e: ApiError = Boom(ErrorCode::RunMismatch).into();
        assert_eq!((e.status().as_u16(), e.code()), (409, "run_mismatch"));
        assert_eq!(e.message(), "secret detail");
        let e: ApiError = Boom(ErrorCode::Internal).into();
        assert_eq!(e.status().as_u16(), 500);
        assert_eq!(e.message(), "internal server error");
    }

    #[test]
    fn fields_cannot_replace_the_common_ones() {
        let e = ApiError::custom(403, "authorization_forbidden", "no")
            .with_field("details", serde_json::json!({"a": 1}))
            .with_field("code", Value::Null);
        assert_eq!(e.code(), "authorization_forbidden");
        assert_eq!(e.fields.map(|f| f.len()), Some(1));
    }
}
