//! [`SqlStore`]: the [`Store`](crate::Store) on SQLite (one file in WAL mode, the embedded
//! default) or on PostgreSQL (for deployments that run a database server anyway, or share one
//! database between several instances).
//!
//! Each operation is written once and run on whichever pool the store has (`with_db!`): `$n`
//! placeholders (sqlx binds them on SQLite too), `ON CONFLICT` upserts, `RETURNING`, named
//! columns instead of `SELECT *`, `CASE` instead of SQLite's two-argument `MAX` or
//! PostgreSQL's `GREATEST`. What differs between the two is small and named here:
//!
//! - **Ids**: native `UUID` columns on PostgreSQL, `TEXT` on SQLite. A statement binds
//!   `d.id(uuid)` — `d` being the back-end's [`Sqlite`] or [`Pg`] marker — and records are
//!   read through [`Cols`], which decodes either.
//! - **The clock of lease expiry** ([`Sqlite::now_ms`], [`Pg::now_ms`]): the database's own, so
//!   that instances on different machines sharing a PostgreSQL server judge expiry by one
//!   clock. A SQLite file has one machine's clock.
//! - **Row locks** ([`LockSession`]): where SQLite gets correctness for free from its single
//!   writer, PostgreSQL takes the session's row lock before handing out a per-session position
//!   as `MAX(...) + 1` (the follow-up queue, the transcript), so concurrent writers never get
//!   the same one.
//!
//! What both rely on:
//!
//! - event seqs are chosen by the caller and guarded by the `(session_id, seq)` primary key: of
//!   two concurrent appenders of one seq, one commits and the other gets a
//!   [`StoreError::Conflict`]; `last_seq` only ever grows;
//! - a fenced write checks its lease with a no-op `UPDATE` first ([`TxOps::check_fence`]): on
//!   SQLite it takes the write lock at once, on PostgreSQL it keeps the lease row locked until
//!   the transaction ends, so a takeover waits for these writes or they wait for it — never
//!   both;
//! - deleting a session is one statement; the foreign keys cascade to runs, events, messages
//!   and approvals.

mod fork;
mod indexer;
mod log;
mod metering;
mod open;
mod people;
mod runs;
mod search;
mod store;
mod transcript;

use std::time::Duration;

use sqlx::postgres::PgRow;
use sqlx::sqlite::SqliteRow;
use sqlx::{PgConnection, Row, SqliteConnection};
use uuid::Uuid;

pub use open::{PostgresOptions, SqliteOptions};

use crate::{
    ApprovalRecord, FileRecord, Lease, MessageRecord, Result, RunOutcome, RunRecord, RunState,
    SessionRecord, StoreError, StoredEvent,
};

/// [`Store`](crate::Store) on a SQLite file ([`SqlStore::open_sqlite`]) or a PostgreSQL
/// database ([`SqlStore::open_postgres`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct SqlStore {
    db: Db,
    /// SQLite's full-text indexer ([`indexer`]); `None` on PostgreSQL.
    indexer: Option<std::sync::Arc<indexer::Indexer>>,
    /// SQLite's reader for replays of the event log ([`log`]); `None` on PostgreSQL.
    reader: Option<std::sync::Arc<switchboard_db::SqliteReader>>,
}

/// The kit's pool type, on whichever back-end (see [`with_db`]).
use switchboard_db::Db;

/// Runs `$body` with `$pool` bound to the store's pool and `$d` to its back-end's marker
/// ([`Sqlite`] or [`Pg`]): the body is written once and compiled once per back-end, so its
/// SQL must be valid on both.
macro_rules! with_db {
    ($store:expr, |$pool:ident, $d:ident| $body:expr) => {
        match &$store.db {
            ::switchboard_db::Db::Sqlite($pool) => {
                let $d = $crate::sql::Sqlite;
                $body
            }
            ::switchboard_db::Db::Postgres($pool) => {
                let $d = $crate::sql::Pg;
                $body
            }
        }
    };
}
pub(crate) use with_db;

/// SQLite's marker: ids are bound as their hyphenated text.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sqlite;

/// PostgreSQL's marker: ids are bound as native UUIDs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pg;

impl Sqlite {
    pub(crate) fn id(self, id: Uuid) -> String {
        id.to_string()
    }
    pub(crate) fn opt_id(self, id: Option<Uuid>) -> Option<String> {
        id.map(|id| id.to_string())
    }
    /// Locks a row read against deletion for the transaction: nothing to add on SQLite,
    /// whose write transaction already excludes every other writer.
    pub(crate) fn key_share(self) -> &'static str {
        ""
    }
    /// Now in milliseconds since the Unix epoch, by SQLite's clock (the machine's).
    pub(crate) fn now_ms(self) -> &'static str {
        "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
    }
}

