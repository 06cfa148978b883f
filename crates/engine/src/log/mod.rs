//! The durable event log and its live fan-out.
//!
//! Appending hands events to one writer task, which assigns each session's next `seq`s,
//! commits whatever has accumulated in one transaction (group commit) and only then
//! publishes the events on the session's live channel, in `seq` order: no subscriber ever
//! sees an event that is not stored. An append either waits for its commit (and gets its
//! seqs) or is pipelined ([`Pipeline`], a run's text and thought deltas): queued without
//! waiting, so a model streams as fast as the store commits batches, not as fast as it
//! commits one event. A [`Subscription`] subscribes to the live channel first, then replays
//! `seq > n` from the store, then follows live events, dropping anything at or below the
//! last `seq` it yielded: no gap and no duplicate at the seam. A subscriber that falls
//! behind the bounded live channel is told so by the channel and goes back to reading the
//! store, so a slow reader never makes memory grow.

use parking_lot::Mutex as SyncMutex;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use switchboard_protocol::{AgentEvent, GapDetected};
use switchboard_store::{Lease, NewEvent, RunFinish, Store, StoreError, StoredEvent};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use crate::error::EngineError;
use crate::time::now_rfc3339;

mod pipeline;
mod subscription;
mod writer;

/// An event as stored and as fanned out: the payload stays serialized JSON, so fan-out and
/// SSE framing never re-encode it.
pub type LogEvent = StoredEvent;

/// Most events committed in one transaction by the writer.
const MAX_BATCH: usize = 1024;
/// Events read from the store per replay page.
const REPLAY_PAGE: u32 = 2000;
/// Events taken from the live channel per batch.
const LIVE_BATCH: usize = 512;

/// Events committed together for one session, shared by every live subscriber, with a slot
/// where a surface can keep its wire encoding so that it encodes the batch once, not once
/// per subscriber.
#[derive(Debug)]
pub struct SharedBatch {
    events: Vec<LogEvent>,
    encoded: OnceLock<bytes::Bytes>,
}

impl SharedBatch {
    fn new(events: Vec<LogEvent>) -> Arc<Self> {
        Arc::new(Self {
            events,
            encoded: OnceLock::new(),
        })
    }
}

/// A run of consecutive events out of one [`SharedBatch`].
#[derive(Debug, Clone)]
struct Segment {
    batch: Arc<SharedBatch>,
    /// Events before this index were already yielded (the replay/live seam).
    start: usize,
}

impl Segment {
    fn events(&self) -> &[LogEvent] {
        &self.batch.events[self.start..]
    }
}

/// Events yielded by one [`Subscription::next`]: ascending seq, no gaps and no repeats.
#[derive(Debug, Clone, Default)]
pub struct EventBatch {
    segments: Vec<Segment>,
}

impl EventBatch {
    fn push(&mut self, batch: Arc<SharedBatch>, start: usize) {
        if start < batch.events.len() {
            self.segments.push(Segment { batch, start });
        }
    }

    /// The events, in order.
    pub fn iter(&self) -> impl Iterator<Item = &LogEvent> {
        self.segments.iter().flat_map(|s| s.events().iter())
    }

