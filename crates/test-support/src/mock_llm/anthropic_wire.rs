//! The Anthropic Messages wire format: streamed events, whole messages and error bodies built
//! from a [`MockReply`]. Pure functions; the server in `mod.rs` does the I/O.
//!
//! Every streamed frame carries an `event:` line and a `data:` line whose JSON repeats the
//! event name in `"type"`, as the real API sends them:
//!
//! ```text
//! event: message_start
//! data: {"type":"message_start","message":{...,"usage":{"input_tokens":N,"output_tokens":1}}}
//!
//! event: content_block_start / ping / content_block_delta… / content_block_stop
//! event: message_delta   (stop_reason, usage.output_tokens)
//! event: message_stop
//! ```

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::reply::{MockReply, MockToolCall};
use super::wire::{Frame, split_pieces};

/// Id of every message the mock produces.
pub(crate) const MESSAGE_ID: &str = "msg_01MockMessage";

/// What the mock needs from a Messages request body.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MessagesRequest {
    pub model: String,
    pub stream: bool,
    /// A rough, deterministic count: system and message characters / 4, rounded up, at least 1.
    pub input_tokens: u64,
}

impl MessagesRequest {
    pub(crate) fn from_body(body: &Value) -> Self {
        let mut chars = content_chars(&body["system"]);
        if let Some(messages) = body["messages"].as_array() {
            chars += messages
                .iter()
                .map(|m| content_chars(&m["content"]))
                .sum::<usize>();
        }
        Self {
            model: body["model"].as_str().unwrap_or("mock-model").to_owned(),
            stream: body["stream"].as_bool().unwrap_or(false),
            input_tokens: (chars as u64).div_ceil(4).max(1),
        }
    }

    fn message_start(&self) -> Value {
        json!({"type": "message_start", "message": {
            "id": MESSAGE_ID,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 1},
        }})
    }
}

/// Characters of a `system` or message `content`: a string, or an array of blocks (`text`,
/// `tool_result` with its own content, `tool_use` counted by its JSON input).
fn content_chars(content: &Value) -> usize {
    match content {
        Value::String(s) => s.chars().count(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|b| match b["type"].as_str() {
                Some("tool_result") => content_chars(&b["content"]),
                Some("tool_use") => b["input"].to_string().chars().count(),
                _ => content_chars(&b["text"]),
            })
            .sum(),
        _ => 0,
    }
}

/// One `event:` + `data:` frame.
fn event(delay: Duration, data: &Value) -> Frame {
    let name = data["type"].as_str().unwrap_or("unknown");
    Frame {
        delay,
        bytes: Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
    }
}

/// The content blocks of a text or tool-call reply as (start block, deltas), its stop reason
/// and the delay between deltas.
type Blocks = (Vec<(Value, Vec<Value>)>, &'static str, u64);

fn blocks(reply: &MockReply) -> Option<Blocks> {
    match reply {
        MockReply::Text { chunks, delay_ms } => {
            Some((vec![text_block(chunks)], "end_turn", *delay_ms))
        }
        MockReply::ToolCalls {
            text,
            calls,
            delay_ms,
        } => {
            let mut out = Vec::new();
            if let Some(text) = text {
                out.push(text_block(std::slice::from_ref(text)));
            }
            out.extend(calls.iter().map(tool_use_block));
            Some((out, "tool_use", *delay_ms))
        }
        _ => None,
    }
}

fn text_block(chunks: &[String]) -> (Value, Vec<Value>) {
    (
        json!({"type": "text", "text": ""}),
        chunks
            .iter()
            .filter(|c| !c.is_empty())
            .map(|c| json!({"type": "text_delta", "text": c}))
            .collect(),
    )
}

/// A `tool_use` block: the start with an empty `input`, then (as the real API does) an empty
/// `partial_json` followed by the input JSON in 2–3 pieces.
fn tool_use_block(call: &MockToolCall) -> (Value, Vec<Value>) {
    let start = json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}});
    let deltas = std::iter::once(String::new())
        .chain(split_pieces(&call.arguments_text()))
        .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
        .collect();
    (start, deltas)
}

