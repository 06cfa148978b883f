//! `/v1/relay/*`: bundles, up/down, list, send, look, audit, message outcomes and the
//! outcome event stream. Every route needs the bearer token.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use switchboard_http::{ApiError, BearerToken};
use switchboard_protocol::relay::{
    AuditResponse, BundlesResponse, HostingResponse, ListResponse, LookResponse, RelayErrorBody,
    SendRequest, SendResponse, TargetResult,
};

use switchboard_protocol::relay::OutcomeEvent;

use crate::error::RelayError;
use crate::service::Relay;

#[derive(Clone)]
struct ApiState {
    relay: Relay,
    keepalive: Duration,
    /// The per-token cap on open streams, shared with the server's routes.
    streams: std::sync::Arc<switchboard_http::StreamSlots>,
}

type ApiResult = Result<Response, ApiError>;

/// Who is calling: the operator (the API token) or one member of the bundle in the path
/// (its [`crate::member_token`]), who may only act as itself.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Caller {
    Operator,
    Member(String),
}

impl Caller {
    /// Refuses a member acting as someone else (`who`: the sender, requester or follower it
    /// names; `None` when it names nobody).
    fn may_act_as(&self, who: Option<&str>) -> Result<(), RelayError> {
        match self {
            Caller::Operator => Ok(()),
            Caller::Member(m) if who == Some(m.as_str()) => Ok(()),
            Caller::Member(m) => Err(RelayError::new(
                403,
                "authorization_forbidden",
                format!(
                    "a member token acts only as its member ({m}), not as {}",
                    who.unwrap_or("nobody")
                ),
            )),
        }
    }
}

#[derive(Clone)]
struct Auth {
    token: BearerToken,
    /// The API token, the key of member tokens.
    key: std::sync::Arc<str>,
}

/// The routes a member token reaches: its bundle's list, send, look, outcomes and events.
fn member_route(method: &axum::http::Method, path: &str) -> Option<String> {
    let rest = path.strip_prefix("/v1/relay/bundles/")?;
    let (bundle, tail) = rest.split_once('/').unwrap_or((rest, ""));
    let ok = match (method.as_str(), tail) {
        ("GET", "" | "look" | "events") | ("POST", "send") => true,
        ("GET", t) => t.starts_with("messages/"),
        _ => false,
    };
    ok.then(|| bundle.to_owned())
}

/// The kit's bearer check (or a member token), answered in the relay's error shape.
async fn require_token(State(auth): State<Auth>, mut req: Request, next: Next) -> Response {
    let denied = match auth.token.authorized(req.extensions(), req.headers()) {
        Ok(()) => {
            req.extensions_mut().insert(Caller::Operator);
            return next.run(req).await;
        }
        Err(e) => e,
    };
    let presented = switchboard_http::bearer_value(req.headers())
        .ok()
        .map(str::to_owned);
    if let Some(t) = presented.filter(|t| crate::member_token::is_member_token(t)) {
        let Some(bundle) = member_route(req.method(), req.uri().path()) else {
            return ApiError::from(RelayError::new(
                403,
                "authorization_forbidden",
                "a member token reaches only its bundle's list, send, look, messages and events",
            ))
            .into_response();
        };
        if let Some(member) = crate::member_token::verify(&auth.key, &bundle, &t) {
            req.extensions_mut().insert(Caller::Member(member));
            return next.run(req).await;
        }
    }
    ApiError::from(RelayError::new(
        denied.status().as_u16(),
        denied.code(),
        denied.message(),
    ))
    .into_response()
}

/// The kit's extractors, their rejections in the relay's shape
/// (`validation_invalid_arguments`).
struct Path<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        switchboard_http::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| Path(p.0))
            .map_err(|e| RelayError::validation("invalid_arguments", e.message()).into())
    }
}

struct Params(HashMap<String, String>);

impl<S: Send + Sync> FromRequestParts<S> for Params {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        switchboard_http::Query::<HashMap<String, String>>::from_request_parts(parts, state)
            .await
            .map(|q| Params(q.0))
            .map_err(|e| RelayError::validation("invalid_arguments", e.message()).into())
    }
}

/// The OpenAPI document of the relay's routes (merged into the server's `/openapi.json`).
#[derive(utoipa::OpenApi)]
#[openapi(
    paths(bundles, list, up, down, send, look, audit, message, events),
    components(schemas(RelayErrorBody, OutcomeEvent, switchboard_protocol::ErrorBody))
)]
pub struct RelayDoc;

