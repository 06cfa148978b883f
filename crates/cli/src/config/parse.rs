//! Reading and checking the values of single settings (each error names its key).

use super::*;
use switchboard_sandbox::NetworkPolicy;

/// The host name and the process id.
pub(super) fn default_instance_id() -> String {
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
pub(super) fn endpoint(
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
                .unwrap_or_else(|| switchboard_agent::anthropic::DEFAULT_BASE_URL.into()),
            env("SWITCHBOARD_ANTHROPIC_API_KEY")
                .or_else(|| env("ANTHROPIC_API_KEY"))
                .or(file_key),
        )
    } else {
        (
            env("SWITCHBOARD_OPENAI_BASE_URL")
                .or(file_url)
                .unwrap_or_else(|| switchboard_agent::openai::DEFAULT_BASE_URL.into()),
            env("SWITCHBOARD_OPENAI_API_KEY")
                .or_else(|| env("OPENAI_API_KEY"))
                .or(file_key),
        )
    }
}

/// `[speech]` and `SWITCHBOARD_SPEECH_BASE_URL` / `_MODEL` / `_API_KEY`.
pub(super) fn speech(
    section: &SpeechSection,
) -> Result<Option<switchboard_gateway::speech::SpeechConfig>> {
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
pub(super) fn file_limits(section: &FilesSection) -> Result<switchboard_engine::FileLimits> {
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
/// `SWITCHBOARD_CHECKPOINT_MAX_FILES`, `SWITCHBOARD_CHECKPOINT_MAX_FILE_MB`,
/// `SWITCHBOARD_CHECKPOINT_WATCH`).
pub(super) fn checkpoints(
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
        watch: env_parse("SWITCHBOARD_CHECKPOINT_WATCH")?
            .or(section.watch)
            .unwrap_or(true),
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
pub(super) fn mcp_servers(
    section: &McpSection,
) -> Result<Vec<switchboard_protocol::McpServerSpec>> {
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
pub(super) fn door_approvals(
    v: Option<String>,
) -> Result<switchboard_server::routes::openai::DoorApprovals> {
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
pub(super) fn validate_agents(
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
        match (a.command.trim().is_empty(), &a.a2a) {
            (true, None) => bail!(
                "[agents.{name}]: give `command` (an ACP agent) or `a2a` (a remote A2A agent's URL)"
            ),
            (false, Some(_)) => bail!(
                "[agents.{name}]: `command` and `a2a` both given; an agent is one or the other"
            ),
            (true, Some(url)) => {
                match url.parse::<reqwest::Url>() {
                    Ok(u) if matches!(u.scheme(), "http" | "https") => {}
                    _ => bail!("[agents.{name}]: `a2a` must be an http(s) URL"),
                }
                if !a.args.is_empty() || !a.env.is_empty() {
                    bail!(
                        "[agents.{name}]: `args` and `env` are for a command; an A2A agent has none"
                    );
                }
                for (k, v) in &a.headers {
                    if reqwest::header::HeaderName::from_bytes(k.as_bytes()).is_err()
                        || reqwest::header::HeaderValue::from_str(v).is_err()
                    {
                        bail!(
                            "[agents.{name}]: headers: {k:?} is not a valid header name, or its value not a valid header value"
                        );
                    }
                }
            }
            (false, None) => {
                if a.token.is_some() || !a.headers.is_empty() {
                    bail!("[agents.{name}]: `token` and `headers` are for an A2A agent (`a2a`)");
                }
            }
        }
        if let Err(e) = a.sandbox.network() {
            bail!("[agents.{name}.sandbox] {e}");
        }
    }
    Ok(agents.clone())
}

pub fn parse_config(text: &str, path: &Path) -> Result<FileConfig> {
    toml::from_str(text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))
}

/// The configuration file with the secrets file merged over it (tables key by key, a value
/// in the secrets file in place of the same key's in the configuration file), read as one.
/// The configuration file is read alone first, so its errors keep their line and column; an
/// error in the secrets file never quotes it (the line with the error would be a secret).
pub fn read_layers(
    text: &str,
    path: &Path,
    secrets: Option<&str>,
    secrets_path: &Path,
) -> Result<FileConfig> {
    let alone = parse_config(text, path)?;
    let Some(secrets) = secrets else {
        return Ok(alone);
    };
    let mut base: toml::Table =
        toml::from_str(text).map_err(|e| anyhow::anyhow!("config file {}: {e}", path.display()))?;
    let over: toml::Table = toml::from_str(secrets).map_err(|e| {
        let at = e
            .span()
            .map(|s| {
                let before = &secrets[..s.start.min(secrets.len())];
                let line = before.matches('\n').count() + 1;
                let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
                format!(" at line {line}, column {column}")
            })
            .unwrap_or_default();
        anyhow::anyhow!(
            "secrets file {}: not valid TOML{at} (its text is not shown: it holds secrets)",
            secrets_path.display()
        )
    })?;
    let mut values = Vec::new();
    strings(&over, &mut values);
    merge(&mut base, over);
    toml::Value::Table(base)
        .try_into()
        .map_err(|e: toml::de::Error| {
            // What serde says may quote a value (`invalid type: string "…"`): never a secret.
            let mut said = e.to_string();
            for v in &values {
                said = said.replace(v.as_str(), "***");
            }
            anyhow::anyhow!(
                "config file {} with the secrets file {}: {said}",
                path.display(),
                secrets_path.display()
            )
        })
}

/// Every string in `t`, at any depth.
fn strings(t: &toml::Table, out: &mut Vec<String>) {
    for v in t.values() {
        match v {
            toml::Value::String(s) if !s.is_empty() => out.push(s.clone()),
            toml::Value::Table(t) => strings(t, out),
            toml::Value::Array(a) => {
                for v in a {
                    if let toml::Value::Table(t) = v {
                        strings(t, out);
                    } else if let toml::Value::String(s) = v {
                        out.push(s.clone());
                    }
                }
            }
            _ => {}
        }
    }
}

fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => merge(b, o),
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// `[sandbox]` as `serve` applies it (docs/sandbox.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxConfig {
    pub mode: SandboxMode,
    /// Of the built-in agent's commands.
    pub network: NetworkPolicy,
    /// Of MCP servers over stdio.
    pub mcp_network: NetworkPolicy,
    pub max_processes: u64,
    pub cpu_secs: Option<u64>,
    pub memory_bytes: Option<u64>,
    pub full_access: bool,
    /// `[sandbox] env`.
    pub env: Vec<String>,
}

/// A `network` value (`none`, `full`, `allowlist` with `hosts`) of `key`.
pub(super) fn network_policy(
    value: Option<&str>,
    hosts: &[String],
    default: &str,
    key: &str,
) -> Result<NetworkPolicy> {
    NetworkPolicy::parse(value, hosts, default).map_err(|e| anyhow::anyhow!("{key}: {e}"))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxMode {
    /// Confine where this machine can; where it cannot, run and say so.
    Auto,
    /// Refuse a command that cannot be confined.
    Required,
    Off,
}

impl SandboxMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Required => "required",
            Self::Off => "off",
        }
    }
}

