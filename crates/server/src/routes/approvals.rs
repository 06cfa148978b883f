//! `/v1/approvals`: every approval waiting for a human, across sessions, and a stream of
//! their changes (the console's inbox). Decisions still go to
//! `POST /v1/sessions/{id}/tools/decisions`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt as _;
use switchboard_engine::Engine;
use switchboard_protocol::{ApprovalResolved, ApprovalsResponse, ErrorBody, WaitingApproval};
use uuid::Uuid;

use crate::{ApiError, AppState};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/approvals", get(list))
        .route("/v1/approvals/events", get(events))
}

/// Every approval waiting for a decision, in any session, newest first: the undecided
/// calls, the session's title and backend, and when the wait fails closed (`expires_at`:
/// the calls are then rejected unanswered).
#[utoipa::path(get, path = "/v1/approvals", tag = "tools", security(("bearer" = [])),
    responses((status = 200, body = ApprovalsResponse),
              (status = 503, description = "`store_unavailable` (`Retry-After`)", body = ErrorBody)))]
pub async fn list(State(state): State<AppState>) -> Result<Json<ApprovalsResponse>, ApiError> {
    Ok(Json(ApprovalsResponse {
        approvals: state.engine.waiting_approvals().await?,
    }))
}

/// How long a change is left to settle before the list is read again: a burst of events
/// (a run's calls rejected one by one, many runs ending) costs one read.
const SETTLE: Duration = Duration::from_millis(50);
/// With a store shared by several instances, how often the list is read even without a
/// signal (a decision recorded on another instance sends none).
const SHARED_RECHECK: Duration = Duration::from_secs(2);

/// The waiting approvals as Server-Sent Events. Every connection starts with a `snapshot`
/// frame (`ApprovalsResponse`: the whole list), so a client that reconnects needs no
/// `Last-Event-ID`; then `approval_requested` (`WaitingApproval`) when one starts waiting,
/// `approval_updated` (`WaitingApproval`, its remaining calls) when some of its calls were
/// decided, and `approval_resolved` (`ApprovalResolved`) when it no longer waits (decided,
/// timed out, cancelled, or its session deleted). `: ping` comments keep the connection
/// alive.
#[utoipa::path(get, path = "/v1/approvals/events", tag = "tools", security(("bearer" = [])),
    responses((status = 200, description = "SSE frames: `snapshot` (data: `ApprovalsResponse`), then `approval_requested` and `approval_updated` (data: `WaitingApproval`) and `approval_resolved` (data: `ApprovalResolved`)", content_type = "text/event-stream", body = switchboard_protocol::SseFrame),
              (status = 429, description = "`too_many_streams`: this token holds as many event streams as allowed (`Retry-After`)", body = ErrorBody),
              (status = 503, description = "`store_unavailable` (`Retry-After`)", body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let slot = state.streams.take(&headers)?;
    // Subscribed before the first read: a change after it is seen by the next one.
    let changed = state.engine.approvals_changed();
    let first = state.engine.waiting_approvals().await?;
    let snapshot = frame(
        "snapshot",
        &ApprovalsResponse {
            approvals: first.clone(),
        },
    );
    let recheck = if state.engine.config().exclusive {
        state.config.keepalive
    } else {
        SHARED_RECHECK.min(state.config.keepalive)
    };
    let watcher = Watcher {
        engine: state.engine.clone(),
        changed,
        known: first.into_iter().map(|a| (key(&a), a)).collect(),
        recheck,
        keepalive: state.config.keepalive,
        quiet_since: tokio::time::Instant::now(),
    };
    let closed = state.engine.closed();
    let gauge = super::metrics::SubscriberGauge::up();
    let rest = futures::stream::unfold(Some(watcher), move |w| {
        let closed = closed.clone();
        async move {
            let mut w = w?;
            tokio::select! {
                _ = closed.cancelled() => None,
                next = w.next() => next.map(|bytes| (bytes, Some(w))),
            }
        }
    });
    let body = futures::stream::once(async move { snapshot })
        .chain(rest)
        .map(move |bytes| {
            // Held as long as the stream: the token's slot is given back when it ends.
            let _open = (&gauge, &slot);
            Ok::<_, Infallible>(bytes)
        });
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        Body::from_stream(body),
    )
        .into_response())
}


fn key(a: &WaitingApproval) -> (Uuid, Uuid) {
    (a.session_id, a.run_id)
}

