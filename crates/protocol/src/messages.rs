//! Message bodies: sending a message, steering, follow-ups, the transcript.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::nullable;
use crate::sessions::AutoApprove;
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
    #[schema(value_type = InputRole)]
    pub role: Role,
    /// The text; must not be empty or whitespace only.
    #[schema(pattern = r"\S")]
    pub content: String,
    /// Files uploaded to the session (`POST /v1/sessions/{id}/files`) that go with the text;
    /// at most 10, together within the per-message limit.
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "nullable::or_default"
    )]
    #[schema(nullable, max_items = 10)]
    pub attachments: Vec<crate::files::AttachmentRef>,
}

/// The one role a client may send (documents [`InputMessage::role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum InputRole {
    User,
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
///
/// Read leniently, as the stakpak agent server does (its clients may send any string):
/// `high`, `normal` and `low` in any case; `critical` (a level stakpak keeps for itself) is
/// `high`; anything else is `normal`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextPriority {
    High,
    #[default]
    Normal,
    Low,
}

impl ContextPriority {
    /// The priority a caller's string stands for (see the type's doc).
    pub fn parse_lenient(s: &str) -> Self {
        match s.trim().to_ascii_lowercase().as_str() {
            "high" | "critical" => Self::High,
            "low" => Self::Low,
            _ => Self::Normal,
        }
    }
}

impl<'de> Deserialize<'de> for ContextPriority {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Self::parse_lenient(&String::deserialize(d)?))
    }
}

/// Extra context a caller attaches to a message (e.g. the output of a check).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ContextItem {
    /// At most 256 characters; must not be empty.
    #[schema(pattern = r"\S")]
    pub name: String,
    /// At most 50,000 characters.
    pub content: String,
    /// `high`, `normal` (the default) or `low`; any other string is read as `normal`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>, example = "high")]
    pub priority: Option<ContextPriority>,
}

/// How long a run answers repeats of the `Idempotency-Key` it was sent with.
pub const IDEMPOTENCY_WINDOW: std::time::Duration = std::time::Duration::from_secs(24 * 3600);
/// Longest `Idempotency-Key` accepted.
pub const MAX_IDEMPOTENCY_KEY: usize = 255;

/// An `Idempotency-Key` (messages, gateway sends): 1 to [`MAX_IDEMPOTENCY_KEY`] visible ASCII
/// characters, what an HTTP header carries unambiguously. The documents' pattern says the
/// same: `^[!-~]{1,255}$`.
pub fn is_valid_idempotency_key(key: &str) -> bool {
    !key.is_empty() && key.len() <= MAX_IDEMPOTENCY_KEY && key.bytes().all(|b| b.is_ascii_graphic())
}

/// Most bytes in one message's content (`message.content`).
pub const MAX_MESSAGE_CONTENT_BYTES: usize = 1 << 20;
/// Files one message may carry by default (`[files] max_attachments`).
pub const DEFAULT_MAX_ATTACHMENTS: usize = 10;

/// Most context items one message may carry (the stakpak server's limits, so a client that
/// checks against them is never refused here).
pub const MAX_CONTEXT_ITEMS: usize = 32;
/// Longest context item name, in characters.
pub const MAX_CONTEXT_NAME_CHARS: usize = 256;
/// Longest context item content, in characters.
pub const MAX_CONTEXT_CONTENT_CHARS: usize = 50_000;
/// Most context content of one message, in characters.
pub const MAX_CONTEXT_TOTAL_CHARS: usize = 500_000;
/// Longest `overrides.system_prompt`, in characters.
pub const MAX_SYSTEM_PROMPT_CHARS: usize = 100_000;
/// Range of `overrides.max_turns`.
pub const MAX_TURNS_RANGE: std::ops::RangeInclusive<u32> = 1..=256;

/// Options for one run — the stakpak agent server's run-overrides object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunOverrides {
    /// Model for this run; wins over the top-level `model` (as on the stakpak server). Not
    /// empty or blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub model: Option<String>,
    /// Which tool calls of this run go without asking, instead of the session's setting.
    /// The permission mode still applies: this never allows what the mode refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve: Option<AutoApprove>,
    /// Replaces the built-in agent's system prompt for this run (empty: not replaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Most model calls in this run (1–256) for the built-in agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 256)]
    pub max_turns: Option<u32>,
}

