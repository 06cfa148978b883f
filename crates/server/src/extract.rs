//! The kit's extractors (rejections are [`ApiError`]s with stable codes), and the session
//! id and page of `/v1/sessions`.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use switchboard_protocol::ErrorCode;
use uuid::Uuid;

use crate::ApiError;
pub use switchboard_http::{Json, Query};

/// The `{id}` of `/v1/sessions/{id}/…` as a UUID, of a session the caller may see: a
/// member's request for a session neither theirs nor shared with them is answered as if
/// there were no such session (`switchboard_engine::team::may_see`). Every route under
/// `/v1/sessions/{id}` takes its id through this (or [`SessionCaller`]).
pub struct SessionId(pub Uuid);

impl FromRequestParts<crate::AppState> for SessionId {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &crate::AppState,
    ) -> Result<Self, Self::Rejection> {
        let id = parse_session_id(parts, state).await?;
        if let Some(p) = parts
            .extensions
            .get::<switchboard_protocol::people::Principal>()
        {
            visible(state, p, id).await?;
        }
        Ok(Self(id))
    }
}

/// `{id}` of the path (of any number of parameters) as a UUID.
async fn parse_session_id(parts: &mut Parts, state: &crate::AppState) -> Result<Uuid, ApiError> {
    let switchboard_http::Path(params) = switchboard_http::Path::<
        std::collections::HashMap<String, String>,
    >::from_request_parts(parts, state)
    .await?;
    let raw = params.get("id").cloned().unwrap_or_default();
    Uuid::parse_str(&raw).map_err(|_| {
        ApiError::new(
            ErrorCode::ValidationFailed,
            format!("session id {raw:?} is not a UUID"),
        )
    })
}

/// `Ok` when `p` may see session `id`; else 404 `session_not_found`, as for no session.
pub(crate) async fn visible(
    state: &crate::AppState,
    p: &switchboard_protocol::people::Principal,
    id: Uuid,
) -> Result<(), ApiError> {
    if switchboard_engine::team::sees_all(p) {
        return Ok(());
    }
    let (owner, shares) = state.engine.session_access(id).await?;
    if switchboard_engine::team::may_see(p, owner.as_deref(), &shares) {
        Ok(())
    } else {
        Err(switchboard_engine::EngineError::SessionNotFound(id).into())
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
        // A session's own token reaches that session only (checked below).
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

/// The owner a principal's new session gets: their name (none for the server token's
/// built-in admin).
pub(crate) fn owner_of(p: &switchboard_protocol::people::Principal) -> Option<&str> {
    (p.credential != switchboard_protocol::people::Credential::ServerToken)
        .then_some(p.user.as_str())
}

/// Where a principal acts from, for the audit log.
pub(crate) fn via(p: &switchboard_protocol::people::Principal) -> &'static str {
    match p.credential {
        switchboard_protocol::people::Credential::Console => "console",
        switchboard_protocol::people::Credential::Chat => "chat",
        _ => "api",
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
