//! One way to follow a run: [`Client::follow_run`](crate::Client::follow_run) turns a
//! session's event stream into the typed steps of one run, so that every surface (the chat
//! gateway, the scheduler, the relay, `switchboard chat`) reads the same steps and branches on
//! typed outcomes, never on event text.
//!
//! The follower inherits [`EventStream`]'s guarantees — reconnects with `Last-Event-ID`,
//! each event once, back-pressure — and adds what every follower needed on its own: events
//! of other runs are skipped, an event that does not parse is skipped (a newer server's),
//! the calls a run proposed are remembered so a wait names them, and a session deleted
//! under the run ends it as [`RunEnd::SessionGone`] instead of an error.

use std::collections::HashMap;

use futures::StreamExt;
use switchboard_protocol::{
    AgentEvent, FileInfo, PlanEntry, RejectionCause, RunErrorCode, StopReason, ToolCall, Usage,
};
use uuid::Uuid;

use crate::error::ClientError;
use crate::stream::EventStream;

/// One step of a run, with the `seq` of the event it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub seq: u64,
    pub kind: RunStep,
}

/// What happened in a run, typed.
#[derive(Debug, Clone, PartialEq)]
pub enum RunStep {
    /// The run began (`content`: the message that started it, when it was text).
    Started { content: Option<String> },
    /// A piece of the reply, to append.
    Text(String),
    /// A model step's whole text (the pieces already came as [`RunStep::Text`]).
    TextComplete(String),
    /// A piece of the agent's visible reasoning.
    Thought(String),
    /// The agent's plan, complete.
    Plan(Vec<PlanEntry>),
    /// The model asked for these calls; each is settled later (started, rejected).
    ToolsProposed(Vec<ToolCall>),
    /// The run waits for a person's decision on these calls. A call this follower did not
    /// see proposed (it started after the proposal) has its id only: an empty name and no
    /// arguments (the same in the steps below).
    ToolsWaiting(Vec<ToolCall>),
    /// An allowed call started (`decided_by`: who allowed it, when a person did).
    ToolStarted {
        call: ToolCall,
        decided_by: Option<String>,
    },
    /// A call finished.
    ToolFinished {
        call: ToolCall,
        result: String,
        is_error: bool,
    },
    /// A call was not run: `cause` for programs, `reason` for people.
    ToolRejected {
        call: ToolCall,
        cause: RejectionCause,
        reason: String,
        decided_by: Option<String>,
    },
    /// The agent shared a file.
    FileShared {
        file: FileInfo,
        caption: Option<String>,
    },
    /// The run changed the workspace (comes just before its end).
    WorkspaceChanged {
        checkpoint: String,
        files: u32,
        insertions: u64,
        deletions: u64,
    },
    /// Something the user should know that is not the reply.
    Notice(String),
    /// Tokens one provider call used.
    Usage(Usage),
    /// The run is over; the follower yields nothing after this.
    Ended(RunEnd),
}

/// How a followed run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    /// `RunCompleted`: finished, cancelled, at its turn limit, refused …
    Completed {
        stop_reason: StopReason,
        backend_stop_reason: Option<String>,
        total_turns: u32,
        total_usage: Usage,
    },
    /// `RunError`.
    Failed {
        code: RunErrorCode,
        error: String,
        retryable: bool,
    },
    /// The session was deleted (its events answer 404): the run will never end otherwise.
    SessionGone,
}

/// Follows one run; see [`Client::follow_run`](crate::Client::follow_run).
#[derive(Debug)]
pub struct RunFollower {
    events: EventStream,
    session: Uuid,
    run: Uuid,
    /// The calls the run proposed, by id.
    calls: HashMap<String, ToolCall>,
    ended: bool,
}

impl RunFollower {
    pub(crate) fn new(events: EventStream, session: Uuid, run: Uuid) -> Self {
        Self {
            events,
            session,
            run,
            calls: HashMap::new(),
            ended: false,
        }
    }

    /// The run followed.
    pub fn run_id(&self) -> Uuid {
        self.run
    }

    /// The `seq` of the newest event read, of this run or another: where to resume from.
    pub fn cursor(&self) -> u64 {
        self.events.last_event_id()
    }

