//! Anthropic Messages API, streaming.
//!
//! `POST /v1/messages` with `stream: true`; the reply is an event stream whose `data:`
//! payloads each carry their own `"type"` (`message_start`, `content_block_start`,
//! `content_block_delta`, `content_block_stop`, `message_delta`, `message_stop`, `ping`,
//! `error`), so the `event:` lines are not needed. Unknown event, block and delta types are
//! ignored, as the API's versioning policy asks of clients.
//!
//! This file holds the configuration, the request and the [`Provider`] implementation;
//! `stream.rs` reads the reply stream into a [`Completion`], and `wire.rs` puts the
//! conversation in Messages form.

use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::provider::{ChatMessage, Completion, Provider, ProviderError, TextSink, ToolSpec, http};

mod stream;
#[cfg(test)]
mod tests;
mod wire;

use wire::wire_messages;

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

/// Anthropic's API, the default base URL.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

impl Default for AnthropicConfig {
    fn default() -> Self {
        Self {
            base_url: DEFAULT_BASE_URL.into(),
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
    pub async fn models(&self) -> Result<Vec<String>, ProviderError> {
        let url = self.url("models");
        http::list_models(
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

    async fn models(&self) -> Result<Vec<String>, ProviderError> {
        AnthropicProvider::models(self).await
    }

    fn redact(&self, text: &str) -> String {
        AnthropicProvider::redact(self, text)
    }

    fn max_output_tokens(&self) -> Option<u32> {
        Some(self.config.max_tokens)
    }
}
