//! Taking posts, and reading what was posted while the gateway was away: a cursor per
//! channel (the newest post handled there and the ids handled at that millisecond), and
//! after every (re)connect the posts after it in every channel the bot is in.

use serde_json::Value;

use super::{MattermostChannel, Me};
use crate::channel::{ChannelContext, Inbound};

/// The newest post handled in any channel (ms, the server's clock): where a channel
/// without a cursor of its own is read from.
const SINCE_KEY: &str = "since";

fn cursor_key(channel: &str) -> String {
    format!("cursor:{channel}")
}

fn thread_key(key: &str) -> String {
    format!("thread:{key}")
}

/// Where reading a channel goes on from.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Cursor {
    /// `create_at` of the newest post handled.
    pub(super) at: i64,
    /// The posts handled at exactly that millisecond.
    pub(super) ids: Vec<String>,
}

impl Cursor {
    pub(super) fn parse(s: &str) -> Option<Cursor> {
        let (at, ids) = s.split_once(' ').unwrap_or((s, ""));
        Some(Cursor {
            at: at.parse().ok()?,
            ids: ids
                .split(',')
                .filter(|i| !i.is_empty())
                .map(str::to_string)
                .collect(),
        })
    }

    pub(super) fn render(&self) -> String {
        format!("{} {}", self.at, self.ids.join(","))
    }

    /// Whether the post (`at`, `id`) was handled already.
    pub(super) fn covers(&self, at: i64, id: &str) -> bool {
        at < self.at || (at == self.at && self.ids.iter().any(|i| i == id))
    }

    /// Moves past the post (`at`, `id`); `false` when it was covered already.
    pub(super) fn advance(&mut self, at: i64, id: &str) -> bool {
        if self.covers(at, id) {
            return false;
        }
        if at > self.at {
            self.at = at;
            self.ids.clear();
        }
        self.ids.push(id.to_string());
        true
    }
}

impl MattermostChannel {
    async fn store(&self, ctx: &ChannelContext, key: &str, value: &str) {
        if let Err(e) = ctx.state.set(key, value).await {
            tracing::warn!(channel = %self.cfg.name, key, error = %e, "storing the Mattermost state");
        }
    }

    async fn cursor(&self, ctx: &ChannelContext, channel: &str) -> Option<Cursor> {
        if let Some(c) = self.cursors.lock().get(channel) {
            return Some(c.clone());
        }
        let c = Cursor::parse(&ctx.state.get(&cursor_key(channel)).await?)?;
        self.cursors.lock().insert(channel.to_string(), c.clone());
        Some(c)
    }

    /// Notes that the post (`at`, `id`) of `channel` was handled (taken or skipped).
    async fn advance(&self, ctx: &ChannelContext, channel: &str, at: i64, id: &str) {
        let mut c: Cursor = self.cursor(ctx, channel).await.unwrap_or_default();
        if !c.advance(at, id) {
            return;
        }
        self.cursors.lock().insert(channel.to_string(), c.clone());
        self.store(ctx, &cursor_key(channel), &c.render()).await;
        let since = ctx
            .state
            .get(SINCE_KEY)
            .await
            .and_then(|s| s.parse::<i64>().ok());
        if since.is_none_or(|s| s < at) {
            self.store(ctx, SINCE_KEY, &at.to_string()).await;
        }
    }

