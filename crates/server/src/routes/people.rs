//! `/v1/me`, `/v1/users`, `/v1/tokens`, `/v1/audit`: a team's people, their personal API
//! tokens and the audit log. Who may do what is the engine's [`Team`](switchboard_engine::Team)
//! policy; these handlers parse, call, encode.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::Deserialize;
use switchboard_engine::store::people::AuditFilter;
use switchboard_protocol::ErrorBody;
use switchboard_protocol::people::{
    CreateTokenRequest, CreateUserRequest, CreatedToken, LinkCode, LinkRequest, ListAuditResponse,
    ListTokensResponse, ListUsersResponse, Me, TokenInfo, UpdateUserRequest, User,
};
use utoipa::IntoParams;

use crate::extract::{self, Caller, via};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/me", get(me))
        .route("/v1/users", get(list_users).post(create_user))
        .route(
            "/v1/users/{name}",
            get(show_user).patch(update_user).delete(delete_user),
        )
        .route("/v1/tokens", get(list_tokens).post(create_token))
        .route("/v1/tokens/{id}", delete(revoke_token))
        .route("/v1/audit", get(audit))
        .route("/v1/me/link-code", post(link_code))
        .route("/v1/links", post(link))
        .route("/v1/links/{platform}/{user_id}", delete(unlink))
}

/// A one-time code for the caller to send to a bot as `/link CODE` (on any chat platform,
/// within ten minutes): that chat identity then acts as them.
#[utoipa::path(post, path = "/v1/me/link-code", tag = "team", security(("bearer" = [])),
    responses((status = 200, body = LinkCode),
              (status = 422, description = "`unprocessable_entity`: the server token's built-in admin links no chats", body = ErrorBody)))]
pub async fn link_code(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<LinkCode>, ApiError> {
    Ok(Json(state.engine.team().new_link_code(&p).await?))
}

/// Links a chat identity to a person: by the code they got (what a chat channel sends for
/// `/link CODE`), or by name.
#[utoipa::path(post, path = "/v1/links", tag = "team", request_body = LinkRequest,
    security(("bearer" = ["admin"])),
    responses((status = 200, body = User),
              (status = 404, description = "`not_found`: no such code (used, expired) or user", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: neither or both of code and user", body = ErrorBody)))]
pub async fn link(
    State(state): State<AppState>,
    Caller(p): Caller,
    extract::Json(req): extract::Json<LinkRequest>,
) -> Result<Json<User>, ApiError> {
    Ok(Json(
        state
            .engine
            .team()
            .link(
                &p,
                &req.platform,
                &req.user_id,
                req.code.as_deref(),
                req.user.as_deref(),
                via(&p),
            )
            .await?,
    ))
}

/// Unlinks a chat identity.
#[utoipa::path(delete, path = "/v1/links/{platform}/{user_id}", tag = "team",
    params(("platform" = String, Path), ("user_id" = String, Path)),
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Unlinked"),
              (status = 404, description = "`not_found`: linked to no one", body = ErrorBody)))]
pub async fn unlink(
    State(state): State<AppState>,
    Caller(p): Caller,
    switchboard_http::Path((platform, user_id)): switchboard_http::Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    state
        .engine
        .team()
        .unlink(&p, &platform, &user_id, via(&p))
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who the caller is: the user, role, scopes and kind of credential.
#[utoipa::path(get, path = "/v1/me", tag = "team", security(("bearer" = [])),
    responses((status = 200, body = Me)))]
pub async fn me(Caller(p): Caller) -> Json<Me> {
    Json(p.me())
}

/// Every user, with their role and linked chat identities.
#[utoipa::path(get, path = "/v1/users", tag = "team", security(("bearer" = ["admin"])),
    responses((status = 200, body = ListUsersResponse)))]
pub async fn list_users(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<ListUsersResponse>, ApiError> {
    let users = state.engine.team().list_users(&p).await?;
    Ok(Json(ListUsersResponse { users }))
}

/// Adds a user.
#[utoipa::path(post, path = "/v1/users", tag = "team", request_body = CreateUserRequest,
    security(("bearer" = ["admin"])),
    responses((status = 201, body = User),
              (status = 409, description = "`conflict`: a user of that name exists", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: the name or password is not acceptable", body = ErrorBody)))]
pub async fn create_user(
    State(state): State<AppState>,
    Caller(p): Caller,
    extract::Json(req): extract::Json<CreateUserRequest>,
) -> Result<(StatusCode, Json<User>), ApiError> {
    let user = state.engine.team().create_user(&p, req, via(&p)).await?;
    Ok((StatusCode::CREATED, Json(user)))
}

/// One user.
#[utoipa::path(get, path = "/v1/users/{name}", tag = "team", params(("name" = String, Path)),
    security(("bearer" = ["admin"])),
    responses((status = 200, body = User), (status = 404, description = "`not_found`", body = ErrorBody)))]
pub async fn show_user(
    State(state): State<AppState>,
    Caller(p): Caller,
    switchboard_http::Path(name): switchboard_http::Path<String>,
) -> Result<Json<User>, ApiError> {
    Ok(Json(state.engine.team().get_user(&p, &name).await?))
}

/// Changes a user's role or password (a new password ends their console sign-ins).
#[utoipa::path(patch, path = "/v1/users/{name}", tag = "team", params(("name" = String, Path)),
    request_body = UpdateUserRequest, security(("bearer" = ["admin"])),
    responses((status = 200, body = User), (status = 404, description = "`not_found`", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: the password is too short", body = ErrorBody)))]
pub async fn update_user(
    State(state): State<AppState>,
    Caller(p): Caller,
    switchboard_http::Path(name): switchboard_http::Path<String>,
    extract::Json(req): extract::Json<UpdateUserRequest>,
) -> Result<Json<User>, ApiError> {
    Ok(Json(
        state
            .engine
            .team()
            .update_user(&p, &name, req, via(&p))
            .await?,
    ))
}

/// Removes a user with their tokens, links and console sign-ins.
#[utoipa::path(delete, path = "/v1/users/{name}", tag = "team", params(("name" = String, Path)),
    security(("bearer" = ["admin"])),
    responses((status = 204, description = "Removed"), (status = 404, description = "`not_found`", body = ErrorBody)))]
pub async fn delete_user(
    State(state): State<AppState>,
    Caller(p): Caller,
    switchboard_http::Path(name): switchboard_http::Path<String>,
) -> Result<StatusCode, ApiError> {
    state.engine.team().delete_user(&p, &name, via(&p)).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TokensQuery {
    /// Whose tokens (an admin's choice; anyone else sees their own). Absent: an admin sees
    /// everyone's.
    pub user: Option<String>,
}

/// Personal API tokens: the caller's own, or for an admin everyone's (never the secrets).
#[utoipa::path(get, path = "/v1/tokens", tag = "team", params(TokensQuery),
    security(("bearer" = [])),
    responses((status = 200, body = ListTokensResponse)))]
