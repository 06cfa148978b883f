//! The durable event log and its live fan-out.
//!
//! Appending assigns the session's next `seq` and hands the event to one writer task, which
//! commits waiting events in batches (group commit) and only then publishes them on the
//! session's live channel, in `seq` order. A [`Subscription`] subscribes to the live channel
//! first, then replays `seq > n` from the store, then follows live events, dropping anything
//! at or below the last `seq` it yielded: no gap and no duplicate at the seam. A subscriber
//! that falls behind the bounded live channel is told so by the channel and goes back to
//! reading the store, so a slow reader never makes memory grow.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex, OnceLock};

use switchboard_protocol::{AgentEvent, GapDetected};
use switchboard_store::{Lease, NewEvent, RunFinish, Store, StoreError, StoredEvent};
use tokio::sync::{Mutex, broadcast, mpsc, oneshot};
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

/// Per-session state that makes `seq` assignment and hand-over to the writer one step.
#[derive(Default)]
struct SeqState {
    /// Highest seq assigned; `None` until loaded from the store.
    last: Option<u64>,
    /// Bumped each time `last` is dropped after a conflict with another writer.
    generation: u64,
}

/// How many times an append is retried after its seqs collided with another writer's.
const MAX_SEQ_RETRIES: u32 = 32;

/// How long to wait before retrying after the `attempt`-th collision: random, up to a bound
/// that doubles with each attempt (from 0.2 ms to about 13 ms), so two writers racing for
/// the same seqs drift apart instead of colliding in lockstep until one gives up.
fn collision_backoff(attempt: u32) -> std::time::Duration {
    let bound_us = 200u64 << attempt.min(6);
    std::time::Duration::from_micros(rand::random_range(0..bound_us))
}

enum AppendError {
    /// Another writer had the seqs; carries the seq state's generation they came from.
    Conflict(u64),
    Other(EngineError),
}

struct WriteReq {
    events: Vec<NewEvent>,
    /// The run lease the events are written under, checked in the same transaction.
    fence: Option<Lease>,
    /// A run closed in the same transaction (the events are its terminal event).
    finish: Option<RunFinish>,
    done: oneshot::Sender<Result<(), StoreError>>,
}

type Channels = Arc<StdMutex<HashMap<Uuid, broadcast::Sender<Arc<SharedBatch>>>>>;
type BusSlot = Arc<OnceLock<Arc<dyn crate::EventBus>>>;

/// With a bus, a subscription that has heard nothing for this long reads the store, so a
/// batch the bus lost is seen within about this delay.
const BUS_POLL: std::time::Duration = std::time::Duration::from_millis(1000);

/// The event log: append, subscribe, read.
#[derive(Clone)]
pub struct EventLog {
    store: Arc<dyn Store>,
    /// Queue of the single writer task; bounded, so appenders feel back-pressure.
    writer: mpsc::Sender<WriteReq>,
    /// Per-session seq counters. The tokio mutex is held while a seq is assigned *and* the
    /// event is queued to the writer, so queue order is seq order.
    seqs: Arc<StdMutex<HashMap<Uuid, Arc<Mutex<SeqState>>>>>,
    /// Live channels; bounded rings of committed batches shared by all subscribers of a
    /// session.
    channels: Channels,
    live_buffer: usize,
    /// Set once when the instance shares its store with others.
    bus: BusSlot,
}

impl EventLog {
    /// Starts the writer task. Must be called inside a tokio runtime. `live_buffer` is the
    /// number of committed batches (each at most 1,024 events) a session's live ring holds
    /// before a reader that lags behind it goes back to reading the store.
    pub fn new(store: Arc<dyn Store>, live_buffer: usize) -> Self {
        let (tx, rx) = mpsc::channel::<WriteReq>(4096);
        let channels: Channels = Arc::default();
        let bus: BusSlot = Arc::default();
        tokio::spawn(writer_task(
            store.clone(),
            rx,
            channels.clone(),
            bus.clone(),
        ));
        Self {
            store,
            writer: tx,
            seqs: Arc::default(),
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
        if let Some(state) = self
            .seqs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&session_id)
            .cloned()
            && let Ok(mut s) = state.try_lock()
            && let Some(last) = s.last
            && last < top
        {
            // Our next append would collide with these: start above them.
            s.last = Some(top);
        }
        let map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(&session_id) {
            let _ = tx.send(SharedBatch::new(events));
        }
    }

    fn seq_state(&self, session_id: Uuid) -> Arc<Mutex<SeqState>> {
        let mut map = self.seqs.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(session_id).or_default().clone()
    }

    fn sender(&self, session_id: Uuid) -> broadcast::Sender<Arc<SharedBatch>> {
        let mut map = self.channels.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(session_id)
            .or_insert_with(|| broadcast::channel(self.live_buffer).0)
            .clone()
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

    /// Appends several events of one session atomically, in order.
    ///
    /// Another process may append to the same session (several instances sharing one
    /// database): its seqs make ours collide, which the store reports as a conflict. Then
    /// the session's last seq is read again from the store and the events get new seqs, so
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
            .append_inner(session_id, std::slice::from_ref(event), fence, Some(finish))
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
        self.append_inner(session_id, events, fence, None).await
    }

