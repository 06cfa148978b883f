//! A firing's life: start its run, follow it to its end, deliver the result.

use super::*;

impl Scheduler {
    /// Works on a firing until nothing is left to do on it (or it is lost to another
    /// instance).
    pub(super) async fn work(&self, mut f: FiringRow) {
        let mut start_attempts = 0;
        loop {
            match f.firing.status {
                FiringStatus::Queued => {
                    let active = match self.inner.store.active(f.firing.schedule_id).await {
                        Ok(a) => a,
                        Err(e) => {
                            tracing::warn!(error = %e, "reading a schedule's firings failed");
                            Vec::new()
                        }
                    };
                    if active.first().is_none_or(|a| a.firing.id == f.firing.id) {
                        f.firing.status = FiringStatus::Starting;
                        if !self.save(&mut f).await {
                            return;
                        }
                        continue;
                    }
                    tokio::time::sleep(self.inner.opts.tick).await;
                }
                FiringStatus::Starting => match self.start_run(&mut f).await {
                    Ok(()) => {
                        if !self.save(&mut f).await {
                            return;
                        }
                    }
                    Err(e) if e.is_transient() && start_attempts + 1 < START_ATTEMPTS => {
                        start_attempts += 1;
                        tracing::warn!(firing = %f.firing.id, error = %e, "starting a scheduled run failed; trying again");
                        tokio::time::sleep(self.inner.opts.tick * 2).await;
                    }
                    Err(e) => {
                        self.finish(
                            &mut f,
                            FiringStatus::Failed,
                            format!("could not start the run: {e}"),
                        )
                        .await;
                        if !self.save(&mut f).await {
                            return;
                        }
                    }
                },
                FiringStatus::Running => {
                    self.follow(&mut f).await;
                    if !self.save(&mut f).await {
                        return;
                    }
                }
                _ => {
                    if !f
                        .firing
                        .deliveries
                        .iter()
                        .any(|d| d.status == DeliveryStatus::Pending)
                    {
                        self.save(&mut f).await;
                        return;
                    }
                    if self.deliver(&mut f).await && !self.save(&mut f).await {
                        return;
                    }
                    if f.firing
                        .deliveries
                        .iter()
                        .any(|d| d.status == DeliveryStatus::Pending)
                    {
                        tokio::time::sleep(self.inner.opts.tick).await;
                    }
                }
            }
        }
    }

    /// Ends a firing's run part: status, outcome, and the deliveries to make.
    pub(super) async fn finish(&self, f: &mut FiringRow, status: FiringStatus, outcome: String) {
        f.firing.status = status;
        f.firing.outcome = Some(outcome);
        f.firing.finished_at = Some(self.now());
        let targets = match self.inner.store.schedule(f.firing.schedule_id).await {
            Ok(Some(s)) => s.spec.deliver,
            _ => Vec::new(),
        };
        f.firing.deliveries = targets
            .into_iter()
            .map(|target| Delivery {
                target,
                status: DeliveryStatus::Pending,
                attempts: 0,
                error: None,
                message_id: None,
                next_attempt_at: None,
                delivered_at: None,
            })
            .collect();
    }

