//! Switchboard as an A2A v1.0 agent: the Agent Card at `/.well-known/agent-card.json`
//! (skills: the configured backends; security: the bearer token) and the JSON-RPC binding
//! at `/v1/a2a` — `SendMessage`, `SendStreamingMessage`, `GetTask`, `CancelTask`,
//! `SubscribeToTask` and the push-notification config methods.
//!
//! An A2A task is a Switchboard run ([`task`]); its context is the session (a message
//! without `contextId` starts one, with `metadata.skill` naming the backend). A call that
//! waits for approval is `TASK_STATE_INPUT_REQUIRED`, its status message saying what is
//! asked; the client's next message on the task decides it (`allow`, else a denial with the
//! text as its reason). The reply is the `reply` artifact, shared files are file artifacts
//! (their `url` the API's download). Everything goes through the API with the caller's
//! token, as the ACP and MCP hubs do.
//!
//! The wire format is the one of the official SDKs (proto3 JSON of `lf.a2a.v1`); written by
//! hand because no Rust A2A crate fits this workspace's dependency policy (deny.toml).

mod push;
mod rpc;
mod task;

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use parking_lot::Mutex;
use serde_json::{Value, json};
use switchboard_http::BearerToken;

use task::Tracked;

/// What the A2A surface is told at start-up.
#[derive(Debug, Clone, Default)]
pub struct A2aOptions {
    /// The backends offered as skills (`builtin` and each `[agents.NAME]`).
    pub skills: Vec<String>,
    /// Webhooks on this machine or a private network may receive push notifications.
    pub private_webhooks: bool,
}

#[derive(Clone)]
pub(crate) struct A2a {
    api_url: Arc<str>,
    opts: Arc<A2aOptions>,
    tasks: Arc<Mutex<HashMap<String, Arc<Tracked>>>>,
    http: reqwest::Client,
    /// Callers' tokens as keys (whose push configs are whose).
    keys: Arc<switchboard_http::CallerKeys>,
}

/// The OpenAPI document of the A2A routes (merged into the server's `/openapi.json`).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(card, jsonrpc),
    components(schemas(switchboard_protocol::ErrorBody))
)]
pub struct A2aDoc;

/// `/.well-known/agent-card.json` and `/v1/a2a`, behind `token`; the tasks reach the API at
/// `api_url` with each caller's token.
pub fn router(api_url: impl Into<String>, token: impl Into<String>, opts: A2aOptions) -> Router {
    let state = A2a {
        api_url: api_url.into().into(),
        opts: Arc::new(opts),
        tasks: Arc::default(),
        http: push::client(),
        keys: Arc::default(),
    };
    Router::new()
        .route("/.well-known/agent-card.json", get(card))
        .route("/v1/a2a", post(jsonrpc))
        .route_layer(axum::middleware::from_fn_with_state(
            BearerToken::new(token.into()),
            switchboard_http::require_bearer,
        ))
        .with_state(state)
}

/// The Agent Card: Switchboard's backends as skills, JSON-RPC at `/v1/a2a`, the bearer
/// token as its security (the card needs it too, as every route but health does).
#[utoipa::path(get, path = "/.well-known/agent-card.json", tag = "hub", security(("bearer" = ["sessions:read"])),
    responses((status = 200, description = "The A2A Agent Card (v1.0)", body = serde_json::Value)))]
async fn card(State(a2a): State<A2a>, headers: HeaderMap) -> Response {
    let base = public_base(&headers, &a2a.api_url);
    let skills: Vec<Value> = a2a
        .opts
        .skills
        .iter()
        .map(|s| {
            let what = if s == "builtin" {
                "Switchboard's built-in coding agent (a model with workspace tools)".to_owned()
            } else {
                format!("The `{s}` agent, over the Agent Client Protocol")
            };
            json!({"id": s, "name": s, "description": what, "tags": ["coding", "agent"]})
        })
        .collect();
    axum::Json(json!({
        "name": "Switchboard",
        "description": "Coding agents in sessions: each task is a run of a session (its context), tool calls wait for approval (input-required). Pick the agent with `metadata.skill`.",
        "version": env!("CARGO_PKG_VERSION"),
        "supportedInterfaces": [{"url": format!("{base}/v1/a2a"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": true, "pushNotifications": true},
        "securitySchemes": {"bearer": {"httpAuthSecurityScheme": {"scheme": "Bearer"}}},
        "securityRequirements": [{"schemes": {"bearer": {"list": []}}}],
        "defaultInputModes": ["text/plain"],
        "defaultOutputModes": ["text/plain"],
        "skills": skills,
    }))
    .into_response()
}

/// Where clients reach this server: the request's `Host` (what the client used), else
/// the API's own address.
fn public_base(headers: &HeaderMap, api_url: &str) -> String {
    let proto = headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("http");
    match headers
        .get(axum::http::header::HOST)
        .and_then(|v| v.to_str().ok())
    {
        Some(host) => format!("{proto}://{host}"),
        None => api_url.trim_end_matches('/').to_owned(),
    }
}

/// The JSON-RPC binding of A2A v1.0: one request a POST, answered with JSON (`200`, the
/// result or a JSON-RPC error) or, for `SendStreamingMessage` and `SubscribeToTask`, an
/// event stream of JSON-RPC responses. See docs/a2a.md.
#[utoipa::path(post, path = "/v1/a2a", tag = "hub", security(("bearer" = ["sessions:write"])),
    params(("A2A-Version" = Option<String>, Header, description = "`1.0`")),
    request_body(content = Object, content_type = "application/json", description = "A JSON-RPC 2.0 request"),
    responses(
        (status = 200, description = "The JSON-RPC answer (a result or an error), or an event stream (`text/event-stream`) of them"),
        (status = 400, description = "`invalid_json` or `invalid_request`: the body is not a JSON object", body = switchboard_protocol::ErrorBody),
        (status = 403, description = "`forbidden`: not a bearer token", body = switchboard_protocol::ErrorBody)))]
async fn jsonrpc(
    State(a2a): State<A2a>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
    body: bytes::Bytes,
) -> Response {
    let token = match crate::bearer_token("A2A", &extensions, &headers) {
        Ok(t) => t.unwrap_or_default(),
        Err(e) => return e.into_response(),
    };
    let base = public_base(&headers, &a2a.api_url);
    rpc::dispatch(a2a, token, base, &headers, &body).await
}