    /// The next step of the run: `None` after [`RunStep::Ended`], or after the one error
    /// that ends the stream (the server refused the subscription for good, other than 404).
    ///
    /// Cancel-safe: dropping the future loses no step (it can be a `tokio::select!` branch).
    pub async fn next(&mut self) -> Option<Result<Step, ClientError>> {
        while !self.ended {
            let env = match self.events.next().await {
                Some(Ok(env)) => env,
                Some(Err(ClientError::Decode(e))) => {
                    tracing::warn!(session = %self.session, error = %e, "an event did not parse; skipped");
                    continue;
                }
                Some(Err(e)) if e.status() == Some(404) => {
                    self.ended = true;
                    return Some(Ok(Step {
                        seq: self.cursor(),
                        kind: RunStep::Ended(RunEnd::SessionGone),
                    }));
                }
                Some(Err(e)) => {
                    self.ended = true;
                    return Some(Err(e));
                }
                None => {
                    self.ended = true;
                    return None;
                }
            };
            if env.event.run_id() != self.run {
                continue;
            }
            if let Some(kind) = self.step(env.event) {
                self.ended = matches!(kind, RunStep::Ended(_));
                return Some(Ok(Step { seq: env.id, kind }));
            }
        }
        None
    }

    /// The call `id` as proposed, or a stand-in with its id only.
    fn call(&self, id: String) -> ToolCall {
        self.calls.get(&id).cloned().unwrap_or(ToolCall {
            id,
            name: String::new(),
            arguments: serde_json::Value::Null,
            metadata: None,
        })
    }

    /// The one mapping from the log's events to a run's steps.
    fn step(&mut self, event: AgentEvent) -> Option<RunStep> {
        Some(match event {
            AgentEvent::RunStarted { content, .. } => RunStep::Started { content },
            AgentEvent::TextDelta { delta, .. } => RunStep::Text(delta),
            AgentEvent::TextComplete { text, .. } => RunStep::TextComplete(text),
            AgentEvent::ThoughtDelta { delta, .. } => RunStep::Thought(delta),
            AgentEvent::PlanUpdated { entries, .. } => RunStep::Plan(entries),
            AgentEvent::ToolCallsProposed { tool_calls, .. } => {
                for c in &tool_calls {
                    self.calls.insert(c.id.clone(), c.clone());
                }
                RunStep::ToolsProposed(tool_calls)
            }
            AgentEvent::WaitingForToolApproval { tool_call_ids, .. } => {
                RunStep::ToolsWaiting(tool_call_ids.into_iter().map(|id| self.call(id)).collect())
            }
            AgentEvent::ToolExecutionStarted {
                tool_call_id,
                name,
                decided_by,
                ..
            } => {
                let mut call = self.call(tool_call_id);
                call.name = name;
                RunStep::ToolStarted { call, decided_by }
            }
            AgentEvent::ToolExecutionCompleted {
                tool_call_id,
                result,
                is_error,
                ..
            } => RunStep::ToolFinished {
                call: self.call(tool_call_id),
                result,
                is_error,
            },
            AgentEvent::ToolRejected {
                tool_call_id,
                reason,
                cause,
                decided_by,
                ..
            } => RunStep::ToolRejected {
                call: self.call(tool_call_id),
                cause,
                reason,
                decided_by,
            },
            AgentEvent::FileShared { file, caption, .. } => RunStep::FileShared { file, caption },
            AgentEvent::WorkspaceChanged {
                checkpoint,
                files,
                insertions,
                deletions,
                ..
            } => RunStep::WorkspaceChanged {
                checkpoint,
                files,
                insertions,
                deletions,
            },
            AgentEvent::Notice { message, .. } => RunStep::Notice(message),
            AgentEvent::UsageReport { usage, .. } => RunStep::Usage(usage),
            AgentEvent::RunCompleted {
                total_turns,
                total_usage,
                stop_reason,
                backend_stop_reason,
                ..
            } => RunStep::Ended(RunEnd::Completed {
                stop_reason,
                backend_stop_reason,
                total_turns,
                total_usage,
            }),
            AgentEvent::RunError {
                error,
                retryable,
                code,
                ..
            } => RunStep::Ended(RunEnd::Failed {
                code,
                error,
                retryable,
            }),
            // Attached files, queued follow-ups and steering are the sender's own input.
            AgentEvent::FileAttached { .. }
            | AgentEvent::FollowUpQueued { .. }
            | AgentEvent::SteeringReceived { .. } => return None,
        })
    }
}
