//! `/v1/settings` and `/v1/providers`: the server's model provider, default model, session
//! defaults and chat channels, read and changed while it serves. No answer carries a
//! secret: a key or a token is only said to be set.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::PermissionMode;

/// The wire format a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI's chat completions (OpenAI, OpenRouter, Ollama, LM Studio, vLLM, llama.cpp …).
    Openai,
    /// Anthropic's messages.
    Anthropic,
}

impl ProviderKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Openai => "openai",
            Self::Anthropic => "anthropic",
        }
    }
}

/// A chat platform the settings connect.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ChannelKind {
    Telegram,
    Slack,
    Discord,
}

impl ChannelKind {
    pub const ALL: [ChannelKind; 3] = [Self::Telegram, Self::Slack, Self::Discord];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Telegram => "telegram",
            Self::Slack => "slack",
            Self::Discord => "discord",
        }
    }
}

/// `GET /v1/settings`, and the answer of `PUT /v1/settings`: the settings in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SettingsResponse {
    /// The configuration file changes are written to, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_file: Option<String>,
    /// The file the keys and tokens are written to (mode 0600).
    pub secrets_file: String,
    /// Whether changes can be saved; when not, `read_only_reason` says why.
    pub writable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only_reason: Option<String>,
    pub provider: ProviderSettings,
    /// The permission mode a new session gets unless it asks for another.
    pub default_permission_mode: PermissionMode,
    /// Telegram, Slack and Discord, configured or not.
    pub channels: Vec<ChannelSettings>,
    /// What an environment variable sets, which only that variable can change: the setting
    /// (`provider.model`, `provider.api_key`, `channels.telegram` …) → the variable.
    pub environment: BTreeMap<String, String>,
}

/// The model provider in force.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProviderSettings {
    /// Its name in `GET /v1/providers` (`openai`, `anthropic`, `openrouter`, `local-PORT`
    /// for a server found on this machine, or `custom`).
    pub name: String,
    pub kind: ProviderKind,
    pub base_url: String,
    /// Whether a key is configured (the key itself is never shown).
    pub api_key_set: bool,
    /// The default model: what a session that names none uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The model server on this machine in use when nothing is configured (`Ollama on
    /// port 11434`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_server: Option<String>,
}

/// One chat platform.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChannelSettings {
    pub name: ChannelKind,
    /// Whether its token(s) are configured.
    pub configured: bool,
}

/// `PUT /v1/settings`: what to change; what is left out stays as it is. Checked before it
/// is saved (a new provider or key must list its models; a channel's token must be
/// accepted by its platform), then written to the configuration file (keys and tokens to
/// the secrets file) and applied without a restart: new runs use the new provider and
/// model, a run under way keeps its own, and the chat channels restart with the change.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SettingsUpdate {
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nullable::object"
    )]
    pub provider: Option<ProviderUpdate>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_permission_mode: Option<PermissionMode>,
    /// Connects Telegram, or gives it another token.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nullable::object"
    )]
    pub telegram: Option<TokenUpdate>,
    /// Connects Slack (Socket Mode), or gives it other tokens.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nullable::object"
    )]
    pub slack: Option<SlackUpdate>,
    /// Connects Discord, or gives it another token.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::nullable::object"
    )]
    pub discord: Option<TokenUpdate>,
    /// Channels to disconnect (their tokens are removed).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        deserialize_with = "crate::nullable::or_default"
    )]
    #[schema(nullable)]
    pub remove_channels: Vec<ChannelKind>,
}

/// The provider's part of [`SettingsUpdate`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderUpdate {
    /// A provider of `GET /v1/providers` by name: sets its kind and URL (and, unless
    /// given, keeps the model only if the provider stays the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Or the wire format and URL of any other server.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ProviderKind>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = "^https?://")]
    pub base_url: Option<String>,
    /// The key; an empty string removes it. A provider at another URL never gets the key
    /// configured for the old one: give it its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The default model. Not empty or blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"\S")]
    pub model: Option<String>,
}

/// A bot token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TokenUpdate {
    #[schema(pattern = r"^\S+$")]
    pub token: String,
}

/// Slack's two tokens.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SlackUpdate {
    /// The bot token (`xoxb-…`).
    #[schema(pattern = r"^\S+$")]
    pub bot_token: String,
    /// The app-level token with `connections:write` (`xapp-…`).
    #[schema(pattern = r"^\S+$")]
    pub app_token: String,
}

/// One provider a setting can name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProviderEntry {
    /// What `PUT /v1/settings` and `GET /v1/providers/{name}/models` call it.
    pub name: String,
    /// What to show.
    pub label: String,
    pub kind: ProviderKind,
    pub base_url: String,
    /// A model server found on this machine.
    pub local: bool,
    /// The provider in force.
    pub current: bool,
}

/// `GET /v1/providers`: the providers Switchboard knows, the model servers found on this
/// machine, and the one in force (`current`, also listed as `custom` when it is none of
/// those).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProvidersResponse {
    pub providers: Vec<ProviderEntry>,
}

/// `GET /v1/providers/{name}/models`: the models the provider lists, with the key
/// configured for it (only the provider in force has one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ModelsResponse {
    pub provider: String,
    pub models: Vec<String>,
}

/// `POST /v1/settings/channels/{name}/test`: the platform accepted the token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ChannelCheck {
    pub name: ChannelKind,
    /// Who the bot is on the platform (`@my_bot`).
    pub identity: String,
    /// Where to talk to it: a Telegram DM link, a Discord invite.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_update_reads_objects_only() {
        let ok: SettingsUpdate = serde_json::from_str(
            r#"{"provider": {"model": "m"}, "telegram": null, "remove_channels": null}"#,
        )
        .unwrap();
        assert_eq!(ok.provider.unwrap().model.as_deref(), Some("m"));
        assert!(ok.telegram.is_none() && ok.remove_channels.is_empty());
        for bad in [
            r#"{"provider": [null, null]}"#,
            r#"{"telegram": ["123:abc"]}"#,
            r#"{"provider": {"modle": "m"}}"#,
            r#"{"slack": {"bot_token": "x"}}"#,
        ] {
            assert!(
                serde_json::from_str::<SettingsUpdate>(bad).is_err(),
                "{bad}"
            );
        }
    }
}
