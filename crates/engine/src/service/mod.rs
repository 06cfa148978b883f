//! Sessions and runs.

use parking_lot::Mutex as SyncMutex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use switchboard_protocol::{
    AgentEvent, CreateSessionRequest, MessageType, PendingToolsResponse, Role, RunStatus,
    SendMessageRequest, SendMessageResponse, SessionConfig, SessionSummary, SteeringDelivery,
    ToolCall, ToolDecisionsRequest, ToolDecisionsResponse, TranscriptMessage, WaitingApproval,
};
use switchboard_store::{
    Lease, MessageRecord, NewRun, RecentMessages, RunFinish, RunOutcome, RunRecord, RunState,
    SessionRecord, Store, StoreError,
};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::approval::Approvals;
use crate::backend::{Backends, RunContext, RunHandle, RunInput};
use crate::bus::{ControlReply, RunControl};
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::log::{EventLog, Subscription};
use crate::time::{now_rfc3339, parse_ts};

mod checkpoints;
pub use checkpoints::DiffOutput;
mod control;
mod deciding;
mod files;
mod leases;
mod recovery;
mod runs;
pub(crate) mod search;
mod sessions;
mod validate;

use control::unexpected;
use leases::renew_loop;
use recovery::{prune_loop, reap_loop};
use validate::{
    valid_title, validate_auto_approve, validate_cwd, validate_mcp_servers, validate_message,
    validate_sandbox,
};

/// Most characters in a session title.
const MAX_TITLE: usize = 200;
/// Most bytes in one message's content.
const MAX_CONTENT: usize = switchboard_protocol::MAX_MESSAGE_CONTENT_BYTES;

/// The slot of a run that is executing in this process: what steering, cancel and the
/// lease renewal need to reach it.
struct RunSlot {
    run_id: Uuid,
    /// The run's lease in the store, renewed while it runs.
    lease: Lease,
    /// Fires when the lease could not be renewed because another instance took the run
    /// over: the run stops without writing anything more.
    lost: CancellationToken,
    /// When the last successful renewal started.
    renewed: Arc<SyncMutex<std::time::Instant>>,
    cancel: CancellationToken,
    steering: mpsc::UnboundedSender<String>,
    /// The session's `auto_approve` as the run applies it, call by call: a change of the
    /// session's reaches the run under way. `None` when the run has its own override.
    auto_approve: Option<Arc<SyncMutex<switchboard_protocol::AutoApprove>>>,
    task: Option<JoinHandle<()>>,
}

/// What the renewal of one run's lease needs from its slot (taken while the map is locked,
/// used after).
struct Renewal {
    run_id: Uuid,
    lease: Lease,
    lost: CancellationToken,
    cancel: CancellationToken,
    renewed: Arc<SyncMutex<std::time::Instant>>,
}

impl RunSlot {
    fn renewal(&self) -> Renewal {
        Renewal {
            run_id: self.run_id,
            lease: self.lease.clone(),
            lost: self.lost.clone(),
            cancel: self.cancel.clone(),
            renewed: self.renewed.clone(),
        }
    }
}

/// Everything one run's execution takes (see `Engine::execute`).
struct RunJob {
    session: SessionRecord,
    config: SessionConfig,
    run_id: Uuid,
    input: RunInput,
    backend: Arc<dyn crate::Backend>,
    steering: mpsc::UnboundedReceiver<String>,
    cancel: CancellationToken,
    lease: Lease,
    lost: CancellationToken,
}

/// Runs and approvals by session, read from the store.
#[derive(Default)]
struct SharedState {
    running: HashMap<Uuid, Uuid>,
    approvals: HashMap<Uuid, u32>,
}

/// The engine. Cheap to clone; all clones share state.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

/// What a new session gets unless it asks otherwise (the settings change them while
/// serving: [`Engine::set_defaults`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionDefaults {
    pub model: Option<String>,
    pub permission_mode: switchboard_protocol::PermissionMode,
}

