//! Delivery: one worker per target that hands its queue over in order, to a tmux pane or a
//! session, and records each outcome.

use std::time::Duration;

use switchboard_client::{RunEnd, RunStep, Step};
use switchboard_protocol::relay::{BundleState, Outcome};
use switchboard_protocol::{MessageType, SendMessageRequest};

use super::{DEFAULT_QUIET_WINDOW, NOT_READY, Relay};
use crate::config::{Member, Transport};
use crate::store::DeliveryRow;
use crate::tmux::{Quiescence, QuiescenceError};

impl Relay {
    pub(super) async fn ensure_worker(&self, bundle: &str, target: &str) {
        let key = (bundle.to_string(), target.to_string());
        let mut w = self.inner.workers.lock().await;
        if w.insert(key.clone()) {
            let me = self.clone();
            let mut tasks = self.inner.tasks.lock();
            // Reap finished workers so the set does not grow with every idle target.
            while tasks.try_join_next().is_some() {}
            tasks.spawn(async move { me.worker(key.0, key.1).await });
        }
    }

    /// Delivers a target's queue in order, one message at a time.
    async fn worker(self, bundle: String, target: String) {
        loop {
            let row = {
                let mut w = self.inner.workers.lock().await;
                match self.inner.store.next_delivery(&bundle, &target).await {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        w.remove(&(bundle.clone(), target.clone()));
                        return;
                    }
                    Err(e) => {
                        tracing::error!(error = %e, bundle, target, "relay queue unreadable");
                        w.remove(&(bundle.clone(), target.clone()));
                        return;
                    }
                }
            };
            let (outcome, code, reason) = match row.state.as_str() {
                // Found mid-hand-over to a session (or ACP) member: sent again under the
                // same idempotency key, so the session answers the run it started for it
                // if it arrived, and starts it if not — exactly once either way.
                "committing" if self.is_session_member(&row) => self.deliver(&row).await,
                // Found mid-hand-over to a pane (a crash, or an outcome that could not be
                // stored): it may have arrived, and a paste cannot be asked, so it is never
                // sent again.
                "committing" => (
                    Outcome::Failed,
                    Some("delivery_interrupted".to_string()),
                    Some("the relay stopped while handing this message over; it was not sent again so that it cannot arrive twice".to_string()),
                ),
                "handed_over" => (
                    Outcome::Delivered,
                    Some("handed_over_before_restart".to_string()),
                    Some("the message was handed over; the relay restarted before it could record more (for a sync send: before the member's turn ended)".to_string()),
                ),
                _ => self.deliver(&row).await,
            };
            if !self
                .finish(&row, outcome, code.as_deref(), reason.as_deref())
                .await
            {
                // The outcome could not be stored: leave the row for the next start (which
                // closes it without sending again) rather than loop on it.
                self.inner
                    .workers
                    .lock()
                    .await
                    .remove(&(bundle.clone(), target.clone()));
                return;
            }
        }
    }

    /// Closes a delivery: stored, pushed to waiters and event streams, audited.
    /// Whether the outcome is stored (retried a few times with backoff).
    async fn finish(
        &self,
        row: &DeliveryRow,
        outcome: Outcome,
        code: Option<&str>,
        reason: Option<&str>,
    ) -> bool {
        let mut delay = Duration::from_millis(200);
        for attempt in 1..=5 {
            match self
                .inner
                .store
                .finish_delivery(row, outcome, code, reason)
                .await
            {
                Ok(Some(ev)) => {
                    self.published(&ev);
                    return true;
                }
                Ok(None) => return true,
                Err(e) => {
                    tracing::error!(error = %e, attempt, message_id = %row.message_id, "recording a delivery outcome");
                    tokio::time::sleep(delay).await;
                    delay *= 2;
                }
            }
        }
        false
    }

    /// Moves a delivery one state forward; a row that is not in `from` (or a store error)
    /// fails the attempt instead of acting twice.
    async fn step(
        &self,
        row: &DeliveryRow,
        from: &str,
        to: &str,
    ) -> Result<(), (Outcome, Option<String>, Option<String>)> {
        let reason = match self.inner.store.advance(row.id, from, to).await {
            Ok(true) => return Ok(()),
            Ok(false) => format!(
                "delivery {} changed state underneath its worker",
                row.message_id
            ),
            Err(e) => e.to_string(),
        };
        Err((Outcome::Failed, Some("relay_store".into()), Some(reason)))
    }

    /// Whether the row's target is a session or ACP member (reached through the API, where
    /// sends are idempotent).
    fn is_session_member(&self, row: &DeliveryRow) -> bool {
        self.inner.dir.load(&row.bundle).ok().is_some_and(|b| {
            b.member(&row.target)
                .is_some_and(|m| matches!(m.transport, Transport::Acp(_) | Transport::Session(_)))
        })
    }

    /// The idempotency key of a delivery's hand-over to a session: one per message and
    /// target, whatever the attempt.
    fn idempotency_key(row: &DeliveryRow) -> String {
        format!("relay:{}:{}:{}", row.bundle, row.message_id, row.target)
    }

    /// One delivery attempt: (outcome, reason code, reason). A row found `committing`
    /// (session members only) resumes at the hand-over.
    async fn deliver(&self, row: &DeliveryRow) -> (Outcome, Option<String>, Option<String>) {
        let fail =
            |code: &str, reason: String| (Outcome::Failed, Some(code.to_string()), Some(reason));
        let b = match self.inner.dir.load(&row.bundle) {
            Ok(b) => b,
            Err(e) => return fail(e.code(), e.to_string()),
        };
        let Some(m) = b.member(&row.target) else {
            return fail(
                "target_removed",
                format!("`{}` is no longer a member of the bundle", row.target),
            );
        };
        match self.inner.store.bundle_state(&row.bundle).await {
            Ok(BundleState::Up) => {}
            Ok(BundleState::Down) => {
                return fail("bundle_down", format!("bundle {} is down", row.bundle));
            }
            Err(e) => return fail("relay_store", e.to_string()),
        }
        if row.state != "committing"
            && let Err(failed) = self.step(row, "queued", "attempting").await
        {
            return failed;
        }
        match &m.transport {
            Transport::Tmux(t) => {
                let tmux = self.tmux(&row.bundle);
                let prompt = match t.prompt_regex.as_deref().map(regex::Regex::new) {
                    None => None,
                    Some(Ok(r)) => Some(r),
                    Some(Err(e)) => return fail("bundle_invalid", e.to_string()),
                };
                let q = Quiescence {
                    quiet_window: row
                        .quiet_window_ms
                        .or(t.quiet_window_ms)
                        .map(Duration::from_millis)
                        .unwrap_or(DEFAULT_QUIET_WINDOW),
                    timeout: row
                        .quiescence_timeout_ms
                        .map(Duration::from_millis)
                        .unwrap_or(self.inner.opts.quiescence_timeout),
                    prompt,
                    ..Quiescence::default()
                };
                match tmux.wait_quiescent(&m.id, &q).await {
                    Ok(()) => {}
                    Err(QuiescenceError::Timeout { blocked_by, waited }) => {
                        return (
                            Outcome::Timeout,
                            Some(blocked_by.code().to_string()),
                            Some(format!(
                                "`{}` did not become ready within {} ms: {blocked_by}",
                                m.id,
                                waited.as_millis()
                            )),
                        );
                    }
                    Err(QuiescenceError::Gone) => {
                        return fail(NOT_READY, format!("`{}`'s pane is gone", m.id));
                    }
                    Err(QuiescenceError::Tmux(e)) => return fail(e.code(), e.to_string()),
                }
                match self.owned_pane(&row.bundle, &m.id).await {
                    Ok(true) => {}
                    Ok(false) => {
                        return fail(
                            NOT_READY,
                            format!("`{}` is not a tmux session the relay started", m.id),
                        );
                    }
                    Err(e) => return fail(e.code(), e.to_string()),
                }
                if let Err(failed) = self.step(row, "attempting", "committing").await {
                    return failed;
                }
                match tmux.paste(&m.id, &row.envelope).await {
                    Ok(()) => {
                        if let Err(e) = self
                            .inner
                            .store
                            .advance(row.id, "committing", "handed_over")
                            .await
                        {
                            tracing::warn!(error = %e, message_id = %row.message_id, "recording a hand-over");
                        }
                        (Outcome::Delivered, None, None)
                    }
                    Err(e) => fail(e.code(), e.to_string()),
                }
            }
            Transport::Acp(_) | Transport::Session(_) => self.deliver_to_session(row, m).await,
        }
    }

    async fn deliver_to_session(
        &self,
        row: &DeliveryRow,
        m: &Member,
    ) -> (Outcome, Option<String>, Option<String>) {
        let fail =
            |code: &str, reason: String| (Outcome::Failed, Some(code.to_string()), Some(reason));
        let Some(id) = self.member_session(&row.bundle, &m.id).await else {
            return fail(NOT_READY, format!("`{}` has no session (relay up)", m.id));
        };
        let client = &self.inner.client;
        let after = match client.get_session(id).await {
            Ok(s) => s.session.last_event_id,
            Err(e) if e.status() == Some(404) => {
                return fail(NOT_READY, format!("`{}`'s session {id} is gone", m.id));
            }
            Err(e) => return fail("session_unreachable", e.to_string()),
        };
        if row.state != "committing"
            && let Err(failed) = self.step(row, "attempting", "committing").await
        {
            return failed;
        }
        // A follow-up starts a run at once when the session is idle and queues durably
        // behind the active run otherwise.
        // Whom the run's usage is for: this bundle.
        let req = SendMessageRequest {
            origin: Some(switchboard_protocol::usage::RunOrigin {
                bundle: Some(row.bundle.clone()),
                ..Default::default()
            }),
            ..SendMessageRequest::user(row.envelope.clone(), MessageType::FollowUp)
        };
        let run_id = match client
            .send_message_once(id, &req, &Self::idempotency_key(row))
            .await
        {
            Ok(r) => r.run_id,
            Err(e) => {
                return fail(
                    e.code().unwrap_or("session_send_failed"),
                    format!("the session refused the message: {e}"),
                );
            }
        };
        // In the session now: a restart from here on reports it delivered, never resends.
        if let Err(e) = self
            .inner
            .store
            .advance(row.id, "committing", "handed_over")
            .await
        {
            tracing::warn!(error = %e, message_id = %row.message_id, "recording a hand-over");
        }
        if !row.sync {
            return (Outcome::Delivered, None, None);
        }
        let limit = row
            .turn_timeout_ms
            .map(Duration::from_millis)
            .unwrap_or(self.inner.opts.turn_timeout);
        let mut run = client.follow_run(id, run_id, Some(after));
        let waited = tokio::time::timeout(limit, async {
            while let Some(step) = run.next().await {
                if let Ok(Step {
                    kind: RunStep::Ended(end),
                    ..
                }) = step
                {
                    return Some(end);
                }
            }
            None
        })
        .await;
        match waited {
            Ok(Some(RunEnd::Completed {
                stop_reason: switchboard_protocol::StopReason::Cancelled,
                ..
            })) => fail(
                "turn_cancelled",
                format!("`{}` received the message but its turn was cancelled", m.id),
            ),
            Ok(Some(RunEnd::Completed { .. })) => (Outcome::Delivered, None, None),
            Ok(Some(RunEnd::Failed { error: message, .. })) => fail(
                "turn_failed",
                format!(
                    "`{}` received the message but its turn failed: {message}",
                    m.id
                ),
            ),
            Ok(_) => fail(
                "session_unreachable",
                format!("the event stream of `{}`'s session ended", m.id),
            ),
            Err(_) => (
                Outcome::Timeout,
                Some("turn_timeout".into()),
                Some(format!(
                    "`{}` received the message but did not finish its turn within {} ms",
                    m.id,
                    limit.as_millis()
                )),
            ),
        }
    }
}
