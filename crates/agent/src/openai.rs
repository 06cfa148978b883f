//! OpenAI-compatible chat completions, streaming.

use std::time::Duration;

use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_protocol::Usage;
use tokio_util::sync::CancellationToken;

use crate::sse::DataLines;

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

impl Default for OpenAiConfig {
    fn default() -> Self {
        Self {
            base_url: "https://api.openai.com/v1".into(),
            api_key: None,
            max_retries: 2,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
        }
    }
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
    #[error("cancelled")]
    Cancelled,
}

impl ProviderError {
    /// Whether sending the same request again may succeed.
    pub fn retryable(&self) -> bool {
        match self {
            Self::Unreachable { .. } | Self::CutOff(_) | Self::Idle(_) => true,
            Self::Http { status, .. } => *status == 429 || *status >= 500,
            Self::Malformed(_) | Self::Cancelled => false,
        }
    }
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
    pub finish_reason: String,
    pub usage: Option<Usage>,
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
        match &self.config.api_key {
            Some(k) if k.len() >= 4 => text.replace(k.as_str(), "[redacted]"),
            _ => text.to_string(),
        }
    }

    fn request(&self, builder: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.config.api_key {
            Some(k) => builder.bearer_auth(k),
            None => builder,
        }
    }

    /// `GET /models`: checks that the provider answers and the key is accepted.
    pub async fn check(&self) -> Result<usize, ProviderError> {
        let url = self.url("models");
        let resp = self
            .request(self.http.get(&url))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| ProviderError::Unreachable {
                url: url.clone(),
                reason: self.redact(&root_cause(&e)),
            })?;
        let status = resp.status().as_u16();
        let body = resp.text().await.unwrap_or_default();
        if status >= 400 {
            return Err(ProviderError::Http {
                status,
                body: self.redact(&excerpt(&body)),
            });
        }
        let v: Value =
            serde_json::from_str(&body).map_err(|e| ProviderError::Malformed(e.to_string()))?;
        Ok(v["data"].as_array().map(Vec::len).unwrap_or(0))
    }

    /// Streams one completion; `on_text` sees each text delta as it arrives.
    pub async fn stream<F, Fut>(
        &self,
        model: &str,
        messages: &[Value],
        tools: &[Value],
        cancel: &CancellationToken,
        mut on_text: F,
    ) -> Result<Completion, ProviderError>
    where
        F: FnMut(String) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let url = self.url("chat/completions");
        let mut body = json!({
            "model": model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools.to_vec());
        }
        let resp = self.send_with_retries(&url, &body, cancel).await?;
        let mut stream = resp.bytes_stream();
        let mut lines = DataLines::default();
        let mut out = Completion::default();
        let mut done = false;
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
                if data.trim() == "[DONE]" {
                    done = true;
                    continue;
                }
                let chunk: Chunk = serde_json::from_str(&data).map_err(|e| {
                    ProviderError::Malformed(format!("{e} in {:?}", excerpt(&self.redact(&data))))
                })?;
                if let Some(u) = chunk.usage {
                    out.usage = Some(Usage {
                        prompt_tokens: u.prompt_tokens,
                        completion_tokens: u.completion_tokens,
                        total_tokens: u.total_tokens.max(u.prompt_tokens + u.completion_tokens),
                    });
                }
                for choice in chunk.choices {
                    if let Some(text) = choice.delta.content
                        && !text.is_empty()
                    {
                        out.text.push_str(&text);
                        on_text(text).await;
                    }
                    for tc in choice.delta.tool_calls {
                        merge_tool_call(&mut out.tool_calls, tc)?;
                    }
                    if let Some(r) = choice.finish_reason {
                        out.finish_reason = r;
                    }
                }
            }
            if ended || done {
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

    async fn send_with_retries(
        &self,
        url: &str,
        body: &Value,
        cancel: &CancellationToken,
    ) -> Result<reqwest::Response, ProviderError> {
        let mut attempt = 0;
        loop {
            let sent = tokio::select! {
                _ = cancel.cancelled() => return Err(ProviderError::Cancelled),
                r = self.request(self.http.post(url)).json(body).send() => r,
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
                            body: self.redact(&excerpt(&text)),
                        },
                        retry_after,
                    )
                }
                Err(e) => (
                    ProviderError::Unreachable {
                        url: url.to_string(),
                        reason: self.redact(&root_cause(&e)),
                    },
                    None,
                ),
            };
            if !err.retryable() || attempt >= self.config.max_retries {
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

/// The innermost cause of a reqwest error ("connection refused" rather than "error sending
/// request").
fn root_cause(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut src: Option<&dyn std::error::Error> = std::error::Error::source(e);
    while let Some(s) = src {
        msg = s.to_string();
        src = s.source();
    }
    msg
}

fn excerpt(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() > 300 {
        format!("{}…", s.chars().take(300).collect::<String>())
    } else {
        s.to_string()
    }
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
