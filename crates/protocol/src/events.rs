//! The SSE envelope and the events of a session's log.
//!
//! An SSE frame looks like
//!
//! ```text
//! id: 42
//! event: text_delta
//! data: {"id":42,"session_id":"…","run_id":"…","timestamp":"2026-…Z","event":{"TextDelta":{"run_id":"…","delta":"Hel"}}}
//! ```
//!
//! `id` is the session's `seq`; `data.event` is externally tagged with the variant name in
//! PascalCase; the `event:` line carries the same name in snake_case ([`AgentEvent::kind`]).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use uuid::Uuid;

use crate::files::FileInfo;
use crate::outcomes::{RejectionCause, RunErrorCode, StopReason};
use crate::tools::ToolCall;

/// Token counts reported by a provider, and what they cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct Usage {
    /// Input tokens, those read from or written to the provider's prompt cache included.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Of `prompt_tokens`, read from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Of `prompt_tokens`, written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// What it cost in micro-dollars (docs/usage.md), summed over the calls whose cost is
    /// known; absent when none is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_microdollars: Option<u64>,
    /// Some of the calls summed have no known cost (a model without a price, a backend
    /// that reported nothing): `cost_microdollars` leaves them out.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_incomplete: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Tokens only, as a provider reports them.
    pub fn tokens(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            ..Self::default()
        }
    }

    pub fn add(&mut self, other: &Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
        self.total_tokens += other.total_tokens;
        self.cache_read_tokens += other.cache_read_tokens;
        self.cache_write_tokens += other.cache_write_tokens;
        self.cost_microdollars = match (self.cost_microdollars, other.cost_microdollars) {
            (None, None) => None,
            (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
        };
        self.cost_incomplete |= other.cost_incomplete;
    }
}

/// One step of an agent's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PlanEntry {
    pub content: String,
    /// `high`, `medium` or `low`.
    pub priority: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
}

/// Something that happened in a session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub enum AgentEvent {
    /// A run began. `content` is the user's message that started it (absent in logs
    /// written before it was added), so a client can render a transcript from events alone.
    RunStarted {
        run_id: Uuid,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
    },
    /// A file attached to the message that started the run (one event per file, right
    /// after `RunStarted`).
    FileAttached { run_id: Uuid, file: FileInfo },
    /// The agent shared a file with the user (stored as a file of the session); surfaces
    /// deliver it (a chat as a document or photo, the console as a download).
    FileShared {
        run_id: Uuid,
        file: FileInfo,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        caption: Option<String>,
    },
    /// A follow-up was stored; it starts a run when the active one ends.
    FollowUpQueued { run_id: Uuid, content: String },
    /// A piece of the assistant's reply. Pieces the model streamed close together may be
    /// stored as one `TextDelta` (their text concatenated, in order): concatenating a run's
    /// deltas gives the reply, however they were cut.
    TextDelta { run_id: Uuid, delta: String },
    /// The assistant's reply of one step, complete.
    TextComplete { run_id: Uuid, text: String },
    /// The agent proposes tool calls.
    ToolCallsProposed {
        run_id: Uuid,
        tool_calls: Vec<ToolCall>,
    },
    /// The run waits for decisions on these calls.
    WaitingForToolApproval {
        run_id: Uuid,
        tool_call_ids: Vec<String>,
    },
    /// A tool started running.
    ToolExecutionStarted {
        run_id: Uuid,
        tool_call_id: String,
        name: String,
        /// Who allowed it, when a person did and said who (`ToolDecision::by`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decided_by: Option<String>,
    },
    /// A tool finished.
    ToolExecutionCompleted {
        run_id: Uuid,
        tool_call_id: String,
        result: String,
        is_error: bool,
    },
    /// A tool call was rejected (by a person, a policy or a timeout): `cause` says which,
    /// for programs; `reason` says it in words, for people.
    ToolRejected {
        run_id: Uuid,
        tool_call_id: String,
        reason: String,
        /// Why it was not run. Read as `user` in logs written before it was recorded.
        #[serde(default)]
        cause: RejectionCause,
        /// Who rejected it, when a person did and said who (`ToolDecision::by`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decided_by: Option<String>,
    },
    /// A steering message reached the agent.
    SteeringReceived { run_id: Uuid, content: String },
    /// A piece of the agent's visible reasoning (not part of the reply text); merged like
    /// `TextDelta`.
    ThoughtDelta { run_id: Uuid, delta: String },
    /// The agent's plan, complete each time (entries replace the previous plan).
    PlanUpdated {
        run_id: Uuid,
        entries: Vec<PlanEntry>,
    },
    /// Something the user should know about the run that is not the agent's reply (e.g. "the
    /// agent could not resume its session; a new one was started").
    Notice { run_id: Uuid, message: String },
    /// The run changed the session's workspace: `checkpoint` is the state it left (restore
    /// its parent to undo the run), with the count of files changed and of lines added and
    /// removed. Comes just before the run's terminal event, only when files changed.
    WorkspaceChanged {
        run_id: Uuid,
        checkpoint: String,
        files: u32,
        insertions: u64,
        deletions: u64,
    },
    /// Tokens used by one provider call.
    UsageReport { run_id: Uuid, usage: Usage },
    /// The run ended normally, or was cancelled (`stop_reason: "cancelled"`).
    RunCompleted {
        run_id: Uuid,
        total_turns: u32,
        total_usage: Usage,
        /// How the run ended, in the stakpak server's words: what clients branch on.
        stop_reason: StopReason,
        /// The backend's own reason, for people and logs: the model's (`stop`,
        /// `tool_calls`, `end_turn`, `max_tokens` …) or the ACP agent's (`end_turn`,
        /// `refusal` …). Absent on a cancelled run and in logs written before it was added.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backend_stop_reason: Option<String>,
    },
    /// The run ended with an error: `code` says what kind, for programs; `error` says it in
    /// words, for people; `retryable` says whether sending again may work.
    RunError {
        run_id: Uuid,
        error: String,
        retryable: bool,
        /// Read as `other` in logs written before it was recorded.
        #[serde(default)]
        code: RunErrorCode,
        /// With `budget_exhausted`: the budget, and when it resets.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget: Option<crate::usage::BudgetHit>,
    },
}

