//! A received envelope as gateway items: a message (text, mentions, a quote, attachments)
//! or a reaction; receipts, typing, sync messages and edits are skipped.

use serde_json::{Value, json};

use super::SignalChannel;
use crate::channel::{Attachment, ChatKind, ChatRef, Inbound, InboundMessage, Peer, Reaction};

/// What signal-cli puts where a mention stands in the text.
const MENTION: char = '\u{fffc}';

impl SignalChannel {
    /// Whether `number` / `uuid` is the bot.
    fn is_me(&self, number: Option<&str>, uuid: Option<&str>) -> bool {
        number == Some(self.cfg.account.as_str())
            || uuid.is_some_and(|u| self.own_uuid.lock().as_deref() == Some(u))
    }

    /// The envelope of one event (`{"account", "envelope"}`), as a gateway item.
    pub(super) fn map_envelope(&self, event: &Value) -> Option<Inbound> {
        let env = &event["envelope"];
        let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
        let number = s(&env["sourceNumber"]).or_else(|| s(&env["source"]));
        let uuid = s(&env["sourceUuid"]);
        let sender = uuid.clone().or_else(|| number.clone())?;
        if self.is_me(number.as_deref(), uuid.as_deref()) {
            return None;
        }
        let data = env.get("dataMessage").filter(|d| d.is_object())?;
        if data.get("storyContext").is_some_and(|s| s.is_object()) {
            return None; // a reply to a story, not a message to the bot
        }
        let timestamp = data["timestamp"]
            .as_u64()
            .or_else(|| env["timestamp"].as_u64())?;
        let group = s(&data["groupInfo"]["groupId"]);
        let chat = match &group {
            Some(g) => ChatRef {
                id: g.clone(),
                kind: ChatKind::Group,
                thread: None,
            },
            None => ChatRef {
                id: sender.clone(),
                kind: ChatKind::Direct,
                thread: None,
            },
        };
        let peer = Peer {
            id: sender.clone(),
            name: s(&env["sourceName"])
                .or_else(|| number.clone())
                .unwrap_or_else(|| sender.clone()),
            username: number.clone(),
        };
        if let Some(r) = data.get("reaction").filter(|r| r.is_object()) {
            let on_mine = self.is_me(
                r["targetAuthorNumber"].as_str(),
                r["targetAuthorUuid"].as_str(),
            );
            if r["isRemove"].as_bool() == Some(true) || !on_mine {
                return None;
            }
            return Some(Inbound::Reaction(Reaction {
                channel: self.cfg.name.clone(),
                reaction_id: format!("{sender}:{timestamp}"),
                peer,
                chat,
                message_id: r["targetSentTimestamp"].as_u64()?.to_string(),
                key: r["emoji"].as_str()?.to_string(),
            }));
        }
        let (text, mentioned) = self.text(data);
        let from = match &group {
            Some(g) => format!("g:{g}"),
            None => format!("r:{sender}"),
        };
        let attachments: Vec<Attachment> = data["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| {
                let id = a["id"].as_str()?;
                let mime = a["contentType"].as_str().map(str::to_string);
                if mime.as_deref() == Some("text/x-signal-plain") {
                    return None; // a long text, merged into `message` by signal-cli already
                }
                let kind = match mime.as_deref().unwrap_or_default() {
                    m if m.starts_with("image/") => "photo",
                    m if m.starts_with("audio/") => "voice",
                    m if m.starts_with("video/") => "video",
                    _ => "document",
                };
                Some(Attachment {
                    kind: kind.into(),
                    name: a["filename"].as_str().map(str::to_string),
                    size: a["size"].as_u64(),
                    mime,
                    source: Some(format!("{id}\n{from}")),
                })
            })
            .collect();
        if text.is_empty() && attachments.is_empty() {
            return None;
        }
        let quote = data.get("quote").filter(|q| q.is_object());
        let replies_to_me =
            quote.is_some_and(|q| self.is_me(q["authorNumber"].as_str(), q["authorUuid"].as_str()));
        if group.is_some() && self.cfg.require_mention && !(mentioned || replies_to_me) {
            return None;
        }
        Some(Inbound::Message(InboundMessage {
            channel: self.cfg.name.clone(),
            peer,
            chat,
            text,
            message_id: format!("{sender}:{timestamp}"),
            addressed: group.is_none() || mentioned || replies_to_me,
            attachments,
            reply_to: quote.and_then(|q| q["id"].as_u64()).map(|t| t.to_string()),
            edited: false,
            meta: json!({"timestamp": timestamp, "group_id": group, "mentioned": mentioned}),
        }))
    }

    /// The text with mentions written out (`@Name`), the bot's own cut; and whether the bot
    /// was mentioned. Mention offsets are in UTF-16 code units, as signal-cli gives them.
    fn text(&self, data: &Value) -> (String, bool) {
        let raw = data["message"].as_str().unwrap_or_default();
        let mut mentions: Vec<(usize, String, bool)> = data["mentions"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                let me = self.is_me(m["number"].as_str(), m["uuid"].as_str());
                // `name` is the legacy identifier (a number or a uuid): not shown.
                let name = m["name"]
                    .as_str()
                    .filter(|n| !n.starts_with('+') && uuid::Uuid::parse_str(n).is_err())
                    .unwrap_or("someone")
                    .to_string();
                (m["start"].as_u64().unwrap_or(u64::MAX) as usize, name, me)
            })
            .collect();
        mentions.sort_by_key(|m| m.0);
        let mut out = String::new();
        let mut mentioned = false;
        let mut next = mentions.into_iter().peekable();
        let mut at = 0usize; // UTF-16 offset
        for c in raw.chars() {
            match next.peek() {
                Some((start, _, _)) if *start == at && c == MENTION => {
                    if let Some((_, name, me)) = next.next() {
                        if me {
                            mentioned = true;
                        } else {
                            out.push('@');
                            out.push_str(&name);
                        }
                    }
                }
                _ => out.push(c),
            }
            at += c.len_utf16();
        }
        (out.trim().to_string(), mentioned)
    }
}
