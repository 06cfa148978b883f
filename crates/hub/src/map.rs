//! Switchboard → ACP: the session's events as `session/update`s, a run's end as a stop
//! reason, the permission modes as session modes.
//!
//! [`Mapper`] is a pure state machine over one session's events in log order: it remembers
//! what it needs across events (the proposed tool calls, whether a step's reply already
//! went out as deltas), so replaying a log and following it live give the same updates.

use std::collections::{HashMap, HashSet};

use agent_client_protocol::v1::schema::{
    ContentBlock, ContentChunk, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus, ResourceLink,
    SessionMode, SessionModeState, SessionUpdate, StopReason, ToolCall, ToolCallContent,
    ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind,
};
use switchboard_protocol::{AgentEvent, FileInfo, PermissionMode};
use uuid::Uuid;

/// Longest tool result sent to the editor (the log keeps it whole).
const RESULT_CAP: usize = 8_000;

/// The session modes: Switchboard's permission modes.
pub fn modes(current: PermissionMode) -> SessionModeState {
    let all = [
        (
            PermissionMode::ReadOnly,
            "Read only",
            "The agent reads; every change asks.",
        ),
        (
            PermissionMode::WorkspaceWrite,
            "Workspace write",
            "File changes inside the workspace run; commands ask.",
        ),
        (
            PermissionMode::FullAccess,
            "Full access",
            "Nothing asks unless a rule says so.",
        ),
    ];
    SessionModeState::new(
        current.as_str(),
        all.into_iter()
            .map(|(m, name, what)| SessionMode::new(m.as_str(), name).description(what.to_owned()))
            .collect(),
    )
}

/// The permission mode a session mode id names.
pub fn mode_of(id: &str) -> Option<PermissionMode> {
    [
        PermissionMode::ReadOnly,
        PermissionMode::WorkspaceWrite,
        PermissionMode::FullAccess,
    ]
    .into_iter()
    .find(|m| m.as_str() == id)
}

/// ACP's stop reason of a `RunCompleted`: from its typed outcome, and from the backend's
/// own reason only to tell a turn cut at the token limit (ACP has a word for it).
pub fn stop_reason(outcome: switchboard_protocol::StopReason, backend: Option<&str>) -> StopReason {
    use switchboard_protocol::StopReason as S;
    match outcome {
        S::Cancelled => StopReason::Cancelled,
        S::MaxTurns => StopReason::MaxTurnRequests,
        S::Refused => StopReason::Refusal,
        S::Completed | S::Error => match backend {
            Some("max_tokens" | "length") => StopReason::MaxTokens,
            _ => StopReason::EndTurn,
        },
    }
}

/// The ACP kind of a Switchboard tool call: the ACP backend's own kind when it recorded one,
/// else by the built-in tool's name.
pub fn tool_kind(call: &switchboard_protocol::ToolCall) -> ToolKind {
    let named = call
        .metadata
        .as_ref()
        .and_then(|m| m.get("kind"))
        .and_then(|k| k.as_str())
        .unwrap_or(call.name.as_str());
    match named {
        "view" | "read" => ToolKind::Read,
        "create" | "str_replace" | "edit" => ToolKind::Edit,
        "remove" | "delete" => ToolKind::Delete,
        "move" => ToolKind::Move,
        "search" => ToolKind::Search,
        "run_command" | "execute" => ToolKind::Execute,
        "think" => ToolKind::Think,
        "fetch" => ToolKind::Fetch,
        _ => ToolKind::Other,
    }
}

/// The title of a tool call: the ACP backend's title, else its name and a short preview of
/// its arguments.
pub fn tool_title(call: &switchboard_protocol::ToolCall) -> String {
    if let Some(t) = call
        .metadata
        .as_ref()
        .and_then(|m| m.get("title"))
        .and_then(|t| t.as_str())
        .filter(|t| !t.is_empty())
    {
        return t.to_owned();
    }
    let arg = ["path", "command", "pattern", "url"]
        .iter()
        .find_map(|k| call.arguments.get(k).and_then(|v| v.as_str()));
    match arg {
        Some(a) => format!("{} {}", call.name, cap(a, 120)),
        None => call.name.clone(),
    }
}

fn cap(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &s[..end], s.len())
}

fn text(s: impl Into<String>) -> ContentChunk {
    ContentChunk::new(ContentBlock::from(s.into()))
}

/// A file as a resource link to its bytes on the server.
fn file_link(base_url: &str, session: Uuid, file: &FileInfo) -> ContentChunk {
    let uri = format!(
        "{}/v1/sessions/{session}/files/{}",
        base_url.trim_end_matches('/'),
        file.file_id
    );
    ContentChunk::new(ContentBlock::ResourceLink(
        ResourceLink::new(file.name.clone(), uri)
            .mime_type(file.mime.clone())
            .size(i64::try_from(file.size).unwrap_or(i64::MAX)),
    ))
}

