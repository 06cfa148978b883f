//! `switchboard.toml` plus `SWITCHBOARD_*` environment overrides.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use serde::Deserialize;
use switchboard_protocol::PermissionMode;

mod file;
mod parse;

pub use file::*;
use parse::*;
pub use parse::{SandboxConfig, SandboxMode, redact_url};

pub use switchboard_gateway::settings::GatewaySettings;
pub use switchboard_relay::settings::RelaySettings;
pub use switchboard_scheduler::settings::SchedulerSettings;
use switchboard_settings::{env, env_parse};

/// The gateway's settings from the file's `[gateway]` and `[channels.*]` sections (the
/// gateway reads them; see `switchboard_gateway::settings`).
fn gateway_settings(file: &FileConfig) -> Result<Option<GatewaySettings>> {
    Ok(switchboard_gateway::settings::gateway_settings(
        &file.gateway,
        &file.channels,
    )?)
}

/// A setting an environment variable overrides: its name in the settings API, its keys in
/// the configuration file, the variable, and the provider kind it applies to (`None`: any).
pub struct Override {
    pub setting: &'static str,
    pub path: &'static [&'static str],
    pub var: &'static str,
    pub kind: Option<&'static str>,
}

const fn ov(
    setting: &'static str,
    path: &'static [&'static str],
    var: &'static str,
    kind: Option<&'static str>,
) -> Override {
    Override {
        setting,
        path,
        var,
        kind,
    }
}

/// Every variable that overrides a setting `switchboard setup` and the settings API write
/// (the one list both read).
pub const OVERRIDES: &[Override] = &[
    ov(
        "provider.kind",
        &["provider", "kind"],
        "SWITCHBOARD_PROVIDER",
        None,
    ),
    ov(
        "provider.base_url",
        &["provider", "base_url"],
        "SWITCHBOARD_OPENAI_BASE_URL",
        Some("openai"),
    ),
    ov(
        "provider.base_url",
        &["provider", "base_url"],
        "SWITCHBOARD_ANTHROPIC_BASE_URL",
        Some("anthropic"),
    ),
    ov(
        "provider.api_key",
        &["provider", "api_key"],
        "SWITCHBOARD_OPENAI_API_KEY",
        Some("openai"),
    ),
    ov(
        "provider.api_key",
        &["provider", "api_key"],
        "OPENAI_API_KEY",
        Some("openai"),
    ),
    ov(
        "provider.api_key",
        &["provider", "api_key"],
        "SWITCHBOARD_ANTHROPIC_API_KEY",
        Some("anthropic"),
    ),
    ov(
        "provider.api_key",
        &["provider", "api_key"],
        "ANTHROPIC_API_KEY",
        Some("anthropic"),
    ),
    ov(
        "provider.model",
        &["provider", "model"],
        "SWITCHBOARD_MODEL",
        None,
    ),
    ov(
        "default_permission_mode",
        &["sessions", "permission_mode"],
        "SWITCHBOARD_PERMISSION_MODE",
        None,
    ),
    ov(
        "channels.telegram",
        &["channels", "telegram", "token"],
        "SWITCHBOARD_TELEGRAM_TOKEN",
        None,
    ),
    ov(
        "channels.slack",
        &["channels", "slack", "bot_token"],
        "SWITCHBOARD_SLACK_BOT_TOKEN",
        None,
    ),
    ov(
        "channels.slack",
        &["channels", "slack", "app_token"],
        "SWITCHBOARD_SLACK_APP_TOKEN",
        None,
    ),
    ov(
        "channels.discord",
        &["channels", "discord", "token"],
        "SWITCHBOARD_DISCORD_TOKEN",
        None,
    ),
];

/// The settings an environment variable sets now, for a provider of `kind`: setting → the
/// first variable of [`OVERRIDES`] that is set.
pub fn overridden(kind: &str) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for o in OVERRIDES {
        if o.kind.is_none_or(|k| k == kind) && env(o.var).is_some() {
            out.entry(o.setting.to_string())
                .or_insert_with(|| o.var.to_string());
        }
    }
    out
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
    /// Whether the provider was named at all (its kind, URL or key, in the file or the
    /// environment): when not, and no model is configured either, `serve` looks for a model
    /// server on this machine (`local_model_ports`).
    pub provider_named: bool,
    /// `SWITCHBOARD_LOCAL_MODEL_PORTS`: the ports asked for a local model server (default:
    /// Ollama's, LM Studio's, llama.cpp's and vLLM's; `off`: none).
    pub local_model_ports: Vec<(String, u16)>,
    /// The local model server in use, when one was found (`crate::local_model`).
    pub local_server: Option<String>,
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
    /// `[sandbox]`: how the built-in agent's commands are confined.
    pub sandbox: SandboxConfig,
    /// `[auth.oidc]` (its secret also `SWITCHBOARD_OIDC_CLIENT_SECRET`).
    pub oidc: Option<switchboard_server::oidc::OidcConfig>,
    /// `[[approvals.rules]]`.
    pub approval_rules: Vec<switchboard_engine::team::ApprovalRule>,
    /// `[prices]` and `[[budgets]]`.
    pub usage: switchboard_engine::UsageConfig,
}

