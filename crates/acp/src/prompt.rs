//! One turn with an ACP agent: `session/prompt`, the updates and permission requests that
//! come while it runs, cancellation with its grace period.

use std::time::Instant;

use agent_client_protocol::v1::schema::*;
use switchboard_engine::{BackendError, Decision, RunContext};
use switchboard_protocol::{RejectionCause, RunErrorCode};

use crate::conn::{Conn, Incoming};
use crate::{AcpBackend, CANCEL_GRACE, elicit, map};

impl AcpBackend {
    /// One `session/prompt` and everything the agent sends until it answers. Returns the
    /// stop reason and whether the connection is still fit for another turn (an agent that
    /// had to be cut off is not).
    pub(crate) async fn prompt(
        &self,
        conn: &mut Conn,
        session: &SessionId,
        ctx: &RunContext,
        blocks: Vec<ContentBlock>,
        turn: &mut map::Turn,
    ) -> Result<(String, bool), BackendError> {
        // Anything left from an earlier turn is stale: answer it so the agent is not stuck.
        while let Ok(item) = conn.incoming.try_recv() {
            item.dismiss();
        }
        let req = PromptRequest::new(session.clone(), blocks);
        let mut reply = tokio::spawn(conn.cx.send_request(req).block_task());
        let mut cancel_sent: Option<Instant> = None;
        loop {
            let grace = async {
                match cancel_sent {
                    Some(at) => tokio::time::sleep(CANCEL_GRACE.saturating_sub(at.elapsed())).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                Some(item) = conn.incoming.recv() => {
                    match item {
                        Incoming::Update(n) => turn.update(&ctx.handle, n.update).await?,
                        Incoming::Permission(req, responder) => {
                            let outcome = self
                                .permission(conn, session, ctx, turn, &req, &mut cancel_sent)
                                .await;
                            if let Err(e) = responder.respond(RequestPermissionResponse::new(outcome)) {
                                tracing::warn!(agent = %self.name, error = %e, "could not answer a permission request");
                            }
                        }
                        Incoming::Question(req, responder) => {
                            let action = self
                                .question(conn, session, ctx, turn, &req, &mut cancel_sent)
                                .await?;
                            if let Err(e) = responder.respond(CreateElicitationResponse::new(action)) {
                                tracing::warn!(agent = %self.name, error = %e, "could not answer an elicitation");
                            }
                        }
                    }
                }
                done = &mut reply => {
                    // Updates sent before the answer are already queued: handle them first.
                    while let Ok(item) = conn.incoming.try_recv() {
                        match item {
                            Incoming::Update(n) => turn.update(&ctx.handle, n.update).await?,
                            other => other.dismiss(),
                        }
                    }
                    return match done {
                        Ok(Ok(resp)) => Ok((map::stop_reason(resp.stop_reason), true)),
                        Ok(Err(e)) => Err(conn.failure(&self.name, "session/prompt", &e).await.into()),
                        Err(e) => Err(BackendError::new(RunErrorCode::AgentFailed, format!("agent {:?}: prompt task failed: {e}", self.name), true)),
                    };
                }
                _ = ctx.cancel.cancelled(), if cancel_sent.is_none() => {
                    self.send_cancel(conn, session, &mut cancel_sent);
                }
                _ = grace => {
                    tracing::warn!(agent = %self.name, "the agent did not end its turn within {} s of session/cancel; stopping it", CANCEL_GRACE.as_secs());
                    reply.abort();
                    return Ok(("cancelled".into(), false));
                }
            }
        }
    }

    fn send_cancel(&self, conn: &Conn, session: &SessionId, sent: &mut Option<Instant>) {
        if sent.is_some() {
            return;
        }
        tracing::info!(agent = %self.name, "sending session/cancel");
        if let Err(e) = conn
            .cx
            .send_notification(CancelNotification::new(session.clone()))
        {
            tracing::warn!(agent = %self.name, error = %e, "could not send session/cancel");
        }
        *sent = Some(Instant::now());
    }

    /// A permission request becomes a Switchboard approval: policy first, then a person.
    /// The wait ends early if the agent dies (the approval is withdrawn) or the run is
    /// cancelled (`session/cancel` goes out first, then the answer `cancelled`, as the
    /// protocol asks).
    async fn permission(
        &self,
        conn: &Conn,
        session: &SessionId,
        ctx: &RunContext,
        turn: &mut map::Turn,
        req: &RequestPermissionRequest,
        cancel_sent: &mut Option<Instant>,
    ) -> RequestPermissionOutcome {
        if cancel_sent.is_some() || ctx.cancel.is_cancelled() {
            self.send_cancel(conn, session, cancel_sent);
            return RequestPermissionOutcome::Cancelled;
        }
        let (call, class) = turn.permission_call(req, &ctx.cwd, ctx.config.permission_mode);
        let call_id = call.id.clone();
        let Some(decision) = self
            .decide(conn, session, ctx, call, class, cancel_sent)
            .await
        else {
            return RequestPermissionOutcome::Cancelled;
        };
        if cancel_sent.is_some() || ctx.cancel.is_cancelled() {
            self.send_cancel(conn, session, cancel_sent);
            return RequestPermissionOutcome::Cancelled;
        }
        if decision != Decision::Run {
            turn.rejected(&call_id);
        }
        map::outcome(&decision, &req.options)
    }

    /// One call through the approval gate, the wait ending early if the agent goes away
    /// (`None`) or the run is cancelled (`session/cancel` first; the gate then rejects).
    async fn decide(
        &self,
        conn: &Conn,
        session: &SessionId,
        ctx: &RunContext,
        call: switchboard_protocol::ToolCall,
        class: switchboard_engine::ToolClass,
        cancel_sent: &mut Option<Instant>,
    ) -> Option<Decision> {
        let calls = [(call, class)];
        let gate = ctx.handle.gate(&calls);
        tokio::pin!(gate);
        let decided = loop {
            tokio::select! {
                d = &mut gate => break Some(d),
                _ = ctx.cancel.cancelled(), if cancel_sent.is_none() => {
                    // session/cancel first; the gate sees the cancel too and rejects.
                    self.send_cancel(conn, session, cancel_sent);
                }
                _ = conn.cx.incoming_closed() => {
                    tracing::warn!(agent = %self.name, "the agent went away while its request waited for a person");
                    break None;
                }
            }
        };
        match decided? {
            Ok(d) => Some(d.into_iter().next().unwrap_or_else(|| {
                Decision::Rejected(RejectionCause::Cancelled, "no decision was made".into())
            })),
            Err(e) => {
                tracing::warn!(agent = %self.name, error = %e, "approval failed; answering cancelled");
                None
            }
        }
    }

    /// The agent's question (`elicitation/create`) asked as an approval in every mode
    /// (crate::elicit); the decision is its answer. A cancelled run cancels it.
    async fn question(
        &self,
        conn: &Conn,
        session: &SessionId,
        ctx: &RunContext,
        turn: &mut map::Turn,
        req: &CreateElicitationRequest,
        cancel_sent: &mut Option<Instant>,
    ) -> Result<ElicitationAction, BackendError> {
        if cancel_sent.is_some() || ctx.cancel.is_cancelled() {
            self.send_cancel(conn, session, cancel_sent);
            return Ok(ElicitationAction::Cancel);
        }
        let Some(call) = elicit::question(turn.question_id(), req) else {
            tracing::warn!(agent = %self.name, "an elicitation of a mode Switchboard does not know: declined");
            return Ok(ElicitationAction::Decline);
        };
        let Some(decision) = self
            .decide(
                conn,
                session,
                ctx,
                call.clone(),
                switchboard_engine::ToolClass::Question,
                cancel_sent,
            )
            .await
        else {
            return Ok(ElicitationAction::Cancel);
        };
        if cancel_sent.is_some() || ctx.cancel.is_cancelled() {
            self.send_cancel(conn, session, cancel_sent);
            return Ok(ElicitationAction::Cancel);
        }
        let (action, shown) = elicit::answer(&decision, req);
        match (&decision, shown) {
            (Decision::Run | Decision::Custom(_), Some(shown)) => {
                turn.answered(&ctx.handle, &call, &shown, false).await?;
            }
            (Decision::Rejected(..), _) => {
                turn.not_answered(&ctx.handle, &call, &decision).await?;
            }
            // Allowed (or answered) but the form could not be filled: declined, and said so.
            (_, None) => {
                let why = "declined: the answer left a required field of the form empty (answer with a result that fills it)";
                turn.answered(&ctx.handle, &call, why, true).await?;
            }
        }
        Ok(action)
    }
}
