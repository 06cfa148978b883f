//! A first run with nothing configured uses a model server already on this machine.

use crate::config::{Settings, redact_url};

/// When neither a model nor a provider is configured, looks for a local OpenAI-compatible
/// server (`switchboard_agent::local`) and, if one lists a model, makes it the provider and
/// a model of it to chat with the default (`Settings::local_server` names it).
pub async fn adopt(settings: &mut Settings) {
    if settings.model.is_some() || settings.provider_named {
        return;
    }
    let Some(found) = switchboard_agent::local::find(&settings.local_model_ports).await else {
        return;
    };
    let Some(model) = switchboard_agent::local::chat_model(&found.models) else {
        return;
    };
    tracing::debug!(server = %found.name, url = %found.base_url, %model, "using a local model server");
    settings.provider_kind = "openai".into();
    settings.base_url = found.base_url;
    settings.model = Some(model);
    settings.local_server = Some(found.name);
}

/// The model in use, in one line (`serve`'s start-up, `doctor`): `Ok` when there is one,
/// `Err` with what to do when there is none.
pub fn describe(settings: &Settings) -> Result<String, String> {
    let url = redact_url(&settings.base_url);
    match (&settings.model, &settings.local_server) {
        (Some(m), Some(server)) => Ok(format!(
            "{m} on {server} at {url} (found on this machine; `switchboard setup` to choose another)"
        )),
        (Some(m), None) => Ok(format!("{m} ({} at {url})", settings.provider_kind)),
        (None, _) if settings.provider_named => Err(format!(
            "none configured for {} at {url}: run `switchboard setup` (or set `[provider] model` / SWITCHBOARD_MODEL)",
            settings.provider_kind
        )),
        (None, _) => Err(
            "none configured, and no local model server found: run `switchboard setup` (or set `[provider] model` / SWITCHBOARD_MODEL)"
                .into(),
        ),
    }
}
