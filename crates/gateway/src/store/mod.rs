//! The gateway's durable state: routes, the inbox of messages waiting for the agent, button
//! presses, the run each route follows with how far its reply got, approval prompts,
//! notification contexts, pairing, allowed chats, channel state, the inbound messages
//! already taken, when each chat last had a message in or out, and the delivery ledger
//! (what became of each inbound message).
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
//!   handed the same update, exactly one is told it is new. [`GatewayStore::take_inbound`]
//!   makes the same insert in the transaction that queues the message (and takes its chat's
//!   context): exactly one instance queues it, and a crash never leaves the mark without the
//!   message.
//! - Taking something is one `DELETE`: exactly one caller of [`GatewayStore::take_prompt`],
//!   [`GatewayStore::take_context`] or [`GatewayStore::approve_pairing`] gets the row.
//! - [`GatewayStore::enqueue`] and [`GatewayStore::take_inbound`] serialize the inserts of
//!   one routing key, so a route's inbox ids commit in id order and
//!   [`GatewayStore::dequeue`] (`id <= upto`) never removes a message its reader has not
//!   seen.
//! - [`GatewayStore::put_prompt`] serializes the writers of one session: the last one's
//!   prompt is the one left, as with SQLite's `INSERT OR REPLACE`.
//! - Migrations are serialized by an advisory lock: instances starting at once on a fresh
//!   database each find the work done or do it, once.

use std::path::Path;

use async_trait::async_trait;
use serde::{Deserialize, Serialize, de::DeserializeOwned};
use sqlx::{PgConnection, SqliteConnection};
use uuid::Uuid;

use crate::channel::{ChannelState, ChatRef, Peer};

pub use switchboard_db::StoreError;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

use switchboard_db::{Cols, Db, now, with_pool};

fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

/// The `requesters` column: a JSON array of peer ids; NULL (a row from before the column)
/// is the `requester` alone.
fn requesters_from_row(row: &impl Cols, requester: &Peer) -> Result<Vec<String>> {
    match row.opt_text("requesters")? {
        Some(text) => {
            serde_json::from_str(&text).map_err(|e| StoreError::Corrupt(format!("requesters: {e}")))
        }
        None => Ok(vec![requester.id.clone()]),
    }
}

