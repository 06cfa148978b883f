//! The conversation in Messages form: `user` / `assistant` messages of content blocks.

use serde_json::{Map, Value, json};

use crate::provider::{ChatMessage, ChatRole};

/// The conversation in Messages form: strictly alternating `user` / `assistant` messages of
/// content blocks, starting with `user`. Tool calls become `tool_use` blocks, tool results
/// `tool_result` blocks of a user message (before any text of it), messages of the same role
/// are merged and empty text blocks dropped.
pub(super) fn wire_messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut merged: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            // Images first, then the text about them (as Anthropic advises).
            ChatRole::User => {
                let mut blocks: Vec<Value> = m
                    .images
                    .iter()
                    .map(|i| {
                        json!({
                            "type": "image",
                            "source": {"type": "base64", "media_type": i.mime, "data": i.base64},
                        })
                    })
                    .collect();
                blocks.extend(text_block(&m.content));
                ("user", blocks)
            }
            ChatRole::Assistant => {
                let mut blocks: Vec<Value> = text_block(&m.content).into_iter().collect();
                blocks.extend(m.tool_calls.iter().map(|c| {
                    json!({
                        "type": "tool_use",
                        "id": wire_id(&c.id),
                        "name": c.name,
                        "input": tool_input(&c.arguments),
                    })
                }));
                ("assistant", blocks)
            }
            ChatRole::Tool => {
                let mut block = json!({
                    "type": "tool_result",
                    "tool_use_id": wire_id(m.tool_call_id.as_deref().unwrap_or_default()),
                    "is_error": m.is_error,
                });
                if !m.content.is_empty() {
                    block["content"] = Value::String(m.content.clone());
                }
                ("user", vec![block])
            }
        };
        match merged.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => merged.push((role, blocks)),
        }
    }
    if merged.first().is_some_and(|(role, _)| *role == "assistant") {
        merged.insert(
            0,
            (
                "user",
                vec![json!({"type": "text", "text": "(conversation resumed)"})],
            ),
        );
    }
    merged
        .into_iter()
        .map(|(role, mut blocks)| {
            if role == "user" {
                // tool results must come first in their user message
                let (mut results, rest): (Vec<Value>, Vec<Value>) =
                    blocks.into_iter().partition(|b| b["type"] == "tool_result");
                results.extend(rest);
                blocks = results;
            }
            if blocks.is_empty() {
                let placeholder = if role == "assistant" {
                    "(no content)"
                } else {
                    "(empty message)"
                };
                blocks.push(json!({"type": "text", "text": placeholder}));
            }
            json!({"role": role, "content": blocks})
        })
        .collect()
}

/// A text block, unless `text` is empty (the API refuses empty text blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// A `tool_use` input: the arguments when they are an object, else `{"value": arguments}`.
fn tool_input(arguments: &Value) -> Value {
    match arguments {
        Value::Object(_) => arguments.clone(),
        other => {
            let mut wrapped = Map::new();
            wrapped.insert("value".into(), other.clone());
            Value::Object(wrapped)
        }
    }
}

/// A tool-call id in the form the Messages API accepts (`^[a-zA-Z0-9_-]+$`): ids from
/// another provider (a session that switched providers) may carry other characters. Applied
/// to `tool_use` and `tool_result` alike, so the pair still matches.
pub(super) fn wire_id(id: &str) -> String {
    let clean: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.is_empty() {
        "call".into()
    } else {
        clean
    }
}
