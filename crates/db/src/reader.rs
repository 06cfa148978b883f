//! Hot reads that step SQLite on the thread that uses the rows: [`SqliteReader`].
//!
//! sqlx runs each SQLite connection on a worker thread of its own. Every row is copied there
//! (`sqlite3_value_dup` of each column into a `Vec` of values), sent through a channel to the
//! task that reads it, looked up by column name, and copied again into a `String`. For a
//! read of thousands of small rows — a replay of the event log — that copying was most of the
//! cost (docs/benchmarks.md, "Instant resume"). A [`SqliteReader`] runs the whole read on
//! one of tokio's blocking threads with `rusqlite`, on a connection of its own, so each
//! column is decoded once, straight from SQLite's buffer, and a page of rows costs one hand-off
//! between threads instead of one per statement plus the row channel.
//!
//! Its connections are opened lazily (after the pool's migrations) on the same file, with the
//! same 10 s busy timeout, and only read (`query_only`). In WAL mode they see every commit of
//! the pool's writers, and they hold no lock between reads: a statement is reset when its rows
//! are dropped, so the checkpointer can still truncate the WAL. `rusqlite` is already in the
//! build (matrix-sdk's store), linked against the same SQLite as sqlx.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use rusqlite;

/// Connections kept open between reads: a replay reads one page while the previous one is
/// written out, so two are in use per replaying subscriber; more are opened when needed and
/// closed after.
const MAX_IDLE: usize = 4;

/// Reads at once, each on a connection and a blocking thread of its own (the store's pool
/// has 8 connections too): a burst of reconnecting subscribers waits its turn instead of
/// opening a file per read until the process runs out of descriptors.
const MAX_OPEN: usize = 8;

/// What a [`SqliteReader`]'s read fails with.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("sqlite read: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("sqlite read: the reading thread failed: {0}")]
    Thread(String),
    #[error("sqlite read: the store is closed")]
    Closed,
}

/// Read-only connections to one SQLite file, each read run on tokio's blocking pool.
#[derive(Debug)]
pub struct SqliteReader {
    path: PathBuf,
    idle: Mutex<Vec<rusqlite::Connection>>,
    closed: AtomicBool,
    /// One per read under way ([`MAX_OPEN`]); closed with the reader.
    open: Arc<tokio::sync::Semaphore>,
}

impl SqliteReader {
    /// A reader of the database at `path`, which the pool has opened (and migrated) already.
    pub fn new(path: &Path) -> Arc<Self> {
        Arc::new(Self {
            path: path.to_path_buf(),
            idle: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            open: Arc::new(tokio::sync::Semaphore::new(MAX_OPEN)),
        })
    }

