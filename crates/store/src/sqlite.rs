//! The embedded default store: one SQLite file in WAL mode.

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::{SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use crate::{
    ApprovalRecord, EventBounds, Lease, LeaseState, MessageRecord, NewEvent, NewRun, Result,
    RunFinish, RunOutcome, RunRecord, RunState, SessionRecord, SessionUpdate, Store, StoreError,
    StoredEvent,
};

/// Milliseconds since the Unix epoch. A SQLite file has one machine's clock, so the process
/// clock is the database's clock.
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

fn lease_from_row(r: &SqliteRow) -> Result<Lease> {
    Ok(Lease {
        name: r.try_get("name")?,
        holder: r.try_get("holder")?,
        token: u64::try_from(r.try_get::<i64, _>("token")?)
            .map_err(|_| StoreError::Corrupt("negative lease token".into()))?,
    })
}

/// Moves a queued or running run to its final state and drops its lease; `false` if it was
/// neither.
async fn close_run(
    conn: &mut sqlx::SqliteConnection,
    id: Uuid,
    outcome: &RunOutcome,
    at: &str,
) -> Result<bool> {
    let (error, stop_reason) = outcome.columns();
    let res = sqlx::query(
        "UPDATE runs SET state = ?, error = ?, stop_reason = ?, finished_at = ? \
         WHERE id = ? AND state IN ('queued', 'running')",
    )
    .bind(outcome.state().as_str())
    .bind(error)
    .bind(stop_reason)
    .bind(at)
    .bind(id.to_string())
    .execute(&mut *conn)
    .await?;
    if res.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query("DELETE FROM leases WHERE name = ?")
        .bind(Lease::run_name(id))
        .execute(&mut *conn)
        .await?;
    Ok(true)
}

/// Fails with [`StoreError::Fenced`] unless `fence` is the current holder and token of its
/// lease. A no-op UPDATE rather than a SELECT: it takes SQLite's write lock at once, so the
/// check and the writes after it are one step no takeover can come between.
async fn check_fence(conn: &mut sqlx::SqliteConnection, fence: &Lease) -> Result<()> {
    let res =
        sqlx::query("UPDATE leases SET token = token WHERE name = ? AND holder = ? AND token = ?")
            .bind(&fence.name)
            .bind(&fence.holder)
            .bind(to_i64(fence.token)?)
            .execute(&mut *conn)
            .await?;
    if res.rows_affected() == 0 {
        return Err(StoreError::Fenced(format!(
            "lease {} with token {} held by {:?} is no longer current",
            fence.name, fence.token, fence.holder
        )));
    }
    Ok(())
}

/// Rows per multi-row `INSERT INTO events` (6 parameters each, far below SQLite's limit).
const INSERT_CHUNK: usize = 64;

fn insert_events_sql(rows: usize) -> String {
    let mut sql = String::from(
        "INSERT INTO events (session_id, seq, run_id, kind, payload, created_at) VALUES ",
    );
    for i in 0..rows {
        if i > 0 {
            sql.push(',');
        }
        sql.push_str("(?, ?, ?, ?, ?, ?)");
    }
    sql
}

/// How to open a SQLite store.
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    pub path: PathBuf,
    /// Connections in the pool (readers; SQLite serializes writers itself).
    pub max_connections: u32,
    /// `synchronous = FULL` instead of `NORMAL`: survives power loss, not only process
    /// crashes, at the price of an fsync per commit.
    pub synchronous_full: bool,
}

impl SqliteOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_connections: 8,
            synchronous_full: false,
        }
    }
}

