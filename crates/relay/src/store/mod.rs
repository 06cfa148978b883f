//! The relay's durable state in its own SQLite file (`relay.db`): bundle states, the sessions
//! behind members, the per-target delivery queues with their outcomes, the outcome stream and
//! startup failures.
//!
//! This file holds the rows, the store's opening, bundle states, member sessions and startup
//! failures; `deliveries.rs` holds the delivery queues and the outcome stream.

use std::path::Path;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqlitePoolOptions, SqliteRow};
use sqlx::{Row, SqlitePool};
use switchboard_protocol::relay::{BundleState, Outcome, OutcomeEvent, StartupFailure};

mod deliveries;
#[cfg(test)]
mod tests;

pub use switchboard_db::StoreError;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// How many startup failures are kept per bundle.
pub const STARTUP_FAILURE_HISTORY: i64 = 20;

/// The relay's tables (SQLite only: the relay is per instance).
const MIGRATIONS: switchboard_db::Migrations = switchboard_db::Migrations {
    owner: "relay",
    sqlite: &[
        (1, include_str!("../../migrations/0001_relay.sql")),
        (2, include_str!("../../migrations/0002_requests.sql")),
        (3, include_str!("../../migrations/0003_chains.sql")),
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
    /// Nothing stored: the budget of this index (of those given) would be exceeded.
    OverBudget(usize),
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
    /// The chain it belongs to (none for deliveries stored before chains existed).
    pub chain_id: Option<String>,
    pub hop: u32,
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
    pub chain_id: String,
    pub hop: u32,
}

/// A send budget checked, atomically with the insert, by [`RelayStore::record_send`]: at
/// most `limit` deliveries since `since` (by `sender`, or by anyone in the bundle).
#[derive(Debug, Clone)]
pub struct Budget {
    pub sender: Option<String>,
    pub since: String,
    pub limit: u64,
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
        chain_id: row.try_get("chain_id")?,
        hop: row.try_get::<i64, _>("hop")?.clamp(0, i64::from(u32::MAX)) as u32,
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
