//! `[channels.whatsapp]` and its `SWITCHBOARD_WHATSAPP_*` variables.

use serde::Deserialize;
use switchboard_settings::{env, env_parse};

use super::{ChannelAccess, ChannelsSection, SettingsError, channel_access, required};
use crate::whatsapp::WhatsAppConfig;

/// `[channels.whatsapp]`.
#[derive(Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhatsAppSection {
    /// The business phone number's id (WhatsApp → API Setup), not the number.
    pub phone_number_id: Option<String>,
    /// A system user's access token with `whatsapp_business_messaging`.
    pub access_token: Option<String>,
    /// The Meta app's secret (App settings → Basic): it signs every delivery.
    pub app_secret: Option<String>,
    /// What Meta's webhook check must present (any string you choose).
    pub verify_token: Option<String>,
    pub api_base: Option<String>,
    /// An approved template sent outside the 24-hour window, and its language.
    pub template: Option<String>,
    pub template_language: Option<String>,
    /// Phone numbers (`4915112345`, digits only) allowed without pairing.
    pub allowed_users: Option<Vec<String>>,
    /// Group ids (from the Groups API) whose members may all talk to the bot.
    pub allowed_chats: Option<Vec<String>>,
    /// In groups, answer only when mentioned or replied to (default true).
    pub require_mention: Option<bool>,
    pub approvers: Option<Vec<String>>,
    pub approval_mode: Option<String>,
}

impl std::fmt::Debug for WhatsAppSection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WhatsAppSection")
            .field("phone_number_id", &self.phone_number_id)
            .field("api_base", &self.api_base)
            .finish_non_exhaustive()
    }
}

/// `[channels.whatsapp]` and `SWITCHBOARD_WHATSAPP_*`: configured when a phone number id is
/// given.
pub(super) fn whatsapp_settings(
    config: &mut crate::GatewayConfig,
    channels: &ChannelsSection,
) -> Result<Option<WhatsAppConfig>, SettingsError> {
    let file = channels.whatsapp.clone().unwrap_or_default();
    let Some(number) = env("SWITCHBOARD_WHATSAPP_PHONE_NUMBER_ID").or(file.phone_number_id.clone())
    else {
        if channels.whatsapp.is_some() {
            return Err(SettingsError::new(
                "[channels.whatsapp]: no phone_number_id: set it or SWITCHBOARD_WHATSAPP_PHONE_NUMBER_ID",
            ));
        }
        return Ok(None);
    };
    let need = |var: &str, key: &str, from_file: &Option<String>| {
        required("whatsapp", key, var, from_file)
    };
    let mut c = WhatsAppConfig::new(
        number,
        need(
            "SWITCHBOARD_WHATSAPP_ACCESS_TOKEN",
            "access_token",
            &file.access_token,
        )?,
        need(
            "SWITCHBOARD_WHATSAPP_APP_SECRET",
            "app_secret",
            &file.app_secret,
        )?,
        need(
            "SWITCHBOARD_WHATSAPP_VERIFY_TOKEN",
            "verify_token",
            &file.verify_token,
        )?,
    );
    if let Some(b) = env("SWITCHBOARD_WHATSAPP_API_BASE").or(file.api_base.clone()) {
        c.api_base = b;
    }
    if let Some(t) = env("SWITCHBOARD_WHATSAPP_TEMPLATE").or(file.template.clone()) {
        let language = env("SWITCHBOARD_WHATSAPP_TEMPLATE_LANGUAGE")
            .or(file.template_language.clone())
            .unwrap_or_else(|| "en_US".into());
        c.template = Some((t, language));
    }
    if let Some(m) =
        env_parse::<bool>("SWITCHBOARD_WHATSAPP_REQUIRE_MENTION")?.or(file.require_mention)
    {
        c.require_mention = m;
    }
    channel_access(
        config,
        &c.name,
        "SWITCHBOARD_WHATSAPP",
        ChannelAccess {
            chats: &file.allowed_chats,
            users: &file.allowed_users,
            approvers: &file.approvers,
            mode: &file.approval_mode,
            thread_sessions: None,
        },
    )?;
    crate::whatsapp::WhatsAppChannel::new(c.clone()).map_err(|e| {
        SettingsError::new(format!(
            "[channels.whatsapp] (or SWITCHBOARD_WHATSAPP_*): {e}"
        ))
    })?;
    Ok(Some(c))
}
