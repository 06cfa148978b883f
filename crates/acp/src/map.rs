//! ACP → Switchboard: session updates to events and transcript, permission requests to
//! approvals, decisions to permission outcomes.

use std::collections::{HashMap, HashSet};

use agent_client_protocol::v1::schema::*;
use serde_json::{Value, json};
use switchboard_engine::{Decision, EngineError, RunHandle, ToolClass};
use switchboard_protocol::{AgentEvent, PlanEntry, Role};
use uuid::Uuid;

/// Longest tool result kept in an event or the transcript.
const RESULT_CAP: usize = 30_000;

/// The state of one prompt turn: the reply so far and the tool calls seen.
pub(crate) struct Turn {
    run_id: Uuid,
    /// Reply text not yet recorded in the transcript.
    pending_text: String,
    /// Reply text of the whole turn (for `TextComplete`).
    full_text: String,
    kinds: HashMap<String, ToolKind>,
    titles: HashMap<String, String>,
    inputs: HashMap<String, Value>,
    /// Ids of calls whose permission was refused: the agent's "failed" update for them is
    /// not an execution.
    rejected: HashSet<String>,
    started: HashSet<String>,
    finished: HashSet<String>,
    /// The agent's paths of each call.
    locations: HashMap<String, Vec<std::path::PathBuf>>,
    /// The session's cumulative cost (amount, currency) as the agent's last `usage_update`
    /// in this turn gave it.
    pub(crate) cost: Option<(f64, String)>,
    /// The agent's questions (elicitations) asked in this turn.
    questions: u32,
}

impl Turn {
    pub fn new(run_id: Uuid) -> Self {
        Self {
            run_id,
            pending_text: String::new(),
            full_text: String::new(),
            kinds: HashMap::new(),
            titles: HashMap::new(),
            inputs: HashMap::new(),
            rejected: HashSet::new(),
            started: HashSet::new(),
            finished: HashSet::new(),
            locations: HashMap::new(),
            cost: None,
            questions: 0,
        }
    }

    /// A public id for the turn's next question (its own, apart from the agent's call ids).
    pub fn question_id(&mut self) -> String {
        self.questions += 1;
        self.public_id(&format!("elicitation-{}", self.questions))
    }

    /// The question `call` was answered `answer` (`is_error`: the answer could not be
    /// given): recorded as a call that ran, after the reply so far, so the transcript keeps
    /// the order things happened in.
    pub async fn answered(
        &mut self,
        handle: &RunHandle,
        call: &switchboard_protocol::ToolCall,
        answer: &str,
        is_error: bool,
    ) -> Result<(), EngineError> {
        self.flush_text(handle, std::slice::from_ref(call)).await?;
        handle.tool_started(call).await?;
        handle.tool_finished(call, answer, is_error).await
    }

    /// The question `call` was declined or left unanswered (`decision` says why).
    pub async fn not_answered(
        &mut self,
        handle: &RunHandle,
        call: &switchboard_protocol::ToolCall,
        decision: &Decision,
    ) -> Result<(), EngineError> {
        self.flush_text(handle, std::slice::from_ref(call)).await?;
        handle.tool_not_run(call, decision).await.map(|_| ())
    }

    /// The call's id as Switchboard shows it: ACP ids are unique only within one ACP
    /// session (a respawned agent counts again from 1), so they are scoped to the run.
    fn public_id(&self, id: &str) -> String {
        let run = self.run_id.simple().to_string();
        format!("{}-{id}", &run[run.len() - 8..])
    }

    /// The permission for this call was refused.
    pub fn rejected(&mut self, public_id: &str) {
        let prefix = self.public_id("");
        let id = public_id.strip_prefix(&prefix).unwrap_or(public_id);
        self.rejected.insert(id.to_string());
    }