    /// A post: handed in when it is for the bot, then its channel's cursor moved and its
    /// thread noted. `Err` when it could not be stored (the cursor stays before it).
    pub(super) async fn take_post(
        &self,
        me: &Me,
        ctx: &ChannelContext,
        post: &Value,
        kind: &str,
        sender: Option<&str>,
        mentions_me: bool,
    ) -> Result<(), String> {
        let channel = post["channel_id"].as_str().unwrap_or_default();
        let (id, at) = (
            post["id"].as_str().unwrap_or_default(),
            post["create_at"].as_i64().unwrap_or_default(),
        );
        self.kinds
            .lock()
            .insert(channel.to_string(), kind.to_string());
        if self
            .cursor(ctx, channel)
            .await
            .is_some_and(|c| c.covers(at, id))
        {
            return Ok(()); // read after a reconnect, then delivered live as well
        }
        let root = post["root_id"].as_str().unwrap_or_default();
        if !root.is_empty() {
            let key = format!("{channel}:{root}");
            if !self.threads.lock().contains(&key)
                && ctx.state.get(&thread_key(&key)).await.is_some()
            {
                self.threads.lock().insert(key);
            }
        }
        let mapped = self.map_post(me, post, kind, sender, mentions_me, |k| {
            self.threads.lock().contains(k)
        });
        if let Some(mut mapped) = mapped {
            if sender.is_none() {
                let name = self.username(&mapped.message.peer.id).await;
                mapped.message.peer.name = name.clone();
                mapped.message.peer.username = Some(name);
            }
            ctx.sink
                .accept(Inbound::Message(mapped.message))
                .await
                .map_err(|e| format!("could not store a post: {e}"))?;
            if let Some(key) = mapped.thread
                && self.threads.lock().insert(key.clone())
            {
                self.store(ctx, &thread_key(&key), "1").await;
            }
        }
        self.advance(ctx, channel, at, id).await;
        Ok(())
    }

    /// The posts made while away, in every channel the bot is in, each after its channel's
    /// cursor (or the newest post handled anywhere, for a channel without one). On a first
    /// start every channel's cursor is set to its newest post (the server's clock): what
    /// was posted before is not answered.
    pub(super) async fn catch_up(&self, me: &Me, ctx: &ChannelContext) -> Result<(), String> {
        let channels = self
            .my_channels()
            .await
            .map_err(|e| format!("listing the bot's channels: {e}"))?;
        let since = ctx
            .state
            .get(SINCE_KEY)
            .await
            .and_then(|s| s.parse::<i64>().ok());
        let Some(since) = since else {
            let newest = channels.iter().map(|c| c.2).max().unwrap_or_default();
            for (id, kind, last) in &channels {
                self.kinds.lock().insert(id.clone(), kind.clone());
                let c = Cursor {
                    at: *last,
                    ids: Vec::new(),
                };
                self.cursors.lock().insert(id.clone(), c.clone());
                self.store(ctx, &cursor_key(id), &c.render()).await;
            }
            self.store(ctx, SINCE_KEY, &newest.to_string()).await;
            return Ok(());
        };
        let mut taken = 0usize;
        for (channel, kind, last_post_at) in channels {
            self.kinds.lock().insert(channel.clone(), kind.clone());
            let cursor = self.cursor(ctx, &channel).await.unwrap_or(Cursor {
                at: since,
                ids: Vec::new(),
            });
            if last_post_at < cursor.at {
                continue;
            }
            let posts = self
                .posts_after(&channel, cursor.at)
                .await
                .map_err(|e| format!("reading the posts missed in a channel: {e}"))?;
            for post in posts {
                let at = post["create_at"].as_i64().unwrap_or_default();
                if cursor.covers(at, post["id"].as_str().unwrap_or_default()) {
                    continue; // handled, or an older post edited since
                }
                self.take_post(me, ctx, &post, &kind, None, false).await?;
                taken += 1;
            }
        }
        if taken > 0 {
            tracing::info!(channel = %self.cfg.name, posts = taken, "read the posts made while disconnected");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::Cursor;

    #[test]
    fn a_cursor_covers_what_was_handled_and_nothing_after() {
        let mut c = Cursor::default();
        assert!(c.advance(10, "a"));
        assert!(c.advance(10, "b"));
        assert!(!c.advance(10, "a"), "the same post twice");
        assert!(c.covers(9, "z"));
        assert!(!c.covers(10, "c"), "another post of the same millisecond");
        assert!(c.advance(11, "c"));
        assert_eq!(c.ids, ["c"]);
        let back = Cursor::parse(&c.render()).unwrap();
        assert_eq!(back, c);
        assert_eq!(Cursor::parse("12 ").unwrap().ids.len(), 0);
        assert!(Cursor::parse("x").is_none());
    }
}
