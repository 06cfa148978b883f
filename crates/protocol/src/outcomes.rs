//! How a run and its tool calls ended, typed: what surfaces branch on, never the text
//! beside it (which is for people and may be reworded).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How a run ended (`RunCompleted.stop_reason`): the stakpak server's values, so that its
/// clients decode every run's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The agent finished its turn.
    Completed,
    /// Someone cancelled the run.
    Cancelled,
    /// The run reached its most model calls (`max_turns`) or the agent's own limit.
    MaxTurns,
    /// The run ended on an error the agent reported as its stop reason.
    Error,
    /// The model or agent refused to answer.
    Refused,
}

impl StopReason {
    /// The outcome of a backend's own stop reason — the one place that reads those words:
    /// the built-in agent's (`stop`, `tool_calls`, `end_turn`, `max_tokens`, `max_turns`,
    /// `refusal`, `content_filter` …) and ACP's (`end_turn`, `max_tokens`,
    /// `max_turn_requests`, `refusal`, `cancelled`). Anything else is a finished turn.
    pub fn from_backend(reason: &str) -> Self {
        match reason {
            "cancelled" | "canceled" => Self::Cancelled,
            "max_turns" | "max_turn_requests" => Self::MaxTurns,
            "refusal" | "refused" | "content_filter" => Self::Refused,
            "error" => Self::Error,
            _ => Self::Completed,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::MaxTurns => "max_turns",
            Self::Error => "error",
            Self::Refused => "refused",
        }
    }
}

/// Read leniently: a log written before the typed outcome holds the backend's own words
/// (`end_turn`, `stop` …), read through [`StopReason::from_backend`].
impl<'de> Deserialize<'de> for StopReason {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "completed" => Self::Completed,
            other => Self::from_backend(other),
        })
    }
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a tool call was not run (`ToolRejected.cause`); the event's `reason` says it in words.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RejectionCause {
    /// A person rejected it. Also how a rejection logged before causes were recorded reads
    /// back (its `reason` says what happened).
    #[default]
    User,
    /// Nobody decided before the approval timed out.
    Timeout,
    /// The run was cancelled (or cut off) before the call ran.
    Cancelled,
    /// A new message reached the chat the approval was asked in, and the approval yielded.
    NewMessage,
    /// The server restarted, or another instance took the run over, while the call waited.
    Restart,
    /// The permission mode, auto-approve, or a surface's own rule refused it without asking.
    Policy,
    /// Running it would have gone over a spending limit.
    Budget,
}

impl RejectionCause {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::User => "user",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::NewMessage => "new_message",
            Self::Restart => "restart",
            Self::Policy => "policy",
            Self::Budget => "budget",
        }
    }
}

/// What kind of failure ended a run (`RunError.code`); `error` says it in words and
/// `retryable` whether sending again may work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunErrorCode {
    /// The model provider could not be reached, or went silent mid-reply.
    ProviderUnreachable,
    /// The provider is limiting requests (HTTP 429).
    ProviderRateLimited,
    /// The provider refused the request (bad key, unknown model, a request it rejects).
    ProviderRefused,
    /// The conversation no longer fits the model's context window.
    ContextTooLong,
    /// The provider failed while answering (a server error, a broken or cut-off stream).
    ProviderFailed,
    /// The ACP agent could not be started, exited, or broke its protocol.
    AgentFailed,
    /// The session's workspace could not be used.
    WorkspaceUnavailable,
    /// The backend lacks what it needs to run: no model configured, say.
    NotConfigured,
    /// Switchboard's database failed while the run was being recorded.
    StoreUnavailable,
    /// The run was cut off by a restart, a shutdown, or another instance taking it over.
    Interrupted,
    /// A budget would have been crossed by the next model call (`RunError.budget` names it).
    BudgetExhausted,
    /// Anything else — and every run error logged before codes were recorded.
    #[default]
    Other,
}

impl RunErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ProviderUnreachable => "provider_unreachable",
            Self::ProviderRateLimited => "provider_rate_limited",
            Self::ProviderRefused => "provider_refused",
            Self::ContextTooLong => "context_too_long",
            Self::ProviderFailed => "provider_failed",
            Self::AgentFailed => "agent_failed",
            Self::WorkspaceUnavailable => "workspace_unavailable",
            Self::NotConfigured => "not_configured",
            Self::StoreUnavailable => "store_unavailable",
            Self::Interrupted => "interrupted",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Other => "other",
        }
    }
}

impl std::fmt::Display for RunErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
