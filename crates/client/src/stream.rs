//! The self-resuming SSE subscription behind [`crate::Client::subscribe`].
//!
//! A background tokio task holds the HTTP connection, parses frames with [`SseParser`] and
//! hands envelopes to the [`EventStream`] through a bounded channel, so a slow consumer stops
//! the task from reading (back-pressure) instead of letting memory grow. The task reconnects by
//! itself with `Last-Event-ID` set to the newest id it handed over, and drops every envelope
//! whose id is not newer, so replays at the seam never show up twice. Dropping the
//! [`EventStream`] aborts the task and closes the connection.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use switchboard_protocol::events::GAP_DETECTED_EVENT;
use switchboard_protocol::{EventEnvelope, GapDetected};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::{ClientError, error_chain};
use crate::sse::{SseFrame, SseParser};

/// Items buffered between the task and the consumer.
const CHANNEL_CAPACITY: usize = 256;
/// First reconnect delay.
const BACKOFF_INITIAL: Duration = Duration::from_millis(100);
/// Longest reconnect delay.
const BACKOFF_MAX: Duration = Duration::from_secs(5);
/// With no byte for this long (the server pings every 15 s) the connection is presumed dead.
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

type Item = Result<EventEnvelope, ClientError>;

/// What the task needs to (re)connect.
#[derive(Clone)]
pub(crate) struct Subscription {
    pub(crate) http: reqwest::Client,
    pub(crate) url: String,
    pub(crate) token: Option<Arc<str>>,
    /// Newest id handed over (or the caller's `after`).
    pub(crate) cursor: Option<u64>,
}

/// Reconnect delays: 100 ms doubling up to 5 s; reset after a connection that yielded.
#[derive(Debug)]
pub(crate) struct Backoff {
    next: Duration,
}

impl Backoff {
    pub(crate) fn new() -> Self {
        Self {
            next: BACKOFF_INITIAL,
        }
    }

    /// The delay to wait now; the following one doubles.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(BACKOFF_MAX);
        delay
    }

    pub(crate) fn reset(&mut self) {
        self.next = BACKOFF_INITIAL;
    }
}

/// Events of one session, in order, each once; see [`crate::Client::subscribe`].
///
/// Yields `Ok(envelope)` for each event, `Err(ClientError::Decode)` for a frame that did not
/// parse (the stream goes on), and one final `Err(ClientError::Api)` before ending when the
/// server refuses the subscription for good (401, 403, 404, 400...). Transient failures are
/// retried forever and never surface.
pub struct EventStream {
    state: State,
    last_event_id: u64,
}

enum State {
    /// Not started yet (no tokio runtime when `subscribe` was called).
    Idle(Box<Subscription>),
    Running {
        rx: mpsc::Receiver<Item>,
        task: JoinHandle<()>,
    },
    Done,
}

impl EventStream {
    pub(crate) fn new(sub: Subscription) -> Self {
        let last_event_id = sub.cursor.unwrap_or(0);
        let mut stream = Self {
            state: State::Idle(Box::new(sub)),
            last_event_id,
        };
        stream.try_start();
        stream
    }

    /// Id of the newest event yielded so far (or the `after` given to subscribe, or 0).
    pub fn last_event_id(&self) -> u64 {
        self.last_event_id
    }

    /// Spawns the task when a tokio runtime is at hand; returns whether it runs.
    fn try_start(&mut self) -> bool {
        if let State::Idle(_) = self.state {
            let Ok(handle) = tokio::runtime::Handle::try_current() else {
                return false;
            };
            if let State::Idle(sub) = std::mem::replace(&mut self.state, State::Done) {
                let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                let task = handle.spawn(run(*sub, tx));
                self.state = State::Running { rx, task };
            }
        }
        matches!(self.state, State::Running { .. })
    }
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = match self.state {
            State::Idle(_) => "idle",
            State::Running { .. } => "running",
            State::Done => "done",
        };
        f.debug_struct("EventStream")
            .field("state", &state)
            .field("last_event_id", &self.last_event_id)
            .finish()
    }
}

