//! `/v1/gateway/*`: status, sessions, bindings, pairing, notifications, and inbound
//! webhooks.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use switchboard_http::{ApiError, BearerToken, Path};
use switchboard_protocol::gateway::{
    Accepted, ChannelStatus, ConnectionState, GatewayAskRequest, GatewayAskResponse,
    GatewayExpireRequest, GatewayExpireResponse, GatewaySendRequest, GatewaySendResponse,
    GatewaySession, GatewaySessionsResponse, GatewayStatus, PairingDecision, PairingRequest,
    PairingRequestsResponse, Peer,
};
use switchboard_protocol::{ErrorBody, ErrorCode};

use std::sync::{Arc, RwLock};

use crate::channel::{ChatKind, ChatRef, InboundSink};
use crate::dispatcher::Gateway;

pub use switchboard_protocol::gateway as wire;

/// The OpenAPI document of the gateway's routes (merged into the server's `/openapi.json`
/// when the gateway runs in `switchboard serve`).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        status,
        sessions,
        parked,
        unbind,
        pairing_list,
        pairing_approve,
        pairing_refuse,
        send,
        ask,
        expire,
        webhook,
        channel_push,
        slack_events
    ),
    components(schemas(
        GatewayStatus,
        switchboard_protocol::gateway::ChannelStatus,
        ConnectionState,
        GatewaySessionsResponse,
        GatewaySession,
        switchboard_protocol::gateway::ParkedBatch,
        switchboard_protocol::gateway::ParkedBatchesResponse,
        Peer,
        ChatRef,
        ChatKind,
        PairingRequestsResponse,
        PairingRequest,
        PairingDecision,
        GatewaySendRequest,
        GatewaySendResponse,
        GatewayAskRequest,
        GatewayAskResponse,
        GatewayExpireRequest,
        GatewayExpireResponse,
        Accepted,
        ErrorBody,
    ))
)]
pub struct GatewayDoc;

/// [`GatewayDoc`] as this gateway serves it: a request's `channel` is one of `channels`, the
/// configured ones (an unknown one is refused, 422), so the document says which.
pub fn document(channels: &[String]) -> utoipa::openapi::OpenApi {
    use utoipa::OpenApi as _;
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::Schema;
    let mut doc = GatewayDoc::openapi();
    if channels.is_empty() {
        return doc;
    }
    if let Some(c) = doc.components.as_mut() {
        for name in ["GatewaySendRequest", "GatewayAskRequest", "PairingDecision"] {
            if let Some(RefOr::T(Schema::Object(o))) = c.schemas.get_mut(name)
                && let Some(RefOr::T(Schema::Object(channel))) = o.properties.get_mut("channel")
            {
                channel.enum_values = Some(channels.iter().map(|n| n.as_str().into()).collect());
            }
        }
    }
    doc
}

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
}

impl ApiState {
    fn gw(&self) -> Gateway {
        self.slot.get()
    }
}

fn error(code: ErrorCode, message: impl Into<String>) -> Response {
    ApiError::new(code, message).into_response()
}

fn internal(what: &str, e: impl std::fmt::Display) -> Response {
    tracing::error!(error = %e, "{what}");
    error(ErrorCode::Internal, "internal error")
}

/// A failed gateway store: 503 `store_unavailable` (with `Retry-After`) when the database
/// failed or did not answer — the caller may retry, nothing was kept — else 500. The
/// database's own words go to the log only.
fn store_failed(what: &str, e: crate::store::StoreError) -> Response {
    if e.is_unavailable() {
        tracing::warn!(error = %e, "{what}: the gateway's database failed");
        error(
            ErrorCode::StoreUnavailable,
            "the gateway's database is not answering; nothing of this request was kept, retry shortly",
        )
    } else {
        internal(what, e)
    }
}

