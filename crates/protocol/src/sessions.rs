//! Session bodies: create, list, show.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

/// What produces a session's events.
///
/// On the wire: `"builtin"` or `{"acp": "<agent name from config>"}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendSpec {
    /// Switchboard's built-in LLM agent.
    #[default]
    Builtin,
    /// An external agent speaking the Agent Client Protocol, by its name in the config.
    Acp(String),
}

/// Written by hand: the derive leaves `{"acp": …}` open to other keys, which the server
/// refuses (an enum's object has exactly one).
impl utoipa::PartialSchema for BackendSpec {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use crate::schema::{one_of, string, t};
        use utoipa::openapi::schema::{AdditionalProperties, ObjectBuilder, Type};
        let builtin = string(None)
            .enum_values(Some(["builtin"]))
            .description(Some("Switchboard's built-in LLM agent"));
        let acp = ObjectBuilder::new()
            .schema_type(Type::Object)
            .required("acp")
            .property("acp", string(None))
            .additional_properties(Some(AdditionalProperties::FreeForm(false)))
            .description(Some(
                "An external agent speaking the Agent Client Protocol, by its name in the config",
            ));
        one_of([t(builtin), t(acp)])
    }
}

impl ToSchema for BackendSpec {}

/// What the agent may do without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Only `view`.
    ReadOnly,
    /// File tools inside the workspace run without asking; `run_command` asks.
    #[default]
    WorkspaceWrite,
    /// Nothing asks unless a rule says so; no workspace confinement.
    FullAccess,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::WorkspaceWrite => "workspace-write",
            Self::FullAccess => "full-access",
        }
    }
}

/// Which tool calls run without an approval: `"all"`, `"none"` or a list of tool names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AutoApprove {
    Keyword(AutoApproveKeyword),
    Tools(Vec<String>),
}

/// Written by hand: the derive cannot say that each name of the list is a name (not blank,
/// no spaces around it), which the server checks (422 `unprocessable_entity`).
impl utoipa::PartialSchema for AutoApprove {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use crate::schema::{TOOL_NAME_PATTERN, array, one_of, string, t};
        let keyword = string(None)
            .enum_values(Some(["all", "none"]))
            .description(Some("`all` or `none`"));
        let names = array(string(Some(TOOL_NAME_PATTERN)), None)
            .description(Some("Tool names (each not blank, no spaces around it)"));
        one_of([t(keyword), t(names)])
    }
}

impl ToSchema for AutoApprove {}

impl Default for AutoApprove {
    /// Nothing runs without asking unless the permission mode says so.
    fn default() -> Self {
        Self::Keyword(AutoApproveKeyword::None)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AutoApproveKeyword {
    All,
    None,
}

/// `POST /v1/sessions`. Every field is optional.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
pub struct CreateSessionRequest {
    /// Display title; defaults to "New session". Not empty or blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub title: Option<String>,
    /// Workspace directory of the session: an absolute path to a directory on the server
    /// (422 `unprocessable_entity` when there is none); defaults to the server's workspace
    /// root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^/")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendSpec>,
    /// Model name; defaults to the configured model. Not empty or blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve: Option<AutoApprove>,
    /// MCP servers for the session's agent, besides the server's `[mcp.servers]` (one of the
    /// same name replaces it). At most 16.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 16)]
    pub mcp_servers: Option<Vec<crate::McpServerSpec>>,
    /// The session's own sandbox network; default the server's (docs/sandbox.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::SessionSandbox>,
}

/// Whether a session has an active run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Idle,
    Running,
}

/// A session as returned by create, list and show.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionSummary {
    pub id: Uuid,
    pub title: String,
    pub cwd: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub run_status: RunStatus,
    /// The active run, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_run_id: Option<Uuid>,
    /// Seq of the newest event in the session's log (0 when none).
    #[serde(default)]
    pub last_event_id: u64,
    /// The session's backend (absent only when its stored config is unreadable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendSpec>,
    /// Tool calls waiting for a decision.
    #[serde(default)]
    pub pending_approvals: u32,
    /// Archived sessions are listed only with `?archived=true`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub archived: bool,
    /// The user it belongs to (docs/teams.md); absent: the server token's built-in admin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
}

