//! Anthropic Messages API, streaming.
//!
//! `POST /v1/messages` with `stream: true`; the reply is an event stream whose `data:`
//! payloads each carry their own `"type"` (`message_start`, `content_block_start`,
//! `content_block_delta`, `content_block_stop`, `message_delta`, `message_stop`, `ping`,
//! `error`), so the `event:` lines are not needed. Unknown event, block and delta types are
//! ignored, as the API's versioning policy asks of clients.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use switchboard_protocol::Usage;
use tokio_util::sync::CancellationToken;

use crate::provider::http::{excerpt, root_cause};
use crate::provider::{
    ChatMessage, ChatRole, Completion, Provider, ProviderError, StreamedToolCall, TextSink,
    ToolSpec, http,
};
use crate::sse::DataLines;

/// The API version sent in `anthropic-version`.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// Where and how to reach the Anthropic API.
#[derive(Clone)]
pub struct AnthropicConfig {
    /// E.g. `https://api.anthropic.com` (a trailing `/v1` is accepted too).
    pub base_url: String,
    /// Sent as `x-api-key`.
    pub api_key: Option<String>,
    /// Retries of a request that failed before any reply arrived (connect error, 429, 5xx,
    /// 529).
    pub max_retries: u32,
    pub connect_timeout: Duration,
    /// Longest silence tolerated inside a streaming reply.
    pub idle_timeout: Duration,
    /// `max_tokens` of every request (the API requires it).
    pub max_tokens: u32,
}

impl std::fmt::Debug for AnthropicConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("max_retries", &self.max_retries)
            .field("connect_timeout", &self.connect_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("max_tokens", &self.max_tokens)
            .finish()
    }
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.anthropic.com".into(),
            api_key: None,
            max_retries: 2,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            max_tokens: 8192,
        }
    }
}

/// Streaming client for the Anthropic Messages API.
#[derive(Clone)]
pub struct AnthropicProvider {
    http: reqwest::Client,
    config: AnthropicConfig,
}

/// One `data:` payload of the stream.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: MessageStart,
    },
    ContentBlockStart {
        index: usize,
        content_block: BlockStart,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    ContentBlockStop,
    MessageDelta {
        #[serde(default)]
        delta: MessageDeltaBody,
        #[serde(default)]
        usage: Option<StreamUsage>,
    },
    MessageStop,
    Ping,
    Error {
        error: ApiError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageStart {
    #[serde(default)]
    usage: Option<StreamUsage>,
}

/// Token counts; `message_start` has them all, `message_delta` at least `output_tokens`.
#[derive(Deserialize, Default)]
struct StreamUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// `thinking`, `server_tool_use` and whatever comes next.
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum BlockDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        #[serde(default)]
        partial_json: String,
    },
    /// `thinking_delta`, `signature_delta`, `citations_delta` …
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(default, rename = "type")]
    kind: String,
    #[serde(default)]
    message: String,
}

/// A content block being assembled.
enum Block {
    Text,
    ToolUse {
        id: String,
        name: String,
        /// `input` of `content_block_start` (normally `{}`).
        input: Value,
        /// The `partial_json` pieces so far.
        json: String,
    },
    Other,
}

/// The reply assembled from the events.
#[derive(Default)]
struct Reply {
    out: Completion,
    blocks: BTreeMap<usize, Block>,
    input_tokens: u64,
    output_tokens: u64,
    has_usage: bool,
    stopped: bool,
}

impl Reply {
    fn usage(&mut self, u: StreamUsage) {
        if u.input_tokens.is_some()
            || u.cache_creation_input_tokens.is_some()
            || u.cache_read_input_tokens.is_some()
        {
            self.input_tokens = u.input_tokens.unwrap_or(0)
                + u.cache_creation_input_tokens.unwrap_or(0)
                + u.cache_read_input_tokens.unwrap_or(0);
            self.has_usage = true;
        }
        if let Some(o) = u.output_tokens {
            // cumulative, like the API sends it
            self.output_tokens = o;
            self.has_usage = true;
        }
    }

