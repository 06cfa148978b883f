//! `/v1/search`: full-text search over the sessions the caller sees.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use switchboard_protocol::ErrorBody;
use switchboard_protocol::search::{SearchParams, SearchResponse};

use crate::extract::{Caller, Query, SessionCaller};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/search", get(search))
}

/// `GET /v1/sessions/{id}/search`. It authenticates itself ([`SessionCaller`]): the
/// session's own token is accepted besides the server's and people's.
pub fn session_router() -> Router<AppState> {
    Router::new().route("/v1/sessions/{id}/search", get(session_search))
}

/// Searches every session the caller sees — the transcript (messages, tool calls, tool
/// results) and file names — best first, each hit with its passage and where it is in the
/// session's log. Words are all required; `"a phrase"` and `prefix*` work; case is ignored.
#[utoipa::path(get, path = "/v1/search", tag = "sessions", params(SearchParams),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = SearchResponse),
              (status = 400, description = "`validation_failed`: `q` longer than 500 characters, a `limit` out of range, a time that is not RFC 3339, or `sessions` not 1–100 session ids", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: no word in `q` (a word is a run of letters and digits), or a `cursor` this server did not give", body = ErrorBody)))]
pub async fn search(
    State(state): State<AppState>,
    Caller(p): Caller,
    Query(q): Query<SearchParams>,
) -> Result<Json<SearchResponse>, ApiError> {
    let visible_to = (!switchboard_engine::team::sees_all(&p)).then_some(p.user.as_str());
    Ok(Json(state.engine.search(&q, visible_to).await?))
}

/// The search a session's agent makes (an ACP agent's `search_sessions`, through
/// Switchboard's MCP server with the session's own token), for the run under way: what the
/// person who started that run sees (with people on the server; a run no person started
/// searches its own session alone). A person (or the server token) calling it searches as
/// themselves, as with `GET /v1/search`.
#[utoipa::path(get, path = "/v1/sessions/{id}/search", tag = "sessions",
    params(("id" = uuid::Uuid, Path), SearchParams),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = SearchResponse),
              (status = 400, description = "`validation_failed`: `q` longer than 500 characters, a `limit` out of range, a time that is not RFC 3339, or `sessions` not 1–100 session ids", body = ErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`: neither a token of this server nor this session's", body = ErrorBody),
              (status = 404, description = "`session_not_found`", body = ErrorBody),
              (status = 409, description = "`session_not_running`: with the session's token, no run is under way to search for", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: no word in `q` (a word is a run of letters and digits), or a `cursor` this server did not give", body = ErrorBody)))]
pub async fn session_search(
    State(state): State<AppState>,
    extensions: axum::http::Extensions,
    SessionCaller(id): SessionCaller,
    Query(q): Query<SearchParams>,
) -> Result<Json<SearchResponse>, ApiError> {
    use switchboard_protocol::people::Principal;
    let found = match extensions.get::<Principal>() {
        Some(p) => {
            // Whoever sees every session skips the check of `SessionCaller`: the session
            // must still exist.
            state.engine.session_access(id).await?;
            let visible_to = (!switchboard_engine::team::sees_all(p)).then_some(p.user.as_str());
            state.engine.search(&q, visible_to).await?
        }
        // The session's own token: its owner's view.
        None => state.engine.search_as_session(id, &q).await?,
    };
    Ok(Json(found))
}
