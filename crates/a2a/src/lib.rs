//! Remote A2A agents as session backends: Switchboard as an Agent2Agent (v1.0) client.
//!
//! A session whose backend is an `[agents.NAME]` with `a2a = URL` sends each run's message
//! to that agent with `SendStreamingMessage` over the JSON-RPC binding and follows the task
//! it starts: artifacts' text is the reply (streamed), their files are shared with the user,
//! progress messages are the agent's thinking, and the task's state ends the run. The
//! session is one A2A context (its `contextId` is kept in the session's backend state), so
//! the agent sees one conversation; a task that stops at `input-required` is continued by
//! the session's next message. A cancelled run cancels its task (`CancelTask`); a stream
//! that breaks is taken up again with `SubscribeToTask`, or by reading the task until it
//! settles when the agent cannot stream.
//!
//! The relay reaches such an agent like any other: a `[members.session]` whose backend is
//! its name (docs/a2a.md).

mod reply;
mod wire;

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use switchboard_engine::{Backend, BackendError, RunContext, RunSummary};
use switchboard_protocol::{Role, RunErrorCode, SteeringDelivery, Usage};

pub use reply::State;
pub use wire::{A2aAgent, WireError};

use reply::Reply;
use wire::Remote;

/// How often a stream that broke is taken up again before the run fails.
const RESUMES: u32 = 3;
/// How long a `CancelTask` may take.
const CANCEL_WAIT: Duration = Duration::from_secs(10);
/// Attached files larger than this are named, not sent.
const MAX_SENT_FILE: u64 = 10 * 1024 * 1024;

/// What a session keeps between runs (its backend state).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SessionState {
    /// The A2A context the session is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    context_id: Option<String>,
    /// A task left waiting for input (`input-required`, `auth-required`): the next message
    /// continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    open_task: Option<String>,
}

/// A remote A2A agent as a backend.
pub struct A2aBackend {
    name: String,
    remote: Remote,
}

impl A2aBackend {
    pub fn new(name: impl Into<String>, agent: A2aAgent) -> Result<Self, WireError> {
        Ok(Self {
            name: name.into(),
            remote: Remote::new(agent)?,
        })
    }

    fn failed(&self, e: &WireError) -> BackendError {
        BackendError::new(
            RunErrorCode::AgentFailed,
            format!("agent {:?}: {e}", self.name),
            e.retryable(),
        )
    }

    /// The run's message: its text, and the attached files as file parts.
    async fn message(&self, ctx: &RunContext, state: &SessionState) -> Value {
        let notes = ctx.input.attachment_notes();
        let full = ctx.input.prompt_text();
        let mut text = full
            .strip_suffix(notes.as_str())
            .unwrap_or(&full)
            .to_string();
        let mut parts = Vec::new();
        for f in &ctx.input.attachments {
            let path = ctx.cwd.join(switchboard_engine::files::inbox_path(f));
            let bytes = match tokio::fs::metadata(&path).await {
                Ok(m) if m.len() <= MAX_SENT_FILE => tokio::fs::read(&path).await.ok(),
                _ => None,
            };
            match bytes {
                Some(bytes) => parts.push(json!({
                    "raw": base64::engine::general_purpose::STANDARD.encode(bytes),
                    "filename": f.name,
                    "mediaType": f.mime,
                })),
                None => text.push_str(&format!(
                    "\n[attached: {} ({}, {} bytes) — not sent: larger than {} MB or unreadable]",
                    f.name,
                    f.mime,
                    f.size,
                    MAX_SENT_FILE >> 20
                )),
            }
        }
        parts.insert(0, json!({"text": text}));
        let mut message = json!({
            "messageId": uuid::Uuid::now_v7().to_string(),
            "role": "ROLE_USER",
            "parts": parts,
        });
        if let Some(c) = &state.context_id {
            message["contextId"] = json!(c);
        }
        if let Some(t) = &state.open_task {
            message["taskId"] = json!(t);
        }
        message
    }

