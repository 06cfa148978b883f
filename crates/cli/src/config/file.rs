//! The configuration file's sections, as read from `switchboard.toml`.

use super::*;

/// The configuration file. Unknown keys are an error, so typos do not go unnoticed.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub token: Option<String>,
    #[serde(default)]
    pub provider: ProviderSection,
    #[serde(default)]
    pub sessions: SessionsSection,
    #[serde(default)]
    pub events: EventsSection,
    #[serde(default)]
    pub server: ServerSection,
    #[serde(default)]
    pub metrics: MetricsSection,
    #[serde(default)]
    pub tools: ToolsSection,
    /// External ACP agents by name: `[agents.claude] command = "…"`.
    #[serde(default)]
    pub agents: std::collections::BTreeMap<String, AgentSection>,
    #[serde(default)]
    pub gateway: switchboard_gateway::settings::GatewaySection,
    #[serde(default)]
    pub channels: switchboard_gateway::settings::ChannelsSection,
    #[serde(default)]
    pub relay: switchboard_relay::settings::RelaySection,
    #[serde(default)]
    pub scheduler: switchboard_scheduler::settings::SchedulerSection,
    #[serde(default)]
    pub store: StoreSection,
    #[serde(default)]
    pub bus: BusSection,
    #[serde(default)]
    pub files: FilesSection,
    #[serde(default)]
    pub speech: SpeechSection,
    #[serde(default)]
    pub checkpoints: CheckpointsSection,
    #[serde(default)]
    pub mcp: McpSection,
    #[serde(default)]
    pub sandbox: SandboxSection,
    #[serde(default)]
    pub auth: AuthSection,
    #[serde(default)]
    pub approvals: ApprovalsSection,
    /// `[prices."provider/model"]`: dollars per million tokens, over the built-in table
    /// (docs/usage.md).
    #[serde(default)]
    pub prices: std::collections::HashMap<String, switchboard_protocol::usage::ModelPrice>,
    /// `[[budgets]]`: limits on what a scope spends in a window (docs/usage.md).
    #[serde(default)]
    pub budgets: Vec<switchboard_protocol::usage::BudgetSpec>,
}

/// `[approvals]`: who may decide which tool calls (docs/teams.md).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalsSection {
    /// `[[approvals.rules]]`, the first that matches a call applies.
    #[serde(default)]
    pub rules: Vec<switchboard_engine::team::ApprovalRule>,
}

/// `[auth]`: how people sign in (docs/teams.md).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthSection {
    /// `[auth.oidc]`: sign-in through an OpenID Connect provider.
    pub oidc: Option<switchboard_server::oidc::OidcConfig>,
}

/// `[sandbox]`: how the built-in agent's commands are confined (docs/sandbox.md).
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// `auto` (the default: confine where this machine can, and say so), `required`
    /// (refuse a command that cannot be confined) or `off`.
    pub mode: Option<String>,
    /// `none` (the default), `full` or `allowlist` (the hosts of `allow_hosts`, over
    /// HTTP(S) through a filtering proxy).
    pub network: Option<String>,
    /// The hosts of `network = "allowlist"` (`example.com`, `*.example.com`).
    pub allow_hosts: Option<Vec<String>>,
    /// The network of MCP servers started over stdio for a sandboxed session (default
    /// `full`: reaching a service is most MCP servers' job).
    pub mcp_network: Option<String>,
    /// Most processes one command may have at once (default 512).
    pub max_processes: Option<u64>,
    /// Most seconds of CPU time one process may use (default: no limit).
    pub cpu_secs: Option<u64>,
    /// Most MiB of address space one process may map (default: no limit).
    pub memory_mb: Option<u64>,
    /// Variables of the server's environment sandboxed programs get besides the default
    /// list (names, or prefixes ending in `*`): docs/sandbox.md.
    pub env: Option<Vec<String>>,
    /// Confine `full-access` sessions' commands too (default false).
    pub full_access: Option<bool>,
}

/// `[mcp.servers.NAME]`: MCP servers every session's agent gets (a session may add its own).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpSection {
    #[serde(default)]
    pub servers: std::collections::BTreeMap<String, McpServerEntry>,
}

/// One MCP server: `command` (+ `args`, `env`) for stdio, or `url` (+ `headers`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerEntry {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    pub url: Option<String>,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
}

/// `[checkpoints]`: the workspace recorded before and after each run (see
/// docs/checkpoints.md).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointsSection {
    /// Default true.
    pub enabled: Option<bool>,
    /// Where the shadow repositories live (default `checkpoints/` in the data directory).
    pub dir: Option<PathBuf>,
    /// gitignore-style patterns left out (the workspace's own `.gitignore` files apply too).
    pub exclude: Option<Vec<String>>,
    /// A workspace with more files gets no checkpoint (default 500,000).
    pub max_files: Option<usize>,
    /// Files larger than this are left out and named (default 10).
    pub max_file_mb: Option<u64>,
    /// Watch workspaces so a checkpoint hashes only what changed (default true).
    pub watch: Option<bool>,
}

/// `[speech]`: where chat voice notes are transcribed (an OpenAI-compatible
/// `/audio/transcriptions`: OpenAI, Groq, whisper.cpp's server, faster-whisper servers).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpeechSection {
    /// E.g. `https://api.openai.com/v1`; without it voice notes are not transcribed.
    pub base_url: Option<String>,
    /// Default `whisper-1`.
    pub model: Option<String>,
    pub api_key: Option<String>,
}

