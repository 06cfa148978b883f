//! Discord's JSON objects (users, messages, components) as the fake renders them.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::{DiscordMessage, FakeDiscord};

pub(super) fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    format!("{secs}")
}

pub(super) fn user_json(id: &str, username: &str) -> Value {
    json!({
        "id": id,
        "username": username,
        "global_name": null,
        "discriminator": "0",
        "avatar": null,
    })
}

pub(super) fn bot_user_json() -> Value {
    json!({
        "id": FakeDiscord::BOT_ID,
        "username": FakeDiscord::BOT_USERNAME,
        "global_name": null,
        "discriminator": "0",
        "avatar": null,
        "bot": true,
    })
}

fn components_json(buttons: &[(String, String)]) -> Value {
    if buttons.is_empty() {
        return json!([]);
    }
    let rows: Vec<Value> = buttons
        .chunks(5)
        .map(|row| {
            let row: Vec<Value> = row
                .iter()
                .map(|(label, id)| json!({"type": 2, "style": 2, "label": label, "custom_id": id}))
                .collect();
            json!({"type": 1, "components": row})
        })
        .collect();
    Value::Array(rows)
}

pub(super) fn message_json(channel: &str, m: &DiscordMessage) -> Value {
    let mut v = json!({
        "id": m.id,
        "type": if m.reply_to.is_some() { 19 } else { 0 },
        "channel_id": channel,
        "author": bot_user_json(),
        "content": m.content,
        "timestamp": timestamp(),
        "edited_timestamp": if m.edits > 0 { json!(timestamp()) } else { Value::Null },
        "tts": false,
        "mention_everyone": false,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": false,
        "flags": 0,
        "components": components_json(&m.components),
    });
    if let Some(r) = &m.reply_to {
        v["message_reference"] = json!({"type": 0, "message_id": r, "channel_id": channel});
    }
    v
}