    async fn append_inner(
        &self,
        session_id: Uuid,
        events: &[AgentEvent],
        fence: Option<&Lease>,
        finish: Option<RunFinish>,
    ) -> Result<Vec<u64>, EngineError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let mut encoded = Vec::with_capacity(events.len());
        for ev in events {
            let payload = serde_json::to_string(ev)
                .map_err(|e| EngineError::Internal(format!("encoding event: {e}")))?;
            encoded.push((ev.kind(), Some(ev.run_id()), payload));
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            match self
                .append_once(session_id, &encoded, fence, finish.as_ref())
                .await
            {
                Err(AppendError::Conflict(generation)) if attempt < MAX_SEQ_RETRIES => {
                    // Only the first of our writers to see the conflict reloads; the others
                    // retry with the seqs it found.
                    {
                        let state = self.seq_state(session_id);
                        let mut state = state.lock().await;
                        if state.generation == generation {
                            state.last = None;
                            state.generation += 1;
                        }
                    }
                    tokio::time::sleep(collision_backoff(attempt)).await;
                }
                Err(AppendError::Conflict(_)) => {
                    return Err(EngineError::Internal(format!(
                        "session {session_id}: event seq kept colliding with another writer"
                    )));
                }
                Err(AppendError::Other(e)) => return Err(e),
                Ok(seqs) => return Ok(seqs),
            }
        }
    }

    async fn append_once(
        &self,
        session_id: Uuid,
        encoded: &[(&'static str, Option<Uuid>, String)],
        fence: Option<&Lease>,
        finish: Option<&RunFinish>,
    ) -> Result<Vec<u64>, AppendError> {
        let (done_tx, done_rx) = oneshot::channel();
        let (seqs, generation) = {
            let state = self.seq_state(session_id);
            let mut state = state.lock().await;
            let last = match state.last {
                Some(l) => l,
                None => {
                    self.store
                        .event_bounds(session_id)
                        .await
                        .map_err(|e| AppendError::Other(e.into()))?
                        .last_seq
                }
            };
            let created_at = now_rfc3339();
            let mut batch = Vec::with_capacity(encoded.len());
            for (i, (kind, run_id, payload)) in encoded.iter().enumerate() {
                batch.push(NewEvent {
                    session_id,
                    seq: last + 1 + i as u64,
                    run_id: *run_id,
                    kind: kind.to_string(),
                    payload: payload.clone(),
                    created_at: created_at.clone(),
                });
            }
            let seqs: Vec<u64> = batch.iter().map(|e| e.seq).collect();
            // Seqs are consumed even if the write fails: a seq is never reused.
            state.last = Some(last + batch.len() as u64);
            self.writer
                .send(WriteReq {
                    events: batch,
                    fence: fence.cloned(),
                    finish: finish.cloned(),
                    done: done_tx,
                })
                .await
                .map_err(|_| AppendError::Other(EngineError::ShuttingDown))?;
            (seqs, state.generation)
        };
        match done_rx.await {
            Ok(Ok(())) => Ok(seqs),
            Ok(Err(StoreError::Conflict(_))) => Err(AppendError::Conflict(generation)),
            Ok(Err(StoreError::NotFound(_))) => {
                Err(AppendError::Other(EngineError::SessionNotFound(session_id)))
            }
            Ok(Err(e)) => Err(AppendError::Other(e.into())),
            Err(_) => Err(AppendError::Other(EngineError::ShuttingDown)),
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
        })
    }
}

async fn writer_task(
    store: Arc<dyn Store>,
    mut rx: mpsc::Receiver<WriteReq>,
    channels: Channels,
    bus: BusSlot,
) {
    let mut reqs: Vec<WriteReq> = Vec::new();
    while let Some(first) = rx.recv().await {
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
        let all: Vec<NewEvent> = reqs.iter().flat_map(|r| r.events.iter().cloned()).collect();
        let mut fences: Vec<Lease> = reqs.iter().filter_map(|r| r.fence.clone()).collect();
        fences.sort_by(|a, b| a.name.cmp(&b.name));
        fences.dedup();
        let finishes: Vec<RunFinish> = reqs.iter().filter_map(|r| r.finish.clone()).collect();
        let outcome = store.write_events(&all, &fences, &finishes).await;
        let results: Vec<Result<(), StoreError>> = match outcome {
            Ok(()) => reqs.iter().map(|_| Ok(())).collect(),
            // One bad request (say, for a session deleted meanwhile) must not fail the
            // others that shared its transaction: retry each on its own.
            Err(_) if reqs.len() > 1 => {
                let mut v = Vec::with_capacity(reqs.len());
                for r in &reqs {
                    let fence: &[Lease] = r.fence.as_slice();
                    let finish: &[RunFinish] = r.finish.as_slice();
                    v.push(store.write_events(&r.events, fence, finish).await);
                }
                v
            }
            Err(e) => vec![Err(e)],
        };
        // Publish after the commit, one shared batch per session, in queue (= seq) order.
        let mut by_session: Vec<(Uuid, Vec<LogEvent>)> = Vec::new();
        for (req, result) in reqs.drain(..).zip(results) {
            match &result {
                Ok(()) => {
                    for ev in req.events {
                        let sid = ev.session_id;
                        let stored = ev;
                        match by_session.iter_mut().find(|(s, _)| *s == sid) {
                            Some((_, v)) => v.push(stored),
                            None => by_session.push((sid, vec![stored])),
                        }
                    }
                }
                Err(e) => tracing::warn!(error = %e, "event append failed"),
            }
            let _ = req.done.send(result);
        }
        if let Some(bus) = bus.get() {
            for (session_id, events) in &by_session {
                bus.publish(*session_id, events);
            }
        }
        publish(&channels, by_session);
    }
}

fn publish(channels: &Channels, batches: Vec<(Uuid, Vec<LogEvent>)>) {
    let map = channels.lock().unwrap_or_else(|p| p.into_inner());
    for (session_id, events) in batches {
        if let Some(tx) = map.get(&session_id) {
            // No receivers is fine: nobody is listening live.
            let _ = tx.send(SharedBatch::new(events));
        }
    }
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
                let page = self
                    .store
                    .read_events(self.session_id, self.last, REPLAY_PAGE)
                    .await?;
                if let Some(last) = page.last() {
                    self.last = last.seq;
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
