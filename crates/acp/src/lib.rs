//! ACP agents as session backends.
//!
//! A session created with `backend: {"acp": "<name>"}` is driven by an external agent that
//! speaks the Agent Client Protocol over stdio (Claude Code through its ACP adapter, Gemini
//! CLI, goose …). Switchboard is the ACP *client*, built on the `agent-client-protocol`
//! crate: it spawns the agent in the session's workspace, runs `initialize`, `session/new`
//! (or `session/load` to resume after a restart or a crash) and one `session/prompt` per
//! turn, turns `session/update` notifications into Switchboard events, and routes
//! `session/request_permission` through the engine's approval gate, so the request can be
//! answered from any surface. It knows nothing of HTTP or chat platforms.

mod conn;
mod map;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::*;
use async_trait::async_trait;
use serde_json::json;
use switchboard_engine::{Backend, BackendError, Decision, RunContext, RunSummary, ToolClass};
use switchboard_protocol::{AgentEvent, ContextPriority, SteeringDelivery, Usage};
use tokio::sync::Mutex;
use uuid::Uuid;

pub use conn::AgentCommand;
use conn::{Conn, Incoming};

/// How long an agent gets to end its turn after `session/cancel` before it is killed.
const CANCEL_GRACE: Duration = Duration::from_secs(10);
/// Back-off between respawns of an agent that keeps dying: 1 s doubling to 30 s.
const BACKOFF_START: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Why talking to an agent failed. Messages name the agent and the step.
#[derive(Debug, thiserror::Error)]
pub enum AcpError {
    #[error("agent {agent:?}: cannot start `{command}`: {reason}")]
    Spawn {
        agent: String,
        command: String,
        reason: String,
    },
    #[error("agent {agent:?} exited during {step} ({status}); its stderr is in the server log")]
    Exited {
        agent: String,
        step: &'static str,
        status: String,
    },
    #[error("agent {agent:?}: {step} failed: {reason}")]
    Protocol {
        agent: String,
        step: &'static str,
        reason: String,
    },
}

impl From<AcpError> for BackendError {
    fn from(e: AcpError) -> Self {
        let retryable = matches!(e, AcpError::Exited { .. });
        BackendError::new(e.to_string(), retryable)
    }
}

/// What the backend keeps per Switchboard session, in the store (to resume after a restart).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct SavedState {
    agent: String,
    acp_session_id: String,
}

/// The agent process of one Switchboard session.
#[derive(Default)]
struct Slot {
    conn: Option<Conn>,
    acp_session: Option<SessionId>,
    /// Consecutive failures to start or keep the agent, and when the last one happened.
    failures: u32,
    last_failure: Option<Instant>,
}

/// An ACP agent as a [`Backend`]: one agent process per session that uses it.
pub struct AcpBackend {
    name: String,
    command: AgentCommand,
    slots: StdMutex<HashMap<Uuid, Arc<Mutex<Slot>>>>,
}

impl AcpBackend {
    pub fn new(name: impl Into<String>, command: AgentCommand) -> Self {
        Self {
            name: name.into(),
            command,
            slots: StdMutex::default(),
        }
    }

    fn slot(&self, session_id: Uuid) -> Arc<Mutex<Slot>> {
        let mut map = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(session_id).or_default().clone()
    }

    /// Makes sure the slot holds a live connection with an ACP session for this Switchboard
    /// session: respawning (with back-off) and resuming (`session/load`) as needed.
    async fn ensure(&self, slot: &mut Slot, ctx: &RunContext) -> Result<(), BackendError> {
        if let Some(conn) = slot.conn.as_mut()
            && conn.alive()
            && slot.acp_session.is_some()
        {
            return Ok(());
        }
        if let Some(old) = slot.conn.take() {
            tracing::warn!(agent = %self.name, session_id = %ctx.session_id, "agent process is gone; respawning");
            old.shutdown().await;
        }
        slot.acp_session = None;
        if slot.failures > 0
            && let Some(last) = slot.last_failure
        {
            let wait = BACKOFF_START
                .saturating_mul(2u32.saturating_pow(slot.failures - 1))
                .min(BACKOFF_MAX);
            let left = wait.saturating_sub(last.elapsed());
            if !left.is_zero() {
                tracing::info!(agent = %self.name, wait_ms = left.as_millis() as u64, "waiting before respawning the agent");
                tokio::select! {
                    _ = tokio::time::sleep(left) => {}
                    _ = ctx.cancel.cancelled() => {
                        return Err(BackendError::new("cancelled while waiting to respawn the agent", false));
                    }
                }
            }
        }
        let started = async {
            let mut conn = Conn::start(&self.name, &self.command, &ctx.cwd).await?;
            let session = self.open_session(&mut conn, ctx).await?;
            Ok::<_, AcpError>((conn, session))
        };
        let started = tokio::select! {
            r = started => r,
            _ = ctx.cancel.cancelled() => {
                return Err(BackendError::new("cancelled while starting the agent", false));
            }
        };
        match started {
            Ok((conn, session)) => {
                slot.conn = Some(conn);
                slot.acp_session = Some(session);
                Ok(())
            }
            Err(e) => {
                slot.failures += 1;
                slot.last_failure = Some(Instant::now());
                tracing::warn!(agent = %self.name, error = %e, "agent failed to start");
                Err(e.into())
            }
        }
    }

