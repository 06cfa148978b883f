//! Steering, cancel and approvals of a run: applied here when the run executes here, else
//! forwarded to the instance that executes it.

use super::*;

impl Engine {
    /// Steers the session's run if it executes here.
    pub(super) async fn steer_local(
        &self,
        session_id: Uuid,
        given: Option<Uuid>,
        content: String,
    ) -> Result<Uuid, EngineError> {
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        let active = {
            let map = self.inner.active.lock();
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
    pub(super) async fn forward(
        &self,
        session_id: Uuid,
        request: RunControl,
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

    /// Applies `control` to the session's run if it executes here — the one place that
    /// does, for the API call that reached this instance and for the one another instance
    /// forwarded ([`Self::handle_control`]). Errors say what is not here:
    /// `SessionNotRunning` (steer), `RunMismatch` (cancel), `NoPendingApproval` (decide);
    /// `Pending` answers what is pending here (maybe nothing).
    pub(super) async fn apply_local(
        &self,
        control: RunControl,
    ) -> Result<ControlReply, EngineError> {
        match control {
            RunControl::Steer {
                session_id,
                run_id,
                content,
            } => self
                .steer_local(session_id, run_id, content)
                .await
                .map(|run_id| ControlReply::Steered { run_id }),
            RunControl::AutoApprove {
                session_id,
                auto_approve,
            } => {
                let map = self.inner.active.lock();
                match map.get(&session_id) {
                    Some(slot) => {
                        if let Some(live) = &slot.auto_approve {
                            *live.lock() = auto_approve;
                        }
                        Ok(ControlReply::AutoApproveSet)
                    }
                    None => Err(EngineError::SessionNotRunning(session_id)),
                }
            }
            RunControl::Cancel { session_id, run_id } => {
                let active = {
                    let map = self.inner.active.lock();
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
            RunControl::Decide {
                session_id,
                request,
            } => self
                .inner
                .approvals
                .decide(session_id, request.run_id, &request.decisions)
                .inspect(|_| {
                    // Calls decided one by one leave the inbox at once (a decision forwarded
                    // from another instance included).
                    self.inner.log.approval_signal().bump();
                })
                .map(|already_settled| ControlReply::Decided {
                    response: ToolDecisionsResponse {
                        accepted: true,
                        run_id: request.run_id,
                        already_settled,
                    },
                }),
            RunControl::Share {
                session_id,
                request,
            } => self
                .share_local(session_id, request)
                .await
                .map(|response| ControlReply::Shared { response }),
            RunControl::Checkpoints { session_id } => self
                .checkpoints_local(session_id)
                .await
                .map(|checkpoints| ControlReply::Checkpoints { checkpoints }),
            RunControl::Diff { session_id, query } => {
                Ok(match self.diff_local(session_id, &query).await? {
                    super::DiffOutput::Text(text) => ControlReply::Diff {
                        text: Some(text),
                        stat: None,
                    },
                    super::DiffOutput::Stat(stat) => ControlReply::Diff {
                        text: None,
                        stat: Some(stat),
                    },
                })
            }
            RunControl::Restore {
                session_id,
                checkpoint,
            } => self
                .restore_local(session_id, &checkpoint)
                .await
                .map(|response| ControlReply::Restored { response }),
            RunControl::Pending { session_id } => Ok(ControlReply::Pending {
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
        }
    }

    /// Applies `control` here, or — when no run of the session executes here — forwards it
    /// to the instance that executes it (steering, sharing a file).
    pub(super) async fn apply_or_forward(
        &self,
        session_id: Uuid,
        control: RunControl,
    ) -> Result<ControlReply, EngineError> {
        match self.apply_local(control.clone()).await {
            Err(EngineError::SessionNotRunning(_)) => {
                match self.forward(session_id, control).await? {
                    Some(reply) => Ok(reply),
                    None => Err(EngineError::SessionNotRunning(session_id)),
                }
            }
            other => other,
        }
    }

    /// Answers a control request another instance forwarded: only runs executing here are
    /// considered (never forwarded again).
    pub async fn handle_control(&self, request: RunControl) -> ControlReply {
        self.apply_local(request)
            .await
            .unwrap_or_else(|e| ControlReply::Error {
                code: e.code(),
                message: e.to_string(),
            })
    }

    /// Cancels the active run (or a queued follow-up) with this id.
    pub async fn cancel(&self, session_id: Uuid, run_id: Uuid) -> Result<(), EngineError> {
        self.record(session_id).await?;
        let lock = self.session_lock(session_id);
        let _guard = lock.lock().await;
        let active = match self
            .apply_local(RunControl::Cancel { session_id, run_id })
            .await
        {
            Ok(_) => return Ok(()),
            Err(EngineError::RunMismatch { active, .. }) => active,
            Err(e) => return Err(e),
        };
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
            if running && active.is_none() {
                drop(_guard);
                match self
                    .forward(session_id, RunControl::Cancel { session_id, run_id })
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
            active,
        })
    }

    /// The tool calls of the session that wait for a decision.
    pub async fn pending_tools(
        &self,
        session_id: Uuid,
    ) -> Result<PendingToolsResponse, EngineError> {
        self.record(session_id).await?;
        let here = match self.apply_local(RunControl::Pending { session_id }).await? {
            ControlReply::Pending { response } => response,
            other => return Err(unexpected(other)),
        };
        if here.run_id.is_some() || self.active_run_id(session_id).is_some() {
            return Ok(here);
        }
        match self
            .forward(session_id, RunControl::Pending { session_id })
            .await?
        {
            Some(ControlReply::Pending { response }) => Ok(response),
            Some(other) => Err(unexpected(other)),
            None => Ok(here),
        }
    }

    /// Every approval waiting, in any session, newest first: the calls still undecided, with
    /// the session's title and backend and when the wait fails closed. The store lists them
    /// (a run waiting on another instance included); for a run executing here this
    /// instance's memory is the truth (calls decided one by one drop out, and an approval
    /// settled a moment ago is gone before its record is).
    pub async fn waiting_approvals(&self) -> Result<Vec<WaitingApproval>, EngineError> {
        let records = self.inner.store.list_approvals().await?;
        let mut out = Vec::with_capacity(records.len());
        for a in records {
            let tool_calls: Vec<ToolCall> = if self.inner.config.exclusive
                || self.is_local_run(a.run_id)
            {
                match self.inner.approvals.pending(a.session_id) {
                    Some((run_id, calls)) if run_id == a.run_id && !calls.is_empty() => calls,
                    _ => continue,
                }
            } else {
                match serde_json::from_value(a.tool_calls) {
                    Ok(calls) => calls,
                    Err(e) => {
                        tracing::warn!(session_id = %a.session_id, error = %e, "a stored approval's calls do not decode; not listed");
                        continue;
                    }
                }
            };
            // A session deleted meanwhile takes its approval with it.
            let Some(record) = self.inner.store.get_session(a.session_id).await? else {
                continue;
            };
            let shared_with = self.inner.store.session_shares(a.session_id).await?;
            let requested_by = self
                .inner
                .store
                .get_run(a.run_id)
                .await?
                .and_then(|r| serde_json::from_value::<RunInput>(r.input).ok())
                .and_then(|i| i.requested_by);
            let config = session_config(&record).ok();
            out.push(WaitingApproval {
                owner: record.owner.clone(),
                shared_with,
                requested_by,
                permission_mode: config.as_ref().map(|c| c.permission_mode),
                session_id: a.session_id,
                backend: config.map(|c| c.backend),
                session_title: record.title,
                run_id: a.run_id,
                tool_calls,
                created_at: a.created_at,
                expires_at: a.expires_at,
            });
        }
        out.sort_by(|a, b| b.created_at.cmp(&a.created_at));
        Ok(out)
    }

    /// Bumped whenever what [`Self::waiting_approvals`] returns may have changed (on this
    /// instance, or on another one sharing the store and the bus).
    pub fn approvals_changed(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.log.approval_signal().subscribe()
    }

    /// Decides pending tool calls. Calls not named stay pending; the run goes on once all
    /// are decided.
    pub async fn decide_tools(
        &self,
        session_id: Uuid,
        req: ToolDecisionsRequest,
    ) -> Result<ToolDecisionsResponse, EngineError> {
        self.record(session_id).await?;
        let control = RunControl::Decide {
            session_id,
            request: req,
        };
        let reply = match self.apply_local(control.clone()).await {
            Err(EngineError::NoPendingApproval) if self.active_run_id(session_id).is_none() => {
                match self.forward(session_id, control).await? {
                    Some(reply) => reply,
                    None => return Err(EngineError::NoPendingApproval),
                }
            }
            other => other?,
        };
        match reply {
            ControlReply::Decided { response } => {
                tracing::info!(%session_id, run_id = %response.run_id, "tool decisions received");
                Ok(response)
            }
            other => Err(unexpected(other)),
        }
    }
}

/// The answer a forwarded request should not get.
pub(super) fn unexpected(reply: ControlReply) -> EngineError {
    EngineError::Internal(format!(
        "unexpected answer from the run's instance: {reply:?}"
    ))
}
