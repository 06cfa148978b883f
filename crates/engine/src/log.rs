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

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, OnceLock};

use switchboard_protocol::{AgentEvent, GapDetected};
use switchboard_store::{Lease, NewEvent, RunFinish, Store, StoreError, StoredEvent};
use tokio::sync::{broadcast, mpsc, oneshot};
use uuid::Uuid;

use crate::error::EngineError;
use crate::time::now_rfc3339;

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

/// How many times the writer retries a request whose seqs collided with another writer's.
const MAX_SEQ_RETRIES: u32 = 32;

/// Longest text a run of coalesced deltas grows to in one stored event (bytes).
const MAX_MERGED_DELTA: usize = 16 * 1024;

/// How long to wait before retrying after the `attempt`-th collision: random, up to a bound
/// that doubles with each attempt (from 0.2 ms to about 13 ms), so two writers racing for
/// the same seqs drift apart instead of colliding in lockstep.
fn collision_backoff(attempt: u32) -> std::time::Duration {
    let bound_us = 200u64 << attempt.min(6);
    std::time::Duration::from_micros(rand::random_range(0..bound_us))
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

impl Pending {
    /// The stored form with seq `seq`. Borrows, because a request whose write fails is
    /// written again with other seqs.
    fn encode(&self, session_id: Uuid, seq: u64, created_at: &str) -> Result<NewEvent, StoreError> {
        let payload = match &self.body {
            Body::Json(s) => s.clone(),
            Body::Delta { thought, text } => {
                let (run_id, delta) = (self.run_id.unwrap_or_default(), text.clone());
                let ev = if *thought {
                    AgentEvent::ThoughtDelta { run_id, delta }
                } else {
                    AgentEvent::TextDelta { run_id, delta }
                };
                serde_json::to_string(&ev)
                    .map_err(|e| StoreError::Corrupt(format!("encoding event: {e}")))?
            }
        };
        Ok(NewEvent {
            session_id,
            seq,
            run_id: self.run_id,
            kind: self.kind.to_string(),
            payload,
            created_at: created_at.to_string(),
        })
    }
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

impl WriteReq {
    fn pipe(&self) -> Option<&Arc<PipeState>> {
        match &self.reply {
            Reply::Pipe(p) => Some(p),
            Reply::Wait(_) => None,
        }
    }

    /// Takes `next`'s delta into this request's last event when both are pipelined deltas
    /// of the same kind from one pipeline (so one run, one session, one fence).
    fn absorb(&mut self, next: &mut WriteReq) -> bool {
        let (Some(a), Some(b)) = (self.pipe(), next.pipe()) else {
            return false;
        };
        if !Arc::ptr_eq(a, b) || self.finish.is_some() || next.events.len() != 1 {
            return false;
        }
        let Some(Pending {
            run_id: run_a,
            body:
                Body::Delta {
                    thought: ta,
                    text: into,
                },
            ..
        }) = self.events.last_mut()
        else {
            return false;
        };
        let Some(Pending {
            run_id: run_b,
            body:
                Body::Delta {
                    thought: tb,
                    text: from,
                },
            ..
        }) = next.events.first_mut()
        else {
            return false;
        };
        if run_a != run_b || ta != tb || into.len() + from.len() > MAX_MERGED_DELTA {
            return false;
        }
        into.push_str(from);
        true
    }
}

/// A pipeline's shared state: the first failure of one of its writes.
#[derive(Default)]
struct PipeState {
    failed: OnceLock<StoreError>,
}

type Channels = Arc<StdMutex<HashMap<Uuid, broadcast::Sender<Arc<SharedBatch>>>>>;
type BusSlot = Arc<OnceLock<Arc<dyn crate::EventBus>>>;
/// Highest seq stored per session, as the writer knows it (it is the only one here that
/// assigns seqs). A missing entry is read from the store before the next write.
type Seqs = Arc<StdMutex<HashMap<Uuid, u64>>>;

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

impl Pipeline {
    /// Queues a text delta (`thought: false`) or a thought delta.
    pub async fn send(&self, run_id: Uuid, thought: bool, text: String) -> Result<(), EngineError> {
        self.check()?;
        let req = WriteReq {
            session_id: self.session_id,
            events: vec![Pending {
                kind: if thought {
                    "thought_delta"
                } else {
                    "text_delta"
                },
                run_id: Some(run_id),
                body: Body::Delta { thought, text },
            }],
            fence: self.fence.clone(),
            finish: None,
            reply: Reply::Pipe(self.state.clone()),
        };
        self.log
            .writer
            .send(req)
            .await
            .map_err(|_| EngineError::ShuttingDown)
    }

    /// Waits until everything sent so far is committed (or dropped after a failure), and
    /// returns the pipeline's failure if there was one.
    pub async fn flush(&self) -> Result<(), EngineError> {
        self.log
            .write(self.session_id, Vec::new(), None, None)
            .await?;
        self.check()
    }

    /// The pipeline's failure, if one of its writes failed.
    pub fn check(&self) -> Result<(), EngineError> {
        match self.state.failed.get() {
            None => Ok(()),
            Some(e) => Err(engine_error(self.session_id, e.clone())),
        }
    }
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
        tokio::spawn(
            Writer {
                store: store.clone(),
                seqs: seqs.clone(),
                channels: channels.clone(),
                bus: bus.clone(),
            }
            .run(rx),
        );
        Self {
            store,
            writer: tx,
            seqs,
            channels,
            live_buffer: live_buffer.max(16),
            bus,
        }
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
        if let Some(last) = self
            .seqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(&session_id)
        {
            // Our next append would collide with these: start above them.
            *last = (*last).max(top);
        }
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(&session_id) {
            let _ = tx.send(SharedBatch::new(events));
        }
    }

    fn sender(&self, session_id: Uuid) -> broadcast::Sender<Arc<SharedBatch>> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(session_id)
            .or_insert_with(|| broadcast::channel(self.live_buffer).0)
            .clone()
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
            Ok(Ok(seqs)) => Ok(seqs),
            Ok(Err(e)) => Err(engine_error(session_id, e)),
            Err(_) => Err(EngineError::ShuttingDown),
        }
    }

    /// Forgets in-memory state of a deleted session; its subscribers end.
    pub fn forget(&self, session_id: Uuid) {
        self.seqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session_id);
        self.channels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session_id);
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
        // this point can be missed; duplicates are dropped by seq.
        let rx = self.sender(session_id).subscribe();
        let bounds = self.store.event_bounds(session_id).await?;
        let oldest_available = bounds.oldest.unwrap_or(bounds.last_seq + 1);
        let gap = (after + 1 < oldest_available).then_some(GapDetected {
            requested_after_id: after,
            oldest_available_id: oldest_available,
            newest_available_id: bounds.newest.unwrap_or(bounds.last_seq),
        });
        // Skipping what was pruned: the client was told with the gap frame.
        let last = if gap.is_some() {
            oldest_available - 1
        } else {
            after
        };
        Ok(Subscription {
            store: self.store.clone(),
            session_id,
            rx,
            last,
            replaying: true,
            pending_gap: gap,
            poll: self.bus.get().map(|_| BUS_POLL),
            prefetch: None,
        })
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
}

