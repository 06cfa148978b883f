//! `/v1/gateway/*`: status, sessions, bindings, pairing, notifications, the delivery ledger,
//! and inbound webhooks.

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

use parking_lot::RwLock;
use std::sync::Arc;

use crate::channel::{ChatKind, ChatRef, InboundSink};
use crate::dispatcher::Gateway;

pub use switchboard_protocol::gateway as wire;

mod inbound;
mod ledger;
mod notify;
mod pairing;

use inbound::*;
use ledger::*;
use notify::*;
use pairing::*;

/// The OpenAPI document of the gateway's routes (merged into the server's `/openapi.json`
/// when the gateway runs in `switchboard serve`).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(
        status,
        sessions,
        parked,
        messages,
        retry,
        unbind,
        pairing_list,
        pairing_approve,
        pairing_refuse,
        send,
        ask,
        expire,
        webhook,
        channel_push,
        channel_subscribe,
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
        switchboard_protocol::gateway::DeliveryPage,
        switchboard_protocol::gateway::DeliveryEntry,
        switchboard_protocol::gateway::DeliveryStatus,
        switchboard_protocol::gateway::InboundKind,
        switchboard_protocol::gateway::Outbound,
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
/// gateway lease (active ↔ standby), and when the settings change the channels; empty while
/// no channel is configured (the routes answer 404 `not_found`).
#[derive(Clone, Default)]
pub struct GatewaySlot(Arc<RwLock<Option<Gateway>>>);

impl GatewaySlot {
    pub fn new(gw: Gateway) -> Self {
        Self(Arc::new(RwLock::new(Some(gw))))
    }

    /// An empty slot: no gateway yet.
    pub fn empty() -> Self {
        Self::default()
    }

    pub fn get(&self) -> Option<Gateway> {
        self.0.read().clone()
    }

    /// Puts `gw` in place and returns the one it replaced.
    pub fn replace(&self, gw: Gateway) -> Option<Gateway> {
        self.0.write().replace(gw)
    }

