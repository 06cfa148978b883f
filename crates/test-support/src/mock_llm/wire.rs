//! The OpenAI chat-completions wire format: streamed chunks and whole completions built from a
//! [`MockReply`]. Pure functions; the server in `mod.rs` does the I/O.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::reply::{MockReply, MockToolCall};

/// Id of every completion the mock produces.
pub(crate) const COMPLETION_ID: &str = "chatcmpl-1";

/// The last frame of every successful stream.
pub(crate) const DONE_FRAME: &[u8] = b"data: [DONE]\n\n";

/// One frame of a streamed body and the delay before it is sent.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Frame {
    pub delay: Duration,
    pub bytes: Bytes,
}

impl Frame {
    fn data(delay: Duration, value: &Value) -> Self {
        Self {
            delay,
            bytes: Bytes::from(format!("data: {value}\n\n")),
        }
    }
}

/// What the mock needs from a request body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RequestInfo {
    pub model: String,
    pub stream: bool,
    pub include_usage: bool,
    /// A rough, deterministic count: message characters / 4, rounded up, at least 1.
    pub prompt_tokens: u64,
    /// Seconds since the epoch, for `created`.
    pub created: u64,
}

impl RequestInfo {
    pub(crate) fn from_body(body: &Value, created: u64) -> Self {
        let chars: usize = body["messages"]
            .as_array()
            .map(|msgs| msgs.iter().map(|m| content_chars(&m["content"])).sum())
            .unwrap_or(0);
        Self {
            model: body["model"].as_str().unwrap_or("mock-model").to_owned(),
            stream: body["stream"].as_bool().unwrap_or(false),
            include_usage: body["stream_options"]["include_usage"]
                .as_bool()
                .unwrap_or(false),
            prompt_tokens: (chars as u64).div_ceil(4).max(1),
            created,
        }
    }

    fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    }
}

/// Characters of a message `content`: a string, or an array of `{"type":"text","text":..}`.
fn content_chars(content: &Value) -> usize {
    match content {
        Value::String(s) => s.chars().count(),
        Value::Array(parts) => parts.iter().map(|p| content_chars(&p["text"])).sum(),
        _ => 0,
    }
}

/// `usage` object.
pub(crate) fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    })
}

/// Splits `s` into 2–3 non-empty pieces on character boundaries (1 piece when too short).
pub(crate) fn split_pieces(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let n = chars.len();
    let cuts: Vec<usize> = match n {
        0 | 1 => vec![0, n],
        2..=5 => vec![0, n / 2, n],
        _ => vec![0, n / 3, 2 * n / 3, n],
    };
    cuts.windows(2)
        .filter_map(|w| match w {
            [a, b] if a < b => chars.get(*a..*b).map(|c| c.iter().collect()),
            _ => None,
        })
        .collect()
}

/// The deltas of a text or tool-call reply, its finish reason and the delay between chunks.
fn deltas(reply: &MockReply) -> Option<(Vec<Value>, &'static str, u64)> {
    match reply {
        MockReply::Text { chunks, delay_ms } => Some((text_deltas(chunks), "stop", *delay_ms)),
        MockReply::ToolCalls {
            text,
            calls,
            delay_ms,
        } => {
            let mut out = match text {
                Some(text) => text_deltas(std::slice::from_ref(text)),
                None => Vec::new(),
            };
            for (index, call) in calls.iter().enumerate() {
                let mut head = json!({"tool_calls": [{
                    "index": index,
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]});
                if out.is_empty() {
                    head["role"] = json!("assistant");
                    head["content"] = Value::Null;
                }
                out.push(head);
                for piece in split_pieces(&call.arguments_text()) {
                    out.push(json!({"tool_calls": [{
                        "index": index,
                        "function": {"arguments": piece},
                    }]}));
                }
            }
            Some((out, "tool_calls", *delay_ms))
        }
        _ => None,
    }
}

fn text_deltas(chunks: &[String]) -> Vec<Value> {
    if chunks.is_empty() {
        return vec![json!({"role": "assistant", "content": ""})];
    }
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i == 0 {
                json!({"role": "assistant", "content": c})
            } else {
                json!({"content": c})
            }
        })
        .collect()
}