impl RunOverrides {
    /// Whether nothing is overridden.
    pub fn is_empty(&self) -> bool {
        self == &Self::default()
    }
}

/// `POST /v1/sessions/{id}/messages`. Every optional field may also be `null`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SendMessageRequest {
    pub message: InputMessage,
    #[serde(default, rename = "type", deserialize_with = "nullable::or_default")]
    #[schema(nullable)]
    pub kind: MessageType,
    /// For `steering`: the run it is meant for (409 `run_mismatch` if not the active one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<Uuid>,
    /// Model for this run only (`overrides.model` wins when both are given). Not empty or
    /// blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub model: Option<String>,
    /// Run the run's commands in the sandbox (docs/sandbox.md), even in `full-access` mode.
    /// A server that cannot (its sandbox off, or a backend that does not confine, such as an
    /// ACP agent) refuses `true` with 422 `sandbox_unsupported` rather than run unconfined.
    /// `false` and `null` leave it to the server: a message cannot turn the sandbox off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<bool>,
    /// Caller context, shown to the agent before the message (at most 32 items).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "nullable::or_default"
    )]
    #[schema(nullable)]
    pub context: Vec<ContextItem>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<RunOverrides>,
    /// The chat, schedule or relay bundle this message comes from: whom the run's usage is
    /// for and which budgets apply (docs/usage.md). Set by Switchboard's own surfaces; the
    /// server ignores it from a caller without the `admin` scope.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<crate::usage::RunOrigin>,
    /// The person whose message this is, set by the server from the caller (never read
    /// from the wire): who may not allow the run's calls under a `second_person` rule.
    #[serde(skip)]
    pub requested_by: Option<String>,
}

impl SendMessageRequest {
    /// A plain user message of the given type.
    pub fn user(content: impl Into<String>, kind: MessageType) -> Self {
        Self {
            message: InputMessage {
                role: Role::User,
                content: content.into(),
                attachments: Vec::new(),
            },
            kind,
            run_id: None,
            model: None,
            sandbox: None,
            context: Vec::new(),
            overrides: None,
            origin: None,
            requested_by: None,
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

    #[test]
    fn null_means_absent() {
        let with_nulls: SendMessageRequest = serde_json::from_str(
            r#"{"message":{"role":"user","content":"hi"},"type":null,"run_id":null,"model":null,
                "sandbox":null,"context":null,"overrides":null}"#,
        )
        .unwrap();
        let bare: SendMessageRequest =
            serde_json::from_str(r#"{"message":{"role":"user","content":"hi"}}"#).unwrap();
        assert_eq!(with_nulls, bare);
        assert_eq!(bare, SendMessageRequest::user("hi", MessageType::Message));
    }

    #[test]
    fn any_priority_string_is_accepted() {
        let p = |s: &str| serde_json::from_value::<ContextPriority>(s.into()).unwrap();
        assert_eq!(p("high"), ContextPriority::High);
        assert_eq!(p(" HIGH "), ContextPriority::High);
        assert_eq!(p("critical"), ContextPriority::High);
        assert_eq!(p("low"), ContextPriority::Low);
        assert_eq!(p("normal"), ContextPriority::Normal);
        assert_eq!(p("urgent"), ContextPriority::Normal);
        assert_eq!(p(""), ContextPriority::Normal);
        assert!(serde_json::from_value::<ContextPriority>(3.into()).is_err());
        assert_eq!(
            serde_json::to_string(&ContextPriority::High).unwrap(),
            "\"high\""
        );
    }

    #[test]
    fn overrides_are_the_stakpak_object() {
        let o: RunOverrides = serde_json::from_str(
            r#"{"model":"m","auto_approve":["view"],"system_prompt":"s","max_turns":3}"#,
        )
        .unwrap();
        assert_eq!(o.model.as_deref(), Some("m"));
        assert_eq!(o.max_turns, Some(3));
        assert!(!o.is_empty());
        assert!(RunOverrides::default().is_empty());
        let err = serde_json::from_str::<RunOverrides>(r#"{"timeout":3}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `timeout`"), "{err}");
    }
}