/// [`Store`] on a SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating if needed) the database and applies pending migrations.
    pub async fn open(opts: SqliteOptions) -> Result<Self> {
        let connect = switchboard_db::sqlite_options(&opts.path)
            .synchronous(if opts.synchronous_full {
                SqliteSynchronous::Full
            } else {
                SqliteSynchronous::Normal
            })
            // Rows come from sqlx's worker thread through a bounded channel; at the default
            // (50) a replay page of 2,000 events makes the worker block and be woken 40
            // times. A page's worth lets it read the page in one go.
            .row_buffer_size(2048);
        let pool = switchboard_db::open_sqlite(
            connect,
            SqlitePoolOptions::new()
                .max_connections(opts.max_connections.max(1))
                .min_connections(1),
            &crate::migrate::MIGRATIONS,
        )
        .await
        .map_err(|e| StoreError::Open(e.to_string()))?;
        Ok(Self {
            pool,
            path: opts.path,
        })
    }

    /// Opens a store at `path` with default options.
    pub async fn open_path(path: &Path) -> Result<Self> {
        Self::open(SqliteOptions::new(path)).await
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the pool, waiting for connections to finish.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn uuid_col(row: &SqliteRow, col: &str) -> Result<Uuid> {
    let s: String = row.try_get(col)?;
    Uuid::parse_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

fn opt_uuid_col(row: &SqliteRow, col: &str) -> Result<Option<Uuid>> {
    let s: Option<String> = row.try_get(col)?;
    s.map(|s| Uuid::parse_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}"))))
        .transpose()
}

fn json_col(row: &SqliteRow, col: &str) -> Result<serde_json::Value> {
    let s: String = row.try_get(col)?;
    serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

fn u64_col(row: &SqliteRow, col: &str) -> Result<u64> {
    let v: i64 = row.try_get(col)?;
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{col}: negative value {v}")))
}

fn to_i64(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| StoreError::Conflict(format!("value {v} out of range")))
}

fn session_from_row(row: &SqliteRow) -> Result<SessionRecord> {
    Ok(SessionRecord {
        id: uuid_col(row, "id")?,
        title: row.try_get("title")?,
        cwd: row.try_get("cwd")?,
        config: json_col(row, "config")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        last_seq: u64_col(row, "last_seq")?,
        archived_at: row.try_get("archived_at")?,
    })
}

fn run_from_row(row: &SqliteRow) -> Result<RunRecord> {
    let state: String = row.try_get("state")?;
    Ok(RunRecord {
        id: uuid_col(row, "id")?,
        session_id: uuid_col(row, "session_id")?,
        state: RunState::parse(&state)
            .ok_or_else(|| StoreError::Corrupt(format!("run state {state:?}")))?,
        input: json_col(row, "input")?,
        error: row.try_get("error")?,
        stop_reason: row.try_get("stop_reason")?,
        created_at: row.try_get("created_at")?,
        started_at: row.try_get("started_at")?,
        finished_at: row.try_get("finished_at")?,
    })
}

fn event_from_row(row: &SqliteRow, session_id: Uuid) -> Result<StoredEvent> {
    Ok(StoredEvent {
        session_id,
        seq: u64_col(row, "seq")?,
        run_id: opt_uuid_col(row, "run_id")?,
        kind: row.try_get("kind")?,
        payload: row.try_get("payload")?,
        created_at: row.try_get("created_at")?,
    })
}

fn message_from_row(row: &SqliteRow) -> Result<MessageRecord> {
    let tool_calls: Option<String> = row.try_get("tool_calls")?;
    Ok(MessageRecord {
        id: uuid_col(row, "id")?,
        session_id: uuid_col(row, "session_id")?,
        run_id: opt_uuid_col(row, "run_id")?,
        role: row.try_get("role")?,
        content: row.try_get("content")?,
        tool_calls: tool_calls
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("tool_calls: {e}")))?,
        tool_call_id: row.try_get("tool_call_id")?,
        is_error: row.try_get::<i64, _>("is_error")? != 0,
        created_at: row.try_get("created_at")?,
    })
}

fn approval_from_row(row: &SqliteRow) -> Result<ApprovalRecord> {
    let calls: String = row.try_get("tool_calls")?;
    Ok(ApprovalRecord {
        session_id: uuid_col(row, "session_id")?,
        run_id: uuid_col(row, "run_id")?,
        tool_calls: serde_json::from_str(&calls)
            .map_err(|e| StoreError::Corrupt(format!("approval tool_calls: {e}")))?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
    })
}

const RUN_COLS: &str =
    "id, session_id, state, input, error, stop_reason, created_at, started_at, finished_at";