    /// Starts the task: `SendStreamingMessage`, or `SendMessage` to an agent whose card
    /// says it does not stream (its answer is the stream's one item; the task is then read
    /// until it settles). An open task or a context the agent says it does not know
    /// (`-32001`; for an open task also one it no longer takes input on, `-32004`, or whose
    /// context it refuses, `-32602`) is dropped and the message sent again without it, with
    /// a notice; any other refusal fails the run as it is.
    async fn send(
        &self,
        ctx: &RunContext,
        state: &mut SessionState,
    ) -> Result<futures::stream::BoxStream<'static, Result<Value, WireError>>, WireError> {
        loop {
            let message = self.message(ctx, state).await;
            let params = json!({"message": message});
            let sent = match self.remote.endpoint().await {
                Ok(e) if e.streaming => self.remote.stream("SendStreamingMessage", params).await,
                Ok(_) => self
                    .remote
                    .call("SendMessage", params)
                    .await
                    .map(|one| futures::stream::once(async move { Ok(one) }).boxed()),
                Err(e) => Err(e),
            };
            let forgotten = |code: i64, open: bool| {
                code == -32001 || (open && (code == -32004 || code == -32602))
            };
            match sent {
                Err(WireError::Rpc { code, message, .. })
                    if (state.open_task.is_some() && forgotten(code, true))
                        || (state.context_id.is_some() && forgotten(code, false)) =>
                {
                    let what = if state.open_task.take().is_some() {
                        "the task waiting for an answer"
                    } else {
                        state.context_id = None;
                        "this conversation"
                    };
                    notice(
                        ctx,
                        format!(
                            "agent {:?} no longer knows {what} ({message}, code {code}): the message starts anew",
                            self.name
                        ),
                    )
                    .await;
                }
                Err(e) => {
                    if e.retryable() {
                        self.remote.forget_endpoint();
                    }
                    return Err(e);
                }
                Ok(s) => return Ok(s),
            }
        }
    }

    /// Takes up a task whose stream broke: `SubscribeToTask`, else (an agent that cannot
    /// stream) the task read every second until it settles.
    async fn follow_again(
        &self,
        ctx: &RunContext,
        reply: &mut Reply,
        task: &str,
    ) -> Result<Option<futures::stream::BoxStream<'static, Result<Value, WireError>>>, BackendError>
    {
        let subscribed = tokio::select! {
            s = self.remote.stream("SubscribeToTask", json!({"id": task})) => s,
            () = ctx.cancel.cancelled() => return Ok(None),
        };
        match subscribed {
            Ok(s) => return Ok(Some(s)),
            Err(WireError::Rpc { .. }) => {}
            Err(e) => return Err(self.failed(&e)),
        }
        loop {
            let t = tokio::select! {
                t = self.remote.call("GetTask", json!({"id": task})) => t,
                () = ctx.cancel.cancelled() => return Ok(None),
            };
            let t = t.map_err(|e| self.failed(&e))?;
            reply
                .take(&ctx.handle, &json!({"task": t}))
                .await
                .map_err(BackendError::from)?;
            if reply.settled.is_some() {
                return Ok(None);
            }
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                () = ctx.cancel.cancelled() => return Ok(None),
            }
        }
    }

    async fn cancel_task(&self, task: Option<&str>) {
        let Some(task) = task else {
            return;
        };
        match tokio::time::timeout(
            CANCEL_WAIT,
            self.remote.call("CancelTask", json!({"id": task})),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(agent = %self.name, task, error = %e, "the agent did not cancel its task")
            }
            Err(_) => {
                tracing::warn!(agent = %self.name, task, "the agent did not answer CancelTask in time")
            }
        }
    }

    /// Follows the task to its end; `Ok(false)`: the run was cancelled.
    async fn follow(
        &self,
        ctx: &RunContext,
        reply: &mut Reply,
        state: &mut SessionState,
        mut stream: futures::stream::BoxStream<'static, Result<Value, WireError>>,
    ) -> Result<bool, BackendError> {
        let mut resumes = 0;
        loop {
            let next = tokio::select! {
                n = stream.next() => n,
                () = ctx.cancel.cancelled() => {
                    drop(stream);
                    self.cancel_task(reply.task_id.as_deref()).await;
                    return Ok(false);
                }
            };
            let broke = match next {
                Some(Ok(item)) => {
                    reply
                        .take(&ctx.handle, &item)
                        .await
                        .map_err(BackendError::from)?;
                    if reply.context_id.is_some() && reply.context_id != state.context_id {
                        state.context_id.clone_from(&reply.context_id);
                        save(ctx, state).await?;
                    }
                    if reply.settled.is_some() {
                        return Ok(true);
                    }
                    continue;
                }
                Some(Err(e)) => e.to_string(),
                None => "the stream ended before the task settled".to_string(),
            };
            let Some(task) = reply.task_id.clone() else {
                return Err(self.failed(&WireError::Protocol(broke)));
            };
            resumes += 1;
            if resumes > RESUMES {
                return Err(self.failed(&WireError::Protocol(format!(
                    "{broke} ({RESUMES} times; task {task})"
                ))));
            }
            tracing::info!(agent = %self.name, %task, reason = %broke, "following the task again");
            match self.follow_again(ctx, reply, &task).await? {
                Some(s) => stream = s,
                None if ctx.cancel.is_cancelled() => {
                    self.cancel_task(Some(&task)).await;
                    return Ok(false);
                }
                None => return Ok(true),
            }
        }
    }
}

