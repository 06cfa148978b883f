//! The scheduler's durable state: schedules and their firings.
//!
//! Two back-ends behind one [`ScheduleStore`], as the gateway's store: **SQLite** (its own
//! file, `scheduler.db`) for one server, **PostgreSQL** (the schema `scheduler`, alone on
//! every connection's `search_path`) for several instances sharing one database. Each
//! operation is written once (`with_pool!`) in SQL valid on both.
//!
//! What instances sharing a store rely on:
//! - **A due time is claimed once.** [`ScheduleStore::claim`] moves a schedule's `next_due`
//!   on with `UPDATE … WHERE next_due = <the due time read>` and records the tick's firings
//!   in the same transaction: of several instances ticking at once, exactly one sees a row
//!   updated; the others find nothing to do. The same on SQLite (single writer) and
//!   PostgreSQL (the row lock of the `UPDATE`; the losers re-check the condition after it).
//! - **An open firing has one owner at a time.** The instance that claims a firing owns it
//!   with a lease (`lease_until`, wall-clock time) it renews while it works;
//!   [`ScheduleStore::take_open`] hands a firing whose lease ran out (its owner died) to
//!   another instance, one `UPDATE … WHERE lease_until < now` each, so one taker wins.
//!   [`ScheduleStore::save_firing`] writes only while the writer still owns the firing.
//! - Times are RFC 3339 text in UTC with microseconds, so text order is time order.

use std::path::Path;

use chrono::{DateTime, SecondsFormat, Utc};

use sqlx::Row;
use switchboard_db::{Db, with_pool};
use switchboard_protocol::schedules::{Firing, FiringStatus, ScheduleSpec};
use uuid::Uuid;

pub use switchboard_db::StoreError;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

const MIGRATIONS: switchboard_db::Migrations = switchboard_db::Migrations {
    owner: "scheduler",
    sqlite: &[(1, include_str!("../migrations/sqlite/0001_scheduler.sql"))],
    postgres: &[(1, include_str!("../migrations/postgres/0001_scheduler.sql"))],
    postgres_schema: Some(POSTGRES_SCHEMA),
    postgres_lock: 0x5357_4253_434d_4947, // "SWBSCMIG"
};

/// The PostgreSQL schema of the scheduler's tables.
const POSTGRES_SCHEMA: &str = "scheduler";

/// A time as the store writes it.
pub fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn parse_ts(s: &str) -> Result<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| StoreError::Corrupt(format!("time {s:?}: {e}")))
}

fn parse_uuid(s: &str) -> Result<Uuid> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("id {s:?}: {e}")))
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| StoreError::Corrupt(format!("encoding: {e}")))
}

fn from_json<T: serde::de::DeserializeOwned>(s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("record: {e}")))
}

/// A stored schedule.
#[derive(Debug, Clone, PartialEq)]
pub struct ScheduleRow {
    pub id: Uuid,
    pub spec: ScheduleSpec,
    pub paused: bool,
    pub next_due: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A stored firing: the record, and whether the scheduler still has work on it.
#[derive(Debug, Clone, PartialEq)]
pub struct FiringRow {
    pub firing: Firing,
    pub open: bool,
}

impl FiringRow {
    /// A firing is open while it is active or has deliveries pending.
    pub fn new(firing: Firing) -> Self {
        let open = is_open(&firing);
        Self { firing, open }
    }
}

/// Whether the scheduler still has work on a firing.
pub fn is_open(f: &Firing) -> bool {
    f.status.is_active()
        || f.deliveries
            .iter()
            .any(|d| d.status == switchboard_protocol::schedules::DeliveryStatus::Pending)
}

/// The scheduler's store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ScheduleStore {
    db: Db,
}

const SCHEDULE_COLS: &str = "id, spec, paused, next_due, created_at, updated_at";
const FIRING_COLS: &str = "record, open";

fn schedule_from_row<R: Row>(r: &R) -> Result<ScheduleRow>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> Option<String>: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let next_due: Option<String> = r.try_get("next_due")?;
    Ok(ScheduleRow {
        id: parse_uuid(&r.try_get::<String, _>("id")?)?,
        spec: from_json(&r.try_get::<String, _>("spec")?)?,
        paused: r.try_get::<i64, _>("paused")? != 0,
        next_due: next_due.as_deref().map(parse_ts).transpose()?,
        created_at: parse_ts(&r.try_get::<String, _>("created_at")?)?,
        updated_at: parse_ts(&r.try_get::<String, _>("updated_at")?)?,
    })
}