impl Stream for EventStream {
    type Item = Item;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Item>> {
        let this = self.get_mut();
        if matches!(this.state, State::Idle(_)) && !this.try_start() {
            this.state = State::Done;
            return Poll::Ready(Some(Err(ClientError::Transport(
                "EventStream polled outside a tokio runtime".into(),
            ))));
        }
        let State::Running { rx, .. } = &mut this.state else {
            return Poll::Ready(None);
        };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(item)) => {
                if let Ok(envelope) = &item {
                    this.last_event_id = envelope.id;
                }
                Poll::Ready(Some(item))
            }
            Poll::Ready(None) => {
                this.state = State::Done;
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        if let State::Running { task, .. } = &self.state {
            task.abort();
        }
    }
}

/// How one connection ended.
enum Ended {
    /// The consumer is gone: stop.
    ConsumerGone,
    /// Reconnect; `yielded` says whether the connection handed anything over.
    Reconnect { yielded: bool, reason: String },
}

/// The task: connect, pump, back off, repeat; ends on a permanent error or a gone consumer.
async fn run(mut sub: Subscription, tx: mpsc::Sender<Item>) {
    let mut backoff = Backoff::new();
    loop {
        match connect(&sub).await {
            Ok(resp) => match pump(resp, &mut sub, &tx).await {
                Ended::ConsumerGone => return,
                Ended::Reconnect { yielded, reason } => {
                    if yielded {
                        backoff.reset();
                    }
                    tracing::debug!(url = %sub.url, %reason, "event stream ended; reconnecting");
                }
            },
            Err(err) if err.is_transient() => {
                tracing::warn!(url = %sub.url, error = %err, "event stream connect failed; retrying");
            }
            Err(err) => {
                tracing::warn!(url = %sub.url, error = %err, "event stream refused; giving up");
                let _ = tx.send(Err(err)).await;
                return;
            }
        }
        if tx.is_closed() {
            return;
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// Opens the SSE request; a non-2xx answer is an error.
async fn connect(sub: &Subscription) -> Result<reqwest::Response, ClientError> {
    let mut req = sub
        .http
        .get(&sub.url)
        .header(reqwest::header::ACCEPT, "text/event-stream")
        .header(reqwest::header::CACHE_CONTROL, "no-cache");
    if let Some(token) = &sub.token {
        req = req.bearer_auth(token);
    }
    if let Some(cursor) = sub.cursor {
        req = req.header("Last-Event-ID", cursor.to_string());
    }
    let resp = req
        .send()
        .await
        .map_err(|e| ClientError::from_reqwest(&e))?;
    if resp.status().is_success() {
        Ok(resp)
    } else {
        Err(ClientError::from_response(resp).await)
    }
}

/// Reads one connection until it ends, handing envelopes to `tx`.
async fn pump(resp: reqwest::Response, sub: &mut Subscription, tx: &mpsc::Sender<Item>) -> Ended {
    let mut body = resp.bytes_stream();
    let mut parser = SseParser::default();
    let mut yielded = false;
    loop {
        let chunk = match tokio::time::timeout(IDLE_TIMEOUT, body.next()).await {
            Err(_) => {
                return Ended::Reconnect {
                    yielded,
                    reason: "idle timeout".into(),
                };
            }
            Ok(None) => {
                return Ended::Reconnect {
                    yielded,
                    reason: "body ended".into(),
                };
            }
            Ok(Some(Err(err))) => {
                return Ended::Reconnect {
                    yielded,
                    reason: error_chain(&err),
                };
            }
            Ok(Some(Ok(chunk))) => chunk,
        };
        if let Err(err) = parser.feed(&chunk) {
            if tx
                .send(Err(ClientError::Decode(err.to_string())))
                .await
                .is_err()
            {
                return Ended::ConsumerGone;
            }
            return Ended::Reconnect {
                yielded,
                reason: err.to_string(),
            };
        }
        while let Some(frame) = parser.next_frame() {
            let Some(item) = handle_frame(frame, &mut sub.cursor) else {
                continue;
            };
            yielded |= item.is_ok();
            if tx.send(item).await.is_err() {
                return Ended::ConsumerGone;
            }
        }
    }
}

/// What to hand over for one frame, if anything; advances `cursor` past a yielded envelope.
pub(crate) fn handle_frame(frame: SseFrame, cursor: &mut Option<u64>) -> Option<Item> {
    if frame.event.as_deref() == Some(GAP_DETECTED_EVENT) {
        match serde_json::from_str::<GapDetected>(&frame.data) {
            Ok(gap) => tracing::warn!(
                requested_after_id = gap.requested_after_id,
                oldest_available_id = gap.oldest_available_id,
                newest_available_id = gap.newest_available_id,
                "events were lost: the server no longer retains some requested events"
            ),
            Err(err) => tracing::warn!(error = %err, "unparsable gap_detected frame"),
        }
        return None;
    }
    if frame.data.trim().is_empty() {
        tracing::debug!(event = ?frame.event, "ignoring SSE frame with empty data");
        return None;
    }
    match serde_json::from_str::<EventEnvelope>(&frame.data) {
        Ok(envelope) => {
            if cursor.is_some_and(|last| envelope.id <= last) {
                tracing::trace!(id = envelope.id, "dropping already seen event");
                return None;
            }
            *cursor = Some(envelope.id);
            Some(Ok(envelope))
        }
        Err(err) => Some(Err(ClientError::Decode(format!(
            "SSE frame (event {:?}, id {:?}) is not an event envelope: {err}",
            frame.event, frame.id
        )))),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn envelope_frame(id: u64) -> SseFrame {
        let data = serde_json::json!({
            "id": id,
            "session_id": "00000000-0000-0000-0000-000000000000",
            "run_id": null,
            "timestamp": "2026-01-01T00:00:00Z",
            "event": {"RunStarted": {"run_id": "00000000-0000-0000-0000-000000000000"}},
        });
        SseFrame {
            id: Some(id.to_string()),
            event: Some("run_started".into()),
            data: data.to_string(),
        }
    }

    #[test]
    fn backoff_doubles_caps_and_resets() {
        let mut b = Backoff::new();
        let delays: Vec<u64> = (0..8).map(|_| b.next_delay().as_millis() as u64).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(100));
    }

    #[test]
    fn duplicates_and_old_events_are_dropped() {
        let mut cursor = Some(3);
        assert!(handle_frame(envelope_frame(2), &mut cursor).is_none());
        assert!(handle_frame(envelope_frame(3), &mut cursor).is_none());
        assert!(matches!(handle_frame(envelope_frame(4), &mut cursor), Some(Ok(e)) if e.id == 4));
        assert_eq!(cursor, Some(4));
        assert!(handle_frame(envelope_frame(4), &mut cursor).is_none());
        let mut none = None;
        assert!(matches!(
            handle_frame(envelope_frame(0), &mut none),
            Some(Ok(_))
        ));
        assert_eq!(none, Some(0));
    }

    #[test]
    fn gap_and_bad_frames() {
        let mut cursor = None;
        let gap = SseFrame {
            id: None,
            event: Some("gap_detected".into()),
            data: r#"{"requested_after_id":1,"oldest_available_id":5,"newest_available_id":9}"#
                .into(),
        };
        assert!(handle_frame(gap, &mut cursor).is_none());
        let bad = SseFrame {
            id: Some("1".into()),
            event: None,
            data: "{nope".into(),
        };
        assert!(matches!(
            handle_frame(bad, &mut cursor),
            Some(Err(ClientError::Decode(_)))
        ));
        assert_eq!(cursor, None);
    }
}
