//! The `/v1` HTTP + SSE API of Switchboard.
//!
//! It owns the axum routes (one file per resource under [`routes`]), bearer-token auth, the
//! one [`ApiError`] type every handler returns, SSE framing of the event log, and the
//! OpenAPI document. The work itself lives in the engine; handlers parse, call, encode.

mod auth;
mod error;
mod extract;
mod openapi;
pub mod routes;
pub mod web;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use switchboard_engine::Engine;

pub use error::ApiError;
pub use openapi::ApiDoc;

/// Settings of the HTTP layer.
#[derive(Clone)]
pub struct ServerConfig {
    /// The bearer token every request but health must carry.
    pub token: String,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Interval of SSE keep-alive comments.
    pub keepalive: Duration,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("token", &"[redacted]")
            .field("max_body_bytes", &self.max_body_bytes)
            .field("keepalive", &self.keepalive)
            .finish()
    }
}

impl ServerConfig {
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            max_body_bytes: 2 * 1024 * 1024,
            keepalive: Duration::from_secs(15),
        }
    }
}

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    pub config: Arc<ServerConfig>,
    pub started: Instant,
}

/// Builds the whole router.
pub fn router(engine: Engine, config: ServerConfig) -> Router {
    let max_body = config.max_body_bytes;
    let state = AppState {
        engine,
        config: Arc::new(config),
        started: Instant::now(),
    };
    let protected = routes::sessions::router()
        .merge(routes::messages::router())
        .merge(routes::events::router())
        .merge(routes::tools::router())
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_token,
        ));
    Router::new()
        .merge(routes::health::router())
        .merge(openapi::router())
        .nest("/v1", protected)
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn(error::request_id))
        .with_state(state)
}
