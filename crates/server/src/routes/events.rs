//! `GET /v1/sessions/{id}/events`: the event log as Server-Sent Events.
//!
//! Frames are written by hand rather than with `axum::response::sse` so that a batch of
//! committed events becomes one body chunk, framed once and shared by every subscriber of
//! the session, and the stored JSON payload is embedded as is, never decoded and
//! re-encoded.

use std::convert::Infallible;
use std::fmt::Write as _;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use futures::StreamExt as _;
use serde::Deserialize;
use switchboard_engine::{LogEvent, SubItem, Subscription};
use switchboard_protocol::{ErrorBody, ErrorCode, GAP_DETECTED_EVENT};

use crate::extract::{Query, SessionId};
use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new().route("/v1/sessions/{id}/events", get(events))
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct EventsQuery {
    /// Replay events with `seq` greater than this (like `Last-Event-ID`).
    pub after: Option<String>,
}

fn parse_cursor(raw: &str, what: &str) -> Result<u64, ApiError> {
    // Seqs are stored as signed 64-bit integers: a larger cursor names no event.
    raw.trim()
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .map(|n| n as u64)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidHeader,
                format!("{what} must be a non-negative integer, got {raw:?}"),
            )
        })
}

/// Streams the session's events: every stored event with `seq` greater than `Last-Event-ID`
/// (or `?after=`), then live ones; `: ping` comments keep the connection alive.
#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "events",
    params(("id" = uuid::Uuid, Path), EventsQuery,
           ("Last-Event-ID" = Option<u64>, Header, nullable = false, description = "resume after this seq")),
    security(("bearer" = ["sessions:read"])),
    responses((status = 200, description = "SSE frames; each `data:` is an `EventEnvelope` (a `gap_detected` frame's is a `GapDetected`)", content_type = "text/event-stream", body = switchboard_protocol::SseFrame),
              (status = 400, body = ErrorBody), (status = 404, body = ErrorBody),
              (status = 429, description = "`too_many_streams`: this token holds as many event streams as allowed (`Retry-After`)", body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    SessionId(id): SessionId,
    headers: HeaderMap,
    Query(q): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    let header_cursor = match headers.get("last-event-id") {
        Some(v) => {
            let s = v.to_str().map_err(|_| {
                ApiError::new(ErrorCode::InvalidHeader, "Last-Event-ID is not ASCII")
            })?;
            Some(parse_cursor(s, "Last-Event-ID")?)
        }
        None => None,
    };
    let query_cursor = q
        .after
        .as_deref()
        .map(|a| parse_cursor(a, "after"))
        .transpose()?;
    // The header wins: a browser's EventSource sends it on reconnect with the newest id.
    let after = header_cursor.or(query_cursor).unwrap_or(0);
    let slot = state.streams.take(&headers)?;
    let sub = state.engine.subscribe(id, after).await?;
    let body = Body::from_stream(frames(
        sub,
        state.config.keepalive,
        state.engine.closed(),
        slot,
    ));
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response())
}

fn frames(
    sub: Subscription,
    keepalive: Duration,
    closed: tokio_util::sync::CancellationToken,
    slot: switchboard_http::StreamSlot,
) -> impl futures::Stream<Item = Result<Bytes, Infallible>> {
    let chunks = futures::stream::unfold(Some(sub), move |sub| {
        let closed = closed.clone();
        async move {
            let mut sub = sub?;
            let item = tokio::select! {
                _ = closed.cancelled() => return None,
                next = sub.next() => next,
                _ = tokio::time::sleep(keepalive) => return Some((vec![Bytes::from_static(b": ping\n\n")], Some(sub))),
            };
            match item {
                // One chunk per committed batch, shared with every other subscriber.
                Ok(Some(SubItem::Events(batch))) => {
                    Some((batch.encode_parts(encode_batch), Some(sub)))
                }
                Ok(Some(SubItem::Gap(gap))) => {
                    let data = serde_json::to_string(&gap).unwrap_or_default();
                    Some((
                        vec![Bytes::from(format!(
                            "event: {GAP_DETECTED_EVENT}\ndata: {data}\n\n"
                        ))],
                        Some(sub),
                    ))
                }
                Ok(None) => None,
                Err(e) => {
                    tracing::warn!(error = %e, "event stream failed; closing it so the client resumes");
                    None
                }
            }
        }
    });
    let gauge = super::metrics::SubscriberGauge::up();
    chunks.flat_map(move |parts| {
        // Held as long as the stream: the token's slot is given back when it ends.
        let _open = (&gauge, &slot);
        futures::stream::iter(parts.into_iter().map(Ok))
    })
}

/// One SSE frame per event, all in one chunk. The engine caches the result per committed
/// batch, so with many subscribers each batch is framed once.
pub fn encode_batch(batch: &[LogEvent]) -> Bytes {
    let mut out = String::with_capacity(batch.len() * 256);
    for ev in batch {
        encode_event(&mut out, ev);
    }
    Bytes::from(out)
}

fn encode_event(out: &mut String, ev: &LogEvent) {
    let run_id = match ev.run_id {
        Some(r) => format!("\"{r}\""),
        None => "null".into(),
    };
    let _ = write!(
        out,
        "id: {seq}\nevent: {kind}\ndata: {{\"id\":{seq},\"session_id\":\"{sid}\",\"run_id\":{run_id},\"timestamp\":\"{ts}\",\"event\":{payload}}}\n\n",
        seq = ev.seq,
        kind = ev.kind,
        sid = ev.session_id,
        ts = ev.created_at,
        payload = ev.payload,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_protocol::{AgentEvent, EventEnvelope};
    use uuid::Uuid;

    #[test]
    fn frame_data_is_an_envelope() {
        let run_id = Uuid::now_v7();
        let ev = AgentEvent::TextDelta {
            run_id,
            delta: "a\n\"b\"".into(),
        };
        let le = LogEvent {
            session_id: Uuid::now_v7(),
            seq: 7,
            run_id: Some(run_id),
            kind: ev.kind().into(),
            payload: serde_json::to_string(&ev).unwrap(),
            created_at: "2026-01-01T00:00:00.000000Z".into(),
        };
        let mut s = String::new();
        encode_event(&mut s, &le);
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines[0], "id: 7");
        assert_eq!(lines[1], "event: text_delta");
        let env: EventEnvelope =
            serde_json::from_str(lines[2].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(env.id, 7);
        assert_eq!(env.event, ev);
        assert!(s.ends_with("\n\n"));
    }
}
