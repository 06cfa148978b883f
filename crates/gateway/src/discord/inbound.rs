//! Inbound mapping: messages and button presses as gateway items; known threads.

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::channel::{Attachment, ButtonPress, ChatKind, ChatRef, InboundMessage, Peer};

use super::*;

impl DiscordChannel {
    /// What a MESSAGE_CREATE means to the gateway; `None` to skip it.
    pub(super) fn map_message(&self, m: ApiMessage, seq: Option<u64>) -> Option<InboundMessage> {
        if m.author.bot || m.webhook_id.is_some() || !matches!(m.kind, 0 | 19) {
            return None;
        }
        let bot_id = self.bot_id().unwrap_or_default();
        if m.author.id == bot_id {
            return None;
        }
        let (chat, addressed) = match &m.guild_id {
            None => (
                ChatRef {
                    id: m.channel_id.clone(),
                    kind: ChatKind::Direct,
                    thread: None,
                },
                true,
            ),
            Some(guild) => {
                if !self.cfg.guilds.is_empty() && !self.cfg.guilds.contains(guild) {
                    return None;
                }
                let mentioned = !bot_id.is_empty()
                    && (m.mentions.iter().any(|u| u.id == bot_id)
                        || m.content.contains(&format!("<@{bot_id}>"))
                        || m.content.contains(&format!("<@!{bot_id}>"))
                        || m.referenced_message
                            .as_ref()
                            .and_then(|r| r.author.as_ref())
                            .is_some_and(|a| a.id == bot_id));
                let parent = self.threads.lock().get(&m.channel_id).cloned();
                let is_thread = parent.is_some() || matches!(m.channel_type, Some(10..=12));
                let configured = self.cfg.channels.contains(&m.channel_id)
                    || parent
                        .as_ref()
                        .is_some_and(|p| self.cfg.channels.contains(p));
                if !mentioned && !configured {
                    return None;
                }
                let chat = if is_thread {
                    ChatRef {
                        id: m.channel_id.clone(),
                        kind: ChatKind::Thread,
                        thread: Some(m.channel_id.clone()),
                    }
                } else {
                    ChatRef {
                        id: m.channel_id.clone(),
                        kind: ChatKind::Group,
                        thread: None,
                    }
                };
                (chat, mentioned)
            }
        };
        let attachments: Vec<Attachment> = m.attachments.iter().map(attachment).collect();
        if m.content.trim().is_empty() && attachments.is_empty() {
            // nothing to hand in (without the MESSAGE_CONTENT intent, content is empty)
            return None;
        }
        let text = strip_mention(&m.content, &bot_id);
        let mut meta = json!({"message_id": m.id, "channel_id": m.channel_id});
        if let Some(g) = &m.guild_id {
            meta["guild_id"] = json!(g);
        }
        if let Some(s) = seq {
            meta["seq"] = json!(s);
        }
        Some(InboundMessage {
            channel: self.cfg.name.clone(),
            peer: peer(&m.author),
            chat,
            text,
            message_id: m.id,
            addressed,
            attachments,
            reply_to: m.referenced_message.and_then(|r| r.id),
            edited: false,
            meta,
        })
    }

