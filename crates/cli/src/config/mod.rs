//! `switchboard.toml` plus `SWITCHBOARD_*` environment overrides.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use switchboard_protocol::PermissionMode;

mod gateway;

use gateway::gateway_settings;
pub use gateway::{DiscordSection, GatewaySettings, SlackSection};

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
    pub gateway: GatewaySection,
    #[serde(default)]
    pub channels: ChannelsSection,
    #[serde(default)]
    pub relay: RelaySection,
    #[serde(default)]
    pub scheduler: SchedulerSection,
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
    /// A workspace with more files gets no checkpoint (default 50,000).
    pub max_files: Option<usize>,
    /// Files larger than this are left out and named (default 10).
    pub max_file_mb: Option<u64>,
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

/// `[relay]`: bundles of agents.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelaySection {
    /// Where `BUNDLE.toml` and `policies.toml` live (default: `bundles/` beside the config
    /// file).
    pub bundles_dir: Option<PathBuf>,
    /// Write message bodies into the audit log (default false).
    pub audit_bodies: Option<bool>,
    /// Unfinished messages one member may have waiting (default 100).
    pub queue_capacity: Option<usize>,
    /// How long a tmux pane may take to become quiescent (default 30).
    pub quiescence_timeout_secs: Option<u64>,
    /// How long a sync send to an ACP or session member waits for its turn (default 600).
    pub turn_timeout_secs: Option<u64>,
    /// Hops a chain of replies may have (default 8; 0: no limit).
    pub max_hops: Option<u32>,
    /// A member's send continues the chain of the message it last received within this
    /// many seconds (default 600).
    pub reply_window_secs: Option<u64>,
    /// Sends (deliveries) one member may make per minute / per day (defaults 30 / 500; 0:
    /// no budget).
    pub member_sends_per_minute: Option<u64>,
    pub member_sends_per_day: Option<u64>,
    /// Sends a whole bundle may make per minute / per day (defaults 120 / 2000; 0: none).
    pub bundle_sends_per_minute: Option<u64>,
    pub bundle_sends_per_day: Option<u64>,
}

/// `[scheduler]`: scheduled tasks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SchedulerSection {
    /// How late a due time may be found (the server was busy or restarting) and still run;
    /// later, it counts as missed (default 60).
    pub grace_secs: Option<u64>,
    /// A failed delivery is tried again after this, then twice as long … (default 30).
    pub retry_base_secs: Option<u64>,
    /// Attempts of a delivery before it is failed (default 5).
    pub max_attempts: Option<u32>,
    /// How often due schedules are looked for, in milliseconds (default 1000).
    pub tick_ms: Option<u64>,
}

/// The scheduler's effective settings.
#[derive(Debug, Clone)]
pub struct SchedulerSettings {
    pub grace_secs: u64,
    pub retry_base_secs: u64,
    pub max_attempts: u32,
    pub tick_ms: u64,
    /// Tests only (`SWITCHBOARD_SCHEDULER_CLOCK_FILE`): the scheduler's time is read from
    /// this file.
    pub clock_file: Option<PathBuf>,
}

/// The relay's effective settings.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    pub bundles_dir: PathBuf,
    pub audit_bodies: bool,
    pub queue_capacity: usize,
    pub quiescence_timeout_secs: u64,
    pub turn_timeout_secs: u64,
    pub limits: switchboard_relay::Limits,
}

/// `[gateway]`: how chat messages map to sessions and approvals.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// Run the gateway inside `serve` (default: when a channel is configured).
    pub enabled: Option<bool>,
    /// `main`, `per_peer` or `per_channel_peer`.
    pub dm_scope: Option<switchboard_gateway::DmScope>,
    pub title_template: Option<String>,
    /// `allow_all`, `deny_all` or `allowlist`.
    pub approval_mode: Option<String>,
    pub allowlist: Option<Vec<String>>,
    pub run_timeout_secs: Option<u64>,
    pub session_cwd: Option<String>,
    pub session_model: Option<String>,
    pub session_permission_mode: Option<PermissionMode>,
    pub context_ttl_secs: Option<u64>,
    pub pairing_ttl_secs: Option<u64>,
    /// The longest rate-limit wait a platform call waits out (default 60).
    pub rate_limit_max_wait_secs: Option<u64>,
    /// `fail` (default: the call fails, its worker retries later) or `wait` (wait it out).
    pub rate_limit_over_cap: Option<String>,
    /// Routing key → session id.
    #[serde(default)]
    pub bindings: std::collections::BTreeMap<String, uuid::Uuid>,
}