struct Inner {
    store: Arc<dyn Store>,
    /// Users, tokens and the audit log.
    team: crate::Team,
    /// Every model call's usage and the budgets ([`crate::usage`]).
    meter: Arc<crate::Meter>,
    log: EventLog,
    backends: Backends,
    config: EngineConfig,
    /// What a new session gets unless it asks otherwise: the config's at start, replaced
    /// while serving by [`Engine::set_defaults`].
    defaults: parking_lot::RwLock<SessionDefaults>,
    /// Serializes decisions about one session's runs (start, end, queue hand-over), so
    /// "at most one active run" holds without races.
    session_locks: SyncMutex<HashMap<Uuid, Arc<Mutex<()>>>>,
    /// Runs executing here, by session.
    active: SyncMutex<HashMap<Uuid, RunSlot>>,
    /// Tool calls waiting for a human decision, by session.
    approvals: Arc<Approvals>,
    /// Sessions the reaper found with follow-ups and no running run in its last pass.
    waiting_follow_ups: SyncMutex<std::collections::HashSet<Uuid>>,
    /// Files' content (see [`crate::files`]).
    blobs: Arc<crate::files::Blobs>,
    /// The workspaces' shadow repositories ([`crate::checkpoints`]).
    checkpoints: crate::checkpoints::Checkpoints,
    /// Mints and checks session tokens (see [`crate::tokens`]).
    tokens: Arc<crate::tokens::SessionTokens>,
    /// Fires on shutdown: running runs end with a retryable error.
    shutdown: CancellationToken,
    /// Fires once shutdown has finished recording run outcomes; live streams end then.
    closed: CancellationToken,
}

impl Engine {
    /// Builds the engine and recovers from a previous crash: runs left `running` are closed
    /// with a retryable `RunError`, and stored follow-ups start.
    pub async fn start(
        store: Arc<dyn Store>,
        backends: Backends,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        let log = EventLog::new(store.clone(), config.live_buffer);
        let blobs = Arc::new(crate::files::Blobs::new(config.files_dir.clone()));
        blobs.sweep_temp();
        let meter =
            crate::Meter::new(store.clone(), &config.usage).map_err(EngineError::Unprocessable)?;
        let engine = Self {
            inner: Arc::new(Inner {
                team: crate::Team::new(store.clone()),
                meter: Arc::new(meter),
                store,
                log,
                backends,
                blobs,
                tokens: Arc::new(crate::tokens::SessionTokens::new()),
                checkpoints: crate::checkpoints::Checkpoints::new(config.checkpoints.clone())
                    .protecting(config.protected.clone()),
                defaults: parking_lot::RwLock::new(SessionDefaults {
                    model: config.default_model.clone(),
                    permission_mode: config.default_permission_mode,
                }),
                config,
                session_locks: SyncMutex::default(),
                active: SyncMutex::default(),
                approvals: Arc::default(),
                waiting_follow_ups: SyncMutex::default(),
                shutdown: CancellationToken::new(),
                closed: CancellationToken::new(),
            }),
        };
        engine.recover().await?;
        // A budget added to the configuration counts what its window spent before it.
        engine.inner.meter.seed_configured().await?;
        if let Some(retention) = engine.inner.config.event_retention {
            tokio::spawn(prune_loop(engine.clone(), retention));
        }
        tokio::spawn(renew_loop(engine.clone()));
        tokio::spawn(reap_loop(engine.clone()));
        Ok(engine)
    }

