//! OpenAI-compatible chat completions, streaming.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_protocol::Usage;
use tokio_util::sync::CancellationToken;

use crate::provider::http::excerpt;
use crate::provider::{
    ChatMessage, ChatRole, Completion, Provider, ProviderError, StreamedToolCall, TextSink,
    ToolSpec, http,
};
use crate::sse::Payloads;

/// Where and how to reach the provider.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// E.g. `https://api.openai.com/v1` or `http://127.0.0.1:11434/v1` (Ollama).
    pub base_url: String,
    pub api_key: Option<String>,
    /// Retries of a request that failed before any reply arrived (connect error, 429, 5xx).
    pub max_retries: u32,
    pub connect_timeout: Duration,
    /// Longest silence tolerated inside a streaming reply.
    pub idle_timeout: Duration,
}

impl std::fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "[redacted]"))
            .field("max_retries", &self.max_retries)
            .finish()
    }
}

/// OpenAI's own API, the default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
            api_key: None,
            max_retries: 2,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// Streaming client for one OpenAI-compatible server.
#[derive(Clone)]
pub struct OpenAiProvider {
    http: reqwest::Client,
    config: OpenAiConfig,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    /// Some servers (OpenRouter, vLLM) report a failure inside a started stream.
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ToolCallDelta>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
    /// `cached_tokens`: of `prompt_tokens`, read from the prompt cache.
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

impl OpenAiProvider {
    pub fn new(config: OpenAiConfig) -> Result<Self, ProviderError> {
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .build()
            .map_err(|e| ProviderError::Unreachable {
                url: config.base_url.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self { http, config })
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.config
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.config.base_url.trim_end_matches('/'), path)
    }

    /// Removes the API key from any text that may reach a user or a log.
    pub fn redact(&self, text: &str) -> String {
        http::redact(self.config.api_key.as_deref(), text)
    }

    fn request(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.config.api_key {
            Some(k) => builder.bearer_auth(k),
            None => builder,
        }
    }

    /// `GET /models`: checks that the provider answers and the key is accepted.
    pub async fn models(&self) -> Result<Vec<String>, ProviderError> {
        let url = self.url("models");
        http::list_models(
            &url,
            self.config.api_key.as_deref(),
            self.request(self.http.get(&url)),
        )
        .await
    }

    /// Streams one completion; `on_text` sees each text delta as it arrives.
    pub async fn stream(
        &self,
        model: &str,
        system: &str,
        messages: &[ChatMessage],
        tools: &[ToolSpec],
        cancel: &CancellationToken,
        on_text: &dyn TextSink,
    ) -> Result<Completion, ProviderError> {
        let url = self.url("chat/completions");
        let mut body = json!({
            "model": model,
            "messages": wire_messages(system, messages),
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !tools.is_empty() {
            body["tools"] = tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.input_schema,
                    }})
                })
                .collect();
        }
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
        let mut out = Completion::default();
        let mut done = false;
        let redact = |s: &str| self.redact(s);
        while let Some(batch) = payloads.next(cancel, &redact).await? {
            for data in batch {
                if data.trim() == "[DONE]" {
                    done = true;
                    continue;
                }
                let chunk: Chunk = serde_json::from_str(&data).map_err(|e| {
                    ProviderError::Malformed(format!("{e} in {:?}", excerpt(&self.redact(&data))))
                })?;
                if let Some(err) = chunk.error {
                    let msg = err["message"]
                        .as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| err.to_string());
                    return Err(ProviderError::Stream(self.redact(&excerpt(&msg))));
                }
                if let Some(u) = chunk.usage {
                    let cached = u
                        .prompt_tokens_details
                        .and_then(|d| d.cached_tokens)
                        .unwrap_or(0);
                    out.usage = Some(Usage {
                        total_tokens: u.total_tokens.max(u.prompt_tokens + u.completion_tokens),
                        cache_read_tokens: cached.min(u.prompt_tokens),
                        ..Usage::tokens(u.prompt_tokens, u.completion_tokens)
                    });
                }
                for choice in chunk.choices {
                    if let Some(text) = choice.delta.content
                        && !text.is_empty()
                    {
                        out.text.push_str(&text);
                        on_text.text(text).await;
                    }
                    for tc in choice.delta.tool_calls {
                        merge_tool_call(&mut out.tool_calls, tc)?;
                    }
                    if let Some(r) = choice.finish_reason {
                        out.finish_reason = r;
                    }
                }
            }
            if done {
                break;
            }
        }
        if out.finish_reason.is_empty() {
            // Without a finish_reason the reply may be missing its end, even with [DONE].
            return Err(ProviderError::CutOff(if done {
                " (no finish_reason)".into()
            } else {
                String::new()
            }));
        }
        Ok(out)
    }
}