/// `[channels.*]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelsSection {
    pub telegram: Option<TelegramSection>,
    pub slack: Option<SlackSection>,
    pub discord: Option<DiscordSection>,
    #[serde(default)]
    pub webhook: std::collections::BTreeMap<String, WebhookSection>,
}

#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramSection {
    pub token: Option<String>,
    pub base_url: Option<String>,
    /// Chat ids allowed without pairing.
    pub allowed_chats: Option<Vec<String>>,
    /// User ids allowed without pairing, in any chat.
    pub allowed_users: Option<Vec<String>>,
    /// User ids that may answer approvals in groups (default: whoever asked).
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
    /// In groups, answer only when mentioned or replied to (default true).
    pub require_mention: Option<bool>,
    /// One session per forum topic (default true), or one per group.
    pub thread_sessions: Option<bool>,
    /// Webhook mode: the public HTTPS URL Telegram POSTs to (ending in
    /// `/v1/gateway/channels/telegram/webhook`), and the secret it sends back.
    pub webhook_url: Option<String>,
    pub webhook_secret: Option<String>,
}

#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSection {
    pub secret: String,
    /// Where replies and approval prompts are POSTed.
    pub url: String,
    pub approval_mode: Option<String>,
    pub approvers: Option<Vec<String>>,
}

/// One ACP agent: the command that starts it (speaking ACP on stdio).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSection {
    pub command: String,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// Pass the agent Switchboard's own MCP server (`switchboard mcp --session`, whose
    /// `send_file` shares workspace files with the user). Default true.
    #[serde(default = "default_true")]
    pub switchboard_mcp: bool,
}

