//! The one error type of the API and the request-id plumbing.

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use switchboard_engine::EngineError;
use switchboard_protocol::{ErrorBody, ErrorCode};
use uuid::Uuid;

tokio::task_local! {
    /// Id of the request being served, for error bodies and logs.
    static REQUEST_ID: String;
}

/// Gives each request an id (`x-request-id`, taken from the client when it sent a sane one).
pub(crate) async fn request_id(req: Request, next: Next) -> Response {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 64
                && v.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
        .map(str::to_string)
        .unwrap_or_else(|| Uuid::now_v7().to_string());
    let mut resp = REQUEST_ID.scope(id.clone(), next.run(req)).await;
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

fn current_request_id() -> String {
    REQUEST_ID.try_with(Clone::clone).unwrap_or_default()
}

/// An error answer: status from the code, JSON body `{error, code, request_id}`.
#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> Self {
        let code = e.code();
        let message = if code == ErrorCode::Internal {
            // Details go to the log, never to the client.
            tracing::error!(error = %e, request_id = %current_request_id(), "internal error");
            "internal server error".to_string()
        } else {
            e.to_string()
        };
        Self { code, message }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            error: self.message,
            code: self.code.as_str().into(),
            request_id: current_request_id(),
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            resp.headers_mut()
                .insert("www-authenticate", HeaderValue::from_static("Bearer"));
        }
        resp
    }
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::NotFound, "no such route")
}

pub(crate) async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "method not allowed on this route",
    )
}