/// The gateway's routes. All but the inbound webhook need `token`; the webhook is
/// authenticated by its HMAC signature.
pub fn router(gw: impl Into<GatewaySlot>, token: impl Into<String>) -> Router {
    let state = ApiState { slot: gw.into() };
    let protected = Router::new()
        .route("/v1/gateway/status", get(status))
        .route("/v1/gateway/sessions", get(sessions))
        .route("/v1/gateway/parked", get(parked))
        .route("/v1/gateway/bindings/{routing_key}", delete(unbind))
        .route("/v1/gateway/pairing", get(pairing_list))
        .route("/v1/gateway/pairing/approve", post(pairing_approve))
        .route("/v1/gateway/pairing/refuse", post(pairing_refuse))
        .route("/v1/gateway/send", post(send))
        .route("/v1/gateway/approvals", post(ask))
        .route("/v1/gateway/approvals/{id}/expire", post(expire))
        .route_layer(axum::middleware::from_fn_with_state(
            BearerToken::new(token),
            switchboard_http::require_bearer,
        ));
    Router::new()
        .merge(protected)
        .route("/v1/gateway/webhook/{name}", post(webhook))
        .route("/v1/gateway/channels/{name}/webhook", post(channel_push))
        .route("/v1/gateway/slack/events", post(slack_events))
        .layer(axum::middleware::from_fn(switchboard_http::request_id))
        .with_state(state)
}

/// The channels (each with its connection state and, when it is not connected, why), the
/// bound sessions and what waits.
#[utoipa::path(get, path = "/v1/gateway/status", tag = "gateway", security(("bearer" = [])),
    responses((status = 200, description = "The channels, the bound sessions and what waits", body = GatewayStatus),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
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
                .map(|c| channel_status(c.name(), gw.is_standby(), c.health()))
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
        Err(e) => store_failed("gateway status", e),
    }
}

/// A channel's line in the status; on standby, the channels run on another instance.
fn channel_status(name: &str, standby: bool, h: crate::health::ChannelHealth) -> ChannelStatus {
    if standby {
        return ChannelStatus {
            name: name.to_string(),
            status: "standby".to_string(),
            state: ConnectionState::Standby,
            since: None,
            reason: None,
            last_error: None,
            last_error_at: None,
        };
    }
    let (last_error, last_error_at) = h
        .last_error
        .map_or((None, None), |(e, at)| (Some(e), Some(at)));
    ChannelStatus {
        name: name.to_string(),
        status: h.status,
        state: h.state,
        since: h.since,
        reason: h.reason,
        last_error,
        last_error_at,
    }
}

/// A time the store wrote ([`switchboard_db::now`]'s format).
fn stored_time(t: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(t)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

/// Chat messages the session refused for good (too many files, too long …), set aside so
/// that the chat's later messages run; each chat was told. The oldest first.
#[utoipa::path(get, path = "/v1/gateway/parked", tag = "gateway", security(("bearer" = [])),
    responses((status = 200, body = switchboard_protocol::gateway::ParkedBatchesResponse),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
async fn parked(State(s): State<ApiState>) -> Response {
    match s.gw().store().parked().await {
        Ok(parked) => {
            Json(switchboard_protocol::gateway::ParkedBatchesResponse { parked }).into_response()
        }
        Err(e) => store_failed("parked batches", e),
    }
}

/// The chats bound to sessions, each with its last activity, the most recent first. A test
/// message to one of them: `POST /v1/gateway/send` with `channel`, `target` = `chat.id`,
/// `thread` = `chat.thread` and `kind` = `chat.kind`.
#[utoipa::path(get, path = "/v1/gateway/sessions", tag = "gateway", security(("bearer" = [])),
    responses((status = 200, body = GatewaySessionsResponse),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
async fn sessions(State(s): State<ApiState>) -> Response {
    let gw = s.gw();
    let store = gw.store();
    let read = async {
        Ok::<_, crate::store::StoreError>((store.routes().await?, store.chat_activity().await?))
    };
    match read.await {
        Ok((routes, activity)) => {
            let mut sessions: Vec<GatewaySession> = routes
                .into_iter()
                .map(|r| GatewaySession {
                    last_activity: activity
                        .get(&crate::store::chat_key(&r.channel, &r.chat))
                        .and_then(|t| stored_time(t)),
                    routing_key: r.routing_key,
                    session_id: r.session_id,
                    channel: r.channel,
                    chat: r.chat,
                    bound: r.bound,
                    peer: Some(r.requester),
                })
                .collect();
            // Most recent first; chats without a recorded activity last (in the store's
            // order: the route updated last first).
            sessions.sort_by_key(|s| std::cmp::Reverse(s.last_activity));
            Json(GatewaySessionsResponse { sessions }).into_response()
        }
        Err(e) => store_failed("gateway sessions", e),
    }
}

/// Unbinds the chat of a routing key from its session (the next message starts a new one).
#[utoipa::path(delete, path = "/v1/gateway/bindings/{routing_key}", tag = "gateway",
    params(("routing_key" = String, Path)), security(("bearer" = [])),
    responses((status = 204, description = "Unbound"),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 404, description = "`not_found`: no session is bound to that key", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody)))]
