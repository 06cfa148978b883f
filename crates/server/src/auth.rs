//! Bearer-token authentication.

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;
use switchboard_protocol::ErrorCode;

use crate::{ApiError, AppState};

/// Lets a request through only with `Authorization: Bearer <token>`; compares in constant
/// time.
pub(crate) async fn require_token(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let Some(header) = req.headers().get(axum::http::header::AUTHORIZATION) else {
        return ApiError::new(
            ErrorCode::Unauthorized,
            "missing Authorization: Bearer <token> header",
        )
        .into_response();
    };
    let given = header.to_str().ok().and_then(|v| {
        let (scheme, token) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    });
    let Some(given) = given else {
        return ApiError::new(
            ErrorCode::Unauthorized,
            "Authorization header must be `Bearer <token>`",
        )
        .into_response();
    };
    if !bool::from(given.as_bytes().ct_eq(state.config.token.as_bytes())) {
        return ApiError::new(ErrorCode::InvalidToken, "invalid token").into_response();
    }
    next.run(req).await
}