    fn remember(
        &mut self,
        id: &str,
        title: Option<&str>,
        kind: Option<ToolKind>,
        input: Option<&Value>,
    ) {
        if let Some(t) = title.filter(|t| !t.is_empty()) {
            self.titles.insert(id.to_string(), t.to_string());
        }
        if let Some(k) = kind {
            self.kinds.insert(id.to_string(), k);
        }
        if let Some(i) = input {
            self.inputs.insert(id.to_string(), i.clone());
        }
    }

    /// The call as Switchboard shows it. Its `name` is `acp__<kind>` (`acp__execute`,
    /// `acp__edit` …): stable, so `auto_approve` can list `execute`; the agent's free-text
    /// title is only shown, never matched.
    fn protocol_call(&self, id: &str) -> switchboard_protocol::ToolCall {
        let title = self
            .titles
            .get(id)
            .cloned()
            .unwrap_or_else(|| id.to_string());
        let kind_name = self
            .kinds
            .get(id)
            .map(snake)
            .filter(|k| !k.is_empty())
            .unwrap_or_else(|| "other".into());
        let mut metadata = json!({
            "preview": format!("{kind_name}: {title}"),
            "kind": kind_name,
            "title": title,
        });
        if let Some(locs) = self.locations.get(id).filter(|l| !l.is_empty()) {
            metadata["locations"] = locs
                .iter()
                .map(|p| json!(p.display().to_string()))
                .collect();
        }
        switchboard_protocol::ToolCall {
            id: self.public_id(id),
            name: format!("acp__{kind_name}"),
            arguments: self.inputs.get(id).cloned().unwrap_or_else(|| json!({})),
            metadata: Some(metadata),
        }
    }

    /// Records reply text so far as an assistant message (before a tool call, so the
    /// transcript keeps the order things happened in).
    async fn flush_text(
        &mut self,
        handle: &RunHandle,
        calls: &[switchboard_protocol::ToolCall],
    ) -> Result<(), EngineError> {
        if self.pending_text.is_empty() && calls.is_empty() {
            return Ok(());
        }
        let text = std::mem::take(&mut self.pending_text);
        handle.record(Role::Assistant, &text, calls, None).await
    }

    async fn start(&mut self, handle: &RunHandle, id: &str) -> Result<(), EngineError> {
        if !self.started.insert(id.to_string()) {
            return Ok(());
        }
        let call = self.protocol_call(id);
        self.flush_text(handle, std::slice::from_ref(&call)).await?;
        handle.tool_started(&call).await
    }

    async fn complete(
        &mut self,
        handle: &RunHandle,
        id: &str,
        result: String,
        failed: bool,
    ) -> Result<(), EngineError> {
        if self.rejected.contains(id) {
            // Announced by `ToolRejected`; it never ran.
            return Ok(());
        }
        self.start(handle, id).await?;
        if !self.finished.insert(id.to_string()) {
            return Ok(());
        }
        let call = self.protocol_call(id);
        handle.tool_finished(&call, &cap(result), failed).await
    }

