//! The chat gateway's settings: the `[gateway]` and `[channels.*]` sections of the
//! configuration file (read by the binary, handed over as they are) and their `SWITCHBOARD_*`
//! environment variables, checked — each error naming its key — and turned into the
//! gateway's and its channels' configs. The gateway owns them: a new chat platform adds its
//! section here, not in the binary.

use serde::Deserialize;

use switchboard_protocol::PermissionMode;

pub use switchboard_settings::SettingsError;
use switchboard_settings::{csv, env, env_parse};

mod email;
mod matrix;
pub use email::EmailSection;
use email::email_settings;
pub use matrix::MatrixSection;
use matrix::matrix_settings;
mod mattermost;
pub use mattermost::MattermostSection;
use mattermost::mattermost_settings;
mod msteams;
pub use msteams::TeamsSection;
use msteams::teams_settings;
mod signal;
pub use signal::SignalSection;
use signal::signal_settings;
mod whatsapp;
pub use whatsapp::WhatsAppSection;
use whatsapp::whatsapp_settings;

/// `[gateway]`: how chat messages map to sessions and approvals.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// Run the gateway inside `serve` (default: when a channel is configured).
    pub enabled: Option<bool>,
    /// `main`, `per_peer` or `per_channel_peer`.
    pub dm_scope: Option<crate::DmScope>,
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
    /// A connected channel quiet this long while its platform holds updates for it is
    /// `degraded` (default 600).
    pub deaf_after_secs: Option<u64>,
    /// Days the delivery ledger keeps what became of each inbound message (default 7).
    pub ledger_days: Option<u64>,
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
    pub matrix: Option<MatrixSection>,
    pub email: Option<EmailSection>,
    pub whatsapp: Option<WhatsAppSection>,
    pub mattermost: Option<MattermostSection>,
    pub signal: Option<SignalSection>,
    pub teams: Option<TeamsSection>,
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
    /// One session per thread (default true), or one per channel.
    pub thread_sessions: Option<bool>,
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
    /// One session per thread (default true), or one per channel.
    pub thread_sessions: Option<bool>,
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
    pub config: crate::GatewayConfig,
    pub telegram: Option<crate::telegram::TelegramConfig>,
    pub slack: Option<crate::slack::SlackConfig>,
    pub discord: Option<crate::discord::DiscordConfig>,
    pub matrix: Option<crate::matrix::MatrixConfig>,
    pub email: Option<crate::email::EmailConfig>,
    pub whatsapp: Option<crate::whatsapp::WhatsAppConfig>,
    pub mattermost: Option<crate::mattermost::MattermostConfig>,
    pub signal: Option<crate::signal::SignalConfig>,
    pub teams: Option<crate::msteams::TeamsConfig>,
    pub webhooks: Vec<crate::webhook::WebhookConfig>,
    pub enabled: bool,
}

impl GatewaySettings {
    /// The names of the configured channels, as the gateway's routes take them.
    pub fn channel_names(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            self.telegram.as_ref().map(|c| c.name.clone()),
            self.slack.as_ref().map(|c| c.name.clone()),
            self.discord.as_ref().map(|c| c.name.clone()),
            self.matrix.as_ref().map(|c| c.name.clone()),
            self.email.as_ref().map(|c| c.name.clone()),
            self.whatsapp.as_ref().map(|c| c.name.clone()),
            self.mattermost.as_ref().map(|c| c.name.clone()),
            self.signal.as_ref().map(|c| c.name.clone()),
            self.teams.as_ref().map(|c| c.name.clone()),
        ]
        .into_iter()
        .flatten()
        .chain(self.webhooks.iter().map(|w| w.channel_name()))
        .collect();
        names.sort();
        names
    }
}

impl GatewaySettings {
    /// Where channels keep files of their own (the Matrix session and encryption stores,
    /// in `DATA_DIR/matrix` unless `[channels.matrix] store_dir` says otherwise).
    pub fn with_data_dir(mut self, data_dir: &std::path::Path) -> Self {
        if let Some(m) = self.matrix.as_mut()
            && m.store_dir.as_os_str().is_empty()
        {
            m.store_dir = data_dir.join("matrix");
        }
        self
    }

