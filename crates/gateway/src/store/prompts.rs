//! Approval prompts and notification contexts.

use std::time::Duration;

use uuid::Uuid;

use super::*;

impl GatewayStore {
    /// Stores a prompt, replacing one with the same id and the one of the same session
    /// (at most one prompt per session).
    pub async fn put_prompt(&self, p: &Prompt) -> Result<()> {
        let (session_id, t) = (p.session_id.to_string(), now());
        let (tool_call_ids, chat, requester) = (
            to_json(&p.tool_call_ids),
            to_json(&p.chat),
            to_json(&p.requester),
        );
        with_pool!(&self.db, |pool| {
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
                "INSERT INTO approvals (id, routing_key, session_id, run_id, tool_call_ids, channel, chat, prompt_message, prompt_text, requester, created_at, requesters) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
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
            .bind(to_json(&p.requesters))
            .execute(&mut *tx)
            .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Records the posted prompt's message id, unless the prompt was settled meanwhile
    /// (then false: it is not brought back).
    pub async fn set_prompt_message(&self, id: &str, message: &str) -> Result<bool> {
        let n = with_pool!(&self.db, |pool| {
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
        with_pool!(&self.db, |pool| {
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
        with_pool!(&self.db, |pool| {
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

    /// The prompts waiting in one chat of a channel (in any of its threads), oldest first:
    /// what an answer in words or by reaction there may be for.
    pub async fn prompts_in_chat(&self, channel: &str, chat_id: &str) -> Result<Vec<Prompt>> {
        // The chat is stored as JSON: the channel's prompts are read (a handful at most)
        // and matched here.
        let all: Vec<Prompt> = with_pool!(&self.db, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                prompt_cols!(),
                " FROM approvals WHERE channel = $1 ORDER BY created_at"
            ))
            .bind(channel)
            .fetch_all(pool)
            .await?
            .iter()
            .map(prompt_from_row)
            .collect::<Result<Vec<_>>>()?
        });
        Ok(all.into_iter().filter(|p| p.chat.id == chat_id).collect())
    }

    pub async fn prompts(&self) -> Result<Vec<Prompt>> {
        with_pool!(&self.db, |pool| {
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
        let n = with_pool!(&self.db, |pool| {
            sqlx::query("DELETE FROM approvals WHERE id = $1")
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    pub async fn put_context(
        &self,
        channel: &str,
        target: &str,
        context: &serde_json::Value,
        ttl: Duration,
    ) -> Result<()> {
        let expires = chrono::Utc::now() + chrono::Duration::from_std(ttl).unwrap_or_default();
        let expires = expires.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        with_pool!(&self.db, |pool| {
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
        let taken = with_pool!(&self.db, |pool| {
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
}

pub(super) fn prompt_from_row(r: &impl Cols) -> Result<Prompt> {
    let requester: Peer = from_json(r, "requester")?;
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
        requesters: requesters_from_row(r, &requester)?,
        requester,
    })
}
