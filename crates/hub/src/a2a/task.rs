//! An A2A task is a Switchboard run: its id is `SESSION.RUN`, its context the session. A
//! [`Tracker`] follows the run (the client's one run follower) and keeps the task's state,
//! artifacts and subscribers; JSON is A2A v1.0's (proto3 JSON: camelCase, `TASK_STATE_*`).

use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use switchboard_client::{Client as Api, RunEnd, RunStep};
use switchboard_protocol::StopReason;
use tokio::sync::broadcast;
use uuid::Uuid;

use super::push::Pusher;

/// A task's state, as A2A names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Submitted,
    Working,
    InputRequired,
    Completed,
    Canceled,
    Failed,
    Rejected,
}

impl State {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            State::Submitted => "TASK_STATE_SUBMITTED",
            State::Working => "TASK_STATE_WORKING",
            State::InputRequired => "TASK_STATE_INPUT_REQUIRED",
            State::Completed => "TASK_STATE_COMPLETED",
            State::Canceled => "TASK_STATE_CANCELED",
            State::Failed => "TASK_STATE_FAILED",
            State::Rejected => "TASK_STATE_REJECTED",
        }
    }

    pub(crate) fn terminal(self) -> bool {
        matches!(
            self,
            State::Completed | State::Canceled | State::Failed | State::Rejected
        )
    }

    /// A blocking send answers, and a stream ends, at a terminal state or one that waits
    /// for the client.
    pub(crate) fn settled(self) -> bool {
        self.terminal() || self == State::InputRequired
    }
}

/// The id of a task: `SESSION.RUN`.
pub(crate) fn task_id(session: Uuid, run: Uuid) -> String {
    format!("{session}.{run}")
}

