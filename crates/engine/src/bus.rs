//! The event bus: how committed events reach the other instances that share the store.
//!
//! With one instance there is no bus and live fan-out stays in-process. With several, each
//! instance hands every committed batch to the bus, and batches from the others are
//! injected into its own live channels ([`crate::EventLog::inject`]). The bus is a fast
//! path only: the store stays the truth, a subscription that sees a gap (or hears nothing
//! for a while) reads the store, so a lost or reordered message costs latency, never an
//! event.

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use switchboard_protocol::{
    Checkpoint, DiffQuery, DiffStat, ErrorCode, PendingToolsResponse, RestoreResponse,
    ShareFileRequest, SharedFile, ToolDecisionsRequest, ToolDecisionsResponse,
};
use uuid::Uuid;

use crate::LogEvent;

/// What can be done to a running run: steer it, cancel it, decide its pending tool calls,
/// ask which are pending, or share a file from it; and the session's workspace checkpoints. A run's steering channel, cancel token and pending approval
/// live in the memory of the instance that executes it, so one function applies a
/// `RunControl` there (`Engine::apply_local`), for the API call that reached that instance
/// and for the one another instance forwarded over the bus.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum RunControl {
    Steer {
        session_id: Uuid,
        run_id: Option<Uuid>,
        content: String,
    },
    Cancel {
        session_id: Uuid,
        run_id: Uuid,
    },
    Decide {
        session_id: Uuid,
        request: ToolDecisionsRequest,
    },
    Pending {
        session_id: Uuid,
    },
    /// Share a file of the workspace from the run (the workspace is on the machine that
    /// executes it).
    Share {
        session_id: Uuid,
        request: ShareFileRequest,
    },
    /// The session's workspace checkpoints: on the instance whose machine has the workspace
    /// (the one that ran the session last), whether or not a run is going on.
    Checkpoints {
        session_id: Uuid,
    },
    Diff {
        session_id: Uuid,
        query: DiffQuery,
    },
    Restore {
        session_id: Uuid,
        checkpoint: String,
    },
    /// The session's `auto_approve` changed: the run under way applies it from its next
    /// tool call (unless the run has its own override).
    AutoApprove {
        session_id: Uuid,
        auto_approve: switchboard_protocol::AutoApprove,
    },
}

/// The owner's answer to a [`RunControl`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum ControlReply {
    Steered {
        run_id: Uuid,
    },
    Cancelled,
    /// The run under way took the new `auto_approve` (or has its own override).
    AutoApproveSet,
    Decided {
        response: ToolDecisionsResponse,
    },
    Pending {
        response: PendingToolsResponse,
    },
    Shared {
        response: SharedFile,
    },
    Checkpoints {
        checkpoints: Vec<Checkpoint>,
    },
    /// A diff: the unified text, or (`stat=1`) the counts.
    Diff {
        text: Option<String>,
        stat: Option<DiffStat>,
    },
    Restored {
        response: RestoreResponse,
    },
    /// The owner refused: the same code and message it would have answered itself.
    Error {
        code: ErrorCode,
        message: String,
    },
}

/// Carries committed batches to the other instances.
pub trait EventBus: Send + Sync + 'static {
    /// Hands over a committed batch of one session. Must not block: an implementation
    /// queues it and may drop it when it cannot keep up (subscribers catch up from the
    /// store).
    fn publish(&self, session_id: Uuid, events: &[LogEvent]);
    /// `nats`, …
    fn kind(&self) -> &'static str;
    /// Whether the bus is connected now.
    fn connected(&self) -> bool;
    /// Sends a control request to `instance` and waits (bounded) for its reply. `Err` with a
    /// reason when the instance cannot be reached.
    fn control<'a>(
        &'a self,
        instance: &'a str,
        request: RunControl,
    ) -> BoxFuture<'a, Result<ControlReply, String>>;
}