fn default_true() -> bool {
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

/// The effective settings after file, environment and defaults.
#[derive(Clone)]
pub struct Settings {
    pub config_path: Option<PathBuf>,
    pub listen: String,
    pub data_dir: PathBuf,
    pub token: Option<String>,
    pub provider_kind: String,
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: Option<String>,
    pub max_retries: u32,
    pub max_tokens: u32,
    pub image_fallback: bool,
    pub system_prompt: Option<String>,
    pub default_cwd: Option<PathBuf>,
    pub permission_mode: PermissionMode,
    pub approval_timeout_secs: u64,
    /// `[sessions] history_max_*`: what a run gives its agent of the conversation.
    pub history: switchboard_engine::HistoryLimits,
    pub command_timeout_secs: u64,
    pub command_max_timeout_secs: u64,
    pub output_cap_chars: usize,
    pub retention_days: Option<u64>,
    pub agents: std::collections::BTreeMap<String, AgentSection>,
    pub gateway: Option<GatewaySettings>,
    pub keepalive_secs: u64,
    /// `[events] live_buffer`: committed batches each session's live ring keeps.
    pub live_buffer: usize,
    pub max_body_bytes: usize,
    pub conn_limits: switchboard_http::ConnLimits,
    /// `[metrics] listen`: where `/metrics` is served without the token, if anywhere.
    pub metrics_listen: Option<String>,
    pub max_streams_per_token: usize,
    pub write_requests_per_minute: u32,
    pub write_limit_local_token: bool,
    pub allowed_hosts: Vec<String>,
    pub chat_completions_approvals: switchboard_server::routes::openai::DoorApprovals,
    pub relay: RelaySettings,
    pub scheduler: SchedulerSettings,
    /// `sqlite://…` or `postgres://…`; `None` means SQLite in the data directory.
    pub store_url: Option<String>,
    /// `nats://…`; `None` means a single instance (in-process fan-out only).
    pub bus_url: Option<String>,
    /// `[bus] secret` / `SWITCHBOARD_BUS_SECRET`.
    pub bus_secret: Option<String>,
    pub instance_id: String,
    /// Lease length of runs and chat connections (see `[store] lease_ms`).
    pub lease: std::time::Duration,
    pub files_dir: PathBuf,
    pub files: switchboard_engine::FileLimits,
    pub speech: Option<switchboard_gateway::speech::SpeechConfig>,
    pub checkpoints: switchboard_engine::checkpoints::CheckpointConfig,
    pub mcp_servers: Vec<switchboard_protocol::McpServerSpec>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `[sessions] history_max_messages` / `history_max_chars` (or `SWITCHBOARD_HISTORY_MAX_*`);
/// each at least 1.
fn history_limits(file: &SessionsSection) -> Result<switchboard_engine::HistoryLimits> {
    let default = switchboard_engine::HistoryLimits::default();
    let max_messages = env_parse("SWITCHBOARD_HISTORY_MAX_MESSAGES")?
        .or(file.history_max_messages)
        .unwrap_or(default.max_messages);
    let max_chars = env_parse("SWITCHBOARD_HISTORY_MAX_CHARS")?
        .or(file.history_max_chars)
        .unwrap_or(default.max_chars);
    if max_messages == 0 || max_chars == 0 {
        bail!("[sessions] history_max_messages and history_max_chars must be at least 1");
    }
    Ok(switchboard_engine::HistoryLimits {
        max_messages,
        max_chars,
    })
}

/// Bounds of `[events] live_buffer`: the engine's least (below it a stream that pauses for a
/// moment falls back to reading the store) up to 65,536 (each slot is reserved up front for
/// every session with a stream).
const LIVE_BUFFER_RANGE: std::ops::RangeInclusive<usize> =
    switchboard_engine::MIN_LIVE_BUFFER..=65_536;

/// `[events] live_buffer` (or `SWITCHBOARD_LIVE_BUFFER`), within [`LIVE_BUFFER_RANGE`].
fn live_buffer(file: &EventsSection) -> Result<usize> {
    let n = env_parse("SWITCHBOARD_LIVE_BUFFER")?
        .or(file.live_buffer)
        .unwrap_or(switchboard_engine::DEFAULT_LIVE_BUFFER);
    if !LIVE_BUFFER_RANGE.contains(&n) {
        bail!(
            "[events] live_buffer = {n}: it must be between {} and {}",
            LIVE_BUFFER_RANGE.start(),
            LIVE_BUFFER_RANGE.end()
        );
    }
    Ok(n)
}

fn env_parse<T: std::str::FromStr>(name: &str) -> Result<Option<T>> {
    match env(name) {
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| anyhow::anyhow!("{name}={v:?} is not a valid value")),
        None => Ok(None),
    }
}

fn home() -> Option<PathBuf> {
    env("HOME").map(PathBuf::from)
}

/// `$XDG_DATA_HOME/switchboard`, else `~/.local/share/switchboard`.
pub fn default_data_dir() -> PathBuf {
    env("XDG_DATA_HOME")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".local/share")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("switchboard")
}

/// `$XDG_CONFIG_HOME/switchboard/switchboard.toml`, else `~/.config/…`.
pub fn default_config_path() -> PathBuf {
    env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| home().map(|h| h.join(".config")))
        .unwrap_or_else(|| PathBuf::from("."))
        .join("switchboard/switchboard.toml")
}