impl SqliteStore {
    async fn enqueue(&self, run: &NewRun, front: bool) -> Result<RunRecord> {
        let input = run.input.to_string();
        let pos_sql = if front {
            "(SELECT COALESCE(MIN(queue_pos), 0) - 1 FROM runs WHERE session_id = ?2)"
        } else {
            "(SELECT COALESCE(MAX(queue_pos), 0) + 1 FROM runs WHERE session_id = ?2)"
        };
        let sql = format!(
            "INSERT INTO runs (id, session_id, queue_pos, state, input, created_at) \
             VALUES (?1, ?2, {pos_sql}, 'queued', ?3, ?4)"
        );
        let res = sqlx::query(&sql)
            .bind(run.id.to_string())
            .bind(run.session_id.to_string())
            .bind(&input)
            .bind(&run.created_at)
            .execute(&self.pool)
            .await;
        match res {
            Ok(_) => {}
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                return Err(StoreError::NotFound(format!("session {}", run.session_id)));
            }
            Err(e) => return Err(e.into()),
        }
        Ok(RunRecord {
            id: run.id,
            session_id: run.session_id,
            state: RunState::Queued,
            input: run.input.clone(),
            error: None,
            stop_reason: None,
            created_at: run.created_at.clone(),
            started_at: None,
            finished_at: None,
        })
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let now = now_ms();
        let row = sqlx::query(
            "INSERT INTO leases (name, holder, token, expires_at_ms) VALUES (?1, ?2, 1, ?3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             token = leases.token + 1, expires_at_ms = excluded.expires_at_ms \
             WHERE leases.expires_at_ms <= ?4 OR leases.holder = excluded.holder \
             RETURNING name, holder, token",
        )
        .bind(name)
        .bind(holder)
        .bind(now.saturating_add(ttl_ms(ttl)))
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| lease_from_row(&r)).transpose()
    }

    async fn take_over_lease(
        &self,
        expired: &Lease,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let now = now_ms();
        let row = sqlx::query(
            "UPDATE leases SET holder = ?, token = token + 1, expires_at_ms = ? \
             WHERE name = ? AND token = ? AND expires_at_ms <= ? RETURNING name, holder, token",
        )
        .bind(holder)
        .bind(now.saturating_add(ttl_ms(ttl)))
        .bind(&expired.name)
        .bind(to_i64(expired.token)?)
        .bind(now)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| lease_from_row(&r)).transpose()
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE leases SET expires_at_ms = ? WHERE name = ? AND holder = ? AND token = ?",
        )
        .bind(now_ms().saturating_add(ttl_ms(ttl)))
        .bind(&lease.name)
        .bind(&lease.holder)
        .bind(to_i64(lease.token)?)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<bool> {
        let res = sqlx::query("DELETE FROM leases WHERE name = ? AND holder = ? AND token = ?")
            .bind(&lease.name)
            .bind(&lease.holder)
            .bind(to_i64(lease.token)?)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn get_lease(&self, name: &str) -> Result<Option<LeaseState>> {
        let row = sqlx::query(
            "SELECT name, holder, token, expires_at_ms <= ? AS expired FROM leases WHERE name = ?",
        )
        .bind(now_ms())
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| {
            Ok(LeaseState {
                lease: lease_from_row(&r)?,
                expired: r.try_get::<bool, _>("expired")?,
            })
        })
        .transpose()
    }

    async fn expired_leases(&self, prefix: &str) -> Result<Vec<Lease>> {
        let rows = sqlx::query(
            "SELECT name, holder, token FROM leases \
             WHERE expires_at_ms <= ? AND substr(name, 1, length(?2)) = ?2 ORDER BY name",
        )
        .bind(now_ms())
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(lease_from_row).collect()
    }

    fn kind(&self) -> &'static str {
        "sqlite"
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    async fn close(&self) {
        self.pool.close().await;
    }

    async fn create_session(&self, s: &SessionRecord) -> Result<()> {
        sqlx::query(
            "INSERT INTO sessions (id, title, cwd, config, created_at, updated_at, last_seq) \
             VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(s.id.to_string())
        .bind(&s.title)
        .bind(&s.cwd)
        .bind(s.config.to_string())
        .bind(&s.created_at)
        .bind(&s.updated_at)
        .bind(to_i64(s.last_seq)?)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    async fn get_session(&self, id: Uuid) -> Result<Option<SessionRecord>> {
        sqlx::query("SELECT * FROM sessions WHERE id = ?")
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .map(|r| session_from_row(&r))
            .transpose()
    }

    async fn list_sessions(
        &self,
        limit: u32,
        offset: u32,
        archived: bool,
    ) -> Result<(Vec<SessionRecord>, u64)> {
        let rows = sqlx::query(
            "SELECT * FROM sessions WHERE (archived_at IS NOT NULL) = ? \
             ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
        )
        .bind(archived)
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&self.pool)
        .await?;
        let total: i64 =
            sqlx::query("SELECT COUNT(*) AS n FROM sessions WHERE (archived_at IS NOT NULL) = ?")
                .bind(archived)
                .fetch_one(&self.pool)
                .await?
                .try_get("n")?;
        let sessions = rows
            .iter()
            .map(session_from_row)
            .collect::<Result<Vec<_>>>()?;
        Ok((sessions, total.max(0) as u64))
    }

    async fn delete_session(&self, id: Uuid) -> Result<bool> {
        let mut tx = self.pool.begin().await?;
        let id = id.to_string();
        for table in ["events", "messages", "runs"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE session_id = ?"))
                .bind(&id)
                .execute(&mut *tx)
                .await?;
        }
        let n = sqlx::query("DELETE FROM sessions WHERE id = ?")
            .bind(&id)
            .execute(&mut *tx)
            .await?
            .rows_affected();
        tx.commit().await?;
        Ok(n > 0)
    }

    async fn update_session(&self, id: Uuid, u: &SessionUpdate) -> Result<bool> {
        let (set_archive, archived_at) = match &u.archived_at {
            Some(a) => (true, a.clone()),
            None => (false, None),
        };
        let n = sqlx::query(
            "UPDATE sessions SET title = COALESCE(?1, title), \
             archived_at = CASE WHEN ?2 THEN ?3 ELSE archived_at END, updated_at = ?4 WHERE id = ?5",
        )
        .bind(&u.title)
        .bind(set_archive)
        .bind(archived_at)
        .bind(&u.updated_at)
        .bind(id.to_string())
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn touch_session(&self, id: Uuid, at: &str) -> Result<()> {
        sqlx::query("UPDATE sessions SET updated_at = ? WHERE id = ?")
            .bind(at)
            .bind(id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn write_events(
        &self,
        events: &[NewEvent],
        fences: &[Lease],
        finishes: &[RunFinish],
    ) -> Result<()> {
        if events.is_empty() && finishes.is_empty() {
            return Ok(());
        }
        let mut tx = self.pool.begin().await?;
        for f in fences {
            check_fence(&mut tx, f).await?;
        }
        // Multi-row INSERTs: per-statement overhead (a round trip to sqlx's SQLite worker
        // thread) dominates single-row inserts. Statements are cached per row count, and
        // there are at most INSERT_CHUNK of them.
        for chunk in events.chunks(INSERT_CHUNK) {
            let sql = insert_events_sql(chunk.len());
            let mut q = sqlx::query(&sql);
            for ev in chunk {
                q = q
                    .bind(ev.session_id.to_string())
                    .bind(to_i64(ev.seq)?)
                    .bind(ev.run_id.map(|r| r.to_string()))
                    .bind(&ev.kind)
                    .bind(&ev.payload)
                    .bind(&ev.created_at);
            }
            match q.execute(&mut *tx).await {
                Ok(_) => {}
                Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                    let mut ids: Vec<String> =
                        chunk.iter().map(|e| e.session_id.to_string()).collect();
                    ids.dedup();
                    return Err(StoreError::NotFound(format!("session {}", ids.join(", "))));
                }
                Err(e) => return Err(e.into()),
            }
        }
        let mut highest: Vec<(Uuid, u64)> = Vec::new();
        for ev in events {
            match highest.iter_mut().find(|(s, _)| *s == ev.session_id) {
                Some((_, seq)) => *seq = (*seq).max(ev.seq),
                None => highest.push((ev.session_id, ev.seq)),
            }
        }
        for (session_id, seq) in highest {
            sqlx::query("UPDATE sessions SET last_seq = MAX(last_seq, ?) WHERE id = ?")
                .bind(to_i64(seq)?)
                .bind(session_id.to_string())
                .execute(&mut *tx)
                .await?;
        }
        for f in finishes {
            if !close_run(&mut tx, f.run_id, &f.outcome, &f.at).await? {
                return Err(StoreError::RunNotActive(f.run_id));
            }
        }
        tx.commit().await?;
        Ok(())
    }

    async fn read_events(
        &self,
        session_id: Uuid,
        after: u64,
        limit: u32,
    ) -> Result<Vec<StoredEvent>> {
        let rows = sqlx::query(
            "SELECT seq, run_id, kind, payload, created_at FROM events \
             WHERE session_id = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session_id.to_string())
        .bind(to_i64(after)?)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| event_from_row(r, session_id)).collect()
    }

    async fn event_bounds(&self, session_id: Uuid) -> Result<EventBounds> {
        let sid = session_id.to_string();
        let row = sqlx::query(
            "SELECT (SELECT MIN(seq) FROM events WHERE session_id = ?1) AS oldest, \
                    (SELECT MAX(seq) FROM events WHERE session_id = ?1) AS newest, \
                    (SELECT last_seq FROM sessions WHERE id = ?1) AS last_seq",
        )
        .bind(&sid)
        .fetch_one(&self.pool)
        .await?;
        let oldest: Option<i64> = row.try_get("oldest")?;
        let newest: Option<i64> = row.try_get("newest")?;
        let last_seq: Option<i64> = row.try_get("last_seq")?;
        Ok(EventBounds {
            oldest: oldest.map(|v| v.max(0) as u64),
            newest: newest.map(|v| v.max(0) as u64),
            last_seq: last_seq.unwrap_or(0).max(newest.unwrap_or(0)).max(0) as u64,
        })
    }

    async fn prune_events_before(&self, cutoff: &str) -> Result<u64> {
        Ok(sqlx::query("DELETE FROM events WHERE created_at < ?")
            .bind(cutoff)
            .execute(&self.pool)
            .await?
            .rows_affected())
    }

    async fn enqueue_run(&self, run: &NewRun) -> Result<RunRecord> {
        self.enqueue(run, false).await
    }

    async fn enqueue_run_front(&self, run: &NewRun) -> Result<RunRecord> {
        self.enqueue(run, true).await
    }

    async fn get_run(&self, id: Uuid) -> Result<Option<RunRecord>> {
        sqlx::query(&format!("SELECT {RUN_COLS} FROM runs WHERE id = ?"))
            .bind(id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .map(|r| run_from_row(&r))
            .transpose()
    }

    async fn start_run(
        &self,
        id: Uuid,
        at: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunRecord, Lease)> {
        let mut tx = self.pool.begin().await?;
        let res = sqlx::query(
            "UPDATE runs SET state = 'running', started_at = ? WHERE id = ? AND state = 'queued'",
        )
        .bind(at)
        .bind(id.to_string())
        .execute(&mut *tx)
        .await?;
        if res.rows_affected() == 0 {
            return Err(StoreError::Conflict(format!("run {id} is not queued")));
        }
        let name = Lease::run_name(id);
        let token: i64 = sqlx::query(
            "INSERT INTO leases (name, holder, token, expires_at_ms) VALUES (?1, ?2, 1, ?3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             token = leases.token + 1, expires_at_ms = excluded.expires_at_ms RETURNING token",
        )
        .bind(&name)
        .bind(holder)
        .bind(now_ms().saturating_add(ttl_ms(ttl)))
        .fetch_one(&mut *tx)
        .await?
        .try_get("token")?;
        let run = sqlx::query(&format!("SELECT {RUN_COLS} FROM runs WHERE id = ?"))
            .bind(id.to_string())
            .fetch_one(&mut *tx)
            .await?;
        let run = run_from_row(&run)?;
        tx.commit().await?;
        let lease = Lease {
            name,
            holder: holder.to_string(),
            token: u64::try_from(token).map_err(|_| StoreError::Corrupt("lease token".into()))?,
        };
        Ok((run, lease))
    }

    async fn finish_run(
        &self,
        id: Uuid,
        outcome: &RunOutcome,
        at: &str,
        fence: Option<&Lease>,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if let Some(f) = fence {
            check_fence(&mut tx, f).await?;
        }
        if !close_run(&mut tx, id, outcome, at).await? {
            return Err(StoreError::Conflict(format!("run {id} is not active")));
        }
        tx.commit().await?;
        Ok(())
    }

    async fn cancel_queued_run(&self, id: Uuid, at: &str) -> Result<bool> {
        let res = sqlx::query(
            "UPDATE runs SET state = 'cancelled', stop_reason = 'cancelled', finished_at = ? WHERE id = ? AND state = 'queued'",
        )
        .bind(at)
        .bind(id.to_string())
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn active_run(&self, session_id: Uuid) -> Result<Option<RunRecord>> {
        sqlx::query(&format!(
            "SELECT {RUN_COLS} FROM runs WHERE session_id = ? AND state = 'running'"
        ))
        .bind(session_id.to_string())
        .fetch_optional(&self.pool)
        .await?
        .map(|r| run_from_row(&r))
        .transpose()
    }

    async fn next_queued_run(&self, session_id: Uuid) -> Result<Option<RunRecord>> {
        sqlx::query(&format!(
            "SELECT {RUN_COLS} FROM runs WHERE session_id = ? AND state = 'queued' \
             ORDER BY queue_pos LIMIT 1"
        ))
        .bind(session_id.to_string())
        .fetch_optional(&self.pool)
        .await?
        .map(|r| run_from_row(&r))
        .transpose()
    }

    async fn runs_in_state(&self, state: RunState) -> Result<Vec<RunRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLS} FROM runs WHERE state = ? ORDER BY session_id, queue_pos"
        ))
        .bind(state.as_str())
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    async fn append_message(&self, m: &MessageRecord, fence: Option<&Lease>) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if let Some(f) = fence {
            check_fence(&mut tx, f).await?;
        }
        let res = sqlx::query(
            "INSERT INTO messages (id, session_id, pos, run_id, role, content, tool_calls, tool_call_id, created_at, is_error) \
             VALUES (?1, ?2, (SELECT COALESCE(MAX(pos), 0) + 1 FROM messages WHERE session_id = ?2), ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        )
        .bind(m.id.to_string())
        .bind(m.session_id.to_string())
        .bind(m.run_id.map(|r| r.to_string()))
        .bind(&m.role)
        .bind(&m.content)
        .bind(m.tool_calls.as_ref().map(|v| v.to_string()))
        .bind(&m.tool_call_id)
        .bind(&m.created_at)
        .bind(i64::from(m.is_error))
        .execute(&mut *tx)
        .await;
        match res {
            Ok(_) => Ok(tx.commit().await?),
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                Err(StoreError::NotFound(format!("session {}", m.session_id)))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn list_messages(
        &self,
        session_id: Uuid,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<MessageRecord>, u64)> {
        let sid = session_id.to_string();
        let rows = sqlx::query(
            "SELECT * FROM messages WHERE session_id = ? ORDER BY pos LIMIT ? OFFSET ?",
        )
        .bind(&sid)
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&self.pool)
        .await?;
        let total: i64 = sqlx::query("SELECT COUNT(*) AS n FROM messages WHERE session_id = ?")
            .bind(&sid)
            .fetch_one(&self.pool)
            .await?
            .try_get("n")?;
        let msgs = rows
            .iter()
            .map(message_from_row)
            .collect::<Result<Vec<_>>>()?;
        Ok((msgs, total.max(0) as u64))
    }

    async fn put_approval(&self, a: &ApprovalRecord, fence: Option<&Lease>) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if let Some(f) = fence {
            check_fence(&mut tx, f).await?;
        }
        let res = sqlx::query(
            "INSERT INTO approvals (session_id, run_id, tool_calls, created_at, expires_at) \
             VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (session_id) DO UPDATE SET run_id = excluded.run_id, \
             tool_calls = excluded.tool_calls, created_at = excluded.created_at, \
             expires_at = excluded.expires_at",
        )
        .bind(a.session_id.to_string())
        .bind(a.run_id.to_string())
        .bind(a.tool_calls.to_string())
        .bind(&a.created_at)
        .bind(&a.expires_at)
        .execute(&mut *tx)
        .await;
        match res {
            Ok(_) => Ok(tx.commit().await?),
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                Err(StoreError::NotFound(format!("session {}", a.session_id)))
            }
            Err(e) => Err(e.into()),
        }
    }

    async fn get_approval(&self, session_id: Uuid) -> Result<Option<ApprovalRecord>> {
        sqlx::query("SELECT * FROM approvals WHERE session_id = ?")
            .bind(session_id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(approval_from_row)
            .transpose()
    }

    async fn delete_approval(&self, session_id: Uuid, run_id: Uuid) -> Result<bool> {
        let res = sqlx::query("DELETE FROM approvals WHERE session_id = ? AND run_id = ?")
            .bind(session_id.to_string())
            .bind(run_id.to_string())
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        sqlx::query("SELECT * FROM approvals ORDER BY created_at")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(approval_from_row)
            .collect()
    }

    async fn get_backend_state(&self, session_id: Uuid) -> Result<Option<serde_json::Value>> {
        let row = sqlx::query("SELECT backend_state FROM sessions WHERE id = ?")
            .bind(session_id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("session {session_id}")))?;
        let raw: Option<String> = row.try_get("backend_state")?;
        raw.map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("backend_state: {e}")))
    }

    async fn set_backend_state(
        &self,
        session_id: Uuid,
        state: Option<&serde_json::Value>,
        fence: Option<&Lease>,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        if let Some(f) = fence {
            check_fence(&mut tx, f).await?;
        }
        let res = sqlx::query("UPDATE sessions SET backend_state = ? WHERE id = ?")
            .bind(state.map(|v| v.to_string()))
            .bind(session_id.to_string())
            .execute(&mut *tx)
            .await?;
        if res.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("session {session_id}")));
        }
        tx.commit().await?;
        Ok(())
    }
}
