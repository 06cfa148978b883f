//! `GET /v1/health` — the one route without auth.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use switchboard_protocol::HealthResponse;

use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/health", get(health))
}

/// Liveness: answers as soon as the server accepts connections.
#[utoipa::path(get, path = "/v1/health", tag = "system",
    responses((status = 200, description = "Server is up", body = HealthResponse)))]
pub async fn health(State(state): State<AppState>) -> Json<HealthResponse> {
    Json(HealthResponse {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_seconds: state.started.elapsed().as_secs(),
    })
}