/// A request with the seqs it was written with, and its outcome.
struct Written {
    req: WriteReq,
    result: Result<Vec<NewEvent>, StoreError>,
}

impl Writer {
    async fn run(self, mut rx: mpsc::Receiver<WriteReq>) {
        let mut reqs: Vec<WriteReq> = Vec::new();
        while let Some(first) = rx.recv().await {
            // Group commit: everything that accumulated while the last batch committed.
            let mut n = first.events.len();
            reqs.push(first);
            while n < MAX_BATCH {
                match rx.try_recv() {
                    Ok(r) => {
                        n += r.events.len();
                        reqs.push(r);
                    }
                    Err(_) => break,
                }
            }
            let written = self.write(coalesce(std::mem::take(&mut reqs))).await;
            self.finish(written);
        }
    }

    /// The session's highest seq, from the store when not known yet.
    async fn last_seq(&self, session_id: Uuid) -> Result<u64, StoreError> {
        let known = self
            .seqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&session_id)
            .copied();
        match known {
            Some(l) => Ok(l),
            None => {
                let l = self.store.event_bounds(session_id).await?.last_seq;
                let mut map = self.seqs.lock().unwrap_or_else(|p| p.into_inner());
                let e = map.entry(session_id).or_insert(l);
                *e = (*e).max(l);
                Ok(*e)
            }
        }
    }

    fn set_last(&self, session_id: Uuid, last: u64) {
        self.seqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(session_id, last);
    }

    fn drop_last(&self, session_id: Uuid) {
        self.seqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&session_id);
    }

    /// Writes a batch as one transaction; if that fails, each request on its own, so one
    /// bad request (say, for a session deleted meanwhile) fails alone.
    async fn write(&self, reqs: Vec<WriteReq>) -> Vec<Written> {
        // Seqs for every request, session by session, in queue order.
        let mut next: Vec<(Uuid, u64)> = Vec::new();
        let mut assigned: Vec<Option<Vec<NewEvent>>> = Vec::with_capacity(reqs.len());
        let created_at = now_rfc3339();
        let mut ok = true;
        for r in &reqs {
            if r.events.is_empty() {
                assigned.push(Some(Vec::new()));
                continue;
            }
            let last = match next.iter().find(|(s, _)| *s == r.session_id) {
                Some((_, l)) => *l,
                None => match self.last_seq(r.session_id).await {
                    Ok(l) => l,
                    Err(_) => {
                        ok = false;
                        break;
                    }
                },
            };
            let events = assign(&r.events, r.session_id, last, &created_at);
            match events {
                Ok(evs) => {
                    let top = last + evs.len() as u64;
                    match next.iter_mut().find(|(s, _)| *s == r.session_id) {
                        Some((_, l)) => *l = top,
                        None => next.push((r.session_id, top)),
                    }
                    assigned.push(Some(evs));
                }
                Err(_) => {
                    ok = false;
                    break;
                }
            }
        }
        if ok && reqs.len() > 1 {
            let counts: Vec<usize> = assigned
                .iter()
                .map(|a| a.as_ref().map_or(0, Vec::len))
                .collect();
            let mut all: Vec<NewEvent> = assigned.into_iter().flatten().flatten().collect();
            let mut fences: Vec<Lease> = reqs.iter().filter_map(|r| r.fence.clone()).collect();
            fences.sort_by(|a, b| a.name.cmp(&b.name));
            fences.dedup();
            let finishes: Vec<RunFinish> = reqs.iter().filter_map(|r| r.finish.clone()).collect();
            if self
                .store
                .write_events(&all, &fences, &finishes)
                .await
                .is_ok()
            {
                for (s, l) in next {
                    self.set_last(s, l);
                }
                let mut out = Vec::with_capacity(reqs.len());
                let mut rest = all.drain(..);
                for (req, n) in reqs.into_iter().zip(counts) {
                    out.push(Written {
                        req,
                        result: Ok(rest.by_ref().take(n).collect()),
                    });
                }
                return out;
            }
            // Whatever made it fail, the seqs it was given are free again: read them anew.
            for (s, _) in next {
                self.drop_last(s);
            }
        }
        let mut out = Vec::with_capacity(reqs.len());
        for req in reqs {
            let result = self.write_one(&req, &created_at).await;
            if let (Err(e), Some(p)) = (&result, req.pipe()) {
                // Later requests of this pipeline, in this batch too, are not written.
                let _ = p.failed.set(e.clone());
            }
            out.push(Written { req, result });
        }
        out
    }

    /// Writes one request in its own transaction, retrying seq collisions with another
    /// writer of the same database.
    async fn write_one(
        &self,
        req: &WriteReq,
        created_at: &str,
    ) -> Result<Vec<NewEvent>, StoreError> {
        if let Some(p) = req.pipe()
            && let Some(e) = p.failed.get()
        {
            return Err(e.clone());
        }
        if req.events.is_empty() {
            return Ok(Vec::new());
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let last = self.last_seq(req.session_id).await?;
            let events = assign(&req.events, req.session_id, last, created_at)?;
            let fence: &[Lease] = req.fence.as_slice();
            let finish: &[RunFinish] = req.finish.as_slice();
            match self.store.write_events(&events, fence, finish).await {
                Ok(()) => {
                    self.set_last(req.session_id, last + events.len() as u64);
                    return Ok(events);
                }
                Err(StoreError::Conflict(m)) => {
                    self.drop_last(req.session_id);
                    if attempt >= MAX_SEQ_RETRIES {
                        return Err(StoreError::Conflict(m));
                    }
                    // Blocks the writer for this long: collisions happen only between
                    // instances writing one session at once, and back off quickly.
                    tokio::time::sleep(collision_backoff(attempt)).await;
                }
                Err(e) => {
                    self.drop_last(req.session_id);
                    return Err(e);
                }
            }
        }
    }

    /// Answers every request and publishes what was committed: one shared batch per
    /// session, in seq order.
    fn finish(&self, written: Vec<Written>) {
        let mut by_session: Vec<(Uuid, Vec<LogEvent>)> = Vec::new();
        for Written { req, result } in written {
            let result = match result {
                Ok(events) => {
                    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
                    if let Some(first) = events.first() {
                        let sid = first.session_id;
                        match by_session.iter_mut().find(|(s, _)| *s == sid) {
                            Some((_, v)) => v.extend(events),
                            None => by_session.push((sid, events)),
                        }
                    }
                    Ok(seqs)
                }
                Err(e) => {
                    tracing::warn!(session_id = %req.session_id, error = %e, "event append failed");
                    Err(e)
                }
            };
            match req.reply {
                Reply::Wait(tx) => {
                    let _ = tx.send(result);
                }
                Reply::Pipe(state) => {
                    if let Err(e) = result {
                        let _ = state.failed.set(e);
                    }
                }
            }
        }
        if let Some(bus) = self.bus.get() {
            for (session_id, events) in &by_session {
                bus.publish(*session_id, events);
            }
        }
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        for (session_id, events) in by_session {
            if let Some(tx) = map.get(&session_id) {
                // No receivers is fine: nobody is listening live.
                let _ = tx.send(SharedBatch::new(events));
            }
        }
    }
}

