//! `/v1/settings` and `/v1/providers`: the server's provider, default model, session
//! defaults and chat channels, read and changed while it serves.
//!
//! What the settings are, where they are kept and how a change is applied belong to whoever
//! assembled the server (the binary: its configuration file, the agent's provider, the
//! gateway), behind [`SettingsService`]; these handlers parse, call, encode.

use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use switchboard_protocol::ErrorBody;
use switchboard_protocol::ErrorCode;
use switchboard_protocol::settings::{
    ChannelCheck, ChannelKind, ModelsResponse, ProvidersResponse, SettingsResponse, SettingsUpdate,
};

use crate::extract;
use crate::{ApiError, AppState};

/// The settings as the binary keeps them. Every answer is free of secrets.
#[async_trait::async_trait]
pub trait SettingsService: Send + Sync + 'static {
    /// The settings in force.
    async fn get(&self) -> Result<SettingsResponse, ApiError>;
    /// Checks, saves and applies a change; the settings in force after it.
    async fn update(&self, change: SettingsUpdate) -> Result<SettingsResponse, ApiError>;
    /// The providers a setting can name.
    async fn providers(&self) -> Result<ProvidersResponse, ApiError>;
    /// The models `provider` lists.
    async fn models(&self, provider: &str) -> Result<ModelsResponse, ApiError>;
    /// Asks a configured channel's platform who its bot is.
    async fn test_channel(&self, channel: ChannelKind) -> Result<ChannelCheck, ApiError>;
}

/// Where the handlers find the service: none on a server assembled without one (their
/// answer is then 404 `not_found`).
pub type Settings = Option<Arc<dyn SettingsService>>;

fn service(state: &AppState) -> Result<&Arc<dyn SettingsService>, ApiError> {
    state.settings.as_ref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "this server's settings are not managed over the API",
        )
    })
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/v1/settings", get(show).put(update))
        .route("/v1/settings/channels/{name}/test", post(test_channel))
        .route("/v1/providers", get(providers))
        .route("/v1/providers/{name}/models", get(models))
}

/// The settings in force: the provider (its key only said to be set), the default model
/// and permission mode, the chat channels, and what environment variables set.
#[utoipa::path(get, path = "/v1/settings", tag = "settings", security(("bearer" = ["settings:read"])),
    responses((status = 200, body = SettingsResponse)))]
pub async fn show(State(state): State<AppState>) -> Result<Json<SettingsResponse>, ApiError> {
    Ok(Json(service(&state)?.get().await?))
}

/// Changes the settings while serving: checked (a new provider or key must list its
/// models, a channel's token must be accepted by its platform), written to the
/// configuration file (keys and tokens to the 0600 secrets file beside it), then applied:
/// new runs use the new provider and model (a run under way keeps its own), new sessions
/// the new permission mode, and the chat channels restart with the change.
#[utoipa::path(put, path = "/v1/settings", tag = "settings", request_body = SettingsUpdate,
    security(("bearer" = ["admin"])),
    responses((status = 200, description = "Saved and applied", body = SettingsResponse),
              (status = 409, description = "`settings_read_only` (the configuration is not a file that can be written) or `set_by_environment` (the variable named sets it)", body = ErrorBody),
              (status = 422, description = "`check_failed`: the provider did not list its models with the key, or a platform refused the token (its reason); `unprocessable_entity`: an unknown provider name, a URL that is not http(s), a blank model", body = ErrorBody)))]
pub async fn update(
    State(state): State<AppState>,
    crate::extract::Caller(p): crate::extract::Caller,
    extract::Json(change): extract::Json<SettingsUpdate>,
) -> Result<Json<SettingsResponse>, ApiError> {
    // What changed, by name only: the values may be keys and tokens.
    let changed: Vec<String> = serde_json::to_value(&change)
        .ok()
        .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
        .unwrap_or_default();
    let service = service(&state)?.clone();
    // On a task of its own: a client that goes away mid-change (its checks take seconds)
    // does not leave the files written and the change neither applied nor put back.
    let change = tokio::spawn(async move { service.update(change).await });
    match change.await {
        Ok(answer) => {
            let answer = answer?;
            state
                .engine
                .team()
                .record(
                    &p.user,
                    "settings.change",
                    None,
                    crate::extract::via(&p),
                    serde_json::json!({ "changed": changed }),
                )
                .await;
            Ok(Json(answer))
        }
        Err(e) => {
            tracing::error!(error = %e, "a settings change panicked");
            Err(ApiError::new(ErrorCode::Internal, "internal error"))
        }
    }
}

/// The providers a setting can name: OpenAI, Anthropic, OpenRouter, the model servers
/// found on this machine, and the one in force.
#[utoipa::path(get, path = "/v1/providers", tag = "settings", security(("bearer" = ["settings:read"])),
    responses((status = 200, body = ProvidersResponse)))]
pub async fn providers(State(state): State<AppState>) -> Result<Json<ProvidersResponse>, ApiError> {
    Ok(Json(service(&state)?.providers().await?))
}

/// The models a provider lists (`current`: the one in force, with its key; another
/// provider is asked without a key).
#[utoipa::path(get, path = "/v1/providers/{name}/models", tag = "settings",
    params(("name" = String, Path, pattern = "^(current|custom|openai|anthropic|openrouter|local-[0-9]{1,5})$",
        description = "A name of `GET /v1/providers` (`local-PORT` for a model server on this machine), or `current`")),
    security(("bearer" = ["settings:read"])),
    responses((status = 200, body = ModelsResponse),
              (status = 404, description = "`not_found`: no provider of that name", body = ErrorBody),
              (status = 422, description = "`check_failed`: the provider did not list its models (its reason)", body = ErrorBody)))]
pub async fn models(
    State(state): State<AppState>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Result<Json<ModelsResponse>, ApiError> {
    Ok(Json(service(&state)?.models(&name).await?))
}

/// Asks the platform who the channel's bot is, with the token configured: its name and
/// where to talk to it.
#[utoipa::path(post, path = "/v1/settings/channels/{name}/test", tag = "settings",
    params(("name" = ChannelKind, Path)), security(("bearer" = ["gateway:admin"])),
    responses((status = 200, body = ChannelCheck),
              (status = 404, description = "`not_found`: the channel is not configured", body = ErrorBody),
              (status = 422, description = "`check_failed`: the platform refused the token or did not answer", body = ErrorBody)))]
pub async fn test_channel(
    State(state): State<AppState>,
    axum::extract::Path(name): axum::extract::Path<String>,
) -> Result<Json<ChannelCheck>, ApiError> {
    let channel = ChannelKind::ALL
        .into_iter()
        .find(|c| c.as_str() == name)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                format!("no chat channel {name:?} (telegram, slack, discord)"),
            )
        })?;
    Ok(Json(service(&state)?.test_channel(channel).await?))
}
