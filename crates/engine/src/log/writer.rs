//! The single writer task: seqs, group commit, publish after commit (the invariants are
//! on [`Writer`]).

use super::*;

/// How many times the writer retries a request whose seqs collided with another writer's.
pub(super) const MAX_SEQ_RETRIES: u32 = 32;

/// Longest text a run of coalesced deltas grows to in one stored event (bytes).
pub(super) const MAX_MERGED_DELTA: usize = 16 * 1024;

/// How long to wait before retrying after the `attempt`-th collision: random, up to a bound
/// that doubles with each attempt (from 0.2 ms to about 13 ms), so two writers racing for
/// the same seqs drift apart instead of colliding in lockstep.
pub(super) fn collision_backoff(attempt: u32) -> std::time::Duration {
    let bound_us = 200u64 << attempt.min(6);
    std::time::Duration::from_micros(rand::random_range(0..bound_us))
}

impl Pending {
    /// The stored form with seq `seq`. Borrows, because a request whose write fails is
    /// written again with other seqs.
    pub(super) fn encode(
        &self,
        session_id: Uuid,
        seq: u64,
        created_at: &str,
    ) -> Result<NewEvent, StoreError> {
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

impl WriteReq {
    pub(super) fn pipe(&self) -> Option<&Arc<PipeState>> {
        match &self.reply {
            Reply::Pipe(p) => Some(p),
            Reply::Wait(_) => None,
        }
    }

    /// Takes `next`'s delta into this request's last event when both are pipelined deltas
    /// of the same kind from one pipeline (so one run, one session, one fence).
    pub(super) fn absorb(&mut self, next: &mut WriteReq) -> bool {
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

impl Writer {
    pub(super) async fn run(self, mut rx: mpsc::Receiver<WriteReq>) {
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
    pub(super) async fn last_seq(&self, session_id: Uuid) -> Result<u64, StoreError> {
        let known = self.seqs.lock().get(&session_id).copied();
        match known {
            Some(l) => Ok(l),
            None => {
                let l = self.store.event_bounds(session_id).await?.last_seq;
                let mut map = self.seqs.lock();
                let e = map.entry(session_id).or_insert(l);
                *e = (*e).max(l);
                Ok(*e)
            }
        }
    }

    pub(super) fn set_last(&self, session_id: Uuid, last: u64) {
        self.seqs.lock().insert(session_id, last);
    }

    pub(super) fn drop_last(&self, session_id: Uuid) {
        self.seqs.lock().remove(&session_id);
    }

    /// Writes a batch as one transaction; if that fails, each request on its own, so one
    /// bad request (say, for a session deleted meanwhile) fails alone.
    pub(super) async fn write(&self, reqs: Vec<WriteReq>) -> Vec<Written> {
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
    pub(super) async fn write_one(
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
    pub(super) fn finish(&self, written: Vec<Written>) {
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
        for (_, events) in &by_session {
            self.approvals.bump_for(events);
        }
        let map = self.channels.lock();
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
pub(super) fn coalesce(reqs: Vec<WriteReq>) -> Vec<WriteReq> {
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
pub(super) fn assign(
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
