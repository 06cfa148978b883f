//! The gateway's durable state, in its own SQLite file (`gateway.db`): routes, the inbox of
//! messages waiting for the agent, button presses, the run each route follows with how far
//! its reply got, approval prompts, notification contexts, pairing, channel state.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Serialize, de::DeserializeOwned};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow};
use sqlx::{Row, SqlitePool};
use uuid::Uuid;

use crate::channel::{ButtonPress, ChannelState, ChatRef, Peer};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("gateway store: {0}")]
    Db(#[from] sqlx::Error),
    #[error("gateway store: corrupt row: {0}")]
    Corrupt(String),
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn to_json<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "null".into())
}

fn from_json<T: DeserializeOwned>(row: &SqliteRow, col: &str) -> Result<T> {
    let s: String = row.try_get(col)?;
    serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(format!("{col}: {e}")))
}

fn uuid(row: &SqliteRow, col: &str) -> Result<Uuid> {
    let s: String = row.try_get(col)?;
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
    /// Reply text received but not yet shown.
    pub pending: String,
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
    pool: SqlitePool,
}

const MIGRATIONS: &[(i64, &str)] = &[
    (1, include_str!("../migrations/0001_gateway.sql")),
    (2, include_str!("../migrations/0002_pending_and_seen.sql")),
];

impl GatewayStore {
    /// Opens (creating) the database and applies pending migrations.
    pub async fn open(path: &Path) -> Result<Self> {
        let opts = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await?;
        sqlx::raw_sql(
            "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)",
        )
        .execute(&pool)
        .await?;
        let current: i64 =
            sqlx::query("SELECT COALESCE(MAX(version), 0) AS v FROM schema_migrations")
                .fetch_one(&pool)
                .await?
                .try_get("v")?;
        for (version, sql) in MIGRATIONS.iter().filter(|(v, _)| *v > current) {
            let mut tx = pool.begin().await?;
            sqlx::raw_sql(sql).execute(&mut *tx).await?;
            sqlx::query("INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)")
                .bind(version)
                .bind(now())
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        }
        Ok(Self { pool })
    }

    // --- routes -------------------------------------------------------------------------

