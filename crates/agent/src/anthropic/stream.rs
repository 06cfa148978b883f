//! The reply stream: its events, the reply assembled from them, and the loop that reads it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;
use switchboard_protocol::Usage;
use tokio_util::sync::CancellationToken;

use super::AnthropicProvider;
use crate::provider::http::excerpt;
use crate::provider::{
    ChatMessage, Completion, ProviderError, StreamedToolCall, TextSink, ToolSpec, http,
};
use crate::sse::Payloads;

/// One `data:` payload of the stream.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum Event {
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
pub(super) struct MessageStart {
    #[serde(default)]
    usage: Option<StreamUsage>,
}

/// Token counts; `message_start` has them all, `message_delta` at least `output_tokens`.
#[derive(Deserialize, Default)]
pub(super) struct StreamUsage {
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
pub(super) enum BlockStart {
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
pub(super) enum BlockDelta {
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
pub(super) struct MessageDeltaBody {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct ApiError {
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
pub(super) struct Reply {
    out: Completion,
    blocks: BTreeMap<usize, Block>,
    input_tokens: u64,
    output_tokens: u64,
    cache_read_tokens: u64,
    cache_write_tokens: u64,
    has_usage: bool,
    pub(super) stopped: bool,
}

impl Reply {
    fn usage(&mut self, u: StreamUsage) {
        if u.input_tokens.is_some()
            || u.cache_creation_input_tokens.is_some()
            || u.cache_read_input_tokens.is_some()
        {
            self.cache_read_tokens = u.cache_read_input_tokens.unwrap_or(0);
            self.cache_write_tokens = u.cache_creation_input_tokens.unwrap_or(0);
            self.input_tokens =
                u.input_tokens.unwrap_or(0) + self.cache_read_tokens + self.cache_write_tokens;
            self.has_usage = true;
        }
        if let Some(o) = u.output_tokens {
            // cumulative, like the API sends it
            self.output_tokens = o;
            self.has_usage = true;
        }
    }

    /// Applies one event; returns a text delta to pass on.
    pub(super) fn apply(&mut self, event: Event) -> Result<Option<String>, ProviderError> {
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
    pub(super) fn finish(mut self) -> Completion {
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
                cache_read_tokens: self.cache_read_tokens,
                cache_write_tokens: self.cache_write_tokens,
                ..Usage::tokens(self.input_tokens, self.output_tokens)
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
        let mut payloads = Payloads::new(resp, self.config.idle_timeout);
        let mut reply = Reply::default();
        let redact = |s: &str| self.redact(s);
        while let Some(batch) = payloads.next(cancel, &redact).await? {
            for data in batch {
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
        }
        if !reply.stopped {
            return Err(ProviderError::CutOff(" (no message_stop)".into()));
        }
        Ok(reply.finish())
    }
}
