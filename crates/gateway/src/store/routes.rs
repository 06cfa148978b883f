//! Routes: which session a chat (routing key) talks to.

use std::collections::HashMap;

use uuid::Uuid;

use super::*;

impl GatewayStore {
    pub async fn route(&self, key: &str) -> Result<Option<Route>> {
        with_pool!(&self.db, |pool| {
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
        with_pool!(&self.db, |pool| {
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
        with_pool!(&self.db, |pool| {
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
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "INSERT INTO routes (routing_key, session_id, channel, chat, requester, bound, created_at, updated_at, requesters) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8) \
                 ON CONFLICT (routing_key) DO UPDATE SET session_id = excluded.session_id, \
                 channel = excluded.channel, chat = excluded.chat, requester = excluded.requester, \
                 bound = excluded.bound, updated_at = excluded.updated_at, requesters = excluded.requesters",
            )
            .bind(&r.routing_key)
            .bind(r.session_id.to_string())
            .bind(&r.channel)
            .bind(to_json(&r.chat))
            .bind(to_json(&r.requester))
            // An integer on both back-ends (PostgreSQL would not take a bool for BIGINT).
            .bind(i64::from(r.bound))
            .bind(&t)
            .bind(to_json(&r.requesters))
            .execute(pool)
            .await?;
            // Remembered after `/new` replaces it: the chat's `/search` looks here.
            sqlx::query(
                "INSERT INTO chat_sessions (routing_key, session_id, since) VALUES ($1, $2, $3) \
                 ON CONFLICT (routing_key, session_id) DO NOTHING",
            )
            .bind(&r.routing_key)
            .bind(r.session_id.to_string())
            .bind(&t)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// The sessions `key` has talked to, newest first, at most `limit`.
    pub async fn chat_sessions(&self, key: &str, limit: u32) -> Result<Vec<Uuid>> {
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "SELECT session_id FROM chat_sessions WHERE routing_key = $1 \
                 ORDER BY since DESC, session_id LIMIT $2",
            )
            .bind(key)
            .bind(i64::from(limit))
            .fetch_all(pool)
            .await?
            .iter()
            .map(|r| uuid(r, "session_id"))
            .collect()
        })
    }

    /// Removes a route; the next message on it starts a new session. Whether one was.
    pub async fn delete_route(&self, key: &str) -> Result<bool> {
        let n = with_pool!(&self.db, |pool| {
            sqlx::query("DELETE FROM routes WHERE routing_key = $1")
                .bind(key)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }
}

/// A chat, as [`GatewayStore::chat_activity`] knows it: channel, chat id, and the thread
/// (`""` for none).
pub type ChatKey = (String, String, String);

impl GatewayStore {
    /// Notes that `chat` had a message in or out now (an earlier time never replaces a
    /// later one).
    pub async fn touch_chat(&self, channel: &str, chat: &ChatRef) -> Result<()> {
        let t = now();
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "INSERT INTO chat_activity (channel, chat_id, thread, at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (channel, chat_id, thread) DO UPDATE SET at = excluded.at \
                 WHERE excluded.at > chat_activity.at",
            )
            .bind(channel)
            .bind(&chat.id)
            .bind(chat.thread.as_deref().unwrap_or(""))
            .bind(&t)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// When each chat last had a message in or out (see [`GatewayStore::touch_chat`]).
    pub async fn chat_activity(&self) -> Result<HashMap<ChatKey, String>> {
        with_pool!(&self.db, |pool| {
            sqlx::query("SELECT channel, chat_id, thread, at FROM chat_activity")
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| {
                    Ok((
                        (r.text("channel")?, r.text("chat_id")?, r.text("thread")?),
                        r.text("at")?,
                    ))
                })
                .collect()
        })
    }
}

/// The key of `chat` on `channel` in [`GatewayStore::chat_activity`].
pub fn chat_key(channel: &str, chat: &ChatRef) -> ChatKey {
    (
        channel.to_owned(),
        chat.id.clone(),
        chat.thread.clone().unwrap_or_default(),
    )
}

pub(super) fn route_from_row(r: &impl Cols) -> Result<Route> {
    let requester: Peer = from_json(r, "requester")?;
    Ok(Route {
        routing_key: r.text("routing_key")?,
        session_id: uuid(r, "session_id")?,
        channel: r.text("channel")?,
        chat: from_json(r, "chat")?,
        requesters: requesters_from_row(r, &requester)?,
        requester,
        bound: r.int("bound")? != 0,
    })
}
