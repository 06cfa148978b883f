use std::path::PathBuf;
use std::time::Duration;

use switchboard_protocol::{AutoApprove, PermissionMode};

/// Default of [`EngineConfig::live_buffer`].
pub const DEFAULT_LIVE_BUFFER: usize = 256;

/// Least [`EngineConfig::live_buffer`] the event log uses (a smaller value is raised to it):
/// below it a stream that pauses for a moment falls back to reading the store.
pub const MIN_LIVE_BUFFER: usize = 16;

/// Settings of the engine, filled from the configuration file by the binary.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// `[[approvals.rules]]`: who may decide which tool calls (docs/teams.md).
    pub approval_rules: Vec<crate::team::ApprovalRule>,
    /// Workspace used when a session is created without `cwd`.
    pub default_cwd: PathBuf,
    /// Model used when neither the session nor the message names one.
    pub default_model: Option<String>,
    pub default_permission_mode: PermissionMode,
    pub default_auto_approve: AutoApprove,
    /// Events older than this are pruned from the log (None: keep forever).
    pub event_retention: Option<Duration>,
    /// Capacity of each session's live channel, in committed batches (each at most 1,024
    /// events); a subscriber further behind than this falls back to reading the log.
    pub live_buffer: usize,
    /// How long a tool call waits for a human decision before it is rejected.
    pub approval_timeout: Duration,
    /// This instance's name in the shared store: the holder of its runs' leases.
    pub instance_id: String,
    /// How long a run's lease lasts unrenewed. It is renewed every third of this; when the
    /// instance dies, another closes its runs within about this time (plus a quarter).
    pub run_lease_ttl: Duration,
    /// This instance is the only one using the store (SQLite): at start it closes every run
    /// left running at once instead of waiting for their leases to run out.
    pub exclusive: bool,
    /// Where files' content is stored ([`crate::files`]); shared by instances that share a
    /// PostgreSQL store.
    pub files_dir: PathBuf,
    pub files: crate::files::FileLimits,
    /// Workspace checkpoints around runs ([`crate::checkpoints`]); off by default here, on
    /// in `switchboard serve`.
    pub checkpoints: crate::checkpoints::CheckpointConfig,
    /// `[mcp.servers]`: MCP servers every session's agent gets.
    pub mcp_servers: Vec<switchboard_protocol::McpServerSpec>,
    /// How much of the conversation so far a run gives its agent.
    pub history: HistoryLimits,
    /// Switchboard's own state (data directory, token, configuration, files store,
    /// checkpoints): no agent reaches it, no checkpoint records it, no workspace lies in it.
    pub protected: crate::ProtectedPaths,
    /// `[prices]` and `[[budgets]]` (docs/usage.md).
    pub usage: crate::UsageConfig,
}

/// The conversation a run hands its agent is the session's most recent messages within
/// these bounds, cut so that it opens with a user's message (a whole turn: providers refuse
/// a tool result without its call, Anthropic a conversation that does not open with the
/// user). Older messages stay in the transcript; the agent no longer sees them. This keeps
/// what each run reads, holds and sends bounded however long a session grows, and a long
/// session within the model's context window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HistoryLimits {
    pub max_messages: u32,
    /// Characters of content and tool calls (about 4 per token).
    pub max_chars: u64,
}

impl Default for HistoryLimits {
    fn default() -> Self {
        Self {
            max_messages: 2_000,
            max_chars: 400_000,
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            default_cwd: std::env::temp_dir(),
            default_model: None,
            default_permission_mode: PermissionMode::WorkspaceWrite,
            default_auto_approve: AutoApprove::default(),
            event_retention: None,
            live_buffer: DEFAULT_LIVE_BUFFER,
            approval_timeout: Duration::from_secs(900),
            instance_id: format!("local-{}", std::process::id()),
            run_lease_ttl: Duration::from_secs(10),
            exclusive: true,
            files_dir: std::env::temp_dir()
                .join(format!("switchboard-files-{}", std::process::id())),
            files: crate::files::FileLimits::default(),
            checkpoints: crate::checkpoints::CheckpointConfig::default(),
            mcp_servers: Vec::new(),
            history: HistoryLimits::default(),
            protected: crate::ProtectedPaths::default(),
            approval_rules: Vec::new(),
            usage: crate::UsageConfig::default(),
        }
    }
}
