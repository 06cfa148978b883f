//! The settings API's service (`/v1/settings`, `/v1/providers`): reads what `serve` runs
//! with; writes a change to the configuration and secrets files the way `switchboard setup`
//! does (`setup::files`), loads them again as a restart would, and applies what changed
//! without one — the built-in agent's provider, the engine's defaults, the gateway's
//! channels. A variable of the environment wins over the files, so what one sets is shown
//! as such and refused as a change.

pub mod gateway;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use switchboard_agent::ProviderSlot;
use switchboard_engine::{Engine, SessionDefaults};
use switchboard_protocol::ErrorCode;
use switchboard_protocol::settings::{
    ChannelCheck, ChannelKind, ChannelSettings, ModelsResponse, ProviderEntry, ProviderKind,
    ProviderSettings, ProvidersResponse, SettingsResponse, SettingsUpdate,
};
use switchboard_server::ApiError;
use switchboard_server::routes::settings::SettingsService;

use crate::config::{Settings, overridden, redact_url, secrets_path};
use crate::setup::files::Files;
use crate::setup::{Endpoint, endpoint};

/// How long a provider or a platform has to answer a check.
const CHECK_TIMEOUT: Duration = Duration::from_secs(8);

pub struct LiveSettings {
    /// The configuration file changes are written to (`serve`'s, else where `setup` would
    /// write one).
    config_path: PathBuf,
    /// What `serve` runs with now.
    current: parking_lot::RwLock<Settings>,
    /// Held across a change (its checks may take seconds): changes go one at a time, while
    /// reads carry on.
    changes: tokio::sync::Mutex<()>,
    engine: Engine,
    provider: ProviderSlot,
    /// Set once `serve` listens (the gateway is a client of the API).
    gateway: OnceLock<Arc<gateway::GatewayControl>>,
}

fn error(code: ErrorCode, message: impl Into<String>) -> ApiError {
    ApiError::new(code, message)
}

impl LiveSettings {
    pub fn new(settings: &Settings, engine: Engine, provider: ProviderSlot) -> Self {
        Self {
            config_path: settings
                .config_path
                .clone()
                .unwrap_or_else(crate::config::default_config_path),
            current: parking_lot::RwLock::new(settings.clone()),
            changes: tokio::sync::Mutex::new(()),
            engine,
            provider,
            gateway: OnceLock::new(),
        }
    }

    /// The gateway the settings restart when they change channels.
    pub fn attach_gateway(&self, gateway: Arc<gateway::GatewayControl>) {
        let _ = self.gateway.set(gateway);
    }

    /// Why a change cannot be saved, when it cannot.
    fn read_only_reason(&self) -> Option<String> {
        match std::fs::metadata(&self.config_path) {
            Ok(m) if !m.is_file() => Some(format!(
                "the configuration {} is not a regular file: start `serve` with a configuration file to change settings here",
                self.config_path.display()
            )),
            _ => None,
        }
    }

    fn view(&self, s: &Settings) -> SettingsResponse {
        let read_only_reason = self.read_only_reason();
        let names = s
            .gateway
            .as_ref()
            .filter(|g| g.enabled)
            .map(|g| g.channel_names())
            .unwrap_or_default();
        SettingsResponse {
            config_file: Some(self.config_path.display().to_string()),
            secrets_file: secrets_path(Some(&self.config_path)).display().to_string(),
            writable: read_only_reason.is_none(),
            read_only_reason,
            provider: ProviderSettings {
                name: provider_name(kind(&s.provider_kind), &s.base_url),
                kind: kind(&s.provider_kind),
                base_url: redact_url(&s.base_url),
                api_key_set: s.api_key.is_some(),
                model: s.model.clone(),
                local_server: s.local_server.clone(),
            },
            default_permission_mode: s.permission_mode,
            channels: ChannelKind::ALL
                .into_iter()
                .map(|c| ChannelSettings {
                    name: c,
                    configured: names.iter().any(|n| n == c.as_str()),
                })
                .collect(),
            environment: overridden(&s.provider_kind),
        }
    }
}

fn kind(provider_kind: &str) -> ProviderKind {
    if provider_kind == "anthropic" {
        ProviderKind::Anthropic
    } else {
        ProviderKind::Openai
    }
}

/// The port of a model server on this machine (`http://127.0.0.1:11434/v1`).
fn local_port(base_url: &str) -> Option<u16> {
    let url = reqwest::Url::parse(base_url).ok()?;
    matches!(url.host_str()?, "127.0.0.1" | "localhost" | "[::1]")
        .then(|| url.port())
        .flatten()
}

