//! `/v1/relay/*`: bundles, up/down, list, send, look, audit, message outcomes and the
//! outcome event stream. Every route needs the bearer token.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use subtle::ConstantTimeEq;
use switchboard_protocol::relay::{RELAY_SCHEMA_VERSION, RelayErrorBody, SendRequest};

use crate::error::RelayError;
use crate::relay::Relay;

#[derive(Clone)]
struct ApiState {
    relay: Relay,
    token: String,
    keepalive: Duration,
}

impl IntoResponse for RelayError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = RelayErrorBody {
            schema_version: RELAY_SCHEMA_VERSION,
            code: self.code,
            error: self.message.clone(),
            message: self.message,
            details: self.details,
            request_id: uuid::Uuid::now_v7().to_string(),
        };
        (status, Json(body)).into_response()
    }
}

async fn require_token(State(state): State<ApiState>, req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_string())
        });
    match given {
        None => RelayError::new(
            401,
            "unauthorized",
            "missing Authorization: Bearer <token> header",
        )
        .into_response(),
        Some(t) if !bool::from(t.as_bytes().ct_eq(state.token.as_bytes())) => {
            RelayError::new(401, "invalid_token", "invalid token").into_response()
        }
        Some(_) => next.run(req).await,
    }
}

/// The relay's routes, all behind `token`.
pub fn router(relay: Relay, token: impl Into<String>) -> Router {
    let state = ApiState {
        relay,
        token: token.into(),
        keepalive: Duration::from_secs(15),
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
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ))
        .with_state(state)
}

type Params = Query<HashMap<String, String>>;

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

async fn bundles(State(s): State<ApiState>) -> Result<Response, RelayError> {
    Ok(Json(s.relay.bundles().await?).into_response())
}

async fn list(
    State(s): State<ApiState>,
    Path(bundle): Path<String>,
    Query(q): Params,
) -> Result<Response, RelayError> {
    only(&q, &["as"])?;
    Ok(Json(
        s.relay
            .list(&bundle, q.get("as").map(String::as_str))
            .await?,
    )
    .into_response())
}

async fn up(State(s): State<ApiState>, Path(bundle): Path<String>) -> Result<Response, RelayError> {
    Ok(Json(s.relay.up(&bundle).await?).into_response())
}

async fn down(
    State(s): State<ApiState>,
    Path(bundle): Path<String>,
) -> Result<Response, RelayError> {
    Ok(Json(s.relay.down(&bundle).await?).into_response())
}

async fn send(
    State(s): State<ApiState>,
    Path(bundle): Path<String>,
    body: Bytes,
) -> Result<Response, RelayError> {
    let req: SendRequest = serde_json::from_slice(&body).map_err(|e| {
        RelayError::validation("invalid_arguments", format!("invalid send request: {e}"))
    })?;
    Ok(Json(s.relay.send(&bundle, req).await?).into_response())
}

async fn look(
    State(s): State<ApiState>,
    Path(bundle): Path<String>,
    Query(q): Params,
) -> Result<Response, RelayError> {
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
    Ok(Json(s.relay.look(&bundle, requester, target, lines).await?).into_response())
}

async fn audit(
    State(s): State<ApiState>,
    Path(bundle): Path<String>,
    Query(q): Params,
) -> Result<Response, RelayError> {
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

async fn message(
    State(s): State<ApiState>,
    Path((bundle, message_id)): Path<(String, String)>,
) -> Result<Response, RelayError> {
    Ok(Json(s.relay.message(&bundle, &message_id).await?).into_response())
}

/// SSE of the bundle's delivery outcomes (`event: relay.outcome`, `id:` = seq), replayed from
/// the store after `Last-Event-ID` (or `?after=`), then live. `?as=SENDER` keeps one
/// sender's messages.
async fn events(
    State(s): State<ApiState>,
    Path(bundle): Path<String>,
    Query(q): Params,
    headers: HeaderMap,
) -> Result<Response, RelayError> {
    only(&q, &["as", "after"])?;
    let who = q.get("as").cloned();
    s.relay.check_follower(&bundle, who.as_deref())?;
    let from_header = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let after = match from_header.or_else(|| q.get("after").cloned()) {
        None => 0,
        Some(v) => v.trim().parse::<u64>().map_err(|_| {
            RelayError::validation(
                "invalid_arguments",
                format!("Last-Event-ID / after must be a number (got {v:?})"),
            )
        })?,
    };
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
        ),
        move |(relay, bundle, who, mut cursor, mut signal, mut buf)| async move {
            loop {
                if let Some(b) = buf.pop() {
                    return Some((
                        Ok::<_, Infallible>(b),
                        (relay, bundle, who, cursor, signal, buf),
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
                            (relay, bundle, who, cursor, signal, buf),
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