fn firing_from_row<R: Row>(r: &R) -> Result<FiringRow>
where
    for<'a> &'a str: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    Ok(FiringRow {
        firing: from_json(&r.try_get::<String, _>("record")?)?,
        open: r.try_get::<i64, _>("open")? != 0,
    })
}

/// The statuses of firings that count for overlap, as SQL.
const ACTIVE: &str = "('queued', 'starting', 'running')";

impl ScheduleStore {
    /// Opens (creating) the SQLite database and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Self> {
        Ok(Self {
            db: Db::sqlite(path, 4, &MIGRATIONS).await?,
        })
    }

    /// Connects to a PostgreSQL database and applies pending migrations, creating the
    /// schema `scheduler` if missing. Several instances may open one database at once.
    pub async fn open_postgres(url: &str) -> Result<Self> {
        Ok(Self {
            db: Db::postgres(url, 4, &MIGRATIONS).await?,
        })
    }

    /// The scheduler store beside the engine's: the schema `scheduler` of the engine's
    /// PostgreSQL database (`store_url`), shared by every instance, else `scheduler.db` in
    /// `data_dir`.
    pub async fn open_beside(store_url: &str, data_dir: &Path) -> Result<Self> {
        Ok(Self {
            db: Db::beside(store_url, &data_dir.join("scheduler.db"), 4, &MIGRATIONS).await?,
        })
    }

    /// `"sqlite"` or `"postgres"`.
    pub fn kind(&self) -> &'static str {
        self.db.kind()
    }

    pub async fn insert_schedule(&self, s: &ScheduleRow) -> Result<()> {
        let spec = to_json(&s.spec)?;
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "INSERT INTO schedules (id, spec, paused, next_due, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(s.id.to_string())
            .bind(&spec)
            .bind(i64::from(s.paused))
            .bind(s.next_due.map(ts))
            .bind(ts(s.created_at))
            .bind(ts(s.updated_at))
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    pub async fn schedule(&self, id: Uuid) -> Result<Option<ScheduleRow>> {
        let sql = format!("SELECT {SCHEDULE_COLS} FROM schedules WHERE id = $1");
        with_pool!(&self.db, |pool| {
            sqlx::query(sqlx::AssertSqlSafe(&*sql))
                .bind(id.to_string())
                .fetch_optional(pool)
                .await?
                .as_ref()
                .map(schedule_from_row)
                .transpose()
        })
    }

    /// Every schedule, oldest first.
    pub async fn schedules(&self) -> Result<Vec<ScheduleRow>> {
        let sql = format!("SELECT {SCHEDULE_COLS} FROM schedules ORDER BY created_at, id");
        with_pool!(&self.db, |pool| {
            sqlx::query(sqlx::AssertSqlSafe(&*sql))
                .fetch_all(pool)
                .await?
                .iter()
                .map(schedule_from_row)
                .collect()
        })
    }

    /// Writes a schedule's spec, pause and next due time; false if it is gone.
    pub async fn update_schedule(&self, s: &ScheduleRow) -> Result<bool> {
        let spec = to_json(&s.spec)?;
        let n = with_pool!(&self.db, |pool| {
            sqlx::query(
                "UPDATE schedules SET spec = $2, paused = $3, next_due = $4, updated_at = $5 \
                 WHERE id = $1",
            )
            .bind(s.id.to_string())
            .bind(&spec)
            .bind(i64::from(s.paused))
            .bind(s.next_due.map(ts))
            .bind(ts(s.updated_at))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Deletes a schedule and its history; false if there was none.
    pub async fn delete_schedule(&self, id: Uuid) -> Result<bool> {
        let n = with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            sqlx::query("DELETE FROM firings WHERE schedule_id = $1")
                .bind(id.to_string())
                .execute(&mut *tx)
                .await?;
            let n = sqlx::query("DELETE FROM schedules WHERE id = $1")
                .bind(id.to_string())
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            n
        });
        Ok(n == 1)
    }

    /// The schedules not paused whose next due time is at or before `now`.
    pub async fn due(&self, now: DateTime<Utc>) -> Result<Vec<ScheduleRow>> {
        let sql = format!(
            "SELECT {SCHEDULE_COLS} FROM schedules \
             WHERE paused = 0 AND next_due IS NOT NULL AND next_due <= $1 ORDER BY next_due"
        );
        with_pool!(&self.db, |pool| {
            sqlx::query(sqlx::AssertSqlSafe(&*sql))
                .bind(ts(now))
                .fetch_all(pool)
                .await?
                .iter()
                .map(schedule_from_row)
                .collect()
        })
    }

    /// Claims the due time `due` of a schedule: moves its next due time to `next` and
    /// records `firings` (owned by `owner` until `lease_until`), in one transaction. False —
    /// and nothing written — when the schedule no longer is due at `due` (another instance
    /// claimed it, or it was paused, changed or deleted meanwhile).
    pub async fn claim(
        &self,
        id: Uuid,
        due: DateTime<Utc>,
        next: Option<DateTime<Utc>>,
        firings: &[FiringRow],
        owner: &str,
        lease_until: DateTime<Utc>,
    ) -> Result<bool> {
        let records = firings
            .iter()
            .map(|f| to_json(&f.firing))
            .collect::<Result<Vec<_>>>()?;
        let t = switchboard_db::now();
        with_pool!(&self.db, |pool| {
            let mut tx = pool.begin().await?;
            let n = sqlx::query(
                "UPDATE schedules SET next_due = $3 WHERE id = $1 AND next_due = $2 AND paused = 0",
            )
            .bind(id.to_string())
            .bind(ts(due))
            .bind(next.map(ts))
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n != 1 {
                tx.rollback().await?;
                return Ok(false);
            }
            for (f, record) in firings.iter().zip(&records) {
                sqlx::query(
                    "INSERT INTO firings (id, schedule_id, due_at, status, record, open, owner, lease_until, created_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(f.firing.id.to_string())
                .bind(f.firing.schedule_id.to_string())
                .bind(ts(f.firing.due_at))
                .bind(f.firing.status.as_str())
                .bind(record)
                .bind(i64::from(f.open))
                .bind(f.open.then_some(owner))
                .bind(f.open.then(|| ts(lease_until)))
                .bind(&t)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(true)
    }

    /// Records a firing outside a tick (a run by hand), owned by `owner`.
    pub async fn insert_firing(
        &self,
        f: &FiringRow,
        owner: &str,
        lease_until: DateTime<Utc>,
    ) -> Result<()> {
        let record = to_json(&f.firing)?;
        let t = switchboard_db::now();
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "INSERT INTO firings (id, schedule_id, due_at, status, record, open, owner, lease_until, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind(f.firing.id.to_string())
            .bind(f.firing.schedule_id.to_string())
            .bind(ts(f.firing.due_at))
            .bind(f.firing.status.as_str())
            .bind(&record)
            .bind(i64::from(f.open))
            .bind(owner)
            .bind(ts(lease_until))
            .bind(&t)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    pub async fn firing(&self, id: Uuid) -> Result<Option<FiringRow>> {
        let sql = format!("SELECT {FIRING_COLS} FROM firings WHERE id = $1");
        with_pool!(&self.db, |pool| {
            sqlx::query(sqlx::AssertSqlSafe(&*sql))
                .bind(id.to_string())
                .fetch_optional(pool)
                .await?
                .as_ref()
                .map(firing_from_row)
                .transpose()
        })
    }

    /// A schedule's firings, newest first, at most `limit`.
    pub async fn firings(&self, schedule_id: Uuid, limit: u32) -> Result<Vec<FiringRow>> {
        let sql = format!(
            "SELECT {FIRING_COLS} FROM firings WHERE schedule_id = $1 \
             ORDER BY due_at DESC, created_at DESC, id DESC LIMIT $2"
        );
        with_pool!(&self.db, |pool| {
            sqlx::query(sqlx::AssertSqlSafe(&*sql))
                .bind(schedule_id.to_string())
                .bind(i64::from(limit))
                .fetch_all(pool)
                .await?
                .iter()
                .map(firing_from_row)
                .collect()
        })
    }

    /// A schedule's firings whose run has not ended (queued, starting, running), oldest
    /// first.
    pub async fn active(&self, schedule_id: Uuid) -> Result<Vec<FiringRow>> {
        let sql = format!(
            "SELECT {FIRING_COLS} FROM firings WHERE schedule_id = $1 AND status IN {ACTIVE} \
             ORDER BY due_at, created_at, id"
        );
        with_pool!(&self.db, |pool| {
            sqlx::query(sqlx::AssertSqlSafe(&*sql))
                .bind(schedule_id.to_string())
                .fetch_all(pool)
                .await?
                .iter()
                .map(firing_from_row)
                .collect()
        })
    }

    /// The open firings `owner` works on: those it owns, and those whose owner's lease ran
    /// out by `now`, taken over (until `lease_until`) one conditional `UPDATE` each, so that
    /// of several takers one wins. Oldest first.
    pub async fn take_open(
        &self,
        owner: &str,
        now: DateTime<Utc>,
        lease_until: DateTime<Utc>,
    ) -> Result<Vec<FiringRow>> {
        let sql = "SELECT id, owner, lease_until FROM firings WHERE open = 1 ORDER BY due_at, created_at, id";
        let rows: Vec<(String, Option<String>, Option<String>)> = with_pool!(&self.db, |pool| {
            sqlx::query(sql)
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| {
                    Ok((
                        r.try_get("id")?,
                        r.try_get("owner")?,
                        r.try_get("lease_until")?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?
        });
        let now_s = ts(now);
        let mut mine = Vec::new();
        for (id, who, until) in rows {
            let ours = who.as_deref() == Some(owner);
            let expired = who.is_none() || until.as_deref().is_none_or(|u| u < now_s.as_str());
            if !ours && !expired {
                continue;
            }
            let taken = with_pool!(&self.db, |pool| {
                sqlx::query(
                    "UPDATE firings SET owner = $2, lease_until = $3 WHERE id = $1 AND open = 1 \
                     AND (owner = $2 OR owner IS NULL OR lease_until IS NULL OR lease_until < $4)",
                )
                .bind(&id)
                .bind(owner)
                .bind(ts(lease_until))
                .bind(&now_s)
                .execute(pool)
                .await?
                .rows_affected()
            });
            if taken == 1
                && let Some(f) = self.firing(parse_uuid(&id)?).await?
            {
                mine.push(f);
            }
        }
        Ok(mine)
    }

    /// Writes a firing's record, if `owner` still owns it (false otherwise: it was taken
    /// over, and the new owner's word counts). A firing no longer open is released.
    pub async fn save_firing(&self, f: &FiringRow, owner: &str) -> Result<bool> {
        let record = to_json(&f.firing)?;
        let n = with_pool!(&self.db, |pool| {
            sqlx::query(
                "UPDATE firings SET status = $3, record = $4, open = $5, \
                 owner = CASE WHEN $5 = 1 THEN owner ELSE NULL END, \
                 lease_until = CASE WHEN $5 = 1 THEN lease_until ELSE NULL END \
                 WHERE id = $1 AND owner = $2",
            )
            .bind(f.firing.id.to_string())
            .bind(owner)
            .bind(f.firing.status.as_str())
            .bind(&record)
            .bind(i64::from(f.open))
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }

    /// Reopens a firing whose failed deliveries are to be tried again by hand: it becomes
    /// open with no owner, so the next tick of any instance takes it.
    pub async fn reopen_firing(&self, f: &FiringRow) -> Result<bool> {
        let record = to_json(&f.firing)?;
        let n = with_pool!(&self.db, |pool| {
            sqlx::query(
                "UPDATE firings SET status = $2, record = $3, open = 1, owner = NULL, lease_until = NULL \
                 WHERE id = $1 AND open = 0",
            )
            .bind(f.firing.id.to_string())
            .bind(f.firing.status.as_str())
            .bind(&record)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n == 1)
    }
}

/// Whether a status string is one of a firing's.
pub fn status_of(s: &str) -> Option<FiringStatus> {
    FiringStatus::parse(s)
}