/// The conversation in chat-completions form: system prompt first, tool calls as
/// `function` calls with their arguments as JSON text, tool results as `tool` messages.
fn wire_messages(system: &str, messages: &[ChatMessage]) -> Vec<Value> {
    let mut out = Vec::with_capacity(messages.len() + 1);
    if !system.is_empty() {
        out.push(json!({"role": "system", "content": system}));
    }
    for m in messages {
        out.push(match m.role {
            ChatRole::User if m.images.is_empty() => json!({"role": "user", "content": m.content}),
            // Vision input: the text, then each image as a data URL.
            ChatRole::User => {
                let mut parts = vec![json!({"type": "text", "text": m.content})];
                parts.extend(m.images.iter().map(|i| {
                    json!({
                        "type": "image_url",
                        "image_url": {"url": format!("data:{};base64,{}", i.mime, i.base64)},
                    })
                }));
                json!({"role": "user", "content": parts})
            }
            ChatRole::Assistant if m.tool_calls.is_empty() => {
                json!({"role": "assistant", "content": m.content})
            }
            ChatRole::Assistant => json!({
                "role": "assistant",
                "content": if m.content.is_empty() { Value::Null } else { Value::String(m.content.clone()) },
                "tool_calls": m.tool_calls.iter().map(|c| json!({
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments.to_string()},
                })).collect::<Vec<_>>(),
            }),
            ChatRole::Tool => json!({
                "role": "tool",
                "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
                "content": m.content,
            }),
        });
    }
    out
}

#[async_trait]
impl Provider for OpenAiProvider {
    fn name(&self) -> &'static str {
        "openai"
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
        OpenAiProvider::stream(self, model, system, messages, tools, cancel, on_text).await
    }

    async fn models(&self) -> Result<Vec<String>, ProviderError> {
        OpenAiProvider::models(self).await
    }

    fn redact(&self, text: &str) -> String {
        OpenAiProvider::redact(self, text)
    }
}

fn merge_tool_call(
    calls: &mut Vec<StreamedToolCall>,
    tc: ToolCallDelta,
) -> Result<(), ProviderError> {
    let index = tc.index.unwrap_or(calls.len().saturating_sub(1));
    if index > calls.len() || index > 256 {
        return Err(ProviderError::Malformed(format!(
            "tool call index {index} out of order"
        )));
    }
    if index == calls.len() {
        calls.push(StreamedToolCall::default());
    }
    let call = &mut calls[index];
    if let Some(id) = tc.id {
        call.id = id;
    }
    if let Some(f) = tc.function {
        if let Some(n) = f.name {
            call.name.push_str(&n);
        }
        if let Some(a) = f.arguments {
            call.arguments.push_str(&a);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_deltas_merge() {
        let mut calls = Vec::new();
        let d: ToolCallDelta = serde_json::from_str(
            r#"{"index":0,"id":"c1","type":"function","function":{"name":"view","arguments":""}}"#,
        )
        .unwrap();
        merge_tool_call(&mut calls, d).unwrap();
        for part in ["{\"pa", "th\":\"a\"}"] {
            let d: ToolCallDelta =
                serde_json::from_value(json!({"index":0,"function":{"arguments":part}})).unwrap();
            merge_tool_call(&mut calls, d).unwrap();
        }
        assert_eq!(calls[0].name, "view");
        assert_eq!(calls[0].arguments, "{\"path\":\"a\"}");
        let bad: ToolCallDelta = serde_json::from_value(json!({"index":5})).unwrap();
        assert!(merge_tool_call(&mut calls, bad).is_err());
    }

    #[test]
    fn redacts_key() {
        let p = OpenAiProvider::new(OpenAiConfig {
            api_key: Some("sk-secret-123".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.redact("bad key sk-secret-123!"), "bad key [redacted]!");
        assert!(!format!("{:?}", p.config()).contains("sk-secret"));
    }
}
