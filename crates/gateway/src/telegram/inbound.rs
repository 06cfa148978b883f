//! Inbound mapping: updates as gateway items (chats, mentions, replies, attachments, presses).

use serde_json::{Value, json};

use crate::channel::{Attachment, ButtonPress, ChatKind, ChatRef, Inbound, InboundMessage, Peer};

use super::*;

impl TelegramChannel {
    /// What an update means to the gateway; `None` to skip it.
    pub(super) fn map_update(&self, raw: Value, me: &BotIdentity) -> Option<Inbound> {
        let update: ApiUpdate = match crate::platform::wire::from_object(raw) {
            Ok(u) => u,
            Err(e) => {
                tracing::warn!(channel = %self.cfg.name, error = %e, "an update of unexpected shape; ignoring it");
                return None;
            }
        };
        if let Some(m) = update.message {
            return self
                .map_message(m, update.update_id, me)
                .map(Inbound::Message);
        }
        if let Some(m) = update.edited_message {
            return self
                .map_message(m, update.update_id, me)
                .map(|m| Inbound::Message(InboundMessage { edited: true, ..m }));
        }
        if let Some(q) = update.callback_query {
            return self.map_press(q).map(Inbound::Press);
        }
        None
    }

    pub(super) fn map_message(
        &self,
        m: ApiMessage,
        update_id: i64,
        me: &BotIdentity,
    ) -> Option<InboundMessage> {
        let from = m.from.as_ref()?;
        if from.is_bot {
            return None;
        }
        let chat = chat_ref(&m)?;
        let attachments = attachments(&m);
        let (raw_text, entities) = match (&m.text, &m.caption) {
            (Some(t), _) => (t.as_str(), &m.entities),
            (None, Some(c)) => (c.as_str(), &m.caption_entities),
            (None, None) if !attachments.is_empty() => ("", &m.entities),
            (None, None) => return None,
        };
        let (text, mentioned) = strip_mention(raw_text, &me.username);
        let addressed = match chat.kind {
            ChatKind::Direct => true,
            ChatKind::Group | ChatKind::Thread => {
                mentioned
                    || mentions_in_entities(raw_text, entities.as_deref(), me)
                    || replies_to_bot(&m, me)
            }
        };
        if chat.kind != ChatKind::Direct && self.cfg.require_mention_in_groups && !addressed {
            return None;
        }
        Some(InboundMessage {
            channel: self.cfg.name.clone(),
            peer: peer(from),
            chat,
            text,
            message_id: m.message_id.to_string(),
            addressed,
            attachments,
            reply_to: m
                .reply_to_message
                .as_ref()
                .map(|r| r.message_id.to_string()),
            edited: false,
            meta: json!({ "update_id": update_id }),
        })
    }

    pub(super) fn map_press(&self, q: ApiCallbackQuery) -> Option<ButtonPress> {
        let message = q.message?;
        let data = q.data?;
        Some(ButtonPress {
            channel: self.cfg.name.clone(),
            press_id: q.id,
            peer: peer(&q.from),
            chat: chat_ref(&message)?,
            message_id: message.message_id.to_string(),
            data,
            via: Default::default(),
            reason: None,
        })
    }
}

pub(super) fn peer(u: &ApiUser) -> Peer {
    let name = match u.last_name.as_deref().filter(|l| !l.is_empty()) {
        Some(last) => format!("{} {last}", u.first_name),
        None => u.first_name.clone(),
    };
    Peer {
        id: u.id.to_string(),
        name,
        username: u.username.clone().filter(|n| !n.is_empty()),
    }
}

/// Where a message is: private → direct; group/supergroup → group, or thread when it
/// belongs to a forum topic or a supergroup reply thread. `None` for channels.
pub(super) fn chat_ref(m: &ApiMessage) -> Option<ChatRef> {
    let thread = m.message_thread_id.map(|t| t.to_string());
    let (kind, thread) = match m.chat.kind.as_str() {
        "private" => (
            ChatKind::Direct,
            thread.filter(|_| m.is_topic_message == Some(true)),
        ),
        // Only forum topics are threads: in other supergroups a reply carries a
        // `message_thread_id` too, and must stay in the group's session.
        "group" | "supergroup" => match thread.filter(|_| m.is_topic_message == Some(true)) {
            Some(t) => (ChatKind::Thread, Some(t)),
            None => (ChatKind::Group, None),
        },
        _ => return None,
    };
    Some(ChatRef {
        id: m.chat.id.to_string(),
        kind,
        thread,
    })
}