pub async fn list_tokens(
    State(state): State<AppState>,
    Caller(p): Caller,
    extract::Query(q): extract::Query<TokensQuery>,
) -> Result<Json<ListTokensResponse>, ApiError> {
    let tokens = state
        .engine
        .team()
        .list_tokens(&p, q.user.as_deref())
        .await?;
    Ok(Json(ListTokensResponse { tokens }))
}

/// Creates a personal API token; the answer's `token` is shown this once. Its scopes are
/// never more than its user's role allows, nor more than the caller holds.
#[utoipa::path(post, path = "/v1/tokens", tag = "team", request_body = CreateTokenRequest,
    security(("bearer" = [])),
    responses((status = 201, body = CreatedToken),
              (status = 404, description = "`not_found`: no such user", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: no scope, a scope beyond the role, a bad name or expiry", body = ErrorBody)))]
pub async fn create_token(
    State(state): State<AppState>,
    Caller(p): Caller,
    extract::Json(req): extract::Json<CreateTokenRequest>,
) -> Result<(StatusCode, Json<CreatedToken>), ApiError> {
    let t = state.engine.team().create_token(&p, req, via(&p)).await?;
    Ok((StatusCode::CREATED, Json(t)))
}

/// Revokes a token: from now on it is refused by every instance.
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "team", params(("id" = uuid::Uuid, Path)),
    security(("bearer" = [])),
    responses((status = 200, body = TokenInfo),
              (status = 400, description = "`validation_failed`: the id is not a UUID", body = ErrorBody),
              (status = 404, description = "`not_found`: no such token of the caller's", body = ErrorBody)))]
pub async fn revoke_token(
    State(state): State<AppState>,
    Caller(p): Caller,
    switchboard_http::Path(id): switchboard_http::Path<uuid::Uuid>,
) -> Result<Json<TokenInfo>, ApiError> {
    Ok(Json(
        state.engine.team().revoke_token(&p, id, via(&p)).await?,
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// Only this user's actions.
    pub user: Option<String>,
    /// Only this action (`token.create`, `signin.failed`, …).
    pub action: Option<String>,
    /// From this time on (RFC 3339).
    #[param(format = DateTime)]
    pub from: Option<String>,
    /// Before this time (RFC 3339).
    #[param(format = DateTime)]
    pub to: Option<String>,
    /// Entries after this id (the `next` of the previous page).
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// At most this many (1–1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// The audit log, oldest first: sign-ins, tokens, roles, approval decisions, settings
/// changes. Entries are only ever appended.
#[utoipa::path(get, path = "/v1/audit", tag = "team", params(AuditQuery),
    security(("bearer" = ["admin"])),
    responses((status = 200, body = ListAuditResponse),
              (status = 400, description = "`invalid_query`", body = ErrorBody)))]
pub async fn audit(
    State(state): State<AppState>,
    Caller(p): Caller,
    extract::Query(q): extract::Query<AuditQuery>,
) -> Result<Json<ListAuditResponse>, ApiError> {
    if q.after.is_some_and(|a| a < 0) {
        return Err(ApiError::new(
            switchboard_protocol::ErrorCode::InvalidQuery,
            "after is an entry's id: 0 or more",
        ));
    }
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > 1000 {
        return Err(ApiError::new(
            switchboard_protocol::ErrorCode::InvalidQuery,
            "limit must be between 1 and 1000",
        ));
    }
    // An empty user or action is no filter (a time must be one).
    let given = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let time = |name: &str, v: Option<String>| -> Result<Option<String>, ApiError> {
        v.map(|t| {
            chrono::DateTime::parse_from_rfc3339(&t)
                .map(|d| switchboard_engine::time_text(d.with_timezone(&chrono::Utc)))
                .map_err(|_| {
                    ApiError::new(
                        switchboard_protocol::ErrorCode::InvalidQuery,
                        format!("{name} must be an RFC 3339 time such as 2026-12-01T00:00:00Z"),
                    )
                })
        })
        .transpose()
    };
    let filter = AuditFilter {
        actor: given(q.user),
        action: given(q.action),
        from: time("from", q.from)?,
        to: time("to", q.to)?,
        after: q.after,
        limit,
    };
    let (entries, next) = state.engine.team().list_audit(&p, filter).await?;
    Ok(Json(ListAuditResponse { entries, next }))
}
