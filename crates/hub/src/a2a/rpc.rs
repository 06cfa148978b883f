//! The JSON-RPC methods of A2A v1.0.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};
use switchboard_client::{Client as Api, ClientError};
use switchboard_protocol::{
    AttachmentRef, BackendSpec, CreateSessionRequest, DecisionAction, InputMessage, MessageType,
    SendMessageRequest, ToolDecision, ToolDecisionsRequest,
};
use tokio::sync::broadcast;
use uuid::Uuid;

use super::A2a;
use super::push::{Config, Pusher, check_url};
use super::task::{State, Tracked, parse_task_id, task_id};

/// How long a cancel waits for the run to end.
const CANCEL_WAIT: Duration = Duration::from_secs(15);
/// How long reading an earlier task from the log may take before its state is answered.
const LOAD_WAIT: Duration = Duration::from_secs(2);

/// A JSON-RPC error (A2A's codes).
pub(super) struct RpcError {
    code: i64,
    message: String,
}

impl RpcError {
    fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
    fn params(message: impl Into<String>) -> Self {
        Self::new(-32602, message)
    }
    fn not_found(id: &str) -> Self {
        Self::new(-32001, format!("task {id} not found"))
    }
    fn unsupported(message: impl Into<String>) -> Self {
        Self::new(-32004, message)
    }
}

impl From<ClientError> for RpcError {
    fn from(e: ClientError) -> Self {
        match e {
            ClientError::Api {
                status: 404,
                message,
                ..
            } => Self::new(-32001, message),
            ClientError::Api {
                status,
                code,
                message,
                ..
            } if (400..500).contains(&status) => Self::new(-32602, format!("{code}: {message}")),
            other => Self::new(-32603, other.to_string()),
        }
    }
}

