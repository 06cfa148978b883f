//! Tool-call policy and approval gates.
//!
//! A backend hands each model step's proposed calls to [`crate::RunHandle::gate`] with the
//! [`ToolClass`] of each. Policy (the session's permission mode and `auto_approve`) settles
//! what it can; the rest wait as one pending approval that a human answers over the API, that
//! times out, or that a cancel or a restart rejects.

use parking_lot::Mutex as SyncMutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use switchboard_protocol::{
    AgentEvent, AutoApprove, AutoApproveKeyword, DecisionAction, PermissionMode, RejectionCause,
    ToolCall, ToolDecision,
};
use switchboard_store::{ApprovalRecord, Lease, Store};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::EngineError;
use crate::log::EventLog;

/// What a tool does, for the permission modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolClass {
    /// Only reads (view, search).
    Read,
    /// Changes files (create, edit, remove).
    Write,
    /// Runs programs.
    Execute,
    /// Anything else (fetch, MCP tools, unknown ACP kinds).
    Other,
    /// A question for a person (an agent's elicitation: a form to fill, a page to visit):
    /// policy cannot answer it, so it is asked in every mode, whatever `auto_approve` says.
    Question,
}

/// What policy says about one call before anybody is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Allow,
    Deny(String),
    Ask,
}

/// Whether a call named `name` is listed by `auto_approve`: an exact match, or, for a call
/// whose name carries an MCP prefix (`server__tool`), a listed `tool` (the part after the
/// last `__`). A listed prefixed name never matches an unprefixed call, so
/// `github__run_command` cannot approve the built-in `run_command`.
pub fn auto_approved(auto: &AutoApprove, name: &str) -> bool {
    match auto {
        AutoApprove::Keyword(k) => *k == AutoApproveKeyword::All,
        AutoApprove::Tools(list) => {
            let bare = name.rsplit_once("__").map(|(_, t)| t);
            list.iter().any(|t| t == name || Some(t.as_str()) == bare)
        }
    }
}

/// Settles a call by the session's mode and `auto_approve`.
///
/// - `read-only`: reads run; writes and commands are refused; anything else asks.
/// - `workspace-write`: reads and (confined) writes run; commands and anything else ask.
/// - `full-access`: everything runs.
///
/// `auto_approve` turns an *ask* into *allow*; it never overrides a refusal by the mode.
/// A [`ToolClass::Question`] is asked in every mode.
pub fn settle(mode: PermissionMode, auto: &AutoApprove, name: &str, class: ToolClass) -> Verdict {
    let by_mode = match (mode, class) {
        (_, ToolClass::Question) => return Verdict::Ask,
        (PermissionMode::FullAccess, _) => Verdict::Allow,
        (_, ToolClass::Read) => Verdict::Allow,
        (PermissionMode::ReadOnly, ToolClass::Write | ToolClass::Execute) => Verdict::Deny(
            format!("the session is read-only: {name} is not allowed (permission mode read-only)"),
        ),
        (PermissionMode::WorkspaceWrite, ToolClass::Write) => Verdict::Allow,
        _ => Verdict::Ask,
    };
    match by_mode {
        Verdict::Ask if auto_approved(auto, name) => Verdict::Allow,
        v => v,
    }
}

/// What became of one proposed call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Run it.
    Run,
    /// Do not run it; tell the model why (`ToolRejected.cause`, `reason`).
    Rejected(RejectionCause, String),
    /// Do not run it; give the model this as the tool's result.
    Custom(String),
}

/// An approval waiting for decisions, in memory.
struct Waiting {
    run_id: Uuid,
    calls: Vec<ToolCall>,
    decided: HashMap<String, ToolDecision>,
    done: Option<oneshot::Sender<HashMap<String, ToolDecision>>>,
}

/// The approvals waiting in this process, one per session at most.
#[derive(Default)]
pub(crate) struct Approvals {
    waiting: SyncMutex<HashMap<Uuid, Waiting>>,
    /// Per session, the active run's calls already settled — by policy before anyone was
    /// asked, or by a decision — and how: a decision repeated on one of them answers what
    /// happened instead of failing (clients that decide every proposed call, a retried
    /// request). Dropped at the run's end. Locked after `waiting`, never before.
    settled: SyncMutex<HashMap<Uuid, SettledCalls>>,
}

/// A run (its id) and how each of its settled calls was settled, by call id.
type SettledCalls = (Uuid, HashMap<String, String>);

/// How a call was settled, as [`switchboard_protocol::ToolDecisionsResponse`] says it.
fn settled_by_policy(verdict: &Verdict) -> Option<&'static str> {
    match verdict {
        Verdict::Allow => Some("allowed_by_policy"),
        Verdict::Deny(_) => Some("rejected_by_policy"),
        Verdict::Ask => None,
    }
}

