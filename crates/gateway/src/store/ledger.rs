//! The delivery ledger: one entry per inbound chat message, and what became of it.
//!
//! An entry is written where its message is decided on, in the same transaction as the
//! decision whenever there is one: queued with the inbox row ([`GatewayStore::take_inbound`]),
//! `in_run` with the followed run ([`GatewayStore::start_run`]), `failed` with a parked
//! batch ([`GatewayStore::park`]); a run's end settles its entries
//! ([`GatewayStore::settle_run`]) before the run is let go, so a crash in between settles
//! them again, to the same values. Entries older than `[gateway] ledger_days` are pruned
//! ([`GatewayStore::prune_ledger`]).

use chrono::{DateTime, Utc};
use switchboard_protocol::gateway::{
    DeliveryEntry, DeliveryQuery, DeliveryStatus, IgnoredWhy, InboundKind, Outbound,
};

use super::*;

macro_rules! ledger_cols {
    () => {
        "id, channel, chat, peer, message_id, kind, text, attachments, status, reason, duplicate_of, session_id, run_id, outbound, attempts, received_at, updated_at"
    };
}

/// The most characters kept of a reason, and of the text of a message that is not acted
/// on (anyone can write to a bot: a stranger's text is not kept whole for a week).
const MAX_NOTE_CHARS: usize = 500;

/// Rows one pruning statement deletes (a SQLite write holds every writer back while it
/// runs).
const PRUNE_BATCH: i64 = 1000;

/// `text` cut to [`MAX_NOTE_CHARS`].
pub(crate) fn capped(text: &str) -> String {
    match text.char_indices().nth(MAX_NOTE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A message to note in the ledger as it is decided on (not queued: see
/// [`GatewayStore::take_inbound`]).
#[derive(Debug, Clone)]
pub struct Noted<'a> {
    pub channel: &'a str,
    pub chat: &'a ChatRef,
    pub peer: &'a Peer,
    pub message_id: &'a str,
    pub kind: InboundKind,
    pub text: &'a str,
    pub status: DeliveryStatus,
    pub reason: Option<&'a str>,
}

/// What [`GatewayStore::retry_delivery`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Retried {
    /// Queued again on this routing key.
    Queued(String),
    /// No such entry.
    Unknown,
    /// Only a failed message for the agent is retried; this one is not.
    NotFailed(DeliveryStatus),
    /// Its chat is no longer allowed (the gateway's check, before the store is asked).
    NotAllowed,
}

pub(super) fn kind_str(k: InboundKind) -> &'static str {
    match k {
        InboundKind::Message => "message",
        InboundKind::Command => "command",
        InboundKind::Answer => "answer",
    }
}

fn parse_kind(s: &str) -> Result<InboundKind> {
    match s {
        "message" => Ok(InboundKind::Message),
        "command" => Ok(InboundKind::Command),
        "answer" => Ok(InboundKind::Answer),
        other => Err(StoreError::Corrupt(format!("ledger kind {other:?}"))),
    }
}