    /// The configured channel connections.
    pub fn channels(&self) -> Result<Vec<std::sync::Arc<dyn crate::Channel>>, SettingsError> {
        use std::sync::Arc;
        let mut out: Vec<Arc<dyn crate::Channel>> = Vec::new();
        if let Some(tg) = &self.telegram {
            out.push(Arc::new(
                crate::telegram::TelegramChannel::new(tg.clone())
                    .map_err(|e| SettingsError::new(format!("[channels.telegram]: {e}")))?,
            ));
        }
        if let Some(c) = &self.slack {
            out.push(Arc::new(
                crate::slack::SlackChannel::new(c.clone()).map_err(|e| {
                    SettingsError::new(format!("[channels.slack] (or SWITCHBOARD_SLACK_*): {e}"))
                })?,
            ));
        }
        if let Some(c) = &self.discord {
            out.push(Arc::new(
                crate::discord::DiscordChannel::new(c.clone()).map_err(|e| {
                    SettingsError::new(format!(
                        "[channels.discord] (or SWITCHBOARD_DISCORD_*): {e}"
                    ))
                })?,
            ));
        }
        if let Some(c) = &self.matrix {
            out.push(Arc::new(
                crate::matrix::MatrixChannel::new(c.clone()).map_err(|e| {
                    SettingsError::new(format!("[channels.matrix] (or SWITCHBOARD_MATRIX_*): {e}"))
                })?,
            ));
        }
        if let Some(c) = &self.email {
            out.push(Arc::new(
                crate::email::EmailChannel::new(c.clone()).map_err(|e| {
                    SettingsError::new(format!("[channels.email] (or SWITCHBOARD_EMAIL_*): {e}"))
                })?,
            ));
        }
        if let Some(c) = &self.whatsapp {
            out.push(Arc::new(
                crate::whatsapp::WhatsAppChannel::new(c.clone()).map_err(|e| {
                    SettingsError::new(format!(
                        "[channels.whatsapp] (or SWITCHBOARD_WHATSAPP_*): {e}"
                    ))
                })?,
            ));
        }
        if let Some(c) = &self.mattermost {
            out.push(Arc::new(
                crate::mattermost::MattermostChannel::new(c.clone()).map_err(|e| {
                    SettingsError::new(format!(
                        "[channels.mattermost] (or SWITCHBOARD_MATTERMOST_*): {e}"
                    ))
                })?,
            ));
        }
        if let Some(c) = &self.signal {
            out.push(Arc::new(
                crate::signal::SignalChannel::new(c.clone()).map_err(|e| {
                    SettingsError::new(format!("[channels.signal] (or SWITCHBOARD_SIGNAL_*): {e}"))
                })?,
            ));
        }
        if let Some(c) = &self.teams {
            out.push(Arc::new(
                crate::msteams::TeamsChannel::new(c.clone()).map_err(|e| {
                    SettingsError::new(format!("[channels.teams] (or SWITCHBOARD_TEAMS_*): {e}"))
                })?,
            ));
        }
        for w in &self.webhooks {
            out.push(Arc::new(
                crate::webhook::WebhookChannel::new(w.clone()).map_err(|e| {
                    SettingsError::new(format!("[channels.webhook.{}]: {e}", w.name))
                })?,
            ));
        }
        Ok(out)
    }

    /// Asks the platform of each channel named in `names` who its bot is, and where a
    /// person talks to it (a DM link, an invite), in that order; the first refusal is the
    /// error, naming its channel. What `switchboard setup` and the settings API check a
    /// token with before they save it.
    pub async fn check(&self, names: &[&str]) -> Result<Vec<BotCheck>, SettingsError> {
        let mut out = Vec::new();
        for ch in self.channels()? {
            let name = ch.name().to_string();
            if !names.contains(&name.as_str()) {
                continue;
            }
            let identity = ch.test().await.map_err(|e| {
                SettingsError::new(format!("{name}: the token was not accepted: {e}"))
            })?;
            let link = ch.open_link().await.ok().flatten();
            out.push(BotCheck {
                name,
                identity,
                link,
            });
        }
        Ok(out)
    }
}

/// What a channel's platform says of its bot ([`GatewaySettings::check`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotCheck {
    /// The channel (`telegram`).
    pub name: String,
    /// Who the bot is there (`@my_bot (id 42)`).
    pub identity: String,
    /// Where to talk to it: a DM link, or an invite to a server.
    pub link: Option<String>,
}

/// The access and approval settings of a platform channel's TOML section.
struct ChannelAccess<'a> {
    chats: &'a Option<Vec<String>>,
    users: &'a Option<Vec<String>>,
    approvers: &'a Option<Vec<String>>,
    mode: &'a Option<String>,
    /// One session per thread or topic (default), or one per chat.
    thread_sessions: Option<bool>,
}