/// Merges consecutive pipelined deltas (see [`WriteReq::absorb`]), and drops the requests
/// of pipelines that failed already.
fn coalesce(reqs: Vec<WriteReq>) -> Vec<WriteReq> {
    let mut out: Vec<WriteReq> = Vec::with_capacity(reqs.len());
    for mut r in reqs {
        if r.pipe().is_some_and(|p| p.failed.get().is_some()) {
            continue;
        }
        if let Some(prev) = out.last_mut()
            && prev.absorb(&mut r)
        {
            continue;
        }
        out.push(r);
    }
    out
}

/// The events of one request with seqs `last + 1 ..`.
fn assign(
    events: &[Pending],
    session_id: Uuid,
    last: u64,
    created_at: &str,
) -> Result<Vec<NewEvent>, StoreError> {
    events
        .iter()
        .enumerate()
        .map(|(i, p)| p.encode(session_id, last + 1 + i as u64, created_at))
        .collect()
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
    rx: broadcast::Receiver<Arc<SharedBatch>>,
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

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(p) = self.prefetch.take() {
            p.abort();
        }
    }
}

impl Subscription {
    /// Highest seq yielded so far.
    pub fn last_seq(&self) -> u64 {
        self.last
    }

    /// Waits for the next batch. `Ok(None)` when the session is gone.
    pub async fn next(&mut self) -> Result<Option<SubItem>, EngineError> {
        if let Some(gap) = self.pending_gap.take() {
            return Ok(Some(SubItem::Gap(gap)));
        }
        loop {
            if self.replaying {
                let page = match self.prefetch.take() {
                    Some(p) => p
                        .await
                        .map_err(|e| EngineError::Internal(format!("replay read: {e}")))??,
                    None => {
                        self.store
                            .read_events(self.session_id, self.last, REPLAY_PAGE)
                            .await?
                    }
                };
                if let Some(last) = page.last() {
                    self.last = last.seq;
                    if page.len() == REPLAY_PAGE as usize {
                        // More is likely stored: read it while this page goes out, so the
                        // database and the socket work at the same time.
                        let (store, sid, after) = (self.store.clone(), self.session_id, self.last);
                        self.prefetch = Some(tokio::spawn(async move {
                            store.read_events(sid, after, REPLAY_PAGE).await
                        }));
                    }
                    let mut batch = EventBatch::default();
                    batch.push(SharedBatch::new(page), 0);
                    return Ok(Some(SubItem::Events(batch)));
                }
                self.replaying = false;
            }
            let received = match self.poll {
                None => self.rx.recv().await,
                Some(p) => match tokio::time::timeout(p, self.rx.recv()).await {
                    Ok(r) => r,
                    Err(_) => {
                        // Quiet: maybe another instance wrote and the bus lost it.
                        self.replaying = true;
                        continue;
                    }
                },
            };
            let first = match received {
                Ok(b) => b,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.replaying = true;
                    continue;
                }
                Err(broadcast::error::RecvError::Closed) => return Ok(None),
            };
            let mut batch = EventBatch::default();
            let mut taken = 0;
            self.take(&mut batch, &mut taken, first);
            while taken < LIVE_BATCH && !self.replaying {
                match self.rx.try_recv() {
                    Ok(b) => self.take(&mut batch, &mut taken, b),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {
                        self.replaying = true;
                        break;
                    }
                    Err(_) => break,
                }
            }
            if !batch.is_empty() {
                return Ok(Some(SubItem::Events(batch)));
            }
        }
    }

    /// Adds the part of a live batch above the last yielded seq. A batch that does not
    /// follow on (another instance's batch overtook one, or one was lost) is not taken: the
    /// subscription reads the store instead, where everything published is committed.
    fn take(&mut self, out: &mut EventBatch, taken: &mut usize, b: Arc<SharedBatch>) {
        let start = b.events.partition_point(|e| e.seq <= self.last);
        if b.events.get(start).is_some_and(|e| e.seq != self.last + 1) {
            self.replaying = true;
            return;
        }
        if let Some(last) = b.events.last() {
            self.last = self.last.max(last.seq);
        }
        *taken += b.events.len() - start;
        out.push(b, start);
    }
}
