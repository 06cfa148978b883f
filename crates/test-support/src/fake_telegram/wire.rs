//! Telegram's JSON objects (users, messages, entities, keyboards) as the fake renders them.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::FakeTelegram;

pub(super) fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

pub(super) fn bot_user() -> Value {
    json!({
        "id": FakeTelegram::BOT_ID,
        "is_bot": true,
        "first_name": FakeTelegram::BOT_NAME,
        "username": FakeTelegram::BOT_USERNAME,
    })
}

pub(super) fn user_json(user_id: i64, first_name: &str) -> Value {
    json!({
        "id": user_id,
        "is_bot": false,
        "first_name": first_name,
        "language_code": "en",
    })
}

pub(super) fn message_id_of(message: &Map<String, Value>) -> i64 {
    message
        .get("message_id")
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

/// A user's text message (without `chat`), with the entities Telegram would detect.
pub(super) fn user_message(
    message_id: i64,
    user_id: i64,
    first_name: &str,
    text: &str,
) -> Map<String, Value> {
    let mut msg = Map::new();
    msg.insert("message_id".into(), json!(message_id));
    msg.insert("from".into(), user_json(user_id, first_name));
    msg.insert("date".into(), json!(now()));
    msg.insert("text".into(), json!(text));
    let entities = entities(text);
    if !entities.is_empty() {
        msg.insert("entities".into(), Value::Array(entities));
    }
    msg
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `mention` entities (`@name`, 5–32 name characters) and a leading `bot_command`, with
/// offsets and lengths in UTF-16 code units as on Telegram.
pub(super) fn entities(text: &str) -> Vec<Value> {
    let chars: Vec<char> = text.chars().collect();
    let mut utf16_at = Vec::with_capacity(chars.len() + 1);
    let mut pos = 0usize;
    for c in &chars {
        utf16_at.push(pos);
        pos += c.len_utf16();
    }
    utf16_at.push(pos);
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let starts_word = i == 0 || !is_name_char(chars[i - 1]);
        if chars[i] == '/' && i == 0 {
            let mut j = 1;
            while j < chars.len() && (is_name_char(chars[j]) || chars[j] == '@') {
                j += 1;
            }
            if j > 1 {
                out.push(json!({"type": "bot_command", "offset": 0, "length": utf16_at[j]}));
                i = j;
                continue;
            }
        }
        if chars[i] == '@' && starts_word {
            let mut j = i + 1;
            while j < chars.len() && is_name_char(chars[j]) {
                j += 1;
            }
            if (5..=32).contains(&(j - i - 1)) {
                out.push(json!({
                    "type": "mention",
                    "offset": utf16_at[i],
                    "length": utf16_at[j] - utf16_at[i],
                }));
            }
            i = j.max(i + 1);
            continue;
        }
        i += 1;
    }
    out
}

pub(super) fn keyboard_json(buttons: &[(String, String)]) -> Value {
    let row: Vec<Value> = buttons
        .iter()
        .map(|(text, data)| json!({"text": text, "callback_data": data}))
        .collect();
    json!({"inline_keyboard": [row]})
}