impl Settings {
    /// Loads `explicit` (or `SWITCHBOARD_CONFIG`, or the XDG default if it exists), then
    /// applies the environment.
    pub fn load(
        explicit: Option<&Path>,
        data_dir_flag: Option<&Path>,
        listen_flag: Option<&str>,
    ) -> Result<Self> {
        let explicit = explicit
            .map(Path::to_path_buf)
            .or_else(|| env("SWITCHBOARD_CONFIG").map(PathBuf::from));
        let (path, file) = match explicit {
            Some(p) => {
                let text = std::fs::read_to_string(&p)
                    .with_context(|| format!("reading config file {}", p.display()))?;
                (Some(p.clone()), parse_config(&text, &p)?)
            }
            None => {
                let p = default_config_path();
                match std::fs::read_to_string(&p) {
                    Ok(text) => (Some(p.clone()), parse_config(&text, &p)?),
                    Err(_) => (None, FileConfig::default()),
                }
            }
        };
        let provider_kind = env("SWITCHBOARD_PROVIDER")
            .or(file.provider.kind.clone())
            .unwrap_or_else(|| "openai".into());
        let anthropic = match provider_kind.as_str() {
            "openai" => false,
            "anthropic" => true,
            other => bail!("provider {other:?} is not supported (supported: openai, anthropic)"),
        };
        let (base_url, api_key) = endpoint(anthropic, &file.provider, &env);
        let approval_timeout_secs: u64 = env_parse("SWITCHBOARD_APPROVAL_TIMEOUT_SECS")?
            .or(file.sessions.approval_timeout_secs)
            .unwrap_or(900);
        if approval_timeout_secs == 0 {
            bail!("the approval timeout must be at least 1 second");
        }
        let command_max_timeout_secs: u64 = env_parse("SWITCHBOARD_COMMAND_MAX_TIMEOUT_SECS")?
            .or(file.tools.command_max_timeout_secs)
            .unwrap_or(600)
            .max(1);
        let command_timeout_secs: u64 = env_parse("SWITCHBOARD_COMMAND_TIMEOUT_SECS")?
            .or(file.tools.command_timeout_secs)
            .unwrap_or(120)
            .clamp(1, command_max_timeout_secs);
        let permission_mode = match env("SWITCHBOARD_PERMISSION_MODE") {
            Some(v) => serde_json::from_value(serde_json::Value::String(v.clone()))
                .map_err(|_| anyhow::anyhow!("SWITCHBOARD_PERMISSION_MODE={v:?}: expected read-only, workspace-write or full-access"))?,
            None => file.sessions.permission_mode.unwrap_or_default(),
        };
        let relay = RelaySettings {
            bundles_dir: env("SWITCHBOARD_BUNDLES_DIR")
                .map(PathBuf::from)
                .or(file.relay.bundles_dir.clone())
                .unwrap_or_else(|| {
                    path.as_deref()
                        .and_then(Path::parent)
                        .map(Path::to_path_buf)
                        .unwrap_or_else(|| {
                            default_config_path()
                                .parent()
                                .map(Path::to_path_buf)
                                .unwrap_or_else(|| PathBuf::from("."))
                        })
                        .join("bundles")
                }),
            audit_bodies: env_parse("SWITCHBOARD_RELAY_AUDIT_BODIES")?
                .or(file.relay.audit_bodies)
                .unwrap_or(false),
            queue_capacity: env_parse("SWITCHBOARD_RELAY_QUEUE_CAPACITY")?
                .or(file.relay.queue_capacity)
                .unwrap_or(100)
                .max(1),
            quiescence_timeout_secs: env_parse("SWITCHBOARD_RELAY_QUIESCENCE_TIMEOUT_SECS")?
                .or(file.relay.quiescence_timeout_secs)
                .unwrap_or(30)
                .max(1),
            turn_timeout_secs: env_parse("SWITCHBOARD_RELAY_TURN_TIMEOUT_SECS")?
                .or(file.relay.turn_timeout_secs)
                .unwrap_or(600)
                .max(1),
            limits: {
                let d = switchboard_relay::Limits::default();
                switchboard_relay::Limits {
                    max_hops: env_parse("SWITCHBOARD_RELAY_MAX_HOPS")?
                        .or(file.relay.max_hops)
                        .unwrap_or(d.max_hops),
                    reply_window: env_parse("SWITCHBOARD_RELAY_REPLY_WINDOW_SECS")?
                        .or(file.relay.reply_window_secs)
                        .map(std::time::Duration::from_secs)
                        .unwrap_or(d.reply_window),
                    member_per_minute: env_parse("SWITCHBOARD_RELAY_MEMBER_SENDS_PER_MINUTE")?
                        .or(file.relay.member_sends_per_minute)
                        .unwrap_or(d.member_per_minute),
                    member_per_day: env_parse("SWITCHBOARD_RELAY_MEMBER_SENDS_PER_DAY")?
                        .or(file.relay.member_sends_per_day)
                        .unwrap_or(d.member_per_day),
                    bundle_per_minute: env_parse("SWITCHBOARD_RELAY_BUNDLE_SENDS_PER_MINUTE")?
                        .or(file.relay.bundle_sends_per_minute)
                        .unwrap_or(d.bundle_per_minute),
                    bundle_per_day: env_parse("SWITCHBOARD_RELAY_BUNDLE_SENDS_PER_DAY")?
                        .or(file.relay.bundle_sends_per_day)
                        .unwrap_or(d.bundle_per_day),
                }
            },
        };
        let scheduler = SchedulerSettings {
            grace_secs: env_parse("SWITCHBOARD_SCHEDULER_GRACE_SECS")?
                .or(file.scheduler.grace_secs)
                .unwrap_or(60),
            retry_base_secs: env_parse("SWITCHBOARD_SCHEDULER_RETRY_BASE_SECS")?
                .or(file.scheduler.retry_base_secs)
                .unwrap_or(30)
                .max(1),
            max_attempts: env_parse("SWITCHBOARD_SCHEDULER_MAX_ATTEMPTS")?
                .or(file.scheduler.max_attempts)
                .unwrap_or(5)
                .max(1),
            tick_ms: env_parse("SWITCHBOARD_SCHEDULER_TICK_MS")?
                .or(file.scheduler.tick_ms)
                .unwrap_or(1000)
                .clamp(50, 60_000),
            clock_file: env("SWITCHBOARD_SCHEDULER_CLOCK_FILE").map(PathBuf::from),
        };
        let allowed_hosts = match env("SWITCHBOARD_ALLOWED_HOSTS") {
            Some(v) => v
                .split(',')
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .collect(),
            None => file.server.allowed_hosts.clone().unwrap_or_default(),
        };
        let data_dir = data_dir_flag
            .map(Path::to_path_buf)
            .or_else(|| env("SWITCHBOARD_DATA_DIR").map(PathBuf::from))
            .or(file.data_dir.clone())
            .unwrap_or_else(default_data_dir);
        Ok(Self {
            store_url: env("SWITCHBOARD_STORE_URL").or(file.store.url.clone()),
            bus_url: env("SWITCHBOARD_BUS_URL").or(file.bus.url.clone()),
            bus_secret: match env("SWITCHBOARD_BUS_SECRET").or(file.bus.secret.clone()) {
                Some(s) if s.len() < 16 => {
                    bail!("[bus] secret must be at least 16 characters (32 random ones are best)")
                }
                s => s,
            },
            lease: std::time::Duration::from_millis(
                env_parse::<u64>("SWITCHBOARD_LEASE_MS")?
                    .or(file.store.lease_ms)
                    .unwrap_or(10_000)
                    .max(500),
            ),
            instance_id: env("SWITCHBOARD_INSTANCE_ID")
                .or(file.bus.instance_id.clone())
                .unwrap_or_else(default_instance_id),
            relay,
            scheduler,
            allowed_hosts,
            chat_completions_approvals: door_approvals(
                env("SWITCHBOARD_CHAT_COMPLETIONS_APPROVALS")
                    .or(file.server.chat_completions_approvals.clone()),
            )?,
            config_path: path,
            listen: listen_flag
                .map(str::to_string)
                .or_else(|| env("SWITCHBOARD_LISTEN"))
                .or(file.listen.clone())
                .unwrap_or_else(|| "127.0.0.1:7070".into()),
            data_dir: data_dir.clone(),
            token: env("SWITCHBOARD_TOKEN").or(file.token.clone()),
            provider_kind,
            base_url,
            api_key,
            model: env("SWITCHBOARD_MODEL").or(file.provider.model.clone()),
            max_retries: env_parse("SWITCHBOARD_PROVIDER_MAX_RETRIES")?
                .or(file.provider.max_retries)
                .unwrap_or(2),
            max_tokens: env_parse("SWITCHBOARD_ANTHROPIC_MAX_TOKENS")?
                .or(file.provider.max_tokens)
                .unwrap_or(8192)
                .max(1),
            image_fallback: env_parse("SWITCHBOARD_IMAGE_FALLBACK")?
                .or(file.provider.image_fallback)
                .unwrap_or(false),
            system_prompt: env("SWITCHBOARD_SYSTEM_PROMPT").or(file.provider.system_prompt.clone()),
            default_cwd: env("SWITCHBOARD_DEFAULT_CWD")
                .map(PathBuf::from)
                .or(file.sessions.default_cwd.clone()),
            permission_mode,
            approval_timeout_secs,
            history: history_limits(&file.sessions)?,
            command_timeout_secs,
            command_max_timeout_secs,
            output_cap_chars: env_parse("SWITCHBOARD_OUTPUT_CAP_CHARS")?
                .or(file.tools.output_cap_chars)
                .unwrap_or(30_000)
                .max(1000),
            agents: validate_agents(&file.agents)?,
            gateway: gateway_settings(&file)?,
            retention_days: env_parse("SWITCHBOARD_EVENT_RETENTION_DAYS")?
                .or(file.events.retention_days),
            keepalive_secs: env_parse("SWITCHBOARD_KEEPALIVE_SECS")?
                .or(file.events.keepalive_secs)
                .unwrap_or(15)
                .max(1),
            live_buffer: live_buffer(&file.events)?,
            max_body_bytes: env_parse("SWITCHBOARD_MAX_BODY_BYTES")?
                .or(file.server.max_body_bytes)
                .unwrap_or(2 * 1024 * 1024),
            conn_limits: switchboard_http::ConnLimits {
                header_timeout: std::time::Duration::from_secs(
                    env_parse("SWITCHBOARD_HEADER_TIMEOUT_SECS")?
                        .or(file.server.header_timeout_secs)
                        .unwrap_or(10)
                        .max(1),
                ),
                max_header_bytes: env_parse("SWITCHBOARD_MAX_HEADER_BYTES")?
                    .or(file.server.max_header_bytes)
                    .unwrap_or(64 * 1024)
                    .max(8192),
                body_timeout: std::time::Duration::from_secs(
                    env_parse("SWITCHBOARD_BODY_TIMEOUT_SECS")?
                        .or(file.server.body_timeout_secs)
                        .unwrap_or(30)
                        .max(1),
                ),
                max_connections: env_parse("SWITCHBOARD_MAX_CONNECTIONS")?
                    .or(file.server.max_connections)
                    .unwrap_or(10_000)
                    .max(16),
            },
            metrics_listen: env("SWITCHBOARD_METRICS_LISTEN").or(file.metrics.listen.clone()),
            max_streams_per_token: env_parse("SWITCHBOARD_MAX_STREAMS_PER_TOKEN")?
                .or(file.server.max_streams_per_token)
                .unwrap_or(1024)
                .max(1),
            write_requests_per_minute: env_parse("SWITCHBOARD_WRITE_REQUESTS_PER_MINUTE")?
                .or(file.server.write_requests_per_minute)
                .unwrap_or(0),
            write_limit_local_token: env_parse("SWITCHBOARD_WRITE_LIMIT_LOCAL_TOKEN")?
                .or(file.server.write_limit_local_token)
                .unwrap_or(false),
            files_dir: env("SWITCHBOARD_FILES_DIR")
                .map(PathBuf::from)
                .or(file.files.dir.clone())
                .unwrap_or_else(|| data_dir.join("files")),
            files: file_limits(&file.files)?,
            speech: speech(&file.speech)?,
            checkpoints: checkpoints(&file.checkpoints, &data_dir)?,
            mcp_servers: mcp_servers(&file.mcp)?,
        })
    }