    /// Maps one `session/update`.
    pub async fn update(
        &mut self,
        handle: &RunHandle,
        update: SessionUpdate,
    ) -> Result<(), EngineError> {
        let run_id = self.run_id;
        match update {
            SessionUpdate::AgentMessageChunk(chunk) => {
                if let Some(delta) = text_of(&chunk.content).filter(|d| !d.is_empty()) {
                    self.pending_text.push_str(&delta);
                    self.full_text.push_str(&delta);
                    handle.stream_text(delta).await?;
                }
            }
            SessionUpdate::AgentThoughtChunk(chunk) => {
                if let Some(delta) = text_of(&chunk.content).filter(|d| !d.is_empty()) {
                    handle.stream_thought(delta).await?;
                }
            }
            SessionUpdate::Plan(plan) => {
                let entries = plan
                    .entries
                    .iter()
                    .map(|e| PlanEntry {
                        content: e.content.clone(),
                        priority: snake(&e.priority),
                        status: snake(&e.status),
                    })
                    .collect();
                handle
                    .emit(AgentEvent::PlanUpdated { run_id, entries })
                    .await?;
            }
            SessionUpdate::ToolCall(tc) => {
                let id = tc.tool_call_id.to_string();
                self.remember(&id, Some(&tc.title), Some(tc.kind), tc.raw_input.as_ref());
                self.remember_locations(&id, &tc.locations);
                match tc.status {
                    ToolCallStatus::Completed | ToolCallStatus::Failed => {
                        let failed = tc.status == ToolCallStatus::Failed;
                        let result = result_text(Some(&tc.content), tc.raw_output.as_ref());
                        self.complete(handle, &id, result, failed).await?;
                    }
                    // A pending call may still wait for permission: it starts when the
                    // agent says it runs (or completes).
                    ToolCallStatus::InProgress => self.start(handle, &id).await?,
                    _ => {}
                }
            }
            SessionUpdate::ToolCallUpdate(u) => {
                let id = u.tool_call_id.to_string();
                let f = &u.fields;
                self.remember(&id, f.title.as_deref(), f.kind, f.raw_input.as_ref());
                if let Some(l) = &f.locations {
                    self.remember_locations(&id, l);
                }
                match f.status {
                    Some(ToolCallStatus::Completed) | Some(ToolCallStatus::Failed) => {
                        let failed = f.status == Some(ToolCallStatus::Failed);
                        let result = result_text(f.content.as_ref(), f.raw_output.as_ref());
                        self.complete(handle, &id, result, failed).await?;
                    }
                    Some(ToolCallStatus::InProgress) => self.start(handle, &id).await?,
                    _ => {}
                }
            }
            SessionUpdate::UsageUpdate(u) => {
                if let Some(c) = u.cost {
                    self.cost = Some((c.amount, c.currency));
                }
            }
            // Echoes of our own prompt, command lists, modes …: nothing to show.
            _ => {}
        }
        Ok(())
    }

    fn remember_locations(&mut self, id: &str, locations: &[ToolCallLocation]) {
        if !locations.is_empty() {
            self.locations.insert(
                id.to_string(),
                locations.iter().map(|l| l.path.clone()).collect(),
            );
        }
    }

    /// The approval to ask for a permission request, with what we know of the call, and its
    /// class (a read or write counts as one only inside the workspace `cwd`).
    pub fn permission_call(
        &mut self,
        req: &RequestPermissionRequest,
        cwd: &std::path::Path,
        mode: switchboard_protocol::PermissionMode,
    ) -> (switchboard_protocol::ToolCall, ToolClass) {
        let id = req.tool_call.tool_call_id.to_string();
        let f = &req.tool_call.fields;
        self.remember(&id, f.title.as_deref(), f.kind, f.raw_input.as_ref());
        if let Some(l) = &f.locations {
            self.remember_locations(&id, l);
        }
        let mut call = self.protocol_call(&id);
        let only_always = !req
            .options
            .iter()
            .any(|o| o.kind == PermissionOptionKind::AllowOnce)
            && req
                .options
                .iter()
                .any(|o| o.kind == PermissionOptionKind::AllowAlways);
        if let Some(meta) = call.metadata.as_mut() {
            meta["options"] = req
                .options
                .iter()
                .map(|o| json!({"id": o.option_id.to_string(), "name": o.name, "kind": snake(&o.kind)}))
                .collect();
            if only_always {
                // Accepting answers "always allow": the agent stops asking for such calls.
                let p = meta["preview"].as_str().unwrap_or_default().to_string();
                meta["preview"] = json!(format!(
                    "{p} [accepting allows it for the rest of the agent's session]"
                ));
            }
        }
        let inside = inside_workspace(self.locations.get(&id), cwd);
        (
            call,
            crate::tool_class(self.kinds.get(&id).copied(), inside, mode),
        )
    }