/// `[sandbox]` with `SWITCHBOARD_SANDBOX` (the mode), `SWITCHBOARD_SANDBOX_NETWORK` and
/// `SWITCHBOARD_SANDBOX_MAX_PROCESSES` over it.
pub(super) fn sandbox(section: &SandboxSection) -> Result<SandboxConfig> {
    let mode = match env("SWITCHBOARD_SANDBOX")
        .or(section.mode.clone())
        .as_deref()
        .unwrap_or("auto")
    {
        "auto" => SandboxMode::Auto,
        "required" => SandboxMode::Required,
        "off" => SandboxMode::Off,
        other => bail!(
            "[sandbox] mode = {other:?} (SWITCHBOARD_SANDBOX): expected auto, required or off"
        ),
    };
    let hosts = match env("SWITCHBOARD_SANDBOX_ALLOW_HOSTS") {
        Some(list) => list.split(',').map(str::to_owned).collect(),
        None => section.allow_hosts.clone().unwrap_or_default(),
    };
    let network = network_policy(
        env("SWITCHBOARD_SANDBOX_NETWORK")
            .or(section.network.clone())
            .as_deref(),
        &hosts,
        "none",
        "[sandbox] network (SWITCHBOARD_SANDBOX_NETWORK)",
    )?;
    let mcp_network = network_policy(
        section.mcp_network.as_deref(),
        &hosts,
        "full",
        "[sandbox] mcp_network",
    )?;
    let cpu_secs = env_parse::<u64>("SWITCHBOARD_SANDBOX_CPU_SECS")?.or(section.cpu_secs);
    let memory_mb = env_parse::<u64>("SWITCHBOARD_SANDBOX_MEMORY_MB")?.or(section.memory_mb);
    if cpu_secs == Some(0) || memory_mb.is_some_and(|m| m < 64) {
        bail!(
            "[sandbox] cpu_secs must be at least 1 and memory_mb at least 64 (SWITCHBOARD_SANDBOX_CPU_SECS, SWITCHBOARD_SANDBOX_MEMORY_MB)"
        );
    }
    let max_processes = env_parse::<u64>("SWITCHBOARD_SANDBOX_MAX_PROCESSES")?
        .or(section.max_processes)
        .unwrap_or(512);
    if max_processes < 8 {
        bail!("[sandbox] max_processes must be at least 8 (a shell and a pipeline need a few)");
    }
    Ok(SandboxConfig {
        mode,
        network,
        mcp_network,
        max_processes,
        cpu_secs,
        memory_bytes: memory_mb.map(|m| m * 1024 * 1024),
        full_access: section.full_access.unwrap_or(false),
        env: {
            let env: Vec<String> = match env("SWITCHBOARD_SANDBOX_ENV") {
                Some(list) => list
                    .split(',')
                    .map(|n| n.trim().to_owned())
                    .filter(|n| !n.is_empty())
                    .collect(),
                None => section.env.clone().unwrap_or_default(),
            };
            if let Some(bad) = env.iter().find(|n| {
                let name = n.strip_suffix('*').unwrap_or(n);
                name.is_empty() || name.contains(['=', '\0', '*'])
            }) {
                bail!("[sandbox] env: {bad:?} is not a variable name (or a prefix ending in *)");
            }
            env
        },
    })
}