    pub fn token_path(&self) -> PathBuf {
        self.data_dir.join("token")
    }

    /// The store URL in force (SQLite in the data directory by default).
    pub fn store_url(&self) -> String {
        self.store_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}", self.db_path().display()))
    }

    /// The store URL without its password, for messages.
    pub fn store_url_redacted(&self) -> String {
        redact_url(&self.store_url())
    }

    pub fn db_path(&self) -> PathBuf {
        self.data_dir.join("switchboard.db")
    }
}

/// The host name and the process id.
fn default_instance_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| env("HOSTNAME"))
        .unwrap_or_else(|| "switchboard".into());
    format!("{host}-{}", std::process::id())
}

/// `scheme://user:password@host/…` → `scheme://user:***@host/…`.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, host) = match rest.split_once('@') {
        Some((a, h)) if !a.contains('/') => (a, h),
        _ => return url.to_string(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_string(),
    }
}

/// The provider's base URL and key. The file's `base_url` and `api_key` belong to the
/// file's provider `kind` (default `openai`): when the environment picks the other provider
/// they are not used, so a key never goes to another provider's host.
fn endpoint(
    anthropic: bool,
    file: &ProviderSection,
    env: &dyn Fn(&str) -> Option<String>,
) -> (String, Option<String>) {
    let file_is_anthropic = file.kind.as_deref() == Some("anthropic");
    let (file_url, file_key) = if file_is_anthropic == anthropic {
        (file.base_url.clone(), file.api_key.clone())
    } else {
        (None, None)
    };
    if anthropic {
        (
            env("SWITCHBOARD_ANTHROPIC_BASE_URL")
                .or(file_url)
                .unwrap_or_else(|| "https://api.anthropic.com".into()),
            env("SWITCHBOARD_ANTHROPIC_API_KEY")
                .or_else(|| env("ANTHROPIC_API_KEY"))
                .or(file_key),
        )
    } else {
        (
            env("SWITCHBOARD_OPENAI_BASE_URL")
                .or(file_url)
                .unwrap_or_else(|| "https://api.openai.com/v1".into()),
            env("SWITCHBOARD_OPENAI_API_KEY")
                .or_else(|| env("OPENAI_API_KEY"))
                .or(file_key),
        )
    }
}

