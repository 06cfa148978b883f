//! `[channels.teams]` (Microsoft Teams) and its `SWITCHBOARD_TEAMS_*` variables.

use serde::Deserialize;
use switchboard_settings::{env, env_parse};

use super::{ChannelAccess, ChannelsSection, SettingsError, channel_access, required};
use crate::msteams::TeamsConfig;

/// `[channels.teams]`.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamsSection {
    /// The bot's Microsoft App ID.
    pub app_id: Option<String>,
    /// Its client secret.
    pub app_password: Option<String>,
    /// For a single-tenant bot: its tenant id.
    pub tenant_id: Option<String>,
    pub token_url: Option<String>,
    pub openid_url: Option<String>,
    pub edit_interval_ms: Option<u64>,
    /// Conversation ids allowed without pairing (everyone in them).
    pub allowed_chats: Option<Vec<String>>,
    /// People (their Entra object id) allowed without pairing.
    pub allowed_users: Option<Vec<String>>,
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
    /// One session per channel thread (default), or one per channel.
    pub thread_sessions: Option<bool>,
}

impl std::fmt::Debug for TeamsSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TeamsSection")
            .field("app_id", &self.app_id)
            .field("tenant_id", &self.tenant_id)
            .finish_non_exhaustive()
    }
}

/// `[channels.teams]` and `SWITCHBOARD_TEAMS_*`: configured when an app id is given.
pub(super) fn teams_settings(
    config: &mut crate::GatewayConfig,
    channels: &ChannelsSection,
) -> Result<Option<TeamsConfig>, SettingsError> {
    let file = channels.teams.clone().unwrap_or_default();
    let Some(app_id) = env("SWITCHBOARD_TEAMS_APP_ID").or(file.app_id.clone()) else {
        if channels.teams.is_some() {
            return Err(SettingsError::new(
                "[channels.teams]: no app_id: set it or SWITCHBOARD_TEAMS_APP_ID",
            ));
        }
        return Ok(None);
    };
    let password = required(
        "teams",
        "app_password",
        "SWITCHBOARD_TEAMS_APP_PASSWORD",
        &file.app_password,
    )?;
    let tenant = env("SWITCHBOARD_TEAMS_TENANT_ID").or(file.tenant_id.clone());
    let mut c = TeamsConfig::new(app_id, password, tenant.as_deref());
    if let Some(u) = env("SWITCHBOARD_TEAMS_TOKEN_URL").or(file.token_url.clone()) {
        c.token_url = u;
    }
    if let Some(u) = env("SWITCHBOARD_TEAMS_OPENID_URL").or(file.openid_url.clone()) {
        c.openid_url = u;
    }
    if let Some(ms) =
        env_parse::<u64>("SWITCHBOARD_TEAMS_EDIT_INTERVAL_MS")?.or(file.edit_interval_ms)
    {
        c.edit_interval = std::time::Duration::from_millis(ms);
    }
    channel_access(
        config,
        &c.name,
        "SWITCHBOARD_TEAMS",
        ChannelAccess {
            chats: &file.allowed_chats,
            users: &file.allowed_users,
            approvers: &file.approvers,
            mode: &file.approval_mode,
            thread_sessions: file.thread_sessions,
        },
    )?;
    crate::msteams::TeamsChannel::new(c.clone()).map_err(|e| {
        SettingsError::new(format!("[channels.teams] (or SWITCHBOARD_TEAMS_*): {e}"))
    })?;
    Ok(Some(c))
}