    /// `session/load` of the stored ACP session when the agent can, else `session/new`
    /// (saying so in a notice when an earlier session is lost).
    async fn open_session(&self, conn: &mut Conn, ctx: &RunContext) -> Result<SessionId, AcpError> {
        let saved: Option<SavedState> = ctx
            .handle
            .backend_state()
            .await
            .ok()
            .flatten()
            .and_then(|v| serde_json::from_value(v).ok())
            .filter(|s: &SavedState| s.agent == self.name);
        let cwd = ctx.cwd.clone();
        let mut notice = None;
        if let Some(saved) = &saved {
            if conn.load_session {
                let id = SessionId::new(saved.acp_session_id.clone());
                let req = LoadSessionRequest::new(id.clone(), cwd.clone()).mcp_servers(vec![]);
                match conn.cx.send_request(req).block_task().await {
                    Ok(_) => {
                        // The agent replays the history as updates before it answers: it
                        // is already in our log, so it is dropped here.
                        while conn.incoming.try_recv().is_ok() {}
                        tracing::info!(agent = %self.name, acp_session = %id, "resumed the agent's session");
                        return Ok(id);
                    }
                    Err(e) => {
                        let err = conn.failure(&self.name, "session/load", &e).await;
                        if matches!(err, AcpError::Exited { .. }) {
                            return Err(err);
                        }
                        while conn.incoming.try_recv().is_ok() {}
                        notice = Some(format!(
                            "agent {:?} could not resume its earlier session ({err}); started a new one, which does not remember earlier turns",
                            self.name
                        ));
                    }
                }
            } else {
                notice = Some(format!(
                    "agent {:?} cannot resume sessions (it does not offer session/load); started a new session, which does not remember earlier turns",
                    self.name
                ));
            }
        }
        let req = NewSessionRequest::new(cwd).mcp_servers(vec![]);
        let session = match conn.cx.send_request(req).block_task().await {
            Ok(r) => r.session_id,
            Err(e) => return Err(conn.failure(&self.name, "session/new", &e).await),
        };
        let state = json!(SavedState {
            agent: self.name.clone(),
            acp_session_id: session.to_string(),
        });
        if let Err(e) = ctx.handle.save_backend_state(Some(&state)).await {
            tracing::warn!(agent = %self.name, error = %e, "could not store the agent's session id");
        }
        if let Some(message) = notice {
            tracing::warn!(agent = %self.name, "{message}");
            let _ = ctx
                .handle
                .emit(AgentEvent::Notice {
                    run_id: ctx.run_id,
                    message,
                })
                .await;
        }
        Ok(session)
    }

