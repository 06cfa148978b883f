//! The relay's durable state in its own SQLite file (`relay.db`): bundle states, the sessions
//! behind members, the per-target delivery queues with their outcomes, the outcome stream and
//! startup failures.

use std::path::Path;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqlitePoolOptions, SqliteRow};
use sqlx::{Row, SqlitePool};
use switchboard_protocol::relay::{BundleState, Outcome, OutcomeEvent, StartupFailure};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    Db(#[from] sqlx::Error),
    #[error("{0}")]
    Open(#[from] switchboard_db::DbError),
    #[error("corrupt row: {0}")]
    Corrupt(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How many startup failures are kept per bundle.
pub const STARTUP_FAILURE_HISTORY: i64 = 20;

/// The relay's tables (SQLite only: the relay is per instance).
const MIGRATIONS: switchboard_db::Migrations = switchboard_db::Migrations {
    owner: "relay",
    sqlite: &[
        (1, include_str!("../migrations/0001_relay.sql")),
        (2, include_str!("../migrations/0002_requests.sql")),
    ],
    postgres: &[],
    postgres_schema: None,
    postgres_lock: 0x5357_4252_4d49_4752, // "SWBRMIGR"
};

/// Why a delivery never entered its queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub outcome: Outcome,
    pub code: String,
    pub reason: String,
}

/// A send request's id, for idempotent retries.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestKey {
    pub sender: String,
    pub request_id: String,
    /// Hash of what the request asks for.
    pub fingerprint: String,
}

/// What [`RelayStore::record_send`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum Recorded {
    /// Stored: the outcome events of the deliveries refused on the spot.
    Stored(Vec<OutcomeEvent>),
    /// The request id was seen before; `same` tells whether it asked for the same thing.
    Duplicate { same: bool },
}

use switchboard_db::now;

fn parse_time(s: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("time {s:?}: {e}")))
}

/// One message to one target.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRow {
    pub id: i64,
    pub message_id: String,
    pub bundle: String,
    pub target: String,
    pub sender: String,
    pub request_id: Option<String>,
    pub envelope: String,
    pub body_bytes: i64,
    pub sync: bool,
    pub quiet_window_ms: Option<u64>,
    pub quiescence_timeout_ms: Option<u64>,
    pub turn_timeout_ms: Option<u64>,
    pub state: String,
    pub outcome: Option<Outcome>,
    pub reason_code: Option<String>,
    pub reason: Option<String>,
}

/// A new delivery, as enqueued.
#[derive(Debug, Clone)]
pub struct NewDelivery {
    pub message_id: String,
    pub bundle: String,
    pub target: String,
    pub sender: String,
    pub request_id: Option<String>,
    pub envelope: String,
    pub body_bytes: usize,
    pub sync: bool,
    pub quiet_window_ms: Option<u64>,
    pub quiescence_timeout_ms: Option<u64>,
    pub turn_timeout_ms: Option<u64>,
}

/// Milliseconds as stored (the relay caps them far below `i64::MAX`).
fn ms_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

fn opt_u64(row: &SqliteRow, col: &str) -> Result<Option<u64>> {
    let v: Option<i64> = row.try_get(col)?;
    Ok(v.map(|v| v.max(0) as u64))
}

fn delivery_from_row(row: &SqliteRow) -> Result<DeliveryRow> {
    let outcome: Option<String> = row.try_get("outcome")?;
    let outcome = match outcome {
        None => None,
        Some(s) => {
            Some(Outcome::parse(&s).ok_or_else(|| StoreError::Corrupt(format!("outcome {s:?}")))?)
        }
    };
    Ok(DeliveryRow {
        id: row.try_get("id")?,
        message_id: row.try_get("message_id")?,
        bundle: row.try_get("bundle")?,
        target: row.try_get("target")?,
        sender: row.try_get("sender")?,
        request_id: row.try_get("request_id")?,
        envelope: row.try_get("envelope")?,
        body_bytes: row.try_get("body_bytes")?,
        sync: row.try_get::<i64, _>("sync")? != 0,
        quiet_window_ms: opt_u64(row, "quiet_window_ms")?,
        quiescence_timeout_ms: opt_u64(row, "quiescence_timeout_ms")?,
        turn_timeout_ms: opt_u64(row, "turn_timeout_ms")?,
        state: row.try_get("state")?,
        outcome,
        reason_code: row.try_get("reason_code")?,
        reason: row.try_get("reason")?,
    })
}