    /// Empties the slot and returns what it held.
    pub fn take(&self) -> Option<Gateway> {
        self.0.write().take()
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
    /// The gateway in place: 404 `not_found` while no chat channel is configured.
    fn gw(&self) -> Answer<Gateway> {
        self.slot.get().ok_or_else(|| {
            error(
                ErrorCode::NotFound,
                "no chat channel is configured (the console's Settings, or `switchboard setup`, connects one)",
            )
        })
    }
}

/// What a gateway handler answers: its body, or the http kit's error (its status, stable
/// code and message), like every other route.
type Answer<T> = Result<T, ApiError>;

fn error(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(code, message)
}

fn internal(what: &str, e: impl std::fmt::Display) -> ApiError {
    tracing::error!(error = %e, "{what}");
    error(ErrorCode::Internal, "internal error")
}

/// A failed gateway store: 503 `store_unavailable` when the database failed or did not
/// answer — the caller may retry, nothing was kept — else 500. The database's own words go
/// to the log only.
fn store_failed(what: &str, e: crate::store::StoreError) -> ApiError {
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

/// A gateway store's result as an answer: its failure is [`store_failed`] (`what` names the
/// operation in the log).
trait StoreAnswer<T> {
    fn or_failed(self, what: &str) -> Answer<T>;
}

impl<T> StoreAnswer<T> for Result<T, crate::store::StoreError> {
    fn or_failed(self, what: &str) -> Answer<T> {
        self.map_err(|e| store_failed(what, e))
    }
}

/// A request body read as JSON: 400 `invalid_json` when it is not.
fn json_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Answer<T> {
    switchboard_http::from_json_slice(body)
        .map_err(|e| error(ErrorCode::InvalidJson, format!("invalid request body: {e}")))
}

/// The gateway's routes. All but the inbound webhook need `token`; the webhook is
/// authenticated by its HMAC signature.
pub fn router(gw: impl Into<GatewaySlot>, token: impl Into<String>) -> Router {
    let state = ApiState { slot: gw.into() };
    let protected = Router::new()
        .route("/v1/gateway/status", get(status))
        .route("/v1/gateway/sessions", get(sessions))
        .route("/v1/gateway/parked", get(parked))
        .route("/v1/gateway/messages", get(messages))
        .route("/v1/gateway/messages/{id}/retry", post(retry))
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
        .route(
            "/v1/gateway/channels/{name}/webhook",
            post(channel_push).get(channel_subscribe),
        )
        .route("/v1/gateway/slack/events", post(slack_events))
        .layer(axum::middleware::from_fn(switchboard_http::request_id))
        .with_state(state)
}

/// The channels (each with its connection state and, when it is not connected, why), the
/// bound sessions and what waits.
#[utoipa::path(get, path = "/v1/gateway/status", tag = "gateway", security(("bearer" = ["gateway:read"])),
    responses((status = 200, description = "The channels, the bound sessions and what waits", body = GatewayStatus),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
async fn status(State(s): State<ApiState>) -> Answer<Json<GatewayStatus>> {
    let gw = s.gw()?;
    let store = gw.store();
    let (sessions, active_runs, pending_approvals, queued_messages) = async {
        let routes = store.routes().await?;
        let runs = store.runs().await?;
        let prompts = store.prompts().await?;
        let mut queued = 0;
        for key in store.queued_routes().await? {
            queued += store.queued(&key).await?.len();
        }
        Ok::<_, crate::store::StoreError>((routes.len(), runs.len(), prompts.len(), queued))
    }
    .await
    .or_failed("gateway status")?;
    let mut channels: Vec<ChannelStatus> = gw
        .channels()
        .iter()
        .map(|c| {
            let hearing = &gw.inner.hearing;
            let mut st = channel_status(
                c.name(),
                gw.is_standby(),
                hearing.apply(c.name(), c.health()),
            );
            st.last_received_at = hearing.last(c.name());
            st
        })
        .collect();
    channels.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(GatewayStatus {
        role: if gw.is_standby() { "standby" } else { "active" }.to_string(),
        channels,
        sessions,
        active_runs,
        queued_messages,
        pending_approvals,
    }))
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
            last_received_at: None,
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
        last_received_at: None,
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
#[utoipa::path(get, path = "/v1/gateway/parked", tag = "gateway", security(("bearer" = ["gateway:read"])),
    responses((status = 200, body = switchboard_protocol::gateway::ParkedBatchesResponse),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
async fn parked(
    State(s): State<ApiState>,
) -> Answer<Json<switchboard_protocol::gateway::ParkedBatchesResponse>> {
    let parked = s.gw()?.store().parked().await.or_failed("parked batches")?;
    Ok(Json(switchboard_protocol::gateway::ParkedBatchesResponse {
        parked,
    }))
}

/// The chats bound to sessions, each with its last activity, the most recent first. A test
/// message to one of them: `POST /v1/gateway/send` with `channel`, `target` = `chat.id`,
/// `thread` = `chat.thread` and `kind` = `chat.kind`.
#[utoipa::path(get, path = "/v1/gateway/sessions", tag = "gateway", security(("bearer" = ["gateway:read"])),
    responses((status = 200, body = GatewaySessionsResponse),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody),
              (status = 503, description = "`store_unavailable`: the gateway's database did not answer; retry", body = ErrorBody)))]
async fn sessions(State(s): State<ApiState>) -> Answer<Json<GatewaySessionsResponse>> {
    let gw = s.gw()?;
    let store = gw.store();
    let (routes, activity) = async {
        Ok::<_, crate::store::StoreError>((store.routes().await?, store.chat_activity().await?))
    }
    .await
    .or_failed("gateway sessions")?;
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
    // Most recent first; chats without a recorded activity last (in the store's order: the
    // route updated last first).
    sessions.sort_by_key(|s| std::cmp::Reverse(s.last_activity));
    Ok(Json(GatewaySessionsResponse { sessions }))
}

/// Unbinds the chat of a routing key from its session (the next message starts a new one).
#[utoipa::path(delete, path = "/v1/gateway/bindings/{routing_key}", tag = "gateway",
    params(("routing_key" = String, Path)), security(("bearer" = ["gateway:admin"])),
    responses((status = 204, description = "Unbound"),
              (status = 404, description = "`not_found`: no session is bound to that key", body = ErrorBody),
              (status = 500, description = "`internal`: the gateway store failed", body = ErrorBody)))]
async fn unbind(State(s): State<ApiState>, Path(key): Path<String>) -> Answer<StatusCode> {
    if s.gw()?
        .store()
        .delete_route(&key)
        .await
        .or_failed("unbind")?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(error(
            ErrorCode::NotFound,
            format!("no session is bound to routing key {key:?}"),
        ))
    }
}