/// `[prices]` and `[[budgets]]`, each checked: a price's key is `provider/model` and its
/// figures not negative; a budget names one limit, a known time zone, a unique name.
fn usage(file: &FileConfig) -> Result<switchboard_engine::UsageConfig> {
    for (key, p) in &file.prices {
        if !key.contains('/') {
            bail!(
                "[prices.{key:?}]: the key is provider/model (openai/gpt-4o, anthropic/claude-sonnet-4)"
            );
        }
        let figures = [Some(p.input), Some(p.output), p.cache_read, p.cache_write];
        if figures.iter().flatten().any(|f| !f.is_finite() || *f < 0.0) {
            bail!("[prices.{key:?}]: prices are dollars per million tokens, 0 or more");
        }
    }
    let config = switchboard_engine::UsageConfig {
        prices: file.prices.clone(),
        budgets: file.budgets.clone(),
    };
    // The engine's own check: what it would refuse at start is refused here, named.
    if let Err(e) = switchboard_engine::usage::configured_budgets(&config.budgets) {
        bail!("[[budgets]]: {e}");
    }
    Ok(config)
}

/// `[[approvals.rules]]`, each checked (a tool glob that does not parse is an error here,
/// not a rule that silently applies to everything).
fn approval_rules(file: &ApprovalsSection) -> Result<Vec<switchboard_engine::team::ApprovalRule>> {
    for (i, r) in file.rules.iter().enumerate() {
        if let Some(p) = r.problem() {
            bail!("[[approvals.rules]] #{}: {p}", i + 1);
        }
    }
    Ok(file.rules.clone())
}

/// `[auth.oidc]`, with `SWITCHBOARD_OIDC_ISSUER`, `SWITCHBOARD_OIDC_CLIENT_ID` and
/// `SWITCHBOARD_OIDC_CLIENT_SECRET` over the file (the first two alone make a provider).
fn oidc(file: &AuthSection) -> Option<switchboard_server::oidc::OidcConfig> {
    let mut c = match (
        &file.oidc,
        env("SWITCHBOARD_OIDC_ISSUER"),
        env("SWITCHBOARD_OIDC_CLIENT_ID"),
    ) {
        (Some(c), issuer, client_id) => {
            let mut c = c.clone();
            c.issuer = issuer.unwrap_or(c.issuer);
            c.client_id = client_id.unwrap_or(c.client_id);
            c
        }
        (None, Some(issuer), Some(client_id)) => {
            serde_json::from_value(serde_json::json!({"issuer": issuer, "client_id": client_id}))
                .ok()?
        }
        _ => return None,
    };
    if let Some(secret) = env("SWITCHBOARD_OIDC_CLIENT_SECRET") {
        c.client_secret = Some(secret);
    }
    Some(c)
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

/// The secrets file: `SWITCHBOARD_SECRETS_FILE`, else `secrets.toml` beside the
/// configuration file (or beside where it would be). It holds the keys that are secrets
/// (`[provider] api_key`, channel tokens …) in the configuration file's own sections, and
/// is merged over it; `switchboard setup` writes it, mode 0600.
pub fn secrets_path(config: Option<&Path>) -> PathBuf {
    if let Some(p) = env("SWITCHBOARD_SECRETS_FILE") {
        return PathBuf::from(p);
    }
    let config = config
        .map(Path::to_path_buf)
        .unwrap_or_else(default_config_path);
    config
        .parent()
        .map(|d| d.join("secrets.toml"))
        .unwrap_or_else(|| PathBuf::from("secrets.toml"))
}

/// The secrets file's text, if there is one. One that others may read is refused: it holds
/// keys, and whoever made it readable meant something else.
fn read_secrets(path: &Path) -> Result<Option<String>> {
    use std::os::unix::fs::PermissionsExt;
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        bail!(
            "the secrets file {} may be read by others (mode {mode:04o}): run `chmod 600 {}`",
            path.display(),
            path.display()
        );
    }
    std::fs::read_to_string(path)
        .map(Some)
        .with_context(|| format!("reading {}", path.display()))
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
        let path = match explicit {
            Some(p) => Some(p),
            None => Some(default_config_path()).filter(|p| p.exists()),
        };
        let file = match &path {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .with_context(|| format!("reading config file {}", p.display()))?;
                let secrets = secrets_path(Some(p));
                read_layers(&text, p, read_secrets(&secrets)?.as_deref(), &secrets)?
            }
            // No configuration file: the secrets file beside where it would be still counts.
            None => {
                let secrets = secrets_path(None);
                match read_secrets(&secrets)? {
                    Some(text) => read_layers("", &default_config_path(), Some(&text), &secrets)?,
                    None => FileConfig::default(),
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
        let provider_named = env("SWITCHBOARD_PROVIDER").is_some()
            || file.provider.kind.is_some()
            || file.provider.base_url.is_some()
            || api_key.is_some()
            || env("SWITCHBOARD_OPENAI_BASE_URL").is_some()
            || env("SWITCHBOARD_ANTHROPIC_BASE_URL").is_some();
        let local_model_ports =
            switchboard_agent::local::ports(env("SWITCHBOARD_LOCAL_MODEL_PORTS").as_deref())
                .map_err(|e| anyhow::anyhow!("SWITCHBOARD_LOCAL_MODEL_PORTS: {e}"))?;
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
        let default_bundles = {
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
        };
        let relay = RelaySettings::read(&file.relay, default_bundles)?;
        let scheduler = SchedulerSettings::read(&file.scheduler)?;
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
            provider_named,
            local_model_ports,
            local_server: None,
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
            gateway: gateway_settings(&file)?.map(|g| g.with_data_dir(&data_dir)),
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
            sandbox: sandbox(&file.sandbox)?,
            oidc: oidc(&file.auth),
            approval_rules: approval_rules(&file.approvals)?,
            usage: usage(&file)?,
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

#[cfg(test)]
mod tests;
