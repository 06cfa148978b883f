//! Message bodies: sending a message, steering, follow-ups, the transcript.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::tools::ToolCall;

/// Who said a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    System,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::System => "system",
            Self::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "user" => Some(Self::User),
            "assistant" => Some(Self::Assistant),
            "system" => Some(Self::System),
            "tool" => Some(Self::Tool),
            _ => None,
        }
    }
}

/// The message a client sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InputMessage {
    /// Must be `user`.
    pub role: Role,
    /// The text; must not be empty or whitespace only.
    pub content: String,
}

/// How a sent message relates to the session's active run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageType {
    /// Starts a run; 409 `session_already_running` if one is active.
    #[default]
    Message,
    /// Reaches the active run before its next step; 409 `session_not_running` if none.
    Steering,
    /// Queued durably; starts a run when the active one ends (at once when idle).
    FollowUp,
}

/// Importance of a piece of caller context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextPriority {
    High,
    #[default]
    Normal,
    Low,
}

/// Extra context a caller attaches to a message (e.g. the output of a check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ContextItem {
    pub name: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<ContextPriority>,
}

/// `POST /v1/sessions/{id}/messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SendMessageRequest {
    pub message: InputMessage,
    #[serde(default, rename = "type")]
    pub kind: MessageType,
    /// For `steering`: the run it is meant for (409 `run_mismatch` if not the active one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// Model for this run only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextItem>,
    /// Backend-specific run options (e.g. `{"timeout_secs": 600}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub overrides: Option<serde_json::Value>,
}

impl SendMessageRequest {
    /// A plain user message of the given type.
    pub fn user(content: impl Into<String>, kind: MessageType) -> Self {
        Self {
            message: InputMessage {
                role: Role::User,
                content: content.into(),
            },
            kind,
            run_id: None,
            model: None,
            context: Vec::new(),
            overrides: None,
        }
    }
}

/// Answer to [`SendMessageRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SendMessageResponse {
    /// The run started (or queued, or steered).
    pub run_id: Uuid,
    /// For `steering`: when the agent will see it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steering: Option<SteeringDelivery>,
}

/// When a steering message reaches the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SteeringDelivery {
    /// Before the agent's next step within the current turn (the built-in agent).
    NextStep,
    /// With the agent's next prompt, after its current turn ends (ACP agents: the protocol has
    /// no way to add to a turn in progress).
    NextPrompt,
}

/// One message of a session's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TranscriptMessage {
    pub id: Uuid,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    pub role: Role,
    pub content: String,
    /// Tool calls made by an assistant message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// For a `tool` message: the call it answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For a `tool` message: the tool failed or the call was rejected.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    pub created_at: DateTime<Utc>,
}

/// `GET /v1/sessions/{id}/messages`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ListMessagesResponse {
    pub messages: Vec<TranscriptMessage>,
    pub total: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn send_message_defaults_to_message_type() {
        let req: SendMessageRequest =
            serde_json::from_str(r#"{"message":{"role":"user","content":"hi"}}"#).unwrap();
        assert_eq!(req.kind, MessageType::Message);
        let req: SendMessageRequest = serde_json::from_str(
            r#"{"message":{"role":"user","content":"hi"},"type":"follow_up"}"#,
        )
        .unwrap();
        assert_eq!(req.kind, MessageType::FollowUp);
    }
}
