//! `[channels.signal]` and its `SWITCHBOARD_SIGNAL_*` variables.

use serde::Deserialize;
use switchboard_settings::{env, env_parse};

use super::{ChannelAccess, ChannelsSection, SettingsError, channel_access};
use crate::signal::SignalConfig;

/// `[channels.signal]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalSection {
    /// signal-cli's `--http` address: `http://127.0.0.1:8080`.
    pub url: Option<String>,
    /// The bot's number (`+4915112345678`).
    pub account: Option<String>,
    /// Name the account in every call (a daemon started without `-a`, serving several).
    pub multi_account: Option<bool>,
    /// In groups, answer only when mentioned or replied to (default true).
    pub require_mention: Option<bool>,
    pub edit_interval_ms: Option<u64>,
    /// Group ids allowed without pairing (everyone in them).
    pub allowed_chats: Option<Vec<String>>,
    /// People (their ACI uuid) allowed without pairing.
    pub allowed_users: Option<Vec<String>>,
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
}

/// `[channels.signal]` and `SWITCHBOARD_SIGNAL_*`: configured when a URL is given.
pub(super) fn signal_settings(
    config: &mut crate::GatewayConfig,
    channels: &ChannelsSection,
) -> Result<Option<SignalConfig>, SettingsError> {
    let file = channels.signal.clone().unwrap_or_default();
    let Some(url) = env("SWITCHBOARD_SIGNAL_URL").or(file.url.clone()) else {
        if channels.signal.is_some() {
            return Err(SettingsError::new(
                "[channels.signal]: no url: set it or SWITCHBOARD_SIGNAL_URL (signal-cli's --http address)",
            ));
        }
        return Ok(None);
    };
    let account = env("SWITCHBOARD_SIGNAL_ACCOUNT")
        .or(file.account.clone())
        .ok_or_else(|| {
            SettingsError::new(
                "[channels.signal]: no account: set it or SWITCHBOARD_SIGNAL_ACCOUNT (the bot's number)",
            )
        })?;
    let mut c = SignalConfig::new(url, account);
    if env_parse::<bool>("SWITCHBOARD_SIGNAL_MULTI_ACCOUNT")?
        .or(file.multi_account)
        .unwrap_or(false)
    {
        c.account_param = Some(c.account.clone());
    }
    if let Some(m) =
        env_parse::<bool>("SWITCHBOARD_SIGNAL_REQUIRE_MENTION")?.or(file.require_mention)
    {
        c.require_mention = m;
    }
    if let Some(ms) =
        env_parse::<u64>("SWITCHBOARD_SIGNAL_EDIT_INTERVAL_MS")?.or(file.edit_interval_ms)
    {
        c.edit_interval = std::time::Duration::from_millis(ms);
    }
    channel_access(
        config,
        &c.name,
        "SWITCHBOARD_SIGNAL",
        ChannelAccess {
            chats: &file.allowed_chats,
            users: &file.allowed_users,
            approvers: &file.approvers,
            mode: &file.approval_mode,
            thread_sessions: None,
        },
    )?;
    crate::signal::SignalChannel::new(c.clone()).map_err(|e| {
        SettingsError::new(format!("[channels.signal] (or SWITCHBOARD_SIGNAL_*): {e}"))
    })?;
    Ok(Some(c))
}
