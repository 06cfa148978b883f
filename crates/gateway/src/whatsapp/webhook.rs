//! What Meta pushes to the webhook, read: the subscription check (`GET` with
//! `hub.challenge`), the `X-Hub-Signature-256` of every delivery, and a delivery's messages
//! and statuses. Follows Meta's "Webhooks" (Graph API) and the WhatsApp Cloud API's
//! "Webhooks → messages" reference: `entry[].changes[].value` with `metadata`, `contacts`,
//! `messages` and `statuses`.

use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::channel::{
    Attachment, ButtonPress, ChatKind, ChatRef, Inbound, InboundMessage, Peer, Reaction,
};

/// The subscription check Meta makes when the webhook is set up: `hub.mode=subscribe`,
/// `hub.verify_token` (the one configured) and `hub.challenge`, echoed back. `None`: not
/// the right token (answered 401).
pub(super) fn challenge(
    verify_token: &str,
    query: &std::collections::HashMap<String, String>,
) -> Option<String> {
    let given = query.get("hub.verify_token")?;
    let ok = query.get("hub.mode").map(String::as_str) == Some("subscribe")
        && !verify_token.is_empty()
        && bool::from(given.as_bytes().ct_eq(verify_token.as_bytes()));
    ok.then(|| query.get("hub.challenge").cloned().unwrap_or_default())
}

/// Whether `X-Hub-Signature-256` (`sha256=` and the hex HMAC-SHA256 of the raw body with
/// the app secret) is right.
pub(super) fn signed(app_secret: &str, header: Option<&str>, body: &[u8]) -> bool {
    let Some(hex_sig) = header.and_then(|h| h.trim().strip_prefix("sha256=")) else {
        return false;
    };
    let Ok(given) = hex::decode(hex_sig) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(app_secret.as_bytes()) else {
        return false;
    };
    mac.update(body);
    bool::from(mac.finalize().into_bytes().as_slice().ct_eq(&given))
}

/// A delivery status of a message the bot sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Status {
    pub message_id: String,
    /// A person's WhatsApp id, or a group's id.
    pub recipient: String,
    pub group: bool,
    /// `sent`, `delivered`, `read` or `failed`.
    pub status: String,
    /// When (Unix seconds).
    pub timestamp: i64,
    /// For `failed`: Meta's error code and title (`131047 Re-engagement message`).
    pub error: Option<(i64, String)>,
}

impl Status {
    /// The chat the message went to.
    pub fn chat(&self) -> ChatRef {
        ChatRef {
            id: self.recipient.clone(),
            kind: if self.group {
                ChatKind::Group
            } else {
                ChatKind::Direct
            },
            thread: None,
        }
    }
}

/// What one delivery carries, in order.
#[derive(Debug, Default)]
pub(super) struct Delivery {
    pub items: Vec<Inbound>,
    pub statuses: Vec<Status>,
    /// Every message a person sent, whatever its type (each opens its chat's 24-hour
    /// window — a location or an unsupported message too): the chat and when it was sent
    /// (Unix seconds).
    pub opened: Vec<(ChatRef, i64)>,
    /// Direct messages to mark read when the bot answers: the chat and the message's id.
    pub unread: Vec<(String, String)>,
}

/// The part of a change a message is read with: who is who.
struct Change<'a> {
    value: &'a Value,
    /// The business number's digits (how a mention of the bot and a quote of its message
    /// name it).
    bot: String,
}

impl Change<'_> {
    fn name_of(&self, wa_id: &str) -> Option<String> {
        self.value["contacts"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["wa_id"].as_str() == Some(wa_id))
            .and_then(|c| c["profile"]["name"].as_str())
            .map(str::to_string)
    }
}

fn digits(s: &str) -> String {
    s.chars().filter(char::is_ascii_digit).collect()
}

/// A Unix time Meta sent as a string (`"1717000000"`), no later than now.
fn unix(v: &Value) -> i64 {
    let now = chrono::Utc::now().timestamp();
    v.as_str()
        .and_then(|t| t.parse::<i64>().ok())
        .or_else(|| v.as_i64())
        .map_or(now, |t| t.min(now))
}

