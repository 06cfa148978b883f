//! Sessions and runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use switchboard_protocol::{
    AgentEvent, AutoApprove, CreateSessionRequest, MessageType, PendingToolsResponse, Role,
    RunStatus, SendMessageRequest, SendMessageResponse, SessionConfig, SessionSummary,
    SteeringDelivery, ToolDecisionsRequest, ToolDecisionsResponse, TranscriptMessage, Usage,
};
use switchboard_store::{
    Lease, MessageRecord, NewRun, RunFinish, RunOutcome, RunRecord, RunState, SessionRecord, Store,
    StoreError,
};
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::approval::Approvals;
use crate::backend::{Backends, RunContext, RunHandle, RunInput};
use crate::bus::{ControlReply, ControlRequest};
use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::log::{EventLog, Subscription};
use crate::time::{now_rfc3339, parse_ts};

/// Most characters in a session title.
const MAX_TITLE: usize = 200;
/// Most bytes in one message's content.
const MAX_CONTENT: usize = 1 << 20;

/// A run that is executing in this process.
struct ActiveRun {
    run_id: Uuid,
    /// The run's lease in the store, renewed while it runs.
    lease: Lease,
    /// Fires when the lease could not be renewed because another instance took the run
    /// over: the run stops without writing anything more.
    lost: CancellationToken,
    /// When the last successful renewal started.
    renewed: Arc<StdMutex<std::time::Instant>>,
    cancel: CancellationToken,
    steering: mpsc::UnboundedSender<String>,
    task: Option<JoinHandle<()>>,
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

struct Inner {
    store: Arc<dyn Store>,
    log: EventLog,
    backends: Backends,
    config: EngineConfig,
    /// Serializes decisions about one session's runs (start, end, queue hand-over), so
    /// "at most one active run" holds without races.
    session_locks: StdMutex<HashMap<Uuid, Arc<Mutex<()>>>>,
    /// Runs executing here, by session.
    active: StdMutex<HashMap<Uuid, ActiveRun>>,
    /// Tool calls waiting for a human decision, by session.
    approvals: Arc<Approvals>,
    /// Sessions the reaper found with follow-ups and no running run in its last pass.
    waiting_follow_ups: StdMutex<std::collections::HashSet<Uuid>>,
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
        let engine = Self {
            inner: Arc::new(Inner {
                store,
                log,
                backends,
                config,
                session_locks: StdMutex::default(),
                active: StdMutex::default(),
                approvals: Arc::default(),
                waiting_follow_ups: StdMutex::default(),
                shutdown: CancellationToken::new(),
                closed: CancellationToken::new(),
            }),
        };
        engine.recover().await?;
        if let Some(retention) = engine.inner.config.event_retention {
            tokio::spawn(prune_loop(engine.clone(), retention));
        }
        tokio::spawn(renew_loop(engine.clone()));
        tokio::spawn(reap_loop(engine.clone()));
        Ok(engine)
    }

    /// Start-up. Alone on the store (`exclusive`), every run left running is closed at once
    /// and stored follow-ups start. Sharing it, runs are only closed when their lease runs
    /// out ([`Engine::reap`]), since another instance may be executing them.
    async fn recover(&self) -> Result<(), EngineError> {
        if !self.inner.config.exclusive {
            return self.reap().await;
        }
        let store = &self.inner.store;
        for run in store.runs_in_state(RunState::Running).await? {
            self.close_interrupted(&run, None, "interrupted by restart")
                .await?;
        }
        // Approvals whose run is over: a stale row (a failed delete) must not linger.
        for a in store.list_approvals().await? {
            store.delete_approval(a.session_id, a.run_id).await?;
        }
        self.start_waiting_follow_ups(false).await
    }

    /// Closes a run whose executor is gone (a restart, a dead instance) with a retryable
    /// `RunError`: its pending approval is rejected (the calls never run) and calls that
    /// were running get an error result, so the next request to the model has no
    /// unanswered call. Only calls without a result yet: a stale row must not answer a call
    /// twice. With `fence`, every write is made under the lease taken over.
    async fn close_interrupted(
        &self,
        run: &RunRecord,
        fence: Option<&Lease>,
        why: &str,
    ) -> Result<(), EngineError> {
        let store = &self.inner.store;
        let (session_id, run_id) = (run.session_id, run.id);
        let answered = self.answered_calls(session_id).await?;
        if let Some(a) = store.get_approval(session_id).await?
            && a.run_id == run_id
        {
            let calls: Vec<switchboard_protocol::ToolCall> =
                serde_json::from_value(a.tool_calls.clone()).unwrap_or_default();
            tracing::warn!(%session_id, %run_id, calls = calls.len(), "rejecting tool calls whose approval was interrupted");
            for call in calls.iter().filter(|c| !answered.contains(&c.id)) {
                let event = AgentEvent::ToolRejected {
                    run_id,
                    tool_call_id: call.id.clone(),
                    reason: why.to_string(),
                };
                self.close_call(session_id, run_id, call, event, fence, why)
                    .await?;
            }
            store.delete_approval(session_id, run_id).await?;
        }
        let answered = self.answered_calls(session_id).await?;
        let (msgs, _) = store.list_messages(session_id, u32::MAX, 0).await?;
        let open: Vec<switchboard_protocol::ToolCall> = msgs
            .iter()
            .filter(|m| m.run_id == Some(run_id))
            .map(transcript_message)
            .flat_map(|m| m.tool_calls)
            .filter(|c| !answered.contains(&c.id))
            .collect();
        for call in &open {
            let event = AgentEvent::ToolExecutionCompleted {
                run_id,
                tool_call_id: call.id.clone(),
                result: format!("{why}: no result was recorded"),
                is_error: true,
            };
            self.close_call(session_id, run_id, call, event, fence, why)
                .await?;
        }
        tracing::warn!(%run_id, %session_id, reason = why, "closing an interrupted run");
        let error = why.to_string();
        // The RunError and the run's end in one transaction (under the lease taken over).
        self.inner
            .log
            .append_finishing(
                session_id,
                &AgentEvent::RunError {
                    run_id,
                    error: error.clone(),
                    retryable: true,
                },
                RunFinish {
                    run_id,
                    outcome: RunOutcome::Failed { error },
                    at: now_rfc3339(),
                },
                fence,
            )
            .await?;
        Ok(())
    }