pub(crate) fn parse_task_id(id: &str) -> Option<(Uuid, Uuid)> {
    let (s, r) = id.split_once('.')?;
    Some((Uuid::parse_str(s).ok()?, Uuid::parse_str(r).ok()?))
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// A text message of the agent about this task.
fn agent_message(task: &str, context: &str, text: &str) -> Value {
    json!({"messageId": Uuid::now_v7().to_string(), "role": "ROLE_AGENT",
        "parts": [{"text": text}], "taskId": task, "contextId": context})
}

/// What is known of one task.
pub(crate) struct TaskState {
    pub(crate) id: String,
    pub(crate) session: Uuid,
    pub(crate) run: Uuid,
    pub(crate) state: State,
    status_message: Option<Value>,
    timestamp: String,
    reply: String,
    files: Vec<Value>,
    history: Vec<Value>,
    /// The calls waiting for a decision (ids, and whether each is the agent's question),
    /// while input is required.
    pub(crate) waiting: Vec<(String, bool)>,
}

impl TaskState {
    pub(crate) fn json(&self) -> Value {
        let context = self.session.to_string();
        let mut status = json!({"state": self.state.as_str(), "timestamp": self.timestamp});
        if let Some(m) = &self.status_message {
            status["message"] = m.clone();
        }
        let mut artifacts = Vec::new();
        if !self.reply.is_empty() {
            artifacts.push(
                json!({"artifactId": "reply", "name": "reply", "parts": [{"text": self.reply}]}),
            );
        }
        artifacts.extend(self.files.iter().cloned());
        let mut task =
            json!({"id": self.id, "contextId": context, "status": status, "history": self.history});
        if !artifacts.is_empty() {
            task["artifacts"] = Value::Array(artifacts);
        }
        task
    }

    fn status_update(&self) -> Value {
        let mut status = json!({"state": self.state.as_str(), "timestamp": self.timestamp});
        if let Some(m) = &self.status_message {
            status["message"] = m.clone();
        }
        json!({"statusUpdate": {"taskId": self.id, "contextId": self.session.to_string(), "status": status}})
    }
}

/// A live task: its state and who listens.
pub(crate) struct Tracked {
    pub(crate) state: Mutex<TaskState>,
    /// Each event as A2A streams it (`{"statusUpdate": …}`, `{"artifactUpdate": …}`).
    pub(crate) events: broadcast::Sender<Value>,
    pub(crate) push: Pusher,
    /// The run has shown itself in the log (read back: a task id naming no run of the
    /// session is not one).
    pub(crate) seen: std::sync::atomic::AtomicBool,
    /// When the task reached a final state (it is forgotten some time after).
    ended: Mutex<Option<std::time::Instant>>,
    /// The follower of the run, stopped when the task ends without it.
    follower: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Tracked {
    pub(crate) fn new(session: Uuid, run: Uuid, first: Value, push: Pusher) -> Arc<Self> {
        let id = task_id(session, run);
        let mut first = first;
        first["taskId"] = json!(id);
        first["contextId"] = json!(session.to_string());
        let (events, _) = broadcast::channel(1024);
        Arc::new(Tracked {
            state: Mutex::new(TaskState {
                id,
                session,
                run,
                state: State::Submitted,
                status_message: None,
                timestamp: now(),
                reply: String::new(),
                files: Vec::new(),
                history: vec![first],
                waiting: Vec::new(),
            }),
            events,
            push,
            seen: std::sync::atomic::AtomicBool::new(false),
            ended: Mutex::new(None),
            follower: Mutex::new(None),
        })
    }

    /// Starts following the run (see [`Tracked::follow`]).
    pub(crate) fn start(self: &Arc<Self>, api: Api, from: Option<u64>, base: String) {
        let task = tokio::spawn(self.clone().follow(api, from, base));
        *self.follower.lock() = Some(task);
    }

    /// Stops following (a task read back that is no task, or one canceled while queued).
    pub(crate) fn stop(&self) {
        if let Some(t) = self.follower.lock().take() {
            t.abort();
        }
    }

    /// The run was cancelled before it started (a queued run leaves no event of its own).
    pub(crate) fn canceled_while_queued(&self) {
        if self.current() == State::Submitted {
            self.set(State::Canceled, None);
            self.stop();
        }
    }

    /// When it ended, if it has.
    pub(crate) fn ended_at(&self) -> Option<std::time::Instant> {
        *self.ended.lock()
    }

    /// The whole reply so far, as one (not appended) artifact update: for a reader that
    /// fell behind and lost chunks.
    pub(crate) fn reply_update(&self) -> Value {
        let s = self.state.lock();
        json!({"artifactUpdate": {"taskId": s.id, "contextId": s.session.to_string(),
            "artifact": {"artifactId": "reply", "name": "reply", "parts": [{"text": s.reply}]}}})
    }

    pub(crate) fn snapshot(&self) -> Value {
        self.state.lock().json()
    }

    pub(crate) fn current(&self) -> State {
        self.state.lock().state
    }

    pub(super) fn set(&self, state: State, message: Option<String>) {
        let update = {
            let mut s = self.state.lock();
            if s.state == state && message.is_none() {
                return;
            }
            s.state = state;
            s.timestamp = now();
            if state.terminal() {
                *self.ended.lock() = Some(std::time::Instant::now());
            }
            let (id, ctx) = (s.id.clone(), s.session.to_string());
            s.status_message = message.map(|m| agent_message(&id, &ctx, &m));
            s.status_update()
        };
        let _ = self.events.send(update.clone());
        self.push.deliver(update);
    }

    fn append(&self, text: &str) {
        let update = {
            let mut s = self.state.lock();
            s.reply.push_str(text);
            json!({"artifactUpdate": {"taskId": s.id, "contextId": s.session.to_string(),
                "artifact": {"artifactId": "reply", "name": "reply", "parts": [{"text": text}]},
                "append": true}})
        };
        let _ = self.events.send(update);
    }

    fn file(&self, artifact: Value) {
        let update = {
            let mut s = self.state.lock();
            s.files.push(artifact.clone());
            json!({"artifactUpdate": {"taskId": s.id, "contextId": s.session.to_string(),
                "artifact": artifact, "lastChunk": true}})
        };
        let _ = self.events.send(update);
    }

    /// Follows the run to its end, keeping the task's state. `from`: the log's end before
    /// the run's message was sent; `base`: where the client reaches this server (files'
    /// URLs).
    pub(crate) async fn follow(self: Arc<Self>, api: Api, from: Option<u64>, base: String) {
        let (session, run) = {
            let s = self.state.lock();
            (s.session, s.run)
        };
        let mut follower = api.follow_run(session, run, from);
        while let Some(step) = follower.next().await {
            self.seen.store(true, std::sync::atomic::Ordering::Release);
            let step = match step {
                Ok(s) => s,
                Err(e) => {
                    tracing::info!(%session, %run, error = %e, "A2A task: the run's events ended");
                    self.set(State::Failed, Some(format!("the run's events ended: {e}")));
                    return;
                }
            };
            match step.kind {
                RunStep::Started { .. }
                | RunStep::ToolStarted { .. }
                | RunStep::ToolRejected { .. } => {
                    self.state.lock().waiting.clear();
                    self.set(State::Working, None);
                }
                RunStep::Text(t) => self.append(&t),
                RunStep::ToolsWaiting(calls) => {
                    self.state.lock().waiting = calls
                        .iter()
                        .map(|c| (c.id.clone(), crate::question::is_question(c)))
                        .collect();
                    self.set(State::InputRequired, Some(input_wanted(&calls)));
                }
                RunStep::FileShared { file, caption } => {
                    let mut part = json!({
                        "url": format!("{base}/v1/sessions/{session}/files/{}", file.file_id),
                        "filename": file.name,
                        "mediaType": file.mime,
                    });
                    if let Some(c) = caption {
                        part["metadata"] = json!({"caption": c});
                    }
                    self.file(json!({"artifactId": format!("file-{}", file.file_id),
                        "name": file.name, "parts": [part]}));
                }
                RunStep::Ended(end) => {
                    let (state, message) = match end {
                        RunEnd::Completed { stop_reason, .. } => match stop_reason {
                            StopReason::Cancelled => (State::Canceled, None),
                            StopReason::Refused => {
                                (State::Rejected, Some("the agent refused".to_owned()))
                            }
                            _ => (State::Completed, None),
                        },
                        RunEnd::Failed { error, .. } => (State::Failed, Some(error)),
                        RunEnd::SessionGone => {
                            (State::Failed, Some("the session was deleted".to_owned()))
                        }
                    };
                    self.set(state, message);
                    return;
                }
                _ => {}
            }
        }
        self.set(State::Failed, Some("the run's events ended".to_owned()));
    }
}

/// What a task that requires input asks: the agent's question in its own words, or which
/// calls wait for approval.
fn input_wanted(calls: &[switchboard_protocol::ToolCall]) -> String {
    if let Some(q) = calls.iter().find(|c| crate::question::is_question(c)) {
        let message = q.arguments["message"].as_str().unwrap_or_default();
        let fields = q.arguments["fields"]
            .as_object()
            .map(|f| {
                let names: Vec<&str> = f.keys().map(String::as_str).collect();
                format!(" (fields: {})", names.join(", "))
            })
            .unwrap_or_default();
        if let Some(url) = q.arguments["url"].as_str() {
            return format!(
                "The agent asks you to open {url}: {message}. Reply `done` once you have, or `decline`."
            );
        }
        return format!(
            "The agent asks: {message}{fields}. Reply with the answer — the fields as a JSON object, or plain text for the one field it fits (a yes or no for a yes/no field) — `allow` to take the defaults, or `decline`."
        );
    }
    let asked: Vec<String> = calls
        .iter()
        .map(|c| format!("{} {}", c.name, c.arguments))
        .collect();
    format!(
        "Approve {}? Reply `allow`, or `deny` and why.",
        asked.join("; ")
    )
}
