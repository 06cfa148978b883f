//! `/v1/gateway/*`: status, sessions, bindings, notifications, and inbound webhooks.

use axum::body::Bytes;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use switchboard_protocol::{ErrorBody, ErrorCode};

use std::sync::{Arc, RwLock};

use crate::channel::{ChatKind, ChatRef, InboundSink};
use crate::dispatcher::Gateway;

/// The gateway the routes serve: swapped when this instance takes over or hands over the
/// gateway lease (active ↔ standby).
#[derive(Clone)]
pub struct GatewaySlot(Arc<RwLock<Gateway>>);

impl GatewaySlot {
    pub fn new(gw: Gateway) -> Self {
        Self(Arc::new(RwLock::new(gw)))
    }

    pub fn get(&self) -> Gateway {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `gw` in place and returns the one it replaced.
    pub fn replace(&self, gw: Gateway) -> Gateway {
        std::mem::replace(&mut *self.0.write().unwrap_or_else(|p| p.into_inner()), gw)
    }
}

impl From<Gateway> for GatewaySlot {
    fn from(gw: Gateway) -> Self {
        Self::new(gw)
    }
}

#[derive(Clone)]
struct ApiState {
    slot: GatewaySlot,
    token: String,
}

impl ApiState {
    fn gw(&self) -> Gateway {
        self.slot.get()
    }
}

fn error(code: ErrorCode, message: impl Into<String>) -> Response {
    let body = ErrorBody {
        error: message.into(),
        code: code.as_str().to_string(),
        request_id: uuid::Uuid::now_v7().to_string(),
    };
    let status =
        StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(body)).into_response()
}

async fn require_token(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_string())
        });
    match given {
        None => error(
            ErrorCode::Unauthorized,
            "missing Authorization: Bearer <token> header",
        ),
        Some(t) if !bool::from(t.as_bytes().ct_eq(state.token.as_bytes())) => {
            error(ErrorCode::InvalidToken, "invalid token")
        }
        Some(_) => next.run(req).await,
    }
}

/// The gateway's routes. All but the inbound webhook need `token`; the webhook is
/// authenticated by its HMAC signature.
pub fn router(gw: impl Into<GatewaySlot>, token: impl Into<String>) -> Router {
    let state = ApiState {
        slot: gw.into(),
        token: token.into(),
    };
    let protected = Router::new()
        .route("/v1/gateway/status", get(status))
        .route("/v1/gateway/sessions", get(sessions))
        .route("/v1/gateway/bindings/{routing_key}", delete(unbind))
        .route("/v1/gateway/send", post(send))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ));
    Router::new()
        .merge(protected)
        .route("/v1/gateway/webhook/{name}", post(webhook))
        .route("/v1/gateway/channels/{name}/webhook", post(channel_push))
        .route("/v1/gateway/slack/events", post(slack_events))
        .with_state(state)
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct ChannelStatus {
    pub name: String,
    pub status: String,
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct GatewayStatus {
    /// `active` (this instance runs the channels) or `standby` (another instance holds the
    /// gateway lease; this one only stores what reaches it over HTTP).
    #[serde(default)]
    pub role: String,
    pub channels: Vec<ChannelStatus>,
    pub sessions: usize,
    pub active_runs: usize,
    pub queued_messages: usize,
    pub pending_approvals: usize,
}

async fn status(State(s): State<ApiState>) -> Response {
    let gw = s.gw();
    let store = gw.store();
    let result = async {
        let routes = store.routes().await?;
        let runs = store.runs().await?;
        let prompts = store.prompts().await?;
        let mut queued = 0;
        for key in store.queued_routes().await? {
            queued += store.queued(&key).await?.len();
        }
        Ok::<_, crate::store::StoreError>((routes.len(), runs.len(), prompts.len(), queued))
    }
    .await;
    match result {
        Ok((sessions, active_runs, pending_approvals, queued_messages)) => {
            let mut channels: Vec<ChannelStatus> = gw
                .channels()
                .iter()
                .map(|c| ChannelStatus {
                    name: c.name().to_string(),
                    status: if gw.is_standby() {
                        "standby".to_string()
                    } else {
                        c.status()
                    },
                })
                .collect();
            channels.sort_by(|a, b| a.name.cmp(&b.name));
            Json(GatewayStatus {
                role: if gw.is_standby() { "standby" } else { "active" }.to_string(),
                channels,
                sessions,
                active_runs,
                queued_messages,
                pending_approvals,
            })
            .into_response()
        }
        Err(e) => {
            tracing::error!(error = %e, "gateway status");
            error(ErrorCode::Internal, "internal error")
        }
    }
}

#[derive(Debug, Serialize, Deserialize, PartialEq)]
pub struct GatewaySession {
    pub routing_key: String,
    pub session_id: uuid::Uuid,
    pub channel: String,
    pub chat: ChatRef,
    pub bound: bool,
}

async fn sessions(State(s): State<ApiState>) -> Response {
    match s.gw().store().routes().await {
        Ok(routes) => Json(serde_json::json!({
            "sessions": routes.into_iter().map(|r| GatewaySession {
                routing_key: r.routing_key,
                session_id: r.session_id,
                channel: r.channel,
                chat: r.chat,
                bound: r.bound,
            }).collect::<Vec<_>>()
        }))
        .into_response(),
        Err(e) => {
            tracing::error!(error = %e, "gateway sessions");
            error(ErrorCode::Internal, "internal error")
        }
    }
}

async fn unbind(State(s): State<ApiState>, Path(key): Path<String>) -> Response {
    match s.gw().store().delete_route(&key).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => error(
            ErrorCode::NotFound,
            format!("no session is bound to routing key {key:?}"),
        ),
        Err(e) => {
            tracing::error!(error = %e, "unbind");
            error(ErrorCode::Internal, "internal error")
        }
    }
}

