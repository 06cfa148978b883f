//! What Mattermost hands in, as gateway items: posts (`posted` events and posts read after
//! a reconnect), reactions (`reaction_added`), button presses (the integration request
//! Mattermost posts to the action URL) — and the signed context of our buttons.

use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{MattermostChannel, Me, chat_kind, valid_id};
use crate::channel::{
    Attachment, Button, ButtonPress, ChatKind, ChatRef, InboundHttpError, InboundMessage, Peer,
    Reaction,
};

/// What the action secret defaults to: a key made from the token (so a token change also
/// voids old buttons).
pub(super) fn derived_secret(token: &str) -> String {
    hex::encode(Sha256::digest(
        format!("switchboard mattermost actions\n{token}").as_bytes(),
    ))
}

/// The signature of a button's context: the answer it carries, and the chat and thread it
/// may be pressed in.
fn sign(secret: &str, data: &str, chat: &str, kind: &str, root: &str) -> Option<Hmac<Sha256>> {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).ok()?;
    mac.update(format!("switchboard-mattermost-action\n{data}\n{chat}\n{kind}\n{root}").as_bytes());
    Some(mac)
}

/// A post as the gateway takes it, and the thread (`channel:root`) it belongs to.
pub(super) struct Mapped {
    pub(super) message: InboundMessage,
    pub(super) thread: Option<String>,
}

impl MattermostChannel {
    /// The `props` of a post with `buttons`: one message attachment whose actions post to
    /// the action URL with a signed context.
    pub(super) fn button_props(&self, chat: &ChatRef, buttons: &[Button]) -> Value {
        let Some(url) = &self.cfg.action_url else {
            return json!({});
        };
        let kind = match chat.kind {
            ChatKind::Direct => "D",
            _ => "G",
        };
        let root = chat.thread.clone().unwrap_or_default();
        let actions: Vec<Value> = buttons
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let sig = sign(&self.cfg.action_secret, &b.data, &chat.id, kind, &root)
                    .map(|m| hex::encode(m.finalize().into_bytes()))
                    .unwrap_or_default();
                let style = if b.text.starts_with("Allow") {
                    "success"
                } else if b.text.starts_with("Deny") {
                    "danger"
                } else {
                    "default"
                };
                json!({
                    // Mattermost puts the id in a URL path: letters and digits only.
                    "id": format!("sb{i}"),
                    "type": "button",
                    "name": b.text,
                    "style": style,
                    "integration": {
                        "url": url,
                        "context": {"data": b.data, "chat": chat.id, "kind": kind, "root": root, "sig": sig},
                    },
                })
            })
            .collect();
        json!({"attachments": [{"actions": actions}]})
    }

    /// A press: the integration request Mattermost posts (`user_id`, `user_name`,
    /// `channel_id`, `post_id`, `trigger_id`, `context`). Refused (401) without a context
    /// signed by this channel for the channel it was pressed in.
    pub(super) fn map_press(&self, raw: &Value) -> Result<ButtonPress, InboundHttpError> {
        let s = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let ctx = &raw["context"];
        let (data, chat, kind, root) = (
            s(&ctx["data"]),
            s(&ctx["chat"]),
            s(&ctx["kind"]),
            s(&ctx["root"]),
        );
        let given = hex::decode(s(&ctx["sig"])).unwrap_or_default();
        let valid = sign(&self.cfg.action_secret, &data, &chat, &kind, &root)
            .is_some_and(|m| m.verify_slice(&given).is_ok());
        if !valid || s(&raw["channel_id"]) != chat || data.is_empty() {
            return Err(InboundHttpError::Unauthorized);
        }
        let (user, post) = (s(&raw["user_id"]), s(&raw["post_id"]));
        if !valid_id(&user) || !valid_id(&post) {
            return Err(InboundHttpError::Malformed(
                "a press without a user or post id".into(),
            ));
        }
        let name = raw["user_name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .map(str::to_string);
        let press_id = raw["trigger_id"]
            .as_str()
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| format!("{post}:{user}:{data}"));
        let chat = ChatRef {
            id: chat,
            kind: match chat_kind(&kind) {
                ChatKind::Direct => ChatKind::Direct,
                _ if root.is_empty() => ChatKind::Group,
                _ => ChatKind::Thread,
            },
            thread: (!root.is_empty()).then_some(root),
        };
        Ok(ButtonPress {
            channel: self.cfg.name.clone(),
            press_id,
            peer: Peer {
                name: name.clone().unwrap_or_else(|| user.clone()),
                id: user,
                username: name,
            },
            chat,
            message_id: post,
            data,
            via: Default::default(),
            reason: None,
        })
    }

    /// A post, as the gateway takes it; `None` to skip it (the bot's own, a system
    /// message, a post in a channel that is not addressed to the bot …).
    pub(super) fn map_post(
        &self,
        me: &Me,
        post: &Value,
        channel_type: &str,
        sender: Option<&str>,
        mentions_me: bool,
        known_thread: impl Fn(&str) -> bool,
    ) -> Option<Mapped> {
        let s = |k: &str| post[k].as_str().unwrap_or_default();
        let (id, user, channel) = (s("id"), s("user_id"), s("channel_id"));
        if !valid_id(id) || !valid_id(channel) || user.is_empty() || user == me.id {
            return None;
        }
        // System messages (joins, header changes …) have a type; bots' and webhooks' posts
        // say so in their props.
        if !s("type").is_empty()
            || post["delete_at"].as_i64().unwrap_or_default() > 0
            || post["props"]["from_bot"] == "true"
            || post["props"]["from_webhook"] == "true"
        {
            return None;
        }
        let root = s("root_id");
        let (text, named) = strip_mention(s("message"), &me.username);
        let mentioned = named || mentions_me;
        let attachments = files(post);
        if text.is_empty() && attachments.is_empty() {
            return None;
        }
        let (chat, thread) = if chat_kind(channel_type) == ChatKind::Direct {
            (
                ChatRef {
                    id: channel.to_string(),
                    kind: ChatKind::Direct,
                    thread: None,
                },
                None,
            )
        } else {
            let thread_root = if root.is_empty() { id } else { root };
            let key = format!("{channel}:{thread_root}");
            if !(mentioned || (!root.is_empty() && known_thread(&key))) {
                return None;
            }
            (
                ChatRef {
                    id: channel.to_string(),
                    kind: ChatKind::Thread,
                    thread: Some(thread_root.to_string()),
                },
                Some(key),
            )
        };
        let name = sender
            .map(|n| n.trim_start_matches('@').to_string())
            .filter(|n| !n.is_empty());
        Some(Mapped {
            message: InboundMessage {
                channel: self.cfg.name.clone(),
                peer: Peer {
                    id: user.to_string(),
                    name: name.clone().unwrap_or_else(|| user.to_string()),
                    username: name,
                },
                chat,
                text,
                message_id: id.to_string(),
                addressed: true,
                attachments,
                // A reply in a thread answers the post the thread hangs from (a prompt in a
                // direct message is replied to so).
                reply_to: (!root.is_empty()).then(|| root.to_string()),
                edited: false,
                meta: json!({"post_id": id, "channel_id": channel, "root_id": root, "channel_type": channel_type, "mentioned": mentioned}),
            },
            thread,
        })
    }

    /// A reaction (`reaction_added`); Mattermost names emoji (`+1`, `white_check_mark`):
    /// the answering ones are given as the emoji themselves.
    pub(super) async fn map_reaction(
        &self,
        me: &Me,
        raw: &Value,
        channel: &str,
    ) -> Option<Reaction> {
        let s = |k: &str| raw[k].as_str().unwrap_or_default();
        let (user, post, emoji) = (s("user_id"), s("post_id"), s("emoji_name"));
        if user.is_empty() || user == me.id || !valid_id(post) || !valid_id(channel) {
            return None;
        }
        let key = match emoji {
            "+1" | "thumbsup" => "👍",
            "-1" | "thumbsdown" => "👎",
            "white_check_mark" => "✅",
            "heavy_check_mark" => "✔",
            "x" => "❌",
            "no_entry_sign" => "🚫",
            other => other,
        };
        let kind = self
            .kinds
            .lock()
            .get(channel)
            .map(|k| chat_kind(k))
            .unwrap_or(ChatKind::Group);
        let name = self.username(user).await;
        Some(Reaction {
            channel: self.cfg.name.clone(),
            reaction_id: format!("{post}:{user}:{emoji}:{}", raw["create_at"]),
            peer: Peer {
                id: user.to_string(),
                name: name.clone(),
                username: Some(name),
            },
            chat: ChatRef {
                id: channel.to_string(),
                kind,
                thread: None,
            },
            message_id: post.to_string(),
            key: key.to_string(),
        })
    }
}

