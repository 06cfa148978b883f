//! Long polling: `getUpdates` from the stored offset, until cancelled.

use crate::platform::pause;
use crate::platform::wire::kind_of;
use crate::util::{BACKOFF_START, Backoff};
use std::time::Duration;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::channel::{ChannelContext, ChannelError};

use super::*;

impl TelegramChannel {
    pub(super) async fn run_inner(
        &self,
        ctx: &ChannelContext,
        cancel: &CancellationToken,
    ) -> Result<(), ChannelError> {
        let mut backoff = Backoff::default();
        let me = loop {
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                r = self.get_me(true) => r,
            };
            match r {
                Ok(me) => break me,
                Err(ChannelError::RateLimited {
                    retry_after_secs, ..
                }) => {
                    if !pause(Duration::from_secs(retry_after_secs), cancel).await {
                        return Ok(());
                    }
                }
                Err(e) if is_fatal(&e) => return Err(e),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "getMe failed; retrying");
                    self.client.retrying(&format!("error: {e}"), &e.to_string());
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                }
            }
        };
        tracing::info!(channel = %self.cfg.name, bot = %me.username, id = me.id, "telegram bot identified; polling");
        let mut offset: Option<i64> = match ctx.state.get(OFFSET_KEY).await {
            None => None,
            Some(s) => match s.trim().parse() {
                Ok(o) => Some(o),
                Err(_) => {
                    tracing::warn!(channel = %self.cfg.name, stored = %s, "stored offset is not a number; ignoring it");
                    None
                }
            },
        };
        self.client.connected("polling");
        let poll_timeout = Duration::from_secs(self.cfg.poll_timeout_secs);
        loop {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let mut params = json!({
                "timeout": self.cfg.poll_timeout_secs,
                "allowed_updates": ["message", "edited_message", "callback_query"],
            });
            if let Some(o) = offset {
                params["offset"] = json!(o);
            }
            let r = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Ok(()),
                r = self.call_once("getUpdates", &params, poll_timeout + POLL_GRACE) => r,
            };
            let updates = match r {
                Ok(Value::Array(updates)) => updates,
                Ok(other) => {
                    let e = self.other(format!(
                        "getUpdates: expected an array of updates, got {}",
                        kind_of(&other)
                    ));
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "polling failed; retrying");
                    self.client.retrying(&format!("error: {e}"), &e.to_string());
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
                Err(ChannelError::RateLimited {
                    retry_after_secs, ..
                }) => {
                    tracing::info!(channel = %self.cfg.name, retry_after_secs, "getUpdates rate limited; waiting");
                    if !pause(Duration::from_secs(retry_after_secs), cancel).await {
                        return Ok(());
                    }
                    continue;
                }
                // Another poll holds the bot's session: a second process with this token,
                // or — after a crash or a kill — this bot's own last poll, which Telegram
                // keeps open on its side for a while. Waited out with back-off, never the
                // end of polling: stopping here left a restarted bot deaf for good.
                Err(ChannelError::Conflict { .. }) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, ?wait, "getUpdates answered 409: another poll holds this bot's session (a second process with this token, or this bot's poll from before a restart); retrying");
                    self.client.retrying(
                        "conflict: another poller is running",
                        "getUpdates answered 409: another process polls with this bot token, or the poll of a process that stopped is still open at Telegram; retrying",
                    );
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
                Err(e) if is_fatal(&e) => return Err(e),
                Err(e) => {
                    let wait = backoff.next_wait();
                    tracing::warn!(channel = %self.cfg.name, error = %e, ?wait, "polling failed; retrying");
                    self.client.retrying(&format!("error: {e}"), &e.to_string());
                    if !pause(wait, cancel).await {
                        return Ok(());
                    }
                    continue;
                }
            };
            if updates.is_empty() {
                self.client.connected("polling");
            }
            if updates.is_empty() && self.cfg.poll_timeout_secs == 0 {
                // short polling: don't spin
                if !pause(BACKOFF_START, cancel).await {
                    return Ok(());
                }
                continue;
            }
            let mut sink_failed = false;
            for raw in updates {
                let Some(update_id) = raw.get("update_id").and_then(Value::as_i64) else {
                    tracing::warn!(channel = %self.cfg.name, "an update without update_id; ignoring it");
                    continue;
                };
                if offset.is_some_and(|o| update_id < o) {
                    continue;
                }
                match self.map_update(raw, &me) {
                    Some(item) => {
                        if let Err(reason) = ctx.sink.accept(item).await {
                            tracing::warn!(channel = %self.cfg.name, update_id, %reason, "the gateway did not take an update; fetching it again later");
                            self.client
                                .retrying("error: inbound not stored", crate::health::NOT_STORED);
                            sink_failed = true;
                            break;
                        }
                    }
                    None => {
                        tracing::debug!(channel = %self.cfg.name, update_id, "update skipped");
                    }
                }
                let next = update_id.saturating_add(1);
                offset = Some(next);
                if let Err(reason) = ctx.state.set(OFFSET_KEY, &next.to_string()).await {
                    tracing::warn!(channel = %self.cfg.name, update_id, %reason, "cannot store the polling offset");
                }
            }
            if sink_failed {
                if !pause(backoff.next_wait(), cancel).await {
                    return Ok(());
                }
            } else {
                // Polled, and whatever came is stored.
                self.client.connected("polling");
                backoff.reset();
            }
        }
    }
}

/// Errors that retrying will not fix: a bad token. (A conflict is waited out: see the
/// polling loop.)
pub(super) fn is_fatal(e: &ChannelError) -> bool {
    matches!(e, ChannelError::Api { code, .. } if matches!(code, 401 | 403 | 404))
}