    /// One pass of the reaper (every eighth of the lease): runs whose lease ran out (their
    /// instance died or hangs) are taken over and closed, and follow-ups waiting in a
    /// session with no running run (their instance died before starting them) start here.
    /// One failing item does not stop the pass.
    pub async fn reap(&self) -> Result<(), EngineError> {
        let store = &self.inner.store;
        for expired in store.expired_leases("run:").await? {
            if let Err(e) = self.reap_one(&expired).await {
                tracing::warn!(lease = %expired.name, error = %e, "closing a run of a stopped instance failed");
            }
        }
        self.start_waiting_follow_ups(true).await
    }

    /// Takes over one expired run lease and closes its run.
    async fn reap_one(&self, expired: &Lease) -> Result<(), EngineError> {
        let store = &self.inner.store;
        let me = self.inner.config.instance_id.as_str();
        let Some(run_id) = expired.run_id() else {
            return Ok(());
        };
        // Our own lease running out while the run is here means a late renewal: the
        // renewal loop decides, not the reaper.
        if expired.holder == me && self.is_local_run(run_id) {
            return Ok(());
        }
        let Some(lease) = store
            .take_over_lease(expired, me, self.inner.config.run_lease_ttl)
            .await?
        else {
            return Ok(());
        };
        match store.get_run(run_id).await? {
            Some(run) if run.state == RunState::Running => {
                let lock = self.session_lock(run.session_id);
                let _guard = lock.lock().await;
                let holder = if expired.holder.is_empty() {
                    "an earlier version".to_string()
                } else {
                    expired.holder.clone()
                };
                let why =
                    format!("interrupted: instance {holder} stopped renewing the run's lease");
                match self.close_interrupted(&run, Some(&lease), &why).await {
                    Ok(()) | Err(EngineError::Store(StoreError::Fenced(_))) => {}
                    Err(e) => return Err(e),
                }
            }
            _ => {
                store.release_lease(&lease).await?;
            }
        }
        Ok(())
    }

    /// Starts the follow-ups of sessions that have some queued and no running run (after a
    /// restart, or when the instance that would have started them died). With `settled`,
    /// only sessions found so in the previous pass too: an instance that is finishing a run
    /// starts the next one itself a moment later, and must not be raced.
    async fn start_waiting_follow_ups(&self, settled: bool) -> Result<(), EngineError> {
        let store = &self.inner.store;
        let mut sessions: Vec<Uuid> = store
            .runs_in_state(RunState::Queued)
            .await?
            .iter()
            .map(|r| r.session_id)
            .collect();
        sessions.dedup();
        let mut idle = Vec::new();
        for session_id in sessions {
            if self.active_run_id(session_id).is_none()
                && store.active_run(session_id).await?.is_none()
            {
                idle.push(session_id);
            }
        }
        let ready: Vec<Uuid> = {
            let mut seen = self
                .inner
                .waiting_follow_ups
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let ready = idle
                .iter()
                .copied()
                .filter(|s| !settled || seen.contains(s))
                .collect();
            *seen = idle.into_iter().collect();
            ready
        };
        for session_id in ready {
            let lock = self.session_lock(session_id);
            let _guard = lock.lock().await;
            if self.active_run_id(session_id).is_none() {
                self.start_next_queued(session_id).await?;
            }
        }
        Ok(())
    }

    fn is_local_run(&self, run_id: Uuid) -> bool {
        let map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
        map.values().any(|a| a.run_id == run_id)
    }

    /// Ids of the session's tool calls that have a result in the transcript.
    async fn answered_calls(
        &self,
        session_id: Uuid,
    ) -> Result<std::collections::HashSet<String>, EngineError> {
        let (msgs, _) = self
            .inner
            .store
            .list_messages(session_id, u32::MAX, 0)
            .await?;
        Ok(msgs.into_iter().filter_map(|m| m.tool_call_id).collect())
    }

