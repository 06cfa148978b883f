//! Inbound mapping: Slack events, interactive payloads and slash commands as gateway
//! items; remembering taken events and known threads.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::channel::{
    Attachment, ButtonPress, ChannelContext, ChannelState, ChatKind, ChatRef, Inbound,
    InboundMessage, Peer,
};

use super::*;

impl SlackChannel {
    /// Loads the taken event ids a previous run stored.
    pub(super) async fn load_seen(&self, state: &dyn ChannelState) {
        if let Some(stored) = state.get(SEEN_KEY).await {
            let mut seen = self.seen.lock();
            for key in stored.lines().map(str::trim).filter(|k| !k.is_empty()) {
                seen.insert(key.to_owned());
            }
        }
    }

    pub(super) fn is_seen(&self, keys: &[String]) -> bool {
        self.seen.lock().contains_any(keys)
    }

    /// Remembers a taken item's keys (memory and state).
    pub(super) async fn remember_taken(&self, state: Option<&dyn ChannelState>, keys: &[String]) {
        let persisted = {
            let mut seen = self.seen.lock();
            for k in keys {
                seen.insert(k.clone());
            }
            seen.persisted()
        };
        if let Some(state) = state
            && let Err(reason) = state.set(SEEN_KEY, &persisted).await
        {
            tracing::warn!(channel = %self.cfg.name, %reason, "cannot store the taken event ids");
        }
    }

    /// Remembers a thread the bot takes part in (memory and state).
    pub(super) async fn remember_thread(&self, state: Option<&dyn ChannelState>, key: &str) {
        {
            let mut threads = self.threads.lock();
            if threads.len() >= THREADS_MEMORY {
                threads.clear();
            }
            threads.insert(key.to_owned());
        }
        if let Some(state) = state
            && let Err(reason) = state.set(key, "1").await
        {
            tracing::warn!(channel = %self.cfg.name, %reason, "cannot store a thread");
        }
    }

    pub(super) async fn thread_known(&self, state: Option<&dyn ChannelState>, key: &str) -> bool {
        if self.threads.lock().contains(key) {
            return true;
        }
        let Some(state) = state else {
            return false;
        };
        if state.get(key).await.is_some() {
            self.threads.lock().insert(key.to_owned());
            return true;
        }
        false
    }

    /// Hands `mapped` to the sink unless it was taken before, then remembers it. `Err`: the
    /// sink refused it (don't acknowledge it to Slack).
    pub(super) async fn deliver(&self, ctx: &ChannelContext, mapped: Mapped) -> Result<(), String> {
        if self.is_seen(&mapped.keys) {
            tracing::debug!(channel = %self.cfg.name, keys = ?mapped.keys, "duplicate delivery; ignoring it");
            return Ok(());
        }
        let state = Some(ctx.state.as_ref());
        if let Some(thread) = &mapped.thread {
            self.remember_thread(state, thread).await;
        }
        ctx.sink.accept(mapped.item).await?;
        self.remember_taken(state, &mapped.keys).await;
        Ok(())
    }
}

impl SlackChannel {
    /// An `event_callback` (Socket Mode `events_api` payload, or Events API body).
    pub(super) async fn map_event_callback(
        &self,
        payload: &Value,
        me: &BotIdentity,
        state: Option<&dyn ChannelState>,
    ) -> Option<Mapped> {
        let event = payload.get("event")?;
        let event_id = payload.get("event_id").and_then(Value::as_str);
        match event.get("type").and_then(Value::as_str) {
            Some("message" | "app_mention") => self.map_message(event, event_id, me, state).await,
            other => {
                tracing::debug!(channel = %self.cfg.name, kind = ?other, "event ignored");
                None
            }
        }
    }

