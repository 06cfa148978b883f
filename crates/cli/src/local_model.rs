//! A first run with nothing configured uses a model server already on this machine.

use crate::config::Settings;

/// When neither a model nor a provider is configured, looks for a local OpenAI-compatible
/// server (`switchboard_agent::local`) and, if one lists a model, makes it the provider and
/// its first model the default. Returns a line saying what was chosen (or how to configure a
/// model when nothing was found); `None` when a model or provider was configured.
pub async fn adopt(settings: &mut Settings) -> Option<String> {
    if settings.model.is_some() || settings.provider_named {
        return None;
    }
    match switchboard_agent::local::find(&settings.local_model_ports).await {
        Some(found) => {
            let model = found.models.first()?.clone();
            let line = format!(
                "model: {model} on {} at {} (found on this machine; `switchboard setup` to choose another)",
                found.name, found.base_url
            );
            tracing::debug!(server = %found.name, url = %found.base_url, %model, "using a local model server");
            settings.provider_kind = "openai".into();
            settings.base_url = found.base_url;
            settings.model = Some(model);
            settings.local_server = Some(found.name);
            Some(line)
        }
        None => Some(NO_MODEL.to_string()),
    }
}

/// What to do when no model is configured and none was found.
pub const NO_MODEL: &str = "model: none configured, and no local model server found: run `switchboard setup` (or set `[provider] model` / SWITCHBOARD_MODEL)";