fn time(row: &impl Cols, col: &str) -> Result<DateTime<Utc>> {
    let s = row.text(col)?;
    DateTime::parse_from_rfc3339(&s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

fn opt_uuid(row: &impl Cols, col: &str) -> Result<Option<Uuid>> {
    row.opt_text(col)?
        .map(|s| Uuid::parse_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}"))))
        .transpose()
}

fn entry_from_row(r: &impl Cols) -> Result<DeliveryEntry> {
    let status = r.text("status")?;
    let files = match r.opt_text("attachments")? {
        Some(a) => serde_json::from_str::<Vec<serde_json::Value>>(&a)
            .map(|v| v.len())
            .unwrap_or(0),
        None => 0,
    };
    Ok(DeliveryEntry {
        id: r.int("id")?,
        channel: r.text("channel")?,
        chat: from_json(r, "chat")?,
        peer: from_json(r, "peer")?,
        message_id: r.text("message_id")?,
        kind: parse_kind(&r.text("kind")?)?,
        text: r.text("text")?,
        files,
        status: DeliveryStatus::parse(&status)
            .ok_or_else(|| StoreError::Corrupt(format!("ledger status {status:?}")))?,
        reason: r.opt_text("reason")?,
        duplicate_of: r.opt_int("duplicate_of")?,
        session_id: opt_uuid(r, "session_id")?,
        run_id: opt_uuid(r, "run_id")?,
        outbound: from_json(r, "outbound")?,
        attempts: u32::try_from(r.int("attempts")?).unwrap_or(0),
        received_at: time(r, "received_at")?,
        updated_at: time(r, "updated_at")?,
    })
}

/// The ledger entry of a queued message, written in [`GatewayStore::take_inbound`]'s
/// transaction: `$1` channel, `$2` chat id, `$3` chat, `$4` peer, `$5` message id, `$6` text,
/// `$7` attachments, `$8` routing key, `$9` inbox id, `$10` time.
pub(super) const NOTE_QUEUED: &str = "INSERT INTO ledger (channel, chat_id, chat, peer, message_id, \
     kind, text, attachments, status, routing_key, inbox_id, received_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, 'message', $6, $7, 'queued', $8, $9, $10, $10)";

impl GatewayStore {
    /// Notes a message that is not queued for the agent: ignored (a `duplicate` names the
    /// first entry of the same platform message as `duplicate_of`), or a command or answer
    /// being handled. Its id.
    pub async fn note_delivery(&self, n: &Noted<'_>) -> Result<i64> {
        let (chat, peer, t) = (to_json(n.chat), to_json(n.peer), now());
        let duplicate =
            n.reason == Some(IgnoredWhy::Duplicate.as_str()) && !n.message_id.is_empty();
        let text = match n.status {
            DeliveryStatus::Ignored => capped(n.text),
            _ => n.text.to_owned(),
        };
        let reason = n.reason.map(capped);
        with_pool!(&self.db, |pool| {
            let original: Option<i64> = if duplicate {
                sqlx::query_scalar(
                    "SELECT id FROM ledger WHERE channel = $1 AND chat_id = $2 AND message_id = $3 \
                     AND duplicate_of IS NULL ORDER BY id LIMIT 1",
                )
                .bind(n.channel)
                .bind(&n.chat.id)
                .bind(n.message_id)
                .fetch_optional(pool)
                .await?
            } else {
                None
            };
            Ok(sqlx::query_scalar(
                "INSERT INTO ledger (channel, chat_id, chat, peer, message_id, kind, text, status, \
                 reason, duplicate_of, received_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) RETURNING id",
            )
            .bind(n.channel)
            .bind(&n.chat.id)
            .bind(&chat)
            .bind(&peer)
            .bind(n.message_id)
            .bind(kind_str(n.kind))
            .bind(&text)
            .bind(n.status.as_str())
            .bind(&reason)
            .bind(original)
            .bind(&t)
            .fetch_one(pool)
            .await?)
        })
    }

    /// Sets an entry's status (a command or an answer handled), with what was posted.
    pub async fn set_delivery(
        &self,
        id: i64,
        status: DeliveryStatus,
        reason: Option<&str>,
        outbound: &[Outbound],
    ) -> Result<()> {
        let (outbound, t, reason) = (to_json(&outbound), now(), reason.map(capped));
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "UPDATE ledger SET status = $2, reason = $3, outbound = $4, updated_at = $5 \
                 WHERE id = $1",
            )
            .bind(id)
            .bind(status.as_str())
            .bind(&reason)
            .bind(&outbound)
            .bind(&t)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// A run ended: its messages' entries become `status` (answered or failed, with
    /// `reason`) with what the run posted. Settling again (a crash before the run was let
    /// go) writes the same. The number of entries that were in the run until now (those
    /// settled before are not counted again).
    pub async fn settle_run(
        &self,
        run_id: Uuid,
        status: DeliveryStatus,
        reason: Option<&str>,
        outbound: &[Outbound],
    ) -> Result<u64> {
        let (outbound, t, reason) = (to_json(&outbound), now(), reason.map(capped));
        Ok(with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            let mut settled = 0;
            // Those settled before (their run is followed again after a crash) first, then
            // those in the run until now: only these are counted.
            for sql in [
                "UPDATE ledger SET status = $2, reason = $3, outbound = $4, updated_at = $5 \
                 WHERE run_id = $1 AND status IN ('answered', 'failed')",
                "UPDATE ledger SET status = $2, reason = $3, outbound = $4, updated_at = $5 \
                 WHERE run_id = $1 AND status = 'in_run'",
            ] {
                settled = sqlx::query(sql)
                    .bind(run_id.to_string())
                    .bind(status.as_str())
                    .bind(&reason)
                    .bind(&outbound)
                    .bind(&t)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            }
            tx.commit().await?;
            settled
        }))
    }

    /// Entries, the newest first, filtered as `q` says; and the `before` of the next page.
    pub async fn deliveries(&self, q: &DeliveryQuery) -> Result<(Vec<DeliveryEntry>, Option<i64>)> {
        let limit = i64::from(q.limit.unwrap_or(50).clamp(1, 200));
        // Only the filters given, so that an index answers each (`ledger_chat`,
        // `ledger_status`, the primary key).
        let mut sql = String::from(concat!(
            "SELECT ",
            ledger_cols!(),
            " FROM ledger WHERE TRUE"
        ));
        let mut n = 0;
        let mut param = |col: &str, op: &str| {
            n += 1;
            format!(" AND {col} {op} ${n}")
        };
        let status = q.status.map(|s| s.as_str());
        for (present, col, op) in [
            (q.channel.is_some(), "channel", "="),
            (q.chat.is_some(), "chat_id", "="),
            (status.is_some(), "status", "="),
            (q.before.is_some(), "id", "<"),
        ] {
            if present {
                sql.push_str(&param(col, op));
            }
        }
        sql.push_str(&format!(" ORDER BY id DESC LIMIT {}", limit + 1));
        let mut rows: Vec<DeliveryEntry> = with_pool!(&self.db, |pool| {
            // Made of the fixed fragments above only; every value is bound.
            let mut query = sqlx::query(sqlx::AssertSqlSafe(&*sql));
            if let Some(c) = &q.channel {
                query = query.bind(c);
            }
            if let Some(c) = &q.chat {
                query = query.bind(c);
            }
            if let Some(s) = status {
                query = query.bind(s);
            }
            if let Some(b) = q.before {
                query = query.bind(b);
            }
            query
                .fetch_all(pool)
                .await?
                .iter()
                .map(entry_from_row)
                .collect::<Result<Vec<_>>>()?
        });
        let next = if rows.len() > limit as usize {
            rows.truncate(limit as usize);
            rows.last().map(|e| e.id)
        } else {
            None
        };
        Ok((rows, next))
    }

    /// One entry.
    pub async fn delivery(&self, id: i64) -> Result<Option<DeliveryEntry>> {
        with_pool!(&self.db, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                ledger_cols!(),
                " FROM ledger WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(entry_from_row)
            .transpose()
        })
    }

    /// Queues a failed message for the agent again, in one transaction: the entry `queued`
    /// (written first: on SQLite the transaction then holds the write lock from its first
    /// statement, and of two retries of one entry the second finds it queued), then a new
    /// inbox row with its text and files as they came.
    pub async fn retry_delivery(&self, id: i64) -> Result<Retried> {
        let t = now();
        with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            let row = sqlx::query(
                "UPDATE ledger SET status = 'queued', reason = NULL, run_id = NULL, \
                 outbound = '[]', updated_at = $2 \
                 WHERE id = $1 AND status = 'failed' AND kind = 'message' AND routing_key IS NOT NULL \
                 RETURNING routing_key, channel, peer, chat, text, attachments",
            )
            .bind(id)
            .bind(&t)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(row) = row else {
                let status: Option<String> =
                    sqlx::query_scalar("SELECT status FROM ledger WHERE id = $1")
                        .bind(id)
                        .fetch_optional(&mut *tx)
                        .await?;
                tx.rollback().await?;
                return match status {
                    None => Ok(Retried::Unknown),
                    Some(s) => Ok(Retried::NotFailed(
                        DeliveryStatus::parse(&s)
                            .ok_or_else(|| StoreError::Corrupt(format!("ledger status {s:?}")))?,
                    )),
                };
            };
            let key = row.text("routing_key")?;
            // As in `enqueue`: a route's ids commit in order.
            (*tx).lock_until_commit(INBOX_LOCK, &key).await?;
            let inbox_id: i64 = sqlx::query_scalar(super::inbox::INSERT_INBOX)
                .bind(&key)
                .bind(row.text("channel")?)
                .bind(row.text("peer")?)
                .bind(row.text("chat")?)
                .bind(row.text("text")?)
                .bind(None::<String>)
                .bind(&t)
                .bind(row.opt_text("attachments")?)
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query("UPDATE ledger SET inbox_id = $2 WHERE id = $1")
                .bind(id)
                .bind(inbox_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Retried::Queued(key))
        })
    }

    /// Entries still `received` (a command or an answer being handled) with no change
    /// since `before`: the process handling them stopped. They become `failed`; how many.
    pub async fn fail_interrupted(&self, before: DateTime<Utc>) -> Result<u64> {
        let (before, t) = (switchboard_db::text_time(before), now());
        Ok(with_pool!(&self.db, |pool| {
            sqlx::query(
                "UPDATE ledger SET status = 'failed', \
                 reason = 'interrupted: the server stopped while handling it', updated_at = $2 \
                 WHERE status = 'received' AND updated_at < $1",
            )
            .bind(&before)
            .bind(&t)
            .execute(pool)
            .await?
            .rows_affected()
        }))
    }

    /// Forgets entries not updated since `before`, [`PRUNE_BATCH`] at a time; how many.
    pub async fn prune_ledger(&self, before: DateTime<Utc>) -> Result<u64> {
        let before = switchboard_db::text_time(before);
        let mut total = 0;
        loop {
            let n = with_pool!(&self.db, |pool| {
                sqlx::query(
                    "DELETE FROM ledger WHERE id IN \
                     (SELECT id FROM ledger WHERE updated_at < $1 ORDER BY id LIMIT $2)",
                )
                .bind(&before)
                .bind(PRUNE_BATCH)
                .execute(pool)
                .await?
                .rows_affected()
            });
            total += n;
            if n < PRUNE_BATCH as u64 {
                return Ok(total);
            }
        }
    }
}
