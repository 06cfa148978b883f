//! The OpenAI-compatible front door (`POST /v1/chat/completions`, `GET /v1/models`): the
//! wire shapes of OpenAI's Chat Completions API, as much of them as a chat client sends and
//! reads. Unknown request fields (`temperature`, `tools` …) are accepted and ignored: the
//! backend behind a session decides how it answers.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The header (and `metadata` key) naming the Switchboard session a call continues; the
/// answer carries it too.
pub const SESSION_HEADER: &str = "x-switchboard-session";

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletionRequest {
    /// `switchboard/builtin` or `switchboard/agent/NAME` (see `GET /v1/models`).
    pub model: String,
    /// The conversation; the last one must be the user's. For a new session, earlier
    /// messages go with it as context; a continued session has its own history.
    pub messages: Vec<ChatMessage>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// `session_id`: continue that session (like the `X-Switchboard-Session` header).
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Everything else OpenAI defines (`temperature`, `max_tokens`, `tools` …): ignored.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub other: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// One message of the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatMessage {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// A string, or an array of content parts (`{"type": "text", "text": …}`; other parts
    /// are left out).
    #[serde(default)]
    #[schema(value_type = Object, nullable)]
    pub content: serde_json::Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl ChatMessage {
    /// The text of the message: the string, or its text parts joined.
    pub fn text(&self) -> String {
        match &self.content {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Array(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(serde_json::Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => String::new(),
        }
    }
}

/// A non-streamed answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletion {
    pub id: String,
    /// `chat.completion`.
    pub object: String,
    pub created: i64,
    pub model: String,
    pub choices: Vec<Choice>,
    pub usage: CompletionUsage,
    /// The Switchboard session that answered (also the `X-Switchboard-Session` header).
    pub session_id: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Choice {
    pub index: u32,
    pub message: AssistantMessage,
    /// `stop`, `length` or `content_filter`.
    pub finish_reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AssistantMessage {
    pub role: String,
    pub content: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct CompletionUsage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
}

/// One `data:` event of a streamed answer (`chat.completion.chunk`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChatCompletionChunk {
    pub id: String,
    pub object: String,
    pub created: i64,
    pub model: String,
    pub choices: Vec<ChunkChoice>,
    /// Only in the last chunk, when `stream_options.include_usage` asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<CompletionUsage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct Delta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// `GET /v1/models`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelList {
    /// `list`.
    pub object: String,
    pub data: Vec<Model>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Model {
    pub id: String,
    /// `model`.
    pub object: String,
    pub created: i64,
    pub owned_by: String,
}

/// OpenAI's error body: `{"error": {"message", "type", "param", "code"}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OpenAiErrorBody {
    pub error: OpenAiError,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct OpenAiError {
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `not_found_error`, `server_error` …
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    /// Switchboard's stable code (`model_not_found`, `session_not_found` …).
    pub code: Option<String>,
}

/// The model id of a backend: `switchboard/builtin`, `switchboard/agent/NAME`.
pub fn model_id(backend: &crate::BackendSpec) -> String {
    match backend {
        crate::BackendSpec::Builtin => "switchboard/builtin".into(),
        crate::BackendSpec::Acp(name) => format!("switchboard/agent/{name}"),
    }
}

/// The backend a model id names (`None`: not one of ours).
pub fn backend_of(model: &str) -> Option<crate::BackendSpec> {
    match model {
        "switchboard/builtin" | "switchboard" => Some(crate::BackendSpec::Builtin),
        m => m
            .strip_prefix("switchboard/agent/")
            .filter(|n| !n.is_empty())
            .map(|n| crate::BackendSpec::Acp(n.to_owned())),
    }
}