/// A `Notice` in the run (best effort: not worth failing the run for).
async fn notice(ctx: &RunContext, message: String) {
    let _ = ctx.handle.notice(message).await;
}

async fn save(ctx: &RunContext, state: &SessionState) -> Result<(), BackendError> {
    let v = serde_json::to_value(state).unwrap_or_default();
    ctx.handle
        .save_backend_state(Some(&v))
        .await
        .map_err(BackendError::from)
}

fn summary(stop_reason: &str) -> RunSummary {
    RunSummary {
        stop_reason: stop_reason.into(),
        total_turns: 1,
        usage: Usage::default(),
    }
}

#[async_trait]
impl Backend for A2aBackend {
    /// A task in progress takes no more input: steering waits for the next message.
    fn steering(&self) -> SteeringDelivery {
        SteeringDelivery::NextPrompt
    }

    async fn run(&self, ctx: RunContext) -> Result<RunSummary, BackendError> {
        let mut state: SessionState = ctx
            .handle
            .backend_state()
            .await
            .map_err(BackendError::from)?
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default();
        let stream = tokio::select! {
            s = self.send(&ctx, &mut state) => s.map_err(|e| self.failed(&e))?,
            () = ctx.cancel.cancelled() => return Ok(summary("cancelled")),
        };
        // Sent on a task that waited for input: the task as it was is not said again.
        let mut reply = if state.open_task.is_some() {
            Reply::continuing()
        } else {
            Reply::default()
        };
        let followed = self.follow(&ctx, &mut reply, &mut state, stream).await;
        // What was said is kept, however the run ends.
        if !reply.text.is_empty() {
            ctx.handle
                .record(Role::Assistant, &reply.text, &[], None)
                .await
                .map_err(BackendError::from)?;
        }
        let settled = match followed {
            Ok(true) => reply.settled.clone(),
            Ok(false) => None,
            Err(e) => {
                state.open_task = None;
                save(&ctx, &state).await?;
                return Err(e);
            }
        };
        state.open_task = None;
        let Some(settled) = settled else {
            save(&ctx, &state).await?;
            return Ok(summary("cancelled"));
        };
        let task = reply.task_id.clone().unwrap_or_default();
        let stop = match settled.state {
            State::InputRequired | State::AuthRequired => {
                state.open_task = reply.task_id.clone();
                let what = if settled.state == State::AuthRequired {
                    "authorization"
                } else {
                    "more input"
                };
                notice(
                    &ctx,
                    format!(
                        "agent {:?} asks for {what} (task {task}): the next message answers it",
                        self.name
                    ),
                )
                .await;
                "end_turn"
            }
            State::Canceled => "cancelled",
            State::Rejected => "refused",
            State::Failed => {
                save(&ctx, &state).await?;
                let why = if settled.message.trim().is_empty() {
                    "no reason given".to_string()
                } else {
                    settled.message.trim().to_string()
                };
                return Err(BackendError::new(
                    RunErrorCode::AgentFailed,
                    format!("agent {:?}: the task failed: {why}", self.name),
                    false,
                ));
            }
            _ => "end_turn",
        };
        save(&ctx, &state).await?;
        Ok(summary(stop))
    }
}