/// Frames of the given blocks, from `message_start` up to the last `content_block_stop`.
/// Returns the frames and the number of deltas.
fn block_frames(
    info: &MessagesRequest,
    blocks: Vec<(Value, Vec<Value>)>,
    delay: Duration,
) -> (Vec<Frame>, u64) {
    let mut frames = vec![event(Duration::ZERO, &info.message_start())];
    let mut deltas_sent = 0u64;
    for (index, (start, deltas)) in blocks.into_iter().enumerate() {
        frames.push(event(
            Duration::ZERO,
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        if index == 0 {
            frames.push(event(Duration::ZERO, &json!({"type": "ping"})));
        }
        for delta in deltas {
            let wait = if deltas_sent == 0 {
                Duration::ZERO
            } else {
                delay
            };
            deltas_sent += 1;
            frames.push(event(
                wait,
                &json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        frames.push(event(
            Duration::ZERO,
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    (frames, deltas_sent)
}

/// The frames of a streamed [`MockReply::Text`] or [`MockReply::ToolCalls`]; `None` for other
/// replies.
pub(crate) fn stream_frames(info: &MessagesRequest, reply: &MockReply) -> Option<Vec<Frame>> {
    let (blocks, stop_reason, delay_ms) = blocks(reply)?;
    let delay = Duration::from_millis(delay_ms);
    let (mut frames, deltas) = block_frames(info, blocks, delay);
    frames.push(event(
        delay,
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": deltas.max(1)},
        }),
    ));
    frames.push(event(Duration::ZERO, &json!({"type": "message_stop"})));
    Some(frames)
}

/// The frames of a [`MockReply::CutOff`]: a text block's deltas, without its stop or the end
/// of the message (the caller then breaks the connection).
pub(crate) fn cut_off_frames(info: &MessagesRequest, chunks: &[String]) -> Vec<Frame> {
    let (mut frames, _) = block_frames(info, vec![text_block(chunks)], Duration::ZERO);
    // the block is not finished either
    frames.pop();
    frames
}

/// The frames of a [`MockReply::StreamError`]: `message_start`, then an `error` event with an
/// `overloaded_error`.
pub(crate) fn stream_error_frames(info: &MessagesRequest, message: &str) -> Vec<Frame> {
    vec![
        event(Duration::ZERO, &info.message_start()),
        event(
            Duration::ZERO,
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": message}}),
        ),
    ]
}

/// The frames of a [`MockReply::Malformed`]: an event whose data is not JSON.
pub(crate) fn malformed_frames() -> Vec<Frame> {
    vec![Frame {
        delay: Duration::ZERO,
        bytes: Bytes::from_static(b"event: message_start\ndata: {not json\n\n"),
    }]
}

/// The Anthropic error `type` for an HTTP status.
pub(crate) fn error_type(status: u16) -> &'static str {
    match status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    }
}

/// The body of a [`MockReply::Status`] answer: the scripted body when it is JSON, else an
/// Anthropic error object carrying it as the message.
pub(crate) fn error_body(status: u16, body: &str) -> String {
    if serde_json::from_str::<Value>(body).is_ok() {
        return body.to_owned();
    }
    json!({"type": "error", "error": {"type": error_type(status), "message": body}}).to_string()
}

/// A whole (non-streamed) message for a text or tool-call reply.
pub(crate) fn message(info: &MessagesRequest, reply: &MockReply) -> Option<Value> {
    let (text, calls, stop_reason): (Option<String>, &[MockToolCall], &str) = match reply {
        MockReply::Text { chunks, .. } => (Some(chunks.concat()), &[], "end_turn"),
        MockReply::ToolCalls { text, calls, .. } => (text.clone(), calls, "tool_use"),
        _ => return None,
    };
    let mut content: Vec<Value> = text
        .filter(|t| !t.is_empty())
        .map(|t| json!({"type": "text", "text": t}))
        .into_iter()
        .collect();
    for call in calls {
        let input = serde_json::from_str::<Value>(&call.arguments_text())
            .unwrap_or_else(|_| Value::String(call.arguments_text()));
        content.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    let output_tokens = blocks(reply)
        .map(|(b, _, _)| b.iter().map(|(_, d)| d.len() as u64).sum::<u64>())
        .unwrap_or(1)
        .max(1);
    Some(json!({
        "id": MESSAGE_ID,
        "type": "message",
        "role": "assistant",
        "model": info.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {"input_tokens": info.input_tokens, "output_tokens": output_tokens},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> MessagesRequest {
        MessagesRequest::from_body(&json!({
            "model": "claude-test",
            "stream": true,
            "system": "12345678",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "1234"}]},
                {"role": "user", "content": "1234"},
            ],
        }))
    }

    /// (event name, data) of each frame; checks both lines are there and agree.
    fn events(frames: &[Frame]) -> Vec<(String, Value)> {
        frames
            .iter()
            .map(|f| {
                let text = std::str::from_utf8(&f.bytes).unwrap();
                let rest = text.strip_suffix("\n\n").unwrap();
                let (ev, data) = rest.split_once('\n').unwrap();
                let name = ev.strip_prefix("event: ").unwrap().to_owned();
                let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap())
                    .unwrap_or(Value::Null);
                if !data.is_null() {
                    assert_eq!(data["type"], name.as_str());
                }
                (name, data)
            })
            .collect()
    }

    #[test]
    fn request_info() {
        let info = info();
        assert_eq!(
            (info.model.as_str(), info.stream, info.input_tokens),
            ("claude-test", true, 4)
        );
    }

    #[test]
    fn text_stream_events() {
        let frames = stream_frames(&info(), &MockReply::text(&["Hel", "lo"])).unwrap();
        let ev = events(&frames);
        let names: Vec<&str> = ev.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ]
        );
        assert_eq!(ev[0].1["message"]["usage"]["input_tokens"], 4);
        assert_eq!(
            ev[3].1["delta"],
            json!({"type": "text_delta", "text": "Hel"})
        );
        assert_eq!(ev[6].1["delta"]["stop_reason"], "end_turn");
        assert_eq!(ev[6].1["usage"]["output_tokens"], 2);
    }

    #[test]
    fn tool_use_stream_events() {
        let reply = MockReply::ToolCalls {
            text: Some("Let me look.".into()),
            calls: vec![MockToolCall::new(
                "toolu_1",
                "view",
                json!({"path": "src/main.rs"}),
            )],
            delay_ms: 0,
        };
        let ev = events(&stream_frames(&info(), &reply).unwrap());
        let starts: Vec<&Value> = ev
            .iter()
            .filter(|(n, _)| n == "content_block_start")
            .map(|(_, d)| d)
            .collect();
        assert_eq!(starts[1]["index"], 1);
        assert_eq!(starts[1]["content_block"]["id"], "toolu_1");
        assert_eq!(starts[1]["content_block"]["name"], "view");
        let json: Vec<&str> = ev
            .iter()
            .filter(|(_, d)| d["index"] == 1)
            .filter_map(|(_, d)| d["delta"]["partial_json"].as_str())
            .collect();
        assert!(json.len() >= 3, "{json:?}");
        assert_eq!(
            serde_json::from_str::<Value>(&json.concat()).unwrap(),
            json!({"path": "src/main.rs"})
        );
        let delta = &ev[ev.len() - 2].1;
        assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    }

    #[test]
    fn errors() {
        let v: Value = serde_json::from_str(&error_body(529, "busy")).unwrap();
        assert_eq!(
            v,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})
        );
        assert_eq!(error_body(400, "{\"x\":1}"), "{\"x\":1}");
        let ev = events(&stream_error_frames(&info(), "Overloaded"));
        assert_eq!(ev[1].1["error"]["type"], "overloaded_error");
        let cut = events(&cut_off_frames(&info(), &["a".into()]));
        assert_eq!(cut.last().unwrap().0, "content_block_delta");
    }

    #[test]
    fn whole_message() {
        let reply = MockReply::tool_call("toolu_2", "run", json!({"cmd": "ls"}));
        let m = message(&info(), &reply).unwrap();
        assert_eq!(m["stop_reason"], "tool_use");
        assert_eq!(
            m["content"],
            json!([{"type": "tool_use", "id": "toolu_2", "name": "run", "input": {"cmd": "ls"}}])
        );
    }
}