/// `[speech]` and `SWITCHBOARD_SPEECH_BASE_URL` / `_MODEL` / `_API_KEY`.
fn speech(section: &SpeechSection) -> Result<Option<switchboard_gateway::speech::SpeechConfig>> {
    let Some(base_url) = env("SWITCHBOARD_SPEECH_BASE_URL").or(section.base_url.clone()) else {
        return Ok(None);
    };
    if !(base_url.starts_with("http://") || base_url.starts_with("https://")) {
        bail!("[speech] base_url must be an http:// or https:// URL");
    }
    Ok(Some(switchboard_gateway::speech::SpeechConfig {
        base_url,
        model: env("SWITCHBOARD_SPEECH_MODEL")
            .or(section.model.clone())
            .unwrap_or_else(|| "whisper-1".into()),
        api_key: env("SWITCHBOARD_SPEECH_API_KEY")
            .or(section.api_key.clone())
            .map(switchboard_gateway::config::Secret),
    }))
}

/// `[files]` (and `SWITCHBOARD_MAX_FILE_MB`, `SWITCHBOARD_MAX_MESSAGE_MB`) over the defaults.
fn file_limits(section: &FilesSection) -> Result<switchboard_engine::FileLimits> {
    const MB: u64 = 1024 * 1024;
    let mut limits = switchboard_engine::FileLimits::default();
    let mb = |name: &str, key: &str, file: Option<u64>| -> Result<Option<u64>> {
        match env_parse::<u64>(name)?.or(file) {
            Some(0) => bail!("[files] {key} must be at least 1"),
            Some(n) => Ok(Some(n.saturating_mul(MB))),
            None => Ok(None),
        }
    };
    if let Some(b) = mb(
        "SWITCHBOARD_MAX_FILE_MB",
        "max_file_mb",
        section.max_file_mb,
    )? {
        limits.max_file_bytes = b;
    }
    if let Some(b) = mb(
        "SWITCHBOARD_MAX_MESSAGE_MB",
        "max_message_mb",
        section.max_message_mb,
    )? {
        limits.max_message_bytes = b;
    }
    if let Some(types) = &section.allowed_types {
        for t in types {
            let ok = t.split_once('/').is_some_and(|(a, b)| {
                !a.is_empty() && !b.is_empty() && !a.contains('*') && (b == "*" || !b.contains('*'))
            });
            if !ok {
                bail!("[files] allowed_types: {t:?} is not `type/subtype` or `type/*`");
            }
        }
        limits.allowed_types = types.clone();
    }
    Ok(limits)
}

