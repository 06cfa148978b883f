//! Followed runs (the run each route follows, how far its reply got) and the inbound
//! messages already taken.

use super::*;

impl GatewayStore {
    pub async fn put_run(&self, r: &FollowedRun) -> Result<()> {
        let t = now();
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "INSERT INTO runs (routing_key, session_id, run_id, last_event_id, stream_message, streamed, delivered, deadline, started_at, pending, pages, outbound) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
                 ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, run_id = excluded.run_id, \
                 last_event_id = excluded.last_event_id, stream_message = excluded.stream_message, \
                 streamed = excluded.streamed, delivered = excluded.delivered, deadline = excluded.deadline, \
                 pending = excluded.pending, pages = excluded.pages, outbound = excluded.outbound",
            )
            .bind(&r.routing_key)
            .bind(r.session_id.to_string())
            .bind(r.run_id.to_string())
            .bind(i64::try_from(r.last_event_id).unwrap_or(i64::MAX))
            .bind(&r.stream_message)
            .bind(&r.streamed)
            .bind(i64::try_from(r.delivered).unwrap_or(i64::MAX))
            .bind(&r.deadline)
            .bind(&t)
            .bind(&r.pending)
            .bind(serde_json::to_string(&r.pages).unwrap_or_else(|_| "[]".into()))
            .bind(to_json(&r.outbound))
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Starts following a run and removes the messages that started it (their ledger
    /// entries `in_run`), in one transaction: a crash leaves either all or none.
    pub async fn start_run(&self, r: &FollowedRun, upto: i64) -> Result<()> {
        let t = now();
        with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            // A fresh row, as the `INSERT OR REPLACE` this was on SQLite: every column the
            // insert does not name goes back to its default (NULL for `channel` and `chat`).
            sqlx::query(
                "INSERT INTO runs (routing_key, session_id, run_id, last_event_id, stream_message, streamed, delivered, deadline, started_at, pending, channel, chat, pages, outbound) \
                 VALUES ($1, $2, $3, $4, NULL, '', 0, $5, $6, '', NULL, NULL, '[]', '[]') \
                 ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, run_id = excluded.run_id, \
                 last_event_id = excluded.last_event_id, stream_message = excluded.stream_message, \
                 streamed = excluded.streamed, delivered = excluded.delivered, deadline = excluded.deadline, \
                 started_at = excluded.started_at, pending = excluded.pending, \
                 channel = excluded.channel, chat = excluded.chat, pages = excluded.pages, \
                 outbound = excluded.outbound",
            )
            .bind(&r.routing_key)
            .bind(r.session_id.to_string())
            .bind(r.run_id.to_string())
            .bind(i64::try_from(r.last_event_id).unwrap_or(i64::MAX))
            .bind(&r.deadline)
            .bind(&t)
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM inbox WHERE routing_key = $1 AND id <= $2")
                .bind(&r.routing_key)
                .bind(upto)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "UPDATE ledger SET status = 'in_run', session_id = $3, run_id = $4, inbox_id = NULL, \
                 attempts = attempts + 1, updated_at = $5 \
                 WHERE routing_key = $1 AND status = 'queued' AND inbox_id <= $2",
            )
            .bind(&r.routing_key)
            .bind(upto)
            .bind(r.session_id.to_string())
            .bind(r.run_id.to_string())
            .bind(&t)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Records an inbound message; false if it was seen before (a redelivery or a replay,
    /// or — with instances sharing a PostgreSQL store — another instance took it: the insert
    /// either adds the row or, on the primary key, does nothing, atomically).
    /// Entries older than two days are forgotten.
    pub async fn first_seen(&self, channel: &str, chat_id: &str, message_id: &str) -> Result<bool> {
        let t = now();
        let cutoff = (chrono::Utc::now() - chrono::Duration::days(2))
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let inserted = with_pool!(&self.db, |pool| {
            let inserted = sqlx::query(
                "INSERT INTO seen (channel, chat_id, message_id, seen_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(channel)
            .bind(chat_id)
            .bind(message_id)
            .bind(&t)
            .execute(pool)
            .await?
            .rows_affected();
            sqlx::query("DELETE FROM seen WHERE seen_at < $1")
                .bind(&cutoff)
                .execute(pool)
                .await?;
            inserted
        });
        Ok(inserted == 1)
    }

    /// Undoes [`GatewayStore::first_seen`] for a message that could not be stored.
    pub async fn forget_seen(&self, channel: &str, chat_id: &str, message_id: &str) -> Result<()> {
        with_pool!(&self.db, |pool| {
            sqlx::query("DELETE FROM seen WHERE channel = $1 AND chat_id = $2 AND message_id = $3")
                .bind(channel)
                .bind(chat_id)
                .bind(message_id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    pub async fn run(&self, key: &str) -> Result<Option<FollowedRun>> {
        with_pool!(&self.db, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                run_cols!(),
                " FROM runs WHERE routing_key = $1"
            ))
            .bind(key)
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(run_from_row)
            .transpose()
        })
    }

    pub async fn runs(&self) -> Result<Vec<FollowedRun>> {
        with_pool!(&self.db, |pool| {
            sqlx::query(concat!("SELECT ", run_cols!(), " FROM runs"))
                .fetch_all(pool)
                .await?
                .iter()
                .map(run_from_row)
                .collect()
        })
    }

    pub async fn finish_run(&self, key: &str) -> Result<()> {
        with_pool!(&self.db, |pool| {
            sqlx::query("DELETE FROM runs WHERE routing_key = $1")
                .bind(key)
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}

pub(super) fn run_from_row(r: &impl Cols) -> Result<FollowedRun> {
    Ok(FollowedRun {
        routing_key: r.text("routing_key")?,
        session_id: uuid(r, "session_id")?,
        run_id: uuid(r, "run_id")?,
        last_event_id: u64::try_from(r.int("last_event_id")?).unwrap_or(0),
        stream_message: r.opt_text("stream_message")?,
        streamed: r.text("streamed")?,
        delivered: usize::try_from(r.int("delivered")?).unwrap_or(0),
        deadline: r.opt_text("deadline")?,
        pending: r.text("pending")?,
        pages: from_json(r, "pages")?,
        outbound: from_json(r, "outbound")?,
    })
}
