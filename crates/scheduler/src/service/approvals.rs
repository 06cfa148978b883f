//! The approvals of a scheduled run: rejected, or asked in a chat (`approvals = ask`) until they expire.

use super::*;

/// A question asked in a chat for a scheduled run's waiting calls.
pub(super) struct Asked {
    prompt_id: String,
    ids: Vec<String>,
    /// On the scheduler's clock.
    deadline: DateTime<Utc>,
    reason: String,
}

impl Scheduler {
    /// Rejects waiting calls (recorded as not run when their rejection is seen).
    pub(super) async fn reject(
        &self,
        f: &FiringRow,
        session: Uuid,
        run: Uuid,
        ids: &[String],
        why: &str,
    ) {
        let decisions = ids
            .iter()
            .map(|id| {
                (
                    id.clone(),
                    ToolDecision {
                        action: DecisionAction::Reject,
                        content: Some(why.into()),
                        by: None,
                        cause: Some(RejectionCause::Policy),
                    },
                )
            })
            .collect();
        if let Err(e) = self
            .inner
            .client
            .decide_tools(
                session,
                &ToolDecisionsRequest {
                    run_id: run,
                    decisions,
                },
            )
            .await
        {
            // Decided elsewhere first, or the run moved on.
            tracing::info!(firing = %f.firing.id, error = %e, "rejecting a scheduled run's tool calls");
        }
    }

    /// `approvals = ask`: the calls are asked about in the first chat of `deliver`; when
    /// that is not possible they are rejected (fail closed).
    pub(super) async fn ask(
        &self,
        f: &FiringRow,
        spec: &ScheduleSpec,
        session: Uuid,
        run: Uuid,
        ids: &[String],
    ) -> Option<Asked> {
        let timeout = spec::ask_timeout(spec).unwrap_or(spec::DEFAULT_ASK_TIMEOUT);
        let channels = self.channels().await;
        let target = spec
            .deliver
            .iter()
            .find_map(|t| parse_target(t, &channels).ok());
        let Some(t) = target else {
            let why = "no chat of deliver is on a configured channel to ask in: rejected, as nobody is watching";
            self.reject(f, session, run, ids, why).await;
            return None;
        };
        let asked = self
            .inner
            .client
            .gateway_ask(&GatewayAskRequest {
                channel: t.channel,
                target: t.chat,
                thread: t.thread,
                session_id: session,
                run_id: run,
                tool_call_ids: ids.to_vec(),
                title: Some(format!("⏰ {} asks:", spec::display_name(spec))),
            })
            .await;
        match asked {
            Ok(r) => Some(Asked {
                prompt_id: r.prompt_id,
                ids: ids.to_vec(),
                deadline: self.now()
                    + TimeDelta::from_std(timeout).unwrap_or(TimeDelta::minutes(10)),
                reason: format!(
                    "nobody answered within {}: rejected (the schedule's approvals = ask)",
                    humantime::format_duration(timeout)
                ),
            }),
            // Decided already (a replay of the log after a restart).
            Err(e) if e.status() == Some(409) => None,
            Err(e) => {
                tracing::warn!(firing = %f.firing.id, error = %e, "asking for a scheduled run's approval failed; rejecting");
                let why =
                    format!("could not ask for an approval ({e}): rejected, as nobody is watching");
                self.reject(f, session, run, ids, &why).await;
                None
            }
        }
    }

    /// A call was decided (it ran or was rejected): its question no longer waits, and a
    /// prompt still showing buttons (decided elsewhere) is closed.
    pub(super) async fn close_asked(&self, asked: &mut Vec<Asked>, id: &str) {
        let (done, keep): (Vec<Asked>, Vec<Asked>) = std::mem::take(asked)
            .into_iter()
            .partition(|a| a.ids.iter().any(|i| i == id));
        *asked = keep;
        for a in done {
            // 404: answered in the chat (the usual case).
            let _ = self
                .inner
                .client
                .gateway_expire(&a.prompt_id, "decided elsewhere")
                .await;
        }
    }

    /// Rejects the asked calls whose time is up (the chat's prompt says so).
    pub(super) async fn expire_asked(&self, asked: &mut Vec<Asked>, session: Uuid, run: Uuid) {
        let now = self.now();
        let (due, keep): (Vec<Asked>, Vec<Asked>) = std::mem::take(asked)
            .into_iter()
            .partition(|a| a.deadline <= now);
        *asked = keep;
        for a in due {
            if let Err(e) = self
                .inner
                .client
                .gateway_expire(&a.prompt_id, &a.reason)
                .await
                && e.status() != Some(404)
            {
                tracing::warn!(prompt = %a.prompt_id, error = %e, "expiring a question failed; rejecting its calls directly");
            }
            // Whatever the gateway did: the calls must not wait on (409 when they are
            // decided already).
            let decisions = a
                .ids
                .iter()
                .map(|id| {
                    (
                        id.clone(),
                        ToolDecision {
                            action: DecisionAction::Reject,
                            content: Some(a.reason.clone()),
                            by: None,
                            cause: Some(RejectionCause::Timeout),
                        },
                    )
                })
                .collect();
            let _ = self
                .inner
                .client
                .decide_tools(
                    session,
                    &ToolDecisionsRequest {
                        run_id: run,
                        decisions,
                    },
                )
                .await;
        }
    }
}
