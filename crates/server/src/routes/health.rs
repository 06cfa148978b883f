//! `GET /v1/health` — the one route without auth.

use axum::extract::State;
use axum::routing::get;
use axum::{Json, Router};
use std::time::Duration;

use axum::http::StatusCode;
use switchboard_protocol::{ComponentHealth, HealthResponse};

use crate::AppState;

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/health", get(health))
}

/// Health: 200 with `status: "ok"` while the store takes a write within 2 s; 503 with
/// `status: "degraded"` when it does not — down, or answering reads only (a SQLite file
/// another process holds write-locked, a read-only replica) — so a load balancer stops
/// sending traffic here.
#[utoipa::path(get, path = "/v1/health", security(()), tag = "system",
    responses((status = 200, description = "Server and store are up (the store took a write)", body = HealthResponse),
              (status = 503, description = "The store does not answer, or takes no writes", body = HealthResponse)))]
pub async fn health(State(state): State<AppState>) -> (StatusCode, Json<HealthResponse>) {
    let store = state.engine.store();
    let ok = matches!(
        tokio::time::timeout(Duration::from_secs(2), store.ping()).await,
        Ok(Ok(()))
    );
    let body = HealthResponse {
        status: if ok { "ok" } else { "degraded" }.into(),
        version: env!("CARGO_PKG_VERSION").into(),
        uptime_seconds: state.started.elapsed().as_secs(),
        store: Some(ComponentHealth {
            kind: store.kind().into(),
            status: if ok { "ok" } else { "unavailable" }.into(),
        }),
        // A bus that is down costs latency, not correctness: reported, not a 503.
        bus: state.engine.log().bus().map(|b| ComponentHealth {
            kind: b.kind().into(),
            status: if b.connected() { "ok" } else { "unavailable" }.into(),
        }),
    };
    let code = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(body))
}
