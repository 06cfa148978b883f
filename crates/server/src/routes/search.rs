//! `/v1/search`: full-text search over the sessions the caller sees.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use switchboard_protocol::ErrorBody;
use switchboard_protocol::search::{SearchParams, SearchResponse};

use crate::extract::{Caller, Query};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/search", get(search))
}

/// Searches every session the caller sees — the transcript (messages, tool calls, tool
/// results) and file names — best first, each hit with its passage and where it is in the
/// session's log. Words are all required; `"a phrase"` and `prefix*` work; case is ignored.
#[utoipa::path(get, path = "/v1/search", tag = "sessions", params(SearchParams),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = SearchResponse),
              (status = 400, description = "`validation_failed`: `q` longer than 500 characters, a `limit` out of range, or a time that is not RFC 3339", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: no word in `q` (a word is a run of letters and digits), or a `cursor` this server did not give", body = ErrorBody)))]
pub async fn search(
    State(state): State<AppState>,
    Caller(p): Caller,
    Query(q): Query<SearchParams>,
) -> Result<Json<SearchResponse>, ApiError> {
    let visible_to = (!switchboard_engine::team::sees_all(&p)).then_some(p.user.as_str());
    Ok(Json(state.engine.search(&q, visible_to).await?))
}
