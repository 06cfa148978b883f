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
/// `follow_up` is queued). With an `Idempotency-Key` header, a `message` or `follow_up`
/// repeated with the same key within 24 h answers 200 with the first one's `run_id` and
/// starts nothing: the safe way to retry a send whose answer was lost.
#[utoipa::path(post, path = "/v1/sessions/{id}/messages", tag = "runs",
    params(("id" = uuid::Uuid, Path),
           ("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$", description = "1 to 255 visible ASCII characters; a repeat within 24 h answers the first run instead of starting another")),
    request_body = SendMessageRequest, security(("bearer" = ["sessions:write"])),
    responses((status = 200, body = SendMessageResponse),
              (status = 400, description = "`invalid_json`, `validation_failed` (the field is named) or `invalid_header` (a malformed `Idempotency-Key`)", body = ErrorBody),
              (status = 404, body = ErrorBody),
              (status = 409, description = "`session_already_running`, `session_not_running` or `run_mismatch`", body = ErrorBody),
              (status = 413, description = "`attachments_too_large` (the message's files together are over the per-message limit) or `payload_too_large` (the body is over the limit)", body = ErrorBody),
              (status = 422, description = "`sandbox_unsupported`, `unknown_file` (an attachment is not a file of this session), or `unprocessable_entity` (the session's backend is not configured)", body = ErrorBody),
              (status = 503, description = "`unavailable`: shutting down", body = ErrorBody)))]
pub async fn send(
    State(state): State<AppState>,
    crate::extract::Caller(p): crate::extract::Caller,
    SessionId(id): SessionId,
    headers: axum::http::HeaderMap,
    extract::Json(mut req): extract::Json<SendMessageRequest>,
) -> Result<Json<SendMessageResponse>, ApiError> {
    req.requested_by = crate::extract::owner_of(&p).map(str::to_string);
    // Where a message comes from is the word of Switchboard's own surfaces (the server
    // token, or a chat identity it vouches for): nobody else attributes usage elsewhere.
    if !matches!(
        p.credential,
        switchboard_protocol::people::Credential::ServerToken
            | switchboard_protocol::people::Credential::Chat
    ) && !p
        .scopes
        .contains(&switchboard_protocol::people::Scope::Admin)
    {
        req.origin = None;
    }
    let key = match headers.get(IDEMPOTENCY_KEY) {
        Some(v) => Some(v.to_str().map_err(|_| {
            ApiError::new(
                switchboard_protocol::ErrorCode::InvalidHeader,
                "Idempotency-Key must be visible ASCII",
            )
        })?),
        None => None,
    };
    Ok(Json(state.engine.send_message_once(id, req, key).await?))
}

/// The header a client retries a send with (the IETF draft's name).
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// The transcript, oldest first.
#[utoipa::path(get, path = "/v1/sessions/{id}/messages", tag = "runs",
    params(("id" = uuid::Uuid, Path), ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000), ("offset" = Option<u64>, Query, maximum = 4294967295.0)),
    security(("bearer" = ["sessions:read"])),
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
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, content_type = "text/markdown", body = String), (status = 404, body = ErrorBody)))]
pub async fn transcript(
    State(state): State<AppState>,
    SessionId(id): SessionId,
) -> Result<impl IntoResponse, ApiError> {
    let md = state.engine.transcript_markdown(id).await?;
    Ok(([(header::CONTENT_TYPE, "text/markdown; charset=utf-8")], md))
}
