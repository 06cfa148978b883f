//! What the agent loop needs from an LLM provider, independent of its wire format.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use switchboard_protocol::{RunErrorCode, ToolCall, Usage};
use tokio_util::sync::CancellationToken;

/// Who wrote a [`ChatMessage`]. The system prompt is passed apart from the messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChatRole {
    User,
    Assistant,
    /// The result of one tool call (`tool_call_id`).
    Tool,
}

/// One message of the conversation, in a provider-neutral shape.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatMessage {
    pub role: ChatRole,
    pub content: String,
    /// Calls the assistant made in this message.
    pub tool_calls: Vec<ToolCall>,
    /// For [`ChatRole::Tool`]: which call this answers.
    pub tool_call_id: Option<String>,
    /// For [`ChatRole::Tool`]: the result is an error.
    pub is_error: bool,
    /// For [`ChatRole::User`]: images that go with the text, for models that see.
    pub images: Vec<ImagePart>,
}

/// An image of a user message: its type and its content in base64.
#[derive(Debug, Clone, PartialEq)]
pub struct ImagePart {
    /// `image/png`, `image/jpeg`, `image/gif` or `image/webp`.
    pub mime: String,
    pub base64: String,
}

impl ChatMessage {
    pub fn user(content: impl Into<String>) -> Self {
        Self {
            role: ChatRole::User,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            is_error: false,
            images: Vec::new(),
        }
    }

    /// A user message with images.
    pub fn user_with_images(content: impl Into<String>, images: Vec<ImagePart>) -> Self {
        Self {
            images,
            ..Self::user(content)
        }
    }

    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Self {
            role: ChatRole::Assistant,
            content: content.into(),
            tool_calls,
            tool_call_id: None,
            is_error: false,
            images: Vec::new(),
        }
    }

    pub fn tool_result(id: impl Into<String>, content: impl Into<String>, is_error: bool) -> Self {
        Self {
            role: ChatRole::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(id.into()),
            is_error,
            images: Vec::new(),
        }
    }
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
}

/// Why a provider call failed. Messages never contain the API key.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProviderError {
    #[error("provider unreachable at {url}: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("provider answered HTTP {status}: {body}")]
    Http { status: u16, body: String },
    #[error("provider sent a malformed stream: {0}")]
    Malformed(String),
    #[error("provider stream ended before the reply was complete{0}")]
    CutOff(String),
    #[error("provider sent nothing for {0} s")]
    Idle(u64),
    /// The provider reported an error inside an otherwise successful stream.
    #[error("provider reported an error: {0}")]
    Stream(String),
    #[error("cancelled")]
    Cancelled,
}

impl ProviderError {
    /// Whether sending the same request again may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Unreachable { .. } | Self::CutOff(_) | Self::Idle(_) | Self::Stream(_) => true,
            Self::Http { status, .. } => *status == 429 || *status >= 500,
            Self::Malformed(_) | Self::Cancelled => false,
        }
    }

    /// What kind of failure it is, for `RunError.code`. The one place that reads a
    /// provider's error words: whether a refusal is the context window's.
    pub fn code(&self) -> RunErrorCode {
        match self {
            Self::Unreachable { .. } | Self::Idle(_) => RunErrorCode::ProviderUnreachable,
            Self::Http { status: 429, .. } => RunErrorCode::ProviderRateLimited,
            Self::Http { status, body } if *status < 500 && context_too_long(body) => {
                RunErrorCode::ContextTooLong
            }
            Self::Http { status, .. } if *status < 500 => RunErrorCode::ProviderRefused,
            Self::Stream(body) if context_too_long(body) => RunErrorCode::ContextTooLong,
            Self::Http { .. } | Self::Malformed(_) | Self::CutOff(_) | Self::Stream(_) => {
                RunErrorCode::ProviderFailed
            }
            Self::Cancelled => RunErrorCode::Other,
        }
    }
}

