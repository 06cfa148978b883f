//! Switchboard's sessions as an MCP server, for MCP clients (desktop assistants, IDEs,
//! other agents) that drive agents as tools: `/v1/mcp` over streamable HTTP ([`router`])
//! and `switchboard mcp --hub` over stdio ([`serve_stdio`]).
//!
//! The tools — `list_sessions`, `start_session`, `send_message` (waits for the reply, with
//! progress notifications while it streams), `read_transcript`, `list_approvals`,
//! `decide_approval` — are calls of the `/v1` API with the caller's token, so a personal
//! token reaches what its person and scopes may, never more; the server's answer to a
//! refused call is the tool's error (`isError`, `{"code", "message"}`).
//!
//! The transport is rmcp's streamable HTTP server (the MCP versions current clients speak:
//! the 2025 ones with a session per client, and the stateless 2026-07-28 one); in front of
//! it this module checks what rmcp would answer in its own words (the bearer, `Accept`,
//! `Content-Type`), so every refusal is the API's error shape.

mod tools;

use std::sync::Arc;

use axum::Router;
use axum::response::{IntoResponse, Response};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::model::{Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{RoleServer, ServerHandler, ServiceExt, tool_handler};
use switchboard_client::Client as Api;
use switchboard_http::{ApiError, BearerToken};

use crate::HubError;
use tools::ToolError;

/// The MCP service: the session tools over the API.
#[derive(Clone)]
pub(crate) struct SessionsMcp {
    reach: Reach,
    tool_router: ToolRouter<Self>,
}

/// How the tools reach the API.
#[derive(Clone)]
enum Reach {
    /// `switchboard mcp --hub`: the client of the command's settings.
    Fixed(Api),
    /// `/v1/mcp`: the server itself, with each request's own bearer token.
    PerRequest { api_url: Arc<str> },
}

impl SessionsMcp {
    fn new(reach: Reach) -> Self {
        Self {
            reach,
            tool_router: Self::sessions_router(),
        }
    }

    /// The API client of this call: the caller's token on `/v1/mcp`.
    fn api(&self, ctx: &RequestContext<RoleServer>) -> Result<Api, ToolError> {
        match &self.reach {
            Reach::Fixed(api) => Ok(api.clone()),
            Reach::PerRequest { api_url } => {
                let parts = ctx
                    .extensions
                    .get::<axum::http::request::Parts>()
                    .ok_or_else(|| {
                        ToolError::new("unauthorized", "no HTTP request behind this call")
                    })?;
                let token = switchboard_http::bearer_value(&parts.headers)
                    .map_err(|_| ToolError::new("unauthorized", "MCP takes a bearer token"))?;
                Api::new(api_url.to_string(), Some(token.to_string()))
                    .map_err(|e| ToolError::new("internal", e.to_string()))
            }
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SessionsMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("switchboard", env!("CARGO_PKG_VERSION"))
                    .with_title("Switchboard sessions"),
            )
            .with_instructions(
                "Switchboard hosts coding agents in sessions. list_sessions and start_session \
                 find or make one; send_message talks to its agent and waits for the reply; \
                 read_transcript reads what was said; tool calls that wait for a person show \
                 in list_approvals and are decided with decide_approval. Errors come back as \
                 tool results with isError and {\"code\", \"message\"} from Switchboard.",
            )
    }
}

/// Serves the session tools on stdin/stdout with `api` until the client closes them.
pub async fn serve_stdio(api: Api) -> Result<(), HubError> {
    let (stdin, stdout) = rmcp::transport::stdio();
    let running = SessionsMcp::new(Reach::Fixed(api))
        .serve((stdin, stdout))
        .await
        .map_err(|e| HubError::Protocol(format!("MCP session did not initialize: {e}")))?;
    running
        .waiting()
        .await
        .map_err(|e| HubError::Protocol(e.to_string()))?;
    Ok(())
}

/// The OpenAPI document of `/v1/mcp` (merged into the server's `/openapi.json`).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(mcp_post, mcp_get, mcp_delete),
    components(schemas(switchboard_protocol::ErrorBody))
)]
pub struct McpDoc;

