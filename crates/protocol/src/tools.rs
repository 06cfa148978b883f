//! Tool calls and the bodies of the `tools/*` endpoints.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// A tool call proposed by the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCall {
    /// Id given by the model (or by Switchboard when the model gives none).
    pub id: String,
    /// Tool name, e.g. `run_command`.
    pub name: String,
    /// Arguments as a JSON value (an object for well-behaved models).
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    /// Optional extra information (e.g. a readable preview).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Value>,
}

/// The name of an agent's question to a person (an ACP agent's `elicitation/create`): a
/// call no policy, allow-list or "allow all" may answer — only a person's decision.
pub const QUESTION_TOOL: &str = "acp__elicitation";

impl ToolCall {
    /// Whether this is an agent's question rather than a tool to run ([`QUESTION_TOOL`]).
    pub fn is_question(&self) -> bool {
        self.name == QUESTION_TOOL
    }
}

/// `GET /v1/sessions/{id}/tools/pending`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PendingToolsResponse {
    /// The run whose tool calls wait; `null` when nothing waits.
    pub run_id: Option<Uuid>,
    /// Calls awaiting a decision.
    pub tool_calls: Vec<ToolCall>,
}

/// What to do with one pending tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionAction {
    /// Run the tool.
    Accept,
    /// Do not run it; the model is told it was rejected (with `content` as the reason).
    Reject,
    /// Do not run it; hand `content` to the model as the tool's result.
    CustomResult,
}

/// A decision on one tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ToolDecision {
    pub action: DecisionAction,
    /// Reason for a rejection or the result for `custom_result`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Who decided, as people should read it (`Alice (telegram)`, `the CLI`): carried by the
    /// call's `ToolExecutionStarted` or `ToolRejected` as `decided_by`. One line, at most 100
    /// characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 100)]
    pub by: Option<String>,
    /// With `reject`: why, for programs — the call's `ToolRejected.cause` (`user` when
    /// absent). A surface that rejects by its own rule says `policy`, one that yields to a
    /// new chat message `new_message`. Ignored with the other actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<crate::RejectionCause>,
}

/// `POST /v1/sessions/{id}/tools/decisions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolDecisionsRequest {
    pub run_id: Uuid,
    /// Decisions keyed by tool call id (at least one).
    #[schema(schema_with = decisions_schema)]
    pub decisions: BTreeMap<String, ToolDecision>,
}

/// `decisions`: an object of [`ToolDecision`]s, at least one (the derive cannot say it).
fn decisions_schema() -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .additional_properties(Some(AdditionalProperties::RefOr(
            utoipa::openapi::Ref::from_schema_name("ToolDecision").into(),
        )))
        .min_properties(Some(1))
        .description(Some("Decisions keyed by tool call id (at least one)"))
        .build()
}

/// Answer to [`ToolDecisionsRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ToolDecisionsResponse {
    pub accepted: bool,
    pub run_id: Uuid,
    /// Calls of the request that were settled before it, and how: `allowed_by_policy` or
    /// `rejected_by_policy` (the permission mode or auto-approve decided without asking),
    /// or `accepted`, `rejected`, `custom_result` (decided earlier). Such decisions change
    /// nothing; the rest of the request was applied.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub already_settled: std::collections::BTreeMap<String, String>,
}

/// One approval waiting for a human, in any session (`GET /v1/approvals`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WaitingApproval {
    pub session_id: Uuid,
    pub session_title: String,
    /// The session's backend (`null` for a session made before backends were recorded).
    pub backend: Option<crate::BackendSpec>,
    /// The run that waits: decide its calls with `POST /v1/sessions/{id}/tools/decisions`.
    pub run_id: Uuid,
    /// The calls still undecided.
    pub tool_calls: Vec<ToolCall>,
    /// When the run started waiting (RFC 3339).
    pub created_at: String,
    /// When the undecided calls are rejected unanswered (RFC 3339): approvals fail closed.
    pub expires_at: String,
    /// The session's owner (absent: the server token's built-in admin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Whom the session is shared with besides its owner (`*`: everyone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<String>,
    /// The person whose message started the run (absent: the server token or a chat).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
    /// The session's permission mode (what approval rules may look at).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<crate::PermissionMode>,
}

/// `GET /v1/approvals`: every approval waiting, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalsResponse {
    pub approvals: Vec<WaitingApproval>,
}

/// `data` of an `approval_resolved` frame of `GET /v1/approvals/events`: the approval no
/// longer waits (every call decided, timed out, cancelled, or its session deleted).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ApprovalResolved {
    pub session_id: Uuid,
    pub run_id: Uuid,
}