/// The relay's routes, all behind `token`.
pub fn router(
    relay: Relay,
    token: impl Into<String>,
    streams: std::sync::Arc<switchboard_http::StreamSlots>,
) -> Router {
    let token: String = token.into();
    let auth = Auth {
        token: BearerToken::new(token.clone()),
        key: token.into(),
    };
    let state = ApiState {
        relay,
        keepalive: Duration::from_secs(15),
        streams,
    };
    Router::new()
        .route("/v1/relay/bundles", get(bundles))
        .route("/v1/relay/bundles/{bundle}", get(list))
        .route("/v1/relay/bundles/{bundle}/up", post(up))
        .route("/v1/relay/bundles/{bundle}/down", post(down))
        .route("/v1/relay/bundles/{bundle}/send", post(send))
        .route("/v1/relay/bundles/{bundle}/look", get(look))
        .route("/v1/relay/bundles/{bundle}/audit", get(audit))
        .route("/v1/relay/bundles/{bundle}/events", get(events))
        .route(
            "/v1/relay/bundles/{bundle}/messages/{message_id}",
            get(message),
        )
        .route_layer(axum::middleware::from_fn_with_state(auth, require_token))
        .layer(axum::middleware::from_fn(switchboard_http::request_id))
        .with_state(state)
}

/// Query parameters are read by hand so that a malformed one gets the relay's own error
/// code instead of the framework's plain-text 400.
fn only(params: &HashMap<String, String>, allowed: &[&str]) -> Result<(), RelayError> {
    match params.keys().find(|k| !allowed.contains(&k.as_str())) {
        Some(k) => Err(RelayError::validation(
            "invalid_arguments",
            format!(
                "unknown query parameter `{k}` (expected: {})",
                allowed.join(", ")
            ),
        )),
        None => Ok(()),
    }
}

/// The bundles in the bundles directory, with their state.
#[utoipa::path(get, path = "/v1/relay/bundles", tag = "relay", security(("bearer" = ["relay:read"])),
    responses((status = 200, body = BundlesResponse), (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody), (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody)))]
async fn bundles(State(s): State<ApiState>) -> ApiResult {
    Ok(Json(s.relay.bundles().await?).into_response())
}

/// The bundle's members, as `as` may see them under its policy.
#[utoipa::path(get, path = "/v1/relay/bundles/{bundle}", tag = "relay", security(("bearer" = ["relay:read"])),
    params(("bundle" = String, Path, description = "The bundle's name"), ("as" = Option<String>, Query, description = "List as this member (its policy's `list` scope)")),
    responses((status = 200, body = ListResponse), (status = 400, description = "`validation_*`: a parameter is malformed or unknown", body = RelayErrorBody), (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody),
              (status = 403, description = "`authorization_forbidden`", body = RelayErrorBody), (status = 404, description = "`bundle_not_found`", body = RelayErrorBody), (status = 422, description = "`config_*`: the bundle's files are invalid", body = RelayErrorBody), (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody)))]
async fn list(
    State(s): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(bundle): Path<String>,
    Params(q): Params,
) -> ApiResult {
    only(&q, &["as"])?;
    caller.may_act_as(q.get("as").map(String::as_str))?;
    Ok(Json(
        s.relay
            .list(&bundle, q.get("as").map(String::as_str))
            .await?,
    )
    .into_response())
}

/// Starts the bundle's members.
#[utoipa::path(post, path = "/v1/relay/bundles/{bundle}/up", tag = "relay", security(("bearer" = ["relay:admin"])),
    params(("bundle" = String, Path, description = "The bundle's name")),
    responses((status = 200, body = HostingResponse), (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody), (status = 404, description = "`bundle_not_found`", body = RelayErrorBody), (status = 422, description = "`config_*`: the bundle's files are invalid", body = RelayErrorBody), (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody)))]
async fn up(State(s): State<ApiState>, Path(bundle): Path<String>) -> ApiResult {
    Ok(Json(s.relay.up(&bundle).await?).into_response())
}

/// Stops the bundle's members.
#[utoipa::path(post, path = "/v1/relay/bundles/{bundle}/down", tag = "relay", security(("bearer" = ["relay:admin"])),
    params(("bundle" = String, Path, description = "The bundle's name")),
    responses((status = 200, body = HostingResponse), (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody), (status = 404, description = "`bundle_not_found`", body = RelayErrorBody), (status = 422, description = "`config_*`: the bundle's files are invalid", body = RelayErrorBody), (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody)))]
async fn down(State(s): State<ApiState>, Path(bundle): Path<String>) -> ApiResult {
    Ok(Json(s.relay.down(&bundle).await?).into_response())
}

