//! Writing the event log: events, their fences and the runs they finish, in one transaction.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::store::missing_session;
use super::{INSERT_CHUNK, SqlStore, TxOps, insert_events_sql, to_i64, with_db};
use crate::{Lease, NewEvent, Result, RunFinish, StoreError};

impl SqlStore {
    pub(super) async fn insert_events(
        &self,
        events: &[NewEvent],
        fences: &[Lease],
        finishes: &[RunFinish],
    ) -> Result<()> {
        if events.is_empty() && finishes.is_empty() {
            return Ok(());
        }
        // Rows go in sorted by (session, seq). The batch commits as a whole, so the order of
        // the inserts is invisible; but concurrent appenders on PostgreSQL then wait for each
        // other's keys in one global order and cannot deadlock — the later one gets a
        // Conflict.
        let mut sorted: Vec<&NewEvent> = events.iter().collect();
        sorted.sort_by_key(|e| (e.session_id, e.seq));
        let mut fences: Vec<&Lease> = fences.iter().collect();
        fences.sort_by(|a, b| a.name.cmp(&b.name));
        // In session order too, so that appenders to several sessions lock the rows in the
        // same order. Only ever raised: an appender of higher seqs may have committed first.
        let mut highest: BTreeMap<Uuid, u64> = BTreeMap::new();
        for ev in events {
            let seq = highest.entry(ev.session_id).or_insert(ev.seq);
            *seq = (*seq).max(ev.seq);
        }
        with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            for f in &fences {
                tx.check_fence(f).await?;
            }
            for chunk in sorted.chunks(INSERT_CHUNK) {
                let sql = insert_events_sql(chunk.len());
                let mut q = sqlx::query(sqlx::AssertSqlSafe(&*sql));
                for ev in chunk {
                    q = q
                        .bind(d.id(ev.session_id))
                        .bind(to_i64(ev.seq)?)
                        .bind(d.opt_id(ev.run_id))
                        .bind(&ev.kind)
                        .bind(&ev.payload)
                        .bind(&ev.created_at);
                }
                q.execute(&mut *tx).await.map_err(|e| {
                    missing_session(e, || {
                        let mut ids: Vec<String> =
                            chunk.iter().map(|e| e.session_id.to_string()).collect();
                        ids.dedup();
                        ids.join(", ")
                    })
                })?;
            }
            for (session_id, seq) in &highest {
                sqlx::query(
                    "UPDATE sessions SET last_seq = \
                     CASE WHEN last_seq < $1 THEN $1 ELSE last_seq END WHERE id = $2",
                )
                .bind(to_i64(*seq)?)
                .bind(d.id(*session_id))
                .execute(&mut *tx)
                .await?;
            }
            for f in finishes {
                if !tx.close_run(f.run_id, &f.outcome, &f.at).await? {
                    return Err(StoreError::RunNotActive(f.run_id));
                }
            }
            tx.commit().await?;
        });
        Ok(())
    }
}
