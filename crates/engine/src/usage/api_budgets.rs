//! Budgets made over the API, as read from the store: a cache every model call reads, kept
//! fresh off the calls' path.
//!
//! Read again after [`API_BUDGETS_TTL`] — in the background: a call that finds the copy
//! older than that uses it and starts one refresh (stale while revalidating), so no call
//! waits for the store's read but the first, the first after a change made on this
//! instance, and one whose copy is so old ([`API_BUDGETS_STALE_LIMIT`]) that refreshing
//! must have failed. A change made on another instance holds here within about a second.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use switchboard_protocol::usage::{BudgetSource, BudgetSpec};
use switchboard_store::{Store, StoreError};

use super::Budget;

/// How long budgets made over the API are taken as read.
pub const API_BUDGETS_TTL: Duration = Duration::from_secs(1);

/// How old a copy may be and still be used while it is refreshed.
pub const API_BUDGETS_STALE_LIMIT: Duration = Duration::from_secs(10);

#[derive(Default)]
pub(super) struct ApiBudgets {
    copy: parking_lot::RwLock<Option<(Instant, Arc<Vec<Budget>>)>>,
    /// Bumped by every change made here: a refresh started before one must not put back
    /// what it read.
    generation: AtomicU64,
    refreshing: AtomicBool,
}

impl ApiBudgets {
    /// The budgets, read from `store` only when there is no usable copy.
    pub(super) async fn get(
        self: &Arc<Self>,
        store: &Arc<dyn Store>,
    ) -> Result<Arc<Vec<Budget>>, StoreError> {
        let copy = self.copy.read().clone();
        match copy {
            Some((at, b)) if at.elapsed() < API_BUDGETS_TTL => Ok(b),
            Some((at, b)) if at.elapsed() < API_BUDGETS_STALE_LIMIT => {
                self.refresh_in_background(store);
                Ok(b)
            }
            _ => {
                let generation = self.generation.load(Ordering::Acquire);
                let read = Arc::new(read(store.as_ref()).await?);
                self.put(generation, read.clone());
                Ok(read)
            }
        }
    }

    /// A change was made here: the next call reads again.
    pub(super) fn changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        *self.copy.write() = None;
    }

    fn put(&self, generation: u64, budgets: Arc<Vec<Budget>>) {
        let mut copy = self.copy.write();
        if self.generation.load(Ordering::Acquire) == generation {
            *copy = Some((Instant::now(), budgets));
        }
    }

    fn refresh_in_background(self: &Arc<Self>, store: &Arc<dyn Store>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let (this, store) = (self.clone(), store.clone());
        tokio::spawn(async move {
            let generation = this.generation.load(Ordering::Acquire);
            match read(store.as_ref()).await {
                Ok(b) => this.put(generation, Arc::new(b)),
                Err(e) => tracing::warn!(error = %e, "budgets made over the API: refresh failed"),
            }
            this.refreshing.store(false, Ordering::Release);
        });
    }
}

async fn read(store: &dyn Store) -> Result<Vec<Budget>, StoreError> {
    let mut all: Vec<Budget> = Vec::new();
    for r in store.list_budgets().await? {
        match serde_json::from_str::<BudgetSpec>(&r.spec)
            .map_err(|e| e.to_string())
            .and_then(|s| Budget::new(s, BudgetSource::Api))
        {
            Ok(b) => all.push(b),
            // Checked when it was made; a budget that no longer reads (a time zone database
            // without its zone) must not stop every call: it is skipped, loudly.
            Err(e) => {
                tracing::error!(budget = %r.name, error = %e, "a stored budget could not be read; it does not apply")
            }
        }
    }
    Ok(all)
}
