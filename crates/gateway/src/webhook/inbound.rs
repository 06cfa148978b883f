//! Reading an inbound webhook body: a strict JSON reader that names the field at fault.

use super::*;

pub(crate) fn as_object<'a>(
    value: &'a Value,
    path: &str,
) -> Result<&'a Map<String, Value>, String> {
    match value {
        Value::Object(map) => Ok(map),
        Value::Null => Err(format!("`{path}` is missing")),
        _ => Err(format!("`{path}` must be an object")),
    }
}

pub(crate) fn required_object<'a>(
    map: &'a Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<&'a Map<String, Value>, String> {
    as_object(map.get(key).unwrap_or(&Value::Null), path)
}

/// A required, non-empty id (string or integer), at most [`MAX_ID_BYTES`].
pub(crate) fn required_id(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<String, String> {
    let id = match map.get(key) {
        None | Some(Value::Null) => return Err(format!("`{path}` is missing")),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => n.to_string(),
        Some(_) => return Err(format!("`{path}` must be a string")),
    };
    if id.trim().is_empty() {
        return Err(format!("`{path}` must not be empty"));
    }
    if id.len() > MAX_ID_BYTES {
        return Err(format!(
            "`{path}` is {} bytes; the limit is {MAX_ID_BYTES}",
            id.len()
        ));
    }
    Ok(id)
}

/// An optional string (absent or null → `None`).
pub(crate) fn optional_string(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<String>, String> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("`{path}` must be a string or null")),
    }
}

/// A required string (may be empty), at most [`MAX_INBOUND_TEXT_BYTES`].
pub(crate) fn required_text(
    map: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<String, String> {
    let text = match map.get(key) {
        None | Some(Value::Null) => return Err(format!("`{path}` is missing")),
        Some(Value::String(s)) => s.clone(),
        Some(_) => return Err(format!("`{path}` must be a string")),
    };
    if text.len() > MAX_INBOUND_TEXT_BYTES {
        return Err(format!(
            "`{path}` is {} bytes; the limit is {MAX_INBOUND_TEXT_BYTES}",
            text.len()
        ));
    }
    Ok(text)
}

pub(crate) fn parse_peer(map: &Map<String, Value>) -> Result<Peer, String> {
    let peer = required_object(map, "peer", "peer")?;
    let id = required_id(peer, "id", "peer.id")?;
    let name = optional_string(peer, "name", "peer.name")?
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| id.clone());
    if name.len() > MAX_ID_BYTES {
        return Err(format!(
            "`peer.name` is {} bytes; the limit is {MAX_ID_BYTES}",
            name.len()
        ));
    }
    let username = optional_string(peer, "username", "peer.username")?.filter(|u| !u.is_empty());
    Ok(Peer { id, name, username })
}

pub(crate) fn parse_chat(map: &Map<String, Value>) -> Result<ChatRef, String> {
    let chat = required_object(map, "chat", "chat")?;
    let id = required_id(chat, "id", "chat.id")?;
    let kind = match chat.get("kind") {
        None | Some(Value::Null) => return Err("`chat.kind` is missing".into()),
        Some(Value::String(s)) => match s.as_str() {
            "direct" => ChatKind::Direct,
            "group" => ChatKind::Group,
            "thread" => ChatKind::Thread,
            other => {
                return Err(format!(
                    "`chat.kind` must be \"direct\", \"group\" or \"thread\" (got {other:?})"
                ));
            }
        },
        Some(_) => {
            return Err("`chat.kind` must be \"direct\", \"group\" or \"thread\"".into());
        }
    };
    let thread = match chat.get("thread") {
        None | Some(Value::Null) => None,
        Some(_) => Some(required_id(chat, "thread", "chat.thread")?),
    };
    Ok(ChatRef { id, kind, thread })
}

/// Parses a verified inbound body into an [`Inbound`] for channel `name` (the channel's
/// full name as [`Channel::name`] gives it, e.g. `webhook:ops`, used verbatim). The
/// formats are in the [module docs](self). Errors name the offending field.
pub fn parse_inbound(name: &str, body: &[u8]) -> Result<Inbound, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("body is not valid JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err("body must be a JSON object".into());
    };
    let kind = match map.get("type") {
        None | Some(Value::Null) => return Err("`type` is missing".into()),
        Some(Value::String(s)) => s.as_str(),
        Some(_) => return Err("`type` must be a string".into()),
    };
    match kind {
        "message" => {
            let peer = parse_peer(&map)?;
            let chat = parse_chat(&map)?;
            let message_id = required_id(&map, "message_id", "message_id")?;
            let text = required_text(&map, "text", "text")?;
            let attachments: Vec<Attachment> = match map.get("attachments") {
                None | Some(Value::Null) => Vec::new(),
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| format!("`attachments` is malformed: {e}"))?,
            };
            if text.trim().is_empty() && attachments.is_empty() {
                return Err("`text` must not be empty (unless there are attachments)".into());
            }
            let extra: Map<String, Value> = map
                .iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "type"
                            | "peer"
                            | "chat"
                            | "text"
                            | "message_id"
                            | "attachments"
                            | "reply_to"
                    )
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let reply_to = match map.get("reply_to") {
                None | Some(Value::Null) => None,
                Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
                Some(_) => {
                    return Err("`reply_to` must be a non-empty string (a message id)".into());
                }
            };
            let meta = if extra.is_empty() {
                Value::Null
            } else {
                Value::Object(extra)
            };
            Ok(Inbound::Message(InboundMessage {
                channel: name.to_string(),
                peer,
                chat,
                text,
                message_id,
                addressed: true,
                attachments,
                reply_to,
                edited: false,
                meta,
            }))
        }
        "press" => {
            let press_id = required_id(&map, "press_id", "press_id")?;
            let peer = parse_peer(&map)?;
            let chat = parse_chat(&map)?;
            let message_id = required_id(&map, "message_id", "message_id")?;
            let data = required_text(&map, "data", "data")?;
            Ok(Inbound::Press(ButtonPress {
                channel: name.to_string(),
                press_id,
                peer,
                chat,
                message_id,
                data,
                via: Default::default(),
                reason: None,
            }))
        }
        "reaction" => {
            let reaction_id = required_id(&map, "reaction_id", "reaction_id")?;
            let peer = parse_peer(&map)?;
            let chat = parse_chat(&map)?;
            let message_id = required_id(&map, "message_id", "message_id")?;
            let key = required_text(&map, "key", "key")?;
            if key.trim().is_empty() {
                return Err("`key` must not be empty (the emoji)".into());
            }
            Ok(Inbound::Reaction(Reaction {
                channel: name.to_string(),
                reaction_id,
                peer,
                chat,
                message_id,
                key,
            }))
        }
        other => Err(format!(
            "`type` must be \"message\", \"press\" or \"reaction\" (got {other:?})"
        )),
    }
}
