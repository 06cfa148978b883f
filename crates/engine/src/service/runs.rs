//! Runs: a message starts, queues or steers one; a run executes, then finishes under the
//! session lock.

use super::*;

use switchboard_protocol::{IDEMPOTENCY_WINDOW, is_valid_idempotency_key};

impl Engine {
    // --- messages and runs ----------------------------------------------------------------

    /// Handles `POST /sessions/{id}/messages`: the run started, queued or steered (and, for
    /// steering, when the agent will see it).
    pub async fn send_message(
        &self,
        session_id: Uuid,
        req: SendMessageRequest,
    ) -> Result<SendMessageResponse, EngineError> {
        self.send_message_once(session_id, req, None).await
    }

    /// [`Self::send_message`] with the client's `Idempotency-Key`: a `message` or
    /// `follow_up` repeated with a key one of the session's runs got in the last
    /// [`IDEMPOTENCY_WINDOW`] answers that run (whatever its state) and starts nothing.
    /// Steering starts no run and ignores the key.
    pub async fn send_message_once(
        &self,
        session_id: Uuid,
        req: SendMessageRequest,
        idempotency_key: Option<&str>,
    ) -> Result<SendMessageResponse, EngineError> {
        let delivery = match req.kind {
            MessageType::Steering => Some(self.steering_delivery(session_id).await?),
            _ => None,
        };
        let idempotency = match (req.kind, idempotency_key) {
            (MessageType::Steering, _) | (_, None) => None,
            (_, Some(key)) => {
                if !is_valid_idempotency_key(key) {
                    return Err(EngineError::InvalidIdempotencyKey);
                }
                Some(switchboard_store::Idempotency {
                    key: key.to_owned(),
                    since: crate::time::rfc3339(
                        chrono::Utc::now()
                            - chrono::Duration::from_std(IDEMPOTENCY_WINDOW)
                                .unwrap_or_else(|_| chrono::Duration::days(1)),
                    ),
                })
            }
        };
        if let Some(i) = &idempotency {
            self.record(session_id).await?;
            if let Some(run) = self
                .inner
                .store
                .run_by_idempotency_key(session_id, &i.key, &i.since)
                .await?
            {
                tracing::info!(%session_id, run_id = %run.id, "a repeated idempotency key answers its run");
                return Ok(SendMessageResponse {
                    run_id: run.id,
                    steering: None,
                });
            }
        }
        let run_id = self
            .send_message_inner(session_id, req, idempotency)
            .await?;
        Ok(SendMessageResponse {
            run_id,
            steering: delivery,
        })
    }

    pub(super) async fn steering_delivery(
        &self,
        session_id: Uuid,
    ) -> Result<SteeringDelivery, EngineError> {
        let config = session_config(&self.record(session_id).await?)?;
        Ok(self.inner.backends.resolve(&config.backend)?.steering())
    }

