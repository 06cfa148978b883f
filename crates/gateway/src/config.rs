//! How the dispatcher behaves: routing, titles, approvals, timeouts, access.

use std::collections::HashMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use switchboard_protocol::PermissionMode;

/// How direct messages map to sessions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DmScope {
    /// All direct messages, from every peer and channel, share one session.
    Main,
    /// One session per peer across channels.
    PerPeer,
    /// One session per channel and peer.
    #[default]
    PerChannelPeer,
}

/// What happens to tool calls that wait for approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalMode {
    /// Accept every call without asking.
    AllowAll,
    /// Reject every call without asking.
    DenyAll,
    /// Accept calls to listed tools; ask in the chat about the rest.
    #[default]
    Allowlist,
}

impl std::str::FromStr for ApprovalMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "allow_all" => Ok(Self::AllowAll),
            "deny_all" => Ok(Self::DenyAll),
            "allowlist" => Ok(Self::Allowlist),
            other => Err(format!(
                "{other:?} is not an approval mode (allow_all, deny_all, allowlist)"
            )),
        }
    }
}

/// The dispatcher's settings.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    pub dm_scope: DmScope,
    /// Title of a new session: `{channel}`, `{peer}`, `{chat_type}`, `{chat_id}`.
    pub title_template: String,
    pub approval_mode: ApprovalMode,
    /// Per-channel overrides of the approval mode.
    pub channel_modes: HashMap<String, ApprovalMode>,
    /// Tools accepted without asking in `allowlist` mode (`server__tool` matches `tool`).
    pub allowlist: Vec<String>,
    /// Per channel: peer ids allowed to answer approvals in groups (default: the requester).
    pub approvers: HashMap<String, Vec<String>>,
    /// Per channel: chat ids allowed without pairing.
    pub allowed_chats: HashMap<String, Vec<String>>,
    /// Per channel: peer (user) ids allowed without pairing, in any chat.
    pub allowed_peers: HashMap<String, Vec<String>>,
    /// Channels that need no allowlist or pairing (signed webhooks authenticate senders).
    pub open_channels: Vec<String>,
    /// Explicit bindings: routing key → session id.
    pub bindings: HashMap<String, uuid::Uuid>,
    /// Longest a run may take from the message that started it (approval waits count, but
    /// after a decision at least `timeout_floor` remains).
    pub run_timeout: Duration,
    pub timeout_floor: Duration,
    /// New sessions: workspace, model, permission mode (server defaults when `None`).
    pub session_cwd: Option<String>,
    pub session_model: Option<String>,
    pub session_permission_mode: Option<PermissionMode>,
    /// How long a notification's context waits for a reply.
    pub context_ttl: Duration,
    /// A connected channel that received nothing for this long while its platform holds
    /// updates for it is `degraded` (`hearing.rs`).
    pub deaf_after: Duration,
    /// How long the delivery ledger keeps an entry after its last change.
    pub ledger_retention: Duration,
    /// How long a pairing code is valid.
    pub pairing_ttl: Duration,
    /// Shutdown: approvals rejected this many at a time, each within this timeout.
    pub shutdown_concurrency: usize,
    pub shutdown_call_timeout: Duration,
    /// Inbound signed webhooks: name → secret (the channel is `webhook:<name>`).
    pub webhook_secrets: HashMap<String, Secret>,
    /// Accepted clock skew of a webhook's timestamp.
    pub webhook_tolerance: Duration,
    /// Largest file fetched from a platform for the agent (the server's per-file limit).
    pub max_file_bytes: u64,
    /// Most files one batch hands the agent (the server's per-message limit): a busy chat's
    /// queued messages are cut into batches under it.
    pub max_attachments: usize,
    /// Channels whose threads and topics share their chat's session (`thread_sessions =
    /// false`); replies still go to the thread a message came from.
    pub chat_sessions: Vec<String>,
    /// Where voice notes are transcribed; `None`: they reach the agent as audio only.
    pub speech: Option<crate::speech::SpeechConfig>,
}

/// A secret that never shows in `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl Default for GatewayConfig {
    fn default() -> Self {
        Self {
            dm_scope: DmScope::default(),
            title_template: "{channel} {chat_type} with {peer}".into(),
            approval_mode: ApprovalMode::default(),
            channel_modes: HashMap::new(),
            allowlist: Vec::new(),
            approvers: HashMap::new(),
            allowed_chats: HashMap::new(),
            allowed_peers: HashMap::new(),
            open_channels: Vec::new(),
            bindings: HashMap::new(),
            run_timeout: Duration::from_secs(30 * 60),
            timeout_floor: Duration::from_secs(60),
            session_cwd: None,
            session_model: None,
            session_permission_mode: None,
            context_ttl: Duration::from_secs(3600),
            deaf_after: Duration::from_secs(600),
            ledger_retention: Duration::from_secs(7 * 86_400),
            pairing_ttl: Duration::from_secs(3600),
            shutdown_concurrency: 4,
            shutdown_call_timeout: Duration::from_secs(5),
            webhook_secrets: HashMap::new(),
            webhook_tolerance: Duration::from_secs(300),
            max_file_bytes: 20 * 1024 * 1024,
            max_attachments: switchboard_protocol::DEFAULT_MAX_ATTACHMENTS,
            speech: None,
            chat_sessions: Vec::new(),
        }
    }
}

impl GatewayConfig {
    pub fn mode_for(&self, channel: &str) -> ApprovalMode {
        self.channel_modes
            .get(channel)
            .copied()
            .unwrap_or(self.approval_mode)
    }

    /// Whether the allowlist covers a tool (a listed `tool` covers `server__tool`).
    pub fn allowlisted(&self, tool: &str) -> bool {
        let bare = tool.rsplit_once("__").map(|(_, t)| t);
        self.allowlist
            .iter()
            .any(|t| t == tool || Some(t.as_str()) == bare)
    }
}
