//! The server store: PostgreSQL, for deployments that run a database server anyway or share
//! one database between several gateway instances.
//!
//! It behaves like [`SqliteStore`](crate::SqliteStore) — same rows back, same errors, same
//! order — and passes the same [`conformance`](crate::conformance) suite. Where SQLite gets
//! correctness for free from its single writer, this store takes row locks instead:
//!
//! - per-session positions handed out as `MAX(...) + 1` (the follow-up queue, the transcript)
//!   are computed while holding the session's row lock, so concurrent writers never get the
//!   same position;
//! - event seqs are chosen by the caller and guarded by the `(session_id, seq)` primary key: of
//!   two concurrent appenders of one seq, one commits and the other gets a
//!   [`StoreError::Conflict`]; `last_seq` only ever grows (`GREATEST`).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::{PgPool, Postgres, Row, Transaction};
use uuid::Uuid;

use crate::{
    ApprovalRecord, EventBounds, Lease, LeaseState, MessageRecord, NewEvent, NewRun, Result,
    RunFinish, RunOutcome, RunRecord, RunState, SessionRecord, SessionUpdate, Store, StoreError,
    StoredEvent,
};

/// Now, in milliseconds since the Unix epoch, by the database server's clock: instances on
/// different machines judge lease expiry by one clock.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 2)
}

fn lease_from_row(r: &PgRow) -> Result<Lease> {
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
    tx: &mut Transaction<'_, Postgres>,
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
    .bind(id)
    .execute(&mut **tx)
    .await?;
    if res.rows_affected() == 0 {
        return Ok(false);
    }
    sqlx::query("DELETE FROM leases WHERE name = $1")
        .bind(Lease::run_name(id))
        .execute(&mut **tx)
        .await?;
    Ok(true)
}

/// Fails with [`StoreError::Fenced`] unless `fence` is the current holder and token of its
/// lease. A no-op UPDATE rather than a SELECT: it keeps the lease row locked until the
/// transaction ends, so a takeover waits for these writes or they wait for it — never both.
/// Callers check fences before taking any other row lock (sessions), in name order.
async fn check_fence(tx: &mut Transaction<'_, Postgres>, fence: &Lease) -> Result<()> {
    let res = sqlx::query(
        "UPDATE leases SET token = token WHERE name = $1 AND holder = $2 AND token = $3",
    )
    .bind(&fence.name)
    .bind(&fence.holder)
    .bind(to_i64(fence.token)?)
    .execute(&mut **tx)
    .await?;
    if res.rows_affected() == 0 {
        return Err(StoreError::Fenced(format!(
            "lease {} with token {} held by {:?} is no longer current",
            fence.name, fence.token, fence.holder
        )));
    }
    Ok(())
}

/// Rows per multi-row `INSERT INTO events` (6 parameters each, far below PostgreSQL's limit
/// of 65535). Each row count is one prepared statement per connection, so this also bounds
/// how many of them a connection keeps.
const INSERT_CHUNK: usize = 64;

fn insert_events_sql(rows: usize) -> String {
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

/// How to open a PostgreSQL store.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://user:password@host:port/database?options` — the URL forms sqlx accepts
    /// (`sslmode`, `application_name`, …). The database must exist; the migrations create
    /// the tables in it.
    pub url: String,
    /// Connections in the pool.
    pub max_connections: u32,
    /// How long to wait for a connection (a new one, or a free one from the pool) before
    /// failing.
    pub connect_timeout: Duration,
}

impl PostgresOptions {
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Never prints the password: options end up in logs.
impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let target = PgConnectOptions::from_str(&self.url)
            .map(|c| describe(&c))
            .unwrap_or_else(|_| "<invalid url>".into());
        f.debug_struct("PostgresOptions")
            .field("url", &target)
            .field("max_connections", &self.max_connections)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

/// `postgres://user@host:port/database`, for messages: the URL without the password.
fn describe(c: &PgConnectOptions) -> String {
    format!(
        "postgres://{}@{}:{}/{}",
        c.get_username(),
        c.get_host(),
        c.get_port(),
        c.get_database().unwrap_or("")
    )
}

/// [`Store`] on a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PostgresStore {
    pool: PgPool,
}