/// `PATCH /v1/sessions/{id}`: rename, archive or unarchive; change the permission mode,
/// the model or `auto_approve` of the next runs.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSessionRequest {
    /// Not empty or blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub title: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
    /// The mode of the session's next runs (a run under way keeps the mode it started with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<PermissionMode>,
    /// The model of the session's next runs. Not empty or blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub model: Option<String>,
    /// What the session's next runs may do without asking (replaces the list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_approve: Option<AutoApprove>,
    /// The sandbox network of the session's next processes (an agent already running keeps
    /// its own until it is restarted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::SessionSandbox>,
    /// Whom the session is shared with besides its owner: user names, or `*` for everyone
    /// (replaces the list; `[]` shares it with nobody). Only its owner, an operator or an
    /// admin may change it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_items = 100)]
    pub shared_with: Option<Vec<String>>,
}

/// Query of `POST /v1/sessions/{id}/fork`: where to cut the history, and the new title.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkSessionQuery {
    /// The last log position (`seq`) the fork keeps; not inside a run. Default: the log's
    /// end, or just before the run under way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at: Option<u64>,
    /// Default: "Fork of" the session's title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S", max_length = 200)]
    pub title: Option<String>,
}

/// Query of `GET /v1/sessions`: a page, of archived sessions or (default) the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct ListSessionsQuery {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<bool>,
}

/// How a session is configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionConfig {
    pub backend: BackendSpec,
    pub model: Option<String>,
    pub permission_mode: PermissionMode,
    pub auto_approve: AutoApprove,
    /// The session's own MCP servers (the API shows their env and header values redacted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<crate::McpServerSpec>,
    /// The session's own sandbox network, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::SessionSandbox>,
}

/// `GET /v1/sessions/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionDetailResponse {
    pub session: SessionSummary,
    pub config: SessionConfig,
    /// How the processes its agent starts are confined (absent: its agent has no sandbox).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::SandboxStatus>,
    /// Whom it is shared with besides its owner (`*`: everyone).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shared_with: Vec<String>,
    /// What its model calls have used and cost so far (docs/usage.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::UsageTotals>,
}

/// `GET /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ListSessionsResponse {
    pub sessions: Vec<SessionSummary>,
    /// Number of sessions in all (not only this page).
    pub total: u64,
}

/// `limit` and `offset` query parameters of list endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct Page {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<u32>,
}

/// `POST /v1/sessions/{id}/cancel`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CancelRequest {
    pub run_id: Uuid,
}

/// Answer to [`CancelRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CancelResponse {
    pub cancelled: bool,
    pub run_id: Uuid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_wire_forms() {
        assert_eq!(
            serde_json::to_string(&BackendSpec::Builtin).unwrap(),
            "\"builtin\""
        );
        let acp: BackendSpec = serde_json::from_str(r#"{"acp":"claude"}"#).unwrap();
        assert_eq!(acp, BackendSpec::Acp("claude".into()));
    }

    #[test]
    fn auto_approve_wire_forms() {
        let all: AutoApprove = serde_json::from_str("\"all\"").unwrap();
        assert_eq!(all, AutoApprove::Keyword(AutoApproveKeyword::All));
        let list: AutoApprove = serde_json::from_str(r#"["view","fs__create"]"#).unwrap();
        assert_eq!(
            list,
            AutoApprove::Tools(vec!["view".into(), "fs__create".into()])
        );
        assert!(serde_json::from_str::<AutoApprove>("\"sometimes\"").is_err());
    }

    #[test]
    fn permission_mode_is_kebab() {
        let m: PermissionMode = serde_json::from_str("\"full-access\"").unwrap();
        assert_eq!(m, PermissionMode::FullAccess);
        assert_eq!(m.as_str(), "full-access");
    }
}
