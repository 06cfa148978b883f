//! The follower of an open session: every event of its log to the editor as `session/update`s, in order, once; and a waiting call as `session/request_permission`.

use super::*;

/// Forwards the session's events after `from` to the editor, in order, each once. Events
/// up to `replay_to` are history: their approvals are not asked (those still waiting are,
/// once the history is out). `session/resume` starts at the end (`from == replay_to`):
/// nothing is replayed.
pub(crate) async fn follow(
    hub: Arc<Hub>,
    open: Arc<Open>,
    cx: v1::ConnectionTo<Client>,
    (from, replay_to): (u64, u64),
    caught: oneshot::Sender<()>,
) {
    let session = open.id;
    let mut mapper = map::Mapper::new(session, hub.api.base_url());
    let mut caught = Some(caught);
    let mut meter = meter::Meter::default();
    if from >= replay_to {
        caught_up(&hub, &open, &cx, &mapper, &mut caught).await;
        // A new session has no title or usage of its own yet (and the editor does not
        // know its id before `session/new` answers); a resumed one's are told.
        if from > 0 {
            meter.refresh(&hub.api, session, &cx).await;
        }
    }
    let mut events = hub.api.subscribe(session, Some(from));
    // Runs this editor started: their message and files are not echoed.
    let mut own: HashSet<Uuid> = HashSet::new();
    loop {
        // The server sends the stored history at once: a silence while replaying means
        // there is no more of it (its newest events may have been pruned).
        let item = if caught.is_some() {
            match tokio::time::timeout(REPLAY_IDLE, events.next()).await {
                Ok(item) => item,
                Err(_) => {
                    caught_up(&hub, &open, &cx, &mapper, &mut caught).await;
                    meter.refresh(&hub.api, session, &cx).await;
                    continue;
                }
            }
        } else {
            events.next().await
        };
        let Some(item) = item else { break };
        let env = match item {
            Ok(env) => env,
            Err(ClientError::Decode(e)) => {
                tracing::warn!(%session, error = %e, "an event did not parse; skipped");
                continue;
            }
            Err(e) => {
                tracing::warn!(%session, error = %e, "the session's event stream ended");
                open.fail_all(&format!("the session's event stream ended: {e}"));
                return;
            }
        };
        let live = env.id > replay_to;
        let echo = match &env.event {
            AgentEvent::RunStarted { run_id, content } => {
                open.runs.lock().started.insert(*run_id);
                if open.take_own_prompt(content.as_deref()) {
                    own.insert(*run_id);
                }
                !own.contains(run_id)
            }
            other => !own.contains(&other.run_id()),
        };
        for update in mapper.updates(&env.event, echo) {
            if cx
                .send_notification(SessionNotification::new(session.to_string(), update))
                .is_err()
            {
                // The editor is gone.
                return;
            }
        }
        match &env.event {
            AgentEvent::UsageReport { usage, .. } if live => {
                let update = meter.call(usage);
                let _ = cx.send_notification(SessionNotification::new(session.to_string(), update));
            }
            AgentEvent::RunCompleted { .. } | AgentEvent::RunError { .. } if live => {
                meter.refresh(&hub.api, session, &cx).await;
            }
            _ => {}
        }
        match &env.event {
            AgentEvent::WaitingForToolApproval {
                run_id,
                tool_call_ids,
            } if live => {
                for id in tool_call_ids {
                    ask(&hub, &open, &cx, &mapper, *run_id, id);
                }
            }
            AgentEvent::ToolExecutionStarted { tool_call_id, .. }
            | AgentEvent::ToolRejected { tool_call_id, .. } => open.withdraw(tool_call_id),
            AgentEvent::RunCompleted {
                run_id,
                stop_reason,
                backend_stop_reason,
                ..
            } => {
                open.withdraw_run(*run_id);
                own.remove(run_id);
                open.end(
                    *run_id,
                    Ending::Done(*stop_reason, backend_stop_reason.clone()),
                );
            }
            AgentEvent::RunError {
                run_id,
                error,
                retryable,
                ..
            } => {
                open.withdraw_run(*run_id);
                own.remove(run_id);
                open.end(
                    *run_id,
                    Ending::Failed {
                        error: error.clone(),
                        retryable: *retryable,
                    },
                );
            }
            _ => {}
        }
        if caught.is_some() && env.id >= replay_to {
            caught_up(&hub, &open, &cx, &mapper, &mut caught).await;
            meter.refresh(&hub.api, session, &cx).await;
        }
    }
    open.fail_all("the session's event stream ended");
}

/// The history is out: approvals still waiting are asked now.
pub(crate) async fn caught_up(
    hub: &Arc<Hub>,
    open: &Arc<Open>,
    cx: &v1::ConnectionTo<Client>,
    mapper: &map::Mapper,
    caught: &mut Option<oneshot::Sender<()>>,
) {
    if let Ok(pending) = hub.api.pending_tools(open.id).await
        && let Some(run) = pending.run_id
    {
        for call in &pending.tool_calls {
            ask(hub, open, cx, mapper, run, &call.id);
        }
    }
    if let Some(tx) = caught.take() {
        let _ = tx.send(());
    }
}

