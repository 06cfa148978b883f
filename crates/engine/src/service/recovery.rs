//! Recovery: runs left running by a restart or a dead instance are closed, their
//! approvals rejected and their open calls answered; stored follow-ups start.

use super::*;

impl Engine {
    /// Start-up. Alone on the store (`exclusive`), every run left running is closed at once
    /// and stored follow-ups start. Sharing it, runs are only closed when their lease runs
    /// out ([`Engine::reap`]), since another instance may be executing them.
    pub(super) async fn recover(&self) -> Result<(), EngineError> {
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
    pub(super) async fn close_interrupted(
        &self,
        run: &RunRecord,
        fence: Option<&Lease>,
        why: &str,
    ) -> Result<(), EngineError> {
        let store = &self.inner.store;
        let (session_id, run_id) = (run.session_id, run.id);
        self.keep_unlogged_message(run, fence).await?;
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
                    cause: switchboard_protocol::RejectionCause::Restart,
                    decided_by: None,
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
        // Its model calls under way were cut off: their reservations count as spent.
        self.inner.meter.lose(run_id).await?;
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
                    code: switchboard_protocol::RunErrorCode::Interrupted,
                    budget: None,
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
    pub(super) async fn reap_one(&self, expired: &Lease) -> Result<(), EngineError> {
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
        metrics::counter!("switchboard_lease_takeovers_total", "lease" => "run").increment(1);
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
    pub(super) async fn start_waiting_follow_ups(&self, settled: bool) -> Result<(), EngineError> {
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
            let mut seen = self.inner.waiting_follow_ups.lock();
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

    /// A run accepted (its caller got its id) but stopped before it logged its start holds
    /// the user's message only in its record: the message goes into the log
    /// (`RunStarted`, unless that was written) and the transcript, so what the user sent is
    /// kept and the agent sees it next time.
    async fn keep_unlogged_message(
        &self,
        run: &RunRecord,
        fence: Option<&Lease>,
    ) -> Result<(), EngineError> {
        let store = &self.inner.store;
        let (session_id, run_id) = (run.session_id, run.id);
        let (msgs, _) = store.list_messages(session_id, u32::MAX, 0).await?;
        if msgs
            .iter()
            .any(|m| m.run_id == Some(run_id) && m.role == Role::User.as_str())
        {
            return Ok(());
        }
        let Ok(input) = serde_json::from_value::<RunInput>(run.input.clone()) else {
            tracing::warn!(%run_id, "an interrupted run's stored input does not parse");
            return Ok(());
        };
        if !self.run_started_logged(session_id, run_id).await? {
            self.inner
                .log
                .append_fenced(
                    session_id,
                    &AgentEvent::RunStarted {
                        run_id,
                        content: Some(input.content.clone()),
                    },
                    fence,
                )
                .await?;
        }
        store
            .append_message(&input.user_record(session_id, run_id), fence)
            .await?;
        Ok(())
    }

    /// Whether the log holds `RunStarted` of `run_id`: read backwards from the newest event
    /// down to the end of the run before it (runs of a session are serial, so its start,
    /// if written, comes after that).
    async fn run_started_logged(
        &self,
        session_id: Uuid,
        run_id: Uuid,
    ) -> Result<bool, EngineError> {
        const PAGE: u64 = 256;
        let store = &self.inner.store;
        let bounds = store.event_bounds(session_id).await?;
        let (Some(oldest), Some(mut end)) = (bounds.oldest, bounds.newest) else {
            return Ok(false);
        };
        loop {
            let after = end.saturating_sub(PAGE).max(oldest.saturating_sub(1));
            let page = store
                .read_events(
                    session_id,
                    after,
                    u32::try_from(end - after).unwrap_or(u32::MAX),
                )
                .await?;
            for e in page.iter().rev() {
                if e.run_id == Some(run_id) && e.kind == "run_started" {
                    return Ok(true);
                }
                if e.run_id != Some(run_id)
                    && matches!(e.kind.as_str(), "run_completed" | "run_error")
                {
                    return Ok(false);
                }
            }
            if after < oldest {
                return Ok(false);
            }
            end = after;
        }
    }

    /// Ids of the session's tool calls that have a result in the transcript.
    pub(super) async fn answered_calls(
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
    pub(super) async fn close_call(
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
}

pub(super) async fn reap_loop(engine: Engine) {
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

pub(super) async fn prune_loop(engine: Engine, retention: Duration) {
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
