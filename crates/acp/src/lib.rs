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
mod content;
mod elicit;
mod map;
mod open;
mod prompt;
mod sandbox;
mod usage;

use parking_lot::Mutex as SyncMutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_client_protocol::v1::schema::*;
use async_trait::async_trait;
use serde_json::json;
use switchboard_engine::{Backend, BackendError, RunContext, RunSummary, ToolClass};
use switchboard_protocol::{PermissionMode, RunErrorCode, SteeringDelivery, Usage};
use tokio::sync::Mutex;
use uuid::Uuid;

pub use conn::AgentCommand;
use conn::Conn;
pub use sandbox::AgentSandbox;

/// An agent process without a run for this long is stopped.
const IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// How long `session/new` may take, and `session/load` (which replays history).
const NEW_SESSION_TIMEOUT: Duration = Duration::from_secs(60);
const LOAD_SESSION_TIMEOUT: Duration = Duration::from_secs(180);

/// Stops agent processes that have been idle too long. Runs while the backend lives.
async fn reap_idle(
    name: String,
    slots: std::sync::Weak<SyncMutex<HashMap<Uuid, Arc<Mutex<Slot>>>>>,
    idle: Duration,
) {
    let mut tick = tokio::time::interval(
        idle.min(Duration::from_secs(60))
            .max(Duration::from_millis(100)),
    );
    loop {
        tick.tick().await;
        let Some(slots) = slots.upgrade() else { return };
        let all: Vec<Arc<Mutex<Slot>>> = slots.lock().values().cloned().collect();
        drop(slots);
        for slot in all {
            // A slot in use is not idle.
            let Ok(mut slot) = slot.try_lock() else {
                continue;
            };
            if slot.last_used.elapsed() >= idle
                && let Some(conn) = slot.conn.take()
            {
                tracing::info!(agent = %name, "stopping an idle agent process");
                if let Some(session) = slot.acp_session.take() {
                    conn.close_session(&name, &session).await;
                }
                conn.shutdown().await;
            }
        }
    }
}

/// A `Notice` in the run (best effort: a notice that cannot be stored is not worth failing
/// the run for).
async fn notice(ctx: &RunContext, message: String) {
    let _ = ctx.handle.notice(message).await;
}

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
        BackendError::new(RunErrorCode::AgentFailed, e.to_string(), retryable)
    }
}

/// What the backend keeps per Switchboard session, in the store (to resume after a restart).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
struct SavedState {
    agent: String,
    acp_session_id: String,
}

/// The agent process of one Switchboard session.
struct Slot {
    conn: Option<Conn>,
    acp_session: Option<SessionId>,
    /// The agent's model option in that session.
    model: Option<open::ModelOption>,
    /// Consecutive failures to start or keep the agent, and when the last one happened.
    failures: u32,
    last_failure: Option<Instant>,
    last_used: Instant,
}

impl Default for Slot {
    fn default() -> Self {
        Self {
            conn: None,
            acp_session: None,
            model: None,
            failures: 0,
            last_failure: None,
            last_used: Instant::now(),
        }
    }
}

type Slots = Arc<SyncMutex<HashMap<Uuid, Arc<Mutex<Slot>>>>>;

/// An ACP agent as a [`Backend`]: one agent process per session that uses it, stopped when
/// idle (and resumed with `session/load` on the next message).
pub struct AcpBackend {
    name: String,
    command: AgentCommand,
    slots: Slots,
    idle_timeout: Duration,
    reaper: std::sync::OnceLock<()>,
    session_mcp: Option<SessionMcp>,
    sandbox: Option<AgentSandbox>,
}

/// Switchboard's own MCP server, passed to every agent in `session/new` and `session/load`
/// (`mcpServers`, over stdio, which every ACP agent must support): `switchboard mcp
/// --session ID` with the session's own token, whose `send_file` tool lets the agent share
/// files of its workspace as the built-in agent does.
#[derive(Debug, Clone)]
pub struct SessionMcp {
    /// The `switchboard` binary.
    pub command: std::path::PathBuf,
    /// The server's URL as reached from this machine: known once its listener is bound, so
    /// set then. Until it is set, agents get no server.
    pub url: Arc<std::sync::OnceLock<String>>,
}

/// The name the agent sees Switchboard's MCP server under (its tools are `switchboard`'s).
pub const SESSION_MCP_NAME: &str = "switchboard";