/// Whether a provider's error says the request does not fit the model's context window:
/// OpenAI's `context_length_exceeded` and its wording, Anthropic's "prompt is too long",
/// and the words OpenAI-compatible servers (vLLM, llama.cpp, Ollama, OpenRouter) use.
fn context_too_long(body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "context length",
        "context window",
        "prompt is too long",
        "exceeds the context",
        "too many tokens",
    ]
    .iter()
    .any(|w| b.contains(w))
}

/// A tool call assembled from stream deltas.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StreamedToolCall {
    pub id: String,
    pub name: String,
    /// Raw JSON text of the arguments as the model wrote it.
    pub arguments: String,
}

/// A complete reply.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Completion {
    pub text: String,
    pub tool_calls: Vec<StreamedToolCall>,
    /// The provider's stop reason as it sent it (`stop`, `tool_calls`, `end_turn`, …).
    pub finish_reason: String,
    pub usage: Option<Usage>,
}

/// Receives text deltas while a reply streams.
#[async_trait]
pub trait TextSink: Send + Sync {
    async fn text(&self, delta: String);
}

/// An LLM provider: one streamed model call at a time.
#[async_trait]
pub trait Provider: Send + Sync + 'static {
    /// Short name for messages (`openai`, `anthropic`).
    fn name(&self) -> &'static str;

    /// Streams one reply. `on_text` sees each text delta as it arrives. Requests that fail
    /// before any reply arrived (connect error, 429, 5xx) are retried with backoff,
    /// honouring `Retry-After`.
    async fn stream(
        &self,
        model: &str,
        system: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        cancel: &CancellationToken,
        on_text: &dyn TextSink,
    ) -> Result<Completion, ProviderError>;

    /// Checks that the provider answers and accepts the key; returns the ids of the models
    /// it lists (its models endpoint).
    async fn models(&self) -> Result<Vec<String>, ProviderError>;

    /// Removes the API key from any text that may reach a user or a log.
    fn redact(&self, text: &str) -> String;

    /// The most output tokens a reply may have, when requests cap it (Anthropic's
    /// `max_tokens`): what a budget reserves for the reply. `None`: uncapped, and
    /// [`DEFAULT_OUTPUT_ESTIMATE`] is reserved.
    fn max_output_tokens(&self) -> Option<u32> {
        None
    }
}

/// Output tokens reserved against budgets for a call whose replies are not capped.
pub const DEFAULT_OUTPUT_ESTIMATE: u64 = 4_096;

/// About how many tokens a request's input is: four characters a token of the system
/// prompt, the messages and the tool definitions, and 1,600 for each image (what a
/// 1,092×1,092 picture costs at Anthropic, more than at OpenAI). What a budget reserves for
/// the input before the provider has counted it.
pub fn estimate_input_tokens(system: &str, messages: &[ChatMessage], tools: &[ToolSpec]) -> u64 {
    let mut chars = system.len();
    let mut images = 0u64;
    for m in messages {
        chars += m.content.len();
        for c in &m.tool_calls {
            chars += c.name.len() + c.arguments.to_string().len();
        }
        images += m.images.len() as u64;
    }
    for t in tools {
        chars += t.name.len() + t.description.len() + t.input_schema.to_string().len();
    }
    (chars as u64).div_ceil(4) + images * 1_600
}

impl ProviderError {
    /// Whether the provider certainly billed nothing for the request: it refused it, or it
    /// was never reached. Anything else (a reply cut off, a stream that went silent) may
    /// have cost something that is not known.
    pub fn billed_nothing(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Http { .. })
    }
}

/// Shared HTTP plumbing of the providers.
pub(crate) mod http {
    use super::*;

    /// Removes `key` from `text`.
    pub fn redact(key: Option<&str>, text: &str) -> String {
        match key {
            Some(k) if k.len() >= 4 => text.replace(k, "[redacted]"),
            _ => text.to_string(),
        }
    }

    /// The innermost cause of a reqwest error ("connection refused" rather than "error
    /// sending request").
    pub fn root_cause(e: &reqwest::Error) -> String {
        let mut msg = e.to_string();
        let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
        while let Some(s) = src {
            msg = s.to_string();
            src = s.source();
        }
        msg
    }

