//! The gateway's durable state: routes, the inbox of messages waiting for the agent, button
//! presses, the run each route follows with how far its reply got, approval prompts,
//! notification contexts, pairing, allowed chats, channel state and the inbound messages
//! already taken.
//!
//! Two back-ends behind one [`GatewayStore`]:
//!
//! - **SQLite** ([`GatewayStore::open`]): its own file, `gateway.db`, for one `switchboard
//!   serve` (or one standalone gateway).
//! - **PostgreSQL** ([`GatewayStore::open_postgres`]): for several instances sharing one
//!   database. The tables live in the schema `gateway` — the engine's tables (`runs`,
//!   `approvals` …) share the database and their names would collide — which the store
//!   creates when missing and puts alone on every connection's `search_path`, so the SQL
//!   below never names it.
//!
//! Each operation is written once and run on whichever pool the store has (`with_pool!`):
//! `$n` placeholders (sqlx binds them on SQLite too), `ON CONFLICT` upserts instead of
//! SQLite's `INSERT OR IGNORE` / `INSERT OR REPLACE`, named columns instead of `SELECT *`.
//! What differs is locking that PostgreSQL needs and SQLite's single writer gives for free
//! (`TxLock`: a no-op on SQLite, an advisory lock on PostgreSQL).
//!
//! What instances sharing the PostgreSQL store rely on (SQLite gets the same from its single
//! writer):
//!
//! - [`GatewayStore::first_seen`] is one `INSERT … ON CONFLICT DO NOTHING`: of two instances
//!   handed the same update, exactly one is told it is new.
//! - Taking something is one `DELETE`: exactly one caller of [`GatewayStore::take_prompt`],
//!   [`GatewayStore::take_context`] or [`GatewayStore::approve_pairing`] gets the row.
//! - [`GatewayStore::enqueue`] serializes the inserts of one routing key, so a route's inbox
//!   ids commit in id order and [`GatewayStore::dequeue`] (`id <= upto`) never removes a
//!   message its reader has not seen.
//! - [`GatewayStore::put_prompt`] serializes the writers of one session: the last one's
//!   prompt is the one left, as with SQLite's `INSERT OR REPLACE`.
//! - Migrations are serialized by an advisory lock: instances starting at once on a fresh
//!   database each find the work done or do it, once.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions, PgRow};
use sqlx::sqlite::{SqlitePoolOptions, SqliteRow};
use sqlx::{PgConnection, PgPool, Row, SqliteConnection, SqlitePool};
use uuid::Uuid;