fn settled_by_decision(d: &ToolDecision) -> &'static str {
    match d.action {
        DecisionAction::Accept => "accepted",
        DecisionAction::Reject => "rejected",
        DecisionAction::CustomResult => "custom_result",
    }
}

impl Approvals {
    fn settled(&self) -> parking_lot::MutexGuard<'_, HashMap<Uuid, SettledCalls>> {
        self.settled.lock()
    }

    /// Records how calls of `run_id` were settled (a newer run of the session replaces
    /// what an older one left).
    pub(crate) fn record_settled(
        &self,
        session_id: Uuid,
        run_id: Uuid,
        calls: impl IntoIterator<Item = (String, &'static str)>,
    ) {
        let mut settled = self.settled();
        let entry = settled
            .entry(session_id)
            .or_insert_with(|| (run_id, HashMap::new()));
        if entry.0 != run_id {
            *entry = (run_id, HashMap::new());
        }
        entry
            .1
            .extend(calls.into_iter().map(|(id, how)| (id, how.to_owned())));
    }

    /// Forgets the settled calls of `run_id` (its end).
    pub(crate) fn forget_settled(&self, session_id: Uuid, run_id: Uuid) {
        let mut settled = self.settled();
        if settled.get(&session_id).is_some_and(|(r, _)| *r == run_id) {
            settled.remove(&session_id);
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, HashMap<Uuid, Waiting>> {
        self.waiting.lock()
    }

    /// The run and the calls still undecided, if the session waits.
    pub(crate) fn pending(&self, session_id: Uuid) -> Option<(Uuid, Vec<ToolCall>)> {
        let map = self.lock();
        map.get(&session_id).map(|w| {
            let calls = w
                .calls
                .iter()
                .filter(|c| !w.decided.contains_key(&c.id))
                .cloned()
                .collect();
            (w.run_id, calls)
        })
    }

    /// Records decisions; when every call is decided the waiting run goes on. Decisions on
    /// calls of the active run that were already settled (by policy, or decided before)
    /// change nothing and are answered with how they were settled; failing them made a
    /// client that decides every proposed call (stakpak's) take a 409 for a failed run.
    pub(crate) fn decide(
        &self,
        session_id: Uuid,
        run_id: Uuid,
        decisions: &BTreeMap<String, ToolDecision>,
    ) -> Result<BTreeMap<String, String>, EngineError> {
        let mut map = self.lock();
        if decisions.is_empty() {
            return Err(EngineError::validation(
                "decisions",
                "must decide at least one tool call",
            ));
        }
        let settled_before = |id: &str| -> Option<String> {
            self.settled()
                .get(&session_id)
                .filter(|(r, _)| *r == run_id)
                .and_then(|(_, s)| s.get(id).cloned())
        };
        let Some(w) = map.get_mut(&session_id) else {
            // Nothing waits: decisions on settled calls of this run answer how.
            let already: Option<BTreeMap<String, String>> = decisions
                .keys()
                .map(|id| settled_before(id).map(|how| (id.clone(), how)))
                .collect();
            return already.ok_or(EngineError::NoPendingApproval);
        };
        if w.run_id != run_id {
            return Err(EngineError::RunMismatch {
                given: run_id,
                active: Some(w.run_id),
            });
        }
        let mut already = BTreeMap::new();
        for (id, d) in decisions {
            if let Some(prev) = w.decided.get(id) {
                already.insert(id.clone(), settled_by_decision(prev).to_owned());
                continue;
            }
            if !w.calls.iter().any(|c| c.id == *id)
                && let Some(how) = settled_before(id)
            {
                already.insert(id.clone(), how);
                continue;
            }
            if !w.calls.iter().any(|c| c.id == *id) {
                let pending: Vec<&str> = w.calls.iter().map(|c| c.id.as_str()).collect();
                return Err(EngineError::validation(
                    &format!("decisions.{id}"),
                    format!(
                        "no pending tool call has this id; pending: [{}]",
                        pending.join(", ")
                    ),
                ));
            }
            if let Some(by) = &d.by
                && (by.trim().is_empty()
                    || by.chars().count() > 100
                    || by.chars().any(char::is_control))
            {
                return Err(EngineError::validation(
                    &format!("decisions.{id}.by"),
                    "who decided: one line of at most 100 characters, not blank",
                ));
            }
            if d.action == DecisionAction::CustomResult && d.content.is_none() {
                return Err(EngineError::validation(
                    &format!("decisions.{id}.content"),
                    "custom_result needs `content`, the result handed to the model",
                ));
            }
        }
        let fresh: Vec<(String, &'static str)> = decisions
            .iter()
            .filter(|(id, _)| !already.contains_key(*id))
            .map(|(id, d)| (id.clone(), settled_by_decision(d)))
            .collect();
        for (id, d) in decisions {
            if !already.contains_key(id) {
                w.decided.insert(id.clone(), d.clone());
            }
        }
        self.record_settled(session_id, run_id, fresh);
        if w.decided.len() == w.calls.len()
            && let Some(w) = map.remove(&session_id)
            && let Some(done) = w.done
        {
            let _ = done.send(w.decided);
        }
        Ok(already)
    }

    fn register(
        &self,
        session_id: Uuid,
        run_id: Uuid,
        calls: Vec<ToolCall>,
    ) -> oneshot::Receiver<HashMap<String, ToolDecision>> {
        let (tx, rx) = oneshot::channel();
        self.lock().insert(
            session_id,
            Waiting {
                run_id,
                calls,
                decided: HashMap::new(),
                done: Some(tx),
            },
        );
        rx
    }

    /// Ends the wait of `run_id` (timeout, cancel); returns what was decided so far, or
    /// `None` when the decisions completed meanwhile (they are then in the channel).
    fn withdraw(&self, session_id: Uuid, run_id: Uuid) -> Option<HashMap<String, ToolDecision>> {
        let mut map = self.lock();
        if map.get(&session_id).is_some_and(|w| w.run_id == run_id) {
            map.remove(&session_id).map(|w| w.decided)
        } else {
            None
        }
    }
}

/// Withdraws a pending approval when [`ask`] is dropped before it finished.
struct WithdrawOnDrop<'a> {
    approvals: &'a Approvals,
    store: Arc<dyn Store>,
    session_id: Uuid,
    run_id: Uuid,
    armed: bool,
}

impl Drop for WithdrawOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.approvals.withdraw(self.session_id, self.run_id);
        let (store, session_id, run_id) = (self.store.clone(), self.session_id, self.run_id);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let _ = store.delete_approval(session_id, run_id).await;
            });
        }
        tracing::info!(%session_id, %run_id, "approval withdrawn: the run stopped waiting");
    }
}