    /// Creates the session (or picks the fixed one) and sends the prompt as a follow-up;
    /// the firing is then `running`. Saves the steps a restart must not repeat.
    pub(super) async fn start_run(&self, f: &mut FiringRow) -> Result<(), ClientError> {
        let Some(row) = self
            .inner
            .store
            .schedule(f.firing.schedule_id)
            .await
            .ok()
            .flatten()
        else {
            self.finish(f, FiringStatus::Failed, "the schedule was deleted".into())
                .await;
            return Ok(());
        };
        let spec = &row.spec;
        let client = &self.inner.client;
        // A firing interrupted while its message was being sent (or after, before its run
        // was recorded) sends it again under the same idempotency key: the session answers
        // the run it started for it, or starts it now — exactly once either way.
        let session = match (spec.session_id, f.firing.session_id) {
            (Some(fixed), _) => fixed,
            // Made for this firing before a restart.
            (None, Some(made)) => made,
            (None, None) => {
                let auto_approve = match spec.approvals {
                    ScheduleApprovals::AutoApprove => spec.auto_approve.clone(),
                    ScheduleApprovals::Deny | ScheduleApprovals::Ask => None,
                };
                let created = client
                    .create_session(&CreateSessionRequest {
                        title: Some(format!("⏰ {}", spec::display_name(spec))),
                        cwd: spec.cwd.clone(),
                        backend: spec.backend.clone(),
                        model: spec.model.clone(),
                        permission_mode: spec.permission_mode,
                        auto_approve,
                        mcp_servers: None,
                        sandbox: None,
                    })
                    .await?;
                f.firing.session_id = Some(created.id);
                if !self.save(f).await {
                    return Ok(());
                }
                created.id
            }
        };
        f.firing.session_id = Some(session);
        // Whom the run's usage is for: this schedule (by id: names need not be unique).
        let req = SendMessageRequest {
            origin: Some(switchboard_protocol::usage::RunOrigin {
                schedule: Some(f.firing.schedule_id.to_string()),
                ..Default::default()
            }),
            ..SendMessageRequest::user(spec.prompt.clone(), MessageType::FollowUp)
        };
        let sent = client
            .send_message_once(
                session,
                &req,
                &format!("schedule:{}:firing:{}", f.firing.schedule_id, f.firing.id),
            )
            .await;
        let sent = match sent {
            Ok(s) => s,
            Err(e) => {
                // Refused: nothing was sent, so a retry may send it.
                f.firing.outcome = None;
                return Err(e);
            }
        };
        f.firing.run_id = Some(sent.run_id);
        f.firing.status = FiringStatus::Running;
        f.firing.started_at = Some(self.now());
        f.firing.outcome = None;
        Ok(())
    }

    /// Follows a firing's run to its end from its session's log, answering the approvals
    /// it waits for as the schedule says.
    pub(super) async fn follow(&self, f: &mut FiringRow) {
        let (Some(session), Some(run)) = (f.firing.session_id, f.firing.run_id) else {
            self.finish(f, FiringStatus::Failed, "no run recorded".into())
                .await;
            return;
        };
        let spec = match self.inner.store.schedule(f.firing.schedule_id).await {
            Ok(Some(row)) => Some(row.spec),
            _ => None,
        };
        let mut steps = self.inner.client.follow_run(session, run, None);
        let mut reply: Option<String> = None;
        // Questions asked in a chat (`approvals = ask`) that wait for an answer.
        let mut asked: Vec<Asked> = Vec::new();
        loop {
            let step = tokio::select! {
                step = steps.next() => step,
                _ = tokio::time::sleep(self.inner.opts.tick), if !asked.is_empty() => {
                    self.expire_asked(&mut asked, session, run).await;
                    continue;
                }
            };
            let step = match step {
                Some(Ok(step)) => step,
                Some(Err(e)) => {
                    // Refused for good (not a 404: that ends the run as `SessionGone`).
                    tracing::warn!(firing = %f.firing.id, error = %e, "following a scheduled run");
                    break;
                }
                None => break,
            };
            match step.kind {
                RunStep::ToolsWaiting(calls) => {
                    let tool_call_ids: Vec<String> = calls.into_iter().map(|c| c.id).collect();
                    let ask = spec
                        .as_ref()
                        .filter(|s| s.approvals == ScheduleApprovals::Ask);
                    match ask {
                        Some(spec) => {
                            if let Some(a) = self.ask(f, spec, session, run, &tool_call_ids).await {
                                asked.push(a);
                            }
                        }
                        None => self.reject(f, session, run, &tool_call_ids, DENIED).await,
                    }
                }
                RunStep::ToolStarted { call, .. } => {
                    self.close_asked(&mut asked, &call.id).await;
                }
                RunStep::ToolRejected { call, .. } => {
                    // A call proposed before the follower began is named by its id.
                    let name = if call.name.is_empty() {
                        call.id.clone()
                    } else {
                        call.name.clone()
                    };
                    if !f.firing.rejected_tools.contains(&name) {
                        f.firing.rejected_tools.push(name);
                    }
                    self.close_asked(&mut asked, &call.id).await;
                }
                RunStep::TextComplete(text) if !text.trim().is_empty() => {
                    reply = Some(truncate(&text, MAX_REPLY_CHARS));
                }
                RunStep::Ended(RunEnd::Completed { stop_reason, .. }) => {
                    f.firing.reply = reply;
                    let status = if stop_reason == switchboard_protocol::StopReason::Cancelled {
                        FiringStatus::Cancelled
                    } else {
                        FiringStatus::Succeeded
                    };
                    self.finish(f, status, stop_reason.to_string()).await;
                    return;
                }
                RunStep::Ended(RunEnd::Failed { error, .. }) => {
                    f.firing.reply = reply;
                    self.finish(f, FiringStatus::Failed, error).await;
                    return;
                }
                RunStep::Ended(RunEnd::SessionGone) => {
                    self.finish(f, FiringStatus::Failed, "the session was deleted".into())
                        .await;
                    return;
                }
                _ => {}
            }
        }
        // The stream ended (shutdown): the firing stays running, followed again later.
    }

