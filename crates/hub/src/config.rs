//! Session config options (`session/set_config_option`): the permission mode (the same
//! choice as the session modes, for clients that speak config options) and, for a session
//! of the built-in agent, its model. `session/set_mode` and a `mode` option change the same
//! thing, and either tells the editor both ways.

use super::*;
use agent_client_protocol::v1::schema::{
    ConfigOptionUpdate, SessionConfigOption, SessionConfigOptionCategory,
    SessionConfigSelectOption, SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
};
use switchboard_protocol::{PermissionMode, SessionDetailResponse};

/// The option ids.
pub(crate) const MODE: &str = "mode";
pub(crate) const MODEL: &str = "model";
/// The model's value while the session has none of its own (the server's default runs).
const DEFAULT_MODEL: &str = "default";
/// How long the provider's model list is waited for.
const MODELS_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this many models are offered.
const MAX_MODELS: usize = 200;

/// The session's config options as the editor sees them.
pub(crate) async fn options(hub: &Hub, detail: &SessionDetailResponse) -> Vec<SessionConfigOption> {
    let mut out = vec![mode_option(detail.config.permission_mode)];
    if detail.config.backend == BackendSpec::Builtin {
        out.push(model_option(hub, detail.config.model.as_deref()).await);
    }
    out
}

fn mode_option(current: PermissionMode) -> SessionConfigOption {
    let state = modes(current);
    let values: Vec<SessionConfigSelectOption> = state
        .available_modes
        .iter()
        .map(|m| {
            SessionConfigSelectOption::new(m.id.to_string(), m.name.clone())
                .description(m.description.clone())
        })
        .collect();
    SessionConfigOption::select(MODE, "Permissions", current.as_str(), values)
        .category(SessionConfigOptionCategory::Mode)
        .description("What the agent may do without asking".to_owned())
}

async fn model_option(hub: &Hub, current: Option<&str>) -> SessionConfigOption {
    let listed = hub.models().await;
    let mut values = Vec::new();
    match current {
        None => values.push(SessionConfigSelectOption::new(
            DEFAULT_MODEL,
            "The server's default",
        )),
        Some(m) if !listed.iter().any(|l| l == m) => {
            values.push(SessionConfigSelectOption::new(m.to_owned(), m.to_owned()));
        }
        Some(_) => {}
    }
    values.extend(
        listed
            .iter()
            .take(MAX_MODELS)
            .map(|m| SessionConfigSelectOption::new(m.clone(), m.clone())),
    );
    SessionConfigOption::select(
        MODEL,
        "Model",
        current.unwrap_or(DEFAULT_MODEL).to_owned(),
        values,
    )
    .category(SessionConfigOptionCategory::Model)
    .description("The model of the session's next runs".to_owned())
}

impl Hub {
    /// The models the built-in agent's provider lists, asked once per connection (a token
    /// without `settings:read`, or a provider that does not list them: none — the session's
    /// own model is still offered).
    pub(crate) async fn models(&self) -> Vec<String> {
        self.models
            .get_or_init(|| async {
                match tokio::time::timeout(MODELS_TIMEOUT, self.api.current_models()).await {
                    Ok(Ok(list)) => list.models,
                    Ok(Err(e)) => {
                        tracing::info!(error = %e, "the provider's models are not listed to this token");
                        vec![]
                    }
                    Err(_) => {
                        tracing::info!("the provider did not list its models in time");
                        vec![]
                    }
                }
            })
            .await
            .clone()
    }
}

pub(crate) async fn set_config_option(
    hub: &Hub,
    cx: &v1::ConnectionTo<Client>,
    req: SetSessionConfigOptionRequest,
) -> Result<SetSessionConfigOptionResponse, Error> {
    let open = hub.session(&req.session_id.to_string())?;
    let value = req
        .value
        .as_value_id()
        .map(|v| v.to_string())
        .ok_or_else(|| {
            Error::new(
                ErrorCode::INVALID_PARAMS,
                format!(
                    "option {} takes one of its values, not a boolean",
                    req.config_id
                ),
            )
        })?;
    let mut update = UpdateSessionRequest::default();
    match req.config_id.to_string().as_str() {
        MODE => {
            let mode = mode_of(&value).ok_or_else(|| {
                Error::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("no mode {value:?}: read-only, workspace-write or full-access"),
                )
            })?;
            update.permission_mode = Some(mode);
        }
        MODEL => {
            let detail = hub
                .api
                .get_session(open.id)
                .await
                .map_err(|e| api_error("reading the session", &e))?;
            if detail.config.backend != BackendSpec::Builtin {
                return Err(Error::new(
                    ErrorCode::INVALID_PARAMS,
                    "this session's agent chooses its own model: it has no model option",
                ));
            }
            if value == DEFAULT_MODEL || value.trim().is_empty() {
                if detail.config.model.is_some() {
                    return Err(Error::new(
                        ErrorCode::INVALID_PARAMS,
                        "a session's model can be changed, not reset to the server's default",
                    ));
                }
                return Ok(SetSessionConfigOptionResponse::new(
                    options(hub, &detail).await,
                ));
            }
            update.model = Some(value);
        }
        other => {
            return Err(Error::new(
                ErrorCode::INVALID_PARAMS,
                format!("no config option {other:?}: mode or model"),
            ));
        }
    }
    hub.api
        .update_session(open.id, &update)
        .await
        .map_err(|e| api_error("changing the session", &e))?;
    let options = tell(hub, cx, open.id, update.permission_mode).await?;
    Ok(SetSessionConfigOptionResponse::new(options))
}

/// After a change: the editor hears the options (and the mode, when it changed) as
/// notifications, whichever of the two it follows. Returns the options.
pub(crate) async fn tell(
    hub: &Hub,
    cx: &v1::ConnectionTo<Client>,
    session: Uuid,
    mode: Option<PermissionMode>,
) -> Result<Vec<SessionConfigOption>, Error> {
    let detail = hub
        .api
        .get_session(session)
        .await
        .map_err(|e| api_error("reading the session", &e))?;
    let options = options(hub, &detail).await;
    if let Some(mode) = mode {
        cx.send_notification(SessionNotification::new(
            session.to_string(),
            SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.as_str())),
        ))?;
    }
    cx.send_notification(SessionNotification::new(
        session.to_string(),
        SessionUpdate::ConfigOptionUpdate(ConfigOptionUpdate::new(options.clone())),
    ))?;
    Ok(options)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_mode_option_offers_the_three_modes_with_the_current_one() {
        let o = mode_option(PermissionMode::WorkspaceWrite);
        let v = serde_json::to_value(&o).unwrap();
        assert_eq!(v["id"], "mode");
        assert_eq!(v["category"], "mode");
        assert_eq!(v["type"], "select");
        assert_eq!(v["currentValue"], "workspace-write");
        let ids: Vec<_> = v["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["value"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(ids, ["read-only", "workspace-write", "full-access"]);
    }
}
