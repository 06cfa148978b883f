//! An activity Teams posted, as gateway items (learn.microsoft.com → "Activity schema",
//! "Conversation basics", "Send and receive files"): messages in personal chats, group
//! chats and channel threads (mentions cut), card submits as presses, files.

use serde_json::{Value, json};

use super::TeamsChannel;
use crate::channel::{Attachment, ButtonPress, ChatKind, ChatRef, Inbound, InboundMessage, Peer};

/// Who sent an activity: the person's Entra object id (stable, what an administrator
/// sees); `None` without one (not a person in Teams).
pub(super) fn peer(a: &Value) -> Option<Peer> {
    let from = &a["from"];
    let id = from["aadObjectId"]
        .as_str()
        .filter(|i| !i.is_empty())?
        .to_string();
    Some(Peer {
        name: from["name"].as_str().unwrap_or(&id).to_string(),
        username: from["id"].as_str().map(str::to_string),
        id,
    })
}

/// The chat of an activity: a personal chat, a group chat, or a channel thread (its
/// conversation id ends in `;messageid=ROOT`).
pub(super) fn chat(a: &Value) -> ChatRef {
    let conv = &a["conversation"];
    let id = conv["id"].as_str().unwrap_or_default().to_string();
    match conv["conversationType"].as_str() {
        Some("personal") => ChatRef {
            id,
            kind: ChatKind::Direct,
            thread: None,
        },
        Some("channel") => {
            // The channel's id, and the thread's root (`19:…@thread.tacv2;messageid=ROOT`).
            let (channel, root) = match id.split_once(";messageid=") {
                Some((c, r)) => (c.to_string(), Some(r.to_string())),
                None => (
                    id.clone(),
                    a["replyToId"]
                        .as_str()
                        .or(a["id"].as_str())
                        .map(str::to_string),
                ),
            };
            ChatRef {
                id: channel,
                kind: ChatKind::Thread,
                thread: root,
            }
        }
        _ => ChatRef {
            id,
            kind: ChatKind::Group,
            thread: None,
        },
    }
}

impl TeamsChannel {
    /// A `message` activity: a card's submit (a press) or a message; `None` to skip it.
    pub(super) fn map_message(&self, a: &Value) -> Option<Inbound> {
        let id = a["id"].as_str()?.to_string();
        let chat = chat(a);
        let peer = peer(a)?;
        if let Some(data) = a["value"]["sb"].as_str() {
            return Some(Inbound::Press(ButtonPress {
                channel: self.cfg.name.clone(),
                press_id: id,
                peer,
                chat,
                message_id: a["replyToId"].as_str().unwrap_or_default().to_string(),
                data: data.to_string(),
                via: Default::default(),
                reason: None,
            }));
        }
        let bot = a["recipient"]["id"].as_str().unwrap_or_default();
        let mut text = a["text"].as_str().unwrap_or_default().to_string();
        let mut mentioned = false;
        for e in a["entities"].as_array().into_iter().flatten() {
            if e["type"] == "mention" && e["mentioned"]["id"].as_str() == Some(bot) {
                mentioned = true;
                if let Some(t) = e["text"].as_str() {
                    text = text.replace(t, "");
                }
            }
        }
        let text = text.trim().to_string();
        let attachments = self.attachments(a);
        if text.is_empty() && attachments.is_empty() {
            return None;
        }
        // Teams sends group chat and channel messages only when the bot is mentioned
        // (without resource-specific consent); a thread is answered as a whole.
        let addressed = chat.kind == ChatKind::Direct || mentioned;
        Some(Inbound::Message(InboundMessage {
            channel: self.cfg.name.clone(),
            peer,
            chat,
            text,
            message_id: id,
            addressed,
            attachments,
            reply_to: None,
            edited: false,
            meta: json!({"service_url": a["serviceUrl"], "tenant": a["channelData"]["tenant"]["id"]}),
        }))
    }

    /// Files: a file a person shared (`…file.download.info`: a pre-authenticated download
    /// URL) or an image pasted in (its content URL, fetched with the bot's token).
    fn attachments(&self, a: &Value) -> Vec<Attachment> {
        a["attachments"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|att| {
                let ct = att["contentType"].as_str()?;
                if ct == "application/vnd.microsoft.teams.file.download.info" {
                    let url = att["content"]["downloadUrl"].as_str()?;
                    return Some(Attachment {
                        kind: "document".into(),
                        name: att["name"].as_str().map(str::to_string),
                        size: None,
                        mime: None,
                        source: Some(format!("download {url}")),
                    });
                }
                if ct.starts_with("image/") {
                    // Fetched with the bot's token: only from the activity's own service.
                    let url = att["contentUrl"].as_str()?;
                    let service = a["serviceUrl"].as_str().unwrap_or_default();
                    let same_host = reqwest::Url::parse(url)
                        .ok()
                        .zip(reqwest::Url::parse(service).ok())
                        .is_some_and(|(u, s)| {
                            u.host_str() == s.host_str()
                                && u.port_or_known_default() == s.port_or_known_default()
                        });
                    if !same_host {
                        return None;
                    }
                    return Some(Attachment {
                        kind: "photo".into(),
                        name: att["name"].as_str().map(str::to_string),
                        size: None,
                        mime: Some(ct.to_string()),
                        source: Some(format!("token {url}")),
                    });
                }
                None
            })
            .collect()
    }
}
