//! Reading the transcript: the newest messages within a budget.

use uuid::Uuid;

use super::{MESSAGE_COLS, SqlStore, message_from_row, with_db};
use crate::{RecentMessages, Result};
use switchboard_db::Cols as _;

impl SqlStore {
    pub(super) async fn read_recent_messages(
        &self,
        session_id: Uuid,
        max_messages: u32,
        max_chars: u64,
    ) -> Result<RecentMessages> {
        // Pages of the newest messages, newest first (index range scans on
        // (session_id, pos) below the last position read), until the budget or the count is
        // reached: what is read is what is kept plus at most one page, however long the
        // session. (A window function over the newest `max_messages` read all of them,
        // 2,000 by default, at every run: the cost of a run grew with the session's age.)
        // A message is kept while the newer ones add up to less than `max_chars`. Appends
        // only add positions above the first page, so the pages need no transaction.
        // BIGINT: PostgreSQL's LENGTH is a 4-byte integer, read here as i64.
        let size = "CAST(LENGTH(content) + COALESCE(LENGTH(tool_calls), 0) AS BIGINT)";
        let max_chars = i64::try_from(max_chars).unwrap_or(i64::MAX);
        with_db!(self, |pool, d| {
            let mut kept = Vec::new(); // newest first
            let mut newer: i64 = 0; // chars of the messages kept so far
            let mut below = i64::MAX; // positions below this one are still to read
            let mut page: u32 = 16; // doubles up to 256: few reads for a small budget
            let earlier = loop {
                let want = page.min(max_messages.saturating_sub(kept.len() as u32));
                if want == 0 || newer >= max_chars {
                    // The count or the budget is reached: anything older was left out.
                    break sqlx::query(
                        "SELECT 1 AS one FROM messages WHERE session_id = $1 AND pos < $2 LIMIT 1",
                    )
                    .bind(d.id(session_id))
                    .bind(below)
                    .fetch_optional(pool)
                    .await?
                    .is_some();
                }
                let rows = sqlx::query(sqlx::AssertSqlSafe(&*format!(
                    "SELECT {MESSAGE_COLS}, pos, {size} AS size FROM messages \
                     WHERE session_id = $1 AND pos < $2 ORDER BY pos DESC LIMIT $3"
                )))
                .bind(d.id(session_id))
                .bind(below)
                .bind(i64::from(want))
                .fetch_all(pool)
                .await?;
                let mut full = false;
                for row in &rows {
                    if newer >= max_chars {
                        full = true;
                        break;
                    }
                    newer = newer.saturating_add(row.int("size")?);
                    below = row.int("pos")?;
                    kept.push(message_from_row(row)?);
                }
                if full {
                    break true; // the budget is spent and an older message is there
                }
                if rows.len() < want as usize {
                    break false; // the session's first message was read
                }
                page = (page * 2).min(256);
            };
            kept.reverse();
            Ok(RecentMessages {
                messages: kept,
                earlier,
            })
        })
    }
}