/// Everything [`propose`] and [`ask`] need from the run.
pub(crate) struct GateScope<'a> {
    pub session_id: Uuid,
    pub run_id: Uuid,
    pub mode: PermissionMode,
    pub auto_approve: AutoApprove,
    pub timeout: Duration,
    pub log: &'a EventLog,
    pub store: &'a Arc<dyn Store>,
    /// The run's lease: every event is written under it.
    pub fence: Option<&'a Lease>,
    pub approvals: &'a Approvals,
    pub cancel: &'a CancellationToken,
    /// Who allowed each call a person allowed (call id → `ToolDecision::by`), for the
    /// call's `ToolExecutionStarted`.
    pub decided_by: &'a SyncMutex<HashMap<String, String>>,
}

async fn emit_rejected(
    scope: &GateScope<'_>,
    call: &ToolCall,
    cause: RejectionCause,
    reason: &str,
    decided_by: Option<&str>,
) -> Result<(), EngineError> {
    scope
        .log
        .append_fenced(
            scope.session_id,
            &AgentEvent::ToolRejected {
                run_id: scope.run_id,
                tool_call_id: call.id.clone(),
                reason: reason.to_string(),
                cause,
                decided_by: decided_by.map(str::to_string),
            },
            scope.fence,
        )
        .await?;
    Ok(())
}

/// Phase one of a model step: announces the calls (`ToolCallsProposed`), settles each by the
/// session's mode and `auto_approve`, and announces refusals (`ToolRejected`) at once.
/// Returns one verdict per call, in order: the caller runs the allowed calls right away and
/// hands the ones to ask about to [`ask`].
pub(crate) async fn propose(
    scope: &GateScope<'_>,
    calls: &[(ToolCall, ToolClass)],
) -> Result<Vec<Verdict>, EngineError> {
    let mut seen = std::collections::HashSet::new();
    for (c, _) in calls {
        if !seen.insert(c.id.as_str()) {
            return Err(EngineError::Internal(format!(
                "two proposed tool calls share the id {:?}",
                c.id
            )));
        }
    }
    let out: Vec<Verdict> = calls
        .iter()
        .map(|(call, class)| settle(scope.mode, &scope.auto_approve, &call.name, *class))
        .collect();
    // Known as settled before anyone sees the calls: a decision sent for one of them as
    // soon as `ToolCallsProposed` arrives is answered with how.
    scope.approvals.record_settled(
        scope.session_id,
        scope.run_id,
        calls
            .iter()
            .zip(&out)
            .filter_map(|((c, _), v)| settled_by_policy(v).map(|how| (c.id.clone(), how))),
    );
    scope
        .log
        .append_fenced(
            scope.session_id,
            &AgentEvent::ToolCallsProposed {
                run_id: scope.run_id,
                tool_calls: calls.iter().map(|(c, _)| c.clone()).collect(),
            },
            scope.fence,
        )
        .await?;
    for ((call, _), verdict) in calls.iter().zip(&out) {
        if let Verdict::Deny(reason) = verdict {
            emit_rejected(scope, call, RejectionCause::Policy, reason, None).await?;
        }
    }
    Ok(out)
}