    pub fn excerpt(s: &str) -> String {
        let s = s.trim();
        if s.chars().count() > 300 {
            format!("{}…", s.chars().take(300).collect::<String>())
        } else {
            s.to_string()
        }
    }

    /// `GET` a provider's model list (`request` carries the URL and auth): checks that it
    /// answers and accepts the key; returns the ids of the models it lists (`data[].id`,
    /// OpenAI's and Anthropic's shape alike), in its order.
    pub async fn list_models(
        url: &str,
        key: Option<&str>,
        request: reqwest::RequestBuilder,
    ) -> Result<Vec<String>, ProviderError> {
        let resp = request
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| ProviderError::Unreachable {
                url: url.to_string(),
                reason: redact(key, &root_cause(&e)),
            })?;
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        if status >= 400 {
            return Err(ProviderError::Http {
                status,
                body: redact(key, &excerpt(&body)),
            });
        }
        let v: Value = serde_json::from_str(&body)
            .map_err(|e| ProviderError::Malformed(redact(key, &e.to_string())))?;
        Ok(v["data"]
            .as_array()
            .map(|models| {
                models
                    .iter()
                    .filter_map(|m| m["id"].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// POSTs `body` (built by `request`), retrying what may succeed on a second try.
    pub async fn send_with_retries(
        url: &str,
        body: &Value,
        max_retries: u32,
        cancel: &CancellationToken,
        key: Option<&str>,
        request: impl Fn() -> reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut attempt = 0;
        loop {
            let sent = tokio::select! {
                _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                r = request().json(body).send() => r,
            };
            let (err, wait) = match sent {
                Ok(resp) if resp.status().is_success() => return Ok(resp),
                Ok(resp) => {
                    let status = resp.status().as_u16();
                    let retry_after = resp
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let text = resp.text().await.unwrap_or_default();
                    (
                        ProviderError::Http {
                            status,
                            body: redact(key, &excerpt(&text)),
                        },
                        retry_after,
                    )
                }
                Err(e) => (
                    ProviderError::Unreachable {
                        url: url.to_string(),
                        reason: redact(key, &root_cause(&e)),
                    },
                    None,
                ),
            };
            if !err.retryable() || attempt >= max_retries {
                return Err(err);
            }
            attempt += 1;
            let backoff = wait
                .unwrap_or_else(|| Duration::from_millis(500 * 2u64.pow(attempt - 1)))
                .min(Duration::from_secs(30));
            tracing::warn!(error = %err, attempt, ?backoff, "provider call failed; retrying");
            tokio::select! {
                _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                _ = tokio::time::sleep(backoff) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, body: &str) -> ProviderError {
        ProviderError::Http {
            status,
            body: body.into(),
        }
    }

    #[test]
    fn each_failure_has_its_code() {
        let unreachable = ProviderError::Unreachable {
            url: "http://x".into(),
            reason: "refused".into(),
        };
        assert_eq!(unreachable.code(), RunErrorCode::ProviderUnreachable);
        assert_eq!(
            ProviderError::Idle(60).code(),
            RunErrorCode::ProviderUnreachable
        );
        assert_eq!(
            http(429, "slow down").code(),
            RunErrorCode::ProviderRateLimited
        );
        assert_eq!(http(401, "bad key").code(), RunErrorCode::ProviderRefused);
        assert_eq!(
            http(404, "no such model").code(),
            RunErrorCode::ProviderRefused
        );
        assert_eq!(http(503, "overloaded").code(), RunErrorCode::ProviderFailed);
        // OpenAI's and Anthropic's own words for a conversation that does not fit.
        let openai = r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded"}}"#;
        assert_eq!(http(400, openai).code(), RunErrorCode::ContextTooLong);
        let anthropic = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#;
        assert_eq!(http(400, anthropic).code(), RunErrorCode::ContextTooLong);
        assert_eq!(
            ProviderError::CutOff(String::new()).code(),
            RunErrorCode::ProviderFailed
        );
        assert_eq!(
            ProviderError::Malformed("x".into()).code(),
            RunErrorCode::ProviderFailed
        );
    }
}