impl PostgresStore {
    /// Connects and applies pending migrations. Several instances may open one database at
    /// once: migrations are serialized by an advisory lock.
    pub async fn open(opts: PostgresOptions) -> Result<Self> {
        let mut connect = PgConnectOptions::from_str(&opts.url)
            .map_err(|e| StoreError::Open(format!("invalid PostgreSQL URL: {e}")))?;
        if connect.get_application_name().is_none() {
            connect = connect.application_name("switchboard");
        }
        let target = describe(&connect);
        let pool = PgPoolOptions::new()
            .max_connections(opts.max_connections.max(1))
            .acquire_timeout(opts.connect_timeout)
            .connect_with(connect)
            .await
            .map_err(|e| StoreError::Open(format!("{target}: {e}")))?;
        crate::migrate::run_postgres(&pool).await?;
        Ok(Self { pool })
    }

    /// Closes the pool, waiting for connections to finish.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn json_col(row: &PgRow, col: &str) -> Result<serde_json::Value> {
    let s: String = row.try_get(col)?;
    serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

fn u64_col(row: &PgRow, col: &str) -> Result<u64> {
    let v: i64 = row.try_get(col)?;
    u64::try_from(v).map_err(|_| StoreError::Corrupt(format!("{col}: negative value {v}")))
}

fn to_i64(v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| StoreError::Conflict(format!("value {v} out of range")))
}

fn session_from_row(row: &PgRow) -> Result<SessionRecord> {
    Ok(SessionRecord {
        id: row.try_get("id")?,
        title: row.try_get("title")?,
        cwd: row.try_get("cwd")?,
        config: json_col(row, "config")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        last_seq: u64_col(row, "last_seq")?,
        archived_at: row.try_get("archived_at")?,
    })
}