    /// Applies one event; returns a text delta to pass on.
    fn apply(&mut self, event: Event) -> Result<Option<String>, ProviderError> {
        match event {
            Event::MessageStart { message } => {
                if let Some(u) = message.usage {
                    self.usage(u);
                }
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = match content_block {
                    BlockStart::Text { text } => {
                        self.blocks.insert(index, Block::Text);
                        return Ok(self.text(text));
                    }
                    BlockStart::ToolUse { id, name, input } => Block::ToolUse {
                        id,
                        name,
                        input,
                        json: String::new(),
                    },
                    BlockStart::Other => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            Event::ContentBlockDelta { index, delta } => match delta {
                BlockDelta::TextDelta { text } => return Ok(self.text(text)),
                BlockDelta::InputJsonDelta { partial_json } => match self.blocks.get_mut(&index) {
                    Some(Block::ToolUse { json, .. }) => json.push_str(&partial_json),
                    _ => {
                        return Err(ProviderError::Malformed(format!(
                            "input_json_delta for content block {index}, which is not a tool_use block"
                        )));
                    }
                },
                BlockDelta::Other => {}
            },
            Event::MessageDelta { delta, usage } => {
                if let Some(r) = delta.stop_reason {
                    self.out.finish_reason = r;
                }
                if let Some(u) = usage {
                    self.usage(u);
                }
            }
            Event::MessageStop => self.stopped = true,
            Event::ContentBlockStop | Event::Ping | Event::Unknown => {}
            Event::Error { error } => {
                // The message is not logged here: it is returned redacted and reported with
                // the run's error.
                tracing::warn!(kind = %error.kind, "anthropic stream error");
                let message = if error.message.is_empty() {
                    error.kind
                } else {
                    error.message
                };
                return Err(ProviderError::Stream(message));
            }
        }
        Ok(None)
    }

    fn text(&mut self, text: String) -> Option<String> {
        if text.is_empty() {
            return None;
        }
        self.out.text.push_str(&text);
        Some(text)
    }

    /// The completion, tool calls in block order.
    fn finish(mut self) -> Completion {
        self.out.tool_calls = self
            .blocks
            .into_values()
            .filter_map(|b| match b {
                Block::ToolUse {
                    id,
                    name,
                    input,
                    json,
                } => {
                    let arguments = if !json.trim().is_empty() {
                        json
                    } else if input.as_object().is_some_and(|o| !o.is_empty()) {
                        input.to_string()
                    } else {
                        "{}".to_string()
                    };
                    Some(StreamedToolCall {
                        id,
                        name,
                        arguments,
                    })
                }
                Block::Text | Block::Other => None,
            })
            .collect();
        if self.has_usage {
            self.out.usage = Some(Usage {
                prompt_tokens: self.input_tokens,
                completion_tokens: self.output_tokens,
                total_tokens: self.input_tokens + self.output_tokens,
            });
        }
        if self.out.finish_reason.is_empty() {
            // message_stop without a stop_reason: the turn is over all the same
            self.out.finish_reason = "end_turn".into();
        }
        self.out
    }
}

impl AnthropicProvider {
    pub fn new(config: AnthropicConfig) -> Result<Self, ProviderError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| ProviderError::Unreachable {
                url: config.base_url.clone(),
                reason: http::redact(config.api_key.as_deref(), &e.to_string()),
            })?;
        Ok(Self { http, config })
    }

    pub fn config(&self) -> &AnthropicConfig {
        &self.config
    }

    /// `{base}/v1/{path}`, without doubling a `/v1` the base already ends with.
    fn url(&self, path: &str) -> String {
        let base = self.config.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/{path}")
        } else {
            format!("{base}/v1/{path}")
        }
    }

    /// Removes the API key from any text that may reach a user or a log.
    pub fn redact(&self, text: &str) -> String {
        http::redact(self.config.api_key.as_deref(), text)
    }

    fn request(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let builder = builder.header("anthropic-version", ANTHROPIC_VERSION);
        match &self.config.api_key {
            Some(k) => builder.header("x-api-key", k),
            None => builder,
        }
    }

    /// `GET /v1/models`: checks that the API answers and the key is accepted.
    pub async fn check(&self) -> Result<usize, ProviderError> {
        let url = self.url("models");
        http::count_models(
            &url,
            self.config.api_key.as_deref(),
            self.request(self.http.get(&url)),
        )
        .await
    }

    /// The request body of one streamed call.
    fn body(
        &self,
        model: &str,
        system: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
    ) -> Value {
        let mut body = json!({
            "model": model,
            "max_tokens": self.config.max_tokens,
            "messages": wire_messages(messages),
            "stream": true,
        });
        if !system.is_empty() {
            body["system"] = Value::String(system.to_string());
        }
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                .map(|t| {
                    json!({
                        "name": t.name,
                        "description": t.description,
                        "input_schema": t.input_schema,
                    })
                })
                .collect();
        }
        body
    }

    /// Streams one reply; `on_text` sees each text delta as it arrives.
    pub async fn stream(
        &self,
        model: &str,
        system: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        cancel: &CancellationToken,
        on_text: &dyn TextSink,
    ) -> Result<Completion, ProviderError> {
        let url = self.url("messages");
        let body = self.body(model, system, messages, tools);
        let resp = http::send_with_retries(
            &url,
            &body,
            self.config.max_retries,
            cancel,
            self.config.api_key.as_deref(),
            || self.request(self.http.post(&url)),
        )
        .await?;
        let mut stream = resp.bytes_stream();
        let mut lines = DataLines::default();
        let mut reply = Reply::default();
        let idle = self.config.idle_timeout;
        loop {
            let next = tokio::select! {
                _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                n = tokio::time::timeout(idle, stream.next()) => n,
            };
            let ended = matches!(next, Ok(None));
            let payloads = match next {
                Err(_) => return Err(ProviderError::Idle(idle.as_secs())),
                Ok(None) => lines.finish().into_iter().collect(),
                Ok(Some(Err(e))) => {
                    return Err(ProviderError::CutOff(format!(
                        ": {}",
                        self.redact(&root_cause(&e))
                    )));
                }
                Ok(Some(Ok(bytes))) => lines.push(&bytes),
            };
            for data in payloads {
                let event: Event = serde_json::from_str(&data).map_err(|e| {
                    ProviderError::Malformed(format!("{e} in {:?}", excerpt(&self.redact(&data))))
                })?;
                if let Some(text) = reply.apply(event).map_err(|e| match e {
                    ProviderError::Stream(m) => ProviderError::Stream(self.redact(&m)),
                    other => other,
                })? {
                    on_text.text(text).await;
                }
                if reply.stopped {
                    break;
                }
            }
            if reply.stopped {
                break;
            }
            if ended {
                return Err(ProviderError::CutOff(" (no message_stop)".into()));
            }
        }
        Ok(reply.finish())
    }
}

