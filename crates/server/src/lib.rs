//! The `/v1` HTTP + SSE API of Switchboard.
//!
//! It owns the axum routes (one file per resource under [`routes`]), bearer-token auth, the
//! one [`ApiError`] type every handler returns, SSE framing of the event log, and the
//! OpenAPI document. The work itself lives in the engine; handlers parse, call, encode.

mod error;
mod extract;
pub mod oidc;
mod openapi;
pub mod routes;
pub mod signin;
pub mod web;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use switchboard_engine::Engine;

pub use error::ApiError;
pub use openapi::{ApiDoc, common_responses};

/// Settings of the HTTP layer.
#[derive(Clone)]
pub struct ServerConfig {
    /// The bearer token every request but health must carry.
    pub token: String,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Interval of SSE keep-alive comments.
    pub keepalive: Duration,
    /// The document served at `/openapi.json`: [`ApiDoc`] unless the binary mounts more
    /// routes beside these and documents them too.
    pub api_doc: Option<utoipa::openapi::OpenApi>,
    /// What `/v1/chat/completions` does with tool calls that wait for approval.
    pub openai_approvals: routes::openai::DoorApprovals,
    /// Most event streams one token may hold open at once (a client that opens more gets
    /// 429 `too_many_streams`).
    pub max_streams_per_token: usize,
    /// The stream slots to count in, when the binary shares them with other surfaces' long
    /// answers (the relay's event stream): one cap per token over every route. `None`: a
    /// set of this router's own, of `max_streams_per_token`.
    pub streams: Option<Arc<switchboard_http::StreamSlots>>,
    /// What `/v1/settings` reads and changes: the binary's (none: those routes answer 404).
    pub settings: routes::settings::Settings,
}

impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConfig")
            .field("token", &"[redacted]")
            .field("max_body_bytes", &self.max_body_bytes)
            .field("keepalive", &self.keepalive)
            .finish_non_exhaustive()
    }
}

impl ServerConfig {
    pub fn new(token: impl Into<String>) -> Self {
        Self {
            token: token.into(),
            max_body_bytes: 2 * 1024 * 1024,
            keepalive: Duration::from_secs(15),
            api_doc: None,
            openai_approvals: routes::openai::DoorApprovals::default(),
            max_streams_per_token: 1024,
            streams: None,
            settings: None,
        }
    }
}

/// Shared state of every handler.
#[derive(Clone)]
pub struct AppState {
    pub engine: Engine,
    pub config: Arc<ServerConfig>,
    pub started: Instant,
    /// Event streams open per token.
    pub streams: Arc<switchboard_http::StreamSlots>,
    /// The waiting approvals, read once per change for every `/v1/approvals/events` stream.
    pub approvals: routes::approvals::ApprovalsFeed,
    pub settings: routes::settings::Settings,
}

/// The [`switchboard_http::Authenticator`] of personal API tokens: the engine's team.
#[derive(Debug, Clone)]
pub struct TeamAuthenticator(pub switchboard_engine::Team);

impl switchboard_http::Authenticator for TeamAuthenticator {
    fn authenticate<'a>(
        &'a self,
        token: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<switchboard_protocol::people::Principal>, ApiError>,
    > {
        Box::pin(async move {
            self.0
                .authenticate_token(token)
                .await
                .map_err(ApiError::from)
        })
    }

    fn on_behalf_of<'a>(
        &'a self,
        identity: &'a str,
    ) -> futures::future::BoxFuture<
        'a,
        Result<Option<switchboard_protocol::people::Principal>, ApiError>,
    > {
        Box::pin(async move {
            let Some((platform, user_id)) = identity.split_once(':') else {
                return Err(ApiError::new(
                    switchboard_protocol::ErrorCode::InvalidHeader,
                    "X-Switchboard-On-Behalf-Of is platform:user_id",
                ));
            };
            self.0
                .linked_principal(platform, user_id)
                .await
                .map_err(ApiError::from)
        })
    }

    fn still_valid<'a>(
        &'a self,
        p: &'a switchboard_protocol::people::Principal,
    ) -> futures::future::BoxFuture<'a, bool> {
        Box::pin(self.0.still_valid(p))
    }
}

/// The authentication layer's state for a server whose operations `doc` documents (every
/// route mounted beside it included): the server token, the engine's team, and the scope
/// each operation needs. An operation the document does not say the access of is an error.
pub fn auth(
    token: &str,
    engine: &Engine,
    doc: &utoipa::openapi::OpenApi,
) -> Result<switchboard_http::Auth, switchboard_http::ScopeTableError> {
    let json = serde_json::to_value(doc).unwrap_or_default();
    let table = switchboard_http::ScopeTable::from_openapi(&json)?;
    Ok(switchboard_http::Auth::new(
        token,
        Arc::new(table),
        Arc::new(TeamAuthenticator(engine.team().clone())),
    ))
}

/// The listener every Switchboard HTTP surface serves on: accepted connections get
/// `TCP_NODELAY`, so a small write (an SSE frame, a short JSON answer) leaves at once
/// instead of waiting for the client's delayed ACK (up to 40 ms on Linux).
pub fn listener(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    use axum::serve::ListenerExt as _;
    listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
    })
}

/// Builds the whole router.
pub fn router(engine: Engine, mut config: ServerConfig) -> Router {
    let max_body = config.max_body_bytes;
    let doc = config.api_doc.take().unwrap_or_else(|| {
        use utoipa::OpenApi as _;
        ApiDoc::openapi()
    });
    let token = switchboard_http::BearerToken::new(config.token.clone());
    let state = AppState {
        engine,
        streams: config
            .streams
            .clone()
            .unwrap_or_else(|| switchboard_http::StreamSlots::new(config.max_streams_per_token)),
        approvals: routes::approvals::ApprovalsFeed::default(),
        settings: config.settings.clone(),
        config: Arc::new(config),
        started: Instant::now(),
    };
    // Uploads have their own body limit (the per-file limit): mounted after the JSON
    // routes' limit layers, which therefore do not wrap them.
    let files = routes::files::router(state.engine.config().files.max_file_bytes).route_layer(
        axum::middleware::from_fn_with_state(token.clone(), switchboard_http::require_bearer),
    );
    let protected = routes::sessions::router()
        .merge(routes::messages::router())
        .merge(routes::events::router())
        .merge(routes::tools::router())
        .merge(routes::approvals::router())
        .merge(routes::search::router())
        .merge(routes::checkpoints::router())
        .merge(routes::metrics::router())
        .merge(routes::settings::router())
        .merge(routes::people::router())
        .merge(routes::usage::router())
        .route_layer(axum::middleware::from_fn_with_state(
            token,
            switchboard_http::require_bearer,
        ));
    Router::new()
        .merge(routes::health::router())
        .merge(openapi::router(doc))
        .merge(protected)
        .merge(routes::files::share_router())
        .merge(routes::search::session_router())
        // Authenticates itself, answering in OpenAI's error shape.
        .merge(routes::openai::router())
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::from_fn_with_state(
            switchboard_http::BodyLimit(max_body),
            switchboard_http::reject_oversized,
        ))
        .merge(files)
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(axum::middleware::from_fn(error::request_id))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        use axum::serve::Listener as _;
        let raw = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = raw.local_addr().unwrap();
        let mut l = super::listener(raw);
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (io, _) = l.accept().await;
        assert!(io.nodelay().unwrap());
    }
}