/// Sends a message from one member to others, under the sender's policy.
#[utoipa::path(post, path = "/v1/relay/bundles/{bundle}/send", tag = "relay", security(("bearer" = ["relay:send"])),
    params(("bundle" = String, Path, description = "The bundle's name")), request_body = SendRequest,
    responses((status = 200, description = "Each target's result", body = SendResponse),
              (status = 400, description = "`validation_*`: not a send request, an unknown sender or target", body = RelayErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody),
              (status = 403, description = "`authorization_forbidden`: the policy does not allow it (`details` names the capability, requester and targets)", body = RelayErrorBody),
              (status = 404, description = "`bundle_not_found`; `message_not_found`: `in_reply_to` names no message of the bundle", body = RelayErrorBody),
              (status = 409, description = "`bundle_down`, `request_id_reused`; `relay_hop_limit`: the message would go beyond the chain's hop limit (`details`: `chain_id`, `hop`, `max_hops`)", body = RelayErrorBody),
              (status = 413, description = "`payload_too_large`", body = switchboard_protocol::ErrorBody),
              (status = 422, description = "`config_*`: the bundle's files are invalid", body = RelayErrorBody),
              (status = 429, description = "`relay_budget_exhausted`: the sender's or the bundle's send budget for the minute or the day is used up (`details`: `scope`, `window`, `limit`)", body = RelayErrorBody),
              (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody)))]
async fn send(
    State(s): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(bundle): Path<String>,
    body: Bytes,
) -> ApiResult {
    let req: SendRequest = switchboard_http::from_json_slice(&body).map_err(|e| {
        RelayError::validation("invalid_arguments", format!("invalid send request: {e}"))
    })?;
    caller.may_act_as(Some(&req.sender))?;
    Ok(Json(s.relay.send(&bundle, req).await?).into_response())
}

/// The last lines of a member's screen (or session transcript).
#[utoipa::path(get, path = "/v1/relay/bundles/{bundle}/look", tag = "relay", security(("bearer" = ["relay:read"])),
    params(("bundle" = String, Path, description = "The bundle's name"), ("requester" = String, Query), ("target" = String, Query),
           ("lines" = Option<u32>, Query, minimum = 1, maximum = 1000)),
    responses((status = 200, body = LookResponse),
              (status = 400, description = "`validation_*`: requester or target missing or unknown, bad `lines`", body = RelayErrorBody),
              (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody),
              (status = 403, description = "`authorization_forbidden`", body = RelayErrorBody), (status = 404, description = "`bundle_not_found`", body = RelayErrorBody),
              (status = 409, description = "`bundle_down` or the target is not ready", body = RelayErrorBody),
              (status = 422, description = "`config_*`: the bundle's files are invalid", body = RelayErrorBody), (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody),
              (status = 502, description = "`session_unreachable`", body = RelayErrorBody)))]
async fn look(
    State(s): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(bundle): Path<String>,
    Params(q): Params,
) -> ApiResult {
    only(&q, &["requester", "target", "lines"])?;
    let lines = match q.get("lines") {
        None => None,
        Some(v) => Some(v.parse::<u32>().map_err(|_| {
            RelayError::validation(
                "invalid_lines",
                format!("lines must be a number between 1 and 1000 (got {v:?})"),
            )
        })?),
    };
    let requester = q.get("requester").ok_or_else(|| {
        RelayError::validation("unknown_sender", "requester is missing (?requester=MEMBER)")
    })?;
    let target = q.get("target").ok_or_else(|| {
        RelayError::validation("unknown_target", "target is missing (?target=MEMBER)")
    })?;
    caller.may_act_as(Some(requester))?;
    Ok(Json(s.relay.look(&bundle, requester, target, lines).await?).into_response())
}

/// The bundle's audit log, newest last.
#[utoipa::path(get, path = "/v1/relay/bundles/{bundle}/audit", tag = "relay", security(("bearer" = ["relay:read"])),
    params(("bundle" = String, Path, description = "The bundle's name"), ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000),
           ("event" = Option<String>, Query, description = "Keep one kind of event")),
    responses((status = 200, body = AuditResponse), (status = 400, description = "`validation_*`: a parameter is malformed or unknown", body = RelayErrorBody), (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody), (status = 404, description = "`bundle_not_found`", body = RelayErrorBody), (status = 422, description = "`config_*`: the bundle's files are invalid", body = RelayErrorBody), (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody)))]
async fn audit(
    State(s): State<ApiState>,
    Path(bundle): Path<String>,
    Params(q): Params,
) -> ApiResult {
    only(&q, &["limit", "event"])?;
    let limit = match q.get("limit") {
        None => None,
        Some(v) => Some(v.parse::<usize>().map_err(|_| {
            RelayError::validation(
                "invalid_arguments",
                format!("limit must be a number between 1 and 1000 (got {v:?})"),
            )
        })?),
    };
    Ok(Json(
        s.relay
            .audit(&bundle, limit, q.get("event").map(String::as_str))
            .await?,
    )
    .into_response())
}

