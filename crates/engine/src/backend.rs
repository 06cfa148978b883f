//! The interface between the engine and whatever produces a session's events.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use switchboard_protocol::{
    AgentEvent, BackendSpec, ContextItem, Role, SessionConfig, ToolCall, TranscriptMessage, Usage,
};
use switchboard_store::{MessageRecord, Store};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::EngineError;
use crate::log::EventLog;
use crate::time::now_rfc3339;

/// What started a run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunInput {
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context: Vec<ContextItem>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overrides: Option<serde_json::Value>,
}

/// How a run ended, as the backend reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub stop_reason: String,
    pub total_turns: u32,
    pub usage: Usage,
}

/// A run that failed. `message` is shown to users: it must say what went wrong and must
/// never contain secrets.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct BackendError {
    pub message: String,
    pub retryable: bool,
}

impl BackendError {
    pub fn new(message: impl Into<String>, retryable: bool) -> Self {
        Self {
            message: message.into(),
            retryable,
        }
    }
}

impl From<EngineError> for BackendError {
    fn from(e: EngineError) -> Self {
        Self::new(format!("engine: {e}"), true)
    }
}

/// Something that runs a session's turns: the built-in agent, an ACP agent, a test fake.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// Runs one turn. Emit events through `ctx.handle`; return when the turn is over. When
    /// `ctx.cancel` fires, stop promptly and return (any result; the engine records the run
    /// as cancelled).
    async fn run(&self, ctx: RunContext) -> Result<RunSummary, BackendError>;
}

/// The backends a server offers.
#[derive(Clone, Default)]
pub struct Backends {
    pub builtin: Option<Arc<dyn Backend>>,
    /// Named external agents (`{"acp": "<name>"}`).
    pub named: HashMap<String, Arc<dyn Backend>>,
}

impl Backends {
    pub fn resolve(&self, spec: &BackendSpec) -> Result<Arc<dyn Backend>, EngineError> {
        match spec {
            BackendSpec::Builtin => self.builtin.clone().ok_or_else(|| {
                EngineError::Unprocessable("the built-in agent is not configured".into())
            }),
            BackendSpec::Acp(name) => self.named.get(name).cloned().ok_or_else(|| {
                let mut known: Vec<&str> = self.named.keys().map(String::as_str).collect();
                known.sort_unstable();
                EngineError::Unprocessable(format!(
                    "unknown agent {name:?}; configured agents: [{}]",
                    known.join(", ")
                ))
            }),
        }
    }
}

/// Everything a backend gets for one run.
pub struct RunContext {
    pub session_id: Uuid,
    pub run_id: Uuid,
    pub cwd: PathBuf,
    pub config: SessionConfig,
    pub input: RunInput,
    /// The transcript before this run's user message.
    pub history: Vec<TranscriptMessage>,
    pub handle: RunHandle,
    /// Fires on cancel and on shutdown.
    pub cancel: CancellationToken,
}

/// A backend's way back into the engine: events, transcript, steering.
pub struct RunHandle {
    pub(crate) session_id: Uuid,
    pub(crate) run_id: Uuid,
    pub(crate) log: EventLog,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) steering: mpsc::UnboundedReceiver<String>,
}

impl RunHandle {
    pub fn run_id(&self) -> Uuid {
        self.run_id
    }

    /// Appends an event to the session's log (durably) and returns its seq.
    pub async fn emit(&self, event: AgentEvent) -> Result<u64, EngineError> {
        self.log.append(self.session_id, &event).await
    }

    /// Appends a message to the transcript.
    pub async fn record(
        &self,
        role: Role,
        content: &str,
        tool_calls: &[ToolCall],
        tool_call_id: Option<&str>,
    ) -> Result<(), EngineError> {
        let tool_calls = if tool_calls.is_empty() {
            None
        } else {
            Some(
                serde_json::to_value(tool_calls)
                    .map_err(|e| EngineError::Internal(format!("encoding tool calls: {e}")))?,
            )
        };
        self.store
            .append_message(&MessageRecord {
                id: Uuid::now_v7(),
                session_id: self.session_id,
                run_id: Some(self.run_id),
                role: role.as_str().into(),
                content: content.into(),
                tool_calls,
                tool_call_id: tool_call_id.map(str::to_string),
                created_at: now_rfc3339(),
            })
            .await?;
        Ok(())
    }

    /// Whether steering messages wait to be taken.
    pub fn has_steering(&self) -> bool {
        !self.steering.is_empty()
    }

    /// Steering messages that arrived since the last call, oldest first. Each is recorded
    /// in the transcript as a user message. Call before every step.
    pub async fn take_steering(&mut self) -> Result<Vec<String>, EngineError> {
        let mut out = Vec::new();
        while let Ok(m) = self.steering.try_recv() {
            out.push(m);
        }
        for m in &out {
            self.record(Role::User, m, &[], None).await?;
        }
        Ok(out)
    }
}