/// What `GET /v1/providers` calls a provider at `base_url`.
fn provider_name(kind: ProviderKind, base_url: &str) -> String {
    for name in ["openai", "anthropic", "openrouter"] {
        if let Ok(e) = endpoint(name, &[])
            && e.base_url == base_url.trim_end_matches('/')
            && e.kind == kind.as_str()
        {
            return name.into();
        }
    }
    match local_port(base_url) {
        Some(port) if kind == ProviderKind::Openai => format!("local-{port}"),
        _ => "custom".into(),
    }
}

/// The provider a settings name stands for (`current` and `custom`: the one in force).
fn named(name: &str, current: &Settings) -> Option<Endpoint> {
    let mine = || Endpoint {
        kind: kind(&current.provider_kind).as_str(),
        base_url: current.base_url.clone(),
        label: redact_url(&current.base_url),
    };
    match name {
        "current" => Some(mine()),
        "custom" => {
            (provider_name(kind(&current.provider_kind), &current.base_url) == "custom").then(mine)
        }
        "openai" | "anthropic" | "openrouter" => endpoint(name, &[]).ok(),
        _ => {
            let port: u16 = name.strip_prefix("local-")?.parse().ok()?;
            Some(Endpoint {
                kind: "openai",
                base_url: format!("http://127.0.0.1:{port}/v1"),
                label: format!("the model server on port {port}"),
            })
        }
    }
}

/// The models the provider at `e` lists with `key`.
async fn list_models(e: &Endpoint, key: Option<String>) -> Result<Vec<String>, ApiError> {
    let provider = crate::serve::make_provider(e.kind, &e.base_url, key, 0, 1024)
        .map_err(|err| error(ErrorCode::UnprocessableEntity, err.to_string()))?;
    let failed = |why: String| {
        error(
            ErrorCode::CheckFailed,
            format!(
                "{} at {} did not list its models: {why}",
                e.label,
                redact_url(&e.base_url)
            ),
        )
    };
    match tokio::time::timeout(CHECK_TIMEOUT, provider.models()).await {
        Err(_) => Err(failed(format!(
            "no answer in {} s",
            CHECK_TIMEOUT.as_secs()
        ))),
        Ok(Err(err)) => Err(failed(provider.redact(&err.to_string()))),
        Ok(Ok(models)) => Ok(models),
    }
}

/// 409 `set_by_environment` when an environment variable sets `setting`.
fn unlocked(
    env: &std::collections::BTreeMap<String, String>,
    setting: &str,
) -> Result<(), ApiError> {
    match env.get(setting) {
        Some(var) => Err(error(
            ErrorCode::SetByEnvironment,
            format!(
                "{setting} is set by the environment variable {var}: change or unset it there, then restart"
            ),
        )),
        None => Ok(()),
    }
}

#[async_trait::async_trait]
impl SettingsService for LiveSettings {
    async fn get(&self) -> Result<SettingsResponse, ApiError> {
        let current = self.current.read().clone();
        Ok(self.view(&current))
    }

    async fn update(&self, change: SettingsUpdate) -> Result<SettingsResponse, ApiError> {
        let _one_at_a_time = self.changes.lock().await;
        let current = self.current.read().clone();
        if let Some(why) = self.read_only_reason() {
            return Err(error(ErrorCode::SettingsReadOnly, why));
        }
        let mut files = Files::read(
            self.config_path.clone(),
            secrets_path(Some(&self.config_path)),
        )
        .map_err(|e| {
            tracing::warn!(error = %e, "reading the configuration files for a settings change");
            error(
                ErrorCode::SettingsReadOnly,
                "the configuration files could not be read (the server's log says why)",
            )
        })?;
        let provider_changed = self::edit::provider(&change, &current, &mut files).await?;
        let added = self::edit::channels(&change, &current, &mut files)?;
        if let Some(mode) = change.default_permission_mode {
            unlocked(
                &overridden(&current.provider_kind),
                "default_permission_mode",
            )?;
            let name = serde_json::to_value(mode)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            files.set(&["sessions", "permission_mode"], &name);
        }

        // Written, then read back as a restart would; anything wrong puts the files back.
        files.write().map_err(|e| {
            tracing::warn!(error = %e, "writing a settings change");
            error(
                ErrorCode::SettingsReadOnly,
                format!(
                    "the change could not be written to {} (the server's log says why)",
                    self.config_path.display()
                ),
            )
        })?;
        let undo = |e: ApiError| {
            if let Err(r) = files.restore() {
                tracing::error!(error = %r, "putting the configuration back after a refused change");
            }
            e
        };
        let mut new = Settings::load(
            Some(&self.config_path),
            Some(&current.data_dir),
            Some(&current.listen),
        )
        .map_err(|e| undo(error(ErrorCode::UnprocessableEntity, format!("{e:#}"))))?;
        crate::local_model::adopt(&mut new).await;
        if !added.is_empty() {
            let g = new
                .gateway
                .as_ref()
                .ok_or_else(|| undo(error(ErrorCode::Internal, "no channel configured")))?;
            let names: Vec<&str> = added.iter().map(|c| c.as_str()).collect();
            match tokio::time::timeout(CHECK_TIMEOUT, g.check(&names)).await {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => return Err(undo(error(ErrorCode::CheckFailed, e.to_string()))),
                Err(_) => {
                    return Err(undo(error(
                        ErrorCode::CheckFailed,
                        "the platform did not answer in time",
                    )));
                }
            }
        }
        let provider = crate::serve::provider(&new)
            .map_err(|e| undo(error(ErrorCode::UnprocessableEntity, e.to_string())))?;

        // Applied: runs from now call the new provider; sessions from now get the defaults.
        if provider_changed {
            self.provider.set(provider);
        }
        self.engine.set_defaults(SessionDefaults {
            model: new.model.clone(),
            permission_mode: new.permission_mode,
        });
        // Restarted only when a channel was given tokens, or one running was removed.
        let running = |s: &Settings| {
            s.gateway
                .as_ref()
                .filter(|g| g.enabled)
                .map(|g| g.channel_names())
                .unwrap_or_default()
        };
        let channels_changed = !added.is_empty() || running(&current) != running(&new);
        // The channels are restarted before the settings say they are configured: a client
        // that sees a channel configured finds the gateway serving it (a client that gave
        // up on this request polls `GET /v1/settings` for that).
        let reloaded = match self.gateway.get() {
            Some(g) if channels_changed => g.reload(&new).await,
            _ => Ok(()),
        };
        *self.current.write() = new.clone();
        reloaded.map_err(|e| {
            tracing::error!(error = %e, "restarting the chat channels after a settings change");
            error(
                ErrorCode::Unavailable,
                format!("the settings were saved, but the chat channels did not start: {e}"),
            )
        })?;
        tracing::info!("settings changed");
        Ok(self.view(&new))
    }