/// The conversation in Messages form: strictly alternating `user` / `assistant` messages of
/// content blocks, starting with `user`. Tool calls become `tool_use` blocks, tool results
/// `tool_result` blocks of a user message (before any text of it), messages of the same role
/// are merged and empty text blocks dropped.
fn wire_messages(messages: &[ChatMessage]) -> Vec<Value> {
    let mut merged: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            ChatRole::User => ("user", text_block(&m.content).into_iter().collect()),
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

#[async_trait]
impl Provider for AnthropicProvider {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    async fn stream(
        &self,
        model: &str,
        system: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        cancel: &CancellationToken,
        on_text: &dyn TextSink,
    ) -> Result<Completion, ProviderError> {
        AnthropicProvider::stream(self, model, system, messages, tools, cancel, on_text).await
    }

    async fn check(&self) -> Result<usize, ProviderError> {
        AnthropicProvider::check(self).await
    }

    fn redact(&self, text: &str) -> String {
        AnthropicProvider::redact(self, text)
    }
}

/// A tool-call id in the form the Messages API accepts (`^[a-zA-Z0-9_-]+$`): ids from
/// another provider (a session that switched providers) may carry other characters. Applied
/// to `tool_use` and `tool_result` alike, so the pair still matches.
fn wire_id(id: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_protocol::ToolCall;

    #[test]
    fn tool_ids_are_made_acceptable_on_both_sides() {
        assert_eq!(wire_id("call:1/a"), "call_1_a");
        assert_eq!(wire_id("toolu_01-x"), "toolu_01-x");
        assert_eq!(wire_id(""), "call");
    }

    fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments,
            metadata: None,
        }
    }

    #[test]
    fn tool_results_merge_into_one_user_message_before_text() {
        let msgs = wire_messages(&[
            ChatMessage::user("look at a and b"),
            ChatMessage::assistant(
                "Sure.",
                vec![
                    call("toolu_1", "view", json!({"path": "a"})),
                    call("toolu_2", "view", json!({"path": "b"})),
                ],
            ),
            ChatMessage::tool_result("toolu_1", "A", false),
            ChatMessage::tool_result("toolu_2", "no such file", true),
            ChatMessage::user("and then?"),
        ]);
        assert_eq!(
            Value::Array(msgs),
            json!([
                {"role": "user", "content": [{"type": "text", "text": "look at a and b"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Sure."},
                    {"type": "tool_use", "id": "toolu_1", "name": "view", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "view", "input": {"path": "b"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such file", "is_error": true},
                    {"type": "text", "text": "and then?"},
                ]},
            ])
        );
    }

    #[test]
    fn tool_results_come_first_even_after_user_text() {
        let msgs = wire_messages(&[
            ChatMessage::user("go"),
            ChatMessage::assistant("", vec![call("t1", "run", json!({}))]),
            ChatMessage::user("also, hurry"),
            ChatMessage::tool_result("t1", "", false),
        ]);
        assert_eq!(msgs.len(), 3);
        assert_eq!(
            msgs[1]["content"],
            json!([{"type": "tool_use", "id": "t1", "name": "run", "input": {}}])
        );
        assert_eq!(
            msgs[2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "t1", "is_error": false},
                {"type": "text", "text": "also, hurry"},
            ])
        );
    }

    #[test]
    fn consecutive_same_roles_merge_and_empty_blocks_are_skipped() {
        let msgs = wire_messages(&[
            ChatMessage::assistant("earlier reply", vec![]),
            ChatMessage::user("one"),
            ChatMessage::user(""),
            ChatMessage::user("two"),
            ChatMessage::assistant("", vec![]),
            ChatMessage::assistant("", vec![]),
        ]);
        assert_eq!(
            Value::Array(msgs),
            json!([
                {"role": "user", "content": [{"type": "text", "text": "(conversation resumed)"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "earlier reply"}]},
                {"role": "user", "content": [
                    {"type": "text", "text": "one"},
                    {"type": "text", "text": "two"},
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "(no content)"}]},
            ])
        );
    }

    #[test]
    fn non_object_input_is_wrapped() {
        let msgs = wire_messages(&[
            ChatMessage::user("x"),
            ChatMessage::assistant(
                "",
                vec![
                    call("t1", "a", json!("not json {")),
                    call("t2", "b", json!([1, 2])),
                    call("t3", "c", Value::Null),
                ],
            ),
        ]);
        let inputs: Vec<&Value> = msgs[1]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| &b["input"])
            .collect();
        assert_eq!(
            inputs,
            [
                &json!({"value": "not json {"}),
                &json!({"value": [1, 2]}),
                &json!({"value": null}),
            ]
        );
    }

    #[test]
    fn body_shape() {
        let p = AnthropicProvider::new(AnthropicConfig::default()).unwrap();
        let tools = [ToolSpec {
            name: "view".into(),
            description: "View a file".into(),
            input_schema: json!({"type": "object"}),
        }];
        let body = p.body("claude-x", "", &[ChatMessage::user("hi")], &tools);
        assert!(body.get("system").is_none());
        assert_eq!(body["max_tokens"], 8192);
        assert_eq!(body["stream"], true);
        assert_eq!(
            body["tools"],
            json!([{"name": "view", "description": "View a file", "input_schema": {"type": "object"}}])
        );
        let body = p.body("claude-x", "be brief", &[], &[]);
        assert_eq!(body["system"], "be brief");
        assert!(body.get("tools").is_none());
    }

    #[test]
    fn urls_do_not_double_v1() {
        for (base, want) in [
            (
                "https://api.anthropic.com",
                "https://api.anthropic.com/v1/messages",
            ),
            (
                "https://api.anthropic.com/",
                "https://api.anthropic.com/v1/messages",
            ),
            ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1/messages"),
            ("http://127.0.0.1:9/v1/", "http://127.0.0.1:9/v1/messages"),
        ] {
            let p = AnthropicProvider::new(AnthropicConfig {
                base_url: base.into(),
                ..Default::default()
            })
            .unwrap();
            assert_eq!(p.url("messages"), want);
        }
    }

    #[test]
    fn events_assemble_a_completion() {
        let mut r = Reply::default();
        let events = [
            json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 10, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t1", "name": "view", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "th\":1}"}}),
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "t2", "name": "ls", "input": {}}}),
            json!({"type": "some_future_event", "x": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ];
        let mut texts = Vec::new();
        for e in events {
            if let Some(t) = r.apply(serde_json::from_value(e).unwrap()).unwrap() {
                texts.push(t);
            }
        }
        assert!(r.stopped);
        let c = r.finish();
        assert_eq!(texts, ["Hi"]);
        assert_eq!(c.text, "Hi");
        assert_eq!(c.finish_reason, "tool_use");
        assert_eq!(
            c.tool_calls,
            [
                StreamedToolCall {
                    id: "t1".into(),
                    name: "view".into(),
                    arguments: "{\"path\":1}".into()
                },
                StreamedToolCall {
                    id: "t2".into(),
                    name: "ls".into(),
                    arguments: "{}".into()
                },
            ]
        );
        assert_eq!(
            c.usage,
            Some(Usage {
                prompt_tokens: 10,
                completion_tokens: 7,
                total_tokens: 17
            })
        );
    }

    #[test]
    fn error_event_and_stray_json_delta() {
        let mut r = Reply::default();
        let e = serde_json::from_value(json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})).unwrap();
        assert_eq!(
            r.apply(e).unwrap_err(),
            ProviderError::Stream("Overloaded".into())
        );
        let e = serde_json::from_value(json!({"type": "content_block_delta", "index": 4, "delta": {"type": "input_json_delta", "partial_json": "{"}})).unwrap();
        assert!(matches!(r.apply(e), Err(ProviderError::Malformed(_))));
    }

    #[test]
    fn redacts_key() {
        let p = AnthropicProvider::new(AnthropicConfig {
            api_key: Some("sk-ant-secret-123".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            p.redact("bad key sk-ant-secret-123!"),
            "bad key [redacted]!"
        );
        let debug = format!("{:?}", p.config());
        assert!(!debug.contains("sk-ant"), "{debug}");
        assert!(debug.contains("[redacted]"));
        assert_eq!(p.name(), "anthropic");
    }
}