/// One message's outcome per target.
#[utoipa::path(get, path = "/v1/relay/bundles/{bundle}/messages/{message_id}", tag = "relay", security(("bearer" = ["relay:read"])),
    params(("bundle" = String, Path, description = "The bundle's name"), ("message_id" = String, Path)),
    responses((status = 200, body = TargetResult), (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody),
              (status = 404, description = "`bundle_not_found` or `message_not_found`", body = RelayErrorBody), (status = 422, description = "`config_*`: the bundle's files are invalid", body = RelayErrorBody), (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody)))]
async fn message(
    State(s): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path((bundle, message_id)): Path<(String, String)>,
) -> ApiResult {
    let viewer = match &caller {
        Caller::Operator => None,
        Caller::Member(m) => Some(m.as_str()),
    };
    Ok(Json(s.relay.message(&bundle, &message_id, viewer).await?).into_response())
}

/// SSE of the bundle's delivery outcomes (`event: relay.outcome`, `id:` = seq), replayed from
/// the store after `Last-Event-ID` (or `?after=`), then live. `?as=SENDER` keeps one
/// sender's messages.
#[utoipa::path(get, path = "/v1/relay/bundles/{bundle}/events", tag = "relay", security(("bearer" = ["relay:read"])),
    params(("bundle" = String, Path, description = "The bundle's name"), ("as" = Option<String>, Query, description = "Keep one sender's messages"),
           ("after" = Option<u64>, Query, description = "Replay outcomes with a greater seq"),
           ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "Replay outcomes with a greater seq (wins over `after`)")),
    responses((status = 200, description = "`event: relay.outcome` frames", content_type = "text/event-stream", body = switchboard_protocol::SseFrame),
              (status = 400, description = "`validation_*`: a parameter is malformed or unknown", body = RelayErrorBody), (status = 401, description = "`unauthorized` or `invalid_token`", body = RelayErrorBody),
              (status = 403, description = "`authorization_forbidden`", body = RelayErrorBody), (status = 404, description = "`bundle_not_found`", body = RelayErrorBody), (status = 422, description = "`config_*`: the bundle's files are invalid", body = RelayErrorBody),
              (status = 429, description = "`too_many_streams`: the token holds as many streams as `[server] max_streams_per_token` allows (counted with the server's event streams)", body = switchboard_protocol::ErrorBody),
              (status = 500, description = "`internal_error` and the other codes of a failure inside the relay", body = RelayErrorBody)))]
async fn events(
    State(s): State<ApiState>,
    Extension(caller): Extension<Caller>,
    Path(bundle): Path<String>,
    Params(q): Params,
    headers: HeaderMap,
) -> ApiResult {
    only(&q, &["as", "after"])?;
    let who = q.get("as").cloned();
    caller.may_act_as(who.as_deref())?;
    s.relay.check_follower(&bundle, who.as_deref())?;
    let from_header = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let after = match from_header.or_else(|| q.get("after").cloned()) {
        None => 0,
        Some(v) => v
            .trim()
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 0)
            .map(|n| n as u64)
            .ok_or_else(|| {
                RelayError::validation(
                    "invalid_arguments",
                    format!("Last-Event-ID / after must be a number (got {v:?})"),
                )
            })?,
    };
    // Counted against the token's open streams, as every long answer is; held as long as
    // the stream.
    let slot = s.streams.take(&headers)?;
    let relay = s.relay.clone();
    let keepalive = s.keepalive;
    let stream = futures::stream::unfold(
        (
            relay,
            bundle,
            who,
            after,
            s.relay.outcome_signal(),
            Vec::<Bytes>::new(),
            slot,
        ),
        move |(relay, bundle, who, mut cursor, mut signal, mut buf, slot)| async move {
            loop {
                if let Some(b) = buf.pop() {
                    return Some((
                        Ok::<_, Infallible>(b),
                        (relay, bundle, who, cursor, signal, buf, slot),
                    ));
                }
                signal.borrow_and_update();
                match relay.outcomes_after(&bundle, who.as_deref(), cursor).await {
                    Ok(evs) if !evs.is_empty() => {
                        for ev in evs.iter().rev() {
                            let data = serde_json::to_string(ev).unwrap_or_default();
                            buf.push(Bytes::from(format!(
                                "id: {}\nevent: relay.outcome\ndata: {data}\n\n",
                                ev.seq
                            )));
                        }
                        cursor = evs.last().map(|e| e.seq).unwrap_or(cursor);
                        continue;
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(error = %e, "relay outcome stream");
                        return None;
                    }
                }
                match tokio::time::timeout(keepalive, signal.changed()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) => return None,
                    Err(_) => {
                        return Some((
                            Ok(Bytes::from_static(b": keepalive\n\n")),
                            (relay, bundle, who, cursor, signal, buf, slot),
                        ));
                    }
                }
            }
        },
    );
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
}
