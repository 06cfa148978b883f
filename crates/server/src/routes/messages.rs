//! `/v1/sessions/{id}/messages` and the transcript.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::{Json, Router};
use switchboard_protocol::{
    ErrorBody, ListMessagesResponse, Page, SendMessageRequest, SendMessageResponse,
};

use crate::extract::{self, Query, SessionId};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/sessions/{id}/messages", post(send).get(list))
        .route("/v1/sessions/{id}/transcript.md", get(transcript))
}

/// Sends a message (`type`: `message` starts a run, `steering` reaches the active run,
/// `follow_up` is queued).
#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "runs", params(("id" = uuid::Uuid, Path)),
    request_body = SendMessageRequest, security(("bearer" = [])),
    responses((status = 200, body = SendMessageResponse),
              (status = 400, description = "`invalid_json` or `validation_failed` (the field is named)", body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 409, description = "`session_already_running`, `session_not_running` or `run_mismatch`", body = ErrorBody),
              (status = 413, description = "`attachments_too_large` (the message's files together are over the per-message limit) or `payload_too_large` (the body is over the limit)", body = ErrorBody),
              (status = 422, description = "`sandbox_unsupported`, `unknown_file` (an attachment is not a file of this session), or `unprocessable_entity` (the session's backend is not configured)", body = ErrorBody),
              (status = 503, description = "`unavailable`: shutting down", body = ErrorBody)))]
pub async fn send(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    extract::Json(req): extract::Json<SendMessageRequest>,
) -> Result<Json<SendMessageResponse>, ApiError> {
    Ok(Json(state.engine.send_message(id, req).await?))
}

/// The transcript, oldest first.
#[utoipa::path(get, path = "/v1/sessions/{id}/messages", tag = "runs",
    params(("id" = uuid::Uuid, Path), ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000), ("offset" = Option<u64>, Query, maximum = 4294967295.0)),
    security(("bearer" = [])),
    responses((status = 200, body = ListMessagesResponse), (status = 404, body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    Query(p): Query<Page>,
) -> Result<Json<ListMessagesResponse>, ApiError> {
    let (limit, offset) = extract::page(p)?;
    let (messages, total) = state.engine.messages(id, limit, offset).await?;
    Ok(Json(ListMessagesResponse { messages, total }))
}

/// The transcript as Markdown.
#[utoipa::path(get, path = "/v1/sessions/{id}/transcript.md", tag = "runs", params(("id" = uuid::Uuid, Path)),
    security(("bearer" = [])),
    responses((status = 200, content_type = "text/markdown", body = String), (status = 404, body = ErrorBody)))]
pub async fn transcript(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<impl IntoResponse, ApiError> {
    let md = state.engine.transcript_markdown(id).await?;
    Ok(([(header::CONTENT_TYPE, "text/markdown; charset=utf-8")], md))
}