async fn unbind(State(s): State<ApiState>, Path(key): Path<String>) -> Response {
    match s.gw().store().delete_route(&key).await {
        Ok(true) => StatusCode::NO_CONTENT.into_response(),
        Ok(false) => error(
            ErrorCode::NotFound,
            format!("no session is bound to routing key {key:?}"),
        ),
        Err(e) => store_failed("unbind", e),
    }
}

/// A stored pairing request on the wire.
fn pairing_wire(p: crate::store::Pairing) -> Result<PairingRequest, crate::store::StoreError> {
    let expires_at = stored_time(&p.expires_at).ok_or_else(|| {
        crate::store::StoreError::Corrupt(format!(
            "pairing {}: expires_at {:?} is not a time",
            p.code, p.expires_at
        ))
    })?;
    Ok(PairingRequest {
        channel: p.channel,
        code: p.code,
        peer: p.peer,
        chat: p.chat,
        expires_at,
    })
}

/// The pending pairing requests: people unknown to the bot who wrote to it in a direct
/// message and were given a code; the oldest first, expired ones left out.
#[utoipa::path(get, path = "/v1/gateway/pairing", tag = "gateway", security(("bearer" = [])),
    responses((status = 200, description = "The pending requests", body = PairingRequestsResponse),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
async fn pairing_list(State(s): State<ApiState>) -> Response {
    let listed = crate::pairing::pending(s.gw().store())
        .await
        .and_then(|ps| {
            ps.into_iter()
                .map(pairing_wire)
                .collect::<Result<Vec<_>, _>>()
        });
    match listed {
        Ok(requests) => Json(PairingRequestsResponse { requests }).into_response(),
        Err(e) => store_failed("listing pairing requests", e),
    }
}

/// What is wrong with the request's fields, if anything: neither may be blank.
fn invalid_decision(req: &PairingDecision) -> Option<Response> {
    if req.channel.trim().is_empty() {
        return Some(error(
            ErrorCode::ValidationFailed,
            "invalid channel: must not be blank",
        ));
    }
    if req.code.trim().is_empty() {
        return Some(error(
            ErrorCode::ValidationFailed,
            "invalid code: must not be blank",
        ));
    }
    None
}

/// The answer to a pairing decision (`what` names it in the log): the request decided, 404
/// when there was no such pending request, or the store's failure.
fn pairing_decided(
    what: &str,
    req: &PairingDecision,
    decided: Result<Option<crate::store::Pairing>, crate::store::StoreError>,
) -> Response {
    match decided.and_then(|p| p.map(pairing_wire).transpose()) {
        Ok(Some(p)) => Json(p).into_response(),
        Ok(None) => no_pairing(req),
        Err(e) => store_failed(what, e),
    }
}

fn no_pairing(req: &PairingDecision) -> Response {
    error(
        ErrorCode::PairingNotFound,
        format!(
            "no pending pairing request with code {:?} on {:?} (a wrong code, one decided already, or expired)",
            req.code.trim(),
            req.channel
        ),
    )
}

/// Approves a pairing request: its chat is allowed from now on, so the person's next message
/// reaches the agent. The same as `switchboard pairing approve CHANNEL CODE` (nothing is
/// said in the chat). Answers the request approved.
#[utoipa::path(post, path = "/v1/gateway/pairing/approve", tag = "gateway", request_body = PairingDecision,
    security(("bearer" = [])),
    responses((status = 200, description = "Approved: the request", body = PairingRequest),
              (status = 400, description = "`invalid_json` (not JSON) or `validation_failed` (a missing, unknown or blank field)", body = ErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 404, description = "`pairing_not_found`: no pending request with that code on that channel (wrong, decided already, or expired)", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 415, description = "`unsupported_media_type`: the body is not JSON", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; nothing was decided, retry", body = ErrorBody)))]
async fn pairing_approve(
    State(s): State<ApiState>,
    switchboard_http::Json(req): switchboard_http::Json<PairingDecision>,
) -> Response {
    if let Some(r) = invalid_decision(&req) {
        return r;
    }
    let decided = crate::pairing::approve(s.gw().store(), &req.channel, &req.code).await;
    pairing_decided("approving a pairing request", &req, decided)
}

/// Refuses a pairing request: it is deleted, and the person is told in one short message
/// ("The owner of this bot declined your pairing request."; a message that cannot be posted
/// is logged, the refusal stands). The chat stays unknown: writing again asks anew. Answers
/// the request refused.
#[utoipa::path(post, path = "/v1/gateway/pairing/refuse", tag = "gateway", request_body = PairingDecision,
    security(("bearer" = [])),
    responses((status = 200, description = "Refused: the request", body = PairingRequest),
              (status = 400, description = "`invalid_json` (not JSON) or `validation_failed` (a missing, unknown or blank field)", body = ErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 404, description = "`pairing_not_found`: no pending request with that code on that channel (wrong, decided already, or expired)", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 415, description = "`unsupported_media_type`: the body is not JSON", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; nothing was decided, retry", body = ErrorBody)))]
async fn pairing_refuse(
    State(s): State<ApiState>,
    switchboard_http::Json(req): switchboard_http::Json<PairingDecision>,
) -> Response {
    if let Some(r) = invalid_decision(&req) {
        return r;
    }
    let gw = s.gw();
    let chat = gw.channel(&req.channel);
    let decided =
        crate::pairing::refuse(gw.store(), chat.as_deref(), &req.channel, &req.code).await;
    pairing_decided("refusing a pairing request", &req, decided)
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

/// Sends a notification to a chat — or a test message to a conversation listed by
/// `GET /v1/gateway/sessions`: `{"channel": s.channel, "target": s.chat.id, "thread":
/// s.chat.thread, "kind": s.chat.kind, "text": "…"}` posts where that conversation's replies
/// go. With an `Idempotency-Key` header, the same key sent again answers the first send's
/// `message_id` and posts nothing (a send under way with it answers 503: retry).
#[utoipa::path(post, path = "/v1/gateway/send", tag = "gateway", request_body = GatewaySendRequest,
    params(("Idempotency-Key" = Option<String>, Header, pattern = "^[!-~]{1,255}$", description = "1 to 255 visible ASCII characters: a repeat answers the first send instead of posting again")),
    security(("bearer" = [])),
    responses((status = 200, description = "Sent", body = GatewaySendResponse),
              (status = 400, description = "`invalid_json` (not a send request), `validation_failed` (empty text, `kind` `thread` without `thread`) or `invalid_header` (a malformed `Idempotency-Key`)", body = ErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: no channel of that name, or `kind: thread` without `thread`", body = ErrorBody),
              (status = 500, description = "`internal`: the context could not be stored", body = ErrorBody),
              (status = 503, description = "`unavailable`: the platform refused or did not answer, or a send with the same `Idempotency-Key` is under way", body = ErrorBody)))]
async fn send(State(s): State<ApiState>, headers: HeaderMap, body: Bytes) -> Response {
    let key = match headers.get("idempotency-key").map(|v| v.to_str()) {
        None => None,
        Some(Ok(k)) if switchboard_protocol::is_valid_idempotency_key(k) => Some(k.to_string()),
        Some(_) => {
            return error(
                ErrorCode::InvalidHeader,
                "Idempotency-Key must be 1 to 255 visible ASCII characters",
            );
        }
    };
    let req: GatewaySendRequest = match switchboard_http::from_json_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(ErrorCode::InvalidJson, format!("invalid request body: {e}")),
    };
    if req.text.trim().is_empty() {
        return error(
            ErrorCode::ValidationFailed,
            "invalid text: must not be empty",
        );
    }
    if req.target.trim().is_empty() {
        return error(
            ErrorCode::ValidationFailed,
            "invalid target: must not be blank",
        );
    }
    if req.context.as_ref().is_some_and(|c| !c.is_object()) {
        return error(
            ErrorCode::ValidationFailed,
            "invalid context: must be an object",
        );
    }
    // One field read against another, which the schema does not say: 422.
    if req.kind == Some(ChatKind::Thread) && req.thread.is_none() {
        return error(
            ErrorCode::UnprocessableEntity,
            "invalid kind: \"thread\" needs the thread's id in `thread`",
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
        kind: req.kind.unwrap_or(if req.thread.is_some() {
            ChatKind::Thread
        } else {
            ChatKind::Direct
        }),
        thread: req.thread.clone(),
    };
    let text = crate::text::truncate(&req.text, ch.max_chars());
    if let Some(k) = &key {
        match s.gw().store().claim_send(k).await {
            Ok(crate::store::SendClaim::Mine) => {}
            Ok(crate::store::SendClaim::Sent(message_id)) => {
                return Json(GatewaySendResponse { message_id }).into_response();
            }
            Ok(crate::store::SendClaim::Busy) => {
                return ApiError::new(
                    ErrorCode::Unavailable,
                    "a send with this Idempotency-Key is under way; retry",
                )
                .with_retry_after(1)
                .into_response();
            }
            Err(e) => return store_failed("claiming a send", e),
        }
    }
    let sent = ch.send(&chat, &text, &[]).await;
    if let Some(k) = &key {
        let recorded = match &sent {
            Ok(message_id) => s.gw().store().send_done(k, message_id).await,
            Err(_) => s.gw().store().send_failed(k).await,
        };
        if let Err(e) = recorded {
            tracing::warn!(error = %e, "recording an idempotent send");
        }
    }
    match sent {
        Ok(message_id) => {
            if let Some(ctx) = req.context {
                let ttl = s.gw().config().context_ttl;
                if let Err(e) = s
                    .gw()
                    .store()
                    .put_context(&req.channel, &req.target, &truncate_context(ctx), ttl)
                    .await
                {
                    return store_failed("storing a notification context", e);
                }
            }
            Json(GatewaySendResponse { message_id }).into_response()
        }
        Err(e) => error(ErrorCode::Unavailable, e.to_string()),
    }
}

fn gateway_error(what: &str, e: crate::GatewayError) -> Response {
    match e {
        crate::GatewayError::Channel(e) => error(ErrorCode::Unavailable, e.to_string()),
        crate::GatewayError::Client(e) if e.status() == Some(404) => {
            error(ErrorCode::SessionNotFound, "no such session")
        }
        crate::GatewayError::Store(e) => store_failed(what, e),
        e => internal(what, e),
    }
}

/// Asks a chat to decide tool calls of a run the gateway does not follow (a scheduled run):
/// one prompt with Allow / Deny buttons; a press decides them. The same calls asked again
/// answer the prompt already posted.
#[utoipa::path(post, path = "/v1/gateway/approvals", tag = "gateway", request_body = GatewayAskRequest,
    security(("bearer" = [])),
    responses((status = 200, description = "Asked (or asked already)", body = GatewayAskResponse),
              (status = 400, description = "`invalid_json` (not an ask request) or `validation_failed` (no calls)", body = ErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 404, description = "`session_not_found`", body = ErrorBody),
              (status = 409, description = "`no_pending_approval`: the run does not wait for those calls", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 422, description = "`unprocessable_entity`: no channel of that name", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`unavailable`: the platform refused or did not answer", body = ErrorBody)))]
async fn ask(State(s): State<ApiState>, body: Bytes) -> Response {
    let req: GatewayAskRequest = match switchboard_http::from_json_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(ErrorCode::InvalidJson, format!("invalid request body: {e}")),
    };
    if req.tool_call_ids.is_empty() {
        return error(
            ErrorCode::ValidationFailed,
            "invalid tool_call_ids: name at least one call",
        );
    }
    if req.target.trim().is_empty() {
        return error(
            ErrorCode::ValidationFailed,
            "invalid target: must not be blank",
        );
    }
    match s.gw().ask(&req).await {
        Ok(crate::dispatcher::AskOutcome::Asked(prompt_id, message_id)) => {
            Json(GatewayAskResponse {
                prompt_id,
                message_id,
            })
            .into_response()
        }
        Ok(crate::dispatcher::AskOutcome::NotWaiting) => error(
            ErrorCode::NoPendingApproval,
            "the run does not wait for a decision on those calls",
        ),
        Ok(crate::dispatcher::AskOutcome::UnknownChannel) => error(
            ErrorCode::UnprocessableEntity,
            format!("unknown channel {:?}", req.channel),
        ),
        Err(e) => gateway_error("asking for an approval", e),
    }
}

/// Nobody answered a prompt asked with `POST /v1/gateway/approvals`: its calls are rejected
/// with the reason, and its message says so (its buttons removed).
#[utoipa::path(post, path = "/v1/gateway/approvals/{id}/expire", tag = "gateway", request_body = GatewayExpireRequest,
    params(("id" = String, Path, description = "The prompt's id")),
    security(("bearer" = [])),
    responses((status = 200, description = "Settled: whether the calls were rejected now", body = GatewayExpireResponse),
              (status = 400, description = "`invalid_json` or `validation_failed` (blank reason)", body = ErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = ErrorBody),
              (status = 404, description = "`not_found`: no such prompt (answered already)", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody)))]
async fn expire(State(s): State<ApiState>, Path(id): Path<String>, body: Bytes) -> Response {
    let req: GatewayExpireRequest = match switchboard_http::from_json_slice(&body) {
        Ok(r) => r,
        Err(e) => return error(ErrorCode::InvalidJson, format!("invalid request body: {e}")),
    };
    if req.reason.trim().is_empty() {
        return error(
            ErrorCode::ValidationFailed,
            "invalid reason: must not be blank",
        );
    }
    match s.gw().expire(&id, &req.reason).await {
        Ok(Some(rejected)) => Json(GatewayExpireResponse { rejected }).into_response(),
        Ok(None) => error(ErrorCode::NotFound, format!("no pending prompt {id:?}")),
        Err(e) => gateway_error("expiring an approval", e),
    }
}

/// Inbound signed webhook (`webhook:<name>`): 401 for a missing or wrong signature or a
/// stale timestamp, 400 for a malformed body, 200 once stored.
#[utoipa::path(post, path = "/v1/gateway/webhook/{name}", tag = "gateway",
    params(("name" = String, Path, description = "The webhook channel's name")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The signed JSON of the inbound message, checked against `X-Switchboard-Signature` before it is read"),
    responses((status = 200, description = "Stored", body = Accepted),
              (status = 400, description = "`validation_failed`: signed, but not an inbound message", body = ErrorBody),
              (status = 401, description = "`unauthorized`: missing or wrong signature, or a stale timestamp", body = ErrorBody),
              (status = 404, description = "`not_found`: no webhook channel of that name", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 503, description = "`unavailable`: not stored; retry", body = ErrorBody)))]
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
        Ok(()) => Json(Accepted { ok: true }).into_response(),
        Err(e) => {
            tracing::error!(webhook = %name, error = %e, "storing an inbound webhook");
            error(ErrorCode::Unavailable, "could not store the message; retry")
        }
    }
}

/// Updates a platform pushes over HTTP (Telegram's webhook mode), checked by the channel.
#[utoipa::path(post, path = "/v1/gateway/channels/{name}/webhook", tag = "gateway",
    params(("name" = String, Path, description = "The channel's name")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "The platform's update, as it pushes it (the channel checks its secret token or signature)"),
    responses((status = 200, description = "Taken: `{\"ok\": true}`, the platform's challenge (text/plain) or the answer the platform expects", body = Accepted),
              (status = 400, description = "`validation_failed`: authenticated, but not an update", body = ErrorBody),
              (status = 401, description = "`unauthorized`: missing or wrong secret token or signature", body = ErrorBody),
              (status = 404, description = "`not_found`: no such channel, or it does not receive updates over HTTP", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 503, description = "`unavailable`: not stored; retry", body = ErrorBody)))]
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
        None => Json(Accepted { ok: true }).into_response(),
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
#[utoipa::path(post, path = "/v1/gateway/slack/events", tag = "gateway",
    request_body(content = Vec<u8>, content_type = "application/octet-stream",
        description = "An Events API request, checked against Slack's signature"),
    responses((status = 200, description = "Taken: `{\"ok\": true}`, the platform's challenge (text/plain) or the answer the platform expects", body = Accepted),
              (status = 400, description = "`validation_failed`: authenticated, but not an update", body = ErrorBody),
              (status = 401, description = "`unauthorized`: missing or wrong secret token or signature", body = ErrorBody),
              (status = 404, description = "`not_found`: no such channel, or it does not receive updates over HTTP", body = ErrorBody),
              (status = 413, description = "`payload_too_large`", body = ErrorBody),
              (status = 503, description = "`unavailable`: not stored; retry", body = ErrorBody)))]
async fn slack_events(state: State<ApiState>, headers: HeaderMap, body: Bytes) -> Response {
    channel_push(state, Path("slack".to_string()), headers, body).await
}