/// Reads a delivery (`{"object":"whatsapp_business_account","entry":[…]}`) for the
/// configured phone number (others are not ours and are skipped). With
/// `require_mention`, a group message not addressed to the bot is left out (it still
/// opens the group's window).
pub(super) fn read(cfg: &super::WhatsAppConfig, body: &Value) -> Result<Delivery, String> {
    let (channel, phone_number_id) = (cfg.name.as_str(), cfg.phone_number_id.as_str());
    if body.get("object").and_then(Value::as_str) != Some("whatsapp_business_account") {
        return Err("not a WhatsApp Business Account delivery".into());
    }
    let mut out = Delivery::default();
    let changes = body["entry"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["changes"].as_array().into_iter().flatten());
    for change in changes {
        if change["field"].as_str() != Some("messages") {
            continue;
        }
        let value = &change["value"];
        if value["metadata"]["phone_number_id"].as_str() != Some(phone_number_id) {
            continue;
        }
        let cx = Change {
            value,
            bot: digits(
                value["metadata"]["display_phone_number"]
                    .as_str()
                    .unwrap_or_default(),
            ),
        };
        for m in value["messages"].as_array().into_iter().flatten() {
            let (Some(from), Some(id)) = (m["from"].as_str(), m["id"].as_str()) else {
                continue;
            };
            let chat = chat_of(m, from);
            // A system message (a number changed) is WhatsApp's, not the person's.
            if m["type"].as_str() != Some("system") {
                out.opened.push((chat.clone(), unix(&m["timestamp"])));
            }
            if chat.kind == ChatKind::Direct {
                out.unread.push((chat.id.clone(), id.to_string()));
            }
            match message(channel, m, &cx) {
                Some(Inbound::Message(msg)) if cfg.require_mention && !msg.addressed => {}
                Some(item) => out.items.push(item),
                None => {}
            }
        }
        for s in value["statuses"].as_array().into_iter().flatten() {
            out.statuses.push(Status {
                message_id: s["id"].as_str().unwrap_or_default().to_string(),
                recipient: s["recipient_id"].as_str().unwrap_or_default().to_string(),
                group: s["recipient_type"].as_str() == Some("group"),
                status: s["status"].as_str().unwrap_or_default().to_string(),
                timestamp: unix(&s["timestamp"]),
                error: s["errors"].as_array().and_then(|e| e.first()).map(|e| {
                    (
                        // Documented as a number; some examples show a string.
                        e["code"]
                            .as_i64()
                            .or_else(|| e["code"].as_str().and_then(|c| c.parse().ok()))
                            .unwrap_or_default(),
                        e["title"].as_str().unwrap_or_default().to_string(),
                    )
                }),
            });
        }
    }
    Ok(out)
}

/// The chat a message is in: a group's (`group_id`, Meta's Groups API) or the sender's.
fn chat_of(m: &Value, from: &str) -> ChatRef {
    match m["group_id"].as_str().filter(|g| !g.is_empty()) {
        Some(group) => ChatRef {
            id: group.to_string(),
            kind: ChatKind::Group,
            thread: None,
        },
        None => ChatRef {
            id: from.to_string(),
            kind: ChatKind::Direct,
            thread: None,
        },
    }
}