fn answer(id: &Value, result: Result<Value, RpcError>) -> Value {
    match result {
        Ok(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
        Err(e) => {
            json!({"jsonrpc": "2.0", "id": id, "error": {"code": e.code, "message": e.message}})
        }
    }
}

fn reply(id: &Value, result: Result<Value, RpcError>) -> Response {
    axum::Json(answer(id, result)).into_response()
}

pub(super) async fn dispatch(
    a2a: A2a,
    token: String,
    base: String,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    // Not even a JSON object: refused before JSON-RPC (as the API refuses a bad body).
    let req: Value = match serde_json::from_slice::<Value>(body) {
        Ok(v) if v.is_object() => v,
        Ok(_) => {
            return switchboard_http::ApiError::custom(
                400,
                "invalid_request",
                "the body is one JSON-RPC request: an object",
            )
            .into_response();
        }
        Err(e) => {
            return switchboard_http::ApiError::custom(
                400,
                "invalid_json",
                format!("the body is not JSON: {e}"),
            )
            .into_response();
        }
    };
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let Some(method) = req.get("method").and_then(Value::as_str) else {
        return reply(
            &id,
            Err(RpcError::new(-32600, "a JSON-RPC request has a method")),
        );
    };
    if let Some(v) = headers.get("a2a-version").and_then(|v| v.to_str().ok())
        && !(v == "1" || v.starts_with("1."))
    {
        return reply(
            &id,
            Err(RpcError::new(
                -32009,
                format!("A2A version {v} is not served: 1.0 is"),
            )),
        );
    }
    let params = req.get("params").cloned().unwrap_or_else(|| json!({}));
    if !params.is_object() {
        return reply(&id, Err(RpcError::params("params: an object")));
    }
    let owner = a2a.keys.of_token(&token);
    let api = match Api::new(a2a.api_url.to_string(), Some(token)) {
        Ok(api) => api,
        Err(e) => return reply(&id, Err(RpcError::new(-32603, e.to_string()))),
    };
    let ctx = Ctx {
        a2a,
        api,
        base,
        owner,
    };
    match method {
        "SendMessage" => {
            let blocking = !params
                .pointer("/configuration/returnImmediately")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let result = async {
                let (tracked, mut rx, answered) = ctx.send(&params).await?;
                if blocking {
                    if answered {
                        // Input given: the task moves on before it settles again.
                        moved_on(&mut rx).await;
                    }
                    settle(&tracked, rx).await;
                }
                Ok(json!({"task": tracked.snapshot()}))
            }
            .await;
            reply(&id, result)
        }
        "SendStreamingMessage" => match ctx.send(&params).await {
            Ok((tracked, rx, answered)) => stream(id, tracked, rx, answered),
            Err(e) => reply(&id, Err(e)),
        },
        "SubscribeToTask" => match ctx.task(&params, "id").await {
            Ok(t) if t.current().terminal() => reply(
                &id,
                Err(RpcError::unsupported(
                    "the task is finished: nothing to subscribe to",
                )),
            ),
            Ok(t) => {
                let rx = t.events.subscribe();
                stream(id, t, rx, false)
            }
            Err(e) => reply(&id, Err(e)),
        },
        "GetTask" => reply(&id, ctx.task(&params, "id").await.map(|t| t.snapshot())),
        "CancelTask" => reply(&id, ctx.cancel(&params).await),
        "CreateTaskPushNotificationConfig" => reply(&id, ctx.push_create(&params).await),
        "GetTaskPushNotificationConfig" => {
            let result = async {
                let t = ctx.task(&params, "taskId").await?;
                let cid = params.get("id").and_then(Value::as_str).unwrap_or_default();
                t.push
                    .get(cid, ctx.owner)
                    .map(|c| c.shown())
                    .ok_or_else(|| RpcError::params(format!("no push notification config {cid:?}")))
            }
            .await;
            reply(&id, result)
        }
        "ListTaskPushNotificationConfigs" => {
            let result = async {
                let t = ctx.task(&params, "taskId").await?;
                let configs: Vec<Value> =
                    t.push.list(ctx.owner).iter().map(Config::shown).collect();
                Ok(json!({"configs": configs}))
            }
            .await;
            reply(&id, result)
        }
        "DeleteTaskPushNotificationConfig" => {
            let result = async {
                let t = ctx.task(&params, "taskId").await?;
                let cid = params.get("id").and_then(Value::as_str).unwrap_or_default();
                if t.push.delete(cid, ctx.owner) {
                    Ok(Value::Null)
                } else {
                    Err(RpcError::params(format!(
                        "no push notification config {cid:?}"
                    )))
                }
            }
            .await;
            reply(&id, result)
        }
        "ListTasks" | "GetExtendedAgentCard" => reply(
            &id,
            Err(RpcError::unsupported(format!(
                "{method} is not served: GetTask reads a task, GET /v1/sessions lists contexts"
            ))),
        ),
        other => reply(
            &id,
            Err(RpcError::new(-32601, format!("no method {other:?}"))),
        ),
    }
}

/// Waits until the task settles (a terminal state, or input required): after `rx` was
/// taken, so a change made meanwhile is not missed.
async fn settle(tracked: &Tracked, mut rx: broadcast::Receiver<Value>) {
    loop {
        if tracked.current().settled() && !settling(&rx) {
            return;
        }
        match rx.recv().await {
            Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// Whether updates are still queued for this receiver (the state read may be older).
fn settling(rx: &broadcast::Receiver<Value>) -> bool {
    !rx.is_empty()
}

fn settled_update(event: &Value) -> bool {
    let state = event
        .pointer("/statusUpdate/status/state")
        .and_then(Value::as_str)
        .unwrap_or("");
    matches!(
        state,
        "TASK_STATE_COMPLETED"
            | "TASK_STATE_CANCELED"
            | "TASK_STATE_FAILED"
            | "TASK_STATE_REJECTED"
            | "TASK_STATE_INPUT_REQUIRED"
    )
}

/// Waits for the first status update that is not input-required (a decision taken).
async fn moved_on(rx: &mut broadcast::Receiver<Value>) {
    loop {
        match rx.recv().await {
            Ok(event) => {
                let state = event
                    .pointer("/statusUpdate/status/state")
                    .and_then(Value::as_str);
                if state.is_some_and(|s| s != "TASK_STATE_INPUT_REQUIRED") {
                    return;
                }
            }
            Err(broadcast::error::RecvError::Lagged(_)) => {}
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// The task as an event stream: the task now, then each update until it settles (after
/// it moved on, when `answered`: input was just given).
fn stream(
    id: Value,
    tracked: Arc<Tracked>,
    rx: broadcast::Receiver<Value>,
    answered: bool,
) -> Response {
    let first = answer(&id, Ok(json!({"task": tracked.snapshot()})));
    // A task that is already settled ends with its snapshot.
    let already = tracked.current().settled() && !answered;
    let events = futures::stream::unfold(
        (Some(first), rx, id, tracked, false),
        move |(first, mut rx, id, tracked, done)| async move {
            if let Some(f) = first {
                let ev = Event::default().data(f.to_string());
                return Some((
                    Ok::<Event, Infallible>(ev),
                    (None, rx, id, tracked, already),
                ));
            }
            if done {
                return None;
            }
            match rx.recv().await {
                Ok(event) => {
                    let end = settled_update(&event);
                    let ev = Event::default().data(answer(&id, Ok(event)).to_string());
                    Some((Ok(ev), (None, rx, id, tracked, end)))
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    // Chunks were lost to this reader: the whole reply instead.
                    let whole = answer(&id, Ok(tracked.reply_update()));
                    let ev = Event::default().data(whole.to_string());
                    Some((Ok(ev), (None, rx, id, tracked, false)))
                }
                Err(broadcast::error::RecvError::Closed) => None,
            }
        },
    );
    Sse::new(events)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

struct Ctx {
    a2a: A2a,
    api: Api,
    base: String,
    /// Whose requests these are (push configs are their creator's).
    owner: switchboard_http::CallerKey,
}

/// A task ended this long ago is forgotten here (`GetTask` reads it back from the log).
const KEEP_ENDED: Duration = Duration::from_secs(600);

impl Ctx {
    /// The task named by `params[key]`, if the caller may see its session.
    async fn task(&self, params: &Value, key: &str) -> Result<Arc<Tracked>, RpcError> {
        let id = params
            .get(key)
            .and_then(Value::as_str)
            .ok_or_else(|| RpcError::params(format!("{key}: the task's id")))?;
        let (session, run) = parse_task_id(id).ok_or_else(|| RpcError::not_found(id))?;
        self.api.get_session(session).await.map_err(|e| match e {
            ClientError::Api {
                status: 403 | 404, ..
            } => RpcError::not_found(id),
            other => other.into(),
        })?;
        let key = task_id(session, run);
        let known = self.a2a.tasks.lock().get(&key).cloned();
        if let Some(t) = known {
            return Ok(t);
        }
        // A task of an earlier server (or another instance): read from the log.
        let message =
            json!({"messageId": Uuid::now_v7().to_string(), "role": "ROLE_USER", "parts": []});
        let tracked = Tracked::new(session, run, message, self.pusher());
        let rx = tracked.events.subscribe();
        tracked.start(self.api.clone(), Some(0), self.base.clone());
        let _ = tokio::time::timeout(LOAD_WAIT, settle(&tracked, rx)).await;
        if !tracked.seen.load(std::sync::atomic::Ordering::Acquire) {
            // No event of that run in the session's log: no such task.
            tracked.stop();
            return Err(RpcError::not_found(id));
        }
        Ok(self.remember(key, tracked))
    }

    fn pusher(&self) -> Pusher {
        Pusher::new(self.a2a.http.clone(), self.a2a.opts.private_webhooks)
    }

    /// Keeps a task (the one already kept, if another request was first), and forgets
    /// those ended long ago.
    fn remember(&self, key: String, tracked: Arc<Tracked>) -> Arc<Tracked> {
        let mut tasks = self.a2a.tasks.lock();
        tasks.retain(|_, t| t.ended_at().is_none_or(|e| e.elapsed() < KEEP_ENDED));
        match tasks.entry(key) {
            std::collections::hash_map::Entry::Occupied(e) => {
                tracked.stop();
                e.get().clone()
            }
            std::collections::hash_map::Entry::Vacant(v) => v.insert(tracked).clone(),
        }
    }

    /// `SendMessage`: a new task (a run), or the answer to one that requires input.
    async fn send(
        &self,
        params: &Value,
    ) -> Result<(Arc<Tracked>, broadcast::Receiver<Value>, bool), RpcError> {
        let msg = params
            .get("message")
            .filter(|m| m.is_object())
            .ok_or_else(|| RpcError::params("message: the message to send"))?;
        let (text, files) = read_parts(msg)?;
        // A push config is checked before anything is started.
        if let Some(url) = params
            .pointer("/configuration/taskPushNotificationConfig/url")
            .and_then(Value::as_str)
        {
            check_url(url, self.a2a.opts.private_webhooks).map_err(RpcError::params)?;
        }
        if let Some(tid) = msg
            .get("taskId")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            let tracked = self.task(&json!({"id": tid}), "id").await?;
            let (tracked, rx) = self.answer_input(tracked, &text).await?;
            return Ok((tracked, rx, true));
        }
        let session = match msg
            .get("contextId")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
        {
            Some(c) => {
                let s = Uuid::parse_str(c).map_err(|_| {
                    RpcError::params(format!("contextId {c:?} is not a Switchboard session id"))
                })?;
                self.api.get_session(s).await?;
                s
            }
            None => {
                let skill = params
                    .pointer("/metadata/skill")
                    .or_else(|| msg.pointer("/metadata/skill"))
                    .and_then(Value::as_str);
                let backend = skill.map(|s| match s {
                    "builtin" => BackendSpec::Builtin,
                    other => BackendSpec::Acp(other.to_owned()),
                });
                let title: String = text.chars().take(60).collect();
                let create = CreateSessionRequest {
                    backend,
                    title: (!title.trim().is_empty()).then_some(title),
                    ..CreateSessionRequest::default()
                };
                self.api.create_session(&create).await?.id
            }
        };
        let mut attachments = Vec::new();
        for (name, bytes) in files {
            let f = self.api.upload_file(session, &name, bytes).await?;
            attachments.push(AttachmentRef { file_id: f.file_id });
        }
        let from = self.api.get_session(session).await?.session.last_event_id;
        let send = SendMessageRequest {
            message: InputMessage {
                role: switchboard_protocol::Role::User,
                content: if text.trim().is_empty() {
                    "(files attached)".to_owned()
                } else {
                    text
                },
                attachments,
            },
            kind: MessageType::FollowUp,
            ..SendMessageRequest::user("", MessageType::FollowUp)
        };
        let run = self.api.send_message(session, &send).await?.run_id;
        let mut first = msg.clone();
        first["contextId"] = json!(session.to_string());
        let tracked = Tracked::new(session, run, first, self.pusher());
        if let Some(cfg) = params.pointer("/configuration/taskPushNotificationConfig") {
            let mut cfg = cfg.clone();
            cfg["taskId"] = json!(task_id(session, run));
            self.push_config(&tracked, cfg)?;
        }
        let rx = tracked.events.subscribe();
        tracked.start(self.api.clone(), Some(from), self.base.clone());
        let tracked = self.remember(task_id(session, run), tracked);
        Ok((tracked, rx, false))
    }

    /// The client's message on a task that requires input decides its waiting calls.
    async fn answer_input(
        &self,
        tracked: Arc<Tracked>,
        text: &str,
    ) -> Result<(Arc<Tracked>, broadcast::Receiver<Value>), RpcError> {
        let (state, session, run, waiting) = {
            let s = tracked.state.lock();
            (s.state, s.session, s.run, s.waiting.clone())
        };
        if state != State::InputRequired || waiting.is_empty() {
            return Err(RpcError::unsupported(if state.terminal() {
                "the task is finished: send a new message with its contextId to go on"
            } else {
                "the task requires no input now"
            }));
        }
        let word = text.trim().to_ascii_lowercase();
        let allow = ["allow", "yes", "approve", "ok"]
            .iter()
            .any(|w| word.starts_with(w));
        let rx = tracked.events.subscribe();
        // The agent's question is answered by the text itself (a yes or a no included: the
        // form's field takes it), unless the whole reply is `allow` (take the defaults) or
        // `decline` / `deny`.
        let question_allow = word == "allow";
        let declines = word == "decline" || word == "deny";
        let decisions = waiting
            .into_iter()
            .map(|(call, question)| {
                let (action, content) = match (question, allow, question_allow, declines) {
                    (true, _, true, _) | (false, true, _, _) => (DecisionAction::Accept, None),
                    (true, _, false, false) => {
                        (DecisionAction::CustomResult, Some(text.trim().to_owned()))
                    }
                    _ => (DecisionAction::Reject, Some(text.trim().to_owned())),
                };
                let reject = action == DecisionAction::Reject;
                (
                    call,
                    ToolDecision {
                        action,
                        content,
                        by: Some("an A2A client".to_owned()),
                        cause: reject.then_some(switchboard_protocol::RejectionCause::User),
                    },
                )
            })
            .collect();
        self.api
            .decide_tools(
                session,
                &ToolDecisionsRequest {
                    run_id: run,
                    decisions,
                },
            )
            .await?;
        // Answered: the task works again from here (the snapshot that opens the stream says
        // so, not the input it required).
        tracked.state.lock().waiting.clear();
        tracked.set(State::Working, None);
        Ok((tracked, rx))
    }

    async fn cancel(&self, params: &Value) -> Result<Value, RpcError> {
        let tracked = self.task(params, "id").await?;
        if tracked.current().terminal() {
            return Err(RpcError::new(
                -32002,
                "the task is finished: it cannot be canceled",
            ));
        }
        let (session, run) = {
            let s = tracked.state.lock();
            (s.session, s.run)
        };
        let rx = tracked.events.subscribe();
        self.api.cancel(session, run).await?;
        // A run still queued is dropped without an event of its own: if it has not started
        // by now, the task is canceled here.
        let mut early = tracked.events.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(1), early.recv()).await;
        tracked.canceled_while_queued();
        let wait = async {
            let mut rx = rx;
            while !tracked.current().terminal() {
                if let Err(broadcast::error::RecvError::Closed) = rx.recv().await {
                    break;
                }
            }
        };
        let _ = tokio::time::timeout(CANCEL_WAIT, wait).await;
        Ok(tracked.snapshot())
    }

    async fn push_create(&self, params: &Value) -> Result<Value, RpcError> {
        let tracked = self.task(params, "taskId").await?;
        self.push_config(&tracked, params.clone())
    }

    fn push_config(&self, tracked: &Tracked, mut cfg: Value) -> Result<Value, RpcError> {
        let url = cfg.get("url").and_then(Value::as_str).unwrap_or_default();
        check_url(url, self.a2a.opts.private_webhooks).map_err(RpcError::params)?;
        if cfg
            .get("id")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
        {
            cfg["id"] = cfg.get("taskId").cloned().unwrap_or(Value::Null);
        }
        let config = Config {
            value: cfg,
            owner: self.owner,
        };
        tracked.push.set(config.clone()).map_err(RpcError::params)?;
        Ok(config.shown())
    }
}

/// Files given inline (`raw` parts): name and bytes.
type Inline = Vec<(String, Vec<u8>)>;

/// A message's text, and its inline files (`raw` parts) to attach; a `url` part is named
/// in the text, `data` parts are given as JSON.
fn read_parts(msg: &Value) -> Result<(String, Inline), RpcError> {
    let parts = msg
        .get("parts")
        .and_then(Value::as_array)
        .ok_or_else(|| RpcError::params("message.parts: a list"))?;
    let mut text = String::new();
    let mut files = Vec::new();
    let mut line = |s: &str| {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(s);
    };
    for (i, p) in parts.iter().enumerate() {
        let name = p
            .get("filename")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("part-{i}"));
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            line(t);
        } else if let Some(raw) = p.get("raw").and_then(Value::as_str) {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(raw)
                .map_err(|e| {
                    RpcError::params(format!("message.parts[{i}].raw: not base64 ({e})"))
                })?;
            files.push((name, bytes));
        } else if let Some(url) = p.get("url").and_then(Value::as_str) {
            line(&format!("[{name}]({url})"));
        } else if let Some(data) = p.get("data") {
            line(&data.to_string());
        } else {
            return Err(RpcError::params(format!(
                "message.parts[{i}]: text, raw, url or data"
            )));
        }
    }
    if text.trim().is_empty() && files.is_empty() {
        return Err(RpcError::params("message.parts: nothing to send"));
    }
    Ok((text, files))
}