fn run_from_row(row: &PgRow) -> Result<RunRecord> {
    let state: String = row.try_get("state")?;
    Ok(RunRecord {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
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

fn event_from_row(row: &PgRow, session_id: Uuid) -> Result<StoredEvent> {
    Ok(StoredEvent {
        session_id,
        seq: u64_col(row, "seq")?,
        run_id: row.try_get("run_id")?,
        kind: row.try_get("kind")?,
        payload: row.try_get("payload")?,
        created_at: row.try_get("created_at")?,
    })
}

fn message_from_row(row: &PgRow) -> Result<MessageRecord> {
    let tool_calls: Option<String> = row.try_get("tool_calls")?;
    Ok(MessageRecord {
        id: row.try_get("id")?,
        session_id: row.try_get("session_id")?,
        run_id: row.try_get("run_id")?,
        role: row.try_get("role")?,
        content: row.try_get("content")?,
        tool_calls: tool_calls
            .map(|s| serde_json::from_str(&s))
            .transpose()
            .map_err(|e| StoreError::Corrupt(format!("tool_calls: {e}")))?,
        tool_call_id: row.try_get("tool_call_id")?,
        is_error: row.try_get("is_error")?,
        created_at: row.try_get("created_at")?,
    })
}

fn approval_from_row(row: &PgRow) -> Result<ApprovalRecord> {
    let calls: String = row.try_get("tool_calls")?;
    Ok(ApprovalRecord {
        session_id: row.try_get("session_id")?,
        run_id: row.try_get("run_id")?,
        tool_calls: serde_json::from_str(&calls)
            .map_err(|e| StoreError::Corrupt(format!("approval tool_calls: {e}")))?,
        created_at: row.try_get("created_at")?,
        expires_at: row.try_get("expires_at")?,
    })
}

const SESSION_COLS: &str = "id, title, cwd, config, created_at, updated_at, last_seq, archived_at";

const RUN_COLS: &str =
    "id, session_id, state, input, error, stop_reason, created_at, started_at, finished_at";

const MESSAGE_COLS: &str =
    "id, session_id, run_id, role, content, tool_calls, tool_call_id, is_error, created_at";

const APPROVAL_COLS: &str = "session_id, run_id, tool_calls, created_at, expires_at";

/// Locks the session's row until `tx` ends, so that a position computed as `MAX(...) + 1`
/// in the session is not handed out twice. `FOR NO KEY UPDATE` does not block inserts that
/// only reference the session (event appends) but keeps it from being deleted meanwhile.
/// `false` if the session does not exist.
///
/// The statement that reads `MAX` must be a later one: under READ COMMITTED each statement
/// sees what was committed before it started, so it sees the previous holder's row.
async fn lock_session(tx: &mut Transaction<'_, Postgres>, id: Uuid) -> Result<bool> {
    Ok(
        sqlx::query("SELECT 1 AS one FROM sessions WHERE id = $1 FOR NO KEY UPDATE")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
            .is_some(),
    )
}

impl PostgresStore {
    async fn enqueue(&self, run: &NewRun, front: bool) -> Result<RunRecord> {
        let input = run.input.to_string();
        let pos_sql = if front {
            "(SELECT COALESCE(MIN(queue_pos), 0) - 1 FROM runs WHERE session_id = $2)"
        } else {
            "(SELECT COALESCE(MAX(queue_pos), 0) + 1 FROM runs WHERE session_id = $2)"
        };
        let sql = format!(
            "INSERT INTO runs (id, session_id, queue_pos, state, input, created_at) \
             VALUES ($1, $2, {pos_sql}, 'queued', $3, $4)"
        );
        let mut tx = self.pool.begin().await?;
        if !lock_session(&mut tx, run.session_id).await? {
            return Err(StoreError::NotFound(format!("session {}", run.session_id)));
        }
        let res = sqlx::query(&sql)
            .bind(run.id)
            .bind(run.session_id)
            .bind(&input)
            .bind(&run.created_at)
            .execute(&mut *tx)
            .await;
        match res {
            Ok(_) => {}
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                return Err(StoreError::NotFound(format!("session {}", run.session_id)));
            }
            Err(e) => return Err(e.into()),
        }
        tx.commit().await?;
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
impl Store for PostgresStore {
    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let row = sqlx::query(&format!(
            "INSERT INTO leases (name, holder, token, expires_at_ms) VALUES ($1, $2, 1, {NOW_MS} + $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             token = leases.token + 1, expires_at_ms = excluded.expires_at_ms \
             WHERE leases.expires_at_ms <= {NOW_MS} OR leases.holder = excluded.holder \
             RETURNING name, holder, token"
        ))
        .bind(name)
        .bind(holder)
        .bind(ttl_ms(ttl))
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
        let row = sqlx::query(&format!(
            "UPDATE leases SET holder = $1, token = token + 1, expires_at_ms = {NOW_MS} + $2 \
             WHERE name = $3 AND token = $4 AND expires_at_ms <= {NOW_MS} \
             RETURNING name, holder, token"
        ))
        .bind(holder)
        .bind(ttl_ms(ttl))
        .bind(&expired.name)
        .bind(to_i64(expired.token)?)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|r| lease_from_row(&r)).transpose()
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        let res = sqlx::query(&format!(
            "UPDATE leases SET expires_at_ms = {NOW_MS} + $1 \
             WHERE name = $2 AND holder = $3 AND token = $4"
        ))
        .bind(ttl_ms(ttl))
        .bind(&lease.name)
        .bind(&lease.holder)
        .bind(to_i64(lease.token)?)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<bool> {
        let res = sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2 AND token = $3")
            .bind(&lease.name)
            .bind(&lease.holder)
            .bind(to_i64(lease.token)?)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn get_lease(&self, name: &str) -> Result<Option<LeaseState>> {
        let row = sqlx::query(&format!(
            "SELECT name, holder, token, expires_at_ms <= {NOW_MS} AS expired \
             FROM leases WHERE name = $1"
        ))
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
        let rows = sqlx::query(&format!(
            "SELECT name, holder, token FROM leases \
             WHERE expires_at_ms <= {NOW_MS} AND left(name, length($1)) = $1 ORDER BY name"
        ))
        .bind(prefix)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(lease_from_row).collect()
    }

    fn kind(&self) -> &'static str {
        "postgres"
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
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(s.id)
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
        sqlx::query(&format!(
            "SELECT {SESSION_COLS} FROM sessions WHERE id = $1"
        ))
        .bind(id)
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
        let rows = sqlx::query(&format!(
            "SELECT {SESSION_COLS} FROM sessions WHERE (archived_at IS NOT NULL) = $1 \
             ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3"
        ))
        .bind(archived)
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&self.pool)
        .await?;
        let total: i64 =
            sqlx::query("SELECT COUNT(*) AS n FROM sessions WHERE (archived_at IS NOT NULL) = $1")
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
        // One statement, so atomic: the foreign keys cascade to runs, events, messages and
        // approvals. Rows that concurrent writers are adding go too: their inserts lock the
        // session row, so the delete waits for them to commit and then cascades over them.
        let n = sqlx::query("DELETE FROM sessions WHERE id = $1")
            .bind(id)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n > 0)
    }

    async fn update_session(&self, id: Uuid, u: &SessionUpdate) -> Result<bool> {
        let (set_archive, archived_at) = match &u.archived_at {
            Some(a) => (true, a.clone()),
            None => (false, None),
        };
        let n = sqlx::query(
            "UPDATE sessions SET title = COALESCE($1, title), \
             archived_at = CASE WHEN $2 THEN $3 ELSE archived_at END, updated_at = $4 WHERE id = $5",
        )
        .bind(&u.title)
        .bind(set_archive)
        .bind(archived_at)
        .bind(&u.updated_at)
        .bind(id)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(n > 0)
    }

    async fn touch_session(&self, id: Uuid, at: &str) -> Result<()> {
        sqlx::query("UPDATE sessions SET updated_at = $1 WHERE id = $2")
            .bind(at)
            .bind(id)
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
        // Rows go in sorted by (session, seq). The batch commits as a whole, so the order of
        // the inserts is invisible; but concurrent appenders then wait for each other's keys
        // in one global order and cannot deadlock — the later one gets a Conflict.
        let mut sorted: Vec<&NewEvent> = events.iter().collect();
        sorted.sort_by_key(|e| (e.session_id, e.seq));
        let mut tx = self.pool.begin().await?;
        let mut fences: Vec<&Lease> = fences.iter().collect();
        fences.sort_by(|a, b| a.name.cmp(&b.name));
        for f in fences {
            check_fence(&mut tx, f).await?;
        }
        for chunk in sorted.chunks(INSERT_CHUNK) {
            let sql = insert_events_sql(chunk.len());
            let mut q = sqlx::query(&sql);
            for ev in chunk {
                q = q
                    .bind(ev.session_id)
                    .bind(to_i64(ev.seq)?)
                    .bind(ev.run_id)
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
        // In session order too, so that appenders to several sessions lock the rows in the
        // same order. GREATEST: an appender of higher seqs may have committed first, and
        // last_seq never goes back.
        let mut highest: BTreeMap<Uuid, u64> = BTreeMap::new();
        for ev in events {
            let seq = highest.entry(ev.session_id).or_insert(ev.seq);
            *seq = (*seq).max(ev.seq);
        }
        for (session_id, seq) in highest {
            sqlx::query("UPDATE sessions SET last_seq = GREATEST(last_seq, $1) WHERE id = $2")
                .bind(to_i64(seq)?)
                .bind(session_id)
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
             WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(session_id)
        .bind(to_i64(after)?)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| event_from_row(r, session_id)).collect()
    }

    async fn event_bounds(&self, session_id: Uuid) -> Result<EventBounds> {
        let row = sqlx::query(
            "SELECT (SELECT MIN(seq) FROM events WHERE session_id = $1) AS oldest, \
                    (SELECT MAX(seq) FROM events WHERE session_id = $1) AS newest, \
                    (SELECT last_seq FROM sessions WHERE id = $1) AS last_seq",
        )
        .bind(session_id)
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
        // `created_at` has the "C" collation: a bytewise comparison, like SQLite's.
        Ok(sqlx::query("DELETE FROM events WHERE created_at < $1")
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
        sqlx::query(&format!("SELECT {RUN_COLS} FROM runs WHERE id = $1"))
            .bind(id)
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
        // A second running run in the session violates `runs_one_running`: a Conflict.
        let row = sqlx::query(&format!(
            "UPDATE runs SET state = 'running', started_at = $1 \
             WHERE id = $2 AND state = 'queued' RETURNING {RUN_COLS}"
        ))
        .bind(at)
        .bind(id)
        .fetch_optional(&mut *tx)
        .await?;
        let run = match row {
            Some(row) => run_from_row(&row)?,
            None => return Err(StoreError::Conflict(format!("run {id} is not queued"))),
        };
        let name = Lease::run_name(id);
        let row = sqlx::query(&format!(
            "INSERT INTO leases (name, holder, token, expires_at_ms) VALUES ($1, $2, 1, {NOW_MS} + $3) \
             ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
             token = leases.token + 1, expires_at_ms = excluded.expires_at_ms \
             RETURNING name, holder, token"
        ))
        .bind(&name)
        .bind(holder)
        .bind(ttl_ms(ttl))
        .fetch_one(&mut *tx)
        .await?;
        let lease = lease_from_row(&row)?;
        tx.commit().await?;
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
            "UPDATE runs SET state = 'cancelled', stop_reason = 'cancelled', finished_at = $1 WHERE id = $2 AND state = 'queued'",
        )
        .bind(at)
        .bind(id)
        .execute(&self.pool)
        .await?;
        Ok(res.rows_affected() == 1)
    }

    async fn active_run(&self, session_id: Uuid) -> Result<Option<RunRecord>> {
        sqlx::query(&format!(
            "SELECT {RUN_COLS} FROM runs WHERE session_id = $1 AND state = 'running'"
        ))
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| run_from_row(&r))
        .transpose()
    }

    async fn next_queued_run(&self, session_id: Uuid) -> Result<Option<RunRecord>> {
        sqlx::query(&format!(
            "SELECT {RUN_COLS} FROM runs WHERE session_id = $1 AND state = 'queued' \
             ORDER BY queue_pos LIMIT 1"
        ))
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?
        .map(|r| run_from_row(&r))
        .transpose()
    }

    async fn runs_in_state(&self, state: RunState) -> Result<Vec<RunRecord>> {
        let rows = sqlx::query(&format!(
            "SELECT {RUN_COLS} FROM runs WHERE state = $1 ORDER BY session_id, queue_pos"
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
        if !lock_session(&mut tx, m.session_id).await? {
            return Err(StoreError::NotFound(format!("session {}", m.session_id)));
        }
        let res = sqlx::query(
            "INSERT INTO messages (id, session_id, pos, run_id, role, content, tool_calls, tool_call_id, created_at, is_error) \
             VALUES ($1, $2, (SELECT COALESCE(MAX(pos), 0) + 1 FROM messages WHERE session_id = $2), $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(m.id)
        .bind(m.session_id)
        .bind(m.run_id)
        .bind(&m.role)
        .bind(&m.content)
        .bind(m.tool_calls.as_ref().map(|v| v.to_string()))
        .bind(&m.tool_call_id)
        .bind(&m.created_at)
        .bind(m.is_error)
        .execute(&mut *tx)
        .await;
        match res {
            Ok(_) => {}
            Err(sqlx::Error::Database(db)) if db.is_foreign_key_violation() => {
                return Err(StoreError::NotFound(format!("session {}", m.session_id)));
            }
            Err(e) => return Err(e.into()),
        }
        tx.commit().await?;
        Ok(())
    }

    async fn list_messages(
        &self,
        session_id: Uuid,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<MessageRecord>, u64)> {
        let rows = sqlx::query(&format!(
            "SELECT {MESSAGE_COLS} FROM messages WHERE session_id = $1 \
             ORDER BY pos LIMIT $2 OFFSET $3"
        ))
        .bind(session_id)
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&self.pool)
        .await?;
        let total: i64 = sqlx::query("SELECT COUNT(*) AS n FROM messages WHERE session_id = $1")
            .bind(session_id)
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
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (session_id) DO UPDATE SET run_id = excluded.run_id, \
             tool_calls = excluded.tool_calls, created_at = excluded.created_at, \
             expires_at = excluded.expires_at",
        )
        .bind(a.session_id)
        .bind(a.run_id)
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
        sqlx::query(&format!(
            "SELECT {APPROVAL_COLS} FROM approvals WHERE session_id = $1"
        ))
        .bind(session_id)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(approval_from_row)
        .transpose()
    }

    async fn delete_approval(&self, session_id: Uuid, run_id: Uuid) -> Result<bool> {
        let res = sqlx::query("DELETE FROM approvals WHERE session_id = $1 AND run_id = $2")
            .bind(session_id)
            .bind(run_id)
            .execute(&self.pool)
            .await?;
        Ok(res.rows_affected() > 0)
    }

    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        sqlx::query(&format!(
            "SELECT {APPROVAL_COLS} FROM approvals ORDER BY created_at, session_id"
        ))
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(approval_from_row)
        .collect()
    }

    async fn get_backend_state(&self, session_id: Uuid) -> Result<Option<serde_json::Value>> {
        let row = sqlx::query("SELECT backend_state FROM sessions WHERE id = $1")
            .bind(session_id)
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
        let res = sqlx::query("UPDATE sessions SET backend_state = $1 WHERE id = $2")
            .bind(state.map(|v| v.to_string()))
            .bind(session_id)
            .execute(&mut *tx)
            .await?;
        if res.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!("session {session_id}")));
        }
        tx.commit().await?;
        Ok(())
    }
}
