//! The kit's extractors (rejections are [`ApiError`]s with stable codes), and the session
//! id and page of `/v1/sessions`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use switchboard_protocol::ErrorCode;
use uuid::Uuid;

use crate::ApiError;
pub use switchboard_http::{Json, Query};

/// The `{id}` of `/v1/sessions/{id}/…` as a UUID.
pub struct SessionId(pub Uuid);

impl<S: Send + Sync> FromRequestParts<S> for SessionId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let switchboard_http::Path(raw) =
            switchboard_http::Path::<String>::from_request_parts(parts, state).await?;
        Uuid::parse_str(&raw).map(SessionId).map_err(|_| {
            ApiError::new(
                ErrorCode::ValidationFailed,
                format!("session id {raw:?} is not a UUID"),
            )
        })
    }
}

/// The `{id}` of `/v1/sessions/{id}/…`, for a route that takes either the server's token (or
/// a principal the authentication layer resolved) or that session's own token (see `switchboard_engine::tokens`). Authenticates before it
/// parses: a caller with neither token learns nothing about the id.
pub struct SessionCaller(pub Uuid);

impl FromRequestParts<crate::AppState> for SessionCaller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &crate::AppState,
    ) -> Result<Self, Self::Rejection> {
        let server =
            switchboard_http::authorized(&parts.extensions, &parts.headers, &state.config.token);
        if server.is_ok() {
            let SessionId(id) = SessionId::from_request_parts(parts, state).await?;
            return Ok(Self(id));
        }
        let given = switchboard_http::bearer_value(&parts.headers)?.to_owned();
        let switchboard_http::Path(raw) =
            switchboard_http::Path::<String>::from_request_parts(parts, state).await?;
        match Uuid::parse_str(&raw) {
            Ok(id) if state.engine.verify_session_token(id, &given) => Ok(Self(id)),
            _ => Err(server
                .err()
                .unwrap_or_else(|| ApiError::new(ErrorCode::InvalidToken, "invalid token"))),
        }
    }
}

/// The principal making the request: the one the authentication layer resolved, else (a
/// router used without that layer) the server token's built-in admin when the request
/// carries it; 401 otherwise.
pub struct Caller(pub switchboard_protocol::people::Principal);

impl FromRequestParts<crate::AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &crate::AppState,
    ) -> Result<Self, Self::Rejection> {
        if let Some(p) = parts
            .extensions
            .get::<switchboard_protocol::people::Principal>()
        {
            return Ok(Self(p.clone()));
        }
        switchboard_http::check_bearer(&parts.headers, &state.config.token)?;
        Ok(Self(switchboard_protocol::people::Principal::server()))
    }
}

/// `limit` (1–1000, default 50) and `offset` (default 0).
pub(crate) fn page(p: switchboard_protocol::Page) -> Result<(u32, u32), ApiError> {
    let limit = p.limit.unwrap_or(50);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::new(
            ErrorCode::InvalidQuery,
            "limit must be between 1 and 1000",
        ));
    }
    Ok((limit, p.offset.unwrap_or(0)))
}
