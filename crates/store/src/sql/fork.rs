//! Forking a session: a new session whose history is another's up to a point of its log.

use std::collections::HashMap;

use uuid::Uuid;

use super::{
    Cols as _, FILE_COLS, INSERT_CHUNK, MESSAGE_COLS, SearchIndex as _, SqlStore, file_from_row,
    insert_events_sql, message_from_row, to_i64, with_db,
};
use crate::{ForkOutcome, MessageRecord, Result, RunState, SessionRecord};
use switchboard_db::Cols as _;

/// Events copied per read.
const EVENT_PAGE: i64 = 1_000;

impl SqlStore {
    pub(super) async fn fork(
        &self,
        source: Uuid,
        at: u64,
        fork: &SessionRecord,
    ) -> Result<ForkOutcome> {
        let at_i = to_i64(at)?;
        let forked = with_db!(self, |pool, d| {
            let mut tx = pool.begin().await?;
            // The fork's row first: on SQLite the first statement that writes takes the
            // database's write lock, and a transaction that read first could not upgrade if
            // another writer committed meanwhile. Dropped with the transaction if refused.
            sqlx::query(super::INSERT_SESSION)
                .bind(d.id(fork.id))
                .bind(&fork.title)
                .bind(&fork.cwd)
                .bind(fork.config.to_string())
                .bind(&fork.created_at)
                .bind(&fork.updated_at)
                .bind(at_i)
                .bind(&fork.owner)
                .execute(&mut *tx)
                .await?;
            // (On PostgreSQL the source is locked against deletion until the copy commits.)
            let Some(row) = sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT last_seq FROM sessions WHERE id = $1{}",
                d.key_share()
            )))
            .bind(d.id(source))
            .fetch_optional(&mut *tx)
            .await?
            else {
                return Ok(ForkOutcome::NoSource);
            };
            let last_seq = row.count("last_seq")?;
            if at > last_seq {
                return Ok(ForkOutcome::BeyondEnd { last_seq });
            }
            // The cut must not split a run. A running run with an event at or before `at`
            // would (its end comes later) — read first: under READ COMMITTED a run that ends
            // meanwhile then shows its end event to the next statement. Then any run with
            // events on both sides of `at`; a follow-up's `follow_up_queued` is written
            // during the run before it, so it does not count as part of its own run.
            let running = sqlx::query(
                "SELECT r.id AS run_id, MIN(e.seq) AS first, MAX(e.seq) AS last \
                 FROM runs r JOIN events e ON e.session_id = r.session_id AND e.run_id = r.id \
                 WHERE r.session_id = $1 AND r.state = $2 AND e.kind <> 'follow_up_queued' \
                 GROUP BY r.id HAVING MIN(e.seq) <= $3",
            )
            .bind(d.id(source))
            .bind(RunState::Running.as_str())
            .bind(at_i)
            .fetch_optional(&mut *tx)
            .await?;
            let split = match running {
                Some(r) => Some((r, true)),
                None => sqlx::query(
                    "SELECT run_id, MIN(seq) AS first, MAX(seq) AS last FROM events \
                     WHERE session_id = $1 AND run_id IS NOT NULL AND kind <> 'follow_up_queued' \
                     GROUP BY run_id HAVING MIN(seq) <= $2 AND MAX(seq) > $2 LIMIT 1",
                )
                .bind(d.id(source))
                .bind(at_i)
                .fetch_optional(&mut *tx)
                .await?
                .map(|r| (r, false)),
            };
            if let Some((r, running)) = split {
                return Ok(ForkOutcome::InsideRun {
                    run_id: r.uuid("run_id")?,
                    first: r.count("first")?,
                    last: r.count("last")?,
                    running,
                });
            }
            // Pruned history cannot be cut: its runs' bounds are gone.
            let oldest = sqlx::query("SELECT MIN(seq) AS oldest FROM events WHERE session_id = $1")
                .bind(d.id(source))
                .fetch_one(&mut *tx)
                .await?
                .opt_int("oldest")?;
            if at > 0 && at < last_seq && oldest.is_none_or(|o| at_i < o) {
                return Ok(ForkOutcome::Pruned {
                    oldest: oldest.and_then(|o| u64::try_from(o).ok()),
                });
            }
            let cut_time = sqlx::query(
                "SELECT created_at FROM events WHERE session_id = $1 AND seq <= $2 \
                 ORDER BY seq DESC LIMIT 1",
            )
            .bind(d.id(source))
            .bind(at_i)
            .fetch_optional(&mut *tx)
            .await?
            .map(|r| r.text("created_at"))
            .transpose()?;

