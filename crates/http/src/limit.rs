//! The body limit, checked on the headers: a request whose `Content-Length` is over it is
//! answered 413 at once, before any of its body is read.

use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use switchboard_protocol::ErrorCode;

use crate::ApiError;

/// The largest body accepted, in bytes (the state of [`reject_oversized`]).
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Middleware: 413 `payload_too_large` (with `Connection: close`, the unread body is not
/// waited for) when the declared `Content-Length` is over the limit. A body without one
/// (chunked) is still cut by the extractors' limit as it arrives.
pub async fn reject_oversized(
    State(limit): State<BodyLimit>,
    req: Request,
    next: Next,
) -> Response {
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match declared {
        Some(n) if n > limit.0 as u64 => {
            let mut resp = ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "request body is too large ({n} bytes; at most {} accepted)",
                    limit.0
                ),
            )
            .into_response();
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            resp
        }
        _ => next.run(req).await,
    }
}
