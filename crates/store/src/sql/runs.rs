//! Runs and the follow-up queue: enqueueing and starting runs.

use std::time::Duration;

use uuid::Uuid;

use super::store::missing_session;
use super::{LockSession, RUN_COLS, SqlStore, lease_from_row, run_from_row, ttl_ms, with_db};
use crate::{Lease, NewRun, Result, RunRecord, RunState, StoreError};

impl SqlStore {
    pub(super) async fn enqueue(&self, run: &NewRun, front: bool) -> Result<RunRecord> {
        let input = run.input.to_string();
        let pos_sql = if front {
            "(SELECT COALESCE(MIN(queue_pos), 0) - 1 FROM runs WHERE session_id = $2)"
        } else {
            "(SELECT COALESCE(MAX(queue_pos), 0) + 1 FROM runs WHERE session_id = $2)"
        };
        let sql = format!(
            "INSERT INTO runs (id, session_id, queue_pos, state, input, created_at, idempotency_key) \
             VALUES ($1, $2, {pos_sql}, 'queued', $3, $4, $5)"
        );
        let key = run.idempotency.as_ref().map(|i| i.key.as_str());
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            if !tx.lock_session(run.session_id).await? {
                return Err(StoreError::NotFound(format!("session {}", run.session_id)));
            }
            // Under the session's lock: a run holding the key from before the window gives
            // it up, then a run still holding it answers the repeat. The write comes first:
            // on SQLite it is what takes the write lock (a read first, upgraded to a write,
            // fails with SQLITE_BUSY when another writer committed in between).
            if let Some(i) = &run.idempotency {
                sqlx::query(
                    "UPDATE runs SET idempotency_key = NULL \
                     WHERE session_id = $1 AND idempotency_key = $2 AND created_at < $3",
                )
                .bind(d.id(run.session_id))
                .bind(&i.key)
                .bind(&i.since)
                .execute(&mut *tx)
                .await?;
                let held = sqlx::query(sqlx::AssertSqlSafe(&*format!(
                    "SELECT {RUN_COLS} FROM runs WHERE session_id = $1 AND idempotency_key = $2"
                )))
                .bind(d.id(run.session_id))
                .bind(&i.key)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| run_from_row(&r))
                .transpose()?;
                if let Some(r) = held {
                    tx.commit().await?;
                    return Ok(r);
                }
            }
            sqlx::query(sqlx::AssertSqlSafe(&*sql))
                .bind(d.id(run.id))
                .bind(d.id(run.session_id))
                .bind(&input)
                .bind(&run.created_at)
                .bind(key)
                .execute(&mut *tx)
                .await
                .map_err(|e| missing_session(e, || run.session_id.to_string()))?;
            tx.commit().await?;
        });
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

    pub(super) async fn start_run_tx(
        &self,
        id: Uuid,
        at: &str,
        holder: &str,
        ttl: Duration,
    ) -> Result<(RunRecord, Lease)> {
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            // A second running run in the session violates `runs_one_running`: a Conflict.
            let row = sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "UPDATE runs SET state = 'running', started_at = $1, instance_id = $3 \
                 WHERE id = $2 AND state = 'queued' RETURNING {RUN_COLS}"
            )))
            .bind(at)
            .bind(d.id(id))
            .bind(holder)
            .fetch_optional(&mut *tx)
            .await?;
            let run = match row {
                Some(row) => run_from_row(&row)?,
                None => return Err(StoreError::Conflict(format!("run {id} is not queued"))),
            };
            let row = sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "INSERT INTO leases (name, holder, token, expires_at_ms) \
                 VALUES ($1, $2, 1, {} + $3) \
                 ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, \
                 token = leases.token + 1, expires_at_ms = excluded.expires_at_ms \
                 RETURNING name, holder, token",
                d.now_ms()
            )))
            .bind(Lease::run_name(id))
            .bind(holder)
            .bind(ttl_ms(ttl))
            .fetch_one(&mut *tx)
            .await?;
            let lease = lease_from_row(&row)?;
            tx.commit().await?;
            Ok((run, lease))
        })
    }
}