    /// One `session/prompt` and everything the agent sends until it answers.
    async fn prompt(
        &self,
        conn: &mut Conn,
        session: &SessionId,
        ctx: &RunContext,
        text: String,
        turn: &mut map::Turn,
    ) -> Result<String, BackendError> {
        let req = PromptRequest::new(session.clone(), vec![ContentBlock::from(text)]);
        let mut reply = tokio::spawn(conn.cx.send_request(req).block_task());
        let mut cancel_sent: Option<Instant> = None;
        loop {
            let grace = async {
                match cancel_sent {
                    Some(at) => tokio::time::sleep(CANCEL_GRACE.saturating_sub(at.elapsed())).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                Some(item) = conn.incoming.recv() => {
                    self.handle_incoming(item, ctx, turn, cancel_sent.is_some()).await?;
                }
                done = &mut reply => {
                    // Updates sent before the answer are already queued: handle them first.
                    while let Ok(item) = conn.incoming.try_recv() {
                        self.handle_incoming(item, ctx, turn, cancel_sent.is_some()).await?;
                    }
                    return match done {
                        Ok(Ok(resp)) => Ok(map::stop_reason(resp.stop_reason)),
                        Ok(Err(e)) => Err(conn.failure(&self.name, "session/prompt", &e).await.into()),
                        Err(e) => Err(BackendError::new(format!("agent {:?}: prompt task failed: {e}", self.name), true)),
                    };
                }
                _ = ctx.cancel.cancelled(), if cancel_sent.is_none() => {
                    tracing::info!(agent = %self.name, "sending session/cancel");
                    if let Err(e) = conn.cx.send_notification(CancelNotification::new(session.clone())) {
                        tracing::warn!(agent = %self.name, error = %e, "could not send session/cancel");
                    }
                    cancel_sent = Some(Instant::now());
                }
                _ = grace => {
                    tracing::warn!(agent = %self.name, "the agent did not end its turn after session/cancel; stopping it");
                    reply.abort();
                    return Ok("cancelled".into());
                }
            }
        }
    }

    async fn handle_incoming(
        &self,
        item: Incoming,
        ctx: &RunContext,
        turn: &mut map::Turn,
        cancelled: bool,
    ) -> Result<(), BackendError> {
        match item {
            Incoming::Update(n) => turn.update(&ctx.handle, n.update).await?,
            Incoming::Permission(req, responder) => {
                let outcome = if cancelled || ctx.cancel.is_cancelled() {
                    RequestPermissionOutcome::Cancelled
                } else {
                    self.permission(ctx, turn, &req).await?
                };
                if let Err(e) = responder.respond(RequestPermissionResponse::new(outcome)) {
                    tracing::warn!(agent = %self.name, error = %e, "could not answer a permission request");
                }
            }
        }
        Ok(())
    }

    /// A permission request becomes a Switchboard approval: policy first, then a person.
    async fn permission(
        &self,
        ctx: &RunContext,
        turn: &mut map::Turn,
        req: &RequestPermissionRequest,
    ) -> Result<RequestPermissionOutcome, BackendError> {
        let (call, class) = turn.permission_call(req);
        let decision = ctx
            .handle
            .gate(&[(call, class)])
            .await?
            .into_iter()
            .next()
            .unwrap_or_else(|| Decision::Rejected("no decision was made".into()));
        // A cancel while it waited: the protocol wants `cancelled` as the answer.
        if ctx.cancel.is_cancelled() {
            return Ok(RequestPermissionOutcome::Cancelled);
        }
        Ok(map::outcome(&decision, &req.options))
    }
}

fn user_text(ctx: &RunContext) -> String {
    let mut items = ctx.input.context.clone();
    items.sort_by_key(|c| match c.priority.unwrap_or_default() {
        ContextPriority::High => 0,
        ContextPriority::Normal => 1,
        ContextPriority::Low => 2,
    });
    let mut out = String::new();
    for c in items {
        out.push_str(&format!(
            "<context name=\"{}\">\n{}\n</context>\n\n",
            c.name.replace('"', "'"),
            c.content
        ));
    }
    out.push_str(&ctx.input.content);
    out
}

#[async_trait]
impl Backend for AcpBackend {
    async fn run(&self, mut ctx: RunContext) -> Result<RunSummary, BackendError> {
        let slot = self.slot(ctx.session_id);
        let mut slot = slot.lock().await;
        self.ensure(&mut slot, &ctx).await?;
        let mut text = user_text(&ctx);
        let mut prompts = 0;
        let mut stop_reason;
        loop {
            prompts += 1;
            let session = slot.acp_session.clone();
            let (Some(conn), Some(session)) = (slot.conn.as_mut(), session) else {
                return Err(BackendError::new(
                    format!("agent {:?}: no connection", self.name),
                    true,
                ));
            };
            let mut turn = map::Turn::new(ctx.run_id);
            let result = self.prompt(conn, &session, &ctx, text, &mut turn).await;
            turn.finish(&ctx.handle).await?;
            match result {
                Ok(reason) => stop_reason = reason,
                Err(e) => {
                    // A dead agent is respawned by the next run.
                    if !conn.alive() {
                        slot.failures += 1;
                        slot.last_failure = Some(Instant::now());
                    }
                    return Err(e);
                }
            }
            slot.failures = 0;
            if ctx.cancel.is_cancelled() || stop_reason == "cancelled" {
                stop_reason = "cancelled".into();
                break;
            }
            // Steering sent during the turn goes with the next prompt: ACP has no way to
            // add to a turn in progress.
            let steering = ctx.handle.take_steering().await?;
            if steering.is_empty() {
                break;
            }
            text = steering.join("\n\n");
        }
        if stop_reason == "cancelled"
            && let Some(conn) = slot.conn.as_mut()
            && !conn.alive()
        {
            slot.conn = None;
        }
        Ok(RunSummary {
            stop_reason,
            total_turns: prompts,
            usage: Usage::default(),
        })
    }

    fn steering(&self) -> SteeringDelivery {
        SteeringDelivery::NextPrompt
    }

    async fn forget(&self, session_id: Uuid) {
        let slot = {
            let mut map = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            map.remove(&session_id)
        };
        if let Some(slot) = slot {
            let mut slot = slot.lock().await;
            if let Some(conn) = slot.conn.take() {
                conn.shutdown().await;
            }
        }
    }
}

/// The classes the engine's permission modes work on, from ACP's tool kinds.
pub fn tool_class(kind: Option<ToolKind>) -> ToolClass {
    match kind {
        Some(ToolKind::Read | ToolKind::Search | ToolKind::Think) => ToolClass::Read,
        Some(ToolKind::Edit | ToolKind::Delete | ToolKind::Move) => ToolClass::Write,
        Some(ToolKind::Execute) => ToolClass::Execute,
        _ => ToolClass::Other,
    }
}