    /// The end of the turn: calls that started but never finished are closed (cut off by a
    /// cancel or a crash), the rest of the reply goes into the transcript, `TextComplete`.
    pub async fn finish(&mut self, handle: &RunHandle) -> Result<(), EngineError> {
        let open: Vec<String> = self
            .started
            .iter()
            .filter(|id| !self.finished.contains(*id))
            .cloned()
            .collect();
        for id in open {
            self.complete(
                handle,
                &id,
                "the turn ended before this call finished".into(),
                true,
            )
            .await?;
        }
        self.flush_text(handle, &[]).await?;
        if !self.full_text.is_empty() {
            let text = std::mem::take(&mut self.full_text);
            handle
                .emit(AgentEvent::TextComplete {
                    run_id: self.run_id,
                    text,
                })
                .await?;
        }
        Ok(())
    }
}

fn snake<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

fn text_of(block: &ContentBlock) -> Option<String> {
    match block {
        ContentBlock::Text(t) => Some(t.text.clone()),
        _ => None,
    }
}

fn cap(s: String) -> String {
    if s.chars().count() <= RESULT_CAP {
        return s;
    }
    let kept: String = s.chars().take(RESULT_CAP).collect();
    format!(
        "{kept}\n[… {} more characters not shown]",
        s.chars().count() - RESULT_CAP
    )
}

