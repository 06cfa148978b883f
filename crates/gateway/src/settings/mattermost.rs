//! `[channels.mattermost]` and its `SWITCHBOARD_MATTERMOST_*` variables.

use serde::Deserialize;
use switchboard_settings::{env, env_parse};

use super::{ChannelAccess, ChannelsSection, SettingsError, channel_access, required};
use crate::mattermost::MattermostConfig;

/// `[channels.mattermost]`.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MattermostSection {
    /// The server: `https://chat.example.com`.
    pub url: Option<String>,
    /// The bot account's access token.
    pub token: Option<String>,
    /// Where the Mattermost server posts button presses (this gateway's
    /// `…/v1/gateway/channels/mattermost/webhook`); without it, no buttons.
    pub action_url: Option<String>,
    /// The key that signs the buttons (default: one made from the token).
    pub action_secret: Option<String>,
    pub edit_interval_ms: Option<u64>,
    /// Calls a second (the server's rate limit; default 10).
    pub rate_per_second: Option<u32>,
    /// Channel ids allowed without pairing (everyone in them).
    pub allowed_chats: Option<Vec<String>>,
    /// User ids allowed without pairing, in any channel.
    pub allowed_users: Option<Vec<String>>,
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
    /// One session per thread (default), or one per channel.
    pub thread_sessions: Option<bool>,
}

impl std::fmt::Debug for MattermostSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MattermostSection")
            .field("url", &self.url)
            .field("action_url", &self.action_url)
            .finish_non_exhaustive()
    }
}

/// `[channels.mattermost]` and `SWITCHBOARD_MATTERMOST_*`: configured when a URL is given.
pub(super) fn mattermost_settings(
    config: &mut crate::GatewayConfig,
    channels: &ChannelsSection,
) -> Result<Option<MattermostConfig>, SettingsError> {
    let file = channels.mattermost.clone().unwrap_or_default();
    let Some(url) = env("SWITCHBOARD_MATTERMOST_URL").or(file.url.clone()) else {
        if channels.mattermost.is_some() {
            return Err(SettingsError::new(
                "[channels.mattermost]: no url: set it or SWITCHBOARD_MATTERMOST_URL",
            ));
        }
        return Ok(None);
    };
    let token = required(
        "mattermost",
        "token",
        "SWITCHBOARD_MATTERMOST_TOKEN",
        &file.token,
    )?;
    let mut c = MattermostConfig::new(url, token);
    c.action_url = env("SWITCHBOARD_MATTERMOST_ACTION_URL").or(file.action_url.clone());
    if let Some(s) = env("SWITCHBOARD_MATTERMOST_ACTION_SECRET").or(file.action_secret.clone()) {
        if s.len() < 16 {
            return Err(SettingsError::new(
                "[channels.mattermost] action_secret: use at least 16 characters",
            ));
        }
        c.action_secret = s;
    }
    if let Some(ms) =
        env_parse::<u64>("SWITCHBOARD_MATTERMOST_EDIT_INTERVAL_MS")?.or(file.edit_interval_ms)
    {
        c.edit_interval = std::time::Duration::from_millis(ms);
    }
    if let Some(n) =
        env_parse::<u32>("SWITCHBOARD_MATTERMOST_RATE_PER_SECOND")?.or(file.rate_per_second)
    {
        if n == 0 {
            return Err(SettingsError::new(
                "[channels.mattermost] rate_per_second: at least 1",
            ));
        }
        c.per_second = n;
    }
    channel_access(
        config,
        &c.name,
        "SWITCHBOARD_MATTERMOST",
        ChannelAccess {
            chats: &file.allowed_chats,
            users: &file.allowed_users,
            approvers: &file.approvers,
            mode: &file.approval_mode,
            thread_sessions: file.thread_sessions,
        },
    )?;
    crate::mattermost::MattermostChannel::new(c.clone()).map_err(|e| {
        SettingsError::new(format!(
            "[channels.mattermost] (or SWITCHBOARD_MATTERMOST_*): {e}"
        ))
    })?;
    Ok(Some(c))
}
