//! Bearer-token authentication.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;
use switchboard_protocol::ErrorCode;

use crate::ApiError;

/// The token a route requires (the state of [`require_bearer`]).
#[derive(Clone)]
pub struct BearerToken(Arc<str>);

impl BearerToken {
    pub fn new(token: impl Into<String>) -> Self {
        Self(Arc::from(token.into()))
    }

    /// [`check_bearer`] against this token.
    pub fn check(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        check_bearer(headers, &self.0)
    }

    /// [`authorized`](crate::authorized): a principal the authentication layer resolved,
    /// or this token.
    pub fn authorized(
        &self,
        extensions: &axum::http::Extensions,
        headers: &HeaderMap,
    ) -> Result<(), ApiError> {
        crate::authorized(extensions, headers, &self.0)
    }
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken([redacted])")
    }
}

/// `Ok` when `headers` carry `Authorization: Bearer <token>` (compared in constant time);
/// else 401 `unauthorized` (missing or not a bearer header) or 401 `invalid_token`.
pub fn check_bearer(headers: &HeaderMap, token: &str) -> Result<(), ApiError> {
    let given = bearer_value(headers)?;
    if !bool::from(given.as_bytes().ct_eq(token.as_bytes())) {
        return Err(ApiError::new(ErrorCode::InvalidToken, "invalid token"));
    }
    Ok(())
}

/// The token of `Authorization: Bearer <token>`; 401 `unauthorized` when the header is
/// missing or not a bearer header. For routes that accept more than one kind of token.
pub fn bearer_value(headers: &HeaderMap) -> Result<&str, ApiError> {
    let Some(header) = headers.get(axum::http::header::AUTHORIZATION) else {
        return Err(ApiError::new(
            ErrorCode::Unauthorized,
            "missing Authorization: Bearer <token> header",
        ));
    };
    header
        .to_str()
        .ok()
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        })
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::Unauthorized,
                "Authorization header must be `Bearer <token>`",
            )
        })
}

/// Middleware: lets a request through only with the bearer token
/// (`from_fn_with_state(BearerToken::new(token), require_bearer)`), or with a principal
/// that [`authenticate`](crate::authenticate) resolved and whose scope it checked.
pub async fn require_bearer(
    State(token): State<BearerToken>,
    req: Request,
    next: Next,
) -> Response {
    match crate::authorized(req.extensions(), req.headers(), &token.0) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use axum::http::HeaderValue;

    fn with(v: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::header::AUTHORIZATION,
            HeaderValue::from_static(v),
        );
        h
    }

    #[test]
    fn bearer_check() {
        assert_eq!(
            check_bearer(&HeaderMap::new(), "t").unwrap_err().code(),
            "unauthorized"
        );
        assert_eq!(
            check_bearer(&with("Basic t"), "t").unwrap_err().code(),
            "unauthorized"
        );
        assert_eq!(
            check_bearer(&with("Bearer x"), "t").unwrap_err().code(),
            "invalid_token"
        );
        assert!(check_bearer(&with("bearer t"), "t").is_ok());
    }
}
