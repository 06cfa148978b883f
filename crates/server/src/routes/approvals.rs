//! `/v1/approvals`: every approval waiting for a human, across sessions, and a stream of
//! their changes (the console's inbox). Decisions still go to
//! `POST /v1/sessions/{id}/tools/decisions`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use futures::StreamExt as _;
use switchboard_engine::Engine;
use switchboard_protocol::{
    ApprovalResolved, ApprovalsResponse, ErrorBody, ErrorCode, WaitingApproval,
};
use tokio::sync::watch;
use uuid::Uuid;

use crate::extract::Caller;
use crate::{ApiError, AppState};
use switchboard_engine::team::ApprovalRule;
use switchboard_protocol::people::Principal;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/approvals", get(list))
        .route("/v1/approvals/events", get(events))
}

/// Every approval waiting for a decision, in any session, newest first: the undecided
/// calls, the session's title and backend, and when the wait fails closed (`expires_at`:
/// the calls are then rejected unanswered).
#[utoipa::path(get, path = "/v1/approvals", tag = "tools", security(("bearer" = ["sessions:read"])),
    responses((status = 200, body = ApprovalsResponse),
              (status = 503, description = "`store_unavailable` (`Retry-After`)", body = ErrorBody)))]
pub async fn list(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<ApprovalsResponse>, ApiError> {
    let mut approvals = state.engine.waiting_approvals().await?;
    let rules = &state.engine.config().approval_rules;
    approvals.retain(|a| visible(rules, &p, a));
    Ok(Json(ApprovalsResponse { approvals }))
}

/// Whether `p` is shown a waiting approval: they see its session and may decide at least
/// one of its calls.
fn visible(rules: &[ApprovalRule], p: &Principal, a: &WaitingApproval) -> bool {
    if !switchboard_engine::team::may_see(p, a.owner.as_deref(), &a.shared_with) {
        return false;
    }
    if rules.is_empty() {
        return true;
    }
    let backend = match &a.backend {
        Some(switchboard_protocol::BackendSpec::Acp(name)) => name.as_str(),
        _ => "builtin",
    };
    a.tool_calls.iter().any(|c| {
        let facts = switchboard_engine::team::CallFacts {
            tool: &c.name,
            backend,
            mode: a.permission_mode.unwrap_or_default(),
            requested_by: a.requested_by.as_deref(),
        };
        switchboard_engine::team::may_decide(rules, p, &facts).is_ok()
    })
}

/// How long a change is left to settle before the list is read again: a burst of events
/// (a run's calls rejected one by one, many runs ending) costs one read.
const SETTLE: Duration = Duration::from_millis(50);
/// With a store shared by several instances, how often the list is read even without a
/// signal (a decision recorded on another instance sends none here).
const SHARED_RECHECK: Duration = Duration::from_secs(2);
/// Alone, how often it is read anyway (a change that sends no signal: a session renamed).
const RECHECK: Duration = Duration::from_secs(15);
/// How long a new stream waits for the first read before answering 503.
const FIRST_READ: Duration = Duration::from_secs(5);

type Snapshot = Option<Arc<Vec<WaitingApproval>>>;

/// The waiting approvals as one task of the server reads them: once per change (after
/// [`SETTLE`]) and every so often, whatever the number of streams open. Started by the first
/// stream; `None` until its first read succeeds. A failed read keeps the last list.
#[derive(Clone, Default)]
pub struct ApprovalsFeed(Arc<OnceLock<watch::Receiver<Snapshot>>>);

impl ApprovalsFeed {
    fn subscribe(&self, engine: &Engine) -> watch::Receiver<Snapshot> {
        self.0
            .get_or_init(|| {
                let (tx, rx) = watch::channel(None);
                let recheck = if engine.config().exclusive {
                    RECHECK
                } else {
                    SHARED_RECHECK
                };
                tokio::spawn(read_loop(engine.clone(), tx, recheck));
                rx
            })
            .clone()
    }
}

async fn read_loop(engine: Engine, tx: watch::Sender<Snapshot>, recheck: Duration) {
    let mut changed = engine.approvals_changed();
    let closed = engine.closed();
    loop {
        let wait = match engine.waiting_approvals().await {
            Ok(list) => {
                tx.send_if_modified(|cur| {
                    let same = cur.as_deref() == Some(&list);
                    if !same {
                        *cur = Some(Arc::new(list));
                    }
                    !same
                });
                recheck
            }
            Err(e) => {
                tracing::warn!(error = %e, "the waiting approvals could not be read; trying again");
                Duration::from_secs(1)
            }
        };
        tokio::select! {
            _ = closed.cancelled() => return,
            r = changed.changed() => {
                if r.is_err() {
                    return;
                }
                tokio::time::sleep(SETTLE).await;
                changed.borrow_and_update();
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}

/// The waiting approvals as Server-Sent Events. Every connection starts with a `snapshot`
/// frame (`ApprovalsResponse`: the whole list), so a client that reconnects needs no
/// `Last-Event-ID`; then `approval_requested` (`WaitingApproval`) when one starts waiting,
/// `approval_updated` (`WaitingApproval`, its remaining calls) when some of its calls were
/// decided, and `approval_resolved` (`ApprovalResolved`) when it no longer waits (decided,
/// timed out, cancelled, or its session deleted). `: ping` comments keep the connection
/// alive.
#[utoipa::path(get, path = "/v1/approvals/events", tag = "tools", security(("bearer" = ["sessions:read"])),
    responses((status = 200, description = "SSE frames: `snapshot` (data: `ApprovalsResponse`), then `approval_requested` and `approval_updated` (data: `WaitingApproval`) and `approval_resolved` (data: `ApprovalResolved`)", content_type = "text/event-stream", body = switchboard_protocol::SseFrame),
              (status = 429, description = "`too_many_streams`: this token holds as many event streams as allowed (`Retry-After`)", body = ErrorBody),
              (status = 503, description = "`store_unavailable` (`Retry-After`)", body = ErrorBody)))]
pub async fn events(
    State(state): State<AppState>,
    Caller(p): Caller,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let slot = state.streams.take(&headers)?;
    let mut feed = state.approvals.subscribe(&state.engine);
    let first = match tokio::time::timeout(FIRST_READ, feed.wait_for(Option::is_some)).await {
        Ok(Ok(list)) => mine(
            &state.engine.config().approval_rules,
            &p,
            &list.clone().unwrap_or_default(),
        ),
        _ => {
            return Err(ApiError::new(
                ErrorCode::StoreUnavailable,
                "the waiting approvals cannot be read now; retry shortly",
            )
            .with_retry_after(2));
        }
    };
    feed.borrow_and_update();
    let snapshot = frame(
        "snapshot",
        &ApprovalsResponse {
            approvals: first.to_vec(),
        },
    );
    let mut known: HashMap<(Uuid, Uuid), WaitingApproval> =
        first.iter().map(|a| (key(a), a.clone())).collect();
    let keepalive = state.config.keepalive;
    let closed = state.engine.closed();
    let rules = Arc::new(state.engine.config().approval_rules.clone());
    let gauge = super::metrics::SubscriberGauge::up();
    let rest = futures::stream::unfold(Some(feed), move |feed| {
        let closed = closed.clone();
        let p = p.clone();
        let rules = rules.clone();
        async move {
            let mut feed = feed?;
            tokio::select! {
                _ = closed.cancelled() => None,
                r = feed.changed() => {
                    r.ok()?;
                    let now = feed.borrow_and_update().clone().unwrap_or_default();
                    Some((Some(mine(&rules, &p, &now)), Some(feed)))
                }
                _ = tokio::time::sleep(keepalive) => Some((None, Some(feed))),
            }
        }
    })
    .filter_map(move |now| {
        let bytes = match now {
            Some(list) => {
                let out = diff(&mut known, &list);
                (!out.is_empty()).then(|| Bytes::from(out))
            }
            None => Some(Bytes::from_static(b": ping\n\n")),
        };
        futures::future::ready(bytes)
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

/// The approvals of `list` that `p` is shown (the whole list, shared, when that is all).
fn mine(
    rules: &[ApprovalRule],
    p: &Principal,
    list: &Arc<Vec<WaitingApproval>>,
) -> Arc<Vec<WaitingApproval>> {
    if switchboard_engine::team::sees_all(p) && rules.is_empty() {
        return list.clone();
    }
    Arc::new(
        list.iter()
            .filter(|a| visible(rules, p, a))
            .cloned()
            .collect(),
    )
}

fn key(a: &WaitingApproval) -> (Uuid, Uuid) {
    (a.session_id, a.run_id)
}

fn frame(kind: &str, data: &impl serde::Serialize) -> Bytes {
    let data = serde_json::to_string(data).unwrap_or_default();
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}

/// Frames taking the client from `known` to `now` (new ones oldest first, so a client
/// putting each on top shows the newest first), and remembers `now`. A run that waits again
/// on other calls between two reads is its first approval resolved and a new one requested.
fn diff(known: &mut HashMap<(Uuid, Uuid), WaitingApproval>, now: &[WaitingApproval]) -> Vec<u8> {
    let mut out = Vec::new();
    let now: HashMap<_, _> = now.iter().map(|a| (key(a), a)).collect();
    let another_wait = |old: &WaitingApproval, new: &WaitingApproval| {
        old.created_at != new.created_at
            || !new
                .tool_calls
                .iter()
                .any(|c| old.tool_calls.iter().any(|o| o.id == c.id))
    };
    for (k, old) in known.iter() {
        if now.get(k).is_none_or(|new| another_wait(old, new)) {
            out.extend_from_slice(&frame(
                "approval_resolved",
                &ApprovalResolved {
                    session_id: k.0,
                    run_id: k.1,
                },
            ));
        }
    }
    let mut fresh: Vec<(&str, &WaitingApproval)> = now
        .iter()
        .filter_map(|(k, a)| match known.get(k) {
            None => Some(("approval_requested", *a)),
            Some(old) if another_wait(old, a) => Some(("approval_requested", *a)),
            Some(old) if old != *a => Some(("approval_updated", *a)),
            Some(_) => None,
        })
        .collect();
    fresh.sort_by(|a, b| a.1.created_at.cmp(&b.1.created_at));
    for (kind, a) in fresh {
        out.extend_from_slice(&frame(kind, a));
    }
    *known = now.into_iter().map(|(k, a)| (k, a.clone())).collect();
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
            owner: None,
            shared_with: Vec::new(),
            requested_by: None,
            permission_mode: None,
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
        let mut step = |now: Vec<WaitingApproval>| kinds(&diff(&mut known, &now));
        assert_eq!(step(vec![a.clone(), b.clone()]), ["approval_requested"]);
        let mut a2 = a.clone();
        a2.tool_calls.remove(0);
        assert_eq!(step(vec![a2.clone(), b.clone()]), ["approval_updated"]);
        assert!(step(vec![a2.clone(), b.clone()]).is_empty());
        assert_eq!(step(vec![b.clone()]), ["approval_resolved"]);
        assert_eq!(step(vec![]), ["approval_resolved"]);
        // The same run waiting again on other calls: resolved, then requested anew.
        assert_eq!(step(vec![b.clone()]), ["approval_requested"]);
        let mut again = approval(&["4"], "t3");
        (again.session_id, again.run_id) = (b.session_id, b.run_id);
        assert_eq!(
            step(vec![again]),
            ["approval_resolved", "approval_requested"]
        );
    }

    #[test]
    fn new_approvals_come_oldest_first() {
        let (a, b) = (
            approval(&["1"], "2026-01-01T00:00:02Z"),
            approval(&["2"], "2026-01-01T00:00:01Z"),
        );
        let out = String::from_utf8(diff(&mut HashMap::new(), &[a.clone(), b.clone()])).unwrap();
        assert!(
            out.find(&b.run_id.to_string()).unwrap() < out.find(&a.run_id.to_string()).unwrap()
        );
    }
}