/// One session's events → ACP updates.
pub struct Mapper {
    session: Uuid,
    base_url: String,
    /// Calls proposed so far, by id (for the permission request's details).
    calls: HashMap<String, switchboard_protocol::ToolCall>,
    /// Runs whose current step streamed deltas (its `TextComplete` is then not sent again).
    streamed: HashSet<Uuid>,
}

impl Mapper {
    pub fn new(session: Uuid, base_url: &str) -> Self {
        Self {
            session,
            base_url: base_url.to_owned(),
            calls: HashMap::new(),
            streamed: HashSet::new(),
        }
    }

    /// A call proposed earlier in the log.
    pub fn call(&self, id: &str) -> Option<&switchboard_protocol::ToolCall> {
        self.calls.get(id)
    }

    /// The updates of one event. `echo_prompt`: whether the run's message is shown as the
    /// user's (not for a prompt this editor sent: it has it already).
    pub fn updates(&mut self, event: &AgentEvent, echo_prompt: bool) -> Vec<SessionUpdate> {
        use SessionUpdate as U;
        match event {
            AgentEvent::RunStarted { content, .. } => match content {
                Some(c) if echo_prompt && !c.is_empty() => {
                    vec![U::UserMessageChunk(text(c.clone()))]
                }
                _ => vec![],
            },
            AgentEvent::FileAttached { file, .. } if echo_prompt => vec![U::UserMessageChunk(
                file_link(&self.base_url, self.session, file),
            )],
            AgentEvent::FileShared { file, caption, .. } => {
                let mut out = Vec::new();
                if let Some(c) = caption.as_ref().filter(|c| !c.is_empty()) {
                    out.push(U::AgentMessageChunk(text(format!("{c}\n"))));
                }
                out.push(U::AgentMessageChunk(file_link(
                    &self.base_url,
                    self.session,
                    file,
                )));
                out
            }
            AgentEvent::TextDelta { run_id, delta } => {
                self.streamed.insert(*run_id);
                vec![U::AgentMessageChunk(text(delta.clone()))]
            }
            AgentEvent::TextComplete { run_id, text: t } => {
                // A step whose reply was not streamed reaches the editor whole.
                if self.streamed.remove(run_id) || t.is_empty() {
                    vec![]
                } else {
                    vec![U::AgentMessageChunk(text(t.clone()))]
                }
            }
            AgentEvent::ThoughtDelta { delta, .. } => {
                vec![U::AgentThoughtChunk(text(delta.clone()))]
            }
            AgentEvent::PlanUpdated { entries, .. } => vec![U::Plan(Plan::new(
                entries
                    .iter()
                    .map(|e| {
                        let priority = match e.priority.as_str() {
                            "high" => PlanEntryPriority::High,
                            "low" => PlanEntryPriority::Low,
                            _ => PlanEntryPriority::Medium,
                        };
                        let status = match e.status.as_str() {
                            "in_progress" => PlanEntryStatus::InProgress,
                            "completed" => PlanEntryStatus::Completed,
                            _ => PlanEntryStatus::Pending,
                        };
                        PlanEntry::new(e.content.clone(), priority, status)
                    })
                    .collect(),
            ))],
            AgentEvent::ToolCallsProposed { tool_calls, .. } => tool_calls
                .iter()
                .map(|c| {
                    self.calls.insert(c.id.clone(), c.clone());
                    U::ToolCall(
                        ToolCall::new(c.id.clone(), tool_title(c))
                            .kind(tool_kind(c))
                            .status(ToolCallStatus::Pending)
                            .raw_input(c.arguments.clone()),
                    )
                })
                .collect(),
            AgentEvent::ToolExecutionStarted { tool_call_id, .. } => {
                vec![U::ToolCallUpdate(ToolCallUpdate::new(
                    tool_call_id.clone(),
                    ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
                ))]
            }
            AgentEvent::ToolExecutionCompleted {
                tool_call_id,
                result,
                is_error,
                ..
            } => {
                let status = if *is_error {
                    ToolCallStatus::Failed
                } else {
                    ToolCallStatus::Completed
                };
                vec![U::ToolCallUpdate(ToolCallUpdate::new(
                    tool_call_id.clone(),
                    ToolCallUpdateFields::new()
                        .status(status)
                        .content(vec![ToolCallContent::from(cap(result, RESULT_CAP))]),
                ))]
            }
            AgentEvent::ToolRejected {
                tool_call_id,
                reason,
                ..
            } => vec![U::ToolCallUpdate(ToolCallUpdate::new(
                tool_call_id.clone(),
                ToolCallUpdateFields::new()
                    .status(ToolCallStatus::Failed)
                    .content(vec![ToolCallContent::from(format!("Not run: {reason}"))]),
            ))],
            AgentEvent::SteeringReceived { content, .. } => {
                vec![U::UserMessageChunk(text(content.clone()))]
            }
            AgentEvent::Notice { message, .. } => {
                vec![U::AgentThoughtChunk(text(format!("{message}\n")))]
            }
            AgentEvent::WorkspaceChanged {
                files,
                insertions,
                deletions,
                ..
            } => vec![U::AgentThoughtChunk(text(format!(
                "\n{}\n",
                switchboard_protocol::change_summary(*files, *insertions, *deletions)
            )))],
            AgentEvent::RunCompleted { run_id, .. } | AgentEvent::RunError { run_id, .. } => {
                self.streamed.remove(run_id);
                vec![]
            }
            AgentEvent::FileAttached { .. }
            | AgentEvent::FollowUpQueued { .. }
            | AgentEvent::WaitingForToolApproval { .. }
            | AgentEvent::UsageReport { .. } => vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn call(name: &str, args: serde_json::Value) -> switchboard_protocol::ToolCall {
        switchboard_protocol::ToolCall {
            id: "c1".into(),
            name: name.into(),
            arguments: args,
            metadata: None,
        }
    }

    #[test]
    fn a_streamed_reply_is_not_sent_twice_and_an_unstreamed_one_is_sent_whole() {
        let run = Uuid::now_v7();
        let mut m = Mapper::new(Uuid::now_v7(), "http://x");
        let d = m.updates(
            &AgentEvent::TextDelta {
                run_id: run,
                delta: "he".into(),
            },
            true,
        );
        assert_eq!(d.len(), 1);
        let c = m.updates(
            &AgentEvent::TextComplete {
                run_id: run,
                text: "hello".into(),
            },
            true,
        );
        assert!(c.is_empty(), "the deltas carried it");
        let whole = m.updates(
            &AgentEvent::TextComplete {
                run_id: run,
                text: "second step".into(),
            },
            true,
        );
        let json = serde_json::to_value(&whole).unwrap();
        assert_eq!(json[0]["content"]["text"], "second step");
    }

    #[test]
    fn the_editors_own_prompt_is_not_echoed() {
        let mut m = Mapper::new(Uuid::now_v7(), "http://x");
        let ev = AgentEvent::RunStarted {
            run_id: Uuid::now_v7(),
            content: Some("hi".into()),
        };
        assert!(m.updates(&ev, false).is_empty());
        let json = serde_json::to_value(m.updates(&ev, true)).unwrap();
        assert_eq!(json[0]["sessionUpdate"], "user_message_chunk");
        assert_eq!(json[0]["content"]["text"], "hi");
    }

    #[test]
    fn tool_calls_carry_kind_title_and_outcome() {
        let mut m = Mapper::new(Uuid::now_v7(), "http://x");
        let run = Uuid::now_v7();
        let proposed = m.updates(
            &AgentEvent::ToolCallsProposed {
                run_id: run,
                tool_calls: vec![call("run_command", json!({"command": "ls -la"}))],
            },
            true,
        );
        let json = serde_json::to_value(&proposed).unwrap();
        assert_eq!(json[0]["sessionUpdate"], "tool_call");
        assert_eq!(json[0]["kind"], "execute");
        assert_eq!(json[0]["title"], "run_command ls -la");
        assert!(
            matches!(&proposed[0], SessionUpdate::ToolCall(t) if t.status == ToolCallStatus::Pending)
        );
        assert!(m.call("c1").is_some());
        let rejected = m.updates(
            &AgentEvent::ToolRejected {
                run_id: run,
                tool_call_id: "c1".into(),
                reason: "denied".into(),
                cause: switchboard_protocol::RejectionCause::User,
                decided_by: None,
            },
            true,
        );
        let json = serde_json::to_value(&rejected).unwrap();
        assert_eq!(json[0]["status"], "failed");
        assert_eq!(json[0]["content"][0]["content"]["text"], "Not run: denied");
    }

    #[test]
    fn acp_backend_kinds_and_titles_win() {
        let mut c = call("acp__edit", json!({}));
        c.metadata = Some(json!({"kind": "edit", "title": "Edit main.rs"}));
        assert_eq!(tool_kind(&c), ToolKind::Edit);
        assert_eq!(tool_title(&c), "Edit main.rs");
    }

    #[test]
    fn modes_round_trip_and_stop_reasons_map() {
        let state = modes(PermissionMode::ReadOnly);
        assert_eq!(state.available_modes.len(), 3);
        for m in &state.available_modes {
            assert_eq!(
                mode_of(&m.id.to_string()).unwrap().as_str(),
                m.id.to_string()
            );
        }
        assert!(mode_of("yolo").is_none());
        use switchboard_protocol::StopReason as S;
        assert_eq!(stop_reason(S::Cancelled, None), StopReason::Cancelled);
        assert_eq!(stop_reason(S::MaxTurns, None), StopReason::MaxTurnRequests);
        assert_eq!(
            stop_reason(S::Completed, Some("end_turn")),
            StopReason::EndTurn
        );
        assert_eq!(
            stop_reason(S::Completed, Some("length")),
            StopReason::MaxTokens
        );
        assert_eq!(
            stop_reason(S::Refused, Some("refusal")),
            StopReason::Refusal
        );
    }

    #[test]
    fn long_results_are_capped_on_a_char_boundary() {
        let s = "é".repeat(RESULT_CAP);
        let c = cap(&s, RESULT_CAP);
        assert!(c.len() < s.len());
        assert!(c.contains("bytes in all"));
    }
}