impl AcpBackend {
    pub fn new(name: impl Into<String>, command: AgentCommand) -> Self {
        Self {
            name: name.into(),
            command,
            slots: Arc::default(),
            idle_timeout: IDLE_TIMEOUT,
            reaper: std::sync::OnceLock::new(),
            session_mcp: None,
            sandbox: None,
        }
    }

    /// Gives every session's agent Switchboard's own MCP server (see [`SessionMcp`]).
    pub fn with_session_mcp(mut self, mcp: SessionMcp) -> Self {
        self.session_mcp = Some(mcp);
        self
    }

    /// The `mcpServers` of this session's `session/new` or `session/load`: Switchboard's
    /// own, then the session's (stdio; HTTP ones when the agent takes them). The second
    /// part names the servers left out, for a notice.
    fn mcp_servers(&self, ctx: &RunContext, http: bool) -> (Vec<McpServer>, Vec<String>) {
        let mut out = Vec::new();
        let mut left_out = Vec::new();
        if let Some(mcp) = &self.session_mcp
            && let Some(url) = mcp.url.get()
        {
            out.push(McpServer::Stdio(
                McpServerStdio::new(SESSION_MCP_NAME, mcp.command.clone())
                    .args(vec![
                        "mcp".into(),
                        "--session".into(),
                        ctx.session_id.to_string(),
                    ])
                    .env(vec![
                        EnvVariable::new("SWITCHBOARD_URL", url.clone()),
                        EnvVariable::new("SWITCHBOARD_SESSION_TOKEN", ctx.handle.session_token()),
                    ]),
            ));
        }
        for s in &ctx.mcp_servers {
            match (&s.command, &s.url) {
                (Some(command), _) => out.push(McpServer::Stdio(
                    McpServerStdio::new(s.name.clone(), command.clone())
                        .args(s.args.clone())
                        .env(
                            s.env
                                .iter()
                                .map(|(k, v)| EnvVariable::new(k.clone(), v.clone()))
                                .collect(),
                        ),
                )),
                (None, Some(url)) if http => out.push(McpServer::Http(
                    McpServerHttp::new(s.name.clone(), url.clone()).headers(
                        s.headers
                            .iter()
                            .map(|(k, v)| HttpHeader::new(k.clone(), v.clone()))
                            .collect(),
                    ),
                )),
                _ => left_out.push(s.name.clone()),
            }
        }
        (out, left_out)
    }

    fn slot(&self, session_id: Uuid) -> Arc<Mutex<Slot>> {
        self.reaper.get_or_init(|| {
            tokio::spawn(reap_idle(
                self.name.clone(),
                Arc::downgrade(&self.slots),
                self.idle_timeout,
            ));
        });
        let mut map = self.slots.lock();
        map.entry(session_id).or_default().clone()
    }