/// The relay store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RelayStore {
    pool: SqlitePool,
}

impl RelayStore {
    /// Opens (creating) the database and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Self> {
        let pool = switchboard_db::open_sqlite(
            switchboard_db::sqlite_options(path),
            SqlitePoolOptions::new().max_connections(4),
            &MIGRATIONS,
        )
        .await?;
        Ok(Self { pool })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }

    // --- bundles --------------------------------------------------------------------------

    pub async fn bundle_state(&self, bundle: &str) -> Result<BundleState> {
        let s: Option<String> = sqlx::query_scalar("SELECT state FROM bundles WHERE name = ?")
            .bind(bundle)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match s.as_deref() {
            Some("up") => BundleState::Up,
            _ => BundleState::Down,
        })
    }

    pub async fn set_bundle_state(&self, bundle: &str, state: BundleState) -> Result<()> {
        let s = match state {
            BundleState::Up => "up",
            BundleState::Down => "down",
        };
        sqlx::query(
            "INSERT INTO bundles (name, state, updated_at) VALUES (?1, ?2, ?3) \
             ON CONFLICT (name) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at",
        )
        .bind(bundle)
        .bind(s)
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    // --- member sessions ------------------------------------------------------------------

    pub async fn member_session(&self, bundle: &str, member: &str) -> Result<Option<String>> {
        Ok(sqlx::query_scalar(
            "SELECT session_id FROM member_sessions WHERE bundle = ? AND member = ?",
        )
        .bind(bundle)
        .bind(member)
        .fetch_optional(&self.pool)
        .await?)
    }

    pub async fn set_member_session(
        &self,
        bundle: &str,
        member: &str,
        session: Option<&str>,
    ) -> Result<()> {
        match session {
            Some(s) => {
                sqlx::query(
                    "INSERT INTO member_sessions (bundle, member, session_id) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (bundle, member) DO UPDATE SET session_id = excluded.session_id",
                )
                .bind(bundle)
                .bind(member)
                .bind(s)
                .execute(&self.pool)
                .await?;
            }
            None => {
                sqlx::query("DELETE FROM member_sessions WHERE bundle = ? AND member = ?")
                    .bind(bundle)
                    .bind(member)
                    .execute(&self.pool)
                    .await?;
            }
        }
        Ok(())
    }

    // --- deliveries -----------------------------------------------------------------------

    /// Stores one send in one immediate transaction: the request id (when given), then per
    /// target either a queued delivery (unless the target already has `capacity` unfinished
    /// ones: refused `runtime_queue_full`) or a refused one with its outcome event.
    pub async fn record_send(
        &self,
        key: Option<&RequestKey>,
        rows: &[(NewDelivery, Option<Refusal>)],
        capacity: usize,
    ) -> Result<Recorded> {
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
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

    async fn insert_queued(
        tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
        d: &NewDelivery,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO deliveries (message_id, bundle, target, sender, request_id, envelope, \
             body_bytes, sync, quiet_window_ms, quiescence_timeout_ms, turn_timeout_ms, state, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?)",
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
             body_bytes, sync, state, outcome, reason_code, reason, created_at, finished_at) \
             VALUES (?, ?, ?, ?, ?, '', ?, ?, 'done', ?, ?, ?, ?, ?)",
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

    // --- startup failures -----------------------------------------------------------------

    pub async fn record_startup_failure(
        &self,
        bundle: &str,
        member: &str,
        code: &str,
        reason: &str,
    ) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT INTO startup_failures (bundle, member, code, reason, at) VALUES (?, ?, ?, ?, ?)",
        )
        .bind(bundle)
        .bind(member)
        .bind(code)
        .bind(reason)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "DELETE FROM startup_failures WHERE bundle = ?1 AND id NOT IN \
             (SELECT id FROM startup_failures WHERE bundle = ?1 ORDER BY id DESC LIMIT ?2)",
        )
        .bind(bundle)
        .bind(STARTUP_FAILURE_HISTORY)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// How many failures are recorded for the bundle, and the newest.
    pub async fn startup_failures(&self, bundle: &str) -> Result<(u64, Option<StartupFailure>)> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM startup_failures WHERE bundle = ?")
            .bind(bundle)
            .fetch_one(&self.pool)
            .await?;
        let latest = sqlx::query(
            "SELECT member, code, reason, at FROM startup_failures WHERE bundle = ? ORDER BY id DESC LIMIT 1",
        )
        .bind(bundle)
        .fetch_optional(&self.pool)
        .await?;
        let latest = match latest {
            None => None,
            Some(r) => {
                let at: String = r.try_get("at")?;
                Some(StartupFailure {
                    member: r.try_get("member")?,
                    code: r.try_get("code")?,
                    reason: r.try_get("reason")?,
                    at: parse_time(&at)?,
                })
            }
        };
        Ok((n.max(0) as u64, latest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(target: &str, id: &str) -> NewDelivery {
        NewDelivery {
            message_id: id.into(),
            bundle: "dev".into(),
            target: target.into(),
            sender: "a".into(),
            request_id: Some("r1".into()),
            envelope: "hello".into(),
            body_bytes: 5,
            sync: false,
            quiet_window_ms: Some(100),
            quiescence_timeout_ms: None,
            turn_timeout_ms: None,
        }
    }

    async fn enqueue(s: &RelayStore, d: NewDelivery, cap: usize) -> Vec<OutcomeEvent> {
        match s.record_send(None, &[(d, None)], cap).await.unwrap() {
            Recorded::Stored(ev) => ev,
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_database_newer_than_the_binary_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("relay.db");
        RelayStore::open(&path).await.unwrap().close().await;
        let pool = SqlitePool::connect(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (99, 'x')")
            .execute(&pool)
            .await
            .unwrap();
        pool.close().await;
        let err = RelayStore::open(&path).await.err().unwrap().to_string();
        assert!(
            err.contains("relay") && err.contains("newer than this binary"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn queue_is_bounded_ordered_and_recovers() {
        let d = tempfile::tempdir().unwrap();
        let s = RelayStore::open(&d.path().join("relay.db")).await.unwrap();
        assert!(enqueue(&s, new("b", "m1"), 2).await.is_empty());
        assert!(enqueue(&s, new("b", "m2"), 2).await.is_empty());
        let full = enqueue(&s, new("b", "m3"), 2).await;
        assert_eq!(full.len(), 1, "refused, with an outcome event");
        assert_eq!(full[0].reason_code.as_deref(), Some("runtime_queue_full"));
        assert!(full[0].seq > 0);
        assert!(enqueue(&s, new("c", "m4"), 2).await.is_empty());
        assert_eq!(s.queued_count("dev", "b").await.unwrap(), 2);
        let first = s.next_delivery("dev", "b").await.unwrap().unwrap();
        assert_eq!(first.message_id, "m1");
        assert_eq!(first.quiet_window_ms, Some(100));
        assert!(s.advance(first.id, "queued", "attempting").await.unwrap());
        assert!(
            !s.advance(first.id, "queued", "attempting").await.unwrap(),
            "a step is taken once"
        );
        assert!(
            s.advance(first.id, "attempting", "committing")
                .await
                .unwrap()
        );
        assert!(
            !s.advance(first.id, "queued", "attempting").await.unwrap(),
            "never back from committing"
        );
        let again = s.next_delivery("dev", "b").await.unwrap().unwrap();
        assert_eq!(
            (again.message_id.as_str(), again.state.as_str()),
            ("m1", "committing")
        );
        let c = s.next_delivery("dev", "c").await.unwrap().unwrap();
        assert!(s.advance(c.id, "queued", "attempting").await.unwrap());
        s.close().await;

        let s = RelayStore::open(&d.path().join("relay.db")).await.unwrap();
        assert_eq!(
            s.recover().await.unwrap(),
            1,
            "only the attempting row goes back"
        );
        let c = s.next_delivery("dev", "c").await.unwrap().unwrap();
        assert_eq!(c.state, "queued");
        let m1 = s.next_delivery("dev", "b").await.unwrap().unwrap();
        assert_eq!(m1.state, "committing");
        let ev = s
            .finish_delivery(&m1, Outcome::Failed, Some("x"), Some("y"))
            .await
            .unwrap()
            .unwrap();
        assert!(ev.seq > full[0].seq);
        assert!(
            s.finish_delivery(&m1, Outcome::Delivered, None, None)
                .await
                .unwrap()
                .is_none(),
            "a delivery closes once"
        );
        let done = s.delivery("dev", "m1").await.unwrap().unwrap();
        assert_eq!(done.envelope, "", "the text is forgotten once delivered");
        assert_eq!(done.outcome, Some(Outcome::Failed));
        assert_eq!(
            s.next_delivery("dev", "b")
                .await
                .unwrap()
                .unwrap()
                .message_id,
            "m2"
        );
        let evs = s.outcomes_after("dev", Some("a"), 0, 10).await.unwrap();
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[1].seq, ev.seq);
        assert!(
            s.outcomes_after("dev", Some("zz"), 0, 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            s.outcomes_after("dev", None, u64::MAX, 10)
                .await
                .unwrap()
                .is_empty()
        );
        let mut targets = s.pending_targets().await.unwrap();
        targets.sort();
        assert_eq!(
            targets,
            vec![("dev".into(), "b".into()), ("dev".into(), "c".into())]
        );
    }

    #[tokio::test]
    async fn request_ids_are_recorded_once() {
        let d = tempfile::tempdir().unwrap();
        let s = RelayStore::open(&d.path().join("relay.db")).await.unwrap();
        let key = |f: &str| RequestKey {
            sender: "a".into(),
            request_id: "r1".into(),
            fingerprint: f.into(),
        };
        let rows = vec![(new("b", "m1"), None), (new("c", "m2"), None)];
        assert_eq!(
            s.record_send(Some(&key("f1")), &rows, 10).await.unwrap(),
            Recorded::Stored(vec![])
        );
        let rows2 = vec![(new("b", "m3"), None)];
        assert_eq!(
            s.record_send(Some(&key("f1")), &rows2, 10).await.unwrap(),
            Recorded::Duplicate { same: true }
        );
        assert_eq!(
            s.record_send(Some(&key("f2")), &rows2, 10).await.unwrap(),
            Recorded::Duplicate { same: false }
        );
        assert!(
            s.delivery("dev", "m3").await.unwrap().is_none(),
            "nothing stored for a duplicate"
        );
        assert_eq!(
            s.request_deliveries("dev", "a", "r1").await.unwrap().len(),
            2
        );
    }

    #[tokio::test]
    async fn startup_failures_are_bounded() {
        let d = tempfile::tempdir().unwrap();
        let s = RelayStore::open(&d.path().join("relay.db")).await.unwrap();
        for i in 0..30 {
            s.record_startup_failure("dev", "b", "startup_exited", &format!("try {i}"))
                .await
                .unwrap();
        }
        let (n, latest) = s.startup_failures("dev").await.unwrap();
        assert_eq!(n, STARTUP_FAILURE_HISTORY as u64);
        assert_eq!(latest.unwrap().reason, "try 29");
        assert_eq!(s.startup_failures("other").await.unwrap().0, 0);
        assert_eq!(s.bundle_state("dev").await.unwrap(), BundleState::Down);
        s.set_bundle_state("dev", BundleState::Up).await.unwrap();
        assert_eq!(s.bundle_state("dev").await.unwrap(), BundleState::Up);
    }
}
