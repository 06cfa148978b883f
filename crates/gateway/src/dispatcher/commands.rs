//! Chat commands (`/new`, `/stop`, `/status`, …).

use std::sync::Arc;

use switchboard_protocol::RunStatus;

use crate::channel::{Channel, InboundMessage};

use super::*;

impl Gateway {
    pub(super) async fn on_command(
        &self,
        channel: &Arc<dyn Channel>,
        key: &str,
        m: &InboundMessage,
        cmd: Command,
    ) -> Result<(), GatewayError> {
        let route = self.inner.store.route(key).await?;
        let reply = match cmd {
            Command::New => {
                if route.as_ref().is_some_and(|r| r.bound) {
                    "This chat is bound to a fixed session; /new does not change it.".to_string()
                } else {
                    // The old session's pending approval and run end here, so nothing of it
                    // holds up the new one.
                    if let Some(r) = &route {
                        if let Some(p) = self.inner.store.prompt_of_session(r.session_id).await? {
                            self.settle_prompt(&p, false, "the chat started a new session", None)
                                .await;
                        }
                        if let Ok(s) = self.inner.client.get_session(r.session_id).await
                            && let Some(run) = s.session.active_run_id
                        {
                            log_err(
                                "cancelling the old session's run",
                                self.inner.client.cancel(r.session_id, run).await,
                            );
                        }
                    }
                    self.inner.store.delete_route(key).await?;
                    "Done: your next message starts a new session.".to_string()
                }
            }
            Command::Stop => {
                // Messages still waiting go too: /stop means "stop what you are doing".
                let queued = self.inner.store.queued(key).await?;
                if let Some(last) = queued.last() {
                    self.inner.store.dequeue(key, last.id).await?;
                }
                let dropped = if queued.is_empty() {
                    String::new()
                } else {
                    format!(" ({} queued message(s) dropped)", queued.len())
                };
                let active = match &route {
                    None => None,
                    Some(r) => self
                        .inner
                        .client
                        .get_session(r.session_id)
                        .await?
                        .session
                        .active_run_id
                        .map(|run| (r.session_id, run)),
                };
                match active {
                    Some((session, run)) => {
                        self.inner.client.cancel(session, run).await?;
                        format!("Stopping the current run.{dropped}")
                    }
                    None => format!("Nothing is running.{dropped}"),
                }
            }
            Command::Status => match &route {
                None => "No session yet: send a message to start one.".into(),
                Some(r) => {
                    let s = self.inner.client.get_session(r.session_id).await?;
                    let state = match s.session.run_status {
                        RunStatus::Running => "running",
                        RunStatus::Idle => "idle",
                    };
                    let pending = self.inner.store.prompt_of_session(r.session_id).await?;
                    let queued = self.inner.store.queued(key).await?.len();
                    format!(
                        "Session {} ({})\nRun: {state}\nApproval pending: {}\nQueued messages: {queued}",
                        r.session_id,
                        s.session.title,
                        if pending.is_some() { "yes" } else { "no" },
                    )
                }
            },
        };
        log_err(
            "answering a command",
            channel.send(&m.chat, &reply, &[]).await,
        );
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Command {
    New,
    Stop,
    Status,
}

/// `/new`, `/stop`, `/status` (also `/stop@botname`).
pub(super) fn command(text: &str) -> Option<Command> {
    let first = text.split_whitespace().next()?;
    let name = first.strip_prefix('/')?;
    let name = name.split('@').next().unwrap_or(name);
    match name {
        "new" => Some(Command::New),
        "stop" => Some(Command::Stop),
        "status" => Some(Command::Status),
        _ => None,
    }
}
