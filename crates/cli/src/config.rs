//! `switchboard.toml` plus `SWITCHBOARD_*` environment overrides.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use switchboard_protocol::PermissionMode;

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
    pub store: StoreSection,
    #[serde(default)]
    pub bus: BusSection,
}

/// `[bus]`: event fan-out between instances.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BusSection {
    /// `nats://host:4222` (default: none, one instance).
    pub url: Option<String>,
    /// This instance's name on the bus (default: host name and pid).
    pub instance_id: Option<String>,
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
}

/// The relay's effective settings.
#[derive(Debug, Clone)]
pub struct RelaySettings {
    pub bundles_dir: PathBuf,
    pub audit_bodies: bool,
    pub queue_capacity: usize,
    pub quiescence_timeout_secs: u64,
    pub turn_timeout_secs: u64,
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
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsSection {
    pub default_cwd: Option<PathBuf>,
    pub permission_mode: Option<PermissionMode>,
    pub approval_timeout_secs: Option<u64>,
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
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSection {
    pub max_body_bytes: Option<usize>,
    /// Extra `host[:port]` names browsers may use to reach the server (behind a proxy, on
    /// a LAN address); loopback names of the listen port are always allowed.
    pub allowed_hosts: Option<Vec<String>>,
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
    pub system_prompt: Option<String>,
    pub default_cwd: Option<PathBuf>,
    pub permission_mode: PermissionMode,
    pub approval_timeout_secs: u64,
    pub command_timeout_secs: u64,
    pub command_max_timeout_secs: u64,
    pub output_cap_chars: usize,
    pub retention_days: Option<u64>,
    pub agents: std::collections::BTreeMap<String, AgentSection>,
    pub gateway: Option<GatewaySettings>,
    pub keepalive_secs: u64,
    pub max_body_bytes: usize,
    pub allowed_hosts: Vec<String>,
    pub relay: RelaySettings,
    /// `sqlite://…` or `postgres://…`; `None` means SQLite in the data directory.
    pub store_url: Option<String>,
    /// `nats://…`; `None` means a single instance (in-process fan-out only).
    pub bus_url: Option<String>,
    pub instance_id: String,
    /// Lease length of runs and chat connections (see `[store] lease_ms`).
    pub lease: std::time::Duration,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
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
        };
        let allowed_hosts = match env("SWITCHBOARD_ALLOWED_HOSTS") {
            Some(v) => v
                .split(',')
                .map(|h| h.trim().to_string())
                .filter(|h| !h.is_empty())
                .collect(),
            None => file.server.allowed_hosts.clone().unwrap_or_default(),
        };
        Ok(Self {
            store_url: env("SWITCHBOARD_STORE_URL").or(file.store.url.clone()),
            bus_url: env("SWITCHBOARD_BUS_URL").or(file.bus.url.clone()),
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
            allowed_hosts,
            config_path: path,
            listen: listen_flag
                .map(str::to_string)
                .or_else(|| env("SWITCHBOARD_LISTEN"))
                .or(file.listen.clone())
                .unwrap_or_else(|| "127.0.0.1:7070".into()),
            data_dir: data_dir_flag
                .map(Path::to_path_buf)
                .or_else(|| env("SWITCHBOARD_DATA_DIR").map(PathBuf::from))
                .or(file.data_dir.clone())
                .unwrap_or_else(default_data_dir),
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
            system_prompt: env("SWITCHBOARD_SYSTEM_PROMPT").or(file.provider.system_prompt.clone()),
            default_cwd: env("SWITCHBOARD_DEFAULT_CWD")
                .map(PathBuf::from)
                .or(file.sessions.default_cwd.clone()),
            permission_mode,
            approval_timeout_secs,
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
            max_body_bytes: env_parse("SWITCHBOARD_MAX_BODY_BYTES")?
                .or(file.server.max_body_bytes)
                .unwrap_or(2 * 1024 * 1024),
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

#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackSection {
    pub bot_token: Option<String>,
    /// Socket Mode (`xapp-…`); without it, the Events API at
    /// `/v1/gateway/channels/slack/webhook` with `signing_secret`.
    pub app_token: Option<String>,
    pub signing_secret: Option<String>,
    pub api_base: Option<String>,
    pub allowed_chats: Option<Vec<String>>,
    pub allowed_users: Option<Vec<String>>,
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
}

impl std::fmt::Debug for SlackSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackSection")
            .field("api_base", &self.api_base)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiscordSection {
    pub token: Option<String>,
    pub api_base: Option<String>,
    pub gateway_url: Option<String>,
    /// Only these guilds (default: all the bot is in).
    pub guilds: Option<Vec<String>>,
    /// Guild channels where the bot answers without being mentioned.
    pub channels: Option<Vec<String>>,
    pub allowed_chats: Option<Vec<String>>,
    pub allowed_users: Option<Vec<String>>,
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
}

impl std::fmt::Debug for DiscordSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordSection")
            .field("api_base", &self.api_base)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for TelegramSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramSection")
            .field("token", &self.token.as_ref().map(|_| "[redacted]"))
            .field("base_url", &self.base_url)
            .field("allowed_chats", &self.allowed_chats)
            .field("webhook_url", &self.webhook_url)
            .field(
                "webhook_secret",
                &self.webhook_secret.as_ref().map(|_| "[redacted]"),
            )
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for WebhookSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSection")
            .field("secret", &"[redacted]")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The chat gateway's settings, if any channel is configured (file or environment).
#[derive(Clone)]
pub struct GatewaySettings {
    pub config: switchboard_gateway::GatewayConfig,
    pub telegram: Option<switchboard_gateway::telegram::TelegramConfig>,
    pub slack: Option<switchboard_gateway::slack::SlackConfig>,
    pub discord: Option<switchboard_gateway::discord::DiscordConfig>,
    pub webhooks: Vec<switchboard_gateway::webhook::WebhookConfig>,
    pub enabled: bool,
}

/// The access and approval settings of a platform channel's TOML section.
struct ChannelAccess<'a> {
    chats: &'a Option<Vec<String>>,
    users: &'a Option<Vec<String>>,
    approvers: &'a Option<Vec<String>>,
    mode: &'a Option<String>,
}

/// Applies a platform channel's access and approval settings, each overridden by its
/// environment variable: `{prefix}_ALLOWED_CHATS`, `{prefix}_ALLOWED_USERS`,
/// `{prefix}_APPROVERS` (comma-separated) and `{prefix}_APPROVAL_MODE`.
fn channel_access(
    config: &mut switchboard_gateway::GatewayConfig,
    name: &str,
    prefix: &str,
    file: ChannelAccess<'_>,
) -> Result<()> {
    let list = |suffix: &str, from_file: &Option<Vec<String>>| {
        env(&format!("{prefix}_{suffix}"))
            .map(|v| csv(&v))
            .or(from_file.clone())
    };
    config.allowed_chats.insert(
        name.to_string(),
        list("ALLOWED_CHATS", file.chats).unwrap_or_default(),
    );
    config.allowed_peers.insert(
        name.to_string(),
        list("ALLOWED_USERS", file.users).unwrap_or_default(),
    );
    if let Some(a) = list("APPROVERS", file.approvers) {
        config.approvers.insert(name.to_string(), a);
    }
    let mode_var = format!("{prefix}_APPROVAL_MODE");
    let mode = match env(&mode_var) {
        Some(m) => Some((mode_var, m)),
        None => file
            .mode
            .clone()
            .map(|m| (format!("[channels.{name}] approval_mode"), m)),
    };
    if let Some((what, m)) = mode {
        config
            .channel_modes
            .insert(name.to_string(), approval_mode(&what, &m)?);
    }
    Ok(())
}

fn csv(v: &str) -> Vec<String> {
    v.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

fn approval_mode(key: &str, v: &str) -> Result<switchboard_gateway::ApprovalMode> {
    v.parse().map_err(|e: String| anyhow::anyhow!("{key}: {e}"))
}

fn gateway_settings(file: &FileConfig) -> Result<Option<GatewaySettings>> {
    use switchboard_gateway::{GatewayConfig, config::Secret};
    let g = &file.gateway;
    let mut config = GatewayConfig::default();
    if let Some(s) = g.dm_scope {
        config.dm_scope = s;
    }
    if let Some(t) = &g.title_template {
        config.title_template = t.clone();
    }
    let mode = env("SWITCHBOARD_GATEWAY_APPROVAL_MODE").or(g.approval_mode.clone());
    if let Some(m) = mode {
        config.approval_mode = approval_mode(
            "SWITCHBOARD_GATEWAY_APPROVAL_MODE / [gateway] approval_mode",
            &m,
        )?;
    }
    config.allowlist = match env("SWITCHBOARD_GATEWAY_ALLOWLIST") {
        Some(v) => csv(&v),
        None => g.allowlist.clone().unwrap_or_default(),
    };
    if let Some(t) = g.run_timeout_secs {
        if t == 0 {
            bail!("[gateway] run_timeout_secs must be at least 1");
        }
        config.run_timeout = std::time::Duration::from_secs(t);
    }
    if let Some(t) = env_parse::<u64>("SWITCHBOARD_GATEWAY_RUN_TIMEOUT_SECS")? {
        config.run_timeout = std::time::Duration::from_secs(t.max(1));
    }
    config.session_cwd = g.session_cwd.clone();
    config.session_model = g.session_model.clone();
    config.session_permission_mode = g.session_permission_mode;
    if let Some(t) = g.context_ttl_secs {
        config.context_ttl = std::time::Duration::from_secs(t);
    }
    if let Some(t) = g.pairing_ttl_secs {
        config.pairing_ttl = std::time::Duration::from_secs(t);
    }
    config.bindings = g.bindings.clone().into_iter().collect();

    let file_tg = file.channels.telegram.clone().unwrap_or_default();
    let token = env("SWITCHBOARD_TELEGRAM_TOKEN").or(file_tg.token.clone());
    let mut telegram = match token {
        None => {
            if file.channels.telegram.is_some() {
                bail!(
                    "[channels.telegram]: no bot token: set `token` or SWITCHBOARD_TELEGRAM_TOKEN"
                );
            }
            None
        }
        Some(token) => {
            if token.trim().is_empty() || !token.contains(':') {
                bail!(
                    "SWITCHBOARD_TELEGRAM_TOKEN / [channels.telegram] token: not a bot token (expected `<id>:<secret>` from @BotFather)"
                );
            }
            let name = "telegram".to_string();
            channel_access(
                &mut config,
                &name,
                "SWITCHBOARD_TELEGRAM",
                ChannelAccess {
                    chats: &file_tg.allowed_chats,
                    users: &file_tg.allowed_users,
                    approvers: &file_tg.approvers,
                    mode: &file_tg.approval_mode,
                },
            )?;
            let mut tg = switchboard_gateway::telegram::TelegramConfig::new(token);
            tg.name = name;
            if let Some(b) = env("SWITCHBOARD_TELEGRAM_BASE_URL").or(file_tg.base_url.clone()) {
                tg.base_url = b;
            }
            if let Some(r) = env_parse::<bool>("SWITCHBOARD_TELEGRAM_REQUIRE_MENTION")?
                .or(file_tg.require_mention)
            {
                tg.require_mention_in_groups = r;
            }
            if let Some(p) = env_parse::<u64>("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS")? {
                tg.poll_timeout_secs = p;
            }
            let hook_url = env("SWITCHBOARD_TELEGRAM_WEBHOOK_URL").or(file_tg.webhook_url.clone());
            let hook_secret =
                env("SWITCHBOARD_TELEGRAM_WEBHOOK_SECRET").or(file_tg.webhook_secret.clone());
            match (hook_url, hook_secret) {
                (None, None) => {}
                (Some(url), Some(secret)) => {
                    if secret.is_empty()
                        || secret.len() > 256
                        || !secret
                            .chars()
                            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
                    {
                        bail!(
                            "[channels.telegram] webhook_secret: 1-256 characters of A-Z, a-z, 0-9, _ and -"
                        );
                    }
                    if !url.starts_with("https://") && !url.starts_with("http://") {
                        bail!("[channels.telegram] webhook_url: must be an http(s) URL");
                    }
                    tg.webhook = Some(switchboard_gateway::telegram::TelegramWebhook {
                        url,
                        secret_token: secret,
                    });
                }
                _ => bail!(
                    "[channels.telegram]: webhook mode needs both webhook_url and webhook_secret"
                ),
            }
            Some(tg)
        }
    };
    let file_slack = file.channels.slack.clone().unwrap_or_default();
    let mut slack = match env("SWITCHBOARD_SLACK_BOT_TOKEN").or(file_slack.bot_token.clone()) {
        None => {
            if file.channels.slack.is_some() {
                bail!(
                    "[channels.slack]: no bot token: set `bot_token` or SWITCHBOARD_SLACK_BOT_TOKEN"
                );
            }
            None
        }
        Some(token) => {
            if !token.starts_with("xoxb-") {
                bail!(
                    "SWITCHBOARD_SLACK_BOT_TOKEN / [channels.slack] bot_token: expected a bot token (xoxb-…)"
                );
            }
            let mut c = switchboard_gateway::slack::SlackConfig::new(token);
            c.app_token = env("SWITCHBOARD_SLACK_APP_TOKEN").or(file_slack.app_token.clone());
            c.signing_secret =
                env("SWITCHBOARD_SLACK_SIGNING_SECRET").or(file_slack.signing_secret.clone());
            if c.app_token.is_none() && c.signing_secret.is_none() {
                bail!(
                    "[channels.slack]: set app_token (Socket Mode, SWITCHBOARD_SLACK_APP_TOKEN) or signing_secret (Events API, SWITCHBOARD_SLACK_SIGNING_SECRET)"
                );
            }
            if let Some(b) = env("SWITCHBOARD_SLACK_API_BASE").or(file_slack.api_base.clone()) {
                c.api_base = b;
            }
            channel_access(
                &mut config,
                &c.name,
                "SWITCHBOARD_SLACK",
                ChannelAccess {
                    chats: &file_slack.allowed_chats,
                    users: &file_slack.allowed_users,
                    approvers: &file_slack.approvers,
                    mode: &file_slack.approval_mode,
                },
            )?;
            Some(c)
        }
    };
    let file_dc = file.channels.discord.clone().unwrap_or_default();
    let mut discord = match env("SWITCHBOARD_DISCORD_TOKEN").or(file_dc.token.clone()) {
        None => {
            if file.channels.discord.is_some() {
                bail!("[channels.discord]: no bot token: set `token` or SWITCHBOARD_DISCORD_TOKEN");
            }
            None
        }
        Some(token) => {
            if token.trim().is_empty() {
                bail!("SWITCHBOARD_DISCORD_TOKEN / [channels.discord] token: must not be empty");
            }
            let mut c = switchboard_gateway::discord::DiscordConfig::new(token);
            if let Some(b) = env("SWITCHBOARD_DISCORD_API_BASE").or(file_dc.api_base.clone()) {
                c.api_base = b;
            }
            c.gateway_url = env("SWITCHBOARD_DISCORD_GATEWAY_URL").or(file_dc.gateway_url.clone());
            c.guilds = env("SWITCHBOARD_DISCORD_GUILDS")
                .map(|v| csv(&v))
                .or(file_dc.guilds.clone())
                .unwrap_or_default();
            c.channels = env("SWITCHBOARD_DISCORD_CHANNELS")
                .map(|v| csv(&v))
                .or(file_dc.channels.clone())
                .unwrap_or_default();
            channel_access(
                &mut config,
                &c.name,
                "SWITCHBOARD_DISCORD",
                ChannelAccess {
                    chats: &file_dc.allowed_chats,
                    users: &file_dc.allowed_users,
                    approvers: &file_dc.approvers,
                    mode: &file_dc.approval_mode,
                },
            )?;
            Some(c)
        }
    };
    let mut webhooks = Vec::new();
    for (name, w) in &file.channels.webhook {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            bail!("[channels.webhook.{name}]: webhook names use letters, digits, '-' and '_'");
        }
        if w.secret.len() < 16 {
            bail!("[channels.webhook.{name}] secret: use at least 16 characters");
        }
        if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
            bail!("[channels.webhook.{name}] url: must be an http(s) URL");
        }
        let channel = format!("webhook:{name}");
        config.open_channels.push(channel.clone());
        config
            .webhook_secrets
            .insert(name.clone(), Secret(w.secret.clone()));
        if let Some(m) = &w.approval_mode {
            config.channel_modes.insert(
                channel.clone(),
                approval_mode(&format!("[channels.webhook.{name}] approval_mode"), m)?,
            );
        }
        if let Some(a) = &w.approvers {
            config.approvers.insert(channel.clone(), a.clone());
        }
        webhooks.push(switchboard_gateway::webhook::WebhookConfig {
            tolerance: config.webhook_tolerance,
            max_chars: 4000,
            ..switchboard_gateway::webhook::WebhookConfig::new(
                name.clone(),
                w.secret.clone(),
                w.url.clone(),
            )
        });
    }
    // One retry policy for every platform: the cap on a rate-limit wait, and what a longer
    // one does.
    let max_wait = env_parse::<u64>("SWITCHBOARD_GATEWAY_RATE_LIMIT_MAX_WAIT_SECS")?
        .or(g.rate_limit_max_wait_secs)
        .map(std::time::Duration::from_secs);
    let over_cap = match env("SWITCHBOARD_GATEWAY_RATE_LIMIT_OVER_CAP")
        .or(g.rate_limit_over_cap.clone())
        .as_deref()
    {
        None => None,
        Some("fail") => Some(switchboard_gateway::platform::OverCap::Fail),
        Some("wait") => Some(switchboard_gateway::platform::OverCap::Wait),
        Some(other) => bail!(
            "[gateway] rate_limit_over_cap / SWITCHBOARD_GATEWAY_RATE_LIMIT_OVER_CAP: {other:?} is not `fail` or `wait`"
        ),
    };
    macro_rules! retry_settings {
        ($($c:expr),*) => {$(
            if let Some(w) = max_wait { $c.max_retry_after = w; }
            if let Some(o) = over_cap { $c.over_cap = o; }
        )*};
    }
    if let Some(c) = telegram.as_mut() {
        retry_settings!(c);
    }
    if let Some(c) = slack.as_mut() {
        retry_settings!(c);
    }
    if let Some(c) = discord.as_mut() {
        retry_settings!(c);
    }
    for c in webhooks.iter_mut() {
        retry_settings!(c);
    }
    if telegram.is_none() && slack.is_none() && discord.is_none() && webhooks.is_empty() {
        if g.enabled == Some(true) {
            bail!(
                "[gateway] enabled = true but no channel is configured ([channels.telegram], [channels.slack], [channels.discord] or [channels.webhook.NAME])"
            );
        }
        return Ok(None);
    }
    Ok(Some(GatewaySettings {
        config,
        telegram,
        slack,
        discord,
        webhooks,
        enabled: g.enabled.unwrap_or(true),
    }))
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
mod tests {
    use super::*;

    #[test]
    fn one_rate_limit_policy_reaches_every_channel() {
        // (env vars named SWITCHBOARD_GATEWAY_RATE_LIMIT_* are not set in tests)
        let file = parse_config(
            "[gateway]\nrate_limit_max_wait_secs = 5\nrate_limit_over_cap = \"wait\"\n\
             [channels.webhook.ops]\nsecret = \"0123456789abcdef\"\nurl = \"https://example.com/h\"\n",
            Path::new("s.toml"),
        )
        .unwrap();
        let g = gateway_settings(&file).unwrap().unwrap();
        let w = &g.webhooks[0];
        assert_eq!(w.max_retry_after, std::time::Duration::from_secs(5));
        assert_eq!(w.over_cap, switchboard_gateway::platform::OverCap::Wait);
        let bad = parse_config(
            "[gateway]\nrate_limit_over_cap = \"sometimes\"\n[channels.webhook.ops]\nsecret = \"0123456789abcdef\"\nurl = \"https://example.com/h\"\n",
            Path::new("s.toml"),
        )
        .unwrap();
        let err = gateway_settings(&bad).err().unwrap().to_string();
        assert!(
            err.contains("rate_limit_over_cap") && err.contains("sometimes"),
            "{err}"
        );
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = parse_config("[provider]\nmodle = \"x\"\n", Path::new("s.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("modle"), "{err}");
    }

    #[test]
    fn a_file_key_never_goes_to_the_other_provider() {
        let file = ProviderSection {
            kind: None,
            base_url: Some("https://openrouter.ai/api/v1".into()),
            api_key: Some("sk-or-file".into()),
            ..ProviderSection::default()
        };
        let ant = |k: &str| (k == "ANTHROPIC_API_KEY").then(|| "sk-ant-env".to_string());
        assert_eq!(
            endpoint(true, &file, &ant),
            (
                "https://api.anthropic.com".into(),
                Some("sk-ant-env".into())
            )
        );
        let none = |_: &str| None;
        assert_eq!(
            endpoint(true, &file, &none),
            ("https://api.anthropic.com".into(), None)
        );
        assert_eq!(
            endpoint(false, &file, &none),
            (
                "https://openrouter.ai/api/v1".into(),
                Some("sk-or-file".into())
            )
        );
        let anthropic_file = ProviderSection {
            kind: Some("anthropic".into()),
            api_key: Some("sk-ant-file".into()),
            ..ProviderSection::default()
        };
        assert_eq!(endpoint(false, &anthropic_file, &none).1, None);
        assert_eq!(
            endpoint(true, &anthropic_file, &none).1,
            Some("sk-ant-file".into())
        );
    }

    #[test]
    fn agents_parse_and_bad_ones_are_named() {
        let c = parse_config(
            "[agents.claude]\ncommand = \"claude-code-acp\"\nargs = [\"--x\"]\nenv = { A = \"1\" }\n",
            Path::new("s.toml"),
        )
        .unwrap();
        let a = &c.agents["claude"];
        assert_eq!(
            (a.command.as_str(), a.args.len(), a.env["A"].as_str()),
            ("claude-code-acp", 1, "1")
        );
        assert!(validate_agents(&c.agents).is_ok());
        let bad = parse_config("[agents.\"a b\"]\ncommand = \"x\"\n", Path::new("s.toml")).unwrap();
        assert!(
            validate_agents(&bad.agents)
                .unwrap_err()
                .to_string()
                .contains("a b")
        );
        let err = parse_config("[agents.x]\ncmd = \"x\"\n", Path::new("s.toml")).unwrap_err();
        assert!(err.to_string().contains("cmd"), "{err}");
    }

    #[test]
    fn full_file_parses() {
        let c = parse_config(
            "listen = \"127.0.0.1:1\"\n[provider]\nbase_url = \"http://x/v1\"\nmodel = \"m\"\n[events]\nretention_days = 3\n",
            Path::new("s.toml"),
        )
        .unwrap();
        assert_eq!(c.provider.model.as_deref(), Some("m"));
        assert_eq!(c.events.retention_days, Some(3));
    }
}
