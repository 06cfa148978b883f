//! With `TEST_AGENT_RESUME=1`: `session/resume` and `session/close` advertised and
//! answered, and a `model` config option (`fast`, `smart`) set with
//! `session/set_config_option`. Logged as `resume_session ID`, `close_session ID`,
//! `set_model ID VALUE`.

use agent_client_protocol::v1::schema::{
    CloseSessionRequest, CloseSessionResponse, ResumeSessionRequest, ResumeSessionResponse,
    SessionConfigOption, SessionConfigOptionCategory, SessionConfigSelectOption,
    SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
};
use agent_client_protocol::{Error, ErrorCode};

use crate::Shared;

/// The models offered.
const MODELS: [&str; 2] = ["fast", "smart"];

/// The config options of a session whose model is `current`.
pub(crate) fn options(current: &str) -> Vec<SessionConfigOption> {
    vec![
        SessionConfigOption::select(
            "model",
            "Model",
            current.to_owned(),
            MODELS
                .iter()
                .map(|m| SessionConfigSelectOption::new(*m, *m))
                .collect::<Vec<_>>(),
        )
        .category(SessionConfigOptionCategory::Model),
    ]
}

impl Shared {
    fn model(&self, session: &str) -> String {
        self.models
            .lock()
            .get(session)
            .cloned()
            .unwrap_or_else(|| MODELS[0].to_owned())
    }

    pub(crate) fn resume(
        &self,
        req: &ResumeSessionRequest,
    ) -> Result<ResumeSessionResponse, Error> {
        let session = req.session_id.to_string();
        self.log(&format!("resume_session {session}"));
        self.set_mcp(&session, req.mcp_servers.clone());
        let Some(prompts) = self.load_history(&session) else {
            return Err(Error::new(ErrorCode::INVALID_PARAMS, "unknown session"));
        };
        self.history
            .lock()
            .entry(session.clone())
            .or_insert(prompts);
        Ok(ResumeSessionResponse::new().config_options(options(&self.model(&session))))
    }

    pub(crate) fn close(&self, req: &CloseSessionRequest) -> CloseSessionResponse {
        self.log(&format!("close_session {}", req.session_id));
        CloseSessionResponse::new()
    }

    pub(crate) fn set_option(
        &self,
        req: &SetSessionConfigOptionRequest,
    ) -> Result<SetSessionConfigOptionResponse, Error> {
        let session = req.session_id.to_string();
        let value = req
            .value
            .as_value_id()
            .map(|v| v.to_string())
            .unwrap_or_default();
        if req.config_id.to_string() != "model" || !MODELS.contains(&value.as_str()) {
            return Err(Error::new(
                ErrorCode::INVALID_PARAMS,
                "no such option or value",
            ));
        }
        self.log(&format!("set_model {session} {value}"));
        self.models.lock().insert(session, value.clone());
        Ok(SetSessionConfigOptionResponse::new(options(&value)))
    }
}