    pub(super) async fn send_message_inner(
        &self,
        session_id: Uuid,
        req: SendMessageRequest,
        idempotency: Option<switchboard_store::Idempotency>,
    ) -> Result<Uuid, EngineError> {
        if self.inner.shutdown.is_cancelled() {
            return Err(EngineError::ShuttingDown);
        }
        validate_message(&req)?;
        let record = self.record(session_id).await?;
        // Refused, never ignored: a caller who asked for a sandbox must not get a run
        // without one, and only a backend that confines its commands gives one.
        if req.sandbox == Some(true)
            && !self
                .inner
                .backends
                .resolve(&session_config(&record)?.backend)?
                .sandboxes()
        {
            return Err(EngineError::SandboxUnsupported);
        }
        let attachments = self
            .attachments(session_id, &req.message.attachments)
            .await?;
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        match req.kind {
            MessageType::Steering => {
                drop(_guard);
                if !attachments.is_empty() {
                    return Err(EngineError::validation(
                        "message.attachments",
                        "steering carries text only; send files with a message or a follow-up",
                    ));
                }
                let control = RunControl::Steer {
                    session_id,
                    run_id: req.run_id,
                    content: req.message.content,
                };
                match self.apply_or_forward(session_id, control).await? {
                    ControlReply::Steered { run_id } => Ok(run_id),
                    other => Err(unexpected(other)),
                }
            }
            MessageType::Message => {
                if self.active_run_id(session_id).is_some()
                    || (!self.inner.config.exclusive
                        && self.inner.store.active_run(session_id).await?.is_some())
                {
                    return Err(EngineError::SessionAlreadyRunning(session_id));
                }
                let (run, fresh) = self
                    .new_run(session_id, &req, attachments, true, idempotency)
                    .await?;
                if !fresh {
                    // The same key, sent meanwhile by another instance: its run.
                    return Ok(run.id);
                }
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
                let (run, fresh) = self
                    .new_run(session_id, &req, attachments, false, idempotency)
                    .await?;
                if !fresh {
                    return Ok(run.id);
                }
                let announced = self
                    .inner
                    .log
                    .append(
                        session_id,
                        &AgentEvent::FollowUpQueued {
                            run_id: run.id,
                            content: req.message.content,
                        },
                    )
                    .await;
                if let Err(e) = announced {
                    // The caller is told it failed, so it must not run later: taken back
                    // out of the queue (a store that fails this too leaves it to run, as
                    // the retry of a write whose answer was lost would).
                    match self
                        .inner
                        .store
                        .cancel_queued_run(run.id, &now_rfc3339())
                        .await
                    {
                        Ok(true) => return Err(e),
                        // Not queued any more: another instance took it from the queue and
                        // runs it, so it was accepted after all.
                        Ok(false) => return Ok(run.id),
                        Err(undo) => {
                            tracing::error!(%session_id, run_id = %run.id, error = %undo, "a follow-up that could not be announced stays queued");
                            return Err(e);
                        }
                    }
                }
                // Queued and announced: accepted. Starting it now is a courtesy; if that
                // fails it starts when the active run ends or the reaper finds it waiting.
                if self.active_run_id(session_id).is_none()
                    && let Err(e) = self.start_next_queued(session_id).await
                {
                    tracing::warn!(%session_id, run_id = %run.id, error = %e, "a queued follow-up could not start yet");
                }
                Ok(run.id)
            }
        }
    }