use crate::channel::{ButtonPress, ChannelState, ChatRef, Peer};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("gateway store: {0}")]
    Db(#[from] sqlx::Error),
    #[error("gateway store: {0}")]
    Open(#[from] switchboard_db::DbError),
    #[error("gateway store: corrupt row: {0}")]
    Corrupt(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

use switchboard_db::now;

fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// Reading columns from either back-end's rows, so that each record is decoded by one
/// function. The columns are the same on both: TEXT, and INTEGER / BIGINT read as `i64`.
trait Cols {
    fn text(&self, col: &str) -> Result<String>;
    fn opt_text(&self, col: &str) -> Result<Option<String>>;
    fn int(&self, col: &str) -> Result<i64>;
}

macro_rules! impl_cols {
    ($($row:ty),*) => {$(
        impl Cols for $row {
            fn text(&self, col: &str) -> Result<String> {
                Ok(self.try_get(col)?)
            }
            fn opt_text(&self, col: &str) -> Result<Option<String>> {
                Ok(self.try_get(col)?)
            }
            fn int(&self, col: &str) -> Result<i64> {
                Ok(self.try_get(col)?)
            }
        }
    )*};
}

impl_cols!(SqliteRow, PgRow);

fn from_json<T: DeserializeOwned>(row: &impl Cols, col: &str) -> Result<T> {
    let s = row.text(col)?;
    serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

fn uuid(row: &impl Cols, col: &str) -> Result<Uuid> {
    let s = row.text(col)?;
    Uuid::parse_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

/// A routing key's session and where its replies go.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub routing_key: String,
    pub session_id: Uuid,
    pub channel: String,
    pub chat: ChatRef,
    pub requester: Peer,
    pub bound: bool,
}

/// A message waiting for the agent.
#[derive(Debug, Clone, PartialEq)]
pub struct Queued {
    pub id: i64,
    pub routing_key: String,
    pub channel: String,
    pub peer: Peer,
    pub chat: ChatRef,
    pub text: String,
    pub context: Option<serde_json::Value>,
}

/// The run a route follows and how far its reply got.
#[derive(Debug, Clone, PartialEq)]
pub struct FollowedRun {
    pub routing_key: String,
    pub session_id: Uuid,
    pub run_id: Uuid,
    pub last_event_id: u64,
    pub stream_message: Option<String>,
    pub streamed: String,
    pub delivered: usize,
    pub deadline: Option<String>,
    /// Reply text received but not yet shown (channels that cannot edit).
    pub pending: String,
    /// Channels that edit: the messages showing the current reply, one per page.
    pub pages: Vec<ShownPage>,
}

/// One message showing a page of a reply, and the text it shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShownPage {
    /// The platform's message id; empty when the platform refused the message for good
    /// (it is not tried again).
    pub id: String,
    pub text: String,
}

/// An approval prompt shown in a chat.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    pub id: String,
    pub routing_key: String,
    pub session_id: Uuid,
    pub run_id: Uuid,
    pub tool_call_ids: Vec<String>,
    pub channel: String,
    pub chat: ChatRef,
    pub prompt_message: String,
    pub prompt_text: String,
    pub requester: Peer,
}

/// A pairing request from an unknown direct message.
#[derive(Debug, Clone, PartialEq)]
pub struct Pairing {
    pub code: String,
    pub channel: String,
    pub peer: Peer,
    pub chat: ChatRef,
    pub expires_at: String,
}

/// The gateway store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GatewayStore {
    db: Db,
}

#[derive(Debug, Clone)]
enum Db {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// Runs `$body` with `$pool` bound to the store's pool, whichever back-end it is: the body is
/// written once and compiled once per back-end, so its SQL must be valid on both.
macro_rules! with_pool {
    ($store:expr, |$pool:ident| $body:expr) => {
        match &$store.db {
            Db::Sqlite($pool) => $body,
            Db::Postgres($pool) => $body,
        }
    };
}

// The columns each record is read from, named rather than `SELECT *`: a cached prepared
// statement's result columns must not change under it. On SQLite, a connection that loaded
// the schema before a migration added columns prepares `SELECT *` with the old column count,
// and sqlx then indexes past the end of the row once SQLite re-prepares it; on PostgreSQL,
// an instance still running while another migrates would get "cached plan must not change
// result type".
macro_rules! route_cols {
    () => {
        "routing_key, session_id, channel, chat, requester, bound"
    };
}
macro_rules! queued_cols {
    () => {
        "id, routing_key, channel, peer, chat, text, context"
    };
}
macro_rules! run_cols {
    () => {
        "routing_key, session_id, run_id, last_event_id, stream_message, streamed, delivered, deadline, pending, pages"
    };
}
macro_rules! prompt_cols {
    () => {
        "id, routing_key, session_id, run_id, tool_call_ids, channel, chat, prompt_message, prompt_text, requester"
    };
}
macro_rules! pairing_cols {
    () => {
        "code, channel, peer, chat, expires_at"
    };
}

/// The gateway's tables: the same tables and columns on both back-ends; on PostgreSQL in
/// the schema `gateway` (the engine's store may use the same database), migrated under an
/// advisory lock of its own ("SWBGWMIG").
const MIGRATIONS: switchboard_db::Migrations = switchboard_db::Migrations {
    owner: "gateway",
    sqlite: &[
        (1, include_str!("../migrations/sqlite/0001_gateway.sql")),
        (
            2,
            include_str!("../migrations/sqlite/0002_pending_and_seen.sql"),
        ),
        (3, include_str!("../migrations/sqlite/0003_reply_pages.sql")),
    ],
    postgres: &[
        (1, include_str!("../migrations/postgres/0001_gateway.sql")),
        (
            2,
            include_str!("../migrations/postgres/0002_pending_and_seen.sql"),
        ),
        (
            3,
            include_str!("../migrations/postgres/0003_reply_pages.sql"),
        ),
    ],
    postgres_schema: Some(POSTGRES_SCHEMA),
    postgres_lock: 0x5357_4247_574d_4947,
};

/// The PostgreSQL schema of the gateway's tables (and of its `schema_migrations`).
const POSTGRES_SCHEMA: &str = "gateway";

/// Lock spaces of [`TxLock::lock_until_commit`]: a routing key's inbox inserts, a session's
/// prompt.
const INBOX_LOCK: i32 = 0x4757_4951; // "GWIQ"
const PROMPT_LOCK: i32 = 0x4757_4150; // "GWAP"

/// Holds a lock on `key` (in the lock space `class`) until the transaction ends, so that the
/// transactions of concurrent writers of one key run one after the other.
trait TxLock {
    async fn lock_until_commit(&mut self, class: i32, key: &str) -> Result<()>;
}

/// Nothing to do: a SQLite write transaction already excludes every other writer.
impl TxLock for SqliteConnection {
    async fn lock_until_commit(&mut self, _class: i32, _key: &str) -> Result<()> {
        Ok(())
    }
}

/// A transaction-scoped advisory lock on `(class, hash of key)`. Two-key advisory locks never
/// collide with one-key ones (the migration lock); two keys with the same hash merely wait
/// for each other.
impl TxLock for PgConnection {
    async fn lock_until_commit(&mut self, class: i32, key: &str) -> Result<()> {
        sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
            .bind(class)
            .bind(key)
            .execute(self)
            .await?;
        Ok(())
    }
}

impl GatewayStore {
    /// Opens (creating) the SQLite database and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Self> {
        let pool = switchboard_db::open_sqlite(
            switchboard_db::sqlite_options(path),
            SqlitePoolOptions::new().max_connections(4),
            &MIGRATIONS,
        )
        .await?;
        Ok(Self {
            db: Db::Sqlite(pool),
        })
    }

    /// Connects to a PostgreSQL database (`postgres://user:password@host:port/database`, the
    /// URL forms sqlx accepts) and applies pending migrations, creating the schema `gateway`
    /// if missing. The database must exist. Several instances may open one database at once.
    pub async fn open_postgres(url: &str) -> Result<Self> {
        let mut connect = PgConnectOptions::from_str(url)?;
        if connect.get_application_name().is_none() {
            connect = connect.application_name("switchboard-gateway");
        }
        // Set at connection start-up (`-c search_path=gateway`), so every connection the
        // pool ever opens, reconnects included, resolves the unqualified names of the SQL in
        // this file and of the migrations in the gateway's schema, never in the engine's.
        // A later `options` wins over one given in the URL.
        let connect = connect.options([("search_path", POSTGRES_SCHEMA)]);
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(connect)
            .await?;
        switchboard_db::migrate_postgres(&pool, &MIGRATIONS).await?;
        Ok(Self {
            db: Db::Postgres(pool),
        })
    }

    /// Which back-end this store is on: `"sqlite"` or `"postgres"`.
    pub fn kind(&self) -> &'static str {
        match self.db {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    // --- routes -------------------------------------------------------------------------

    pub async fn route(&self, key: &str) -> Result<Option<Route>> {
        with_pool!(self, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                route_cols!(),
                " FROM routes WHERE routing_key = $1"
            ))
            .bind(key)
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(route_from_row)
            .transpose()
        })
    }

    pub async fn route_of_session(&self, session_id: Uuid) -> Result<Option<Route>> {
        with_pool!(self, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                route_cols!(),
                " FROM routes WHERE session_id = $1 ORDER BY updated_at DESC LIMIT 1"
            ))
            .bind(session_id.to_string())
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(route_from_row)
            .transpose()
        })
    }

    pub async fn routes(&self) -> Result<Vec<Route>> {
        with_pool!(self, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                route_cols!(),
                " FROM routes ORDER BY updated_at DESC"
            ))
            .fetch_all(pool)
            .await?
            .iter()
            .map(route_from_row)
            .collect()
        })
    }

    /// Creates or updates a route (the session, and the latest reply target).
    pub async fn put_route(&self, r: &Route) -> Result<()> {
        let t = now();
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO routes (routing_key, session_id, channel, chat, requester, bound, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7) \
                 ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, \
                 channel = excluded.channel, chat = excluded.chat, requester = excluded.requester, \
                 bound = excluded.bound, updated_at = excluded.updated_at",
            )
            .bind(&r.routing_key)
            .bind(r.session_id.to_string())
            .bind(&r.channel)
            .bind(to_json(&r.chat))
            .bind(to_json(&r.requester))
            // An integer on both back-ends (PostgreSQL would not take a bool for BIGINT).
            .bind(i64::from(r.bound))
            .bind(&t)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Removes a route; the next message on it starts a new session. Whether one was.
    pub async fn delete_route(&self, key: &str) -> Result<bool> {
        let n = with_pool!(self, |pool| {
            sqlx::query("DELETE FROM routes WHERE routing_key = $1")
                .bind(key)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    // --- inbox --------------------------------------------------------------------------

    /// Queues a message; its id, greater than every id queued before it.
    pub async fn enqueue(&self, q: &Queued) -> Result<i64> {
        let (peer, chat, context, t) = (
            to_json(&q.peer),
            to_json(&q.chat),
            q.context.as_ref().map(to_json),
            now(),
        );
        with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            // A PostgreSQL sequence hands out ids when rows are inserted, not when they
            // commit: without the lock, an instance's message could commit with an id below
            // one a worker has already read, and `dequeue(upto)` would delete it unread.
            // Holding the routing key's lock until commit makes each route's ids commit in
            // order.
            (*tx).lock_until_commit(INBOX_LOCK, &q.routing_key).await?;
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO inbox (routing_key, channel, peer, chat, text, context, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
            )
            .bind(&q.routing_key)
            .bind(&q.channel)
            .bind(&peer)
            .bind(&chat)
            .bind(&q.text)
            .bind(&context)
            .bind(&t)
            .fetch_one(&mut *tx)
            .await?;
            tx.commit().await?;
            Ok(id)
        })
    }

    /// Everything queued for a route, oldest first.
    pub async fn queued(&self, key: &str) -> Result<Vec<Queued>> {
        with_pool!(self, |pool| {
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
        with_pool!(self, |pool| {
            sqlx::query("SELECT DISTINCT routing_key FROM inbox")
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| r.text("routing_key"))
                .collect()
        })
    }

    /// Removes delivered messages (those with ids up to and including `upto`).
    pub async fn dequeue(&self, key: &str, upto: i64) -> Result<()> {
        with_pool!(self, |pool| {
            sqlx::query("DELETE FROM inbox WHERE routing_key = $1 AND id <= $2")
                .bind(key)
                .bind(upto)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    // --- presses ------------------------------------------------------------------------

    pub async fn push_press(&self, p: &ButtonPress) -> Result<i64> {
        let (press, t) = (to_json(p), now());
        with_pool!(self, |pool| {
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
        with_pool!(self, |pool| {
            sqlx::query("SELECT id, press FROM presses ORDER BY id")
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| Ok((r.int("id")?, from_json(r, "press")?)))
                .collect()
        })
    }

    pub async fn drop_press(&self, id: i64) -> Result<()> {
        with_pool!(self, |pool| {
            sqlx::query("DELETE FROM presses WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    // --- followed runs ------------------------------------------------------------------

    pub async fn put_run(&self, r: &FollowedRun) -> Result<()> {
        let t = now();
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO runs (routing_key, session_id, run_id, last_event_id, stream_message, streamed, delivered, deadline, started_at, pending, pages) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
                 ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, run_id = excluded.run_id, \
                 last_event_id = excluded.last_event_id, stream_message = excluded.stream_message, \
                 streamed = excluded.streamed, delivered = excluded.delivered, deadline = excluded.deadline, \
                 pending = excluded.pending, pages = excluded.pages",
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
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Starts following a run and removes the messages that started it, in one
    /// transaction: a crash leaves either both or neither.
    pub async fn start_run(&self, r: &FollowedRun, upto: i64) -> Result<()> {
        let t = now();
        with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            // A fresh row, as the `INSERT OR REPLACE` this was on SQLite: every column the
            // insert does not name goes back to its default (NULL for `channel` and `chat`).
            sqlx::query(
                "INSERT INTO runs (routing_key, session_id, run_id, last_event_id, stream_message, streamed, delivered, deadline, started_at, pending, channel, chat, pages) \
                 VALUES ($1, $2, $3, $4, NULL, '', 0, $5, $6, '', NULL, NULL, '[]') \
                 ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, run_id = excluded.run_id, \
                 last_event_id = excluded.last_event_id, stream_message = excluded.stream_message, \
                 streamed = excluded.streamed, delivered = excluded.delivered, deadline = excluded.deadline, \
                 started_at = excluded.started_at, pending = excluded.pending, \
                 channel = excluded.channel, chat = excluded.chat, pages = excluded.pages",
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
        let inserted = with_pool!(self, |pool| {
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
        with_pool!(self, |pool| {
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
        with_pool!(self, |pool| {
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
        with_pool!(self, |pool| {
            sqlx::query(concat!("SELECT ", run_cols!(), " FROM runs"))
                .fetch_all(pool)
                .await?
                .iter()
                .map(run_from_row)
                .collect()
        })
    }

    pub async fn finish_run(&self, key: &str) -> Result<()> {
        with_pool!(self, |pool| {
            sqlx::query("DELETE FROM runs WHERE routing_key = $1")
                .bind(key)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    // --- approval prompts ---------------------------------------------------------------

    /// Stores a prompt, replacing one with the same id and the one of the same session
    /// (at most one prompt per session).
    pub async fn put_prompt(&self, p: &Prompt) -> Result<()> {
        let (session_id, t) = (p.session_id.to_string(), now());
        let (tool_call_ids, chat, requester) = (
            to_json(&p.tool_call_ids),
            to_json(&p.chat),
            to_json(&p.requester),
        );
        with_pool!(self, |pool| {
            let mut tx = pool.begin().await?;
            // This was `INSERT OR REPLACE`, which on SQLite removes the rows that conflict on
            // any unique constraint — the id and the session — while an `ON CONFLICT` clause
            // names only one: delete both, then insert. On PostgreSQL the session's lock makes
            // concurrent writers of one session take turns, so the second one's delete sees
            // (and removes) the first one's prompt: last writer wins, as before.
            (*tx).lock_until_commit(PROMPT_LOCK, &session_id).await?;
            sqlx::query("DELETE FROM approvals WHERE id = $1 OR session_id = $2")
                .bind(&p.id)
                .bind(&session_id)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO approvals (id, routing_key, session_id, run_id, tool_call_ids, channel, chat, prompt_message, prompt_text, requester, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            )
            .bind(&p.id)
            .bind(&p.routing_key)
            .bind(&session_id)
            .bind(p.run_id.to_string())
            .bind(&tool_call_ids)
            .bind(&p.channel)
            .bind(&chat)
            .bind(&p.prompt_message)
            .bind(&p.prompt_text)
            .bind(&requester)
            .bind(&t)
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Records the posted prompt's message id, unless the prompt was settled meanwhile
    /// (then false: it is not brought back).
    pub async fn set_prompt_message(&self, id: &str, message: &str) -> Result<bool> {
        let n = with_pool!(self, |pool| {
            sqlx::query("UPDATE approvals SET prompt_message = $1 WHERE id = $2")
                .bind(message)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    pub async fn prompt(&self, id: &str) -> Result<Option<Prompt>> {
        with_pool!(self, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                prompt_cols!(),
                " FROM approvals WHERE id = $1"
            ))
            .bind(id)
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(prompt_from_row)
            .transpose()
        })
    }

    pub async fn prompt_of_session(&self, session_id: Uuid) -> Result<Option<Prompt>> {
        with_pool!(self, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                prompt_cols!(),
                " FROM approvals WHERE session_id = $1"
            ))
            .bind(session_id.to_string())
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(prompt_from_row)
            .transpose()
        })
    }

    pub async fn prompts(&self) -> Result<Vec<Prompt>> {
        with_pool!(self, |pool| {
            sqlx::query(concat!("SELECT ", prompt_cols!(), " FROM approvals"))
                .fetch_all(pool)
                .await?
                .iter()
                .map(prompt_from_row)
                .collect()
        })
    }

    /// Removes a prompt; whether it was there (only one caller settles a prompt: of
    /// concurrent deletes of the row, on any instance, one deletes it and the others find
    /// nothing).
    pub async fn take_prompt(&self, id: &str) -> Result<bool> {
        let n = with_pool!(self, |pool| {
            sqlx::query("DELETE FROM approvals WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    // --- notification contexts ----------------------------------------------------------

    pub async fn put_context(
        &self,
        channel: &str,
        target: &str,
        context: &serde_json::Value,
        ttl: Duration,
    ) -> Result<()> {
        let expires = chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or_default();
        let expires = expires.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO contexts (channel, target, context, expires_at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (channel, target) DO UPDATE SET context = excluded.context, \
                 expires_at = excluded.expires_at",
            )
            .bind(channel)
            .bind(target)
            .bind(to_json(context))
            .bind(&expires)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The stored context of a chat if not expired; it is consumed (used once).
    pub async fn take_context(
        &self,
        channel: &str,
        target: &str,
    ) -> Result<Option<serde_json::Value>> {
        let taken = with_pool!(self, |pool| {
            sqlx::query(
                "DELETE FROM contexts WHERE channel = $1 AND target = $2 RETURNING context, expires_at",
            )
            .bind(channel)
            .bind(target)
            .fetch_optional(pool)
            .await?
            .map(|row| -> Result<_> { Ok((row.text("expires_at")?, from_json(&row, "context")?)) })
            .transpose()?
        });
        let Some((expires, context)) = taken else {
            return Ok(None);
        };
        if expires < now() {
            return Ok(None);
        }
        Ok(Some(context))
    }

    // --- pairing and allowed chats ------------------------------------------------------

    pub async fn put_pairing(&self, p: &Pairing) -> Result<()> {
        let t = now();
        with_pool!(self, |pool| {
            sqlx::query("DELETE FROM pairing WHERE expires_at < $1")
                .bind(&t)
                .execute(pool)
                .await?;
            sqlx::query(
                "INSERT INTO pairing (code, channel, peer, chat, expires_at) VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (code) DO UPDATE SET channel = excluded.channel, peer = excluded.peer, \
                 chat = excluded.chat, expires_at = excluded.expires_at",
            )
            .bind(&p.code)
            .bind(&p.channel)
            .bind(to_json(&p.peer))
            .bind(to_json(&p.chat))
            .bind(&p.expires_at)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The pending pairing of a peer on a channel, if any and not expired.
    pub async fn pairing_of(&self, channel: &str, peer_id: &str) -> Result<Option<Pairing>> {
        let pairings: Vec<Pairing> = with_pool!(self, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                pairing_cols!(),
                " FROM pairing WHERE channel = $1 AND expires_at > $2"
            ))
            .bind(channel)
            .bind(now())
            .fetch_all(pool)
            .await?
            .iter()
            .map(pairing_from_row)
            .collect::<Result<_>>()?
        });
        Ok(pairings.into_iter().find(|p| p.peer.id == peer_id))
    }

    /// Approves a pairing code: the chat is allowed from now on. The pairing, if the code
    /// was valid and not expired.
    pub async fn approve_pairing(&self, channel: &str, code: &str) -> Result<Option<Pairing>> {
        let code = code.trim().to_ascii_uppercase();
        let taken = with_pool!(self, |pool| {
            sqlx::query(concat!(
                "DELETE FROM pairing WHERE channel = $1 AND code = $2 RETURNING ",
                pairing_cols!()
            ))
            .bind(channel)
            .bind(&code)
            .fetch_optional(pool)
            .await?
            .as_ref()
            .map(pairing_from_row)
            .transpose()?
        });
        let Some(p) = taken else { return Ok(None) };
        if p.expires_at < now() {
            return Ok(None);
        }
        self.allow(channel, &p.chat.id).await?;
        Ok(Some(p))
    }

    pub async fn allow(&self, channel: &str, chat_id: &str) -> Result<()> {
        let t = now();
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO allowed (channel, chat_id, added_at) VALUES ($1, $2, $3) \
                 ON CONFLICT DO NOTHING",
            )
            .bind(channel)
            .bind(chat_id)
            .bind(&t)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    pub async fn is_allowed(&self, channel: &str, chat_id: &str) -> Result<bool> {
        let found = with_pool!(self, |pool| {
            sqlx::query("SELECT 1 AS x FROM allowed WHERE channel = $1 AND chat_id = $2")
                .bind(channel)
                .bind(chat_id)
                .fetch_optional(pool)
                .await?
                .is_some()
        });
        Ok(found)
    }

    // --- kv -----------------------------------------------------------------------------

    pub async fn kv_get(&self, key: &str) -> Result<Option<String>> {
        with_pool!(self, |pool| {
            sqlx::query("SELECT value FROM kv WHERE key = $1")
                .bind(key)
                .fetch_optional(pool)
                .await?
                .map(|r| r.text("value"))
                .transpose()
        })
    }

    pub async fn kv_set(&self, key: &str, value: &str) -> Result<()> {
        with_pool!(self, |pool| {
            sqlx::query(
                "INSERT INTO kv (key, value) VALUES ($1, $2) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            )
            .bind(key)
            .bind(value)
            .execute(pool)
            .await?;
        });
        Ok(())
    }
}

/// A channel's state, namespaced in the gateway store's key-value table.
pub struct NamespacedState {
    pub store: GatewayStore,
    pub prefix: String,
}

#[async_trait]
impl ChannelState for NamespacedState {
    async fn get(&self, key: &str) -> Option<String> {
        self.store
            .kv_get(&format!("{}:{key}", self.prefix))
            .await
            .ok()
            .flatten()
    }

    async fn set(&self, key: &str, value: &str) -> std::result::Result<(), String> {
        self.store
            .kv_set(&format!("{}:{key}", self.prefix), value)
            .await
            .map_err(|e| e.to_string())
    }
}

fn route_from_row(r: &impl Cols) -> Result<Route> {
    Ok(Route {
        routing_key: r.text("routing_key")?,
        session_id: uuid(r, "session_id")?,
        channel: r.text("channel")?,
        chat: from_json(r, "chat")?,
        requester: from_json(r, "requester")?,
        bound: r.int("bound")? != 0,
    })
}

fn queued_from_row(r: &impl Cols) -> Result<Queued> {
    let context = r.opt_text("context")?;
    Ok(Queued {
        id: r.int("id")?,
        routing_key: r.text("routing_key")?,
        channel: r.text("channel")?,
        peer: from_json(r, "peer")?,
        chat: from_json(r, "chat")?,
        text: r.text("text")?,
        context: context.and_then(|c| serde_json::from_str(&c).ok()),
    })
}

fn run_from_row(r: &impl Cols) -> Result<FollowedRun> {
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
    })
}

fn prompt_from_row(r: &impl Cols) -> Result<Prompt> {
    Ok(Prompt {
        id: r.text("id")?,
        routing_key: r.text("routing_key")?,
        session_id: uuid(r, "session_id")?,
        run_id: uuid(r, "run_id")?,
        tool_call_ids: from_json(r, "tool_call_ids")?,
        channel: r.text("channel")?,
        chat: from_json(r, "chat")?,
        prompt_message: r.text("prompt_message")?,
        prompt_text: r.text("prompt_text")?,
        requester: from_json(r, "requester")?,
    })
}

fn pairing_from_row(r: &impl Cols) -> Result<Pairing> {
    Ok(Pairing {
        code: r.text("code")?,
        channel: r.text("channel")?,
        peer: from_json(r, "peer")?,
        chat: from_json(r, "chat")?,
        expires_at: r.text("expires_at")?,
    })
}