/// A channel's required setting: its variable `var`, else `key` of `[channels.{channel}]`;
/// missing, an error that names both.
fn required(
    channel: &str,
    key: &str,
    var: &str,
    from_file: &Option<String>,
) -> Result<String, SettingsError> {
    env(var).or(from_file.clone()).ok_or_else(|| {
        SettingsError::new(format!("[channels.{channel}]: no {key}: set it or {var}"))
    })
}

/// Applies a platform channel's access and approval settings, each overridden by its
/// environment variable: `{prefix}_ALLOWED_CHATS`, `{prefix}_ALLOWED_USERS`,
/// `{prefix}_APPROVERS` (comma-separated), `{prefix}_APPROVAL_MODE` and
/// `{prefix}_THREAD_SESSIONS`.
fn channel_access(
    config: &mut crate::GatewayConfig,
    name: &str,
    prefix: &str,
    file: ChannelAccess<'_>,
) -> Result<(), SettingsError> {
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
    let threads = env_parse::<bool>(&format!("{prefix}_THREAD_SESSIONS"))?.or(file.thread_sessions);
    if threads == Some(false) {
        config.chat_sessions.push(name.to_string());
    }
    Ok(())
}

fn approval_mode(key: &str, v: &str) -> Result<crate::ApprovalMode, SettingsError> {
    v.parse()
        .map_err(|e: String| SettingsError::new(format!("{key}: {e}")))
}