/// `[checkpoints]` (and `SWITCHBOARD_CHECKPOINTS`, `SWITCHBOARD_CHECKPOINTS_DIR`,
/// `SWITCHBOARD_CHECKPOINT_MAX_FILES`, `SWITCHBOARD_CHECKPOINT_MAX_FILE_MB`).
fn checkpoints(
    section: &CheckpointsSection,
    data_dir: &Path,
) -> Result<switchboard_engine::checkpoints::CheckpointConfig> {
    let mut c = switchboard_engine::checkpoints::CheckpointConfig {
        enabled: env_parse("SWITCHBOARD_CHECKPOINTS")?
            .or(section.enabled)
            .unwrap_or(true),
        dir: env("SWITCHBOARD_CHECKPOINTS_DIR")
            .map(PathBuf::from)
            .or(section.dir.clone())
            .unwrap_or_else(|| data_dir.join("checkpoints")),
        exclude: section.exclude.clone().unwrap_or_default(),
        ..Default::default()
    };
    if let Some(n) = env_parse::<usize>("SWITCHBOARD_CHECKPOINT_MAX_FILES")?.or(section.max_files) {
        if n == 0 {
            bail!("[checkpoints] max_files must be at least 1");
        }
        c.max_files = n;
    }
    if let Some(mb) =
        env_parse::<u64>("SWITCHBOARD_CHECKPOINT_MAX_FILE_MB")?.or(section.max_file_mb)
    {
        if mb == 0 {
            bail!("[checkpoints] max_file_mb must be at least 1");
        }
        c.max_file_bytes = mb.saturating_mul(1024 * 1024);
    }
    for p in &c.exclude {
        if p.trim().is_empty() || p.contains('\n') {
            bail!("[checkpoints] exclude: {p:?} is not a pattern");
        }
    }
    Ok(c)
}