impl Pg {
    pub(crate) fn id(self, id: Uuid) -> Uuid {
        id
    }
    /// Locks a row read against deletion (and key changes) until the transaction ends.
    pub(crate) fn key_share(self) -> &'static str {
        " FOR KEY SHARE"
    }
    pub(crate) fn opt_id(self, id: Option<Uuid>) -> Option<Uuid> {
        id
    }
    /// Now in milliseconds since the Unix epoch, by the database server's clock.
    pub(crate) fn now_ms(self) -> &'static str {
        "(extract(epoch from clock_timestamp()) * 1000)::bigint"
    }
}

/// The kit's column readers ([`switchboard_db::Cols`]), and the engine store's own: ids
/// (native UUIDs on PostgreSQL, text on SQLite), JSON and counts.
pub(crate) trait Cols: switchboard_db::Cols {
    fn opt_uuid(&self, col: &str) -> Result<Option<Uuid>>;

    fn uuid(&self, col: &str) -> Result<Uuid> {
        self.opt_uuid(col)?
            .ok_or_else(|| StoreError::Corrupt(format!("{col}: NULL")))
    }
    fn json(&self, col: &str) -> Result<serde_json::Value> {
        let s = self.text(col)?;
        serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
    }
    fn opt_json(&self, col: &str) -> Result<Option<serde_json::Value>> {
        self.opt_text(col)?
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
    }
    fn count(&self, col: &str) -> Result<u64> {
        let v = self.int(col)?;
        u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{col}: negative value {v}")))
    }
}

impl Cols for SqliteRow {
    fn opt_uuid(&self, col: &str) -> Result<Option<Uuid>> {
        UuidCol::uuid_col(self, col)
    }
}

impl Cols for PgRow {
    fn opt_uuid(&self, col: &str) -> Result<Option<Uuid>> {
        UuidCol::uuid_col(self, col)
    }
}

/// How each back-end stores an id.
trait UuidCol {
    fn uuid_col(&self, col: &str) -> Result<Option<Uuid>>;
}

impl UuidCol for SqliteRow {
    fn uuid_col(&self, col: &str) -> Result<Option<Uuid>> {
        let s: Option<String> = self.try_get(col)?;
        s.map(|s| Uuid::parse_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}"))))
            .transpose()
    }
}

impl UuidCol for PgRow {
    fn uuid_col(&self, col: &str) -> Result<Option<Uuid>> {
        Ok(self.try_get(col)?)
    }
}

pub(crate) fn to_i64(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| StoreError::Conflict(format!("value {v} out of range")))
}

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

// The columns each record is read from, named rather than `SELECT *`: a cached prepared
// statement's result columns must not change under it when a migration adds columns.
pub(crate) const SESSION_COLS: &str =
    "id, title, cwd, config, created_at, updated_at, last_seq, archived_at, owner";
pub(crate) const RUN_COLS: &str =
    "id, session_id, state, input, error, stop_reason, created_at, started_at, finished_at";
pub(crate) const MESSAGE_COLS: &str =
    "id, session_id, run_id, role, content, tool_calls, tool_call_id, is_error, created_at";
pub(crate) const APPROVAL_COLS: &str = "session_id, run_id, tool_calls, created_at, expires_at";
pub(crate) const FILE_COLS: &str = "id, session_id, name, mime, size, sha256, created_at";
/// A session's row: id, title, cwd, config, created_at, updated_at, last_seq, owner.
pub(crate) const INSERT_SESSION: &str = "INSERT INTO sessions (id, title, cwd, config, \
     created_at, updated_at, last_seq, owner) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)";
/// A file's row, in [`FILE_COLS`]' order.
pub(crate) const INSERT_FILE: &str = "INSERT INTO files (id, session_id, name, mime, size, \
     sha256, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7)";

pub(crate) fn lease_from_row(r: &impl Cols) -> Result<Lease> {
    Ok(Lease {
        name: r.text("name")?,
        holder: r.text("holder")?,
        token: u64::try_from(r.int("token")?)
            .map_err(|_| StoreError::Corrupt("negative lease token".into()))?,
    })
}

pub(crate) fn session_from_row(row: &impl Cols) -> Result<SessionRecord> {
    Ok(SessionRecord {
        id: row.uuid("id")?,
        title: row.text("title")?,
        cwd: row.text("cwd")?,
        config: row.json("config")?,
        created_at: row.text("created_at")?,
        updated_at: row.text("updated_at")?,
        last_seq: row.count("last_seq")?,
        archived_at: row.opt_text("archived_at")?,
        owner: row.opt_text("owner")?,
    })
}