/// The files of a post (`metadata.files`; `file_ids` alone when the metadata is missing).
fn files(post: &Value) -> Vec<Attachment> {
    let infos = post["metadata"]["files"].as_array().cloned();
    let infos = infos.unwrap_or_else(|| {
        post["file_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|id| json!({"id": id}))
            .collect()
    });
    infos
        .iter()
        .filter_map(|f| {
            let id = f["id"].as_str().filter(|id| valid_id(id))?;
            let mime = f["mime_type"].as_str().map(str::to_string);
            let kind = match mime.as_deref().unwrap_or_default() {
                m if m.starts_with("image/") => "photo",
                m if m.starts_with("audio/") => "voice",
                m if m.starts_with("video/") => "video",
                _ => "document",
            };
            Some(Attachment {
                kind: kind.into(),
                name: f["name"].as_str().map(str::to_string),
                size: f["size"].as_u64(),
                mime,
                source: Some(id.to_string()),
            })
        })
        .collect()
}

/// The text without the bot's `@mention` (any case; punctuation after it is not part of
/// the name), and whether it had one.
fn strip_mention(text: &str, username: &str) -> (String, bool) {
    let mention = format!("@{}", username.to_lowercase());
    let lower = text.to_lowercase();
    // Lowercasing keeps byte offsets only for ASCII-cased text; otherwise match as given.
    let (hay, mention) = if lower.len() == text.len() {
        (lower, mention)
    } else {
        (text.to_string(), format!("@{username}"))
    };
    let mut out = String::new();
    let mut mentioned = false;
    let mut from = 0;
    let mut search = 0;
    while let Some(i) = hay[search..].find(&mention).map(|i| i + search) {
        let end = i + mention.len();
        let after = &hay[end..];
        // A name goes on with letters, digits and `.`/`_`/`-` followed by more of them;
        // a `.` or `-` at the end of a sentence is not part of it.
        let continues = after
            .chars()
            .next()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
            || (after.starts_with(['.', '-'])
                && after[1..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_alphanumeric() || c == '_'));
        if !continues {
            mentioned = true;
            out.push_str(&text[from..i]);
            from = end;
        }
        search = end;
    }
    out.push_str(&text[from..]);
    (out.trim().to_string(), mentioned)
}

#[cfg(test)]
pub(super) fn strip(text: &str, username: &str) -> (String, bool) {
    strip_mention(text, username)
}