    /// Makes sure the slot holds a live connection with an ACP session for this Switchboard
    /// session: respawning (with back-off) and resuming (`session/load`) as needed.
    async fn ensure(&self, slot: &mut Slot, ctx: &RunContext) -> Result<(), BackendError> {
        // A run that asks for the sandbox (`sandbox: true`) is not given a process started
        // without it: that one is stopped, and a confined one resumes the session.
        let unconfined =
            ctx.input.sandbox == Some(true) && slot.conn.as_ref().is_some_and(|c| !c.confined);
        if let Some(conn) = slot.conn.as_mut()
            && conn.alive()
            && slot.acp_session.is_some()
            && !unconfined
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
                        return Err(BackendError::new(RunErrorCode::Other, "cancelled while waiting to respawn the agent", false));
                    }
                }
            }
        }
        let started = async {
            let mut conn =
                Conn::start(&self.name, &self.command, &ctx.cwd, self.confinement(ctx)).await?;
            let opened = self.open_session(&mut conn, ctx).await?;
            Ok::<_, AcpError>((conn, opened))
        };
        let started = tokio::select! {
            r = started => r,
            _ = ctx.cancel.cancelled() => {
                return Err(BackendError::new(RunErrorCode::Other, "cancelled while starting the agent", false));
            }
        };
        match started {
            Ok((conn, opened)) => {
                slot.conn = Some(conn);
                slot.acp_session = Some(opened.session);
                slot.model = opened.model;
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
}

/// The run options an ACP agent cannot be given (the protocol has no system prompt or turn
/// limit per prompt; the model goes through the agent's model option, see [`open`]), said
/// to the user as a notice rather than dropped in silence.
/// `auto_approve` needs no notice: Switchboard's own gate applies it.
fn ignored_options(input: &switchboard_engine::RunInput) -> Option<String> {
    let o = input.overrides.clone().unwrap_or_default();
    let mut ignored = Vec::new();
    if o.system_prompt.is_some_and(|p| !p.trim().is_empty()) {
        ignored.push("system_prompt");
    }
    if o.max_turns.is_some() {
        ignored.push("max_turns");
    }
    (!ignored.is_empty()).then(|| {
        format!(
            "this agent is driven over ACP, which cannot take {} for a run: ignored",
            ignored.join(", ")
        )
    })
}

#[async_trait]
impl Backend for AcpBackend {
    /// With a sandbox this machine can enforce (or one that is required, which then refuses
    /// to start the agent rather than run it unconfined).
    fn sandboxes(&self) -> bool {
        self.sandbox
            .as_ref()
            .is_some_and(|s| s.sandbox.available || s.sandbox.required)
    }

    fn sandbox_status(
        &self,
        config: &switchboard_protocol::SessionConfig,
    ) -> Option<switchboard_protocol::SandboxStatus> {
        self.status_of(config)
    }

    async fn run(&self, mut ctx: RunContext) -> Result<RunSummary, BackendError> {
        let slot = self.slot(ctx.session_id);
        let mut slot = slot.lock().await;
        slot.last_used = Instant::now();
        self.ensure(&mut slot, &ctx).await?;
        if let Some(message) = ignored_options(&ctx.input) {
            ctx.handle.notice(message).await?;
        }
        // The run's model, else the session's when the agent offers it (a session's model
        // is the server's default unless set: not worth a notice when the agent has no such
        // model).
        let wanted = match (&ctx.input.model, &ctx.config.model) {
            (Some(m), _) => Some((m.clone(), true)),
            (None, Some(m)) => Some((m.clone(), false)),
            (None, None) => None,
        };
        let refused = {
            let slot = &mut *slot;
            match (
                slot.conn.as_ref(),
                slot.acp_session.as_ref(),
                slot.model.as_mut(),
            ) {
                (Some(conn), Some(session), Some(option)) => {
                    let target = match wanted {
                        Some((m, asked)) if asked || option.values.contains(&m) => Some(m),
                        _ => None,
                    };
                    match target {
                        Some(m) => self.set_model(conn, session, option, &m).await.err(),
                        None if option.current != option.original => {
                            // An earlier run's model does not stick to this one.
                            let original = option.original.clone();
                            self.set_model(conn, session, option, &original).await.err()
                        }
                        None => None,
                    }
                }
                _ => match wanted {
                    Some((m, true)) => Some(format!(
                        "this agent offers no model option: the model {m:?} is ignored"
                    )),
                    _ => None,
                },
            }
        };
        if let Some(message) = refused {
            notice(&ctx, message).await;
        }
        let mut text = ctx.input.prompt_text();
        let mut prompts = 0;
        let mut stop_reason;
        let mut used = Usage::default();
        loop {
            // The agent's calls cannot be estimated beforehand: a spent budget stops the
            // run before its prompt, and what the prompt costs is counted after.
            ctx.handle.budget_allows().await?;
            prompts += 1;
            let session = slot.acp_session.clone();
            let (Some(conn), Some(session)) = (slot.conn.as_mut(), session) else {
                return Err(BackendError::new(
                    RunErrorCode::AgentFailed,
                    format!("agent {:?}: no connection", self.name),
                    true,
                ));
            };
            let mut turn = map::Turn::new(ctx.run_id);
            // The run's files go with its first prompt; steering is text.
            let blocks = if prompts == 1 {
                content::prompt_blocks(text, &ctx.input.attachments, &ctx.cwd, &conn.prompt_caps)
                    .await
            } else {
                vec![ContentBlock::from(text)]
            };
            let result = self.prompt(conn, &session, &ctx, blocks, &mut turn).await;
            let died = !conn.alive();
            slot.last_used = Instant::now();
            turn.finish(&ctx.handle).await?;
            used.add(&usage::record_turn(&ctx, &self.name, turn.cost.take()).await?);
            match result {
                Ok((reason, true)) => stop_reason = reason,
                Ok((reason, false)) => {
                    // Cut off: the process goes; the ACP session is resumed next time.
                    if let Some(c) = slot.conn.take() {
                        c.shutdown().await;
                    }
                    stop_reason = reason;
                    break;
                }
                Err(e) => {
                    // A turn that failed leaves the agent in an unknown state: stop it; the
                    // next run respawns it (with back-off if it died) and resumes.
                    if died {
                        slot.failures += 1;
                        slot.last_failure = Some(Instant::now());
                    }
                    if let Some(c) = slot.conn.take() {
                        c.shutdown().await;
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
        Ok(RunSummary {
            stop_reason,
            total_turns: prompts,
            usage: used,
        })
    }

    fn steering(&self) -> SteeringDelivery {
        SteeringDelivery::NextPrompt
    }

    async fn shutdown(&self) {
        let all: Vec<Arc<Mutex<Slot>>> = {
            let mut map = self.slots.lock();
            map.drain().map(|(_, s)| s).collect()
        };
        for slot in all {
            let mut slot = slot.lock().await;
            if let Some(conn) = slot.conn.take() {
                conn.shutdown().await;
            }
        }
    }

    async fn forget(&self, session_id: Uuid) {
        let slot = {
            let mut map = self.slots.lock();
            map.remove(&session_id)
        };
        if let Some(slot) = slot {
            let mut slot = slot.lock().await;
            if let Some(conn) = slot.conn.take() {
                if let Some(session) = slot.acp_session.take() {
                    conn.close_session(&self.name, &session).await;
                }
                conn.shutdown().await;
            }
        }
    }
}

/// The class the engine's permission modes work on, from an ACP tool kind and where the
/// call acts. ACP agents are not confined to the workspace, so a read or a write counts as
/// one only when every location it names is inside the workspace; otherwise it asks (in
/// read-only mode a write anywhere is still a write, and refused).
pub fn tool_class(
    kind: Option<ToolKind>,
    inside_workspace: bool,
    mode: PermissionMode,
) -> ToolClass {
    let base = match kind {
        Some(ToolKind::Read | ToolKind::Search | ToolKind::Think) => ToolClass::Read,
        Some(ToolKind::Edit | ToolKind::Delete | ToolKind::Move) => ToolClass::Write,
        Some(ToolKind::Execute) => ToolClass::Execute,
        _ => ToolClass::Other,
    };
    match base {
        ToolClass::Read | ToolClass::Write if inside_workspace => base,
        ToolClass::Write if mode == PermissionMode::ReadOnly => ToolClass::Write,
        ToolClass::Read | ToolClass::Write => ToolClass::Other,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_need_locations_inside_the_workspace() {
        use PermissionMode::*;
        assert_eq!(
            tool_class(Some(ToolKind::Edit), true, WorkspaceWrite),
            ToolClass::Write
        );
        assert_eq!(
            tool_class(Some(ToolKind::Edit), false, WorkspaceWrite),
            ToolClass::Other
        );
        assert_eq!(
            tool_class(Some(ToolKind::Edit), false, ReadOnly),
            ToolClass::Write
        );
        assert_eq!(
            tool_class(Some(ToolKind::Read), false, ReadOnly),
            ToolClass::Other
        );
        assert_eq!(
            tool_class(Some(ToolKind::Search), true, ReadOnly),
            ToolClass::Read
        );
        assert_eq!(
            tool_class(Some(ToolKind::Execute), true, FullAccess),
            ToolClass::Execute
        );
        assert_eq!(tool_class(None, true, WorkspaceWrite), ToolClass::Other);
    }

    #[test]
    fn ignored_options_are_named() {
        let mut input = switchboard_engine::RunInput {
            content: "hi".into(),
            ..Default::default()
        };
        assert_eq!(ignored_options(&input), None);
        input.overrides = Some(switchboard_protocol::RunOverrides {
            auto_approve: Some(switchboard_protocol::AutoApprove::Tools(vec![
                "view".into(),
            ])),
            system_prompt: Some("  ".into()),
            ..Default::default()
        });
        assert_eq!(
            ignored_options(&input),
            None,
            "auto_approve is applied, blank prompt is none"
        );
        input.model = Some("m".into());
        input.overrides = Some(switchboard_protocol::RunOverrides {
            max_turns: Some(3),
            system_prompt: Some("be brief".into()),
            ..Default::default()
        });
        let m = ignored_options(&input).unwrap();
        assert!(m.contains("system_prompt, max_turns"), "{m}");
        assert!(
            !m.contains("model"),
            "the model goes through the agent's option: {m}"
        );
    }
}