impl AgentEvent {
    /// The snake_case name used on the SSE `event:` line and in the store.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::RunStarted { .. } => "run_started",
            Self::FileAttached { .. } => "file_attached",
            Self::FileShared { .. } => "file_shared",
            Self::WorkspaceChanged { .. } => "workspace_changed",
            Self::FollowUpQueued { .. } => "follow_up_queued",
            Self::TextDelta { .. } => "text_delta",
            Self::TextComplete { .. } => "text_complete",
            Self::ToolCallsProposed { .. } => "tool_calls_proposed",
            Self::WaitingForToolApproval { .. } => "waiting_for_tool_approval",
            Self::ToolExecutionStarted { .. } => "tool_execution_started",
            Self::ToolExecutionCompleted { .. } => "tool_execution_completed",
            Self::ToolRejected { .. } => "tool_rejected",
            Self::SteeringReceived { .. } => "steering_received",
            Self::ThoughtDelta { .. } => "thought_delta",
            Self::PlanUpdated { .. } => "plan_updated",
            Self::Notice { .. } => "notice",
            Self::UsageReport { .. } => "usage_report",
            Self::RunCompleted { .. } => "run_completed",
            Self::RunError { .. } => "run_error",
        }
    }

    /// The run the event belongs to.
    pub fn run_id(&self) -> Uuid {
        match self {
            Self::RunStarted { run_id, .. }
            | Self::FileAttached { run_id, .. }
            | Self::FileShared { run_id, .. }
            | Self::FollowUpQueued { run_id, .. }
            | Self::TextDelta { run_id, .. }
            | Self::TextComplete { run_id, .. }
            | Self::ToolCallsProposed { run_id, .. }
            | Self::WaitingForToolApproval { run_id, .. }
            | Self::ToolExecutionStarted { run_id, .. }
            | Self::ToolExecutionCompleted { run_id, .. }
            | Self::ToolRejected { run_id, .. }
            | Self::SteeringReceived { run_id, .. }
            | Self::ThoughtDelta { run_id, .. }
            | Self::PlanUpdated { run_id, .. }
            | Self::Notice { run_id, .. }
            | Self::WorkspaceChanged { run_id, .. }
            | Self::UsageReport { run_id, .. }
            | Self::RunCompleted { run_id, .. }
            | Self::RunError { run_id, .. } => *run_id,
        }
    }

    /// Whether the event ends its run.
    pub fn is_terminal(&self) -> bool {
        matches!(self, Self::RunCompleted { .. } | Self::RunError { .. })
    }
}

/// One Server-Sent Events frame as a client's parser sees it: `data` is JSON (an
/// [`EventEnvelope`] on the session event stream, an `OutcomeEvent` on the relay's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SseFrame {
    /// The `seq` of the event (absent on a `gap_detected` frame).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The event's type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    pub data: String,
}

/// The `data:` of an SSE frame.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventEnvelope {
    /// The session's `seq` of this event; also the SSE `id:`.
    pub id: u64,
    pub session_id: Uuid,
    pub run_id: Option<Uuid>,
    pub timestamp: DateTime<Utc>,
    pub event: AgentEvent,
}

/// Control frame (`event: gap_detected`, no `id:`) sent first when a client asks for events
/// older than the retention window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GapDetected {
    pub requested_after_id: u64,
    pub oldest_available_id: u64,
    pub newest_available_id: u64,
}

/// SSE `event:` name of the [`GapDetected`] control frame.
pub const GAP_DETECTED_EVENT: &str = "gap_detected";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn externally_tagged_pascal_case() {
        let run_id = Uuid::nil();
        let ev = AgentEvent::TextDelta {
            run_id,
            delta: "Hel".into(),
        };
        let v = serde_json::to_value(&ev).unwrap();
        assert_eq!(v["TextDelta"]["delta"], "Hel");
        assert_eq!(ev.kind(), "text_delta");
        let back: AgentEvent = serde_json::from_value(v).unwrap();
        assert_eq!(back, ev);
    }

    #[test]
    fn envelope_round_trip() {
        let env = EventEnvelope {
            id: 42,
            session_id: Uuid::nil(),
            run_id: Some(Uuid::nil()),
            timestamp: Utc::now(),
            event: AgentEvent::RunError {
                run_id: Uuid::nil(),
                error: "x".into(),
                retryable: true,
                code: RunErrorCode::Other,
                budget: None,
            },
        };
        let s = serde_json::to_string(&env).unwrap();
        let back: EventEnvelope = serde_json::from_str(&s).unwrap();
        assert_eq!(back, env);
    }
}