    pub(super) async fn new_run(
        &self,
        session_id: Uuid,
        req: &SendMessageRequest,
        attachments: Vec<switchboard_protocol::FileInfo>,
        front: bool,
        idempotency: Option<switchboard_store::Idempotency>,
    ) -> Result<(RunRecord, bool), EngineError> {
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
            attachments,
            sandbox: req.sandbox,
            requested_by: req.requested_by.clone(),
            origin: req.origin.clone().filter(|o| !o.is_empty()),
        };
        let new = NewRun {
            id: Uuid::now_v7(),
            session_id,
            input: serde_json::to_value(&input)
                .map_err(|e| EngineError::Internal(e.to_string()))?,
            created_at: now_rfc3339(),
            idempotency,
        };
        let run = if front {
            self.inner.store.enqueue_run_front(&new).await?
        } else {
            self.inner.store.enqueue_run(&new).await?
        };
        // Another run answered for the same idempotency key: nothing new was queued.
        let fresh = run.id == new.id;
        Ok((run, fresh))
    }

    /// Starts the front of the follow-up queue, if any. Caller holds the session lock.
    pub(super) async fn start_next_queued(
        &self,
        session_id: Uuid,
    ) -> Result<Option<Uuid>, EngineError> {
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
    pub(super) fn start_run(
        &self,
        session_id: Uuid,
        run_id: Uuid,
    ) -> futures::future::BoxFuture<'_, Result<(), EngineError>> {
        Box::pin(self.start_run_inner(session_id, run_id))
    }

    pub(super) async fn start_run_inner(
        &self,
        session_id: Uuid,
        run_id: Uuid,
    ) -> Result<(), EngineError> {
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
        let live_auto_approve = input
            .overrides
            .as_ref()
            .and_then(|o| o.auto_approve.as_ref())
            .is_none()
            .then(|| Arc::new(SyncMutex::new(config.auto_approve.clone())));
        let cancel = self.inner.shutdown.child_token();
        let lost = CancellationToken::new();
        {
            let mut map = self.inner.active.lock();
            map.insert(
                session_id,
                RunSlot {
                    run_id,
                    lease: lease.clone(),
                    lost: lost.clone(),
                    renewed: Arc::new(SyncMutex::new(std::time::Instant::now())),
                    cancel: cancel.clone(),
                    steering: steer_tx,
                    auto_approve: live_auto_approve,
                    task: None,
                },
            );
        }
        let engine = self.clone();
        // The run's span: everything it logs carries its session and run (and a trace
        // exporter shows the run as one span with its work inside).
        let span = tracing::info_span!(
            parent: None,
            "run",
            %session_id,
            %run_id,
            backend = %match &config.backend {
                switchboard_protocol::BackendSpec::Builtin => "builtin".to_string(),
                switchboard_protocol::BackendSpec::Acp(name) => format!("acp:{name}"),
            },
        );
        // A root span of its own (linked to the request that started it): a run outlives
        // its request, and a follow-up started at a run's end must not nest under it.
        span.follows_from(tracing::Span::current());
        let task = tokio::spawn(tracing::Instrument::instrument(
            async move {
                engine
                    .execute(RunJob {
                        session,
                        config,
                        run_id,
                        input,
                        backend,
                        steering: steer_rx,
                        cancel,
                        lease,
                        lost,
                    })
                    .await;
            },
            span,
        ));
        let mut map = self.inner.active.lock();
        if let Some(a) = map.get_mut(&session_id)
            && a.run_id == run_id
        {
            a.task = Some(task);
        }
        Ok(())
    }

    pub(super) async fn execute(&self, job: RunJob) {
        let RunJob {
            session,
            config,
            run_id,
            input,
            backend,
            steering,
            cancel,
            lease,
            lost,
        } = job;
        let session_id = session.id;
        let fence = Some(&lease);
        let log = &self.inner.log;
        let store = &self.inner.store;
        let backend_label = match &config.backend {
            switchboard_protocol::BackendSpec::Builtin => "builtin".to_string(),
            switchboard_protocol::BackendSpec::Acp(name) => format!("acp:{name}"),
        };
        let started = std::time::Instant::now();
        metrics::counter!("switchboard_runs_started_total", "backend" => backend_label.clone())
            .increment(1);
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
            for file in &input.attachments {
                log.append_fenced(
                    session_id,
                    &AgentEvent::FileAttached {
                        run_id,
                        file: file.clone(),
                    },
                    fence,
                )
                .await?;
            }
            if !input.attachments.is_empty()
                && let Err(e) = self
                    .inner
                    .blobs
                    .copy_to_inbox(Path::new(&session.cwd), &input.attachments)
                    .await
            {
                tracing::warn!(%session_id, %run_id, error = %e, "copying attachments into the workspace failed");
                log.append_fenced(
                    session_id,
                    &AgentEvent::Notice {
                        run_id,
                        message: format!(
                            "the attached files could not be copied into the workspace ({e}); the agent gets them only as the message carries them"
                        ),
                    },
                    fence,
                )
                .await?;
            }
            store.touch_session(session_id, &now_rfc3339()).await?;
            let limits = self.inner.config.history;
            let recent = store
                .recent_messages(session_id, limits.max_messages, limits.max_chars)
                .await?;
            let history = conversation(&recent);
            store
                .append_message(
                    &input.user_record(session_id, run_id),
                    fence,
                )
                .await?;
            Ok::<_, EngineError>(history)
        }
        .await;
        let deltas = log.pipeline(session_id, fence);
        let mut checkpointed = false;
        let result = match prepared {
            Ok((history, earlier_left_out)) => {
                // The workspace as the run finds it, so what the run changes can be shown
                // and undone, whatever the backend.
                checkpointed = self
                    .checkpoint_before(&session, run_id, &lease)
                    .await
                    .is_some();
                // A run's `auto_approve` override stands in for the session's; the
                // permission mode still bounds it (see `approval::settle`). Without one,
                // the run shares its slot's copy, which a change of the session's updates.
                let live = {
                    let map = self.inner.active.lock();
                    map.get(&session_id)
                        .filter(|s| s.run_id == run_id)
                        .and_then(|s| s.auto_approve.clone())
                };
                let auto_approve = match (
                    input
                        .overrides
                        .as_ref()
                        .and_then(|o| o.auto_approve.clone()),
                    live,
                ) {
                    (Some(own), _) => Arc::new(SyncMutex::new(own)),
                    (None, Some(live)) => live,
                    (None, None) => Arc::new(SyncMutex::new(config.auto_approve.clone())),
                };
                let who = attribution(session_id, run_id, &config, &input);
                let ctx = RunContext {
                    session_id,
                    run_id,
                    cwd: PathBuf::from(&session.cwd),
                    input,
                    history,
                    earlier_left_out,
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
                        decided_by: Default::default(),
                        approvals: self.inner.approvals.clone(),
                        approval_timeout: self.inner.config.approval_timeout,
                        cancel: cancel.clone(),
                        blobs: self.inner.blobs.clone(),
                        file_limits: self.inner.config.files.clone(),
                        tokens: self.inner.tokens.clone(),
                        protected: self.inner.config.protected.clone(),
                        meter: self.inner.meter.clone(),
                        attribution: who,
                        warned: Default::default(),
                    },
                    mcp_servers: {
                        let own = &config.mcp_servers;
                        let mut all: Vec<_> = self
                            .inner
                            .config
                            .mcp_servers
                            .iter()
                            .filter(|g| !own.iter().any(|s| s.name == g.name))
                            .cloned()
                            .collect();
                        all.extend(own.iter().cloned());
                        all
                    },
                    config,
                    cancel: cancel.clone(),
                    protected: self.inner.config.protected.clone(),
                    default_model: self.default_model(),
                };
                let result = backend.run(ctx).await;
                // Every delta the run streamed is committed before its end is written; one
                // that could not be stored fails the run (retryable) rather than leave a
                // reply with a hole in it looking complete.
                match (result, deltas.flush().await) {
                    (Ok(_), Err(e)) => Err(crate::BackendError::from(e)),
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
        if checkpointed {
            self.checkpoint_after(&session, run_id, &lease).await;
        }
        // A call the backend reserved and never settled (it failed, or was cut off) is
        // lost: its reservation counts as spent.
        if let Err(e) = self.inner.meter.lose(run_id).await {
            tracing::warn!(%session_id, %run_id, error = %e, "the run's unsettled model calls could not be closed");
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
                    code: switchboard_protocol::RunErrorCode::Interrupted,
                    budget: None,
                },
            )
        } else if cancel.is_cancelled() {
            (
                RunOutcome::Cancelled,
                AgentEvent::RunCompleted {
                    run_id,
                    total_turns: result.as_ref().map(|s| s.total_turns).unwrap_or(0),
                    total_usage: result.as_ref().map(|s| s.usage).unwrap_or_default(),
                    stop_reason: switchboard_protocol::StopReason::Cancelled,
                    backend_stop_reason: None,
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
                        stop_reason: switchboard_protocol::StopReason::from_backend(&s.stop_reason),
                        backend_stop_reason: Some(s.stop_reason),
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
                        code: e.code,
                        budget: e.budget,
                    },
                ),
            }
        };
        metrics::histogram!("switchboard_run_duration_seconds", "backend" => backend_label)
            .record(started.elapsed().as_secs_f64());
        self.finish(session_id, run_id, outcome, event, &lease)
            .await;
    }

    /// Closes a run: store state, the active slot, the terminal event, then the next
    /// follow-up — all under the session lock so nothing slips in between.
    pub(super) async fn finish(
        &self,
        session_id: Uuid,
        run_id: Uuid,
        outcome: RunOutcome,
        event: AgentEvent,
        lease: &Lease,
    ) {
        let outcome_label = match &outcome {
            RunOutcome::Completed { .. } => "completed",
            RunOutcome::Cancelled => "cancelled",
            RunOutcome::Failed { .. } => "failed",
        };
        metrics::counter!("switchboard_runs_finished_total", "outcome" => outcome_label)
            .increment(1);
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
        self.inner.approvals.forget_settled(session_id, run_id);
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
}

/// Whom a run's model calls are for.
fn attribution(
    session_id: Uuid,
    run_id: Uuid,
    config: &switchboard_protocol::SessionConfig,
    input: &RunInput,
) -> crate::Attribution {
    let origin = input.origin.clone().unwrap_or_default();
    crate::Attribution {
        session_id: Some(session_id),
        run_id: Some(run_id),
        user: input.requested_by.clone(),
        chat: origin.chat(),
        schedule: origin.schedule,
        bundle: origin.bundle,
        backend: match &config.backend {
            switchboard_protocol::BackendSpec::Builtin => "builtin".to_string(),
            switchboard_protocol::BackendSpec::Acp(name) => name.clone(),
        },
    }
}
