//! The [`Store`] operations of [`SqlStore`], each written once for both back-ends.

use std::time::Duration;

use async_trait::async_trait;
use uuid::Uuid;

use super::{
    APPROVAL_COLS, Cols, FILE_COLS, LockSession, MESSAGE_COLS, RUN_COLS, SESSION_COLS, SearchIndex,
    SqlStore, TxOps, approval_from_row, event_from_row, file_from_row, lease_from_row,
    message_from_row, run_from_row, session_from_row, to_i64, ttl_ms, with_db,
};
use crate::{
    ApprovalRecord, EventBounds, FileRecord, Lease, LeaseState, MessageRecord, NewEvent, NewRun,
    RecentMessages, Result, RunFinish, RunOutcome, RunRecord, RunState, SessionRecord,
    SessionUpdate, Store, StoreError,
};
use switchboard_db::Cols as _;

/// A foreign-key violation names the session that is missing; other errors as they are.
pub(super) fn missing_session(e: sqlx::Error, session: impl FnOnce() -> String) -> StoreError {
    match e {
        sqlx::Error::Database(db) if db.is_foreign_key_violation() => {
            StoreError::NotFound(format!("session {}", session()))
        }
        e => e.into(),
    }
}

#[async_trait]
impl Store for SqlStore {
    // --- leases -----------------------------------------------------------------------------