/// A readable result from a tool call's content (text, diffs, terminals) or raw output.
fn result_text(content: Option<&Vec<ToolCallContent>>, raw: Option<&Value>) -> String {
    let mut parts = Vec::new();
    for c in content.into_iter().flatten() {
        match c {
            ToolCallContent::Content(c) => {
                if let Some(t) = text_of(&c.content) {
                    parts.push(t);
                }
            }
            ToolCallContent::Diff(d) => {
                parts.push(format!("edited {}", d.path.display()));
            }
            ToolCallContent::Terminal(_) => parts.push("(terminal output)".into()),
            _ => {}
        }
    }
    if parts.is_empty()
        && let Some(raw) = raw
    {
        parts.push(match raw {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    parts.join("\n")
}

/// The turn's stop reason in snake_case (`end_turn`, `max_tokens`, `max_turn_requests`,
/// `refusal`, `cancelled`).
pub(crate) fn stop_reason(r: StopReason) -> String {
    let s = snake(&r);
    if s.is_empty() { "end_turn".into() } else { s }
}

/// The agent's option for a decision: accept → `allow_once` (else `allow_always`); reject
/// → `reject_once` (else `reject_always`); a custom result cannot be handed to an ACP agent,
/// so it rejects. Without a fitting option, the request is answered `cancelled`.
pub(crate) fn outcome(
    decision: &Decision,
    options: &[PermissionOption],
) -> RequestPermissionOutcome {
    let prefer: &[PermissionOptionKind] = match decision {
        Decision::Run => &[
            PermissionOptionKind::AllowOnce,
            PermissionOptionKind::AllowAlways,
        ],
        Decision::Rejected(..) | Decision::Custom(_) => &[
            PermissionOptionKind::RejectOnce,
            PermissionOptionKind::RejectAlways,
        ],
    };
    for kind in prefer {
        if let Some(o) = options.iter().find(|o| o.kind == *kind) {
            return RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                o.option_id.clone(),
            ));
        }
    }
    RequestPermissionOutcome::Cancelled
}

/// Whether every location is inside the workspace (false without locations: unknown).
fn inside_workspace(locations: Option<&Vec<std::path::PathBuf>>, cwd: &std::path::Path) -> bool {
    let Some(locs) = locations.filter(|l| !l.is_empty()) else {
        return false;
    };
    let root = std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.to_path_buf());
    locs.iter().all(|p| {
        let abs = if p.is_absolute() {
            p.clone()
        } else {
            root.join(p)
        };
        // The deepest existing ancestor, resolved (symlinks followed), must be inside; the
        // rest may not climb out.
        let mut existing = abs.as_path();
        let mut rest = Vec::new();
        while !existing.exists() {
            match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_owned());
                    existing = parent;
                }
                _ => return false,
            }
        }
        let Ok(real) = std::fs::canonicalize(existing) else {
            return false;
        };
        real.starts_with(&root)
            && !abs
                .components()
                .any(|c| c == std::path::Component::ParentDir)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchboard_protocol::RejectionCause;

    fn opts(kinds: &[(&'static str, PermissionOptionKind)]) -> Vec<PermissionOption> {
        kinds
            .iter()
            .map(|(id, k)| PermissionOption::new(*id, *id, *k))
            .collect()
    }

    fn selected(o: RequestPermissionOutcome) -> Option<String> {
        match o {
            RequestPermissionOutcome::Selected(s) => Some(s.option_id.to_string()),
            _ => None,
        }
    }

    #[test]
    fn decisions_pick_the_closest_offered_option() {
        let all = opts(&[
            ("ao", PermissionOptionKind::AllowOnce),
            ("aa", PermissionOptionKind::AllowAlways),
            ("ro", PermissionOptionKind::RejectOnce),
            ("ra", PermissionOptionKind::RejectAlways),
        ]);
        assert_eq!(
            selected(outcome(&Decision::Run, &all)).as_deref(),
            Some("ao")
        );
        assert_eq!(
            selected(outcome(
                &Decision::Rejected(RejectionCause::User, "no".into()),
                &all
            ))
            .as_deref(),
            Some("ro")
        );
        let always = opts(&[
            ("aa", PermissionOptionKind::AllowAlways),
            ("ra", PermissionOptionKind::RejectAlways),
        ]);
        assert_eq!(
            selected(outcome(&Decision::Run, &always)).as_deref(),
            Some("aa")
        );
        assert_eq!(
            selected(outcome(&Decision::Custom("x".into()), &always)).as_deref(),
            Some("ra")
        );
        let allow_only = opts(&[("ao", PermissionOptionKind::AllowOnce)]);
        assert_eq!(
            selected(outcome(
                &Decision::Rejected(RejectionCause::User, "no".into()),
                &allow_only
            )),
            None
        );
    }

    #[test]
    fn locations_must_all_be_inside_the_workspace() {
        let ws = tempfile::tempdir().unwrap();
        let inside = vec![ws.path().join("a.txt"), ws.path().join("new/dir/b.txt")];
        assert!(inside_workspace(Some(&inside), ws.path()));
        let outside = vec![
            ws.path().join("a.txt"),
            std::path::PathBuf::from("/etc/hosts"),
        ];
        assert!(!inside_workspace(Some(&outside), ws.path()));
        let climbing = vec![ws.path().join("x/../../etc")];
        assert!(!inside_workspace(Some(&climbing), ws.path()));
        assert!(!inside_workspace(None, ws.path()));
        assert!(!inside_workspace(Some(&vec![]), ws.path()));
    }

    #[test]
    fn stop_reasons_are_snake_case() {
        assert_eq!(stop_reason(StopReason::EndTurn), "end_turn");
        assert_eq!(
            stop_reason(StopReason::MaxTurnRequests),
            "max_turn_requests"
        );
        assert_eq!(stop_reason(StopReason::Cancelled), "cancelled");
    }

    #[test]
    fn results_read_text_diffs_and_raw_output() {
        let content = vec![
            ToolCallContent::Content(Content::new(ContentBlock::from("line"))),
            ToolCallContent::Diff(Diff::new("src/a.rs", "new")),
        ];
        assert_eq!(result_text(Some(&content), None), "line\nedited src/a.rs");
        assert_eq!(
            result_text(None, Some(&json!({"ok": true}))),
            "{\"ok\":true}"
        );
        let capped = cap("x".repeat(RESULT_CAP + 5));
        assert!(
            capped.starts_with(&"x".repeat(RESULT_CAP)),
            "keeps the head"
        );
        assert!(
            capped.ends_with("\n[… 5 more characters not shown]"),
            "{}",
            &capped[RESULT_CAP..]
        );
        assert_eq!(cap("short".into()), "short");
    }
}
