//! `/v1/sessions/{id}/checkpoints` and `/v1/sessions/{id}/diff`: what runs changed in the
//! workspace, and putting it back.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use switchboard_engine::DiffOutput;
use switchboard_protocol::{
    DiffQuery, DiffStat, ErrorBody, ListCheckpointsResponse, RestoreResponse,
};

use crate::extract::{Query, SessionId};
use crate::{ApiError, AppState};
use switchboard_http::Path;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{id}/checkpoints", get(list))
        .route("/v1/sessions/{id}/diff", get(diff))
        .route(
            "/v1/sessions/{id}/checkpoints/{checkpoint}/restore",
            post(restore),
        )
}

/// The session's workspace checkpoints, oldest first: one before a run when the workspace
/// changed since the last, one after each run that changed files, two around a restore.
#[utoipa::path(get, path = "/v1/sessions/{id}/checkpoints", tag = "checkpoints", params(("id" = uuid::Uuid, Path)),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = ListCheckpointsResponse),
              (status = 400, description = "`validation_failed`: a malformed id", body = ErrorBody),
              (status = 404, description = "`session_not_found`", body = ErrorBody),
              (status = 422, description = "`checkpoints_unavailable`: checkpoints are off, or the workspace cannot be checkpointed", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<Json<ListCheckpointsResponse>, ApiError> {
    Ok(Json(ListCheckpointsResponse {
        checkpoints: state.engine.checkpoints(id).await?,
    }))
}

/// What changed in the workspace: in one run (`run`), between two checkpoints (`from`, and
/// `to` — the latest by default), or with neither in the last run that changed files. A
/// unified diff (binary files named, not dumped; empty when nothing changed), or with
/// `stat=1` the per-file counts.
#[utoipa::path(get, path = "/v1/sessions/{id}/diff", tag = "checkpoints",
    params(("id" = uuid::Uuid, Path), DiffQuery),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, description = "The unified diff (`text/x-diff`), or with `stat=1` the counts (JSON)",
                 content((String = "text/x-diff"), (DiffStat = "application/json"))),
              (status = 400, description = "`invalid_query` (a malformed `run`) or `validation_failed` (a `stat` other than 0, 1, true, false)", body = ErrorBody),
              (status = 404, description = "`session_not_found` or `checkpoint_not_found`", body = ErrorBody),
              (status = 422, description = "`checkpoints_unavailable`, or `unprocessable_entity`: `run` with `from`/`to`, `to` without `from`, a run of another session", body = ErrorBody)))]
pub async fn diff(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    Query(q): Query<DiffQuery>,
) -> Result<Response, ApiError> {
    Ok(match state.engine.diff(id, &q).await? {
        DiffOutput::Text(text) => {
            ([(header::CONTENT_TYPE, "text/x-diff; charset=utf-8")], text).into_response()
        }
        DiffOutput::Stat(stat) => Json(stat).into_response(),
    })
}

/// Puts the workspace back to a checkpoint: the current state is checkpointed first (the
/// answer's `backup`; restore it to undo this), then every recorded file gets its content
/// and mode back and files created since are removed. Ignored and oversized files are left
/// alone. Refused while a run is going on.
#[utoipa::path(post, path = "/v1/sessions/{id}/checkpoints/{checkpoint}/restore", tag = "checkpoints",
    params(("id" = uuid::Uuid, Path), ("checkpoint" = String, Path, pattern = "^[0-9a-f]{40}$")),
    security(("bearer" = ["sessions:write"])),
    responses((status = 200, body = RestoreResponse),
              (status = 400, description = "`validation_failed`: a malformed session id", body = ErrorBody),
              (status = 404, description = "`session_not_found` or `checkpoint_not_found`", body = ErrorBody),
              (status = 409, description = "`session_already_running`: a run is going on", body = ErrorBody),
              (status = 422, description = "`checkpoints_unavailable`", body = ErrorBody)))]
pub async fn restore(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    Path((_, checkpoint)): Path<(String, String)>,
) -> Result<Json<RestoreResponse>, ApiError> {
    Ok(Json(state.engine.restore(id, &checkpoint).await?))
}