pub(crate) fn run_from_row(row: &impl Cols) -> Result<RunRecord> {
    let state = row.text("state")?;
    Ok(RunRecord {
        id: row.uuid("id")?,
        session_id: row.uuid("session_id")?,
        state: RunState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("run state {state:?}")))?,
        input: row.json("input")?,
        error: row.opt_text("error")?,
        stop_reason: row.opt_text("stop_reason")?,
        created_at: row.text("created_at")?,
        started_at: row.opt_text("started_at")?,
        finished_at: row.opt_text("finished_at")?,
    })
}

pub(crate) fn event_from_row(row: &impl Cols, session_id: Uuid) -> Result<StoredEvent> {
    Ok(StoredEvent {
        session_id,
        seq: row.count("seq")?,
        run_id: row.opt_uuid("run_id")?,
        kind: row.text("kind")?,
        payload: row.text("payload")?,
        created_at: row.text("created_at")?,
    })
}

pub(crate) fn message_from_row(row: &impl Cols) -> Result<MessageRecord> {
    Ok(MessageRecord {
        id: row.uuid("id")?,
        session_id: row.uuid("session_id")?,
        run_id: row.opt_uuid("run_id")?,
        role: row.text("role")?,
        content: row.text("content")?,
        tool_calls: row.opt_json("tool_calls")?,
        tool_call_id: row.opt_text("tool_call_id")?,
        is_error: row.flag("is_error")?,
        created_at: row.text("created_at")?,
    })
}

pub(crate) fn file_from_row(row: &impl Cols) -> Result<FileRecord> {
    Ok(FileRecord {
        id: row.uuid("id")?,
        session_id: row.uuid("session_id")?,
        name: row.text("name")?,
        mime: row.text("mime")?,
        size: row.count("size")?,
        sha256: row.text("sha256")?,
        created_at: row.text("created_at")?,
    })
}

pub(crate) fn approval_from_row(row: &impl Cols) -> Result<ApprovalRecord> {
    Ok(ApprovalRecord {
        session_id: row.uuid("session_id")?,
        run_id: row.uuid("run_id")?,
        tool_calls: row.json("tool_calls")?,
        created_at: row.text("created_at")?,
        expires_at: row.text("expires_at")?,
    })
}

/// Rows per multi-row `INSERT INTO events` (6 parameters each, far below either database's
/// limit). Each row count is one prepared statement per connection, so this also bounds how
/// many of them a connection keeps. Multi-row INSERTs: per-statement overhead (on SQLite a
/// round trip to sqlx's worker thread) dominates single-row inserts.
pub(crate) const INSERT_CHUNK: usize = 64;

pub(crate) fn insert_events_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO events (session_id, seq, run_id, kind, payload, created_at) VALUES ",
    );
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        let p = i * 6;
        sql.push_str(&format!(
            "(${}, ${}, ${}, ${}, ${}, ${})",
            p + 1,
            p + 2,
            p + 3,
            p + 4,
            p + 5,
            p + 6
        ));
    }
    sql
}

/// Statements run inside a write transaction, written once for both back-ends
/// (`impl_tx_ops!`).
pub(crate) trait TxOps {
    /// Fails with [`StoreError::Fenced`] unless `fence` is the current holder and token of
    /// its lease. A no-op UPDATE rather than a SELECT (see the module's notes). Callers check
    /// fences before taking any other row lock (sessions), in name order.
    async fn check_fence(&mut self, fence: &Lease) -> Result<()>;
    /// Moves a queued or running run to its final state and drops its lease; `false` if it
    /// was neither.
    async fn close_run(&mut self, id: Uuid, outcome: &RunOutcome, at: &str) -> Result<bool>;
}

macro_rules! impl_tx_ops {
    ($conn:ty, $d:expr) => {
        impl TxOps for $conn {
            async fn check_fence(&mut self, fence: &Lease) -> Result<()> {
                let res = sqlx::query(
                    "UPDATE leases SET token = token WHERE name = $1 AND holder = $2 AND token = $3",
                )
                .bind(&fence.name)
                .bind(&fence.holder)
                .bind(to_i64(fence.token)?)
                .execute(&mut *self)
                .await?;
                if res.rows_affected() == 0 {
                    return Err(StoreError::Fenced(format!(
                        "lease {} with token {} held by {:?} is no longer current",
                        fence.name, fence.token, fence.holder
                    )));
                }
                Ok(())
            }

            async fn close_run(
                &mut self,
                id: Uuid,
                outcome: &RunOutcome,
                at: &str,
            ) -> Result<bool> {
                let (error, stop_reason) = outcome.columns();
                let res = sqlx::query(
                    "UPDATE runs SET state = $1, error = $2, stop_reason = $3, finished_at = $4 \
                     WHERE id = $5 AND state IN ('queued', 'running')",
                )
                .bind(outcome.state().as_str())
                .bind(error)
                .bind(stop_reason)
                .bind(at)
                .bind($d.id(id))
                .execute(&mut *self)
                .await?;
                if res.rows_affected() == 0 {
                    return Ok(false);
                }
                sqlx::query("DELETE FROM leases WHERE name = $1")
                    .bind(Lease::run_name(id))
                    .execute(&mut *self)
                    .await?;
                Ok(true)
            }
        }
    };
}

