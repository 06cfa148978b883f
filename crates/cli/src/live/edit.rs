//! A settings change put into the files (`setup::files::Files`), after the checks that need
//! no restart-like reload: the variables that lock a setting, the provider's models.

use switchboard_protocol::ErrorCode;
use switchboard_protocol::settings::{ChannelKind, ProviderKind, SettingsUpdate};
use switchboard_server::ApiError;

use super::{error, kind, list_models, named, unlocked};
use crate::config::{OVERRIDES, Settings, overridden, redact_url};
use crate::setup::Endpoint;
use crate::setup::files::Files;

/// The key an environment variable gives a provider of `kind`, if one does.
fn env_key(kind: &str) -> Option<String> {
    OVERRIDES
        .iter()
        .filter(|o| o.setting == "provider.api_key" && o.kind.is_none_or(|k| k == kind))
        .find_map(|o| switchboard_settings::env(o.var))
}

fn invalid(message: impl Into<String>) -> ApiError {
    error(ErrorCode::UnprocessableEntity, message)
}

/// Puts the provider's part of `change` in `files`: where it is, its key, the model. A new
/// provider or key must list its models first (the key is checked; the model, unless
/// given, is one of them to chat with). Whether the provider itself changed.
pub(super) async fn provider(
    change: &SettingsUpdate,
    current: &Settings,
    files: &mut Files,
) -> Result<bool, ApiError> {
    let Some(p) = &change.provider else {
        return Ok(false);
    };
    let kind_now = kind(&current.provider_kind);
    let now = Endpoint {
        kind: kind_now.as_str(),
        base_url: current.base_url.clone(),
        label: redact_url(&current.base_url),
    };
    let target = match (&p.name, p.kind, &p.base_url) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return Err(invalid(
                "give the provider's `name`, or its `kind` and `base_url`, not both",
            ));
        }
        (Some(name), None, None) => Some(
            named(name, current)
                .ok_or_else(|| invalid(format!("no provider {name:?}: see GET /v1/providers")))?,
        ),
        (None, None, None) => None,
        (None, k, url) => {
            let k = k.unwrap_or(kind_now);
            let base_url = match url {
                Some(u) => {
                    let u = u.trim().trim_end_matches('/');
                    if !(u.starts_with("http://") || u.starts_with("https://")) || u.len() < 10 {
                        return Err(invalid(format!(
                            "base_url {u:?}: expected an http:// or https:// URL"
                        )));
                    }
                    u.to_string()
                }
                None if k == kind_now => current.base_url.clone(),
                None => match k {
                    ProviderKind::Openai => switchboard_agent::openai::DEFAULT_BASE_URL.into(),
                    ProviderKind::Anthropic => {
                        switchboard_agent::anthropic::DEFAULT_BASE_URL.into()
                    }
                },
            };
            Some(Endpoint {
                kind: k.as_str(),
                label: redact_url(&base_url),
                base_url,
            })
        }
    };
    // A server found on this machine is only in use while nothing is configured: a change
    // to it writes where it is, so that it stays the provider.
    let target = target.or_else(|| current.local_server.is_some().then(|| now.clone()));
    let moved = target
        .as_ref()
        .is_some_and(|t| t.kind != now.kind || t.base_url != now.base_url);
    let env = overridden(&current.provider_kind);
    let to = target.clone().unwrap_or_else(|| now.clone());
    if moved {
        unlocked(&env, "provider.kind")?;
        unlocked(&env, "provider.base_url")?;
        unlocked(&overridden(to.kind), "provider.base_url")?;
    }
    if p.api_key.is_some() {
        unlocked(&overridden(to.kind), "provider.api_key")?;
    }
    if p.model.is_some() {
        unlocked(&env, "provider.model")?;
    }
    let model = match &p.model {
        Some(m) if m.trim().is_empty() => return Err(invalid("model must not be empty or blank")),
        Some(m) => Some(m.trim().to_string()),
        None => None,
    };
    // The key to write (`Some(None)`: remove it); another provider never gets the old one.
    let key: Option<Option<String>> = match &p.api_key {
        Some(k) if k.trim().is_empty() => Some(None),
        Some(k) => Some(Some(k.trim().to_string())),
        None if moved => Some(None),
        None => None,
    };
    let model = if moved || key.is_some() {
        let check_key = match &key {
            Some(Some(k)) => Some(k.clone()),
            Some(None) => env_key(to.kind),
            None => current.api_key.clone(),
        };
        let models = list_models(&to, check_key).await?;
        match model {
            Some(m) => Some(m),
            None if moved => Some(switchboard_agent::local::chat_model(&models).ok_or_else(
                || {
                    invalid(format!(
                        "{} lists no model to chat with: give `model`",
                        to.label
                    ))
                },
            )?),
            None => None,
        }
    } else {
        model
    };
    if let Some(t) = &target {
        files.set(&["provider", "kind"], t.kind);
        files.set(&["provider", "base_url"], &t.base_url);
    }
    if let Some(m) = &model {
        files.set(&["provider", "model"], m);
    }
    match &key {
        Some(Some(k)) => files.set_secret(&["provider", "api_key"], k),
        Some(None) => files.remove_secret(&["provider", "api_key"]),
        None => {}
    }
    Ok(target.is_some() || key.is_some())
}

/// Puts the channels' part of `change` in `files`: tokens in the secrets file, a removed
/// channel's section gone from both files. The channels added or given new tokens (their
/// platforms are asked once the change is read back).
pub(super) fn channels(
    change: &SettingsUpdate,
    current: &Settings,
    files: &mut Files,
) -> Result<Vec<ChannelKind>, ApiError> {
    let env = overridden(&current.provider_kind);
    let mut added = Vec::new();
    let lock = |c: ChannelKind| unlocked(&env, &format!("channels.{}", c.as_str()));
    let token = |t: &str, what: &str| {
        let t = t.trim();
        if t.is_empty() {
            Err(invalid(format!("{what} must not be empty")))
        } else {
            Ok(t.to_string())
        }
    };
    if let Some(t) = &change.telegram {
        lock(ChannelKind::Telegram)?;
        files.set_secret(
            &["channels", "telegram", "token"],
            &token(&t.token, "the Telegram token")?,
        );
        added.push(ChannelKind::Telegram);
    }
    if let Some(s) = &change.slack {
        lock(ChannelKind::Slack)?;
        files.set_secret(
            &["channels", "slack", "bot_token"],
            &token(&s.bot_token, "the Slack bot token")?,
        );
        files.set_secret(
            &["channels", "slack", "app_token"],
            &token(&s.app_token, "the Slack app-level token")?,
        );
        added.push(ChannelKind::Slack);
    }
    if let Some(t) = &change.discord {
        lock(ChannelKind::Discord)?;
        files.set_secret(
            &["channels", "discord", "token"],
            &token(&t.token, "the Discord token")?,
        );
        added.push(ChannelKind::Discord);
    }
    for c in &change.remove_channels {
        if added.contains(c) {
            return Err(invalid(format!(
                "{} is both given tokens and removed",
                c.as_str()
            )));
        }
        lock(*c)?;
        files.remove_secret(&["channels", c.as_str()]);
    }
    Ok(added)
}
