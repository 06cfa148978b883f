//! `/v1/sessions/{id}/tools/*`: tool calls waiting for a human decision.

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use switchboard_protocol::{
    ErrorBody, PendingToolsResponse, ToolDecisionsRequest, ToolDecisionsResponse,
};

use crate::extract::{self, SessionId};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{id}/tools/pending", get(pending))
        .route("/v1/sessions/{id}/tools/decisions", post(decide))
}

/// The tool calls awaiting a decision (`run_id: null` and no calls when nothing waits).
#[utoipa::path(get, path = "/v1/sessions/{id}/tools/pending", tag = "tools",
    params(("id" = uuid::Uuid, Path)), security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = PendingToolsResponse), (status = 404, body = ErrorBody)))]
pub async fn pending(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<Json<PendingToolsResponse>, ApiError> {
    Ok(Json(state.engine.pending_tools(id).await?))
}

/// Decides pending tool calls: `accept`, `reject` (with an optional reason in `content`) or
/// `custom_result` (`content` is handed to the model as the tool's result). Calls not named
/// stay pending; the run goes on once every call is decided.
#[utoipa::path(post, path = "/v1/sessions/{id}/tools/decisions", tag = "tools",
    params(("id" = uuid::Uuid, Path)), request_body = ToolDecisionsRequest,
    security(("bearer" = ["approvals:decide"])),
    responses((status = 200, body = ToolDecisionsResponse),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 403, description = "`forbidden`: an approval rule gives the call to others, or needs a second person (the message names which)", body = ErrorBody),
              (status = 409, description = "`run_mismatch` (another run waits) or `no_pending_approval`", body = ErrorBody)))]
pub async fn decide(
    State(state): State<AppState>,
    extract::Caller(p): extract::Caller,
    SessionId(id): SessionId,
    extract::Json(req): extract::Json<ToolDecisionsRequest>,
) -> Result<Json<ToolDecisionsResponse>, ApiError> {
    Ok(Json(
        state
            .engine
            .decide_tools_as(&p, id, req, extract::via(&p))
            .await?,
    ))
}