/// `[mcp.servers.NAME]` as specs, each checked.
fn mcp_servers(section: &McpSection) -> Result<Vec<switchboard_protocol::McpServerSpec>> {
    let mut out = Vec::new();
    for (name, e) in &section.servers {
        let spec = switchboard_protocol::McpServerSpec {
            name: name.clone(),
            command: e.command.clone(),
            args: e.args.clone(),
            env: e.env.clone(),
            url: e.url.clone(),
            headers: e.headers.clone(),
        };
        if let Some(p) = spec.problem() {
            bail!("[mcp.servers.{name}]: {p}");
        }
        out.push(spec);
    }
    Ok(out)
}

/// `[server] chat_completions_approvals` / `SWITCHBOARD_CHAT_COMPLETIONS_APPROVALS`.
fn door_approvals(v: Option<String>) -> Result<switchboard_server::routes::openai::DoorApprovals> {
    use switchboard_server::routes::openai::DoorApprovals;
    Ok(match v.as_deref().map(str::trim) {
        None | Some("deny") => DoorApprovals::Deny,
        Some("auto_approve") => DoorApprovals::AutoApprove,
        Some("wait") => DoorApprovals::Wait,
        Some(other) => bail!(
            "[server] chat_completions_approvals: {other:?} is not deny, auto_approve or wait"
        ),
    })
}

/// Agent names go into URLs and CLI flags; commands must be given.
fn validate_agents(
    agents: &std::collections::BTreeMap<String, AgentSection>,
) -> Result<std::collections::BTreeMap<String, AgentSection>> {
    for (name, a) in agents {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            bail!("[agents.{name}]: agent names use letters, digits, '-' and '_'");
        }
        if a.command.trim().is_empty() {
            bail!("[agents.{name}]: `command` must not be empty");
        }
    }
    Ok(agents.clone())
}

pub fn parse_config(text: &str, path: &Path) -> Result<FileConfig> {
    toml::from_str(text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
