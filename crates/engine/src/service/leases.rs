//! Run leases: renewed while a run executes here; a lease lost stops the run.

use super::*;

impl Engine {
    /// Renews the leases of the runs executing here. A lease that cannot be renewed was
    /// taken over: that run stops at once and writes nothing more.
    pub(super) async fn renew_leases(&self) {
        let ttl = self.inner.config.run_lease_ttl;
        let runs: Vec<Renewal> = {
            let map = self.inner.active.lock();
            map.values().map(RunSlot::renewal).collect()
        };
        for Renewal {
            run_id,
            lease,
            lost,
            cancel,
            renewed,
        } in runs
        {
            let started = std::time::Instant::now();
            // Bounded: a renewal stuck longer than this is as good as failed.
            let result = tokio::time::timeout(ttl / 4, self.inner.store.renew_lease(&lease, ttl))
                .await
                .unwrap_or_else(|_| Err(StoreError::Database("renewing timed out".into())));
            let stop = match result {
                Ok(true) => {
                    *renewed.lock() = started;
                    false
                }
                Ok(false) => {
                    tracing::warn!(%run_id, "run lease lost to another instance; stopping the run here");
                    true
                }
                Err(e) => {
                    let since = renewed.lock().elapsed();
                    tracing::warn!(%run_id, error = %e, "renewing a run lease failed");
                    // Past the lease another instance may have taken the run over: stop
                    // rather than act next to it.
                    since >= ttl
                }
            };
            if stop && self.is_local_run(run_id) {
                lost.cancel();
                cancel.cancel();
            }
        }
    }
}

pub(super) async fn renew_loop(engine: Engine) {
    let period = (engine.inner.config.run_lease_ttl / 3).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = engine.inner.closed.cancelled() => return,
            _ = tick.tick() => {}
        }
        engine.renew_leases().await;
    }
}