impl_tx_ops!(SqliteConnection, Sqlite);
impl_tx_ops!(PgConnection, Pg);

/// Holds the session's row until the transaction ends, so that a position computed as
/// `MAX(...) + 1` in the session is not handed out twice. `false` if the session does not
/// exist.
pub(crate) trait LockSession {
    async fn lock_session(&mut self, id: Uuid) -> Result<bool>;
}

/// Nothing to do: a SQLite write transaction already excludes every other writer; a missing
/// session shows as the insert's foreign-key violation. (Reading first would not do: a read
/// transaction upgraded to a write in WAL mode fails with `SQLITE_BUSY` when another writer
/// committed in between.)
impl LockSession for SqliteConnection {
    async fn lock_session(&mut self, _id: Uuid) -> Result<bool> {
        Ok(true)
    }
}

/// `FOR NO KEY UPDATE` does not block inserts that only reference the session (event
/// appends) but keeps it from being deleted meanwhile. The statement that reads `MAX` must be
/// a later one: under READ COMMITTED each statement sees what was committed before it
/// started, so it sees the previous holder's row.
impl LockSession for PgConnection {
    async fn lock_session(&mut self, id: Uuid) -> Result<bool> {
        Ok(
            sqlx::query("SELECT 1 AS one FROM sessions WHERE id = $1 FOR NO KEY UPDATE")
                .bind(id)
                .fetch_optional(&mut *self)
                .await?
                .is_some(),
        )
    }
}

/// Keeps the search index of `0012_search.sql` (and `0013_search_sessions.sql`) in step.
/// On SQLite a document is named here, in the writer's transaction and after the row it
/// indexes, and indexed in a batch later ([`indexer`]; call [`SqlStore::indexed_later`] after
/// the commit). A trigger wrote the index at first, but a trigger's FTS5 write is not undone
/// cleanly when the statement that fired it fails (a file of a missing session, refused by
/// its foreign key, left the connection holding a broken write transaction: `database is
/// locked`, and later writes lost). On PostgreSQL the generated `tsvector` columns need
/// nothing.
pub(crate) trait SearchIndex {
    /// Names a message (`kind` `m`) or a file (`f`) of `session` for the index.
    async fn index(&mut self, session: Uuid, kind: &str, id: Uuid) -> Result<()>;
    /// Takes a session's messages and files out of the index (before it is deleted).
    async fn unindex_session(&mut self, session: Uuid) -> Result<()>;
}

impl SearchIndex for SqliteConnection {
    async fn index(&mut self, session: Uuid, kind: &str, id: Uuid) -> Result<()> {
        sqlx::query("INSERT INTO search_docs (session_id, kind, ref) VALUES ($1, $2, $3)")
            .bind(session.to_string())
            .bind(kind)
            .bind(id.to_string())
            .execute(&mut *self)
            .await?;
        // The connection's last insert is the document just named.
        sqlx::query("INSERT INTO search_pending (doc) VALUES (last_insert_rowid())")
            .execute(&mut *self)
            .await?;
        Ok(())
    }

    async fn unindex_session(&mut self, session: Uuid) -> Result<()> {
        for sql in [
            "DELETE FROM search WHERE rowid IN (SELECT doc FROM search_docs WHERE session_id = $1)",
            "DELETE FROM search_pending WHERE doc IN (SELECT doc FROM search_docs WHERE session_id = $1)",
            "DELETE FROM search_docs WHERE session_id = $1",
        ] {
            sqlx::query(sql)
                .bind(session.to_string())
                .execute(&mut *self)
                .await?;
        }
        Ok(())
    }
}

impl SearchIndex for PgConnection {
    async fn index(&mut self, _: Uuid, _: &str, _: Uuid) -> Result<()> {
        Ok(())
    }

    async fn unindex_session(&mut self, _: Uuid) -> Result<()> {
        Ok(())
    }
}