    async fn providers(&self) -> Result<ProvidersResponse, ApiError> {
        let current = self.current.read().clone();
        let in_force = provider_name(kind(&current.provider_kind), &current.base_url);
        let entry = |name: String, e: Endpoint, local: bool| ProviderEntry {
            current: name == in_force,
            kind: kind(e.kind),
            base_url: redact_url(&e.base_url),
            label: e.label,
            name,
            local,
        };
        let mut providers: Vec<ProviderEntry> = ["openai", "anthropic", "openrouter"]
            .into_iter()
            .filter_map(|name| Some(entry(name.into(), endpoint(name, &[]).ok()?, false)))
            .collect();
        for s in switchboard_agent::local::find_all(&current.local_model_ports).await {
            let Some(port) = local_port(&s.base_url) else {
                continue;
            };
            let label = format!("{} on this machine", s.name);
            let e = Endpoint {
                kind: "openai",
                base_url: s.base_url,
                label,
            };
            providers.push(entry(format!("local-{port}"), e, true));
        }
        // The one in force, when none of those.
        if !providers.iter().any(|p| p.current)
            && let Some(e) = named("current", &current)
        {
            let local = in_force.starts_with("local-");
            providers.push(entry(in_force.clone(), e, local));
        }
        Ok(ProvidersResponse { providers })
    }

    async fn models(&self, provider: &str) -> Result<ModelsResponse, ApiError> {
        let current = self.current.read().clone();
        let e = named(provider, &current).ok_or_else(|| {
            error(
                ErrorCode::NotFound,
                format!("no provider {provider:?}: see GET /v1/providers"),
            )
        })?;
        // The configured key goes to the provider it is configured for, and nowhere else.
        let key = current.api_key.clone().filter(|_| {
            e.base_url == current.base_url && e.kind == kind(&current.provider_kind).as_str()
        });
        let models = list_models(&e, key).await?;
        Ok(ModelsResponse {
            provider: provider.to_string(),
            models,
        })
    }

    async fn test_channel(&self, channel: ChannelKind) -> Result<ChannelCheck, ApiError> {
        let current = self.current.read().clone();
        let not_configured = || {
            error(
                ErrorCode::NotFound,
                format!("{} is not configured", channel.as_str()),
            )
        };
        let g = current
            .gateway
            .as_ref()
            .filter(|g| g.channel_names().iter().any(|n| n == channel.as_str()))
            .ok_or_else(not_configured)?;
        let checked = tokio::time::timeout(CHECK_TIMEOUT, g.check(&[channel.as_str()]))
            .await
            .map_err(|_| {
                error(
                    ErrorCode::CheckFailed,
                    "the platform did not answer in time",
                )
            })?
            .map_err(|e| error(ErrorCode::CheckFailed, e.to_string()))?;
        let bot = checked.into_iter().next().ok_or_else(not_configured)?;
        Ok(ChannelCheck {
            name: channel,
            identity: bot.identity,
            link: bot.link,
        })
    }
}

mod edit;