/// The frames of a streamed [`MockReply::Text`] or [`MockReply::ToolCalls`]: the deltas, the
/// finishing chunk, the usage chunk when asked for, `[DONE]`. `None` for other replies.
pub(crate) fn stream_frames(info: &RequestInfo, reply: &MockReply) -> Option<Vec<Frame>> {
    let (deltas, finish, delay_ms) = deltas(reply)?;
    let delay = Duration::from_millis(delay_ms);
    let completion_tokens = deltas.len() as u64;
    let mut frames: Vec<Frame> = deltas
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            Frame::data(
                if i == 0 { Duration::ZERO } else { delay },
                &info.chunk(d, None),
            )
        })
        .collect();
    frames.push(Frame::data(delay, &info.chunk(json!({}), Some(finish))));
    if info.include_usage {
        let chunk = json!({
            "id": COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": info.created,
            "model": info.model,
            "choices": [],
            "usage": usage(info.prompt_tokens, completion_tokens),
        });
        frames.push(Frame::data(Duration::ZERO, &chunk));
    }
    frames.push(Frame {
        delay: Duration::ZERO,
        bytes: Bytes::from_static(DONE_FRAME),
    });
    Some(frames)
}

/// The content frames of a [`MockReply::CutOff`] (the caller then breaks the connection).
pub(crate) fn cut_off_frames(info: &RequestInfo, chunks: &[String]) -> Vec<Frame> {
    text_deltas(chunks)
        .into_iter()
        .map(|d| Frame::data(Duration::ZERO, &info.chunk(d, None)))
        .collect()
}

/// The frames of a [`MockReply::StreamError`]: a role delta, then an `error` object in a data
/// frame (the stream then ends without a finish reason or `[DONE]`).
pub(crate) fn stream_error_frames(info: &RequestInfo, message: &str) -> Vec<Frame> {
    vec![
        Frame::data(
            Duration::ZERO,
            &info.chunk(json!({"role": "assistant", "content": ""}), None),
        ),
        Frame::data(
            Duration::ZERO,
            &json!({"error": {"message": message, "type": "server_error", "code": null}}),
        ),
    ]
}

/// A whole (non-streamed) `chat.completion` for a text or tool-call reply.
pub(crate) fn completion(info: &RequestInfo, reply: &MockReply) -> Option<Value> {
    let (text, calls, finish): (Option<String>, &[MockToolCall], &str) = match reply {
        MockReply::Text { chunks, .. } => (Some(chunks.concat()), &[], "stop"),
        MockReply::ToolCalls { text, calls, .. } => (text.clone(), calls, "tool_calls"),
        _ => return None,
    };
    let mut message = json!({"role": "assistant", "content": text});
    if !calls.is_empty() {
        message["tool_calls"] = calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments_text()},
                })
            })
            .collect();
    }
    let completion_tokens = deltas(reply).map(|(d, _, _)| d.len() as u64).unwrap_or(1);
    Some(json!({
        "id": COMPLETION_ID,
        "object": "chat.completion",
        "created": info.created,
        "model": info.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage(info.prompt_tokens, completion_tokens),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_rejoin_and_respect_char_boundaries() {
        for s in [
            "",
            "a",
            "ab",
            "{\"x\":1}",
            "{\"path\":\"é✓/file.txt\",\"n\":42}",
        ] {
            let pieces = split_pieces(s);
            assert_eq!(pieces.concat(), s);
            assert!(pieces.len() <= 3);
            assert!(
                s.chars().count() < 2 || pieces.len() >= 2,
                "{s:?} → {pieces:?}"
            );
            assert!(pieces.iter().all(|p| !p.is_empty()) || s.is_empty());
        }
    }

    #[test]
    fn prompt_tokens_are_counted_from_messages() {
        let body = json!({"model": "m", "messages": [
            {"role": "user", "content": "12345678"},
            {"role": "user", "content": [{"type": "text", "text": "1234"}]},
        ]});
        let info = RequestInfo::from_body(&body, 0);
        assert_eq!(
            (info.prompt_tokens, info.model.as_str(), info.stream),
            (3, "m", false)
        );
    }
}