    pub async fn route(&self, key: &str) -> Result<Option<Route>> {
        sqlx::query("SELECT * FROM routes WHERE routing_key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(route_from_row)
            .transpose()
    }

    pub async fn route_of_session(&self, session_id: Uuid) -> Result<Option<Route>> {
        sqlx::query("SELECT * FROM routes WHERE session_id = ? ORDER BY updated_at DESC LIMIT 1")
            .bind(session_id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(route_from_row)
            .transpose()
    }

    pub async fn routes(&self) -> Result<Vec<Route>> {
        sqlx::query("SELECT * FROM routes ORDER BY updated_at DESC")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(route_from_row)
            .collect()
    }

    /// Creates or updates a route (the session, and the latest reply target).
    pub async fn put_route(&self, r: &Route) -> Result<()> {
        let t = now();
        sqlx::query(
            "INSERT INTO routes (routing_key, session_id, channel, chat, requester, bound, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) \
             ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, \
             channel = excluded.channel, chat = excluded.chat, requester = excluded.requester, \
             bound = excluded.bound, updated_at = excluded.updated_at",
        )
        .bind(&r.routing_key)
        .bind(r.session_id.to_string())
        .bind(&r.channel)
        .bind(to_json(&r.chat))
        .bind(to_json(&r.requester))
        .bind(r.bound)
        .bind(t)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Removes a route; the next message on it starts a new session. Whether one was.
    pub async fn delete_route(&self, key: &str) -> Result<bool> {
        let r = sqlx::query("DELETE FROM routes WHERE routing_key = ?")
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    // --- inbox --------------------------------------------------------------------------

    pub async fn enqueue(&self, q: &Queued) -> Result<i64> {
        let r = sqlx::query(
            "INSERT INTO inbox (routing_key, channel, peer, chat, text, context, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&q.routing_key)
        .bind(&q.channel)
        .bind(to_json(&q.peer))
        .bind(to_json(&q.chat))
        .bind(&q.text)
        .bind(q.context.as_ref().map(to_json))
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(r.last_insert_rowid())
    }

    /// Everything queued for a route, oldest first.
    pub async fn queued(&self, key: &str) -> Result<Vec<Queued>> {
        sqlx::query("SELECT * FROM inbox WHERE routing_key = ? ORDER BY id")
            .bind(key)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(queued_from_row)
            .collect()
    }

    /// Routing keys with queued messages.
    pub async fn queued_routes(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT DISTINCT routing_key FROM inbox")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("routing_key").map_err(Into::into))
            .collect()
    }

    /// Removes delivered messages (those with ids up to and including `upto`).
    pub async fn dequeue(&self, key: &str, upto: i64) -> Result<()> {
        sqlx::query("DELETE FROM inbox WHERE routing_key = ? AND id <= ?")
            .bind(key)
            .bind(upto)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    // --- presses ------------------------------------------------------------------------

    pub async fn push_press(&self, p: &ButtonPress) -> Result<i64> {
        let r = sqlx::query("INSERT INTO presses (press, created_at) VALUES (?, ?)")
            .bind(to_json(p))
            .bind(now())
            .execute(&self.pool)
            .await?;
        Ok(r.last_insert_rowid())
    }

    pub async fn presses(&self) -> Result<Vec<(i64, ButtonPress)>> {
        let rows = sqlx::query("SELECT id, press FROM presses ORDER BY id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|r| Ok((r.try_get("id")?, from_json(r, "press")?)))
            .collect()
    }

    pub async fn drop_press(&self, id: i64) -> Result<()> {
        sqlx::query("DELETE FROM presses WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    // --- followed runs ------------------------------------------------------------------

    pub async fn put_run(&self, r: &FollowedRun) -> Result<()> {
        sqlx::query(
            "INSERT INTO runs (routing_key, session_id, run_id, last_event_id, stream_message, streamed, delivered, deadline, started_at, pending) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, run_id = excluded.run_id, \
             last_event_id = excluded.last_event_id, stream_message = excluded.stream_message, \
             streamed = excluded.streamed, delivered = excluded.delivered, deadline = excluded.deadline, \
             pending = excluded.pending",
        )
        .bind(&r.routing_key)
        .bind(r.session_id.to_string())
        .bind(r.run_id.to_string())
        .bind(i64::try_from(r.last_event_id).unwrap_or(i64::MAX))
        .bind(&r.stream_message)
        .bind(&r.streamed)
        .bind(i64::try_from(r.delivered).unwrap_or(i64::MAX))
        .bind(&r.deadline)
        .bind(now())
        .bind(&r.pending)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Starts following a run and removes the messages that started it, in one
    /// transaction: a crash leaves either both or neither.
    pub async fn start_run(&self, r: &FollowedRun, upto: i64) -> Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query(
            "INSERT OR REPLACE INTO runs (routing_key, session_id, run_id, last_event_id, stream_message, streamed, delivered, deadline, started_at, pending) \
             VALUES (?, ?, ?, ?, NULL, '', 0, ?, ?, '')",
        )
        .bind(&r.routing_key)
        .bind(r.session_id.to_string())
        .bind(r.run_id.to_string())
        .bind(i64::try_from(r.last_event_id).unwrap_or(i64::MAX))
        .bind(&r.deadline)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        sqlx::query("DELETE FROM inbox WHERE routing_key = ? AND id <= ?")
            .bind(&r.routing_key)
            .bind(upto)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Records an inbound message; false if it was seen before (a redelivery or a replay).
    /// Entries older than two days are forgotten.
    pub async fn first_seen(&self, channel: &str, chat_id: &str, message_id: &str) -> Result<bool> {
        let r = sqlx::query(
            "INSERT OR IGNORE INTO seen (channel, chat_id, message_id, seen_at) VALUES (?, ?, ?, ?)",
        )
        .bind(channel)
        .bind(chat_id)
        .bind(message_id)
        .bind(now())
        .execute(&self.pool)
        .await?;
        let cutoff = (chrono::Utc::now() - chrono::Duration::days(2))
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        sqlx::query("DELETE FROM seen WHERE seen_at < ?")
            .bind(cutoff)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() == 1)
    }

    /// Undoes [`GatewayStore::first_seen`] for a message that could not be stored.
    pub async fn forget_seen(&self, channel: &str, chat_id: &str, message_id: &str) -> Result<()> {
        sqlx::query("DELETE FROM seen WHERE channel = ? AND chat_id = ? AND message_id = ?")
            .bind(channel)
            .bind(chat_id)
            .bind(message_id)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn run(&self, key: &str) -> Result<Option<FollowedRun>> {
        sqlx::query("SELECT * FROM runs WHERE routing_key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(run_from_row)
            .transpose()
    }

    pub async fn runs(&self) -> Result<Vec<FollowedRun>> {
        sqlx::query("SELECT * FROM runs")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(run_from_row)
            .collect()
    }

    pub async fn finish_run(&self, key: &str) -> Result<()> {
        sqlx::query("DELETE FROM runs WHERE routing_key = ?")
            .bind(key)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    // --- approval prompts ---------------------------------------------------------------

    pub async fn put_prompt(&self, p: &Prompt) -> Result<()> {
        sqlx::query(
            "INSERT OR REPLACE INTO approvals (id, routing_key, session_id, run_id, tool_call_ids, channel, chat, prompt_message, prompt_text, requester, created_at) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&p.id)
        .bind(&p.routing_key)
        .bind(p.session_id.to_string())
        .bind(p.run_id.to_string())
        .bind(to_json(&p.tool_call_ids))
        .bind(&p.channel)
        .bind(to_json(&p.chat))
        .bind(&p.prompt_message)
        .bind(&p.prompt_text)
        .bind(to_json(&p.requester))
        .bind(now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Records the posted prompt's message id, unless the prompt was settled meanwhile
    /// (then false: it is not brought back).
    pub async fn set_prompt_message(&self, id: &str, message: &str) -> Result<bool> {
        let r = sqlx::query("UPDATE approvals SET prompt_message = ? WHERE id = ?")
            .bind(message)
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
    }

    pub async fn prompt(&self, id: &str) -> Result<Option<Prompt>> {
        sqlx::query("SELECT * FROM approvals WHERE id = ?")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(prompt_from_row)
            .transpose()
    }

    pub async fn prompt_of_session(&self, session_id: Uuid) -> Result<Option<Prompt>> {
        sqlx::query("SELECT * FROM approvals WHERE session_id = ?")
            .bind(session_id.to_string())
            .fetch_optional(&self.pool)
            .await?
            .as_ref()
            .map(prompt_from_row)
            .transpose()
    }

    pub async fn prompts(&self) -> Result<Vec<Prompt>> {
        sqlx::query("SELECT * FROM approvals")
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(prompt_from_row)
            .collect()
    }

    /// Removes a prompt; whether it was there (only one caller settles a prompt).
    pub async fn take_prompt(&self, id: &str) -> Result<bool> {
        let r = sqlx::query("DELETE FROM approvals WHERE id = ?")
            .bind(id)
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected() > 0)
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
        sqlx::query("INSERT OR REPLACE INTO contexts (channel, target, context, expires_at) VALUES (?, ?, ?, ?)")
            .bind(channel)
            .bind(target)
            .bind(to_json(context))
            .bind(expires.to_rfc3339_opts(chrono::SecondsFormat::Micros, true))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The stored context of a chat if not expired; it is consumed (used once).
    pub async fn take_context(
        &self,
        channel: &str,
        target: &str,
    ) -> Result<Option<serde_json::Value>> {
        let row = sqlx::query(
            "DELETE FROM contexts WHERE channel = ? AND target = ? RETURNING context, expires_at",
        )
        .bind(channel)
        .bind(target)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else { return Ok(None) };
        let expires: String = row.try_get("expires_at")?;
        if expires < now() {
            return Ok(None);
        }
        Ok(Some(from_json(&row, "context")?))
    }

    // --- pairing and allowed chats ------------------------------------------------------

    pub async fn put_pairing(&self, p: &Pairing) -> Result<()> {
        sqlx::query("DELETE FROM pairing WHERE expires_at < ?")
            .bind(now())
            .execute(&self.pool)
            .await?;
        sqlx::query("INSERT OR REPLACE INTO pairing (code, channel, peer, chat, expires_at) VALUES (?, ?, ?, ?, ?)")
            .bind(&p.code)
            .bind(&p.channel)
            .bind(to_json(&p.peer))
            .bind(to_json(&p.chat))
            .bind(&p.expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// The pending pairing of a peer on a channel, if any and not expired.
    pub async fn pairing_of(&self, channel: &str, peer_id: &str) -> Result<Option<Pairing>> {
        let rows = sqlx::query("SELECT * FROM pairing WHERE channel = ? AND expires_at > ?")
            .bind(channel)
            .bind(now())
            .fetch_all(&self.pool)
            .await?;
        for r in &rows {
            let p = pairing_from_row(r)?;
            if p.peer.id == peer_id {
                return Ok(Some(p));
            }
        }
        Ok(None)
    }

    /// Approves a pairing code: the chat is allowed from now on. The pairing, if the code
    /// was valid and not expired.
    pub async fn approve_pairing(&self, channel: &str, code: &str) -> Result<Option<Pairing>> {
        let row = sqlx::query("DELETE FROM pairing WHERE channel = ? AND code = ? RETURNING *")
            .bind(channel)
            .bind(code.trim().to_ascii_uppercase())
            .fetch_optional(&self.pool)
            .await?;
        let Some(row) = row else { return Ok(None) };
        let p = pairing_from_row(&row)?;
        if p.expires_at < now() {
            return Ok(None);
        }
        self.allow(channel, &p.chat.id).await?;
        Ok(Some(p))
    }

    pub async fn allow(&self, channel: &str, chat_id: &str) -> Result<()> {
        sqlx::query("INSERT OR IGNORE INTO allowed (channel, chat_id, added_at) VALUES (?, ?, ?)")
            .bind(channel)
            .bind(chat_id)
            .bind(now())
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    pub async fn is_allowed(&self, channel: &str, chat_id: &str) -> Result<bool> {
        let row = sqlx::query("SELECT 1 AS x FROM allowed WHERE channel = ? AND chat_id = ?")
            .bind(channel)
            .bind(chat_id)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.is_some())
    }

    // --- kv -----------------------------------------------------------------------------

    pub async fn kv_get(&self, key: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT value FROM kv WHERE key = ?")
            .bind(key)
            .fetch_optional(&self.pool)
            .await?;
        Ok(row.map(|r| r.try_get("value")).transpose()?)
    }

    pub async fn kv_set(&self, key: &str, value: &str) -> Result<()> {
        sqlx::query("INSERT OR REPLACE INTO kv (key, value) VALUES (?, ?)")
            .bind(key)
            .bind(value)
            .execute(&self.pool)
            .await?;
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

fn route_from_row(r: &SqliteRow) -> Result<Route> {
    Ok(Route {
        routing_key: r.try_get("routing_key")?,
        session_id: uuid(r, "session_id")?,
        channel: r.try_get("channel")?,
        chat: from_json(r, "chat")?,
        requester: from_json(r, "requester")?,
        bound: r.try_get::<i64, _>("bound")? != 0,
    })
}

fn queued_from_row(r: &SqliteRow) -> Result<Queued> {
    let context: Option<String> = r.try_get("context")?;
    Ok(Queued {
        id: r.try_get("id")?,
        routing_key: r.try_get("routing_key")?,
        channel: r.try_get("channel")?,
        peer: from_json(r, "peer")?,
        chat: from_json(r, "chat")?,
        text: r.try_get("text")?,
        context: context.and_then(|c| serde_json::from_str(&c).ok()),
    })
}

fn run_from_row(r: &SqliteRow) -> Result<FollowedRun> {
    Ok(FollowedRun {
        routing_key: r.try_get("routing_key")?,
        session_id: uuid(r, "session_id")?,
        run_id: uuid(r, "run_id")?,
        last_event_id: u64::try_from(r.try_get::<i64, _>("last_event_id")?).unwrap_or(0),
        stream_message: r.try_get("stream_message")?,
        streamed: r.try_get("streamed")?,
        delivered: usize::try_from(r.try_get::<i64, _>("delivered")?).unwrap_or(0),
        deadline: r.try_get("deadline")?,
        pending: r.try_get("pending")?,
    })
}

fn prompt_from_row(r: &SqliteRow) -> Result<Prompt> {
    Ok(Prompt {
        id: r.try_get("id")?,
        routing_key: r.try_get("routing_key")?,
        session_id: uuid(r, "session_id")?,
        run_id: uuid(r, "run_id")?,
        tool_call_ids: from_json(r, "tool_call_ids")?,
        channel: r.try_get("channel")?,
        chat: from_json(r, "chat")?,
        prompt_message: r.try_get("prompt_message")?,
        prompt_text: r.try_get("prompt_text")?,
        requester: from_json(r, "requester")?,
    })
}

fn pairing_from_row(r: &SqliteRow) -> Result<Pairing> {
    Ok(Pairing {
        code: r.try_get("code")?,
        channel: r.try_get("channel")?,
        peer: from_json(r, "peer")?,
        chat: from_json(r, "chat")?,
        expires_at: r.try_get("expires_at")?,
    })
}