    /// Tries the pending deliveries that are due; whether anything changed.
    pub(super) async fn deliver(&self, f: &mut FiringRow) -> bool {
        let now = self.now();
        let due: Vec<usize> = f
            .firing
            .deliveries
            .iter()
            .enumerate()
            .filter(|(_, d)| {
                d.status == DeliveryStatus::Pending && d.next_attempt_at.is_none_or(|t| t <= now)
            })
            .map(|(i, _)| i)
            .collect();
        if due.is_empty() {
            return false;
        }
        let name = match self.inner.store.schedule(f.firing.schedule_id).await {
            Ok(Some(s)) => spec::display_name(&s.spec),
            _ => "schedule".into(),
        };
        let text = result_text(&name, &f.firing);
        let channels = self.channels().await;
        for i in due {
            let target = f.firing.deliveries[i].target.clone();
            let sent = match parse_target(&target, &channels) {
                Ok(t) => self
                    .inner
                    .client
                    .gateway_send_once(
                        &GatewaySendRequest {
                            channel: t.channel,
                            target: t.chat,
                            text: text.clone(),
                            context: Some(serde_json::json!({
                                "trigger": "schedule",
                                "schedule": name,
                                "schedule_id": f.firing.schedule_id,
                                "status": f.firing.status.as_str(),
                                "summary": f.firing.reply.as_deref().map(|r| truncate(r, 2000)),
                            })),
                            thread: t.thread,
                            kind: None,
                        },
                        // One post per firing and target, whatever the timing.
                        &format!(
                            "schedule:{}:firing:{}:{target}",
                            f.firing.schedule_id, f.firing.id
                        ),
                    )
                    .await
                    .map(|r| r.message_id)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e.message),
            };
            let d = &mut f.firing.deliveries[i];
            d.attempts += 1;
            match sent {
                Ok(id) => {
                    d.status = DeliveryStatus::Delivered;
                    d.message_id = Some(id);
                    d.delivered_at = Some(self.now());
                    d.next_attempt_at = None;
                    d.error = None;
                }
                Err(e) => {
                    tracing::warn!(firing = %f.firing.id, target = %d.target, attempt = d.attempts, error = %e, "delivering a scheduled result failed");
                    d.error = Some(e);
                    if d.attempts >= self.inner.opts.max_attempts {
                        d.status = DeliveryStatus::Failed;
                        d.next_attempt_at = None;
                    } else {
                        let wait = self.inner.opts.retry_base * 2u32.saturating_pow(d.attempts - 1);
                        d.next_attempt_at =
                            Some(now + TimeDelta::from_std(wait).unwrap_or(TimeDelta::hours(1)));
                    }
                }
            }
        }
        true
    }
}
