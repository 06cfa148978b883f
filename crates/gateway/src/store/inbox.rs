//! The inbox (messages waiting for the agent) and button presses waiting for the handler.

use crate::channel::ButtonPress;

use super::*;

/// Queues a message: `$1` routing key, `$2` channel, `$3` peer, `$4` chat, `$5` text,
/// `$6` context, `$7` time, `$8` attachments; answers its id.
pub(super) const INSERT_INBOX: &str = "INSERT INTO inbox (routing_key, channel, peer, chat, \
     text, context, created_at, attachments) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id";

/// The `kv` prefix of batches set aside.
const PARKED: &str = "parked:";

impl GatewayStore {
    /// Queues a message; its id, greater than every id queued before it.
    pub async fn enqueue(&self, q: &Queued) -> Result<i64> {
        let (peer, chat, context, t) = (
            to_json(&q.peer),
            to_json(&q.chat),
            q.context.as_ref().map(to_json),
            now(),
        );
        let attachments = (!q.attachments.is_empty()).then(|| to_json(&q.attachments));
        with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            // A PostgreSQL sequence hands out ids when rows are inserted, not when they
            // commit: without the lock, an instance's message could commit with an id below
            // one a worker has already read, and `dequeue(upto)` would delete it unread.
            // Holding the routing key's lock until commit makes each route's ids commit in
            // order.
            (*tx).lock_until_commit(INBOX_LOCK, &q.routing_key).await?;
            let id: i64 = sqlx::query_scalar(INSERT_INBOX)
                .bind(&q.routing_key)
                .bind(&q.channel)
                .bind(&peer)
                .bind(&chat)
                .bind(&q.text)
                .bind(&context)
                .bind(&t)
                .bind(&attachments)
                .fetch_one(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(id)
        })
    }

    /// Takes an inbound message from a chat, in one transaction: marks it seen (unless
    /// `message_id` is empty; as [`GatewayStore::first_seen`], forgetting marks older than two
    /// days), takes its chat's pending caller context (`contexts`; an expired one is dropped)
    /// as the message's, and queues it. A crash leaves all of it or none: a mark stored without
    /// its message would make the platform's redelivery of an unconfirmed message look like a
    /// repeat, and the message would be lost. `q.context` and `q.id` are not read.
    ///
    /// `None` when the message was seen before (a redelivery, a replayed webhook, or another
    /// instance sharing the store took it): nothing is changed. Otherwise the queued
    /// message's id.
    pub async fn take_inbound(&self, q: &Queued, message_id: &str) -> Result<Option<i64>> {
        let (peer, chat, t) = (to_json(&q.peer), to_json(&q.chat), now());
        let cutoff = (chrono::Utc::now() - chrono::Duration::days(2))
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let attachments = (!q.attachments.is_empty()).then(|| to_json(&q.attachments));
        with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            // As in `enqueue`: a route's ids commit in order.
            (*tx).lock_until_commit(INBOX_LOCK, &q.routing_key).await?;
            if !message_id.is_empty() {
                let inserted = sqlx::query(
                    "INSERT INTO seen (channel, chat_id, message_id, seen_at) \
                     VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING",
                )
                .bind(&q.channel)
                .bind(&q.chat.id)
                .bind(message_id)
                .bind(&t)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                if inserted != 1 {
                    tx.rollback().await?;
                    return Ok(None);
                }
                sqlx::query("DELETE FROM seen WHERE seen_at < $1")
                    .bind(&cutoff)
                    .execute(&mut *tx)
                    .await?;
            }
            let context = sqlx::query(
                "DELETE FROM contexts WHERE channel = $1 AND target = $2 RETURNING context, expires_at",
            )
            .bind(&q.channel)
            .bind(&q.chat.id)
            .fetch_optional(&mut *tx)
            .await?
            .map(|row| -> Result<(String, String)> {
                Ok((row.text("expires_at")?, row.text("context")?))
            })
            .transpose()?
            .filter(|(expires, _)| *expires >= t)
            .map(|(_, context)| context);
            let id: i64 = sqlx::query_scalar(INSERT_INBOX)
                .bind(&q.routing_key)
                .bind(&q.channel)
                .bind(&peer)
                .bind(&chat)
                .bind(&q.text)
                .bind(&context)
                .bind(&t)
                .bind(&attachments)
                .fetch_one(&mut *tx)
                .await?;
            sqlx::query(ledger::NOTE_QUEUED)
                .bind(&q.channel)
                .bind(&q.chat.id)
                .bind(&chat)
                .bind(&peer)
                .bind(message_id)
                .bind(&q.text)
                .bind(&attachments)
                .bind(&q.routing_key)
                .bind(id)
                .bind(&t)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            Ok(Some(id))
        })
    }

    /// Sets a batch aside: its inbox messages up to `upto` leave the queue (their ledger
    /// entries `failed`) and `parked` is kept (`parked:<id>` in `kv`), in one transaction.
    /// How many ledger entries failed.
    pub async fn park(
        &self,
        key: &str,
        upto: i64,
        parked: &switchboard_protocol::gateway::ParkedBatch,
    ) -> Result<u64> {
        let value = to_json(parked);
        Ok(with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query(
                "INSERT INTO kv (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .bind(format!("{PARKED}{}", parked.id))
            .bind(&value)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM inbox WHERE routing_key = $1 AND id <= $2")
                .bind(key)
                .bind(upto)
                .execute(&mut *tx)
                .await?;
            let n = sqlx::query(
                "UPDATE ledger SET status = 'failed', reason = $3, inbox_id = NULL, \
                 attempts = attempts + 1, updated_at = $4 \
                 WHERE routing_key = $1 AND status = 'queued' AND inbox_id <= $2",
            )
            .bind(key)
            .bind(upto)
            .bind(ledger::capped(&format!(
                "the session refused it: {}",
                parked.error
            )))
            .bind(now())
            .execute(&mut *tx)
            .await?
            .rows_affected();
            tx.commit().await?;
            n
        }))
    }

    /// Every batch set aside, the oldest first.
    pub async fn parked(&self) -> Result<Vec<switchboard_protocol::gateway::ParkedBatch>> {
        let rows: Vec<String> = with_pool!(&self.db, |pool| {
            sqlx::query("SELECT value FROM kv WHERE key LIKE $1 AND value <> ''")
                .bind(format!("{PARKED}%"))
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| r.text("value"))
                .collect::<Result<Vec<String>, _>>()?
        });
        let mut out: Vec<switchboard_protocol::gateway::ParkedBatch> = rows
            .iter()
            .map(|v| {
                serde_json::from_str(v).map_err(|e| StoreError::Corrupt(format!("parked: {e}")))
            })
            .collect::<Result<_>>()?;
        out.sort_by_key(|p| p.parked_at);
        Ok(out)
    }

    /// Everything queued for a route, oldest first.
    pub async fn queued(&self, key: &str) -> Result<Vec<Queued>> {
        with_pool!(&self.db, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                queued_cols!(),
                " FROM inbox WHERE routing_key = $1 ORDER BY id"
            ))
            .bind(key)
            .fetch_all(pool)
            .await?
            .iter()
            .map(queued_from_row)
            .collect()
        })
    }

    /// Routing keys with queued messages.
    pub async fn queued_routes(&self) -> Result<Vec<String>> {
        with_pool!(&self.db, |pool| {
            sqlx::query("SELECT DISTINCT routing_key FROM inbox")
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| r.text("routing_key"))
                .collect::<Result<_, _>>()
                .map_err(Into::into)
        })
    }

    /// Drops queued messages (those with ids up to and including `upto`: `/stop`), their
    /// ledger entries `ignored` as `stopped`, in one transaction. How many entries.
    pub async fn dequeue(&self, key: &str, upto: i64) -> Result<u64> {
        let t = now();
        Ok(with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query("DELETE FROM inbox WHERE routing_key = $1 AND id <= $2")
                .bind(key)
                .bind(upto)
                .execute(&mut *tx)
                .await?;
            let n = sqlx::query(
                "UPDATE ledger SET status = 'ignored', reason = 'stopped', inbox_id = NULL, \
                 updated_at = $3 WHERE routing_key = $1 AND status = 'queued' AND inbox_id <= $2",
            )
            .bind(key)
            .bind(upto)
            .bind(&t)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            tx.commit().await?;
            n
        }))
    }

    pub async fn push_press(&self, p: &ButtonPress) -> Result<i64> {
        let (press, t) = (to_json(p), now());
        with_pool!(&self.db, |pool| {
            Ok(sqlx::query_scalar(
                "INSERT INTO presses (press, created_at) VALUES ($1, $2) RETURNING id",
            )
            .bind(&press)
            .bind(&t)
            .fetch_one(pool)
            .await?)
        })
    }

    pub async fn presses(&self) -> Result<Vec<(i64, ButtonPress)>> {
        with_pool!(&self.db, |pool| {
            sqlx::query("SELECT id, press FROM presses ORDER BY id")
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| Ok((r.int("id")?, from_json(r, "press")?)))
                .collect()
        })
    }

    pub async fn drop_press(&self, id: i64) -> Result<()> {
        with_pool!(&self.db, |pool| {
            sqlx::query("DELETE FROM presses WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}

pub(super) fn queued_from_row(r: &impl Cols) -> Result<Queued> {
    let context = r.opt_text("context")?;
    Ok(Queued {
        id: r.int("id")?,
        routing_key: r.text("routing_key")?,
        channel: r.text("channel")?,
        peer: from_json(r, "peer")?,
        chat: from_json(r, "chat")?,
        text: r.text("text")?,
        context: context.and_then(|c| serde_json::from_str(&c).ok()),
        attachments: match r.opt_text("attachments")? {
            Some(a) => serde_json::from_str(&a)
                .map_err(|e| StoreError::Corrupt(format!("attachments: {e}")))?,
            None => Vec::new(),
        },
    })
}