    /// Gives a call of an interrupted run an error result: the event, then the message.
    async fn close_call(
        &self,
        session_id: Uuid,
        run_id: Uuid,
        call: &switchboard_protocol::ToolCall,
        event: AgentEvent,
        fence: Option<&Lease>,
        why: &str,
    ) -> Result<(), EngineError> {
        self.inner
            .log
            .append_fenced(session_id, &event, fence)
            .await?;
        self.inner
            .store
            .append_message(
                &MessageRecord {
                    id: Uuid::now_v7(),
                    session_id,
                    run_id: Some(run_id),
                    role: Role::Tool.as_str().into(),
                    content: format!("The tool call was not run to completion: {why}"),
                    tool_calls: None,
                    tool_call_id: Some(call.id.clone()),
                    is_error: true,
                    created_at: now_rfc3339(),
                },
                fence,
            )
            .await?;
        Ok(())
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub fn log(&self) -> &EventLog {
        &self.inner.log
    }

    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    fn session_lock(&self, id: Uuid) -> Arc<Mutex<()>> {
        let mut map = self
            .inner
            .session_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.entry(id).or_default().clone()
    }

    fn active_run_id(&self, session_id: Uuid) -> Option<Uuid> {
        let map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
        map.get(&session_id).map(|a| a.run_id)
    }

    // --- sessions -------------------------------------------------------------------------

    pub async fn create_session(
        &self,
        req: CreateSessionRequest,
    ) -> Result<SessionSummary, EngineError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(EngineError::ShuttingDown);
        }
        let title = match req.title.as_deref().map(str::trim) {
            Some("") => return Err(EngineError::validation("title", "must not be empty")),
            Some(t) if t.chars().count() > MAX_TITLE => {
                return Err(EngineError::validation(
                    "title",
                    format!("longer than {MAX_TITLE} characters"),
                ));
            }
            Some(t) => t.to_string(),
            None => "New session".to_string(),
        };
        let cwd = match req.cwd.as_deref() {
            Some(c) => validate_cwd(Path::new(c))?,
            None => self.inner.config.default_cwd.clone(),
        };
        let backend = req.backend.unwrap_or_default();
        // An unknown backend is refused now rather than at the first message.
        self.inner.backends.resolve(&backend)?;
        if let Some(m) = &req.model
            && m.trim().is_empty()
        {
            return Err(EngineError::validation("model", "must not be empty"));
        }
        let config = SessionConfig {
            backend,
            model: req
                .model
                .or_else(|| self.inner.config.default_model.clone()),
            permission_mode: req
                .permission_mode
                .unwrap_or(self.inner.config.default_permission_mode),
            auto_approve: match req.auto_approve {
                Some(a) => a,
                None => self.inner.config.default_auto_approve.clone(),
            },
        };
        let now = now_rfc3339();
        let record = SessionRecord {
            id: Uuid::now_v7(),
            title,
            cwd: cwd.to_string_lossy().into_owned(),
            config: serde_json::to_value(&config)
                .map_err(|e| EngineError::Internal(format!("encoding config: {e}")))?,
            created_at: now.clone(),
            updated_at: now,
            last_seq: 0,
            archived_at: None,
        };
        self.inner.store.create_session(&record).await?;
        tracing::info!(session_id = %record.id, "session created");
        Ok(self.summary(&record, None))
    }

    /// Sharing the store, which sessions run and wait for approvals is in the store (the run
    /// may be on another instance): one session's, or everyone's. `None` when alone, where
    /// this instance's memory is the whole truth.
    async fn shared_state(
        &self,
        session: Option<Uuid>,
    ) -> Result<Option<SharedState>, EngineError> {
        if self.inner.config.exclusive {
            return Ok(None);
        }
        let store = &self.inner.store;
        let mut out = SharedState::default();
        let (running, approvals) = match session {
            Some(id) => (
                store.active_run(id).await?.into_iter().collect(),
                store.get_approval(id).await?.into_iter().collect(),
            ),
            None => (
                store.runs_in_state(RunState::Running).await?,
                store.list_approvals().await?,
            ),
        };
        for r in running {
            out.running.insert(r.session_id, r.id);
        }
        for a in approvals {
            let n = a.tool_calls.as_array().map_or(0, |v| v.len() as u32);
            out.approvals.insert(a.session_id, n);
        }
        Ok(Some(out))
    }

    fn summary(&self, r: &SessionRecord, shared: Option<&SharedState>) -> SessionSummary {
        let active = match shared {
            Some(s) => s.running.get(&r.id).copied(),
            None => self.active_run_id(r.id),
        };
        SessionSummary {
            id: r.id,
            title: r.title.clone(),
            cwd: r.cwd.clone(),
            created_at: parse_ts(&r.created_at),
            updated_at: parse_ts(&r.updated_at),
            run_status: if active.is_some() {
                RunStatus::Running
            } else {
                RunStatus::Idle
            },
            active_run_id: active,
            last_event_id: r.last_seq,
            backend: session_config(r).ok().map(|c| c.backend),
            archived: r.archived_at.is_some(),
            pending_approvals: match (self.inner.approvals.pending(r.id), shared) {
                (Some((_, calls)), _) => calls.len() as u32,
                (None, Some(s)) => s.approvals.get(&r.id).copied().unwrap_or(0),
                (None, None) => 0,
            },
        }
    }

    async fn record(&self, id: Uuid) -> Result<SessionRecord, EngineError> {
        self.inner
            .store
            .get_session(id)
            .await?
            .ok_or(EngineError::SessionNotFound(id))
    }

    pub async fn get_session(
        &self,
        id: Uuid,
    ) -> Result<(SessionSummary, SessionConfig), EngineError> {
        let r = self.record(id).await?;
        let shared = self.shared_state(Some(r.id)).await?;
        Ok((self.summary(&r, shared.as_ref()), session_config(&r)?))
    }

    /// A page of sessions, newest first: archived ones or the others.
    pub async fn list_sessions(
        &self,
        limit: u32,
        offset: u32,
        archived: bool,
    ) -> Result<(Vec<SessionSummary>, u64), EngineError> {
        let (rows, total) = self
            .inner
            .store
            .list_sessions(limit, offset, archived)
            .await?;
        let shared = self.shared_state(None).await?;
        Ok((
            rows.iter()
                .map(|r| self.summary(r, shared.as_ref()))
                .collect(),
            total,
        ))
    }

    /// Renames, archives or unarchives a session.
    pub async fn update_session(
        &self,
        id: Uuid,
        title: Option<String>,
        archived: Option<bool>,
    ) -> Result<SessionSummary, EngineError> {
        if let Some(t) = &title
            && t.trim().is_empty()
        {
            return Err(EngineError::Validation {
                field: "title".into(),
                message: "must not be empty".into(),
            });
        }
        let now = now_rfc3339();
        let update = switchboard_store::SessionUpdate {
            title,
            archived_at: archived.map(|a| a.then(|| now.clone())),
            updated_at: now,
        };
        if !self.inner.store.update_session(id, &update).await? {
            return Err(EngineError::SessionNotFound(id));
        }
        let shared = self.shared_state(Some(id)).await?;
        Ok(self.summary(&self.record(id).await?, shared.as_ref()))
    }

    /// Deletes a session; an active run is cancelled first.
    pub async fn delete_session(&self, id: Uuid) -> Result<(), EngineError> {
        let record = self.record(id).await?;
        // Queued follow-ups first, so the end of the active run does not start one.
        {
            let lock = self.session_lock(id);
            let _guard = lock.lock().await;
            while let Some(run) = self.inner.store.next_queued_run(id).await? {
                // Not cancelled: started meanwhile (by another instance); stopped below.
                if !self
                    .inner
                    .store
                    .cancel_queued_run(run.id, &now_rfc3339())
                    .await?
                {
                    break;
                }
            }
        }
        // A run executing on another instance is cancelled there (best effort: the session
        // is going, and that run's next write fails once it is gone).
        if self.active_run_id(id).is_none()
            && let Some(run) = self.inner.store.active_run(id).await?
            && let Err(e) = self
                .forward(
                    id,
                    ControlRequest::Cancel {
                        session_id: id,
                        run_id: run.id,
                    },
                )
                .await
        {
            tracing::warn!(session_id = %id, error = %e, "cancelling the session's run on its instance failed");
        }
        let task = {
            let mut map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
            map.get_mut(&id).and_then(|a| {
                a.cancel.cancel();
                a.task.take()
            })
        };
        if let Some(task) = task {
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
        let lock = self.session_lock(id);
        let _guard = lock.lock().await;
        if !self.inner.store.delete_session(id).await? {
            return Err(EngineError::SessionNotFound(id));
        }
        self.inner.log.forget(id);
        if let Ok(config) = session_config(&record)
            && let Ok(backend) = self.inner.backends.resolve(&config.backend)
        {
            backend.forget(id).await;
        }
        self.inner
            .session_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        tracing::info!(session_id = %id, "session deleted");
        Ok(())
    }

    // --- messages and runs ----------------------------------------------------------------

    /// Handles `POST /sessions/{id}/messages`: the run started, queued or steered (and, for
    /// steering, when the agent will see it).
    pub async fn send_message(
        &self,
        session_id: Uuid,
        req: SendMessageRequest,
    ) -> Result<SendMessageResponse, EngineError> {
        let delivery = match req.kind {
            MessageType::Steering => Some(self.steering_delivery(session_id).await?),
            _ => None,
        };
        let run_id = self.send_message_inner(session_id, req).await?;
        Ok(SendMessageResponse {
            run_id,
            steering: delivery,
        })
    }

    async fn steering_delivery(&self, session_id: Uuid) -> Result<SteeringDelivery, EngineError> {
        let config = session_config(&self.record(session_id).await?)?;
        Ok(self.inner.backends.resolve(&config.backend)?.steering())
    }

    async fn send_message_inner(
        &self,
        session_id: Uuid,
        req: SendMessageRequest,
    ) -> Result<Uuid, EngineError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(EngineError::ShuttingDown);
        }
        validate_message(&req)?;
        self.record(session_id).await?;
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        match req.kind {
            MessageType::Steering => {
                drop(_guard);
                match self
                    .steer_local(session_id, req.run_id, req.message.content.clone())
                    .await
                {
                    Err(EngineError::SessionNotRunning(_)) => {}
                    other => return other,
                }
                match self
                    .forward(
                        session_id,
                        ControlRequest::Steer {
                            session_id,
                            run_id: req.run_id,
                            content: req.message.content,
                        },
                    )
                    .await?
                {
                    Some(ControlReply::Steered { run_id }) => Ok(run_id),
                    Some(other) => Err(unexpected(other)),
                    None => Err(EngineError::SessionNotRunning(session_id)),
                }
            }
            MessageType::Message => {
                if self.active_run_id(session_id).is_some()
                    || (!self.inner.config.exclusive
                        && self.inner.store.active_run(session_id).await?.is_some())
                {
                    return Err(EngineError::SessionAlreadyRunning(session_id));
                }
                let run = self.new_run(session_id, &req, true).await?;
                if let Err(e) = self.start_run(session_id, run.id).await {
                    // Another instance started a run in between: this one must not linger
                    // at the front of the queue. If it is not queued any more, another
                    // instance took it from the front of the queue and runs it: fine.
                    return match self
                        .inner
                        .store
                        .cancel_queued_run(run.id, &now_rfc3339())
                        .await
                    {
                        Ok(false) => Ok(run.id),
                        _ => Err(e),
                    };
                }
                Ok(run.id)
            }
            MessageType::FollowUp => {
                let run = self.new_run(session_id, &req, false).await?;
                self.inner
                    .log
                    .append(
                        session_id,
                        &AgentEvent::FollowUpQueued {
                            run_id: run.id,
                            content: req.message.content,
                        },
                    )
                    .await?;
                if self.active_run_id(session_id).is_none() {
                    self.start_next_queued(session_id).await?;
                }
                Ok(run.id)
            }
        }
    }

    async fn new_run(
        &self,
        session_id: Uuid,
        req: &SendMessageRequest,
        front: bool,
    ) -> Result<RunRecord, EngineError> {
        let overrides = req.overrides.clone().filter(|o| !o.is_empty());
        let input = RunInput {
            content: req.message.content.clone(),
            // As on the stakpak server, the overrides' model wins over the top-level one.
            model: overrides
                .as_ref()
                .and_then(|o| o.model.clone())
                .or_else(|| req.model.clone()),
            context: req.context.clone(),
            overrides,
        };
        let new = NewRun {
            id: Uuid::now_v7(),
            session_id,
            input: serde_json::to_value(&input)
                .map_err(|e| EngineError::Internal(e.to_string()))?,
            created_at: now_rfc3339(),
        };
        let run = if front {
            self.inner.store.enqueue_run_front(&new).await?
        } else {
            self.inner.store.enqueue_run(&new).await?
        };
        Ok(run)
    }

    /// Starts the front of the follow-up queue, if any. Caller holds the session lock.
    async fn start_next_queued(&self, session_id: Uuid) -> Result<Option<Uuid>, EngineError> {
        if self.inner.shutdown.is_cancelled() {
            return Ok(None);
        }
        match self.inner.store.next_queued_run(session_id).await? {
            Some(run) => match self.start_run(session_id, run.id).await {
                Ok(()) => Ok(Some(run.id)),
                // Running elsewhere (another instance), or started there meanwhile: the
                // follow-up waits for that run's end, like any other.
                Err(EngineError::SessionAlreadyRunning(_)) => Ok(None),
                Err(e) => Err(e),
            },
            None => Ok(None),
        }
    }

    /// Marks a queued run running and spawns its task. Caller holds the session lock.
    ///
    /// Boxed with an explicit `Send` bound: a run's end starts the next run, so this future
    /// is part of its own type and the compiler needs the bound spelled out.
    fn start_run(
        &self,
        session_id: Uuid,
        run_id: Uuid,
    ) -> futures::future::BoxFuture<'_, Result<(), EngineError>> {
        Box::pin(self.start_run_inner(session_id, run_id))
    }

    async fn start_run_inner(&self, session_id: Uuid, run_id: Uuid) -> Result<(), EngineError> {
        let session = self.record(session_id).await?;
        let config = session_config(&session)?;
        let backend = self.inner.backends.resolve(&config.backend)?;
        let config_ = &self.inner.config;
        let (run, lease) = self
            .inner
            .store
            .start_run(
                run_id,
                &now_rfc3339(),
                &config_.instance_id,
                config_.run_lease_ttl,
            )
            .await
            .map_err(|e| match e {
                switchboard_store::StoreError::Conflict(_) => {
                    EngineError::SessionAlreadyRunning(session_id)
                }
                other => other.into(),
            })?;
        let input: RunInput = serde_json::from_value(run.input.clone())
            .map_err(|e| EngineError::Internal(format!("stored run input: {e}")))?;
        let (steer_tx, steer_rx) = mpsc::unbounded_channel();
        let cancel = self.inner.shutdown.child_token();
        let lost = CancellationToken::new();
        {
            let mut map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
            map.insert(
                session_id,
                ActiveRun {
                    run_id,
                    lease: lease.clone(),
                    lost: lost.clone(),
                    renewed: Arc::new(StdMutex::new(std::time::Instant::now())),
                    cancel: cancel.clone(),
                    steering: steer_tx,
                    task: None,
                },
            );
        }
        let engine = self.clone();
        let task = tokio::spawn(async move {
            engine
                .execute(
                    session, config, run_id, input, backend, steer_rx, cancel, lease, lost,
                )
                .await;
        });
        let mut map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(a) = map.get_mut(&session_id)
            && a.run_id == run_id
        {
            a.task = Some(task);
        }
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    async fn execute(
        &self,
        session: SessionRecord,
        config: SessionConfig,
        run_id: Uuid,
        input: RunInput,
        backend: Arc<dyn crate::Backend>,
        steering: mpsc::UnboundedReceiver<String>,
        cancel: CancellationToken,
        lease: Lease,
        lost: CancellationToken,
    ) {
        let session_id = session.id;
        let fence = Some(&lease);
        let log = &self.inner.log;
        let store = &self.inner.store;
        let prepared = async {
            log.append_fenced(
                session_id,
                &AgentEvent::RunStarted {
                    run_id,
                    content: Some(input.content.clone()),
                },
                fence,
            )
            .await?;
            store.touch_session(session_id, &now_rfc3339()).await?;
            let (history, _) = store.list_messages(session_id, u32::MAX, 0).await?;
            let history = history.iter().map(transcript_message).collect::<Vec<_>>();
            store
                .append_message(
                    &MessageRecord {
                        id: Uuid::now_v7(),
                        session_id,
                        run_id: Some(run_id),
                        role: Role::User.as_str().into(),
                        content: input.content.clone(),
                        tool_calls: None,
                        tool_call_id: None,
                        is_error: false,
                        created_at: now_rfc3339(),
                    },
                    fence,
                )
                .await?;
            Ok::<_, EngineError>(history)
        }
        .await;
        let deltas = log.pipeline(session_id, fence);
        let result = match prepared {
            Ok(history) => {
                // A run's `auto_approve` override stands in for the session's; the
                // permission mode still bounds it (see `approval::settle`).
                let auto_approve = input
                    .overrides
                    .as_ref()
                    .and_then(|o| o.auto_approve.clone())
                    .unwrap_or_else(|| config.auto_approve.clone());
                let ctx = RunContext {
                    session_id,
                    run_id,
                    cwd: PathBuf::from(&session.cwd),
                    input,
                    history,
                    handle: RunHandle {
                        session_id,
                        run_id,
                        log: log.clone(),
                        store: store.clone(),
                        fence: Some(lease.clone()),
                        deltas: deltas.clone(),
                        steering,
                        mode: config.permission_mode,
                        auto_approve,
                        approvals: self.inner.approvals.clone(),
                        approval_timeout: self.inner.config.approval_timeout,
                        cancel: cancel.clone(),
                    },
                    config,
                    cancel: cancel.clone(),
                };
                let result = backend.run(ctx).await;
                // Every delta the run streamed is committed before its end is written; one
                // that could not be stored fails the run (retryable) rather than leave a
                // reply with a hole in it looking complete.
                match (result, deltas.flush().await) {
                    (Ok(_), Err(e)) => Err(crate::BackendError::new(
                        format!("the reply could not be stored: {e}"),
                        true,
                    )),
                    (r, _) => r,
                }
            }
            Err(e) => Err(e.into()),
        };
        if lost.is_cancelled() {
            // Another instance took the run over (this one was paused or cut off): it
            // closes the run; nothing more is written from here.
            tracing::warn!(%session_id, %run_id, "run lease lost: the run was taken over elsewhere");
            self.forget_active(session_id, run_id);
            return;
        }
        let (outcome, event) = if self.inner.shutdown.is_cancelled() {
            let error = "server shutting down".to_string();
            (
                RunOutcome::Failed {
                    error: error.clone(),
                },
                AgentEvent::RunError {
                    run_id,
                    error,
                    retryable: true,
                },
            )
        } else if cancel.is_cancelled() {
            (
                RunOutcome::Cancelled,
                AgentEvent::RunCompleted {
                    run_id,
                    total_turns: result.as_ref().map(|s| s.total_turns).unwrap_or(0),
                    total_usage: result.as_ref().map(|s| s.usage).unwrap_or_default(),
                    stop_reason: "cancelled".into(),
                },
            )
        } else {
            match result {
                Ok(s) => (
                    RunOutcome::Completed {
                        stop_reason: s.stop_reason.clone(),
                    },
                    AgentEvent::RunCompleted {
                        run_id,
                        total_turns: s.total_turns,
                        total_usage: s.usage,
                        stop_reason: s.stop_reason,
                    },
                ),
                Err(e) => (
                    RunOutcome::Failed {
                        error: e.message.clone(),
                    },
                    AgentEvent::RunError {
                        run_id,
                        error: e.message,
                        retryable: e.retryable,
                    },
                ),
            }
        };
        self.finish(session_id, run_id, outcome, event, &lease)
            .await;
    }

    fn forget_active(&self, session_id: Uuid, run_id: Uuid) {
        let mut map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&session_id).is_some_and(|a| a.run_id == run_id) {
            map.remove(&session_id);
        }
    }

    /// Closes a run: store state, the active slot, the terminal event, then the next
    /// follow-up — all under the session lock so nothing slips in between.
    async fn finish(
        &self,
        session_id: Uuid,
        run_id: Uuid,
        outcome: RunOutcome,
        event: AgentEvent,
        lease: &Lease,
    ) {
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        // The terminal event and the run's end commit together, under the run's lease. A
        // database hiccup is retried a few times; the outcome is worth it.
        let finish = RunFinish {
            run_id,
            outcome,
            at: now_rfc3339(),
        };
        // Not active here from now on: whoever sees the terminal event finds the session idle
        // (requests for it wait for the session lock held here).
        self.forget_active(session_id, run_id);
        let mut attempt = 0;
        let recorded = loop {
            let r = self
                .inner
                .log
                .append_finishing(session_id, &event, finish.clone(), Some(lease))
                .await;
            match r {
                Err(EngineError::Store(StoreError::Database(_))) if attempt < 3 => {
                    tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                    attempt += 1;
                }
                other => break other,
            }
        };
        match recorded {
            Ok(_) => {}
            // Taken over (and closed) by another instance: its end is recorded there.
            Err(EngineError::Store(StoreError::Fenced(_) | StoreError::RunNotActive(_))) => {
                tracing::warn!(%run_id, "run was taken over by another instance; not recording its end here");
                return;
            }
            Err(EngineError::SessionNotFound(_)) => return,
            // Still running in the store, under a lease nobody renews any more: the reaper
            // closes it (with a retryable RunError) once the lease runs out, so the run gets
            // exactly one terminal event.
            Err(e) => {
                tracing::error!(%run_id, error = %e, "could not record the run's end; it is closed when its lease runs out");
                return;
            }
        }
        tracing::info!(%session_id, %run_id, kind = event.kind(), "run finished");
        if let Err(e) = self.start_next_queued(session_id).await {
            tracing::warn!(%session_id, error = %e, "could not start queued follow-up");
        }
    }

    /// Steers the session's run if it executes here.
    async fn steer_local(
        &self,
        session_id: Uuid,
        given: Option<Uuid>,
        content: String,
    ) -> Result<Uuid, EngineError> {
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        let active = {
            let map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
            map.get(&session_id)
                .map(|a| (a.run_id, a.steering.clone(), a.lease.clone()))
        };
        let Some((run_id, tx, lease)) = active else {
            return Err(EngineError::SessionNotRunning(session_id));
        };
        if let Some(given) = given
            && given != run_id
        {
            return Err(EngineError::RunMismatch {
                given,
                active: Some(run_id),
            });
        }
        // Durable first: the event is in the log before the agent can see it.
        self.inner
            .log
            .append_fenced(
                session_id,
                &AgentEvent::SteeringReceived {
                    run_id,
                    content: content.clone(),
                },
                Some(&lease),
            )
            .await?;
        tx.send(content)
            .map_err(|_| EngineError::SessionNotRunning(session_id))?;
        Ok(run_id)
    }

    /// Sends a control request to the instance that executes the session's run, when that
    /// is another instance and a bus connects them. `None` when there is no such instance
    /// (no running run, no bus, or the run is ours after all).
    async fn forward(
        &self,
        session_id: Uuid,
        request: ControlRequest,
    ) -> Result<Option<ControlReply>, EngineError> {
        if self.inner.config.exclusive {
            return Ok(None);
        }
        let Some(bus) = self.inner.log.bus().cloned() else {
            return Ok(None);
        };
        let store = &self.inner.store;
        let Some(run) = store.active_run(session_id).await? else {
            return Ok(None);
        };
        let Some(owner) = store.get_lease(&Lease::run_name(run.id)).await? else {
            return Ok(None);
        };
        // Ours after all, or left by an earlier version (no holder): nobody to ask.
        if owner.lease.holder == self.inner.config.instance_id || owner.lease.holder.is_empty() {
            return Ok(None);
        }
        tracing::debug!(%session_id, instance = %owner.lease.holder, "forwarding a control request");
        match bus.control(&owner.lease.holder, request).await {
            Ok(ControlReply::Error { code, message }) => Err(EngineError::Remote { code, message }),
            Ok(reply) => Ok(Some(reply)),
            Err(reason) => Err(EngineError::OwnerUnreachable {
                instance: owner.lease.holder,
                reason,
            }),
        }
    }

    /// Answers a control request another instance forwarded: only runs executing here are
    /// considered (never forwarded again).
    pub async fn handle_control(&self, request: ControlRequest) -> ControlReply {
        let result = match request {
            ControlRequest::Steer {
                session_id,
                run_id,
                content,
            } => self
                .steer_local(session_id, run_id, content)
                .await
                .map(|run_id| ControlReply::Steered { run_id }),
            ControlRequest::Cancel { session_id, run_id } => {
                let active = {
                    let map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
                    map.get(&session_id).map(|a| (a.run_id, a.cancel.clone()))
                };
                match active {
                    Some((id, token)) if id == run_id => {
                        token.cancel();
                        Ok(ControlReply::Cancelled)
                    }
                    other => Err(EngineError::RunMismatch {
                        given: run_id,
                        active: other.map(|o| o.0),
                    }),
                }
            }
            ControlRequest::Decide {
                session_id,
                request,
            } => self
                .inner
                .approvals
                .decide(session_id, request.run_id, &request.decisions)
                .map(|()| ControlReply::Decided {
                    response: ToolDecisionsResponse {
                        accepted: true,
                        run_id: request.run_id,
                    },
                }),
            ControlRequest::Pending { session_id } => Ok(ControlReply::Pending {
                response: match self.inner.approvals.pending(session_id) {
                    Some((run_id, tool_calls)) => PendingToolsResponse {
                        run_id: Some(run_id),
                        tool_calls,
                    },
                    None => PendingToolsResponse {
                        run_id: None,
                        tool_calls: Vec::new(),
                    },
                },
            }),
        };
        result.unwrap_or_else(|e| ControlReply::Error {
            code: e.code(),
            message: e.to_string(),
        })
    }

    /// Renews the leases of the runs executing here. A lease that cannot be renewed was
    /// taken over: that run stops at once and writes nothing more.
    async fn renew_leases(&self) {
        type Renewing = (
            Uuid,
            Lease,
            CancellationToken,
            CancellationToken,
            Arc<StdMutex<std::time::Instant>>,
        );
        let ttl = self.inner.config.run_lease_ttl;
        let runs: Vec<Renewing> = {
            let map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
            map.values()
                .map(|a| {
                    (
                        a.run_id,
                        a.lease.clone(),
                        a.lost.clone(),
                        a.cancel.clone(),
                        a.renewed.clone(),
                    )
                })
                .collect()
        };
        for (run_id, lease, lost, cancel, renewed) in runs {
            let started = std::time::Instant::now();
            // Bounded: a renewal stuck longer than this is as good as failed.
            let result = tokio::time::timeout(ttl / 4, self.inner.store.renew_lease(&lease, ttl))
                .await
                .unwrap_or_else(|_| Err(StoreError::Database("renewing timed out".into())));
            let stop = match result {
                Ok(true) => {
                    *renewed.lock().unwrap_or_else(|p| p.into_inner()) = started;
                    false
                }
                Ok(false) => {
                    tracing::warn!(%run_id, "run lease lost to another instance; stopping the run here");
                    true
                }
                Err(e) => {
                    let since = renewed.lock().unwrap_or_else(|p| p.into_inner()).elapsed();
                    tracing::warn!(%run_id, error = %e, "renewing a run lease failed");
                    // Past the lease another instance may have taken the run over: stop
                    // rather than act next to it.
                    since >= ttl
                }
            };
            if stop && self.is_local_run(run_id) {
                lost.cancel();
                cancel.cancel();
            }
        }
    }

    /// Cancels the active run (or a queued follow-up) with this id.
    pub async fn cancel(&self, session_id: Uuid, run_id: Uuid) -> Result<(), EngineError> {
        self.record(session_id).await?;
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        let active = {
            let map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
            map.get(&session_id).map(|a| (a.run_id, a.cancel.clone()))
        };
        match active {
            Some((id, token)) if id == run_id => {
                token.cancel();
                Ok(())
            }
            other => {
                // A queued follow-up of this session can be cancelled before it starts.
                if let Some(run) = self.inner.store.get_run(run_id).await?
                    && run.session_id == session_id
                {
                    if run.state == RunState::Queued
                        && self
                            .inner
                            .store
                            .cancel_queued_run(run_id, &now_rfc3339())
                            .await?
                    {
                        return Ok(());
                    }
                    // Started meanwhile, maybe elsewhere: read it again.
                    let running = self
                        .inner
                        .store
                        .get_run(run_id)
                        .await?
                        .is_some_and(|r| r.state == RunState::Running);
                    if running && other.is_none() {
                        drop(_guard);
                        match self
                            .forward(session_id, ControlRequest::Cancel { session_id, run_id })
                            .await?
                        {
                            Some(ControlReply::Cancelled) => return Ok(()),
                            Some(other) => return Err(unexpected(other)),
                            None => {}
                        }
                    }
                }
                Err(EngineError::RunMismatch {
                    given: run_id,
                    active: other.map(|o| o.0),
                })
            }
        }
    }

    /// The tool calls of the session that wait for a decision.
    pub async fn pending_tools(
        &self,
        session_id: Uuid,
    ) -> Result<PendingToolsResponse, EngineError> {
        self.record(session_id).await?;
        if let Some((run_id, tool_calls)) = self.inner.approvals.pending(session_id) {
            return Ok(PendingToolsResponse {
                run_id: Some(run_id),
                tool_calls,
            });
        }
        if self.active_run_id(session_id).is_none() {
            match self
                .forward(session_id, ControlRequest::Pending { session_id })
                .await?
            {
                Some(ControlReply::Pending { response }) => return Ok(response),
                Some(other) => return Err(unexpected(other)),
                None => {}
            }
        }
        Ok(PendingToolsResponse {
            run_id: None,
            tool_calls: Vec::new(),
        })
    }

    /// Decides pending tool calls. Calls not named stay pending; the run goes on once all
    /// are decided.
    pub async fn decide_tools(
        &self,
        session_id: Uuid,
        req: ToolDecisionsRequest,
    ) -> Result<ToolDecisionsResponse, EngineError> {
        self.record(session_id).await?;
        match self
            .inner
            .approvals
            .decide(session_id, req.run_id, &req.decisions)
        {
            Err(EngineError::NoPendingApproval) if self.active_run_id(session_id).is_none() => {
                match self
                    .forward(
                        session_id,
                        ControlRequest::Decide {
                            session_id,
                            request: req,
                        },
                    )
                    .await?
                {
                    Some(ControlReply::Decided { response }) => return Ok(response),
                    Some(other) => return Err(unexpected(other)),
                    None => return Err(EngineError::NoPendingApproval),
                }
            }
            other => other?,
        }
        tracing::info!(%session_id, run_id = %req.run_id, decisions = req.decisions.len(), "tool decisions received");
        Ok(ToolDecisionsResponse {
            accepted: true,
            run_id: req.run_id,
        })
    }

    /// Waits until the session's active run (if any) has finished.
    pub async fn wait_idle(&self, session_id: Uuid) {
        loop {
            let task = {
                let mut map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
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

    pub async fn messages(
        &self,
        session_id: Uuid,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<TranscriptMessage>, u64), EngineError> {
        self.record(session_id).await?;
        let (rows, total) = self
            .inner
            .store
            .list_messages(session_id, limit, offset)
            .await?;
        Ok((rows.iter().map(transcript_message).collect(), total))
    }

    /// Renders the whole transcript as Markdown.
    pub async fn transcript_markdown(&self, session_id: Uuid) -> Result<String, EngineError> {
        let r = self.record(session_id).await?;
        let (rows, _) = self
            .inner
            .store
            .list_messages(session_id, u32::MAX, 0)
            .await?;
        let msgs: Vec<_> = rows.iter().map(transcript_message).collect();
        Ok(crate::markdown::render_transcript(&r.title, &msgs))
    }

    /// Follows a session's events from `seq > after`.
    pub async fn subscribe(
        &self,
        session_id: Uuid,
        after: u64,
    ) -> Result<Subscription, EngineError> {
        self.record(session_id).await?;
        self.inner.log.subscribe(session_id, after).await
    }

    /// Stops accepting work, ends running runs with a retryable error and waits (bounded)
    /// for them to record it.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.shutdown.cancel();
        let tasks: Vec<JoinHandle<()>> = {
            let mut map = self.inner.active.lock().unwrap_or_else(|p| p.into_inner());
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

/// Checks a message before anything is stored: every refusal names the field.
fn validate_message(req: &SendMessageRequest) -> Result<(), EngineError> {
    use switchboard_protocol::{
        MAX_CONTEXT_CONTENT_CHARS, MAX_CONTEXT_ITEMS, MAX_CONTEXT_NAME_CHARS,
        MAX_CONTEXT_TOTAL_CHARS, MAX_SYSTEM_PROMPT_CHARS, MAX_TURNS_RANGE,
    };
    if req.message.role != Role::User {
        return Err(EngineError::validation("message.role", "must be \"user\""));
    }
    if req.message.content.trim().is_empty() {
        return Err(EngineError::validation(
            "message.content",
            "must not be empty",
        ));
    }
    if req.message.content.len() > MAX_CONTENT {
        return Err(EngineError::validation(
            "message.content",
            format!("longer than {MAX_CONTENT} bytes"),
        ));
    }
    if let Some(m) = &req.model
        && m.trim().is_empty()
    {
        return Err(EngineError::validation("model", "must not be empty"));
    }
    if req.context.len() > MAX_CONTEXT_ITEMS {
        return Err(EngineError::validation(
            "context",
            format!("at most {MAX_CONTEXT_ITEMS} items"),
        ));
    }
    let mut total = 0usize;
    for (i, c) in req.context.iter().enumerate() {
        if c.name.trim().is_empty() {
            return Err(EngineError::validation(
                &format!("context[{i}].name"),
                "must not be empty",
            ));
        }
        if c.name.chars().count() > MAX_CONTEXT_NAME_CHARS {
            return Err(EngineError::validation(
                &format!("context[{i}].name"),
                format!("longer than {MAX_CONTEXT_NAME_CHARS} characters"),
            ));
        }
        let len = c.content.chars().count();
        if len > MAX_CONTEXT_CONTENT_CHARS {
            return Err(EngineError::validation(
                &format!("context[{i}].content"),
                format!("longer than {MAX_CONTEXT_CONTENT_CHARS} characters"),
            ));
        }
        total += len;
    }
    if total > MAX_CONTEXT_TOTAL_CHARS {
        return Err(EngineError::validation(
            "context",
            format!("more than {MAX_CONTEXT_TOTAL_CHARS} characters of content in all"),
        ));
    }
    if let Some(o) = &req.overrides {
        if let Some(m) = &o.model
            && m.trim().is_empty()
        {
            return Err(EngineError::validation(
                "overrides.model",
                "must not be empty",
            ));
        }
        if let Some(n) = o.max_turns
            && !MAX_TURNS_RANGE.contains(&n)
        {
            return Err(EngineError::validation(
                "overrides.max_turns",
                format!(
                    "must be between {} and {}",
                    MAX_TURNS_RANGE.start(),
                    MAX_TURNS_RANGE.end()
                ),
            ));
        }
        if let Some(p) = &o.system_prompt
            && p.chars().count() > MAX_SYSTEM_PROMPT_CHARS
        {
            return Err(EngineError::validation(
                "overrides.system_prompt",
                format!("longer than {MAX_SYSTEM_PROMPT_CHARS} characters"),
            ));
        }
    }
    // Refused, never ignored: a caller who asked for a sandbox must not get a run without.
    if req.sandbox == Some(true) {
        return Err(EngineError::SandboxUnsupported);
    }
    Ok(())
}

fn validate_cwd(p: &Path) -> Result<PathBuf, EngineError> {
    if !p.is_absolute() {
        return Err(EngineError::validation("cwd", "must be an absolute path"));
    }
    match std::fs::metadata(p) {
        Ok(m) if m.is_dir() => p
            .canonicalize()
            .map_err(|e| EngineError::validation("cwd", format!("{}: {e}", p.display()))),
        Ok(_) => Err(EngineError::validation(
            "cwd",
            format!("{} is not a directory", p.display()),
        )),
        Err(e) => Err(EngineError::validation(
            "cwd",
            format!("{}: {e}", p.display()),
        )),
    }
}

fn session_config(r: &SessionRecord) -> Result<SessionConfig, EngineError> {
    serde_json::from_value(r.config.clone())
        .map_err(|e| EngineError::Internal(format!("stored config of session {}: {e}", r.id)))
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

/// The answer a forwarded request should not get.
fn unexpected(reply: ControlReply) -> EngineError {
    EngineError::Internal(format!(
        "unexpected answer from the run's instance: {reply:?}"
    ))
}

async fn renew_loop(engine: Engine) {
    let period = (engine.inner.config.run_lease_ttl / 3).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = engine.inner.closed.cancelled() => return,
            _ = tick.tick() => {}
        }
        engine.renew_leases().await;
    }
}

async fn reap_loop(engine: Engine) {
    // An eighth of the lease: a dead instance's runs are closed at most that long after
    // their leases ran out (one indexed query per tick when there is nothing to do).
    let period = (engine.inner.config.run_lease_ttl / 8).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = engine.inner.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        if let Err(e) = engine.reap().await {
            tracing::warn!(error = %e, "closing runs of stopped instances failed");
        }
    }
}

async fn prune_loop(engine: Engine, retention: Duration) {
    let mut tick = tokio::time::interval(Duration::from_secs(3600).min(retention));
    loop {
        tokio::select! {
            _ = engine.inner.shutdown.cancelled() => return,
            _ = tick.tick() => {}
        }
        let cutoff = chrono::Utc::now() - chrono::Duration::from_std(retention).unwrap_or_default();
        let cutoff = cutoff.to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        match engine.inner.store.prune_events_before(&cutoff).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(pruned = n, "pruned events past retention"),
            Err(e) => tracing::warn!(error = %e, "pruning events failed"),
        }
    }
}

// Silence unused-import lint for types only used in signatures of other modules.
#[allow(dead_code)]
fn _types(_: AutoApprove, _: Usage) {}