    pub fn len(&self) -> usize {
        self.segments.iter().map(|s| s.events().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Encodes the events with `encode`, reusing (and filling) the encoding cached on each
    /// shared batch that is yielded whole; with many subscribers on a session, every batch
    /// is encoded once and its bytes are shared, not copied. Returns one part per segment,
    /// in order. `encode` must be a pure function of the events, the same for every caller
    /// that shares this log.
    pub fn encode_parts(&self, encode: impl Fn(&[LogEvent]) -> bytes::Bytes) -> Vec<bytes::Bytes> {
        self.segments
            .iter()
            .map(|s| {
                if s.start == 0 {
                    s.batch
                        .encoded
                        .get_or_init(|| encode(&s.batch.events))
                        .clone()
                } else {
                    encode(s.events())
                }
            })
            .collect()
    }
}

/// An event handed to the writer, before it has a seq.
#[derive(Debug)]
struct Pending {
    kind: &'static str,
    run_id: Option<Uuid>,
    body: Body,
}

#[derive(Debug)]
enum Body {
    /// The event, serialized.
    Json(String),
    /// A pipelined text or thought delta, kept as text so that consecutive deltas of one
    /// run that fall into one commit can be stored as one event; serialized by the writer.
    Delta { thought: bool, text: String },
}

/// Where the outcome of a write goes.
enum Reply {
    /// The appender waits for the commit and the seqs it got.
    Wait(oneshot::Sender<Result<Vec<u64>, StoreError>>),
    /// Pipelined: the appender did not wait. A failure is kept in the pipeline, and the
    /// pipeline's later requests are dropped unwritten (see [`Pipeline`]).
    Pipe(Arc<PipeState>),
}

struct WriteReq {
    session_id: Uuid,
    /// Written atomically, with consecutive seqs. Empty for a barrier ([`Pipeline::flush`]).
    events: Vec<Pending>,
    /// The run lease the events are written under, checked in the same transaction.
    fence: Option<Lease>,
    /// A run closed in the same transaction (the events are its terminal event).
    finish: Option<RunFinish>,
    reply: Reply,
}

/// A pipeline's shared state: the first failure of one of its writes.
#[derive(Default)]
struct PipeState {
    failed: OnceLock<StoreError>,
}

type Channels = Arc<SyncMutex<HashMap<Uuid, broadcast::Sender<Arc<SharedBatch>>>>>;
type BusSlot = Arc<OnceLock<Arc<dyn crate::EventBus>>>;
/// Highest seq stored per session, as the writer knows it (it is the only one here that
/// assigns seqs). A missing entry is read from the store before the next write.
type Seqs = Arc<SyncMutex<HashMap<Uuid, u64>>>;

/// With a bus, a subscription that has heard nothing for this long reads the store, so a
/// batch the bus lost is seen within about this delay.
const BUS_POLL: std::time::Duration = std::time::Duration::from_millis(1000);

/// Requests the writer's queue holds before appenders wait (back-pressure): with pipelined
/// deltas this bounds the memory a model faster than the store can take.
const QUEUE: usize = 4096;

/// The event log: append, subscribe, read.
#[derive(Clone)]
pub struct EventLog {
    store: Arc<dyn Store>,
    /// Queue of the single writer task, in order; bounded, so appenders feel back-pressure.
    writer: mpsc::Sender<WriteReq>,
    seqs: Seqs,
    /// Live channels; bounded rings of committed batches shared by all subscribers of a
    /// session.
    channels: Channels,
    live_buffer: usize,
    /// Set once when the instance shares its store with others.
    bus: BusSlot,
    /// Bumped whenever what waits for approval may have changed (see [`ApprovalSignal`]).
    approvals: ApprovalSignal,
}

/// A counter bumped when an event that starts or ends an approval's wait is published
/// here, committed by this instance or injected from another one
/// (`waiting_for_tool_approval`, `tool_execution_started`, `tool_rejected`, a run's end),
/// and when a decision is recorded. Watchers re-read the waiting approvals from the store:
/// the signal carries no data, so a missed or doubled bump costs a read, never a change.
#[derive(Clone, Default)]
pub struct ApprovalSignal(Arc<tokio::sync::watch::Sender<u64>>);

impl ApprovalSignal {
    pub fn bump(&self) {
        self.0.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Bumps if one of `events` starts or ends an approval's wait.
    pub(crate) fn bump_for(&self, events: &[LogEvent]) {
        if events.iter().any(|e| {
            matches!(
                e.kind.as_str(),
                "waiting_for_tool_approval"
                    | "tool_execution_started"
                    | "tool_rejected"
                    | "run_completed"
                    | "run_error"
            )
        }) {
            self.bump();
        }
    }

    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.subscribe()
    }
}

/// A stream of events one writer appends to one session without waiting for each commit
/// (a run's text and thought deltas).
///
/// [`Pipeline::send`] returns once the event is queued for the writer (it waits only when
/// the writer's queue is full: back-pressure, not memory growth). The writer commits what
/// has accumulated as one transaction and publishes after the commit, as for every append,
/// so no subscriber ever sees an event that is not stored. Consecutive deltas of one kind
/// that fall into one commit are stored as one event, their text concatenated in order.
///
/// If one of its writes fails, the failure is kept, every later write of the pipeline is
/// dropped unwritten (the log holds a prefix of what was sent, never a gap inside it), and
/// the next [`Pipeline::send`] or [`Pipeline::flush`] returns the error. Events appended
/// any other way after a `send` are written after it (the writer's queue is in order).
#[derive(Clone)]
pub struct Pipeline {
    log: EventLog,
    session_id: Uuid,
    fence: Option<Lease>,
    state: Arc<PipeState>,
}

fn engine_error(session_id: Uuid, e: StoreError) -> EngineError {
    match e {
        StoreError::NotFound(_) => EngineError::SessionNotFound(session_id),
        StoreError::Conflict(_) => EngineError::Internal(format!(
            "session {session_id}: event seq kept colliding with another writer"
        )),
        e => e.into(),
    }
}

impl EventLog {
    /// Starts the writer task. Must be called inside a tokio runtime. `live_buffer` is the
    /// number of committed batches (each at most 1,024 events) a session's live ring holds
    /// before a reader that lags behind it goes back to reading the store.
    pub fn new(store: Arc<dyn Store>, live_buffer: usize) -> Self {
        let (tx, rx) = mpsc::channel::<WriteReq>(QUEUE);
        let channels: Channels = Arc::default();
        let bus: BusSlot = Arc::default();
        let seqs: Seqs = Arc::default();
        let approvals = ApprovalSignal::default();
        tokio::spawn(
            Writer {
                store: store.clone(),
                seqs: seqs.clone(),
                channels: channels.clone(),
                bus: bus.clone(),
                approvals: approvals.clone(),
            }
            .run(rx),
        );
        Self {
            store,
            writer: tx,
            seqs,
            channels,
            live_buffer: live_buffer.max(crate::MIN_LIVE_BUFFER),
            bus,
            approvals,
        }
    }

    /// Bumped whenever what waits for approval may have changed.
    pub fn approval_signal(&self) -> &ApprovalSignal {
        &self.approvals
    }

    /// Publishes every committed batch on `bus` from now on (set once; later calls are
    /// ignored), and makes subscriptions check the store when the bus is quiet.
    pub fn attach_bus(&self, bus: Arc<dyn crate::EventBus>) {
        let _ = self.bus.set(bus);
    }

    /// The bus, when one is attached.
    pub fn bus(&self) -> Option<&Arc<dyn crate::EventBus>> {
        self.bus.get()
    }

    /// Delivers a batch another instance committed to this instance's live subscribers
    /// (if any), and moves the session's seq counter past it. Events must be committed and
    /// in ascending seq; duplicates and out-of-order batches are harmless.
    pub fn inject(&self, session_id: Uuid, events: Vec<LogEvent>) {
        let Some(top) = events.last().map(|e| e.seq) else {
            return;
        };
        self.approvals.bump_for(&events);
        if let Some(last) = self.seqs.lock().get_mut(&session_id) {
            // Our next append would collide with these: start above them.
            *last = (*last).max(top);
        }
        let map = self.channels.lock();
        if let Some(tx) = map.get(&session_id) {
            let _ = tx.send(SharedBatch::new(events));
        }
    }

    /// A live receiver of the session's batches: the session's channel is made on its first
    /// subscriber and dropped with its last ([`Subscription`]'s `Drop`), both under the map's
    /// lock, so a session nobody follows holds no buffer (10,000 idle sessions, each followed
    /// once, kept 77 MiB of channels before) and a writer finds no channel to send to.
    fn receiver(&self, session_id: Uuid) -> broadcast::Receiver<Arc<SharedBatch>> {
        let mut map = self.channels.lock();
        map.entry(session_id)
            .or_insert_with(|| broadcast::channel(self.live_buffer).0)
            .subscribe()
    }

    /// Sessions with a live subscriber on this instance (each has a channel).
    pub fn live_sessions(&self) -> usize {
        self.channels.lock().len()
    }

    /// A pipeline for one writer's stream of deltas into a session, under `fence`.
    pub fn pipeline(&self, session_id: Uuid, fence: Option<&Lease>) -> Pipeline {
        Pipeline {
            log: self.clone(),
            session_id,
            fence: fence.cloned(),
            state: Arc::default(),
        }
    }

    /// Appends one event durably and returns its seq. Returns after the commit; live
    /// subscribers see it after that.
    pub async fn append(&self, session_id: Uuid, event: &AgentEvent) -> Result<u64, EngineError> {
        self.append_fenced(session_id, event, None).await
    }

    /// [`EventLog::append`] under a run's lease: refused ([`StoreError::Fenced`]) once another
    /// instance has taken the run over.
    pub async fn append_fenced(
        &self,
        session_id: Uuid,
        event: &AgentEvent,
        fence: Option<&Lease>,
    ) -> Result<u64, EngineError> {
        let seqs = self
            .append_many_fenced(session_id, std::slice::from_ref(event), fence)
            .await?;
        seqs.first()
            .copied()
            .ok_or_else(|| EngineError::Internal("append lost its event".into()))
    }

    /// Appends several events of one session atomically, in order, with consecutive seqs.
    ///
    /// Another process may append to the same session (several instances sharing one
    /// database): its seqs make ours collide, which the store reports as a conflict. Then
    /// the writer reads the session's last seq again and gives the events new seqs, so
    /// seqs stay unique and increasing across every writer.
    pub async fn append_many(
        &self,
        session_id: Uuid,
        events: &[AgentEvent],
    ) -> Result<Vec<u64>, EngineError> {
        self.append_many_fenced(session_id, events, None).await
    }

    /// Appends a run's terminal event and closes the run in the same transaction: no
    /// reader sees the event while the run still counts as running, and no crash leaves a
    /// closed run without its terminal event. A run that is no longer active is
    /// [`StoreError::RunNotActive`] (wrapped in [`EngineError::Store`]), and nothing is
    /// written.
    pub async fn append_finishing(
        &self,
        session_id: Uuid,
        event: &AgentEvent,
        finish: RunFinish,
        fence: Option<&Lease>,
    ) -> Result<u64, EngineError> {
        let seqs = self
            .write(
                session_id,
                encode(std::slice::from_ref(event))?,
                fence,
                Some(finish),
            )
            .await?;
        seqs.first()
            .copied()
            .ok_or_else(|| EngineError::Internal("append lost its event".into()))
    }

    /// [`EventLog::append_many`] under a run's lease.
    pub async fn append_many_fenced(
        &self,
        session_id: Uuid,
        events: &[AgentEvent],
        fence: Option<&Lease>,
    ) -> Result<Vec<u64>, EngineError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        self.write(session_id, encode(events)?, fence, None).await
    }

    async fn write(
        &self,
        session_id: Uuid,
        events: Vec<Pending>,
        fence: Option<&Lease>,
        finish: Option<RunFinish>,
    ) -> Result<Vec<u64>, EngineError> {
        let (tx, rx) = oneshot::channel();
        self.writer
            .send(WriteReq {
                session_id,
                events,
                fence: fence.cloned(),
                finish,
                reply: Reply::Wait(tx),
            })
            .await
            .map_err(|_| EngineError::ShuttingDown)?;
        match rx.await {
            Ok(Ok(seqs)) => {
                metrics::counter!("switchboard_events_appended_total").increment(seqs.len() as u64);
                Ok(seqs)
            }
            Ok(Err(e)) => {
                metrics::counter!("switchboard_store_errors_total", "op" => "append").increment(1);
                Err(engine_error(session_id, e))
            }
            Err(_) => Err(EngineError::ShuttingDown),
        }
    }

    /// Forgets in-memory state of a deleted session; its subscribers end.
    pub fn forget(&self, session_id: Uuid) {
        self.seqs.lock().remove(&session_id);
        self.channels.lock().remove(&session_id);
    }

    /// Reads stored events with `seq > after`.
    pub async fn read(
        &self,
        session_id: Uuid,
        after: u64,
        limit: u32,
    ) -> Result<Vec<LogEvent>, EngineError> {
        Ok(self.store.read_events(session_id, after, limit).await?)
    }

    /// Follows a session's log from `seq > after`.
    pub async fn subscribe(
        &self,
        session_id: Uuid,
        after: u64,
    ) -> Result<Subscription, EngineError> {
        // Subscribe to live events *before* reading the store, so nothing committed after
        // this point can be missed; duplicates are dropped by seq. The subscription exists
        // from here on, so that a failed or abandoned read of the bounds still drops the
        // session's channel with it.
        let mut sub = Subscription {
            store: self.store.clone(),
            session_id,
            channels: self.channels.clone(),
            rx: Some(self.receiver(session_id)),
            last: after,
            replaying: true,
            pending_gap: None,
            poll: self.bus.get().map(|_| BUS_POLL),
            prefetch: None,
        };
        let bounds = self.store.event_bounds(session_id).await?;
        let oldest_available = bounds.oldest.unwrap_or(bounds.last_seq + 1);
        let gap = (after + 1 < oldest_available).then_some(GapDetected {
            requested_after_id: after,
            oldest_available_id: oldest_available,
            newest_available_id: bounds.newest.unwrap_or(bounds.last_seq),
        });
        // Skipping what was pruned: the client was told with the gap frame.
        if gap.is_some() {
            sub.last = oldest_available - 1;
        }
        sub.pending_gap = gap;
        Ok(sub)
    }
}

fn encode(events: &[AgentEvent]) -> Result<Vec<Pending>, EngineError> {
    events
        .iter()
        .map(|ev| {
            Ok(Pending {
                kind: ev.kind(),
                run_id: Some(ev.run_id()),
                body: Body::Json(
                    serde_json::to_string(ev)
                        .map_err(|e| EngineError::Internal(format!("encoding event: {e}")))?,
                ),
            })
        })
        .collect()
}

/// The single writer task. It owns seq assignment: a request gets its seqs when it is
/// written, so a failed write consumes none and seqs stay contiguous.
///
/// Invariants:
/// - requests are written in queue order, and a session's seqs follow that order;
/// - a batch is published (live channel, bus) only after its commit, and in seq order;
/// - a request's events are written in one transaction with its fence check and run end;
/// - a pipelined request after a failed one of the same pipeline is never written.
struct Writer {
    store: Arc<dyn Store>,
    seqs: Seqs,
    channels: Channels,
    bus: BusSlot,
    approvals: ApprovalSignal,
}

/// A request with the seqs it was written with, and its outcome.
struct Written {
    req: WriteReq,
    result: Result<Vec<NewEvent>, StoreError>,
}

/// What a subscription yields.
#[derive(Debug)]
pub enum SubItem {
    /// Events asked for are older than the retention window.
    Gap(GapDetected),
    /// Events in ascending seq, each greater than any yielded before.
    Events(EventBatch),
}

/// A live, resumable view of one session's log.
pub struct Subscription {
    store: Arc<dyn Store>,
    session_id: Uuid,
    /// The log's channels, for dropping the session's with its last subscriber.
    channels: Channels,
    /// The session's live batches; `None` only while the subscription is dropped.
    rx: Option<broadcast::Receiver<Arc<SharedBatch>>>,
    /// Highest seq yielded so far.
    last: u64,
    /// Reading from the store (at start and after falling behind).
    replaying: bool,
    pending_gap: Option<GapDetected>,
    /// With a bus: read the store after this long without a live batch.
    poll: Option<std::time::Duration>,
    /// The next replay page, read while the caller sends the current one.
    prefetch: Option<tokio::task::JoinHandle<Result<Vec<LogEvent>, StoreError>>>,
}