/// `switchboard_approvals_waiting`: up while an approval waits, down when the wait ends
/// however it ends (a dropped wait included).
struct WaitingGauge {
    since: std::time::Instant,
}

impl WaitingGauge {
    fn up() -> Self {
        metrics::gauge!("switchboard_approvals_waiting").increment(1.0);
        Self {
            since: std::time::Instant::now(),
        }
    }
}

impl Drop for WaitingGauge {
    fn drop(&mut self) {
        metrics::gauge!("switchboard_approvals_waiting").decrement(1.0);
    }
}

/// Phase two: the calls policy left open wait as one pending approval (stored, announced by
/// `WaitingForToolApproval`) until every one is decided, the approval times out, or the run
/// is cancelled; the last two reject what is undecided. Returns one [`Decision`] per call, in
/// order, and announces rejections (`ToolRejected`). Fails closed: only an explicit `accept`
/// yields [`Decision::Run`].
pub(crate) async fn ask(
    scope: &GateScope<'_>,
    calls: &[ToolCall],
) -> Result<Vec<Decision>, EngineError> {
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    let GateScope {
        session_id, run_id, ..
    } = *scope;
    let now = chrono::Utc::now();
    let expires = now + chrono::Duration::from_std(scope.timeout).unwrap_or_default();
    scope
        .store
        .put_approval(
            &ApprovalRecord {
                session_id,
                run_id,
                tool_calls: serde_json::to_value(calls)
                    .map_err(|e| EngineError::Internal(format!("encoding tool calls: {e}")))?,
                // One instant for both: `expires_at - created_at` is the timeout.
                created_at: now.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                expires_at: expires.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            },
            scope.fence,
        )
        .await?;
    let mut rx = scope.approvals.register(session_id, run_id, calls.to_vec());
    // If the caller stops waiting (drops this future: its agent died, say), the approval is
    // withdrawn and its record removed, so nothing can be decided for a wait that is over.
    let mut guard = WithdrawOnDrop {
        approvals: scope.approvals,
        store: scope.store.clone(),
        session_id,
        run_id,
        armed: true,
    };
    let mut unanswered = (RejectionCause::Cancelled, String::new());
    let waiting = WaitingGauge::up();
    let waited = async {
        scope
            .log
            .append_fenced(
                session_id,
                &AgentEvent::WaitingForToolApproval {
                    run_id,
                    tool_call_ids: calls.iter().map(|c| c.id.clone()).collect(),
                },
                scope.fence,
            )
            .await?;
        tracing::info!(%session_id, %run_id, calls = calls.len(), "waiting for tool approval");
        Ok::<_, EngineError>(tokio::select! {
            // Decisions win a tie with the timeout or a cancel: an answer the API
            // acknowledged is never dropped.
            biased;
            r = &mut rx => r.ok(),
            _ = tokio::time::sleep(scope.timeout) => {
                unanswered = (RejectionCause::Timeout, format!(
                    "no decision within {} s: the approval timed out and the call was not run",
                    scope.timeout.as_secs()
                ));
                None
            }
            _ = scope.cancel.cancelled() => {
                unanswered = (
                    RejectionCause::Cancelled,
                    "the run was cancelled while this call waited for approval".into(),
                );
                None
            }
        })
    }
    .await;
    let result_label = match &waited {
        Ok(Some(_)) => "decided",
        Ok(None) if scope.cancel.is_cancelled() => "cancelled",
        Ok(None) => "timed_out",
        Err(_) => "failed",
    };
    metrics::histogram!("switchboard_approval_wait_seconds", "result" => result_label)
        .record(waiting.since.elapsed().as_secs_f64());
    drop(waiting);
    let answers = match waited {
        Ok(Some(d)) => d,
        Ok(None) => match scope.approvals.withdraw(session_id, run_id) {
            Some(partial) => partial,
            // Completed between the timeout/cancel and the withdrawal.
            None => rx.try_recv().unwrap_or_default(),
        },
        Err(e) => {
            guard.armed = false;
            scope.approvals.withdraw(session_id, run_id);
            let _ = scope.store.delete_approval(session_id, run_id).await;
            return Err(e);
        }
    };
    guard.armed = false;
    if let Err(e) = scope.store.delete_approval(session_id, run_id).await {
        tracing::warn!(%session_id, error = %e, "could not remove a settled approval");
    }
    let mut result = Vec::with_capacity(calls.len());
    for call in calls {
        let decision = match answers.get(&call.id) {
            Some(ToolDecision {
                action: DecisionAction::Accept,
                ..
            }) => Decision::Run,
            Some(ToolDecision {
                action: DecisionAction::CustomResult,
                content,
                ..
            }) => Decision::Custom(content.clone().unwrap_or_default()),
            Some(ToolDecision {
                action: DecisionAction::Reject,
                content,
                cause,
                ..
            }) => Decision::Rejected(
                cause.unwrap_or_default(),
                match content.as_deref().map(str::trim) {
                    Some(r) if !r.is_empty() => format!("rejected by the user: {r}"),
                    _ => "rejected by the user".into(),
                },
            ),
            None => Decision::Rejected(
                unanswered.0,
                if unanswered.1.is_empty() {
                    "no decision was made".into()
                } else {
                    unanswered.1.clone()
                },
            ),
        };
        let by = answers.get(&call.id).and_then(|d| d.by.as_deref());
        match &decision {
            Decision::Rejected(cause, reason) => {
                emit_rejected(scope, call, *cause, reason, by).await?
            }
            Decision::Run => {
                if let Some(by) = by {
                    scope
                        .decided_by
                        .lock()
                        .insert(call.id.clone(), by.to_string());
                }
            }
            Decision::Custom(_) => {}
        }
        result.push(decision);
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_question_is_asked_in_every_mode_whatever_auto_approve_says() {
        for mode in [
            PermissionMode::ReadOnly,
            PermissionMode::WorkspaceWrite,
            PermissionMode::FullAccess,
        ] {
            let all = AutoApprove::Keyword(AutoApproveKeyword::All);
            assert_eq!(
                settle(mode, &all, "acp__elicitation", ToolClass::Question),
                Verdict::Ask,
                "{mode:?}"
            );
        }
    }

    fn tools(names: &[&str]) -> AutoApprove {
        AutoApprove::Tools(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn modes() {
        let none = AutoApprove::default();
        use PermissionMode::*;
        use ToolClass::*;
        assert_eq!(settle(ReadOnly, &none, "view", Read), Verdict::Allow);
        assert!(matches!(
            settle(ReadOnly, &none, "create", Write),
            Verdict::Deny(_)
        ));
        assert!(matches!(
            settle(ReadOnly, &none, "run_command", Execute),
            Verdict::Deny(_)
        ));
        assert_eq!(settle(ReadOnly, &none, "fetch", Other), Verdict::Ask);
        assert_eq!(
            settle(WorkspaceWrite, &none, "create", Write),
            Verdict::Allow
        );
        assert_eq!(
            settle(WorkspaceWrite, &none, "run_command", Execute),
            Verdict::Ask
        );
        assert_eq!(
            settle(FullAccess, &none, "run_command", Execute),
            Verdict::Allow
        );
        let all = AutoApprove::Keyword(AutoApproveKeyword::All);
        assert_eq!(
            settle(WorkspaceWrite, &all, "run_command", Execute),
            Verdict::Allow
        );
        // auto_approve never lifts a refusal of the mode.
        assert!(matches!(
            settle(ReadOnly, &all, "run_command", Execute),
            Verdict::Deny(_)
        ));
    }

    #[test]
    fn auto_approve_lists_match_with_and_without_mcp_prefix() {
        assert!(auto_approved(&tools(&["run_command"]), "run_command"));
        assert!(!auto_approved(&tools(&["view"]), "run_command"));
        assert!(auto_approved(&tools(&["fs__read"]), "fs__read"));
        assert!(auto_approved(&tools(&["read"]), "fs__read"));
        // A prefixed entry never approves an unprefixed (built-in) tool.
        assert!(!auto_approved(&tools(&["fs__read"]), "read"));
        assert!(!auto_approved(
            &tools(&["github__run_command"]),
            "run_command"
        ));
        assert!(!auto_approved(&tools(&["fs__read"]), "write"));
        assert!(!auto_approved(&tools(&["fs__read"]), "other__read"));
        assert!(!auto_approved(&AutoApprove::default(), "view"));
    }
}