/// `[files]`: files uploaded to sessions and attached to messages.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesSection {
    /// Where their content is stored (default: `files/` in the data directory). Instances
    /// sharing a PostgreSQL store must share this directory too.
    pub dir: Option<PathBuf>,
    /// Largest file accepted, in MB (default 20).
    pub max_file_mb: Option<u64>,
    /// Largest total of one message's attachments, in MB (default 20).
    pub max_message_mb: Option<u64>,
    /// Types accepted, sniffed from the content: `type/subtype` or `type/*` (default: common
    /// images, PDF, plain text, audio, MP4/WebM/QuickTime video, zip and gzip).
    pub allowed_types: Option<Vec<String>>,
}

/// `[bus]`: event fan-out between instances.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusSection {
    /// `nats://host:4222` (default: none, one instance).
    pub url: Option<String>,
    /// This instance's name on the bus (default: host name and pid).
    pub instance_id: Option<String>,
    /// The secret every message between instances is signed with (HMAC-SHA256); every
    /// instance of the cluster has the same (default: the API token, which they share).
    pub secret: Option<String>,
}

/// `[store]`: where sessions, runs and events live.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreSection {
    /// `sqlite://PATH` or `postgres://user:password@host/db` (default: SQLite in the data
    /// directory).
    pub url: Option<String>,
    /// How long a run's or a chat connection's lease lasts unrenewed, in milliseconds
    /// (default 10,000): when an instance dies, others take over its work within about
    /// this time.
    pub lease_ms: Option<u64>,
}

/// One external agent: an ACP agent's command (speaking ACP on stdio), or a remote A2A
/// agent's URL (`a2a`) with its credentials.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    #[serde(default)]
    pub command: String,
    /// A remote A2A agent: its base URL (its Agent Card is at
    /// `/.well-known/agent-card.json` under it) or its card's URL (docs/a2a.md).
    #[serde(default)]
    pub a2a: Option<String>,
    /// The A2A agent's bearer token (`Authorization: Bearer …`); best kept in the secrets
    /// file.
    #[serde(default)]
    pub token: Option<String>,
    /// More headers sent to the A2A agent (an API key header, say).
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Pass the agent Switchboard's own MCP server (`switchboard mcp --session`, whose
    /// `send_file` shares workspace files with the user). Default true.
    #[serde(default = "default_true")]
    pub switchboard_mcp: bool,
    /// `[agents.NAME.sandbox]`: how this agent's process is confined (docs/sandbox.md).
    #[serde(default)]
    pub sandbox: switchboard_sandbox::ProgramRules,
}

pub(super) fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderSection {
    /// `openai` (any OpenAI-compatible server) or `anthropic`.
    pub kind: Option<String>,
    pub base_url: Option<String>,
    pub api_key: Option<String>,
    pub model: Option<String>,
    pub max_retries: Option<u32>,
    pub system_prompt: Option<String>,
    /// Anthropic: most output tokens per reply.
    pub max_tokens: Option<u32>,
    /// When the model refuses images: send the text alone instead of failing the run
    /// (default false).
    pub image_fallback: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsSection {
    pub default_cwd: Option<PathBuf>,
    pub permission_mode: Option<PermissionMode>,
    pub approval_timeout_secs: Option<u64>,
    /// Most messages of the conversation so far a run gives its agent (default 2,000).
    pub history_max_messages: Option<u32>,
    /// Most characters of it, newest first (default 400,000, about 100,000 tokens).
    pub history_max_chars: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsSection {
    pub command_timeout_secs: Option<u64>,
    pub command_max_timeout_secs: Option<u64>,
    pub output_cap_chars: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventsSection {
    pub retention_days: Option<u64>,
    pub keepalive_secs: Option<u64>,
    /// Committed batches each session's live ring keeps for its streams (default 256).
    pub live_buffer: Option<usize>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub max_body_bytes: Option<usize>,
    /// Extra `host[:port]` names browsers may use to reach the server (behind a proxy, on
    /// a LAN address); loopback names of the listen port are always allowed.
    pub allowed_hosts: Option<Vec<String>>,
    /// What `/v1/chat/completions` does with tool calls that wait for approval: `deny`
    /// (default), `auto_approve` (what the permission mode allows runs) or `wait` (another
    /// surface answers; the approval timeout fails it closed).
    pub chat_completions_approvals: Option<String>,
    /// Seconds a client may take to send a request's headers (default 10).
    pub header_timeout_secs: Option<u64>,
    /// Largest request head, in bytes (default 65,536; at least 8,192).
    pub max_header_bytes: Option<usize>,
    /// Seconds a request body may go without a byte before the request ends (default 30).
    pub body_timeout_secs: Option<u64>,
    /// Most connections open at once (default 10,000; at least 16).
    pub max_connections: Option<usize>,
    /// Most event streams one token may hold open (default 1,024).
    pub max_streams_per_token: Option<usize>,
    /// Writes (POST, PUT, PATCH, DELETE) a token may make a minute (default 0: no limit).
    pub write_requests_per_minute: Option<u32>,
    /// Whether the server's own token counts against `write_requests_per_minute` too
    /// (default false: the gateway, relay, scheduler and console use it).
    pub write_limit_local_token: Option<bool>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsSection {
    /// A second address serving only `GET /metrics`, without the token (for a Prometheus
    /// on a private network); `/metrics` on the main listener stays, behind the token.
    pub listen: Option<String>,
}