pub(super) fn replies_to_bot(m: &ApiMessage, me: &BotIdentity) -> bool {
    m.reply_to_message.as_ref().is_some_and(|r| {
        // in a forum topic, a message that replies to nothing "replies" to the topic's
        // creation message: that is no reply to the bot
        r.forum_topic_created.is_none() && r.from.as_ref().is_some_and(|f| f.id == me.id)
    })
}

/// A `mention` entity naming the bot, or a `text_mention` of it.
pub(super) fn mentions_in_entities(
    text: &str,
    entities: Option<&[ApiEntity]>,
    me: &BotIdentity,
) -> bool {
    let Some(entities) = entities else {
        return false;
    };
    let target = format!("@{}", me.username);
    let utf16: Vec<u16> = text.encode_utf16().collect();
    entities.iter().any(|e| match e.kind.as_str() {
        "mention" => {
            let end = e.offset.saturating_add(e.length);
            utf16
                .get(e.offset..end)
                .map(String::from_utf16_lossy)
                .is_some_and(|s| s.eq_ignore_ascii_case(&target))
        }
        "text_mention" => e.user.as_ref().is_some_and(|u| u.id == me.id),
        _ => false,
    })
}

pub(super) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `text` without `@username` mentions (case-insensitive, whole names only, also
/// `/command@username`), tidied; and whether there was one.
pub(super) fn strip_mention(text: &str, username: &str) -> (String, bool) {
    if username.is_empty() {
        return (text.trim().to_owned(), false);
    }
    let target = format!("@{}", username.to_ascii_lowercase());
    // ASCII lower-casing keeps byte offsets
    let lower = text.to_ascii_lowercase();
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut found = false;
    let mut rest = 0usize;
    let mut search = 0usize;
    while let Some(pos) = lower[search..].find(&target) {
        let start = search + pos;
        let end = start + target.len();
        search = end;
        if bytes.get(end).copied().is_some_and(is_name_byte) {
            continue;
        }
        let word_start = text[..start].rfind(char::is_whitespace).map_or(0, |i| {
            i + text[i..].chars().next().map_or(1, char::len_utf8)
        });
        let after_name = start > 0 && is_name_byte(bytes[start - 1]);
        let command = text[word_start..start].starts_with('/');
        if after_name && !command {
            continue;
        }
        found = true;
        out.push_str(&text[rest..start]);
        rest = end;
        // "a @bot b" → "a b"
        if (out.is_empty() || out.ends_with(char::is_whitespace))
            && text[rest..].starts_with(char::is_whitespace)
        {
            rest += text[rest..].chars().next().map_or(1, char::len_utf8);
        }
        // "@bot, hi" / "@bot: hi" → "hi"
        if out.trim().is_empty() && (text[rest..].starts_with(',') || text[rest..].starts_with(':'))
        {
            rest += 1;
        }
    }
    if !found {
        return (text.trim().to_owned(), false);
    }
    out.push_str(&text[rest..]);
    (out.trim().to_owned(), true)
}

pub(super) fn attachments(m: &ApiMessage) -> Vec<Attachment> {
    let mut out = Vec::new();
    if let Some(p) = m.photo.as_ref().and_then(|sizes| {
        sizes
            .iter()
            // Telegram's numbers: a product too large for u64 is only "very large"
            .max_by_key(|p| {
                (
                    p.width.unwrap_or(0).saturating_mul(p.height.unwrap_or(0)),
                    p.file_size,
                )
            })
    }) {
        out.push(Attachment {
            kind: "photo".into(),
            name: None,
            size: p.file_size,
            // Telegram re-encodes photos as JPEG.
            mime: Some("image/jpeg".into()),
            source: Some(p.file_id.clone()).filter(|id| !id.is_empty()),
        });
    }
    for (kind, f) in [
        ("document", &m.document),
        ("voice", &m.voice),
        ("audio", &m.audio),
        ("video", &m.video),
        ("video_note", &m.video_note),
    ] {
        if let Some(f) = f {
            out.push(Attachment {
                kind: kind.into(),
                name: f.file_name.clone(),
                size: f.file_size,
                mime: f.mime_type.clone(),
                source: Some(f.file_id.clone()).filter(|id| !id.is_empty()),
            });
        }
    }
    out
}