    /// A button press (interaction type 3) and its token; `None` to skip it.
    pub(super) fn map_press(&self, i: ApiInteraction) -> Option<(ButtonPress, String)> {
        if i.kind != 3 {
            return None;
        }
        if let Some(g) = &i.guild_id
            && !self.cfg.guilds.is_empty()
            && !self.cfg.guilds.contains(g)
        {
            return None;
        }
        let user = i.member.and_then(|m| m.user).or(i.user)?;
        if user.bot {
            return None;
        }
        let channel_id = i.channel_id?;
        let data = i.data?.custom_id?;
        let message_id = i.message?.id;
        let chat = match &i.guild_id {
            None => ChatRef {
                id: channel_id,
                kind: ChatKind::Direct,
                thread: None,
            },
            Some(_) if self.threads.lock().contains_key(&channel_id) => ChatRef {
                id: channel_id.clone(),
                kind: ChatKind::Thread,
                thread: Some(channel_id),
            },
            Some(_) => ChatRef {
                id: channel_id,
                kind: ChatKind::Group,
                thread: None,
            },
        };
        if let Some(app) = i.application_id.filter(|a| valid_id(a)) {
            let mut tokens = self.press_tokens.lock();
            tokens.retain(|_, t| t.at.elapsed() < INTERACTION_TOKEN_TTL);
            tokens.insert(
                i.id.clone(),
                PressToken {
                    application_id: app,
                    token: i.token.clone(),
                    at: Instant::now(),
                    acked: false,
                },
            );
        }
        Some((
            ButtonPress {
                channel: self.cfg.name.clone(),
                press_id: i.id,
                peer: peer(&user),
                chat,
                message_id,
                data,
                via: Default::default(),
                reason: None,
            },
            i.token,
        ))
    }

    pub(super) fn note_threads(&self, t: &str, d: &Value) {
        let mut threads = self.threads.lock();
        if threads.len() > 10_000 {
            threads.clear();
        }
        let mut add = |c: &Value| {
            if let (Some(id), Some(parent)) = (
                c.get("id").and_then(Value::as_str),
                c.get("parent_id").and_then(Value::as_str),
            ) && matches!(c.get("type").and_then(Value::as_u64), Some(10..=12))
            {
                threads.insert(id.to_owned(), parent.to_owned());
            }
        };
        match t {
            "THREAD_CREATE" | "THREAD_UPDATE" => add(d),
            "GUILD_CREATE" | "THREAD_LIST_SYNC" => {
                for c in d
                    .get("threads")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    add(c);
                }
            }
            "THREAD_DELETE" => {
                if let Some(id) = d.get("id").and_then(Value::as_str) {
                    threads.remove(id);
                }
            }
            _ => {}
        }
    }

    pub(super) fn remember_inbound(&self, chat: &str, message_id: &str) {
        let mut map = self.reply_to.lock();
        if map.len() > 4096 {
            map.clear();
        }
        map.insert(chat.to_owned(), message_id.to_owned());
    }
}

pub(super) fn peer(u: &ApiUser) -> Peer {
    let name = u
        .global_name
        .clone()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| u.username.clone());
    Peer {
        id: u.id.clone(),
        name,
        username: Some(u.username.clone()).filter(|n| !n.is_empty()),
    }
}

pub(super) fn attachment(a: &ApiAttachment) -> Attachment {
    let ct = a.content_type.as_deref().unwrap_or_default();
    let kind = if ct.starts_with("image/") {
        "photo"
    } else if ct.starts_with("video/") {
        "video"
    } else if ct.starts_with("audio/") {
        "audio"
    } else {
        "document"
    };
    Attachment {
        kind: kind.into(),
        name: a.filename.clone(),
        size: a.size,
        mime: a.content_type.clone(),
        source: a.url.clone().filter(|u| !u.is_empty()),
    }
}

/// `text` without `<@BOTID>` / `<@!BOTID>`, tidied ("<@1>, hi" → "hi").
pub(super) fn strip_mention(text: &str, bot_id: &str) -> String {
    if bot_id.is_empty() {
        return text.trim().to_owned();
    }
    let plain = format!("<@{bot_id}>");
    let nick = format!("<@!{bot_id}>");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let mut found = false;
    loop {
        let next = [&plain, &nick]
            .iter()
            .filter_map(|p| rest.find(p.as_str()).map(|i| (i, p.len())))
            .min();
        let Some((i, len)) = next else { break };
        found = true;
        out.push_str(&rest[..i]);
        rest = &rest[i + len..];
        if (out.is_empty() || out.ends_with(char::is_whitespace))
            && rest.starts_with(char::is_whitespace)
        {
            rest = rest.trim_start_matches(char::is_whitespace);
        }
    }
    out.push_str(rest);
    let out = out.trim();
    if found && let Some(s) = out.strip_prefix([',', ':']) {
        return s.trim().to_owned();
    }
    out.to_owned()
}