    /// The backends this server offers: the built-in agent (if configured), then the named
    /// ACP agents, by name.
    pub fn backend_specs(&self) -> Vec<switchboard_protocol::BackendSpec> {
        let b = &self.inner.backends;
        let mut names: Vec<&String> = b.named.keys().collect();
        names.sort();
        b.builtin
            .iter()
            .map(|_| switchboard_protocol::BackendSpec::Builtin)
            .chain(
                names
                    .into_iter()
                    .map(|n| switchboard_protocol::BackendSpec::Acp(n.clone())),
            )
            .collect()
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The team: users, their tokens and passwords, the audit log.
    pub fn team(&self) -> &crate::Team {
        &self.inner.team
    }

    /// Usage, prices and budgets.
    pub fn meter(&self) -> &Arc<crate::Meter> {
        &self.inner.meter
    }

    pub fn log(&self) -> &EventLog {
        &self.inner.log
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// What a new session gets now unless it asks otherwise.
    pub fn defaults(&self) -> SessionDefaults {
        self.inner.defaults.read().clone()
    }

    /// The model a new session (or a run of a session naming none) gets now.
    pub fn default_model(&self) -> Option<String> {
        self.inner.defaults.read().model.clone()
    }

    /// Replaces the defaults from now on: sessions created from now get them, and runs
    /// started from now of sessions naming no model get the model; runs under way keep
    /// theirs.
    pub fn set_defaults(&self, defaults: SessionDefaults) {
        *self.inner.defaults.write() = defaults;
    }

    fn session_lock(&self, id: Uuid) -> Arc<Mutex<()>> {
        let mut map = self.inner.session_locks.lock();
        map.entry(id).or_default().clone()
    }

    fn active_run_id(&self, session_id: Uuid) -> Option<Uuid> {
        let map = self.inner.active.lock();
        map.get(&session_id).map(|a| a.run_id)
    }

    async fn record(&self, id: Uuid) -> Result<SessionRecord, EngineError> {
        self.inner
            .store
            .get_session(id)
            .await?
            .ok_or(EngineError::SessionNotFound(id))
    }

    fn is_local_run(&self, run_id: Uuid) -> bool {
        let map = self.inner.active.lock();
        map.values().any(|a| a.run_id == run_id)
    }

    fn forget_active(&self, session_id: Uuid, run_id: Uuid) {
        let mut map = self.inner.active.lock();
        if map.get(&session_id).is_some_and(|a| a.run_id == run_id) {
            map.remove(&session_id);
        }
    }

    /// Waits until the session's active run (if any) has finished.
    pub async fn wait_idle(&self, session_id: Uuid) {
        loop {
            let task = {
                let mut map = self.inner.active.lock();
                map.get_mut(&session_id).and_then(|a| a.task.take())
            };
            match task {
                Some(t) => {
                    let _ = t.await;
                }
                None if self.active_run_id(session_id).is_some() => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                None => return,
            }
        }
    }

    /// Stops accepting work, ends running runs with a retryable error and waits (bounded)
    /// for them to record it.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.shutdown.cancel();
        let tasks: Vec<JoinHandle<()>> = {
            let mut map = self.inner.active.lock();
            map.values_mut().filter_map(|a| a.task.take()).collect()
        };
        let _ = tokio::time::timeout(grace, futures::future::join_all(tasks)).await;
        let backends = self.inner.backends.all();
        let _ = tokio::time::timeout(
            grace,
            futures::future::join_all(backends.iter().map(|b| b.shutdown())),
        )
        .await;
        self.inner.closed.cancel();
    }

    /// Fires when shutdown is complete; long-lived streams should end then.
    pub fn closed(&self) -> CancellationToken {
        self.inner.closed.clone()
    }
}

fn session_config(r: &SessionRecord) -> Result<SessionConfig, EngineError> {
    serde_json::from_value(r.config.clone())
        .map_err(|e| EngineError::Internal(format!("stored config of session {}: {e}", r.id)))
}

/// The conversation a run's agent gets from the session's recent messages
/// ([`crate::HistoryLimits`]): from the first user's message on, so that no turn is cut in
/// the middle (every run's messages start with its user's; none in the tail: nothing).
/// With it, whether older messages were left out (by the store or by that cut).
fn conversation(recent: &RecentMessages) -> (Vec<TranscriptMessage>, bool) {
    let msgs = &recent.messages;
    let start = msgs
        .iter()
        .position(|m| m.role == Role::User.as_str())
        .unwrap_or(msgs.len());
    let history = msgs[start..].iter().map(transcript_message).collect();
    (history, recent.earlier || start > 0)
}

fn transcript_message(m: &MessageRecord) -> TranscriptMessage {
    TranscriptMessage {
        id: m.id,
        run_id: m.run_id,
        role: Role::parse(&m.role).unwrap_or(Role::System),
        content: m.content.clone(),
        tool_calls: m
            .tool_calls
            .as_ref()
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .unwrap_or_default(),
        tool_call_id: m.tool_call_id.clone(),
        is_error: m.is_error,
        created_at: parse_ts(&m.created_at),
    }
}