/// One message object: text, media, a reply button pressed, a list choice, a reaction. In a group, a message is addressed to the bot when it mentions
/// the business number (`@15550001111`) or quotes one of the bot's messages.
fn message(channel: &str, m: &Value, cx: &Change<'_>) -> Option<Inbound> {
    let from = m["from"].as_str()?.to_string();
    let id = m["id"].as_str()?.to_string();
    let peer = Peer {
        name: cx.name_of(&from).unwrap_or_else(|| format!("+{from}")),
        username: Some(format!("+{from}")),
        id: from.clone(),
    };
    let chat = chat_of(m, &from);
    let context = m["context"]["id"].as_str().map(str::to_string);
    let kind = m["type"].as_str().unwrap_or_default();
    let (text, attachments) = match kind {
        "text" => (m["text"]["body"].as_str()?.to_string(), Vec::new()),
        // A template's quick-reply button ("Show me", on the template sent outside the
        // 24-hour window): it opens the window, which brings the held replies; it is no
        // message for the agent.
        "button" => return None,
        "interactive" => {
            let i = &m["interactive"];
            if let Some(title) = i["list_reply"]["title"].as_str() {
                (title.to_string(), Vec::new())
            } else {
                let reply = &i["button_reply"];
                return Some(Inbound::Press(ButtonPress {
                    channel: channel.to_string(),
                    press_id: id,
                    peer,
                    chat,
                    message_id: context?,
                    data: reply["id"].as_str()?.to_string(),
                    via: Default::default(),
                    reason: None,
                }));
            }
        }
        "reaction" => {
            let r = &m["reaction"];
            // An empty emoji takes a reaction back: nothing to answer.
            let key = r["emoji"].as_str().filter(|e| !e.is_empty())?;
            return Some(Inbound::Reaction(Reaction {
                channel: channel.to_string(),
                reaction_id: id,
                peer,
                chat,
                message_id: r["message_id"].as_str()?.to_string(),
                key: key.to_string(),
            }));
        }
        "image" | "document" | "audio" | "video" | "sticker" => {
            let media = &m[kind];
            let voice = kind == "audio" && media["voice"].as_bool() == Some(true);
            let attachment = Attachment {
                kind: match kind {
                    "image" | "sticker" => "photo",
                    "audio" if voice => "voice",
                    "audio" => "audio",
                    "video" => "video",
                    _ => "document",
                }
                .into(),
                name: media["filename"].as_str().map(str::to_string),
                size: None,
                mime: media["mime_type"].as_str().map(str::to_string),
                source: media["id"].as_str().map(str::to_string),
            };
            (
                media["caption"].as_str().unwrap_or_default().to_string(),
                vec![attachment],
            )
        }
        // Locations, contacts, orders, unsupported …: not for an agent (they still open
        // the window: see `read`).
        _ => return None,
    };
    let addressed = chat.kind == ChatKind::Direct
        || (!cx.bot.is_empty()
            && (text.contains(&format!("@{}", cx.bot))
                || m["context"]["from"]
                    .as_str()
                    .is_some_and(|f| digits(f) == cx.bot)));
    Some(Inbound::Message(InboundMessage {
        channel: channel.to_string(),
        peer,
        chat,
        text,
        message_id: id,
        addressed,
        attachments,
        reply_to: context,
        edited: false,
        meta: serde_json::json!({ "type": kind, "timestamp": m["timestamp"] }),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(number: &str, require_mention: bool) -> crate::whatsapp::WhatsAppConfig {
        let mut c = crate::whatsapp::WhatsAppConfig::new(number, "t", "s", "v");
        c.require_mention = require_mention;
        c
    }

    fn delivery(messages: Value) -> Value {
        json!({
            "object": "whatsapp_business_account",
            "entry": [{"id": "WABA", "changes": [{"field": "messages", "value": {
                "messaging_product": "whatsapp",
                "metadata": {"display_phone_number": "15550001111", "phone_number_id": "PN1"},
                "contacts": [{"profile": {"name": "Ann"}, "wa_id": "4915112345"}],
                "messages": messages,
                "statuses": [{"id": "wamid.out1", "status": "failed", "recipient_id": "4915112345",
                    "errors": [{"code": 131047, "title": "Re-engagement message"}]}],
            }}]}],
        })
    }

    #[test]
    fn the_signature_is_the_hmac_of_the_raw_body() {
        let body = br#"{"object":"whatsapp_business_account"}"#;
        let mut mac = Hmac::<Sha256>::new_from_slice(b"app-secret").unwrap();
        mac.update(body);
        let good = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert!(signed("app-secret", Some(&good), body));
        assert!(!signed("other-secret", Some(&good), body));
        assert!(!signed("app-secret", Some(&good), b"{}"));
        assert!(!signed("app-secret", None, body));
        assert!(!signed("app-secret", Some("sha1=00"), body));
    }

    #[test]
    fn the_subscription_check_echoes_the_challenge_for_the_right_token_only() {
        let q = |mode: &str, token: &str| {
            [
                ("hub.mode", mode),
                ("hub.verify_token", token),
                ("hub.challenge", "1158201444"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
        };
        assert_eq!(
            challenge("tok", &q("subscribe", "tok")).as_deref(),
            Some("1158201444")
        );
        assert_eq!(challenge("tok", &q("subscribe", "nope")), None);
        assert_eq!(challenge("tok", &q("unsubscribe", "tok")), None);
        assert_eq!(challenge("", &q("subscribe", "")), None);
    }

    #[test]
    fn messages_presses_reactions_media_and_statuses_are_read() {
        let d = read(
            &cfg("PN1", false),
            &delivery(json!([
                {"from": "4915112345", "id": "wamid.1", "timestamp": "1", "type": "text",
                 "text": {"body": "hi"}, "context": {"from": "15550001111", "id": "wamid.out0"}},
                {"from": "4915112345", "id": "wamid.2", "type": "interactive",
                 "context": {"id": "wamid.prompt"},
                 "interactive": {"type": "button_reply", "button_reply": {"id": "a:1", "title": "Allow"}}},
                {"from": "4915112345", "id": "wamid.3", "type": "reaction",
                 "reaction": {"message_id": "wamid.prompt", "emoji": "👍"}},
                {"from": "4915112345", "id": "wamid.4", "type": "audio",
                 "audio": {"id": "MEDIA4", "mime_type": "audio/ogg; codecs=opus", "voice": true}},
                {"from": "4915112345", "id": "wamid.5", "type": "document",
                 "document": {"id": "MEDIA5", "filename": "a.pdf", "mime_type": "application/pdf", "caption": "read"}},
                {"from": "4915112345", "id": "wamid.6", "type": "location", "location": {}},
            ])),
        )
        .unwrap();
        assert_eq!(d.items.len(), 5);
        let Inbound::Message(m) = &d.items[0] else {
            panic!()
        };
        assert_eq!((m.text.as_str(), m.peer.name.as_str()), ("hi", "Ann"));
        assert_eq!(m.reply_to.as_deref(), Some("wamid.out0"));
        let Inbound::Press(p) = &d.items[1] else {
            panic!()
        };
        assert_eq!(
            (p.message_id.as_str(), p.data.as_str()),
            ("wamid.prompt", "a:1")
        );
        let Inbound::Reaction(r) = &d.items[2] else {
            panic!()
        };
        assert_eq!(r.key, "👍");
        let Inbound::Message(v) = &d.items[3] else {
            panic!()
        };
        assert_eq!(v.attachments[0].kind, "voice");
        assert_eq!(v.attachments[0].source.as_deref(), Some("MEDIA4"));
        let Inbound::Message(doc) = &d.items[4] else {
            panic!()
        };
        assert_eq!(doc.text, "read");
        assert_eq!(doc.attachments[0].name.as_deref(), Some("a.pdf"));
        assert_eq!(
            d.statuses[0].error,
            Some((131047, "Re-engagement message".into()))
        );
        // Another number's delivery is not ours.
        assert!(
            read(&cfg("PN2", true), &delivery(json!([])))
                .unwrap()
                .items
                .is_empty()
        );
        assert!(read(&cfg("PN1", true), &json!({"object": "page"})).is_err());
    }

    #[test]
    fn groups_template_taps_lists_and_unsupported_messages_open_windows() {
        let now = chrono::Utc::now().timestamp();
        let d = read(
            &cfg("PN1", false),
            &delivery(json!([
                {"from": "4915112345", "group_id": "G1", "id": "wamid.g1", "timestamp": "1700000000",
                 "type": "text", "text": {"body": "lunch?"}},
                {"from": "4915112345", "group_id": "G1", "id": "wamid.g2", "type": "text",
                 "text": {"body": "@15550001111 what changed?"}},
                {"from": "4915112345", "group_id": "G1", "id": "wamid.g3", "type": "text",
                 "context": {"from": "15550001111", "id": "wamid.out9"}, "text": {"body": "and this"}},
                {"from": "4915112345", "id": "wamid.b", "type": "button",
                 "button": {"payload": "show", "text": "Show me"}},
                {"from": "4915112345", "id": "wamid.l", "type": "interactive",
                 "interactive": {"type": "list_reply", "list_reply": {"id": "r1", "title": "Option one"}}},
                {"from": "4915112345", "id": "wamid.u", "timestamp": (now + 99).to_string(), "type": "unsupported",
                 "errors": [{"code": 131051, "title": "Message type unknown"}]},
                {"from": "4915112345", "id": "wamid.s", "type": "system", "system": {"body": "changed number"}},
            ])),
        )
        .unwrap();
        let msgs: Vec<&InboundMessage> = d
            .items
            .iter()
            .filter_map(|i| match i {
                Inbound::Message(m) => Some(m),
                _ => None,
            })
            .collect();
        // Group messages are the group's, addressed by a mention or a quote of the bot.
        assert_eq!(msgs[0].chat.id, "G1");
        assert_eq!(msgs[0].chat.kind, ChatKind::Group);
        assert_eq!(msgs[0].peer.id, "4915112345");
        assert_eq!(
            msgs.iter().map(|m| m.addressed).collect::<Vec<_>>(),
            [false, true, true, true]
        );
        // A template's quick reply is no message; a list choice is its title.
        assert_eq!(msgs[3].text, "Option one");
        assert_eq!(d.items.len(), 4);
        // Every message but WhatsApp's own opens its chat's window, at its own time (never
        // later than now); group messages are not marked read.
        let opened: Vec<(&str, i64)> = d.opened.iter().map(|(c, t)| (c.id.as_str(), *t)).collect();
        assert_eq!(opened.len(), 6);
        assert_eq!(opened[0], ("G1", 1_700_000_000));
        assert!(
            opened[5].1 <= chrono::Utc::now().timestamp(),
            "clamped to now"
        );
        assert_eq!(
            d.unread
                .iter()
                .map(|(_, id)| id.as_str())
                .collect::<Vec<_>>(),
            ["wamid.b", "wamid.l", "wamid.u", "wamid.s"]
        );
        assert!(d.statuses[0].timestamp > 0);
        // With require_mention (the default), the chatter is left out; its window opens.
        let d = read(
            &cfg("PN1", true),
            &delivery(
                json!([{"from": "4915112345", "group_id": "G1", "id": "wamid.g1",
                "type": "text", "text": {"body": "lunch?"}}]),
            ),
        )
        .unwrap();
        assert!(d.items.is_empty());
        assert_eq!(d.opened.len(), 1);
    }
}