fn from_json<T: DeserializeOwned>(row: &impl Cols, col: &str) -> Result<T> {
    let s = row.text(col)?;
    serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

fn uuid(row: &impl Cols, col: &str) -> Result<Uuid> {
    let s = row.text(col)?;
    Uuid::parse_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

/// What [`GatewayStore::claim_send`] found for an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendClaim {
    Mine,
    Sent(String),
    Busy,
}

/// A routing key's session and where its replies go.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub routing_key: String,
    pub session_id: Uuid,
    pub channel: String,
    pub chat: ChatRef,
    /// The last sender of the batch (who a DM prompt and `/undo` belong to).
    pub requester: Peer,
    /// The ids of every sender of the batch: each may answer its prompts.
    pub requesters: Vec<String>,
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
    /// Files that came with it, fetched from the platform when the batch is sent.
    pub attachments: Vec<crate::channel::Attachment>,
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
    /// What the run has posted (reply messages, files, prompts, notices), for the ledger.
    pub outbound: Vec<switchboard_protocol::gateway::Outbound>,
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
    /// The ids of every sender of the batch the run answers (with `requester`).
    pub requesters: Vec<String>,
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

// The columns each record is read from, named rather than `SELECT *`: a cached prepared
// statement's result columns must not change under it. On SQLite, a connection that loaded
// the schema before a migration added columns prepares `SELECT *` with the old column count,
// and sqlx then indexes past the end of the row once SQLite re-prepares it; on PostgreSQL,
// an instance still running while another migrates would get "cached plan must not change
// result type".
macro_rules! route_cols {
    () => {
        "routing_key, session_id, channel, chat, requester, bound, requesters"
    };
}
macro_rules! queued_cols {
    () => {
        "id, routing_key, channel, peer, chat, text, context, attachments"
    };
}
macro_rules! run_cols {
    () => {
        "routing_key, session_id, run_id, last_event_id, stream_message, streamed, delivered, deadline, pending, pages, outbound"
    };
}
macro_rules! prompt_cols {
    () => {
        "id, routing_key, session_id, run_id, tool_call_ids, channel, chat, prompt_message, prompt_text, requester, requesters"
    };
}
macro_rules! pairing_cols {
    () => {
        "code, channel, peer, chat, expires_at"
    };
}

// The store's methods, one file per table (or group of tables); declared after the column
// macros above, which they use.
mod inbox;
mod ledger;
pub use ledger::{Noted, Retried};
mod pairing;
mod prompts;
mod routes;
pub use routes::{ChatKey, chat_key};
mod runs;

/// The gateway's tables: the same tables and columns on both back-ends; on PostgreSQL in
/// the schema `gateway` (the engine's store may use the same database), migrated under an
/// advisory lock of its own ("SWBGWMIG").
const MIGRATIONS: switchboard_db::Migrations = switchboard_db::Migrations {
    owner: "gateway",
    sqlite: &[
        (1, include_str!("../../migrations/sqlite/0001_gateway.sql")),
        (
            2,
            include_str!("../../migrations/sqlite/0002_pending_and_seen.sql"),
        ),
        (
            3,
            include_str!("../../migrations/sqlite/0003_reply_pages.sql"),
        ),
        (
            4,
            include_str!("../../migrations/sqlite/0004_inbox_attachments.sql"),
        ),
        (
            5,
            include_str!("../../migrations/sqlite/0005_chat_activity.sql"),
        ),
        (
            6,
            include_str!("../../migrations/sqlite/0006_requesters.sql"),
        ),
        (7, include_str!("../../migrations/sqlite/0007_kv_age.sql")),
        (
            8,
            include_str!("../../migrations/sqlite/0008_chat_sessions.sql"),
        ),
        (9, include_str!("../../migrations/sqlite/0009_ledger.sql")),
    ],
    postgres: &[
        (
            1,
            include_str!("../../migrations/postgres/0001_gateway.sql"),
        ),
        (
            2,
            include_str!("../../migrations/postgres/0002_pending_and_seen.sql"),
        ),
        (
            3,
            include_str!("../../migrations/postgres/0003_reply_pages.sql"),
        ),
        (
            4,
            include_str!("../../migrations/postgres/0004_inbox_attachments.sql"),
        ),
        (
            5,
            include_str!("../../migrations/postgres/0005_chat_activity.sql"),
        ),
        (
            6,
            include_str!("../../migrations/postgres/0006_requesters.sql"),
        ),
        (7, include_str!("../../migrations/postgres/0007_kv_age.sql")),
        (
            8,
            include_str!("../../migrations/postgres/0008_chat_sessions.sql"),
        ),
        (9, include_str!("../../migrations/postgres/0009_ledger.sql")),
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
        Ok(Self {
            db: Db::sqlite(path, 4, &MIGRATIONS).await?,
        })
    }

    /// Connects to a PostgreSQL database (`postgres://user:password@host:port/database`, the
    /// URL forms sqlx accepts) and applies pending migrations, creating the schema `gateway`
    /// if missing. The database must exist. Several instances may open one database at once.
    pub async fn open_postgres(url: &str) -> Result<Self> {
        Ok(Self {
            db: Db::postgres(url, 8, &MIGRATIONS).await?,
        })
    }

    /// The gateway store beside the engine's: the schema `gateway` of the engine's PostgreSQL
    /// database (`store_url`), shared by every instance, else `gateway.db` in `data_dir`.
    pub async fn open_beside(store_url: &str, data_dir: &Path) -> Result<Self> {
        let conns = if switchboard_db::is_postgres_url(store_url) {
            8
        } else {
            4
        };
        Ok(Self {
            db: Db::beside(store_url, &data_dir.join("gateway.db"), conns, &MIGRATIONS).await?,
        })
    }

    /// Which back-end this store is on: `"sqlite"` or `"postgres"`.
    pub fn kind(&self) -> &'static str {
        self.db.kind()
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

    async fn try_get(&self, key: &str) -> std::result::Result<Option<String>, String> {
        self.store
            .kv_get(&format!("{}:{key}", self.prefix))
            .await
            .map_err(|e| e.to_string())
    }
}
