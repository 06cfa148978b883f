//! [`Subscription`]: replay from the store, then live batches, with no gap and no repeat at
//! the seam.

use super::*;

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(p) = self.prefetch.take() {
            p.abort();
        }
        // The last subscriber takes the session's channel with it. The receiver is dropped
        // under the map's lock, so of two subscriptions dropped at once the second sees the
        // first's gone and no one subscribes meanwhile; and only the channel this one
        // received from is removed (a session deleted and followed again has a new one).
        let mut map = self.channels.lock();
        let Some(rx) = self.rx.take() else { return };
        if let Some(tx) = map.get(&self.session_id) {
            let ours = tx.subscribe().same_channel(&rx);
            drop(rx);
            if ours && tx.receiver_count() == 0 {
                map.remove(&self.session_id);
            }
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
            // `None` only while dropping.
            let Some(rx) = self.rx.as_mut() else {
                return Ok(None);
            };
            let received = match self.poll {
                None => rx.recv().await,
                Some(p) => match tokio::time::timeout(p, rx.recv()).await {
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
                let Some(rx) = self.rx.as_mut() else { break };
                match rx.try_recv() {
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
    pub(super) fn take(&mut self, out: &mut EventBatch, taken: &mut usize, b: Arc<SharedBatch>) {
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