/// Asks the editor about one waiting call; its answer becomes the decision.
pub(crate) fn ask(
    hub: &Arc<Hub>,
    open: &Arc<Open>,
    cx: &v1::ConnectionTo<Client>,
    mapper: &map::Mapper,
    run: Uuid,
    tool_call_id: &str,
) {
    if !open.asked.lock().insert(tool_call_id.to_owned()) {
        return;
    }
    let forms = hub.forms.load(std::sync::atomic::Ordering::Relaxed);
    if forms
        && let Some(call) = mapper.call(tool_call_id)
        && let Some(question) = crate::question::form(open.id, call)
    {
        crate::question::ask(hub, open, cx, run, tool_call_id, question);
        return;
    }
    let mut fields = ToolCallUpdateFields::new();
    if let Some(call) = mapper.call(tool_call_id) {
        fields = fields
            .title(map::tool_title(call))
            .kind(map::tool_kind(call))
            .raw_input(call.arguments.clone());
    }
    let request = RequestPermissionRequest::new(
        open.id.to_string(),
        ToolCallUpdate::new(tool_call_id.to_owned(), fields),
        options(forms),
    );
    let sent = cx.send_request(request);
    open.asks
        .lock()
        .insert(tool_call_id.to_owned(), (run, sent.cancellation_handle()));
    let (hub, open, id, cx2) = (
        hub.clone(),
        open.clone(),
        tool_call_id.to_owned(),
        cx.clone(),
    );
    let spawned = cx.spawn(async move {
        let cx = cx2;
        let answer = sent.block_task().await;
        open.asks.lock().remove(&id);
        let mut reason = None;
        let action = match answer {
            Ok(resp) => match resp.outcome {
                RequestPermissionOutcome::Selected(s) if s.option_id.to_string() == ALLOW => {
                    Some(DecisionAction::Accept)
                }
                RequestPermissionOutcome::Selected(s) if s.option_id.to_string() == DENY_WHY => {
                    reason = ask_reason(&cx, open.id, &id).await;
                    Some(DecisionAction::Reject)
                }
                RequestPermissionOutcome::Selected(_) => Some(DecisionAction::Reject),
                // Withdrawn, or the editor's user cancelled the turn: the other surfaces
                // and the approval's timeout decide.
                _ => None,
            },
            Err(e) => {
                tracing::info!(session = %open.id, tool_call_id = %id, error = %e, "no answer from the editor");
                None
            }
        };
        if let Some(action) = action {
            let reason = (action == DecisionAction::Reject).then(|| {
                reason
                    .map(|r| format!("denied in the editor: {r}"))
                    .unwrap_or_else(|| "denied in the editor".to_owned())
            });
            decide(&hub, open.id, run, &id, action, reason).await;
        }
        Ok(())
    });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "the connection is closing");
    }
}

/// The editor's decision on call `id` of `run`, taken as "the editor (ACP)" decided it
/// (`content`: a rejection's reason, or the call's result).
pub(crate) async fn decide(
    hub: &Hub,
    session: Uuid,
    run: Uuid,
    id: &str,
    action: DecisionAction,
    content: Option<String>,
) {
    let reject = action == DecisionAction::Reject;
    let req = ToolDecisionsRequest {
        run_id: run,
        decisions: [(
            id.to_owned(),
            ToolDecision {
                action,
                content,
                by: Some("the editor (ACP)".to_owned()),
                cause: reject.then_some(switchboard_protocol::RejectionCause::User),
            },
        )]
        .into_iter()
        .collect(),
    };
    if let Err(e) = hub.api.decide_tools(session, &req).await {
        // Decided elsewhere meanwhile, or the run ended: nothing to do.
        tracing::info!(%session, tool_call_id = %id, error = %e, "the editor's decision was not taken");
    }
}

const ALLOW: &str = "allow";
const DENY: &str = "deny";
const DENY_WHY: &str = "deny-with-reason";
/// How long the editor's form for a reason is waited for.
const REASON_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest reason taken from the editor's form.
const MAX_REASON: usize = 2000;

/// What the editor offers: allow, deny, and (when it can show a form) deny with a reason.
pub(crate) fn options(forms: bool) -> Vec<PermissionOption> {
    let mut o = vec![
        PermissionOption::new(ALLOW, "Allow", PermissionOptionKind::AllowOnce),
        PermissionOption::new(DENY, "Deny", PermissionOptionKind::RejectOnce),
    ];
    if forms {
        o.push(PermissionOption::new(
            DENY_WHY,
            "Deny with a reason…",
            PermissionOptionKind::RejectOnce,
        ));
    }
    o
}

/// Asks the editor (an `elicitation/create` form) why the call is denied; the reason goes
/// to the agent with the rejection. A form dismissed or declined denies without one.
async fn ask_reason(
    cx: &v1::ConnectionTo<Client>,
    session: Uuid,
    tool_call_id: &str,
) -> Option<String> {
    use agent_client_protocol::v1::schema::{
        CreateElicitationRequest, ElicitationAction, ElicitationContentValue, ElicitationFormMode,
        ElicitationSchema, ElicitationSessionScope,
    };
    let scope = ElicitationSessionScope::new(session.to_string()).tool_call_id(
        agent_client_protocol::v1::schema::ToolCallId::new(tool_call_id.to_owned()),
    );
    let schema = ElicitationSchema::new()
        .title("Why is it denied?".to_owned())
        .string("reason", true);
    let request = CreateElicitationRequest::new(
        ElicitationFormMode::new(scope, schema),
        "Tell the agent why this call is denied (it reads the reason and can try another way).",
    );
    // An editor that never answers the form denies without a reason (the approval's own
    // timeout is not waited for).
    let answer = tokio::time::timeout(REASON_TIMEOUT, cx.send_request(request).block_task()).await;
    let Ok(answer) = answer else {
        tracing::info!(%session, tool_call_id, "no reason given in time");
        return None;
    };
    match answer {
        Ok(resp) => match resp.action {
            ElicitationAction::Accept(a) => match a.content?.remove("reason")? {
                ElicitationContentValue::String(r) if !r.trim().is_empty() => {
                    Some(r.trim().chars().take(MAX_REASON).collect())
                }
                _ => None,
            },
            _ => None,
        },
        Err(e) => {
            tracing::info!(%session, tool_call_id, error = %e, "the editor's form for a reason failed");
            None
        }
    }
}