    async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        with_db!(self, |pool, d| {
            let now = d.now_ms();
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "INSERT INTO leases (name, holder, token, expires_at_ms) \
                 VALUES ($1, $2, 1, {now} + $3) \
                 ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                 token = leases.token + 1, expires_at_ms = excluded.expires_at_ms \
                 WHERE leases.expires_at_ms <= {now} OR leases.holder = excluded.holder \
                 RETURNING name, holder, token"
            )))
            .bind(name)
            .bind(holder)
            .bind(ttl_ms(ttl))
            .fetch_optional(pool)
            .await?
            .map(|r| lease_from_row(&r))
            .transpose()
        })
    }

    async fn take_over_lease(
        &self,
        expired: &Lease,
        holder: &str,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        with_db!(self, |pool, d| {
            let now = d.now_ms();
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "UPDATE leases SET holder = $1, token = token + 1, expires_at_ms = {now} + $2 \
                 WHERE name = $3 AND token = $4 AND expires_at_ms <= {now} \
                 RETURNING name, holder, token"
            )))
            .bind(holder)
            .bind(ttl_ms(ttl))
            .bind(&expired.name)
            .bind(to_i64(expired.token)?)
            .fetch_optional(pool)
            .await?
            .map(|r| lease_from_row(&r))
            .transpose()
        })
    }

    async fn renew_lease(&self, lease: &Lease, ttl: Duration) -> Result<bool> {
        let res = with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "UPDATE leases SET expires_at_ms = {} + $1 \
                 WHERE name = $2 AND holder = $3 AND token = $4",
                d.now_ms()
            )))
            .bind(ttl_ms(ttl))
            .bind(&lease.name)
            .bind(&lease.holder)
            .bind(to_i64(lease.token)?)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(res == 1)
    }

    async fn release_lease(&self, lease: &Lease) -> Result<bool> {
        let res = with_db!(self, |pool, _d| {
            sqlx::query("DELETE FROM leases WHERE name = $1 AND holder = $2 AND token = $3")
                .bind(&lease.name)
                .bind(&lease.holder)
                .bind(to_i64(lease.token)?)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(res == 1)
    }

    async fn get_lease(&self, name: &str) -> Result<Option<LeaseState>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT name, holder, token, expires_at_ms <= {} AS expired \
                 FROM leases WHERE name = $1",
                d.now_ms()
            )))
            .bind(name)
            .fetch_optional(pool)
            .await?
            .map(|r| {
                Ok(LeaseState {
                    lease: lease_from_row(&r)?,
                    expired: r.flag("expired")?,
                })
            })
            .transpose()
        })
    }

    async fn expired_leases(&self, prefix: &str) -> Result<Vec<Lease>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT name, holder, token FROM leases \
                 WHERE expires_at_ms <= {} AND substr(name, 1, length($1)) = $1 ORDER BY name",
                d.now_ms()
            )))
            .bind(prefix)
            .fetch_all(pool)
            .await?
            .iter()
            .map(lease_from_row)
            .collect()
        })
    }

    // --- the store itself -------------------------------------------------------------------

    fn kind(&self) -> &'static str {
        self.db.kind()
    }

    async fn ping(&self) -> Result<()> {
        // A write, not a read: a database that answers reads but takes no writes (a SQLite
        // file another process holds write-locked, a PostgreSQL replica) cannot serve, and
        // health must say so. One row of its own, bumped (never a lease anyone takes: its
        // name has no prefix the engine uses).
        with_db!(self, |pool, _d| {
            sqlx::query(
                "INSERT INTO leases (name, holder, token, expires_at_ms) VALUES ('health', 'health', 1, 0) \
                 ON CONFLICT (name) DO UPDATE SET token = leases.token + 1",
            )
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    async fn close(&self) {
        SqlStore::close(self).await;
    }

    // --- sessions ---------------------------------------------------------------------------

    async fn fork_session(
        &self,
        source: Uuid,
        at: u64,
        fork: &SessionRecord,
    ) -> Result<crate::ForkOutcome> {
        self.fork(source, at, fork).await
    }

    async fn create_session(&self, s: &SessionRecord) -> Result<()> {
        with_db!(self, |pool, d| {
            sqlx::query(super::INSERT_SESSION)
                .bind(d.id(s.id))
                .bind(&s.title)
                .bind(&s.cwd)
                .bind(s.config.to_string())
                .bind(&s.created_at)
                .bind(&s.updated_at)
                .bind(to_i64(s.last_seq)?)
                .bind(&s.owner)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    async fn get_session(&self, id: Uuid) -> Result<Option<SessionRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {SESSION_COLS} FROM sessions WHERE id = $1"
            )))
            .bind(d.id(id))
            .fetch_optional(pool)
            .await?
            .map(|r| session_from_row(&r))
            .transpose()
        })
    }

    async fn list_sessions(
        &self,
        limit: u32,
        offset: u32,
        archived: bool,
        visible_to: Option<&str>,
    ) -> Result<(Vec<SessionRecord>, u64)> {
        // A user's own sessions and those shared with them or with everyone.
        const VISIBLE: &str = "($2 IS NULL OR owner = $2 OR EXISTS (SELECT 1 FROM session_shares sh \
             WHERE sh.session_id = sessions.id AND (sh.user_name = $2 OR sh.user_name = '*')))";
        with_db!(self, |pool, _d| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {SESSION_COLS} FROM sessions WHERE (archived_at IS NOT NULL) = $1 \
                 AND {VISIBLE} ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4"
            )))
            .bind(archived)
            .bind(visible_to)
            .bind(i64::from(limit))
            .bind(i64::from(offset))
            .fetch_all(pool)
            .await?;
            let total = sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT COUNT(*) AS n FROM sessions WHERE (archived_at IS NOT NULL) = $1 \
                 AND {VISIBLE}"
            )))
            .bind(archived)
            .bind(visible_to)
            .fetch_one(pool)
            .await?
            .count("n")?;
            let sessions = rows
                .iter()
                .map(session_from_row)
                .collect::<Result<Vec<_>>>()?;
            Ok((sessions, total))
        })
    }

    async fn delete_session(&self, id: Uuid) -> Result<bool> {
        // One transaction: the search index's part of the session (SQLite's, written by the
        // store) goes, then the session, whose foreign keys cascade to runs, events, messages
        // and approvals. On PostgreSQL rows that concurrent writers are adding go too: their
        // inserts lock the session row, so the delete waits for them to commit and then
        // cascades over them.
        let n = with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            tx.unindex_session(id).await?;
            let n = sqlx::query("DELETE FROM sessions WHERE id = $1")
                .bind(d.id(id))
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            n
        });
        Ok(n > 0)
    }

    async fn update_session(&self, id: Uuid, u: &SessionUpdate) -> Result<bool> {
        let (set_archive, archived_at) = match &u.archived_at {
            Some(a) => (true, a.clone()),
            None => (false, None),
        };
        let n = with_db!(self, |pool, d| {
            sqlx::query(
                "UPDATE sessions SET title = COALESCE($1, title), \
                 archived_at = CASE WHEN $2 THEN $3 ELSE archived_at END, updated_at = $4, \
                 config = COALESCE($6, config) WHERE id = $5",
            )
            .bind(&u.title)
            .bind(set_archive)
            .bind(&archived_at)
            .bind(&u.updated_at)
            .bind(d.id(id))
            .bind(u.config.as_ref().map(|c| c.to_string()))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    async fn touch_session(&self, id: Uuid, at: &str) -> Result<()> {
        with_db!(self, |pool, d| {
            sqlx::query("UPDATE sessions SET updated_at = $1 WHERE id = $2")
                .bind(at)
                .bind(d.id(id))
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    // --- event log --------------------------------------------------------------------------

    async fn write_events(
        &self,
        events: &[NewEvent],
        fences: &[Lease],
        finishes: &[RunFinish],
    ) -> Result<()> {
        self.insert_events(events, fences, finishes).await
    }

    async fn read_events(&self, session_id: Uuid, after: u64, limit: u32) -> Result<Vec<NewEvent>> {
        if let Some(reader) = &self.reader {
            return super::log::read_events_sqlite(reader, session_id, after, limit).await;
        }
        with_db!(self, |pool, d| {
            sqlx::query(
                "SELECT seq, run_id, kind, payload, created_at FROM events \
                 WHERE session_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
            )
            .bind(d.id(session_id))
            .bind(to_i64(after)?)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| event_from_row(r, session_id))
            .collect()
        })
    }

    async fn event_bounds(&self, session_id: Uuid) -> Result<EventBounds> {
        let (oldest, newest, last_seq) = with_db!(self, |pool, d| {
            let row = sqlx::query(
                "SELECT (SELECT MIN(seq) FROM events WHERE session_id = $1) AS oldest, \
                        (SELECT MAX(seq) FROM events WHERE session_id = $1) AS newest, \
                        (SELECT last_seq FROM sessions WHERE id = $1) AS last_seq",
            )
            .bind(d.id(session_id))
            .fetch_one(pool)
            .await?;
            (
                row.opt_int("oldest")?,
                row.opt_int("newest")?,
                row.opt_int("last_seq")?,
            )
        });
        Ok(EventBounds {
            oldest: oldest.map(|v| v.max(0) as u64),
            newest: newest.map(|v| v.max(0) as u64),
            last_seq: last_seq.unwrap_or(0).max(newest.unwrap_or(0)).max(0) as u64,
        })
    }

    async fn prune_events_before(&self, cutoff: &str) -> Result<u64> {
        // On PostgreSQL `created_at` has the "C" collation: a bytewise comparison, like
        // SQLite's.
        Ok(with_db!(self, |pool, _d| {
            sqlx::query("DELETE FROM events WHERE created_at < $1")
                .bind(cutoff)
                .execute(pool)
                .await?
                .rows_affected()
        }))
    }

    // --- runs and the follow-up queue -------------------------------------------------------

    async fn enqueue_run(&self, run: &NewRun) -> Result<RunRecord> {
        self.enqueue(run, false).await
    }

    async fn enqueue_run_front(&self, run: &NewRun) -> Result<RunRecord> {
        self.enqueue(run, true).await
    }

    async fn run_by_idempotency_key(
        &self,
        session_id: Uuid,
        key: &str,
        since: &str,
    ) -> Result<Option<RunRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {RUN_COLS} FROM runs WHERE session_id = $1 AND idempotency_key = $2 \
                 AND created_at >= $3"
            )))
            .bind(d.id(session_id))
            .bind(key)
            .bind(since)
            .fetch_optional(pool)
            .await?
            .map(|r| run_from_row(&r))
            .transpose()
        })
    }

    async fn get_run(&self, id: Uuid) -> Result<Option<RunRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {RUN_COLS} FROM runs WHERE id = $1"
            )))
            .bind(d.id(id))
            .fetch_optional(pool)
            .await?
            .map(|r| run_from_row(&r))
            .transpose()
        })
    }

    async fn start_run(
        &self,
        id: Uuid,
        at: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunRecord, Lease)> {
        self.start_run_tx(id, at, holder, ttl).await
    }

    async fn workspace_instance(&self, session_id: Uuid) -> Result<Option<String>> {
        with_db!(self, |pool, d| {
            let row = sqlx::query(
                "SELECT instance_id FROM runs WHERE session_id = $1 AND instance_id IS NOT NULL \
                 ORDER BY started_at DESC LIMIT 1",
            )
            .bind(d.id(session_id))
            .fetch_optional(pool)
            .await?;
            Ok(match row {
                Some(r) => sqlx::Row::try_get::<Option<String>, _>(&r, "instance_id")?,
                None => None,
            })
        })
    }

    async fn finish_run(
        &self,
        id: Uuid,
        outcome: &RunOutcome,
        at: &str,
        fence: Option<&Lease>,
    ) -> Result<()> {
        with_db!(self, |pool, _d| {
            let mut tx = pool.begin().await?;
            if let Some(f) = fence {
                tx.check_fence(f).await?;
            }
            if !tx.close_run(id, outcome, at).await? {
                return Err(StoreError::Conflict(format!("run {id} is not active")));
            }
            tx.commit().await?;
        });
        Ok(())
    }

    async fn cancel_queued_run(&self, id: Uuid, at: &str) -> Result<bool> {
        let n = with_db!(self, |pool, d| {
            sqlx::query(
                "UPDATE runs SET state = 'cancelled', stop_reason = 'cancelled', finished_at = $1 \
                 WHERE id = $2 AND state = 'queued'",
            )
            .bind(at)
            .bind(d.id(id))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    async fn active_run(&self, session_id: Uuid) -> Result<Option<RunRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {RUN_COLS} FROM runs WHERE session_id = $1 AND state = 'running'"
            )))
            .bind(d.id(session_id))
            .fetch_optional(pool)
            .await?
            .map(|r| run_from_row(&r))
            .transpose()
        })
    }

    async fn next_queued_run(&self, session_id: Uuid) -> Result<Option<RunRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {RUN_COLS} FROM runs WHERE session_id = $1 AND state = 'queued' \
                 ORDER BY queue_pos LIMIT 1"
            )))
            .bind(d.id(session_id))
            .fetch_optional(pool)
            .await?
            .map(|r| run_from_row(&r))
            .transpose()
        })
    }

    async fn runs_in_state(&self, state: RunState) -> Result<Vec<RunRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {RUN_COLS} FROM runs WHERE state = $1 ORDER BY session_id, queue_pos"
            )))
            .bind(state.as_str())
            .fetch_all(pool)
            .await?
            .iter()
            .map(run_from_row)
            .collect()
        })
    }

    // --- search -----------------------------------------------------------------------------

    async fn search(
        &self,
        q: &crate::search::SearchQuery,
    ) -> Result<Vec<crate::search::SearchHit>> {
        self.run_search(q).await
    }

    // --- transcript -------------------------------------------------------------------------

    async fn append_message(&self, m: &MessageRecord, fence: Option<&Lease>) -> Result<()> {
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            if let Some(f) = fence {
                tx.check_fence(f).await?;
            }
            if !tx.lock_session(m.session_id).await? {
                return Err(StoreError::NotFound(format!("session {}", m.session_id)));
            }
            sqlx::query(
                "INSERT INTO messages (id, session_id, pos, run_id, role, content, tool_calls, \
                 tool_call_id, created_at, is_error, seq) VALUES ($1, $2, \
                 (SELECT COALESCE(MAX(pos), 0) + 1 FROM messages WHERE session_id = $2), \
                 $3, $4, $5, $6, $7, $8, $9, (SELECT last_seq FROM sessions WHERE id = $2))",
            )
            .bind(d.id(m.id))
            .bind(d.id(m.session_id))
            .bind(d.opt_id(m.run_id))
            .bind(&m.role)
            .bind(&m.content)
            .bind(m.tool_calls.as_ref().map(|v| v.to_string()))
            .bind(&m.tool_call_id)
            .bind(&m.created_at)
            .bind(m.is_error)
            .execute(&mut *tx)
            .await
            .map_err(|e| missing_session(e, || m.session_id.to_string()))?;
            tx.index(m.session_id, "m", m.id).await?;
            tx.commit().await?;
        });
        self.indexed_later();
        Ok(())
    }

    async fn list_messages(
        &self,
        session_id: Uuid,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<MessageRecord>, u64)> {
        with_db!(self, |pool, d| {
            let rows = sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {MESSAGE_COLS} FROM messages WHERE session_id = $1 \
                 ORDER BY pos LIMIT $2 OFFSET $3"
            )))
            .bind(d.id(session_id))
            .bind(i64::from(limit))
            .bind(i64::from(offset))
            .fetch_all(pool)
            .await?;
            let total = sqlx::query("SELECT COUNT(*) AS n FROM messages WHERE session_id = $1")
                .bind(d.id(session_id))
                .fetch_one(pool)
                .await?
                .count("n")?;
            let msgs = rows
                .iter()
                .map(message_from_row)
                .collect::<Result<Vec<_>>>()?;
            Ok((msgs, total))
        })
    }

    async fn recent_messages(
        &self,
        session_id: Uuid,
        max_messages: u32,
        max_chars: u64,
    ) -> Result<RecentMessages> {
        self.read_recent_messages(session_id, max_messages, max_chars)
            .await
    }

    // --- approvals --------------------------------------------------------------------------

    async fn put_approval(&self, a: &ApprovalRecord, fence: Option<&Lease>) -> Result<()> {
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            if let Some(f) = fence {
                tx.check_fence(f).await?;
            }
            sqlx::query(
                "INSERT INTO approvals (session_id, run_id, tool_calls, created_at, expires_at) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (session_id) DO UPDATE SET run_id = excluded.run_id, \
                 tool_calls = excluded.tool_calls, created_at = excluded.created_at, \
                 expires_at = excluded.expires_at",
            )
            .bind(d.id(a.session_id))
            .bind(d.id(a.run_id))
            .bind(a.tool_calls.to_string())
            .bind(&a.created_at)
            .bind(&a.expires_at)
            .execute(&mut *tx)
            .await
            .map_err(|e| missing_session(e, || a.session_id.to_string()))?;
            tx.commit().await?;
        });
        Ok(())
    }

    async fn get_approval(&self, session_id: Uuid) -> Result<Option<ApprovalRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {APPROVAL_COLS} FROM approvals WHERE session_id = $1"
            )))
            .bind(d.id(session_id))
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(approval_from_row)
            .transpose()
        })
    }

    async fn delete_approval(&self, session_id: Uuid, run_id: Uuid) -> Result<bool> {
        let n = with_db!(self, |pool, d| {
            sqlx::query("DELETE FROM approvals WHERE session_id = $1 AND run_id = $2")
                .bind(d.id(session_id))
                .bind(d.id(run_id))
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    async fn list_approvals(&self) -> Result<Vec<ApprovalRecord>> {
        with_db!(self, |pool, _d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {APPROVAL_COLS} FROM approvals ORDER BY created_at, session_id"
            )))
            .fetch_all(pool)
            .await?
            .iter()
            .map(approval_from_row)
            .collect()
        })
    }

    // --- files ------------------------------------------------------------------------------

    async fn put_file(&self, f: &FileRecord) -> Result<()> {
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            sqlx::query(super::INSERT_FILE)
                .bind(d.id(f.id))
                .bind(d.id(f.session_id))
                .bind(&f.name)
                .bind(&f.mime)
                .bind(to_i64(f.size)?)
                .bind(&f.sha256)
                .bind(&f.created_at)
                .execute(&mut *tx)
                .await
                .map_err(|e| missing_session(e, || f.session_id.to_string()))?;
            tx.index(f.session_id, "f", f.id).await?;
            tx.commit().await?;
        });
        self.indexed_later();
        Ok(())
    }

    async fn get_file(&self, session_id: Uuid, id: Uuid) -> Result<Option<FileRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {FILE_COLS} FROM files WHERE session_id = $1 AND id = $2"
            )))
            .bind(d.id(session_id))
            .bind(d.id(id))
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(file_from_row)
            .transpose()
        })
    }

    async fn list_files(&self, session_id: Uuid) -> Result<Vec<FileRecord>> {
        with_db!(self, |pool, d| {
            sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {FILE_COLS} FROM files WHERE session_id = $1 ORDER BY created_at, id"
            )))
            .bind(d.id(session_id))
            .fetch_all(pool)
            .await?
            .iter()
            .map(file_from_row)
            .collect()
        })
    }

    async fn content_in_use(&self, sha256: &str) -> Result<bool> {
        with_db!(self, |pool, _d| {
            Ok(
                sqlx::query("SELECT 1 AS one FROM files WHERE sha256 = $1 LIMIT 1")
                    .bind(sha256)
                    .fetch_optional(pool)
                    .await?
                    .is_some(),
            )
        })
    }

    // --- backend state ----------------------------------------------------------------------

    async fn get_backend_state(&self, session_id: Uuid) -> Result<Option<serde_json::Value>> {
        with_db!(self, |pool, d| {
            sqlx::query("SELECT backend_state FROM sessions WHERE id = $1")
                .bind(d.id(session_id))
                .fetch_optional(pool)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("session {session_id}")))?
                .opt_json("backend_state")
        })
    }

    async fn set_backend_state(
        &self,
        session_id: Uuid,
        state: Option<&serde_json::Value>,
        fence: Option<&Lease>,
    ) -> Result<()> {
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            if let Some(f) = fence {
                tx.check_fence(f).await?;
            }
            let res = sqlx::query("UPDATE sessions SET backend_state = $1 WHERE id = $2")
                .bind(state.map(|v| v.to_string()))
                .bind(d.id(session_id))
                .execute(&mut *tx)
                .await?;
            if res.rows_affected() == 0 {
                return Err(StoreError::NotFound(format!("session {session_id}")));
            }
            tx.commit().await?;
        });
        Ok(())
    }
}
