//! What the mock LLM answers: [`MockReply`] and its helpers.

/// One scripted answer of the mock LLM.
#[derive(Debug, Clone, PartialEq)]
pub enum MockReply {
    /// Streams `chunks` as content deltas, then `finish_reason: "stop"`. `delay_ms` is waited
    /// before every chunk after the first, and before the finishing chunk.
    Text { chunks: Vec<String>, delay_ms: u64 },
    /// Streams `text` (if any) as one content delta, then each call the OpenAI way: a first
    /// delta with `index`, `id`, `type: "function"`, `function.name` and empty `arguments`, then
    /// the arguments in 2–3 pieces; then `finish_reason: "tool_calls"`.
    ToolCalls {
        text: Option<String>,
        calls: Vec<MockToolCall>,
        delay_ms: u64,
    },
    /// Answers `status` with `body` (as JSON when it parses, else as text).
    Status { status: u16, body: String },
    /// A 200 event stream whose first data line is not JSON (`data: {not json`).
    Malformed,
    /// Streams `chunks` as content deltas, then drops the connection without a finish reason
    /// or `[DONE]`.
    CutOff { chunks: Vec<String> },
    /// Sends 200 and the headers, then nothing, until the mock is dropped.
    Hang,
    /// A 200 event stream that starts, then reports an error inside the stream and ends.
    /// OpenAI route: a role delta, then `data: {"error":{"message":…,"type":"server_error"}}`.
    /// Anthropic route: `message_start`, then an `error` event with an `overloaded_error`.
    StreamError { message: String },
}

/// A tool call the mock proposes.
#[derive(Debug, Clone, PartialEq)]
pub struct MockToolCall {
    pub id: String,
    pub name: String,
    /// The arguments. Sent JSON-encoded, except that a JSON string is sent verbatim (so a
    /// test can send arguments that are not valid JSON).
    pub arguments: serde_json::Value,
}

impl MockToolCall {
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: serde_json::Value,
    ) -> Self {
        Self {
            id: id.into(),
            name: name.into(),
            arguments,
        }
    }

    /// The `function.arguments` string sent on the wire.
    pub(crate) fn arguments_text(&self) -> String {
        match &self.arguments {
            serde_json::Value::String(raw) => raw.clone(),
            other => other.to_string(),
        }
    }
}

impl MockReply {
    /// Text streamed in the given pieces, without delay.
    pub fn text(chunks: &[&str]) -> Self {
        Self::text_slow(chunks, 0)
    }

    /// Text streamed in the given pieces, `delay_ms` apart.
    pub fn text_slow(chunks: &[&str], delay_ms: u64) -> Self {
        Self::Text {
            chunks: chunks.iter().map(|c| (*c).to_owned()).collect(),
            delay_ms,
        }
    }

    /// One tool call, without text.
    pub fn tool_call(id: &str, name: &str, arguments: serde_json::Value) -> Self {
        Self::tool_calls(vec![MockToolCall::new(id, name, arguments)])
    }

    /// Several tool calls, without text.
    pub fn tool_calls(calls: Vec<MockToolCall>) -> Self {
        Self::ToolCalls {
            text: None,
            calls,
            delay_ms: 0,
        }
    }

    /// A non-2xx answer.
    pub fn status(status: u16, body: impl Into<String>) -> Self {
        Self::Status {
            status,
            body: body.into(),
        }
    }

    /// A stream cut after the given content pieces.
    pub fn cut_off(chunks: &[&str]) -> Self {
        Self::CutOff {
            chunks: chunks.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    /// An error reported inside a started stream.
    pub fn stream_error(message: impl Into<String>) -> Self {
        Self::StreamError {
            message: message.into(),
        }
    }

    /// What a fresh mock answers: `"Hello from mock"` in three pieces.
    pub fn default_text() -> Self {
        Self::text(&["Hello", " from", " mock"])
    }
}