/// `/v1/mcp` behind `token` (the console's cookie is turned into it in front of every
/// route); the tools reach the API at `api_url` with each caller's own token.
pub fn router(api_url: impl Into<String>, token: impl Into<String>) -> Router {
    let api_url: Arc<str> = api_url.into().into();
    // The bearer token guards every request, so the Host allowlist rmcp keeps against DNS
    // rebinding of unauthenticated local servers is not needed (a public name must work).
    let config = StreamableHttpServerConfig::default().disable_allowed_hosts();
    // A session outlives the longest `send_message` wait, which may pass in silence (no
    // progress token, a call waiting for approval).
    let mut sessions = LocalSessionManager::default();
    sessions.session_config.keep_alive = Some(SESSION_KEEP_ALIVE);
    let service = StreamableHttpService::new(
        move || {
            Ok(SessionsMcp::new(Reach::PerRequest {
                api_url: api_url.clone(),
            }))
        },
        Arc::new(sessions),
        config,
    );
    let owners = Arc::new(Owners::default());
    Router::new()
        .route(
            "/v1/mcp",
            axum::routing::get_service(service.clone())
                .post_service(service.clone())
                .delete_service(service),
        )
        .route_layer(axum::middleware::from_fn_with_state(owners, check))
        .route_layer(axum::middleware::from_fn_with_state(
            BearerToken::new(token.into()),
            switchboard_http::require_bearer,
        ))
}

/// How long an MCP session lives without a request: past the longest `send_message`.
const SESSION_KEEP_ALIVE: std::time::Duration = std::time::Duration::from_secs(3700);

/// Whose each MCP session is: the keyed hash of the bearer token that initialized it.
/// rmcp takes any `Mcp-Session-Id`; here only its own caller's requests reach it (a leaked
/// id lets nobody else read its stream or end it).
#[derive(Default)]
struct Owners {
    keys: switchboard_http::CallerKeys,
    by_session: parking_lot::Mutex<
        std::collections::HashMap<String, (switchboard_http::CallerKey, std::time::Instant)>,
    >,
}

impl Owners {
    fn remember(&self, session: &str, headers: &axum::http::HeaderMap) {
        let mut map = self.by_session.lock();
        // Sessions end on their own in rmcp; their entries go once past its keep-alive.
        map.retain(|_, (_, at)| at.elapsed() < SESSION_KEEP_ALIVE * 2);
        map.insert(
            session.to_owned(),
            (self.keys.key(headers), std::time::Instant::now()),
        );
    }

    /// Whether the caller may use `session` (a session not known here is rmcp's to refuse).
    fn allows(&self, session: &str, headers: &axum::http::HeaderMap) -> bool {
        let mut map = self.by_session.lock();
        match map.get_mut(session) {
            Some((key, at)) if *key == self.keys.key(headers) => {
                *at = std::time::Instant::now();
                true
            }
            Some(_) => false,
            None => true,
        }
    }
}

/// What the transport needs, refused in the API's words before it reaches rmcp.
async fn check(
    axum::extract::State(owners): axum::extract::State<Arc<Owners>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use axum::http::{Method, header};
    if let Err(e) = crate::bearer_token("MCP", req.extensions(), req.headers()) {
        return e.into_response();
    }
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    // Both named, as the transport's specification asks (rmcp takes no `*/*` either).
    let accepts = |t: &str| accept.contains(t);
    match *req.method() {
        Method::POST => {
            if !(accepts("application/json") && accepts("text/event-stream")) {
                return ApiError::custom(
                    406,
                    "not_acceptable",
                    "POST /v1/mcp answers JSON or an event stream: send `Accept: application/json, text/event-stream`",
                )
                .into_response();
            }
            let json = req
                .headers()
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.to_ascii_lowercase().starts_with("application/json"));
            if !json {
                return ApiError::custom(
                    415,
                    "unsupported_media_type",
                    "POST /v1/mcp takes a JSON-RPC message: `Content-Type: application/json`",
                )
                .into_response();
            }
        }
        Method::GET if !accepts("text/event-stream") => {
            return ApiError::custom(
                406,
                "not_acceptable",
                "GET /v1/mcp is an event stream: send `Accept: text/event-stream`",
            )
            .into_response();
        }
        _ => {}
    }
    let session = req
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(s) = &session
        && !owners.allows(s, req.headers())
    {
        return ApiError::custom(
            404,
            "session_not_found",
            "no MCP session of that id for this token: initialize again",
        )
        .into_response();
    }
    let headers = req.headers().clone();
    let resp = next.run(req).await;
    if session.is_none()
        && let Some(new) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
    {
        owners.remember(new, &headers);
    }
    in_our_words(resp).await
}