pub fn gateway_settings(
    gateway: &GatewaySection,
    channels: &ChannelsSection,
) -> Result<Option<GatewaySettings>, SettingsError> {
    use crate::{GatewayConfig, config::Secret};
    let g = gateway;
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
            return Err(SettingsError::new(
                "[gateway] run_timeout_secs must be at least 1",
            ));
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
    if let Some(t) = env_parse::<u64>("SWITCHBOARD_GATEWAY_DEAF_AFTER_SECS")?.or(g.deaf_after_secs)
    {
        config.deaf_after = std::time::Duration::from_secs(t.max(1));
    }
    if let Some(d) = env_parse::<u64>("SWITCHBOARD_GATEWAY_LEDGER_DAYS")?.or(g.ledger_days) {
        config.ledger_retention = std::time::Duration::from_secs(d.clamp(1, 3650) * 86_400);
    }
    config.bindings = g.bindings.clone().into_iter().collect();

    let file_tg = channels.telegram.clone().unwrap_or_default();
    let token = env("SWITCHBOARD_TELEGRAM_TOKEN").or(file_tg.token.clone());
    let mut telegram = match token {
        None => {
            if channels.telegram.is_some() {
                return Err(SettingsError::new(
                    "[channels.telegram]: no bot token: set `token` or SWITCHBOARD_TELEGRAM_TOKEN",
                ));
            }
            None
        }
        Some(token) => {
            if token.trim().is_empty() || !token.contains(':') {
                return Err(SettingsError::new(
                    "SWITCHBOARD_TELEGRAM_TOKEN / [channels.telegram] token: not a bot token (expected `<id>:<secret>` from @BotFather)",
                ));
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
                    thread_sessions: file_tg.thread_sessions,
                },
            )?;
            let mut tg = crate::telegram::TelegramConfig::new(token);
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
                        return Err(SettingsError::new(
                            "[channels.telegram] webhook_secret: 1-256 characters of A-Z, a-z, 0-9, _ and -",
                        ));
                    }
                    if !url.starts_with("https://") && !url.starts_with("http://") {
                        return Err(SettingsError::new(
                            "[channels.telegram] webhook_url: must be an http(s) URL",
                        ));
                    }
                    tg.webhook = Some(crate::telegram::TelegramWebhook {
                        url,
                        secret_token: secret,
                    });
                }
                _ => {
                    return Err(SettingsError::new(
                        "[channels.telegram]: webhook mode needs both webhook_url and webhook_secret",
                    ));
                }
            }
            Some(tg)
        }
    };
    let file_slack = channels.slack.clone().unwrap_or_default();
    let mut slack = match env("SWITCHBOARD_SLACK_BOT_TOKEN").or(file_slack.bot_token.clone()) {
        None => {
            if channels.slack.is_some() {
                return Err(SettingsError::new(
                    "[channels.slack]: no bot token: set `bot_token` or SWITCHBOARD_SLACK_BOT_TOKEN",
                ));
            }
            None
        }
        Some(token) => {
            if !token.starts_with("xoxb-") {
                return Err(SettingsError::new(
                    "SWITCHBOARD_SLACK_BOT_TOKEN / [channels.slack] bot_token: expected a bot token (xoxb-…)",
                ));
            }
            let mut c = crate::slack::SlackConfig::new(token);
            c.app_token = env("SWITCHBOARD_SLACK_APP_TOKEN").or(file_slack.app_token.clone());
            c.signing_secret =
                env("SWITCHBOARD_SLACK_SIGNING_SECRET").or(file_slack.signing_secret.clone());
            if c.app_token.is_none() && c.signing_secret.is_none() {
                return Err(SettingsError::new(
                    "[channels.slack]: set app_token (Socket Mode, SWITCHBOARD_SLACK_APP_TOKEN) or signing_secret (Events API, SWITCHBOARD_SLACK_SIGNING_SECRET)",
                ));
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
                    thread_sessions: file_slack.thread_sessions,
                },
            )?;
            Some(c)
        }
    };
    let file_dc = channels.discord.clone().unwrap_or_default();
    let mut discord = match env("SWITCHBOARD_DISCORD_TOKEN").or(file_dc.token.clone()) {
        None => {
            if channels.discord.is_some() {
                return Err(SettingsError::new(
                    "[channels.discord]: no bot token: set `token` or SWITCHBOARD_DISCORD_TOKEN",
                ));
            }
            None
        }
        Some(token) => {
            if token.trim().is_empty() {
                return Err(SettingsError::new(
                    "SWITCHBOARD_DISCORD_TOKEN / [channels.discord] token: must not be empty",
                ));
            }
            let mut c = crate::discord::DiscordConfig::new(token);
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
                    thread_sessions: file_dc.thread_sessions,
                },
            )?;
            Some(c)
        }
    };
    let matrix = matrix_settings(&mut config, channels)?;
    let email = email_settings(&mut config, channels)?;
    let mut whatsapp = whatsapp_settings(&mut config, channels)?;
    let mut mattermost = mattermost_settings(&mut config, channels)?;
    let mut signal = signal_settings(&mut config, channels)?;
    let mut teams = teams_settings(&mut config, channels)?;
    let mut webhooks = Vec::new();
    for (name, w) in &channels.webhook {
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(SettingsError::new(format!(
                "[channels.webhook.{name}]: webhook names use letters, digits, '-' and '_'"
            )));
        }
        if w.secret.len() < 16 {
            return Err(SettingsError::new(format!(
                "[channels.webhook.{name}] secret: use at least 16 characters"
            )));
        }
        if !(w.url.starts_with("http://") || w.url.starts_with("https://")) {
            return Err(SettingsError::new(format!(
                "[channels.webhook.{name}] url: must be an http(s) URL"
            )));
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
        webhooks.push(crate::webhook::WebhookConfig {
            tolerance: config.webhook_tolerance,
            max_chars: 4000,
            ..crate::webhook::WebhookConfig::new(name.clone(), w.secret.clone(), w.url.clone())
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
        Some("fail") => Some(crate::platform::OverCap::Fail),
        Some("wait") => Some(crate::platform::OverCap::Wait),
        Some(other) => {
            return Err(SettingsError::new(format!(
                "[gateway] rate_limit_over_cap / SWITCHBOARD_GATEWAY_RATE_LIMIT_OVER_CAP: {other:?} is not `fail` or `wait`"
            )));
        }
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
    if let Some(c) = whatsapp.as_mut() {
        retry_settings!(c);
    }
    if let Some(c) = mattermost.as_mut() {
        retry_settings!(c);
    }
    if let Some(c) = signal.as_mut() {
        retry_settings!(c);
    }
    if let Some(c) = teams.as_mut() {
        retry_settings!(c);
    }
    for c in webhooks.iter_mut() {
        retry_settings!(c);
    }
    if telegram.is_none()
        && slack.is_none()
        && discord.is_none()
        && matrix.is_none()
        && email.is_none()
        && whatsapp.is_none()
        && mattermost.is_none()
        && signal.is_none()
        && teams.is_none()
        && webhooks.is_empty()
    {
        if g.enabled == Some(true) {
            return Err(SettingsError::new(
                "[gateway] enabled = true but no channel is configured ([channels.telegram], [channels.slack], [channels.discord], [channels.matrix], [channels.email], [channels.whatsapp], [channels.mattermost], [channels.signal], [channels.teams] or [channels.webhook.NAME])",
            ));
        }
        return Ok(None);
    }
    Ok(Some(GatewaySettings {
        config,
        telegram,
        slack,
        discord,
        matrix,
        email,
        whatsapp,
        mattermost,
        signal,
        teams,
        webhooks,
        enabled: g.enabled.unwrap_or(true),
    }))
}