            // Files from before the cut, under new ids (an id is the file's everywhere).
            let files = match &cut_time {
                None => Vec::new(),
                Some(t) => sqlx::query(sqlx::AssertSqlSafe(&*format!(
                    "SELECT {FILE_COLS} FROM files WHERE session_id = $1 AND created_at <= $2 \
                     ORDER BY created_at, id"
                )))
                .bind(d.id(source))
                .bind(t)
                .fetch_all(&mut *tx)
                .await?
                .iter()
                .map(file_from_row)
                .collect::<Result<Vec<_>>>()?,
            };
            let renamed: HashMap<String, String> = files
                .iter()
                .map(|f| (f.id.to_string(), Uuid::now_v7().to_string()))
                .collect();
            let rename = |text: &str| -> String {
                let mut out = text.to_string();
                for (old, new) in &renamed {
                    if out.contains(old.as_str()) {
                        out = out.replace(old.as_str(), new);
                    }
                }
                out
            };
            for f in &files {
                let id = renamed
                    .get(&f.id.to_string())
                    .and_then(|s| Uuid::parse_str(s).ok())
                    .unwrap_or_else(Uuid::now_v7);
                sqlx::query(super::INSERT_FILE)
                    .bind(d.id(id))
                    .bind(d.id(fork.id))
                    .bind(&f.name)
                    .bind(&f.mime)
                    .bind(to_i64(f.size)?)
                    .bind(&f.sha256)
                    .bind(&f.created_at)
                    .execute(&mut *tx)
                    .await?;
                tx.index(fork.id, "f", id).await?;
            }

            // The log up to the cut, page by page.
            let mut events = 0u64;
            let mut after: i64 = 0;
            loop {
                let rows = sqlx::query(
                    "SELECT seq, run_id, kind, payload, created_at FROM events \
                     WHERE session_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq LIMIT $4",
                )
                .bind(d.id(source))
                .bind(after)
                .bind(at_i)
                .bind(EVENT_PAGE)
                .fetch_all(&mut *tx)
                .await?;
                let Some(last) = rows.last() else { break };
                after = last.int("seq")?;
                for chunk in rows.chunks(INSERT_CHUNK) {
                    let sql = insert_events_sql(chunk.len());
                    let mut q = sqlx::query(sqlx::AssertSqlSafe(&*sql));
                    for r in chunk {
                        q = q
                            .bind(d.id(fork.id))
                            .bind(r.int("seq")?)
                            .bind(d.opt_id(r.opt_uuid("run_id")?))
                            .bind(r.text("kind")?)
                            .bind(rename(&r.text("payload")?))
                            .bind(r.text("created_at")?);
                    }
                    q.execute(&mut *tx).await?;
                }
                events += rows.len() as u64;
                if (rows.len() as i64) < EVENT_PAGE {
                    break;
                }
            }

            // The transcript as it stood: messages recorded at or before the cut (one whose
            // position is unknown, from before search's migration with no event after it,
            // counts as recorded at the log's end).
            let rows = sqlx::query(sqlx::AssertSqlSafe(&*format!(
                "SELECT {MESSAGE_COLS}, pos, seq FROM messages \
                 WHERE session_id = $1 AND COALESCE(seq, $2) <= $3 ORDER BY pos"
            )))
            .bind(d.id(source))
            .bind(to_i64(last_seq)?)
            .bind(at_i)
            .fetch_all(&mut *tx)
            .await?;
            for row in &rows {
                let m = message_from_row(row)?;
                let copy = MessageRecord {
                    id: Uuid::now_v7(),
                    session_id: fork.id,
                    content: rename(&m.content),
                    ..m
                };
                sqlx::query(
                    "INSERT INTO messages (id, session_id, pos, run_id, role, content, \
                     tool_calls, tool_call_id, created_at, is_error, seq) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
                )
                .bind(d.id(copy.id))
                .bind(d.id(fork.id))
                .bind(row.int("pos")?)
                .bind(d.opt_id(copy.run_id))
                .bind(&copy.role)
                .bind(&copy.content)
                .bind(copy.tool_calls.as_ref().map(|v| v.to_string()))
                .bind(&copy.tool_call_id)
                .bind(&copy.created_at)
                .bind(copy.is_error)
                .bind(row.opt_int("seq")?)
                .execute(&mut *tx)
                .await?;
                tx.index(fork.id, "m", copy.id).await?;
            }
            tx.commit().await?;
            ForkOutcome::Forked {
                events,
                messages: rows.len() as u64,
                files: files.len() as u64,
            }
        });
        self.indexed_later();
        Ok(forked)
    }
}
