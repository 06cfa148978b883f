//! The per-target delivery queues: recording a send, taking the next delivery, moving it
//! forward, its outcome, recovery after a restart, and the outcome stream.

use chrono::Utc;
use sqlx::Row;
use switchboard_db::now;
use switchboard_protocol::relay::{Outcome, OutcomeEvent};

use super::{
    Budget, DeliveryRow, NewDelivery, Recorded, Refusal, RelayStore, RequestKey, Result,
    StoreError, delivery_from_row, ms_i64,
};

impl RelayStore {
    /// Stores one send in one immediate transaction: the request id (when given), then per
    /// target either a queued delivery (unless the target already has `capacity` unfinished
    /// ones: refused `runtime_queue_full`) or a refused one with its outcome event.
    pub async fn record_send(
        &self,
        key: Option<&RequestKey>,
        rows: &[(NewDelivery, Option<Refusal>)],
        capacity: usize,
        budgets: &[Budget],
    ) -> Result<Recorded> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        // Checked under the write lock: concurrent sends cannot both take the last place.
        if let Some((first, _)) = rows.first() {
            for (i, b) in budgets.iter().enumerate() {
                let used: i64 = match &b.sender {
                    Some(sender) => {
                        sqlx::query_scalar(
                            "SELECT COUNT(*) FROM deliveries WHERE bundle = ? AND sender = ? AND created_at >= ?",
                        )
                        .bind(&first.bundle)
                        .bind(sender)
                        .bind(&b.since)
                        .fetch_one(&mut *tx)
                        .await?
                    }
                    None => {
                        sqlx::query_scalar(
                            "SELECT COUNT(*) FROM deliveries WHERE bundle = ? AND created_at >= ?",
                        )
                        .bind(&first.bundle)
                        .bind(&b.since)
                        .fetch_one(&mut *tx)
                        .await?
                    }
                };
                if used.max(0) as u64 + rows.len() as u64 > b.limit {
                    return Ok(Recorded::OverBudget(i));
                }
            }
        }
        if let (Some(k), Some((first, _))) = (key, rows.first()) {
            let earlier: Option<String> = sqlx::query_scalar(
                "SELECT fingerprint FROM requests WHERE bundle = ? AND sender = ? AND request_id = ?",
            )
            .bind(&first.bundle)
            .bind(&k.sender)
            .bind(&k.request_id)
            .fetch_optional(&mut *tx)
            .await?;
            if let Some(f) = earlier {
                return Ok(Recorded::Duplicate {
                    same: f == k.fingerprint,
                });
            }
            sqlx::query(
                "INSERT INTO requests (bundle, sender, request_id, fingerprint, created_at) VALUES (?, ?, ?, ?, ?)",
            )
            .bind(&first.bundle)
            .bind(&k.sender)
            .bind(&k.request_id)
            .bind(&k.fingerprint)
            .bind(now())
            .execute(&mut *tx)
            .await?;
        }
        let mut refused_events = Vec::new();
        for (d, refusal) in rows {
            let refusal = match refusal {
                Some(r) => Some(r.clone()),
                None => {
                    let waiting: i64 = sqlx::query_scalar(
                        "SELECT COUNT(*) FROM deliveries WHERE bundle = ? AND target = ? AND state != 'done'",
                    )
                    .bind(&d.bundle)
                    .bind(&d.target)
                    .fetch_one(&mut *tx)
                    .await?;
                    (waiting.max(0) as usize >= capacity).then(|| Refusal {
                        outcome: Outcome::Failed,
                        code: "runtime_queue_full".into(),
                        reason: format!("`{}` already has {capacity} messages waiting", d.target),
                    })
                }
            };
            match refusal {
                None => Self::insert_queued(&mut tx, d).await?,
                Some(r) => {
                    let ev = Self::insert_refused(&mut tx, d, &r).await?;
                    refused_events.push(ev);
                }
            }
        }
        tx.commit().await?;
        Ok(Recorded::Stored(refused_events))
    }

    /// The chain and hop of a message (any target's delivery of it).
    pub async fn chain_of(&self, bundle: &str, message_id: &str) -> Result<Option<(String, u32)>> {
        let row: Option<(Option<String>, i64)> = sqlx::query_as(
            "SELECT chain_id, hop FROM deliveries WHERE bundle = ? AND message_id = ?",
        )
        .bind(bundle)
        .bind(message_id)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(c, h)| c.map(|c| (c, h.clamp(0, i64::from(u32::MAX)) as u32))))
    }

    /// The chain and hop of the last message handed to `member` (being handed over now, or
    /// delivered since `since`): what a send of that member answers when it does not say.
    /// A message being pasted or in the member's turn counts: the member may answer before
    /// the delivery is recorded as done.
    pub async fn last_received(
        &self,
        bundle: &str,
        member: &str,
        since: &str,
    ) -> Result<Option<(String, u32)>> {
        let row: Option<(Option<String>, i64)> = sqlx::query_as(
            "SELECT chain_id, hop FROM deliveries WHERE bundle = ? AND target = ? \
             AND chain_id IS NOT NULL \
             AND (state IN ('committing', 'handed_over') \
                  OR (state = 'done' AND outcome = 'delivered' AND finished_at >= ?)) \
             ORDER BY id DESC LIMIT 1",
        )
        .bind(bundle)
        .bind(member)
        .bind(since)
        .fetch_optional(&self.pool)
        .await?;
        Ok(row.and_then(|(c, h)| c.map(|c| (c, h.clamp(0, i64::from(u32::MAX)) as u32))))
    }

    async fn insert_queued(
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        d: &NewDelivery,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO deliveries (message_id, bundle, target, sender, request_id, envelope, \
             body_bytes, sync, quiet_window_ms, quiescence_timeout_ms, turn_timeout_ms, state, created_at, \
             chain_id, hop) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)",
        )
        .bind(&d.message_id)
        .bind(&d.bundle)
        .bind(&d.target)
        .bind(&d.sender)
        .bind(&d.request_id)
        .bind(&d.envelope)
        .bind(d.body_bytes as i64)
        .bind(d.sync as i64)
        .bind(d.quiet_window_ms.map(ms_i64))
        .bind(d.quiescence_timeout_ms.map(ms_i64))
        .bind(d.turn_timeout_ms.map(ms_i64))
        .bind(now())
        .bind(&d.chain_id)
        .bind(i64::from(d.hop))
        .execute(&mut **tx)
        .await?;
        Ok(())
    }

    /// A delivery that never entered the queue, and its outcome event.
    async fn insert_refused(
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        d: &NewDelivery,
        r: &Refusal,
    ) -> Result<OutcomeEvent> {
        let at = Utc::now();
        sqlx::query(
            "INSERT INTO deliveries (message_id, bundle, target, sender, request_id, envelope, \
             body_bytes, sync, state, outcome, reason_code, reason, created_at, finished_at, chain_id, hop) \
             VALUES (?, ?, ?, ?, ?, '', ?, ?, 'done', ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&d.message_id)
        .bind(&d.bundle)
        .bind(&d.target)
        .bind(&d.sender)
        .bind(&d.request_id)
        .bind(d.body_bytes as i64)
        .bind(d.sync as i64)
        .bind(r.outcome.as_str())
        .bind(&r.code)
        .bind(&r.reason)
        .bind(now())
        .bind(now())
        .bind(&d.chain_id)
        .bind(i64::from(d.hop))
        .execute(&mut **tx)
        .await?;
        let mut ev = OutcomeEvent {
            seq: 0,
            bundle: d.bundle.clone(),
            message_id: d.message_id.clone(),
            request_id: d.request_id.clone(),
            sender: d.sender.clone(),
            target: d.target.clone(),
            outcome: r.outcome,
            reason_code: Some(r.code.clone()),
            reason: Some(r.reason.clone()),
            at,
        };
        ev.seq = Self::append_outcome(tx, &ev).await?;
        Ok(ev)
    }

    async fn append_outcome(
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        ev: &OutcomeEvent,
    ) -> Result<u64> {
        let body = serde_json::to_string(ev)
            .map_err(|e| StoreError::Corrupt(format!("outcome event: {e}")))?;
        let seq = sqlx::query("INSERT INTO outcomes (bundle, sender, body) VALUES (?, ?, ?)")
            .bind(&ev.bundle)
            .bind(&ev.sender)
            .bind(body)
            .execute(&mut **tx)
            .await?
            .last_insert_rowid();
        Ok(seq.max(0) as u64)
    }

    /// The oldest unfinished delivery to a target.
    pub async fn next_delivery(&self, bundle: &str, target: &str) -> Result<Option<DeliveryRow>> {
        sqlx::query(
            "SELECT * FROM deliveries WHERE bundle = ? AND target = ? AND state != 'done' \
             ORDER BY id LIMIT 1",
        )
        .bind(bundle)
        .bind(target)
        .fetch_optional(&self.pool)
        .await?
        .as_ref()
        .map(delivery_from_row)
        .transpose()
    }

    pub async fn delivery(&self, bundle: &str, message_id: &str) -> Result<Option<DeliveryRow>> {
        sqlx::query("SELECT * FROM deliveries WHERE bundle = ? AND message_id = ?")
            .bind(bundle)
            .bind(message_id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(delivery_from_row)
            .transpose()
    }

    /// The deliveries of an earlier request with the same id and sender, in target order.
    pub async fn request_deliveries(
        &self,
        bundle: &str,
        sender: &str,
        request_id: &str,
    ) -> Result<Vec<DeliveryRow>> {
        sqlx::query(
            "SELECT * FROM deliveries WHERE bundle = ? AND sender = ? AND request_id = ? ORDER BY id",
        )
        .bind(bundle)
        .bind(sender)
        .bind(request_id)
        .fetch_all(&self.pool)
        .await?
        .iter()
        .map(delivery_from_row)
        .collect()
    }

    /// Unfinished deliveries per (bundle, target), for the workers to resume.
    pub async fn pending_targets(&self) -> Result<Vec<(String, String)>> {
        let rows = sqlx::query(
            "SELECT DISTINCT bundle, target FROM deliveries WHERE state != 'done' ORDER BY bundle, target",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("bundle")?, r.try_get("target")?)))
            .collect()
    }

    /// Unfinished deliveries to one target.
    pub async fn queued_count(&self, bundle: &str, target: &str) -> Result<u64> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM deliveries WHERE bundle = ? AND target = ? AND state != 'done'",
        )
        .bind(bundle)
        .bind(target)
        .fetch_one(&self.pool)
        .await?;
        Ok(n.max(0) as u64)
    }

    /// Moves a delivery from state `from` to `to`; false when it was not in `from` (so a
    /// step is never taken twice).
    pub async fn advance(&self, id: i64, from: &str, to: &str) -> Result<bool> {
        let n = sqlx::query("UPDATE deliveries SET state = ? WHERE id = ? AND state = ?")
            .bind(to)
            .bind(id)
            .bind(from)
            .execute(&self.pool)
            .await?
            .rows_affected();
        Ok(n == 1)
    }

    /// Closes a delivery with its outcome, forgets its text, and appends the outcome to the
    /// bundle's outcome stream; one transaction. Returns the event (None if it was closed
    /// already).
    pub async fn finish_delivery(
        &self,
        row: &DeliveryRow,
        outcome: Outcome,
        reason_code: Option<&str>,
        reason: Option<&str>,
    ) -> Result<Option<OutcomeEvent>> {
        let mut tx = self.pool.begin().await?;
        let at = Utc::now();
        let changed = sqlx::query(
            "UPDATE deliveries SET state = 'done', envelope = '', outcome = ?, reason_code = ?, \
             reason = ?, finished_at = ? WHERE id = ? AND state != 'done'",
        )
        .bind(outcome.as_str())
        .bind(reason_code)
        .bind(reason)
        .bind(at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
        .bind(row.id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if changed == 0 {
            return Ok(None);
        }
        let mut ev = OutcomeEvent {
            seq: 0,
            bundle: row.bundle.clone(),
            message_id: row.message_id.clone(),
            request_id: row.request_id.clone(),
            sender: row.sender.clone(),
            target: row.target.clone(),
            outcome,
            reason_code: reason_code.map(str::to_string),
            reason: reason.map(str::to_string),
            at,
        };
        ev.seq = Self::append_outcome(&mut tx, &ev).await?;
        tx.commit().await?;
        Ok(Some(ev))
    }

    /// After a crash: deliveries that were being attempted (nothing handed over yet) go back
    /// to the queue. Rows in `committing` or `handed_over` stay: their worker closes them
    /// without sending again.
    pub async fn recover(&self) -> Result<u64> {
        Ok(
            sqlx::query("UPDATE deliveries SET state = 'queued' WHERE state = 'attempting'")
                .execute(&self.pool)
                .await?
                .rows_affected(),
        )
    }

    /// Outcome events of a bundle after `after`, optionally only those of one sender.
    pub async fn outcomes_after(
        &self,
        bundle: &str,
        sender: Option<&str>,
        after: u64,
        limit: u32,
    ) -> Result<Vec<OutcomeEvent>> {
        let rows = sqlx::query(
            "SELECT seq, body FROM outcomes WHERE bundle = ?1 AND seq > ?2 \
             AND (?3 IS NULL OR sender = ?3) ORDER BY seq LIMIT ?4",
        )
        .bind(bundle)
        .bind(i64::try_from(after).unwrap_or(i64::MAX))
        .bind(sender)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                let seq: i64 = r.try_get("seq")?;
                let body: String = r.try_get("body")?;
                let mut ev: OutcomeEvent = serde_json::from_str(&body)
                    .map_err(|e| StoreError::Corrupt(format!("outcome {seq}: {e}")))?;
                ev.seq = seq.max(0) as u64;
                Ok(ev)
            })
            .collect()
    }
}
