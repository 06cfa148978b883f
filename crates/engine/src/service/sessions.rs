//! Sessions: create, read, list, update, delete.

use super::*;
use switchboard_protocol::UpdateSessionRequest;

impl Engine {
    // --- sessions -------------------------------------------------------------------------

    pub async fn create_session(
        &self,
        req: CreateSessionRequest,
    ) -> Result<SessionSummary, EngineError> {
        self.create_session_as(None, req).await
    }

    /// [`Engine::create_session`] for `owner` (a user's name; `None`: the built-in admin).
    pub async fn create_session_as(
        &self,
        owner: Option<&str>,
        req: CreateSessionRequest,
    ) -> Result<SessionSummary, EngineError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(EngineError::ShuttingDown);
        }
        let title = match req.title.as_deref() {
            Some(t) => valid_title(t)?,
            None => "New session".to_string(),
        };
        if let Some(a) = &req.auto_approve {
            validate_auto_approve(a)?;
        }
        let cwd = match req.cwd.as_deref() {
            Some(c) => validate_cwd(Path::new(c), &self.inner.config.protected)?,
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
        let mcp_servers = req.mcp_servers.unwrap_or_default();
        validate_mcp_servers(&mcp_servers)?;
        validate_sandbox(req.sandbox.as_ref())?;
        let defaults = self.defaults();
        let config = SessionConfig {
            mcp_servers,
            sandbox: req.sandbox,
            backend,
            permission_mode: req.permission_mode.unwrap_or(defaults.permission_mode),
            model: req.model.or(defaults.model),
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
            owner: owner.map(str::to_string),
        };
        self.inner.store.create_session(&record).await?;
        tracing::info!(session_id = %record.id, "session created");
        Ok(self.summary(&record, None))
    }

    /// A new session, belonging to `owner`, whose history is session `id`'s up to log
    /// position `at` (its events, transcript and files; docs/api.md "Fork"), with the same
    /// backend, workspace and configuration: for trying another direction from there. `at`
    /// defaults to the log's end, or to just before the run under way. Refused for a point
    /// inside a run (409, naming the points around it), past the log or in its pruned part
    /// (422: what the session holds decides), and for an agent over ACP, which keeps its own
    /// history that Switchboard cannot cut (422).
    pub async fn fork_session(
        &self,
        owner: Option<&str>,
        id: Uuid,
        at: Option<u64>,
        title: Option<&str>,
    ) -> Result<SessionSummary, EngineError> {
        use switchboard_store::ForkOutcome;
        if self.inner.shutdown.is_cancelled() {
            return Err(EngineError::ShuttingDown);
        }
        let source = self.record(id).await?;
        let config = session_config(&source)?;
        if let switchboard_protocol::BackendSpec::Acp(agent) = &config.backend {
            return Err(EngineError::Unprocessable(format!(
                "this session's agent ({agent}) runs over ACP and keeps its own history, \
                 which Switchboard cannot cut at a point: only sessions of the built-in agent fork"
            )));
        }
        let title = match title {
            Some(t) => valid_title(t)?,
            None => fork_title(&source.title),
        };
        // The session's MCP servers carry their owner's credentials (env, headers): a fork
        // made by someone else does not take them along.
        let mut config = config;
        if owner != source.owner.as_deref() && !config.mcp_servers.is_empty() {
            tracing::info!(session_id = %id, "a fork by another user leaves the owner's MCP servers behind");
            config.mcp_servers.clear();
        }
        let config = serde_json::to_value(&config)
            .map_err(|e| EngineError::Internal(format!("encoding config: {e}")))?;
        let now = now_rfc3339();
        let mut record = SessionRecord {
            id: Uuid::now_v7(),
            title,
            cwd: source.cwd.clone(),
            config,
            created_at: now.clone(),
            updated_at: now,
            last_seq: 0,
            archived_at: None,
            owner: owner.map(str::to_string),
        };
        let mut point = at.unwrap_or(source.last_seq);
        loop {
            match self.inner.store.fork_session(id, point, &record).await? {
                ForkOutcome::Forked {
                    events,
                    messages,
                    files,
                } => {
                    tracing::info!(session_id = %record.id, from = %id, at = point, events, messages, files, "session forked");
                    record.last_seq = point;
                    return Ok(self.summary(&record, None));
                }
                ForkOutcome::NoSource => return Err(EngineError::SessionNotFound(id)),
                ForkOutcome::Pruned { oldest } => {
                    let kept = match oldest {
                        Some(o) => format!("its log now begins at {o}"),
                        None => "its events were all pruned".to_string(),
                    };
                    return Err(EngineError::Unprocessable(format!(
                        "at: {point} falls in the session's pruned history ({kept}): fork at its end, or at 0"
                    )));
                }
                ForkOutcome::BeyondEnd { last_seq } => {
                    return Err(EngineError::Unprocessable(format!(
                        "at: {point} is past the session's log, which ends at {last_seq}"
                    )));
                }
                // No point given and a run under way: from just before it.
                ForkOutcome::InsideRun { first, .. }
                    if at.is_none() && first > 0 && first - 1 < point =>
                {
                    point = first - 1;
                }
                ForkOutcome::InsideRun {
                    run_id,
                    first,
                    last,
                    running,
                } => {
                    let after = if running {
                        "after it ends".to_string()
                    } else {
                        format!("at {last} (after it)")
                    };
                    return Err(EngineError::Conflict(format!(
                        "position {point} is inside run {run_id} (from {first}): fork at {} (before it) or {after}",
                        first.saturating_sub(1)
                    )));
                }
            }
        }
    }

    /// Sharing the store, which sessions run and wait for approvals is in the store (the run
    /// may be on another instance): one session's, or everyone's. `None` when alone, where
    /// this instance's memory is the whole truth.
    pub(super) async fn shared_state(
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

    pub(super) fn summary(
        &self,
        r: &SessionRecord,
        shared: Option<&SharedState>,
    ) -> SessionSummary {
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
            owner: r.owner.clone(),
            pending_approvals: match (self.inner.approvals.pending(r.id), shared) {
                (Some((_, calls)), _) => calls.len() as u32,
                (None, Some(s)) => s.approvals.get(&r.id).copied().unwrap_or(0),
                (None, None) => 0,
            },
        }
    }

    pub async fn get_session(
        &self,
        id: Uuid,
    ) -> Result<(SessionSummary, SessionConfig), EngineError> {
        let r = self.record(id).await?;
        let shared = self.shared_state(Some(r.id)).await?;
        let mut config = session_config(&r)?;
        // What an MCP server's env and headers hold may be secret: the API shows the keys.
        config.mcp_servers = config.mcp_servers.iter().map(|s| s.redacted()).collect();
        Ok((self.summary(&r, shared.as_ref()), config))
    }

    /// Who a session belongs to and whom it is shared with, for [`crate::team::may_see`];
    /// `SessionNotFound` if there is no such session.
    pub async fn session_access(
        &self,
        id: Uuid,
    ) -> Result<(Option<String>, Vec<String>), EngineError> {
        let Some(r) = self.inner.store.get_session(id).await? else {
            return Err(EngineError::SessionNotFound(id));
        };
        let shares = self.inner.store.session_shares(id).await?;
        Ok((r.owner, shares))
    }

    /// How the processes of a session configured as `config` are confined (`None`: its
    /// backend has no sandbox, or is not configured any more).
    pub fn sandbox_status(
        &self,
        config: &SessionConfig,
    ) -> Option<switchboard_protocol::SandboxStatus> {
        self.inner
            .backends
            .resolve(&config.backend)
            .ok()?
            .sandbox_status(config)
    }

    /// A page of sessions, newest first: archived ones or the others — of those `visible_to`
    /// a user only theirs and those shared with them ([`crate::team::may_see`]).
    pub async fn list_sessions(
        &self,
        limit: u32,
        offset: u32,
        archived: bool,
        visible_to: Option<&str>,
    ) -> Result<(Vec<SessionSummary>, u64), EngineError> {
        let (rows, total) = self
            .inner
            .store
            .list_sessions(limit, offset, archived, visible_to)
            .await?;
        let shared = self.shared_state(None).await?;
        Ok((
            rows.iter()
                .map(|r| self.summary(r, shared.as_ref()))
                .collect(),
            total,
        ))
    }

    /// Renames, archives or unarchives a session, or changes its permission mode, model or
    /// `auto_approve` (which the next run starts with: a run under way keeps its own).
    pub async fn update_session(
        &self,
        id: Uuid,
        req: UpdateSessionRequest,
    ) -> Result<SessionSummary, EngineError> {
        let title = req.title.as_deref().map(valid_title).transpose()?;
        if let Some(a) = &req.auto_approve {
            validate_auto_approve(a)?;
        }
        if let Some(m) = &req.model
            && m.trim().is_empty()
        {
            return Err(EngineError::validation("model", "must not be empty"));
        }
        validate_sandbox(req.sandbox.as_ref())?;
        let changes_config = req.permission_mode.is_some()
            || req.model.is_some()
            || req.auto_approve.is_some()
            || req.sandbox.is_some();
        // Read, change, write under the session's lock: two updates of different fields at
        // once both land (on this instance; the store has the last word across instances).
        let lock = self.session_lock(id);
        let _guard = lock.lock().await;
        let auto_approve_now = req.auto_approve.clone();
        let config = if changes_config {
            let record = self.record(id).await?;
            let mut config: SessionConfig = serde_json::from_value(record.config)
                .map_err(|e| EngineError::Internal(format!("decoding config: {e}")))?;
            if let Some(mode) = req.permission_mode {
                config.permission_mode = mode;
            }
            if let Some(model) = req.model {
                config.model = Some(model);
            }
            if let Some(auto) = req.auto_approve {
                config.auto_approve = auto;
            }
            if let Some(sandbox) = req.sandbox {
                config.sandbox = Some(sandbox);
            }
            Some(
                serde_json::to_value(&config)
                    .map_err(|e| EngineError::Internal(format!("encoding config: {e}")))?,
            )
        } else {
            None
        };
        let now = now_rfc3339();
        let update = switchboard_store::SessionUpdate {
            title,
            archived_at: req.archived.map(|a| a.then(|| now.clone())),
            config,
            updated_at: now,
        };
        if !self.inner.store.update_session(id, &update).await? {
            return Err(EngineError::SessionNotFound(id));
        }
        drop(_guard);
        if let Some(auto_approve) = auto_approve_now {
            self.tell_run_auto_approve(id, auto_approve).await;
        }
        let shared = self.shared_state(Some(id)).await?;
        Ok(self.summary(&self.record(id).await?, shared.as_ref()))
    }

    /// The run under way (here or on another instance) applies the session's new
    /// `auto_approve` from its next tool call. Best effort: the change is stored, and the
    /// next run starts with it whatever happens here.
    async fn tell_run_auto_approve(
        &self,
        id: Uuid,
        auto_approve: switchboard_protocol::AutoApprove,
    ) {
        let control = RunControl::AutoApprove {
            session_id: id,
            auto_approve,
        };
        match self.apply_local(control.clone()).await {
            Ok(_) => {}
            Err(EngineError::SessionNotRunning(_)) => {
                if let Err(e) = self.forward(id, control).await {
                    tracing::warn!(session_id = %id, error = %e, "the run under way on another instance was not told of the new auto_approve");
                }
            }
            Err(e) => {
                tracing::warn!(session_id = %id, error = %e, "the run under way was not told of the new auto_approve")
            }
        }
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
                    RunControl::Cancel {
                        session_id: id,
                        run_id: run.id,
                    },
                )
                .await
        {
            tracing::warn!(session_id = %id, error = %e, "cancelling the session's run on its instance failed");
        }
        let task = {
            let mut map = self.inner.active.lock();
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
        let mut hashes: Vec<String> = self
            .inner
            .store
            .list_files(id)
            .await?
            .into_iter()
            .map(|f| f.sha256)
            .collect();
        hashes.sort();
        hashes.dedup();
        if !self.inner.store.delete_session(id).await? {
            return Err(EngineError::SessionNotFound(id));
        }
        self.remove_unused_content(hashes).await;
        self.inner.log.forget(id);
        if let Ok(config) = session_config(&record)
            && let Ok(backend) = self.inner.backends.resolve(&config.backend)
        {
            backend.forget(id).await;
        }
        self.inner.session_locks.lock().remove(&id);
        tracing::info!(session_id = %id, "session deleted");
        Ok(())
    }
}

/// A fork's title when none is given: "Fork of …", within the title's limit.
fn fork_title(source: &str) -> String {
    let title = format!("Fork of {source}");
    match title.char_indices().nth(MAX_TITLE) {
        Some((cut, _)) => title[..cut].to_string(),
        None => title,
    }
}