    pub(super) async fn map_message(
        &self,
        event: &Value,
        event_id: Option<&str>,
        me: &BotIdentity,
        state: Option<&dyn ChannelState>,
    ) -> Option<Mapped> {
        let s = |k: &str| event.get(k).and_then(Value::as_str);
        if event.get("bot_id").is_some_and(|b| !b.is_null()) {
            return None;
        }
        match s("subtype") {
            None | Some("file_share" | "thread_broadcast") => {}
            Some(_) => return None,
        }
        let user = s("user").filter(|u| !u.is_empty())?;
        if user == me.user_id {
            return None;
        }
        let channel = s("channel").filter(|c| !c.is_empty())?;
        let ts = s("ts").filter(|t| !t.is_empty())?;
        let (text, mentioned) = strip_mention(s("text").unwrap_or_default(), &me.user_id);
        let attachments = files(event);
        if text.is_empty() && attachments.is_empty() {
            return None;
        }
        let direct = match s("channel_type") {
            Some(t) => t == "im",
            None => channel.starts_with('D'),
        };
        let thread_ts = s("thread_ts").filter(|t| !t.is_empty() && *t != ts);
        let (chat, thread_key) = if direct {
            (
                ChatRef {
                    id: channel.to_owned(),
                    kind: ChatKind::Direct,
                    thread: None,
                },
                None,
            )
        } else {
            let root = thread_ts.unwrap_or(ts);
            let key = thread_key(channel, root);
            let known = match thread_ts {
                None => false,
                Some(_) => mentioned || self.thread_known(state, &key).await,
            };
            if !(mentioned || known) {
                return None;
            }
            (
                ChatRef {
                    id: channel.to_owned(),
                    kind: ChatKind::Thread,
                    thread: Some(root.to_owned()),
                },
                Some(key),
            )
        };
        let profile = event.get("user_profile");
        let from_event = ["display_name", "real_name"].iter().find_map(|k| {
            profile
                .and_then(|p| p.get(*k))
                .and_then(Value::as_str)
                .filter(|n| !n.trim().is_empty())
                .map(str::to_owned)
        });
        let name = match from_event {
            Some(n) => n,
            None => self
                .display_name(user)
                .await
                .unwrap_or_else(|| user.to_owned()),
        };
        let username = profile
            .and_then(|p| p.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let mut keys = vec![format!("msg:{channel}:{ts}")];
        if let Some(id) = event_id {
            keys.push(format!("event:{id}"));
        }
        Some(Mapped {
            item: Inbound::Message(InboundMessage {
                channel: self.cfg.name.clone(),
                peer: Peer {
                    id: user.to_owned(),
                    name,
                    username,
                },
                chat,
                text,
                message_id: ts.to_owned(),
                addressed: true,
                attachments,
                reply_to: None,
                edited: false,
                meta: json!({
                    "event_id": event_id,
                    "ts": ts,
                    "thread_ts": thread_ts,
                    "mentioned": mentioned,
                    "team": event.get("team"),
                }),
            }),
            keys,
            thread: thread_key,
        })
    }

    /// A `block_actions` payload: a press of one of our buttons.
    pub(super) fn map_interactive(&self, payload: &Value) -> Option<Mapped> {
        if payload.get("type").and_then(Value::as_str) != Some("block_actions") {
            tracing::debug!(channel = %self.cfg.name, kind = ?payload.get("type"), "interactive payload ignored");
            return None;
        }
        let action = payload.get("actions")?.as_array()?.first()?;
        let data = str_at(action, &["value"]).or_else(|| str_at(action, &["action_id"]))?;
        let user_id = str_at(payload, &["user", "id"])?;
        let channel = str_at(payload, &["channel", "id"])
            .or_else(|| str_at(payload, &["container", "channel_id"]))?;
        let message_ts = str_at(payload, &["container", "message_ts"])
            .or_else(|| str_at(payload, &["message", "ts"]))?;
        let press_id = str_at(payload, &["trigger_id"]).unwrap_or_else(|| {
            format!(
                "{message_ts}:{}",
                str_at(action, &["action_ts"]).unwrap_or_default()
            )
        });
        let thread = str_at(payload, &["message", "thread_ts"]);
        let chat = if channel.starts_with('D') {
            ChatRef {
                id: channel,
                kind: ChatKind::Direct,
                thread: None,
            }
        } else {
            match thread {
                Some(t) => ChatRef {
                    id: channel,
                    kind: ChatKind::Thread,
                    thread: Some(t),
                },
                None => ChatRef {
                    id: channel,
                    kind: ChatKind::Group,
                    thread: None,
                },
            }
        };
        // Shown as "Allowed by <@U…>": Slack renders the mention as the person's name.
        let name = mention(&user_id);
        Some(Mapped {
            keys: vec![format!("press:{press_id}")],
            item: Inbound::Press(ButtonPress {
                channel: self.cfg.name.clone(),
                press_id,
                peer: Peer {
                    id: user_id,
                    name,
                    username: str_at(payload, &["user", "username"]),
                },
                chat,
                message_id: message_ts,
                data,
                via: Default::default(),
                reason: None,
            }),
            thread: None,
        })
    }

    /// A slash command (Socket Mode): a message `"/cmd text"` in the chat it was typed in.
    pub(super) async fn map_slash_command(&self, payload: &Value) -> Option<Mapped> {
        let s = |k: &str| {
            payload
                .get(k)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        let command = s("command")?;
        let user = s("user_id")?;
        let channel = s("channel_id")?;
        let trigger = s("trigger_id")?;
        let text = format!("{command} {}", s("text").unwrap_or_default())
            .trim()
            .to_owned();
        let kind = if channel.starts_with('D') {
            ChatKind::Direct
        } else {
            ChatKind::Group
        };
        let name = match self.display_name(user).await {
            Some(n) => n,
            None => s("user_name").unwrap_or(user).to_owned(),
        };
        Some(Mapped {
            keys: vec![format!("press:{trigger}")],
            item: Inbound::Message(InboundMessage {
                channel: self.cfg.name.clone(),
                peer: Peer {
                    id: user.to_owned(),
                    name,
                    username: s("user_name").map(str::to_owned),
                },
                chat: ChatRef {
                    id: channel.to_owned(),
                    kind,
                    thread: None,
                },
                text,
                message_id: trigger.to_owned(),
                addressed: true,
                attachments: Vec::new(),
                reply_to: None,
                edited: false,
                meta: json!({ "slash_command": command }),
            }),
            thread: None,
        })
    }
}

pub(super) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

pub(super) fn thread_key(channel: &str, ts: &str) -> String {
    format!("thread:{channel}:{ts}")
}

pub(super) fn files(event: &Value) -> Vec<Attachment> {
    event
        .get("files")
        .and_then(Value::as_array)
        .map(|files| {
            files
                .iter()
                .map(|f| Attachment {
                    kind: f
                        .get("filetype")
                        .and_then(Value::as_str)
                        .filter(|k| !k.is_empty())
                        .unwrap_or("file")
                        .to_owned(),
                    name: f.get("name").and_then(Value::as_str).map(str::to_owned),
                    size: f.get("size").and_then(Value::as_u64),
                    mime: f.get("mimetype").and_then(Value::as_str).map(str::to_owned),
                    source: f
                        .get("url_private_download")
                        .or_else(|| f.get("url_private"))
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// `text` without mentions of `user_id` (`<@U…>` or `<@U…|name>`), tidied; and whether
/// there was one.
pub(super) fn strip_mention(text: &str, user_id: &str) -> (String, bool) {
    if user_id.is_empty() {
        return (text.trim().to_owned(), false);
    }
    let open = format!("<@{user_id}");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
    while let Some(pos) = rest.find(&open) {
        let after = &rest[pos + open.len()..];
        let end = match after.chars().next() {
            Some('>') => Some(1),
            Some('|') => after.find('>').map(|i| i + 1),
            _ => None,
        };
        let Some(end) = end else {
            out.push_str(&rest[..pos + open.len()]);
            rest = after;
            continue;
        };
        found = true;
        out.push_str(&rest[..pos]);
        rest = &after[end..];
        // "a <@U> b" → "a b"
        if (out.is_empty() || out.ends_with(char::is_whitespace))
            && rest.starts_with(char::is_whitespace)
        {
            rest = rest.trim_start_matches(char::is_whitespace);
        }
        // "<@U>, hi" / "<@U>: hi" → "hi"
        if out.trim().is_empty() && (rest.starts_with(',') || rest.starts_with(':')) {
            rest = rest[1..].trim_start();
        }
    }
    out.push_str(rest);
    (out.trim().to_owned(), found)
}

/// The non-empty string at `path` in `v`.
pub(super) fn str_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}