/// `POST /v1/gateway/send`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SendRequest {
    pub channel: String,
    /// The chat id on that channel.
    pub target: String,
    pub text: String,
    /// Attached once, as high-priority caller context, to the next message from that chat
    /// (within the context TTL).
    #[serde(default)]
    pub context: Option<serde_json::Value>,
    /// For a thread chat: the thread id.
    #[serde(default)]
    pub thread: Option<String>,
}

/// Longest field of a stored notification context.
const CONTEXT_FIELD_MAX: usize = 4000;

fn truncate_context(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::String(s) => {
            serde_json::Value::String(crate::text::truncate(&s, CONTEXT_FIELD_MAX))
        }
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, truncate_context(v)))
                .collect(),
        ),
        other => other,
    }
}

async fn send(State(s): State<ApiState>, body: Bytes) -> Response {
    let req: SendRequest = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(ErrorCode::InvalidJson, format!("invalid request body: {e}")),
    };
    if req.text.trim().is_empty() {
        return error(
            ErrorCode::ValidationFailed,
            "invalid text: must not be empty",
        );
    }
    let Some(ch) = s.gw().channel(&req.channel) else {
        let mut names: Vec<String> = s
            .gw()
            .channels()
            .iter()
            .map(|c| c.name().to_string())
            .collect();
        names.sort();
        return error(
            ErrorCode::UnprocessableEntity,
            format!(
                "unknown channel {:?}; configured: [{}]",
                req.channel,
                names.join(", ")
            ),
        );
    };
    let chat = ChatRef {
        id: req.target.clone(),
        kind: if req.thread.is_some() {
            ChatKind::Thread
        } else {
            ChatKind::Direct
        },
        thread: req.thread.clone(),
    };
    let text = crate::text::truncate(&req.text, ch.max_chars());
    match ch.send(&chat, &text, &[]).await {
        Ok(message_id) => {
            if let Some(ctx) = req.context {
                let ttl = s.gw().config().context_ttl;
                if let Err(e) = s
                    .gw()
                    .store()
                    .put_context(&req.channel, &req.target, &truncate_context(ctx), ttl)
                    .await
                {
                    tracing::error!(error = %e, "storing a notification context");
                    return error(ErrorCode::Internal, "internal error");
                }
            }
            Json(serde_json::json!({"message_id": message_id})).into_response()
        }
        Err(e) => error(ErrorCode::Unavailable, e.to_string()),
    }
}

/// Inbound signed webhook (`webhook:<name>`): 401 for a missing or wrong signature or a
/// stale timestamp, 400 for a malformed body, 200 once stored.
async fn webhook(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let gw = s.gw();
    let cfg = gw.config();
    let Some(secret) = cfg.webhook_secrets.get(&name) else {
        return error(
            ErrorCode::NotFound,
            format!("no webhook channel named {name:?}"),
        );
    };
    let now = chrono::Utc::now().timestamp();
    if let Err(e) = crate::webhook::verify(&secret.0, &headers, &body, now, cfg.webhook_tolerance) {
        tracing::warn!(webhook = %name, error = %e, "webhook refused");
        return error(ErrorCode::Unauthorized, e.to_string());
    }
    let inbound = match crate::webhook::parse_inbound(&format!("webhook:{name}"), &body) {
        Ok(i) => i,
        Err(e) => return error(ErrorCode::ValidationFailed, e),
    };
    match s.gw().accept(inbound).await {
        Ok(()) => Json(serde_json::json!({"ok": true})).into_response(),
        Err(e) => {
            tracing::error!(webhook = %name, error = %e, "storing an inbound webhook");
            error(ErrorCode::Unavailable, "could not store the message; retry")
        }
    }
}

/// Updates a platform pushes over HTTP (Telegram's webhook mode), checked by the channel.
async fn channel_push(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    use crate::channel::InboundHttpError;
    let Some(ch) = s.gw().channel(&name) else {
        return error(ErrorCode::NotFound, format!("no channel named {name:?}"));
    };
    if let Some(answer) = ch.http_challenge(&headers, &body) {
        return ([(axum::http::header::CONTENT_TYPE, "text/plain")], answer).into_response();
    }
    let taken = || match ch.http_answer(&headers, &body) {
        Some(answer) => answer.into_response(),
        None => Json(serde_json::json!({"ok": true})).into_response(),
    };
    match ch.inbound_http(&headers, &body).await {
        Ok(None) => taken(),
        Ok(Some(item)) => match s.gw().accept(item).await {
            Ok(()) => taken(),
            Err(e) => {
                tracing::error!(channel = %name, error = %e, "storing a pushed update");
                error(ErrorCode::Unavailable, "could not store the update; retry")
            }
        },
        Err(InboundHttpError::NotSupported) => error(
            ErrorCode::NotFound,
            format!("channel {name:?} does not receive updates over HTTP"),
        ),
        Err(InboundHttpError::Unauthorized) => {
            tracing::warn!(channel = %name, "pushed update refused: wrong secret token");
            error(ErrorCode::Unauthorized, "missing or wrong secret token")
        }
        Err(InboundHttpError::Malformed(m)) => error(ErrorCode::ValidationFailed, m),
    }
}

/// `POST /v1/gateway/slack/events`: the Slack Events API's usual path, for the channel
/// named `slack`.
async fn slack_events(state: State<ApiState>, headers: HeaderMap, body: Bytes) -> Response {
    channel_push(state, Path("slack".to_string()), headers, body).await
}