    /// Runs `read` on a read-only connection, on a blocking thread, once one of the
    /// [`MAX_OPEN`] places is free. A connection whose read failed is closed rather than
    /// reused.
    pub async fn read<T, E, F>(self: &Arc<Self>, read: F) -> Result<T, E>
    where
        T: Send + 'static,
        E: From<ReadError> + Send + 'static,
        F: FnOnce(&rusqlite::Connection) -> Result<T, E> + Send + 'static,
    {
        let me = Arc::clone(self);
        let permit = Arc::clone(&self.open)
            .acquire_owned()
            .await
            .map_err(|_| ReadError::Closed)?;
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let conn = me.take()?;
            let out = read(&conn);
            if out.is_ok() {
                me.give(conn);
            }
            out
        })
        .await
        .map_err(|e| ReadError::Thread(e.to_string()))?
    }

    /// Closes the idle connections (reads under way close theirs when they end), and fails
    /// every read after with [`ReadError::Closed`], as the pool does once closed: what a
    /// store's `close` does before closing its pool, so the last connection to close is the
    /// pool's.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.open.close();
        self.lock().clear();
    }

    fn take(&self) -> Result<rusqlite::Connection, ReadError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(ReadError::Closed);
        }
        if let Some(c) = self.lock().pop() {
            return Ok(c);
        }
        use rusqlite::OpenFlags as F;
        // Not `SQLITE_OPEN_READ_ONLY`: a read-only handle cannot always open the WAL's
        // shared-memory index; `query_only` refuses writes instead.
        let c = rusqlite::Connection::open_with_flags(
            &self.path,
            F::SQLITE_OPEN_READ_WRITE | F::SQLITE_OPEN_NO_MUTEX,
        )?;
        c.busy_timeout(Duration::from_secs(10))?;
        c.pragma_update(None, "query_only", true)?;
        Ok(c)
    }

    fn give(&self, conn: rusqlite::Connection) {
        let mut idle = self.lock();
        if idle.len() < MAX_IDLE && !self.closed.load(Ordering::SeqCst) {
            idle.push(conn);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<rusqlite::Connection>> {
        // A panic while holding the lock cannot leave the list half-changed.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    async fn pool(dir: &Path) -> sqlx::SqlitePool {
        let migrations = crate::Migrations {
            owner: "test",
            sqlite: &[(1, "CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)")],
            postgres: &[],
            postgres_schema: None,
            postgres_lock: 0,
        };
        crate::open_sqlite(
            crate::sqlite_options(&dir.join("r.db")),
            sqlx::sqlite::SqlitePoolOptions::new().max_connections(2),
            &migrations,
        )
        .await
        .unwrap()
    }

    fn all(c: &rusqlite::Connection) -> Result<Vec<String>, ReadError> {
        let mut st = c.prepare_cached("SELECT v FROM t ORDER BY k")?;
        let rows = st.query_map([], |r| r.get::<_, String>(0))?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Each read sees every commit before it; the reader's idle connections hold no lock,
    /// so a `TRUNCATE` checkpoint still empties the WAL; and they refuse writes.
    #[tokio::test]
    async fn reads_see_commits_leave_the_wal_free_and_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        let pool = pool(dir.path()).await;
        let reader = SqliteReader::new(&dir.path().join("r.db"));
        for i in 0..3 {
            sqlx::query("INSERT INTO t (v) VALUES ($1)")
                .bind(format!("v{i}"))
                .execute(&pool)
                .await
                .unwrap();
            let seen = reader.read(all).await.unwrap();
            assert_eq!(seen.len(), i + 1, "read after commit {i}: {seen:?}");
        }
        // Two reads at once: two connections, both kept.
        let (a, b) = tokio::join!(reader.read(all), reader.read(all));
        assert_eq!(a.unwrap(), b.unwrap());
        assert!(!reader.lock().is_empty());
        let (busy, _, _): (i64, i64, i64) = sqlx::query_as("PRAGMA wal_checkpoint(TRUNCATE)")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert_eq!(busy, 0, "an idle reader blocked the checkpoint");
        let wal = std::fs::metadata(dir.path().join("r.db-wal"))
            .unwrap()
            .len();
        assert_eq!(wal, 0, "the WAL was not truncated");
        let write = reader
            .read(|c| {
                c.execute("INSERT INTO t (v) VALUES ('x')", [])
                    .map_err(ReadError::from)
            })
            .await;
        assert!(write.is_err(), "a reader wrote: {write:?}");
        assert_eq!(reader.read(all).await.unwrap().len(), 3);
        // A burst of 40 reads: at most MAX_OPEN at once, all answered, MAX_IDLE kept.
        let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let mut burst = tokio::task::JoinSet::new();
        for _ in 0..40 {
            let (reader, now, most) = (reader.clone(), now.clone(), most.clone());
            burst.spawn(async move {
                reader
                    .read(move |c| {
                        let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(n, Ordering::SeqCst);
                        std::thread::sleep(std::time::Duration::from_millis(20));
                        now.fetch_sub(1, Ordering::SeqCst);
                        all(c)
                    })
                    .await
            });
        }
        while let Some(r) = burst.join_next().await {
            assert_eq!(r.unwrap().unwrap().len(), 3);
        }
        let most = most.load(Ordering::SeqCst);
        assert!((2..=MAX_OPEN).contains(&most), "{most} reads at once");
        assert!(reader.lock().len() <= MAX_IDLE);
        reader.close();
        assert!(reader.lock().is_empty());
        assert!(matches!(reader.read(all).await, Err(ReadError::Closed)));
    }
}