/// rmcp refuses in plain text: the same refusal in the API's error shape, with a stable
/// code (and 400, not 415, for a body that is JSON but no JSON-RPC message).
async fn in_our_words(resp: Response) -> Response {
    use axum::http::header;
    let status = resp.status();
    let plain = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_none_or(|v| v.starts_with("text/plain"));
    if !(status.is_client_error() && plain) {
        return resp;
    }
    let body = axum::body::to_bytes(resp.into_body(), 4096)
        .await
        .map(|b| String::from_utf8_lossy(&b).trim().to_owned())
        .unwrap_or_default();
    let (status, code) = match status.as_u16() {
        415 => (400, "invalid_message"),
        400 => (400, "bad_request"),
        404 => (404, "session_not_found"),
        405 => (405, "method_not_allowed"),
        406 => (406, "not_acceptable"),
        413 => (413, "payload_too_large"),
        other => (other, "mcp_refused"),
    };
    let message = if body.is_empty() {
        "the MCP transport refused the request".to_owned()
    } else {
        body
    };
    let mut resp = ApiError::custom(status, code, message).into_response();
    if status == 405 {
        resp.headers_mut().insert(
            header::ALLOW,
            axum::http::HeaderValue::from_static("GET, POST, DELETE"),
        );
    }
    resp
}

/// MCP over streamable HTTP: one JSON-RPC message (a request, notification or response)
/// a POST; a request is answered with JSON or an event stream carrying its progress and
/// then its answer. The session tools of `switchboard mcp --hub` (docs/api.md "MCP").
#[utoipa::path(post, path = "/v1/mcp", tag = "hub", security(("bearer" = ["sessions:read"])),
    params(
        ("Accept" = String, Header, description = "`application/json, text/event-stream`"),
        ("Mcp-Session-Id" = Option<String>, Header, description = "The MCP session (2025 protocol versions): given by the answer to `initialize`"),
        ("MCP-Protocol-Version" = Option<String>, Header, description = "The protocol version agreed at `initialize`")),
    request_body(content = serde_json::Value, content_type = "application/json", description = "A JSON-RPC 2.0 message"),
    responses(
        (status = 200, description = "The answer: JSON, or an event stream (`text/event-stream`) of progress notifications then the answer"),
        (status = 202, description = "A notification or response taken"),
        (status = 400, description = "`invalid_message` (not a JSON-RPC message) or `bad_request` (no `Mcp-Session-Id` for a request that needs one)", body = switchboard_protocol::ErrorBody),
        (status = 404, description = "`session_not_found`: the `Mcp-Session-Id` names no session (it ended): initialize again", body = switchboard_protocol::ErrorBody),
        (status = 406, description = "`not_acceptable`: `Accept` does not take both JSON and an event stream", body = switchboard_protocol::ErrorBody),
        (status = 415, description = "`unsupported_media_type`: not JSON", body = switchboard_protocol::ErrorBody)))]
#[allow(dead_code)] // the route is rmcp's service; this function only carries the document
async fn mcp_post() {}

/// The session's stream of messages from the server (2025 protocol versions).
#[utoipa::path(get, path = "/v1/mcp", tag = "hub", security(("bearer" = ["sessions:read"])),
    params(
        ("Accept" = String, Header, description = "`text/event-stream`"),
        ("Mcp-Session-Id" = String, Header, description = "The MCP session")),
    responses(
        (status = 200, description = "An event stream (`text/event-stream`)"),
        (status = 400, description = "`bad_request`: no `Mcp-Session-Id`", body = switchboard_protocol::ErrorBody),
        (status = 404, description = "`session_not_found`: the `Mcp-Session-Id` names no session", body = switchboard_protocol::ErrorBody),
        (status = 405, description = "`method_not_allowed`: not served for this protocol version", body = switchboard_protocol::ErrorBody),
        (status = 406, description = "`not_acceptable`: `Accept` does not take an event stream", body = switchboard_protocol::ErrorBody)))]
#[allow(dead_code)]
async fn mcp_get() {}

/// Ends an MCP session (2025 protocol versions).
#[utoipa::path(delete, path = "/v1/mcp", tag = "hub", security(("bearer" = ["sessions:read"])),
    params(("Mcp-Session-Id" = String, Header, description = "The MCP session")),
    responses(
        (status = 202, description = "Ended"),
        (status = 400, description = "`bad_request`: no `Mcp-Session-Id`", body = switchboard_protocol::ErrorBody),
        (status = 404, description = "`session_not_found`: the `Mcp-Session-Id` names no session", body = switchboard_protocol::ErrorBody),
        (status = 405, description = "`method_not_allowed`: not served for this protocol version", body = switchboard_protocol::ErrorBody)))]
#[allow(dead_code)]
async fn mcp_delete() {}
