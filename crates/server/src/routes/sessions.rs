//! `/v1/sessions` and `/v1/sessions/{id}`: create, list, show, delete, cancel.

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};
use switchboard_protocol::{
    CancelRequest, CancelResponse, CreateSessionRequest, ErrorBody, ForkSessionQuery,
    ListSessionsQuery, ListSessionsResponse, Page, SessionDetailResponse, SessionSummary,
    UpdateSessionRequest,
};

use crate::extract::{self, Caller, Query, SessionId};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions", post(create).get(list))
        .route("/v1/sessions/{id}", get(show).delete(delete).patch(update))
        .route("/v1/sessions/{id}/cancel", post(cancel))
        .route("/v1/sessions/{id}/fork", post(fork))
}

/// Creates a session, belonging to the caller.
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = CreateSessionRequest,
    security(("bearer" = ["sessions:write"])),
    responses((status = 201, body = SessionSummary), (status = 400, body = ErrorBody), (status = 422, body = ErrorBody)))]
pub async fn create(
    State(state): State<AppState>,
    Caller(p): Caller,
    extract::Json(req): extract::Json<CreateSessionRequest>,
) -> Result<(StatusCode, Json<SessionSummary>), ApiError> {
    let s = state
        .engine
        .create_session_as(extract::owner_of(&p), req)
        .await?;
    Ok((StatusCode::CREATED, Json(s)))
}

/// A new session, belonging to the caller, whose history is this one's up to log position
/// `at` (events, transcript, files), with the same backend, workspace and configuration.
#[utoipa::path(post, path = "/v1/sessions/{id}/fork", tag = "sessions",
    params(("id" = uuid::Uuid, Path),
           ("at" = Option<u64>, Query, maximum = 9007199254740991.0, description = "the last seq the fork keeps (default: the log's end, or just before the run under way)"),
           ("title" = Option<String>, Query, pattern = r"\S", max_length = 200, description = "default: \"Fork of\" the session's title")),
    security(("bearer" = ["sessions:write"])),
    responses((status = 201, body = SessionSummary),
              (status = 400, description = "`validation_failed`: the title is blank or too long", body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 409, description = "`conflict`: `at` is inside a run (the message names the positions before and after it)", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: `at` is past the session's log or in its pruned history, or the session's agent runs over ACP, whose history Switchboard cannot cut", body = ErrorBody)))]
pub async fn fork(
    State(state): State<AppState>,
    Caller(p): Caller,
    SessionId(id): SessionId,
    Query(q): Query<ForkSessionQuery>,
) -> Result<(StatusCode, Json<SessionSummary>), ApiError> {
    let s = state
        .engine
        .fork_session(extract::owner_of(&p), id, q.at, q.title.as_deref())
        .await?;
    Ok((StatusCode::CREATED, Json(s)))
}

/// Lists sessions, newest first; archived ones only with `archived=true`. A member sees
/// their own and those shared with them.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", params(("limit" = Option<u32>, Query, minimum = 1, maximum = 1000), ("offset" = Option<u64>, Query, maximum = 4294967295.0), ("archived" = Option<bool>, Query)),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = ListSessionsResponse), (status = 400, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
    Query(q): Query<ListSessionsQuery>,
) -> Result<Json<ListSessionsResponse>, ApiError> {
    let (limit, offset) = extract::page(Page {
        limit: q.limit,
        offset: q.offset,
    })?;
    let (sessions, total) = state
        .engine
        .list_sessions(
            limit,
            offset,
            q.archived.unwrap_or(false),
            (!switchboard_engine::team::sees_all(&p)).then_some(p.user.as_str()),
        )
        .await?;
    Ok(Json(ListSessionsResponse { sessions, total }))
}

/// Renames, archives (`{"archived": true}`) or unarchives a session, sets the permission
/// mode its next runs start with, or shares it (`shared_with`).
#[utoipa::path(patch, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = uuid::Uuid, Path)),
    request_body = UpdateSessionRequest, security(("bearer" = ["sessions:write"])),
    responses((status = 200, body = SessionSummary), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 403, description = "`forbidden`: only the owner, an operator or an admin shares a session", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: an `auto_approve` entry is not a tool name (blank, or spaces around it), or `shared_with` names no user", body = ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    Caller(p): Caller,
    SessionId(id): SessionId,
    extract::Json(mut req): extract::Json<UpdateSessionRequest>,
) -> Result<Json<SessionSummary>, ApiError> {
    if let Some(users) = req.shared_with.take() {
        state
            .engine
            .team()
            .share_session(&p, id, users, extract::via(&p))
            .await?;
    }
    Ok(Json(state.engine.update_session(id, req).await?))
}

/// Shows a session and its configuration.
#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = uuid::Uuid, Path)),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = SessionDetailResponse), (status = 404, body = ErrorBody)))]
pub async fn show(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<Json<SessionDetailResponse>, ApiError> {
    let (session, config) = state.engine.get_session(id).await?;
    let sandbox = state.engine.sandbox_status(&config);
    let (_, shared_with) = state.engine.session_access(id).await?;
    let usage = Some(state.engine.meter().session_usage(id).await?);
    Ok(Json(SessionDetailResponse {
        session,
        config,
        sandbox,
        shared_with,
        usage,
    }))
}

/// Deletes a session with its events and transcript; an active run is cancelled.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = uuid::Uuid, Path)),
    security(("bearer" = ["sessions:write"])),
    responses((status = 204), (status = 404, body = ErrorBody)))]
pub async fn delete(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<StatusCode, ApiError> {
    state.engine.delete_session(id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Cancels the active run (or a queued follow-up).
#[utoipa::path(post, path = "/v1/sessions/{id}/cancel", tag = "runs", params(("id" = uuid::Uuid, Path)),
    request_body = CancelRequest, security(("bearer" = ["sessions:write"])),
    responses((status = 200, body = CancelResponse), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub async fn cancel(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    extract::Json(req): extract::Json<CancelRequest>,
) -> Result<Json<CancelResponse>, ApiError> {
    state.engine.cancel(id, req.run_id).await?;
    Ok(Json(CancelResponse {
        cancelled: true,
        run_id: req.run_id,
    }))
}
