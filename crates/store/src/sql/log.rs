//! Writing the event log: events, their fences and the runs they finish, in one transaction;
//! and reading it back on SQLite without sqlx's per-row copies ([`read_events_sqlite`]).

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

/// A page of a session's events on SQLite, read by the db kit's [`SqliteReader`] (replays of
/// the log are the hottest read there is: see its docs). The same query, and the same rows,
/// as the sqlx path PostgreSQL takes (`Store::read_events`); a run's id is parsed once for its
/// consecutive events.
///
/// [`SqliteReader`]: switchboard_db::SqliteReader
pub(super) async fn read_events_sqlite(
    reader: &std::sync::Arc<switchboard_db::SqliteReader>,
    session_id: Uuid,
    after: u64,
    limit: u32,
) -> Result<Vec<crate::StoredEvent>> {
    use switchboard_db::rusqlite::types::ValueRef;
    let after = to_i64(after)?;
    reader
        .read(move |c| {
            let sid = session_id.to_string();
            let mut st = c.prepare_cached(
                "SELECT seq, run_id, kind, payload, created_at FROM events \
                 WHERE session_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
            )?;
            let mut rows = st.query((&sid, after, i64::from(limit)))?;
            let mut out = Vec::with_capacity(limit.min(4096) as usize);
            let mut run: Option<(Vec<u8>, Uuid)> = None;
            let text = |v: ValueRef<'_>, col: &str| -> Result<String> {
                match v {
                    ValueRef::Text(t) => std::str::from_utf8(t)
                        .map(str::to_owned)
                        .map_err(|e| StoreError::Corrupt(format!("events.{col}: {e}"))),
                    v => Err(StoreError::Corrupt(format!(
                        "events.{col}: {:?} where text was expected",
                        v.data_type()
                    ))),
                }
            };
            while let Some(r) = rows.next()? {
                let seq: i64 = r.get(0)?;
                let seq = u64::try_from(seq)
                    .map_err(|_| StoreError::Corrupt(format!("seq: negative value {seq}")))?;
                let run_id = match r.get_ref(1)? {
                    ValueRef::Null => None,
                    ValueRef::Text(t) => match &run {
                        Some((raw, id)) if raw.as_slice() == t => Some(*id),
                        _ => {
                            let id = Uuid::try_parse_ascii(t)
                                .map_err(|e| StoreError::Corrupt(format!("events.run_id: {e}")))?;
                            run = Some((t.to_vec(), id));
                            Some(id)
                        }
                    },
                    v => {
                        return Err(StoreError::Corrupt(format!(
                            "events.run_id: {:?} where a UUID was expected",
                            v.data_type()
                        )));
                    }
                };
                out.push(crate::StoredEvent {
                    session_id,
                    seq,
                    run_id,
                    kind: text(r.get_ref(2)?, "kind")?,
                    payload: text(r.get_ref(3)?, "payload")?,
                    created_at: text(r.get_ref(4)?, "created_at")?,
                });
            }
            Ok(out)
        })
        .await
}