fn frame(kind: &str, data: &impl serde::Serialize) -> Bytes {
    let data = serde_json::to_string(data).unwrap_or_default();
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// One connection's view: what it last told the client, and what wakes it.
struct Watcher {
    engine: Engine,
    changed: tokio::sync::watch::Receiver<u64>,
    known: HashMap<(Uuid, Uuid), WaitingApproval>,
    recheck: Duration,
    keepalive: Duration,
    quiet_since: tokio::time::Instant,
}

impl Watcher {
    /// The next chunk to send (frames of what changed, or a ping); `None` ends the stream
    /// (the server is stopping, or the store failed: the client reconnects and gets a new
    /// snapshot).
    async fn next(&mut self) -> Option<Bytes> {
        loop {
            tokio::select! {
                r = self.changed.changed() => {
                    r.ok()?;
                    tokio::time::sleep(SETTLE).await;
                    self.changed.borrow_and_update();
                }
                _ = tokio::time::sleep(self.recheck) => {}
            }
            let now = match self.engine.waiting_approvals().await {
                Ok(list) => list,
                Err(e) => {
                    tracing::warn!(error = %e, "approvals stream: the list could not be read; closing it so the client reconnects");
                    return None;
                }
            };
            let out = diff(&mut self.known, now);
            if !out.is_empty() {
                self.quiet_since = tokio::time::Instant::now();
                return Some(Bytes::from(out));
            }
            if self.quiet_since.elapsed() >= self.keepalive {
                self.quiet_since = tokio::time::Instant::now();
                return Some(Bytes::from_static(b": ping\n\n"));
            }
        }
    }
}

/// Frames taking the client from `known` to `now` (new ones oldest first, so a client
/// putting each on top shows the newest first), and remembers `now`.
fn diff(known: &mut HashMap<(Uuid, Uuid), WaitingApproval>, now: Vec<WaitingApproval>) -> Vec<u8> {
    let mut out = Vec::new();
    let now: HashMap<_, _> = now.into_iter().map(|a| (key(&a), a)).collect();
    for k in known.keys().filter(|k| !now.contains_key(*k)) {
        out.extend_from_slice(&frame(
            "approval_resolved",
            &ApprovalResolved {
                session_id: k.0,
                run_id: k.1,
            },
        ));
    }
    let mut fresh: Vec<&WaitingApproval> = now
        .iter()
        .filter(|(k, a)| known.get(*k) != Some(*a))
        .map(|(_, a)| a)
        .collect();
    fresh.sort_by(|a, b| a.created_at.cmp(&b.created_at));
    for a in fresh {
        let kind = if known.contains_key(&key(a)) {
            "approval_updated"
        } else {
            "approval_requested"
        };
        out.extend_from_slice(&frame(kind, a));
    }
    *known = now;
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn approval(calls: &[&str], at: &str) -> WaitingApproval {
        WaitingApproval {
            session_id: Uuid::now_v7(),
            session_title: "s".into(),
            backend: None,
            run_id: Uuid::now_v7(),
            tool_calls: calls
                .iter()
                .map(|id| switchboard_protocol::ToolCall {
                    id: (*id).into(),
                    name: "run_command".into(),
                    arguments: serde_json::json!({}),
                    metadata: None,
                })
                .collect(),
            created_at: at.into(),
            expires_at: at.into(),
        }
    }

    fn kinds(bytes: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(bytes)
            .lines()
            .filter_map(|l| l.strip_prefix("event: ").map(str::to_string))
            .collect()
    }

    #[test]
    fn diff_tells_new_changed_and_gone_approvals() {
        let (a, b) = (approval(&["1", "2"], "t1"), approval(&["3"], "t2"));
        let mut known: HashMap<_, _> = [(key(&a), a.clone())].into();
        let mut step = |now: Vec<WaitingApproval>| kinds(&diff(&mut known, now));
        assert_eq!(step(vec![a.clone(), b.clone()]), ["approval_requested"]);
        let mut a2 = a.clone();
        a2.tool_calls.remove(0);
        assert_eq!(step(vec![a2.clone(), b.clone()]), ["approval_updated"]);
        assert!(step(vec![a2.clone(), b.clone()]).is_empty());
        assert_eq!(step(vec![b.clone()]), ["approval_resolved"]);
        assert_eq!(step(vec![]), ["approval_resolved"]);
    }

    #[test]
    fn new_approvals_come_oldest_first() {
        let (a, b) = (
            approval(&["1"], "2026-01-01T00:00:02Z"),
            approval(&["2"], "2026-01-01T00:00:01Z"),
        );
        let out = String::from_utf8(diff(&mut HashMap::new(), vec![a.clone(), b.clone()])).unwrap();
        assert!(
            out.find(&b.run_id.to_string()).unwrap() < out.find(&a.run_id.to_string()).unwrap()
        );
    }
}
