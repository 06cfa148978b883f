//! SQLite's full-text index, written in batches (migration 0014 says why).
//!
//! A message's or a file's transaction only names it in `search_docs` and `search_pending`.
//! The [`Indexer`] task moves what is pending into FTS5 a batch at a time: woken by each
//! such commit, it waits [`LINGER`] so that the replies of a busy server share a batch, then
//! indexes up to [`BATCH`] documents per transaction until none is left. What it has not
//! reached yet is still found: a search first indexes whatever is pending ([`catch_up`]), so
//! it sees every write committed before it. A crash loses nothing either: the pending rows
//! are in the database, and the task catches up when the store opens. PostgreSQL needs none
//! of this: its `tsvector` columns are generated with their rows.

use std::sync::{Arc, Weak};
use std::time::Duration;

use sqlx::SqlitePool;
use tokio::sync::Notify;

use super::search::INDEXED_CHARS;
use crate::Result;

/// How long the indexer lets documents gather after the first is written.
const LINGER: Duration = Duration::from_millis(500);

/// Most documents indexed in one transaction (which holds SQLite's write lock): a backlog,
/// say after a crash, is indexed in short transactions, with other writers between them.
const BATCH: i64 = 64;

/// The store's handle on its indexer task: [`Indexer::written`] after a commit that left
/// documents pending. The task ends when the last clone of the store is dropped.
#[derive(Debug)]
pub(crate) struct Indexer {
    wake: Arc<Notify>,
}

impl Indexer {
    /// Starts the task, which first indexes whatever a previous process left pending.
    pub(crate) fn start(pool: SqlitePool) -> Arc<Self> {
        let wake = Arc::new(Notify::new());
        let me = Arc::new(Self { wake: wake.clone() });
        let alive = Arc::downgrade(&me);
        wake.notify_one();
        tokio::spawn(run(pool, wake, alive));
        me
    }

    /// Documents were committed to `search_pending`: they will be indexed within [`LINGER`]
    /// (or by the next search, whichever comes first).
    pub(crate) fn written(&self) {
        self.wake.notify_one();
    }
}

impl Drop for Indexer {
    fn drop(&mut self) {
        // Wakes the task to find the store gone.
        self.wake.notify_one();
    }
}

async fn run(pool: SqlitePool, wake: Arc<Notify>, alive: Weak<Indexer>) {
    loop {
        wake.notified().await;
        if alive.upgrade().is_none() {
            return;
        }
        tokio::time::sleep(LINGER).await;
        // A write during the linger left a wake-up behind it: the next round may find that a
        // search (or this round) indexed everything already, and writes nothing then.
        let work = match pending(&pool).await {
            Ok(w) => w,
            Err(_) if pool.is_closed() => return,
            Err(_) => true,
        };
        if !work {
            continue;
        }
        if let Err(e) = catch_up(&pool).await {
            if pool.is_closed() {
                return;
            }
            // The documents stay pending: the next write or search tries again.
            tracing::warn!(error = %e, "search index: catching up failed");
        }
    }
}

/// Indexes every pending document, [`BATCH`] per transaction; returns how many. The text is
/// what a search reads back for passages: a message's content, then its tool calls (JSON),
/// cut to [`INDEXED_CHARS`] characters; a file's name; the passage marks (characters 1 and
/// 2) made spaces. A document whose message or file is gone is dropped.
pub(crate) async fn catch_up(pool: &SqlitePool) -> Result<u64> {
    // The batch: the oldest pending documents. The insert is the transaction's first
    // statement, and it writes, so the transaction holds the write lock from its start (a
    // read upgraded to a write fails when another writer committed in between) and the
    // delete that follows sees the same batch.
    const OLDEST: &str = "SELECT doc FROM search_pending ORDER BY doc LIMIT $1";
    let insert = format!(
        "INSERT INTO search (rowid, body, sess) \
         SELECT d.doc, replace(replace(CASE d.kind \
             WHEN 'm' THEN substr(m.content || COALESCE(char(10) || m.tool_calls, ''), 1, {INDEXED_CHARS}) \
             ELSE f.name END, char(1), ' '), char(2), ' '), \
           's' || replace(d.session_id, '-', '') \
         FROM search_docs d \
         LEFT JOIN messages m ON d.kind = 'm' AND m.id = d.ref \
         LEFT JOIN files f ON d.kind = 'f' AND f.id = d.ref \
         WHERE d.doc IN ({OLDEST}) AND (m.id IS NOT NULL OR f.id IS NOT NULL) \
         ORDER BY d.doc"
    );
    let delete = format!("DELETE FROM search_pending WHERE doc IN ({OLDEST})");
    let mut total = 0;
    loop {
        let mut tx = pool.begin().await?;
        sqlx::query(sqlx::AssertSqlSafe(&*insert))
            .bind(BATCH)
            .execute(&mut *tx)
            .await?;
        let n = sqlx::query(sqlx::AssertSqlSafe(&*delete))
            .bind(BATCH)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        total += n;
        // A short batch was the last one.
        if n < BATCH as u64 {
            return Ok(total);
        }
    }
}

/// Whether documents are waiting to be indexed (one read of a small table's first row).
pub(crate) async fn pending(pool: &SqlitePool) -> Result<bool> {
    Ok(
        sqlx::query_scalar::<_, i64>("SELECT EXISTS (SELECT 1 FROM search_pending)")
            .fetch_one(pool)
            .await?
            != 0,
    )
}
