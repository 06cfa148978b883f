//! Pairing, allowed chats, and the key-value table channels keep their state in.

use super::*;

impl GatewayStore {
    pub async fn put_pairing(&self, p: &Pairing) -> Result<()> {
        let t = now();
        with_pool!(&self.db, |pool| {
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
        let pairings: Vec<Pairing> = with_pool!(&self.db, |pool| {
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

    /// The pending pairing requests that have not expired, the oldest first.
    pub async fn pairings(&self) -> Result<Vec<Pairing>> {
        with_pool!(&self.db, |pool| {
            sqlx::query(concat!(
                "SELECT ",
                pairing_cols!(),
                " FROM pairing WHERE expires_at > $1 ORDER BY expires_at, code"
            ))
            .bind(now())
            .fetch_all(pool)
            .await?
            .iter()
            .map(pairing_from_row)
            .collect()
        })
    }

    /// Refuses a pairing code: the request is deleted (the chat stays unknown; writing
    /// again asks anew). The pairing, if the code was valid and not expired.
    pub async fn refuse_pairing(&self, channel: &str, code: &str) -> Result<Option<Pairing>> {
        let code = code.trim().to_ascii_uppercase();
        let taken = with_pool!(&self.db, |pool| {
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
        Ok(taken.filter(|p| p.expires_at > now()))
    }

    /// Approves a pairing code: the chat is allowed from now on. The pairing, if the code
    /// was valid and not expired.
    pub async fn approve_pairing(&self, channel: &str, code: &str) -> Result<Option<Pairing>> {
        let code = code.trim().to_ascii_uppercase();
        let taken = with_pool!(&self.db, |pool| {
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
        with_pool!(&self.db, |pool| {
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
        let found = with_pool!(&self.db, |pool| {
            sqlx::query("SELECT 1 AS x FROM allowed WHERE channel = $1 AND chat_id = $2")
                .bind(channel)
                .bind(chat_id)
                .fetch_optional(pool)
                .await?
                .is_some()
        });
        Ok(found)
    }

    /// Claims the outbound send of idempotency key `key` for this request: `Mine` (send it,
    /// then [`Self::send_done`] or [`Self::send_failed`]), `Sent` (sent before: its message
    /// id), or `Busy` (another request is sending it). A claim older than a minute whose
    /// request never finished (a crash mid-send) may be taken again.
    pub async fn claim_send(&self, key: &str) -> Result<SendClaim> {
        let kv_key = format!("send:{key}");
        let now = chrono::Utc::now();
        let pending = format!("pending:{}", switchboard_db::text_time(now));
        let stale = format!(
            "pending:{}",
            switchboard_db::text_time(now - chrono::Duration::seconds(60))
        );
        self.prune_kv().await?;
        let claimed = with_pool!(&self.db, |pool| {
            sqlx::query(
                "INSERT INTO kv (key, value, updated_at) VALUES ($1, $2, $4) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at \
                 WHERE kv.value = '' OR (kv.value LIKE 'pending:%' AND kv.value < $3)",
            )
            .bind(&kv_key)
            .bind(&pending)
            .bind(&stale)
            .bind(switchboard_db::text_time(now))
            .execute(pool)
            .await?
            .rows_affected()
        });
        if claimed == 1 {
            return Ok(SendClaim::Mine);
        }
        Ok(match self.kv_get(&kv_key).await? {
            Some(v) if v.starts_with("sent:") => SendClaim::Sent(v["sent:".len()..].to_string()),
            _ => SendClaim::Busy,
        })
    }

    /// The claimed send went out as `message_id`: repeats of its key answer that.
    pub async fn send_done(&self, key: &str, message_id: &str) -> Result<()> {
        self.kv_set(&format!("send:{key}"), &format!("sent:{message_id}"))
            .await
    }

    /// The claimed send failed: the key may be tried again.
    pub async fn send_failed(&self, key: &str) -> Result<()> {
        self.kv_set(&format!("send:{key}"), "").await
    }

    pub async fn kv_get(&self, key: &str) -> Result<Option<String>> {
        with_pool!(&self.db, |pool| {
            sqlx::query("SELECT value FROM kv WHERE key = $1")
                .bind(key)
                .fetch_optional(pool)
                .await?
                .map(|r| r.text("value"))
                .transpose()
                .map_err(Into::into)
        })
    }

    pub async fn kv_set(&self, key: &str, value: &str) -> Result<()> {
        let now = switchboard_db::text_time(chrono::Utc::now());
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "INSERT INTO kv (key, value, updated_at) VALUES ($1, $2, $3) \
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            )
            .bind(key)
            .bind(value)
            .bind(&now)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Drops the send claims and /undo offers written more than
    /// [`switchboard_protocol::IDEMPOTENCY_WINDOW`] ago: a key repeated after that is a new
    /// send, an offer pressed after it has expired. Run where they are written.
    pub async fn prune_kv(&self) -> Result<()> {
        let window = chrono::Duration::from_std(switchboard_protocol::IDEMPOTENCY_WINDOW)
            .unwrap_or(chrono::Duration::days(1));
        self.prune_kv_before(chrono::Utc::now() - window).await
    }

    /// [`Self::prune_kv`] of what was written before `cutoff`; other keys (a channel's
    /// state) are kept whatever their age.
    pub async fn prune_kv_before(&self, cutoff: chrono::DateTime<chrono::Utc>) -> Result<()> {
        let cutoff = switchboard_db::text_time(cutoff);
        with_pool!(&self.db, |pool| {
            sqlx::query(
                "DELETE FROM kv WHERE updated_at < $1 AND (key LIKE 'send:%' OR key LIKE 'undo:%')",
            )
            .bind(&cutoff)
            .execute(pool)
            .await?;
        });
        Ok(())
    }
}

pub(super) fn pairing_from_row(r: &impl Cols) -> Result<Pairing> {
    Ok(Pairing {
        code: r.text("code")?,
        channel: r.text("channel")?,
        peer: from_json(r, "peer")?,
        chat: from_json(r, "chat")?,
        expires_at: r.text("expires_at")?,
    })
}
