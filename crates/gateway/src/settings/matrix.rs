//! `[channels.matrix]` and its `SWITCHBOARD_MATRIX_*` variables.

use serde::Deserialize;

use super::{ChannelAccess, ChannelsSection, SettingsError, channel_access};
use switchboard_settings::{env, env_parse};

/// `[channels.matrix]`.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixSection {
    pub homeserver: Option<String>,
    /// `@bot:example.org`.
    pub user: Option<String>,
    pub password: Option<String>,
    pub access_token: Option<String>,
    pub device_name: Option<String>,
    /// Where the session and the SDK's stores are kept (default `DATA_DIR/matrix`).
    pub store_dir: Option<std::path::PathBuf>,
    /// Rooms (`!id:server`) allowed without pairing, whose invites are accepted.
    pub allowed_chats: Option<Vec<String>>,
    /// Users (`@ann:server`) allowed without pairing, whose invites are accepted.
    pub allowed_users: Option<Vec<String>>,
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
    /// In rooms of more than two, answer only when mentioned (default true).
    pub require_mention: Option<bool>,
    /// One session per thread (default true), or one per room.
    pub thread_sessions: Option<bool>,
}

impl std::fmt::Debug for MatrixSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatrixSection")
            .field("homeserver", &self.homeserver)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// `[channels.matrix]` and `SWITCHBOARD_MATRIX_*`: configured when a homeserver is given.
pub(super) fn matrix_settings(
    config: &mut crate::GatewayConfig,
    channels: &ChannelsSection,
) -> Result<Option<crate::matrix::MatrixConfig>, SettingsError> {
    let file = channels.matrix.clone().unwrap_or_default();
    let Some(homeserver) = env("SWITCHBOARD_MATRIX_HOMESERVER").or(file.homeserver.clone()) else {
        if channels.matrix.is_some() {
            return Err(SettingsError::new(
                "[channels.matrix]: no homeserver: set `homeserver` or SWITCHBOARD_MATRIX_HOMESERVER",
            ));
        }
        return Ok(None);
    };
    let user = env("SWITCHBOARD_MATRIX_USER")
        .or(file.user.clone())
        .ok_or_else(|| {
            SettingsError::new(
                "[channels.matrix]: no user: set `user` (@bot:example.org) or SWITCHBOARD_MATRIX_USER",
            )
        })?;
    if !(user.starts_with('@') && user.contains(':')) {
        return Err(SettingsError::new(format!(
            "SWITCHBOARD_MATRIX_USER / [channels.matrix] user: {user:?} is no Matrix user id (@bot:example.org)"
        )));
    }
    let mut c = crate::matrix::MatrixConfig::new(
        homeserver,
        user,
        env("SWITCHBOARD_MATRIX_STORE_DIR")
            .map(std::path::PathBuf::from)
            .or(file.store_dir.clone())
            .unwrap_or_default(),
    );
    c.password = env("SWITCHBOARD_MATRIX_PASSWORD").or(file.password.clone());
    c.access_token = env("SWITCHBOARD_MATRIX_ACCESS_TOKEN").or(file.access_token.clone());
    if c.password.is_none() && c.access_token.is_none() {
        return Err(SettingsError::new(
            "[channels.matrix]: set `password` or `access_token` (SWITCHBOARD_MATRIX_PASSWORD / SWITCHBOARD_MATRIX_ACCESS_TOKEN)",
        ));
    }
    if let Some(d) = env("SWITCHBOARD_MATRIX_DEVICE_NAME").or(file.device_name.clone()) {
        c.device_name = d;
    }
    if let Some(r) =
        env_parse::<bool>("SWITCHBOARD_MATRIX_REQUIRE_MENTION")?.or(file.require_mention)
    {
        c.require_mention = r;
    }
    channel_access(
        config,
        &c.name,
        "SWITCHBOARD_MATRIX",
        ChannelAccess {
            chats: &file.allowed_chats,
            users: &file.allowed_users,
            approvers: &file.approvers,
            mode: &file.approval_mode,
            thread_sessions: file.thread_sessions,
        },
    )?;
    c.allowed_users = config
        .allowed_peers
        .get(&c.name)
        .cloned()
        .unwrap_or_default();
    c.allowed_rooms = config
        .allowed_chats
        .get(&c.name)
        .cloned()
        .unwrap_or_default();
    Ok(Some(c))
}
