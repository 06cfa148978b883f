//! Switchboard as an ACP agent: editors (Zed, JetBrains, Neovim's ACP plugins) drive its
//! sessions — whatever backend each has — with their durable log and their approvals.
//!
//! [`serve`] speaks the agent side of the Agent Client Protocol on any transport and is a
//! client of a Switchboard server's `/v1` API ([`switchboard_client::Client`]); nothing here
//! touches the engine. The same code serves `switchboard acp` (stdio, [`serve_stdio`]) and
//! `GET /v1/acp` (a WebSocket, [`ws`]).
//!
//! How the protocol meets the API:
//! - `session/new` creates a session (`cwd`, the editor's `mcpServers`, the backend from
//!   `_meta.switchboard.agent` / `.backend`, else [`HubOptions::agent`], else the server's
//!   default); `session/load` opens an existing one and replays its log as updates;
//!   `session/list` lists them.
//! - Each open session has one *follower*: a subscription to its events, resumed with
//!   `Last-Event-ID` when the connection to the server drops, that turns every event into
//!   `session/update`s in log order — so the editor sees each event once, including runs
//!   started elsewhere (a chat, the console).
//! - `session/prompt` sends the message as a follow-up (it waits its turn when a run from
//!   elsewhere is under way) and answers when the follower has seen that run end.
//! - A call waiting for approval becomes `session/request_permission`; the editor's answer
//!   is a decision over the API. When the call is decided elsewhere first, the editor's
//!   request is withdrawn with `$/cancel_request` (an ACP client answers it `cancelled`).
//!   An editor that goes away leaves the approval to the other surfaces and to its timeout,
//!   which fails closed as every approval does.
//! - Session modes are the permission modes; `session/set_mode` changes the session's.

mod map;
pub mod ws;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, CurrentModeUpdate,
    EmbeddedResourceResource, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse, McpServer,
    NewSessionRequest, NewSessionResponse, PermissionOption, PermissionOptionKind,
    PromptCapabilities, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, SessionCapabilities, SessionInfo, SessionListCapabilities,
    SessionNotification, SessionUpdate, SetSessionModeRequest, SetSessionModeResponse,
    ToolCallUpdate, ToolCallUpdateFields,
};
use agent_client_protocol::{Agent, ByteStreams, Client, ConnectTo, Error, ErrorCode, v1};
use base64::Engine as _;
use futures::StreamExt;
use switchboard_client::{Client as Api, ClientError};
use switchboard_protocol::{
    AgentEvent, AttachmentRef, BackendSpec, CreateSessionRequest, DecisionAction, InputMessage,
    McpServerSpec, MessageType, SendMessageRequest, ToolDecision, ToolDecisionsRequest,
    UpdateSessionRequest,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use uuid::Uuid;

pub use map::{mode_of, modes};

/// How long `session/load` waits for the replay of the log.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(120);
/// A silence this long while replaying a loaded session's history ends the replay.
const REPLAY_IDLE: Duration = Duration::from_secs(3);
/// Sessions per `session/list` page.
const LIST_PAGE: u32 = 100;

/// Settings of one ACP connection.
#[derive(Debug, Clone, Default)]
pub struct HubOptions {
    /// The `[agents.NAME]` new sessions run, unless the editor names a backend in `_meta`;
    /// `None`: the server's default backend.
    pub agent: Option<String>,
}

/// Why the ACP connection ended.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("ACP connection: {0}")]
    Protocol(String),
}

/// Serves ACP on this process's stdin and stdout until the editor closes them.
pub async fn serve_stdio(api: Api, opts: HubOptions) -> Result<(), HubError> {
    use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
    let transport = ByteStreams::new(
        tokio::io::stdout().compat_write(),
        tokio::io::stdin().compat(),
    );
    serve(api, opts, transport).await
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a run ended, as the prompt that waits for it learns.
#[derive(Debug, Clone)]
enum Ending {
    /// The run's outcome and the backend's own reason.
    Done(switchboard_protocol::StopReason, Option<String>),
    Failed {
        error: String,
        retryable: bool,
    },
}

#[derive(Default)]
struct Runs {
    /// Texts of prompts sent by this editor whose run has not started yet: their
    /// `RunStarted` is not echoed back as the user's message.
    pending_prompts: Vec<String>,
    waiters: HashMap<Uuid, oneshot::Sender<Ending>>,
    /// Runs that ended before anyone waited for them (a fast run, a race with the answer
    /// of `send_message`).
    ended: HashMap<Uuid, Ending>,
    /// The editor's run under way (what `session/cancel` cancels).
    current: Option<Uuid>,
    /// A `session/cancel` came while the prompt was still being sent.
    cancel_pending: bool,
    /// Runs the follower saw start (a cancelled one that never started ends here).
    started: HashSet<Uuid>,
    /// The follower stopped for good: why (prompts fail at once instead of waiting).
    closed: Option<String>,
}

/// A session this connection has open.
struct Open {
    id: Uuid,
    runs: Mutex<Runs>,
    /// Permission requests waiting in the editor, by tool call id, with their run.
    asks: Mutex<HashMap<String, (Uuid, agent_client_protocol::RequestCancellationHandle)>>,
    /// Calls the editor was asked about (asked once each).
    asked: Mutex<HashSet<String>>,
    follower: Mutex<Option<JoinHandle<()>>>,
}

impl Open {
    fn new(id: Uuid) -> Arc<Self> {
        Arc::new(Self {
            id,
            runs: Mutex::new(Runs::default()),
            asks: Mutex::new(HashMap::new()),
            asked: Mutex::new(HashSet::new()),
            follower: Mutex::new(None),
        })
    }

    /// Whether a `RunStarted` with this content is one of this editor's prompts.
    fn take_own_prompt(&self, content: Option<&str>) -> bool {
        let mut runs = lock(&self.runs);
        let Some(c) = content else { return false };
        match runs.pending_prompts.iter().position(|p| p == c) {
            Some(i) => {
                runs.pending_prompts.remove(i);
                true
            }
            None => false,
        }
    }

    fn end(&self, run: Uuid, ending: Ending) {
        let mut runs = lock(&self.runs);
        match runs.waiters.remove(&run) {
            Some(tx) => {
                let _ = tx.send(ending);
            }
            None => {
                // Bounded: only the most recent endings matter.
                if runs.ended.len() > 256 {
                    runs.ended.clear();
                }
                runs.ended.insert(run, ending);
            }
        }
    }

    /// Every waiting prompt ends with `error`, and later ones fail at once (the follower
    /// stopped for good; `session/load` opens it again).
    fn fail_all(&self, error: &str) {
        let mut runs = lock(&self.runs);
        runs.closed = Some(error.to_owned());
        for (_, tx) in runs.waiters.drain() {
            let _ = tx.send(Ending::Failed {
                error: error.to_owned(),
                retryable: true,
            });
        }
    }

    /// The call was decided (here or elsewhere): a request still open in the editor is
    /// withdrawn.
    fn withdraw(&self, tool_call_id: &str) {
        if let Some((_, handle)) = lock(&self.asks).remove(tool_call_id) {
            tracing::debug!(session = %self.id, tool_call_id, "withdrawing the editor's permission request");
            let _ = handle.cancel();
        }
    }

    /// The run ended: what the editor was still asked about it is withdrawn.
    fn withdraw_run(&self, run: Uuid) {
        lock(&self.asks).retain(|_, (r, handle)| {
            if *r == run {
                let _ = handle.cancel();
            }
            *r != run
        });
    }

    /// Stops the follower and withdraws the questions it asked (the prompts waiting stay:
    /// a new follower ends them).
    fn stop_follower(&self) {
        if let Some(task) = lock(&self.follower).take() {
            task.abort();
        }
        for (_, (_, h)) in lock(&self.asks).drain() {
            let _ = h.cancel();
        }
        lock(&self.asked).clear();
    }

    /// The connection ends.
    fn stop(&self) {
        self.stop_follower();
        self.fail_all("the connection closed");
    }
}

struct Hub {
    api: Api,
    opts: HubOptions,
    open: Mutex<HashMap<Uuid, Arc<Open>>>,
}

impl Hub {
    fn session(&self, id: &str) -> Result<Arc<Open>, Error> {
        let uuid = parse_id(id)?;
        lock(&self.open).get(&uuid).cloned().ok_or_else(|| {
            Error::new(
                ErrorCode::RESOURCE_NOT_FOUND,
                format!("session {id} is not open on this connection: session/new or session/load it first"),
            )
        })
    }

    /// Opens `id` on this connection: its follower forwards every event after `after`;
    /// the returned receiver fires once events up to `replay_to` have been forwarded.
    fn open_session(
        self: &Arc<Self>,
        cx: &v1::ConnectionTo<Client>,
        id: Uuid,
        replay_to: u64,
    ) -> oneshot::Receiver<()> {
        // Opened again (`session/load` of an open session): the same state, so that a
        // prompt waiting on it is still answered, with a new follower replaying the log.
        let open = lock(&self.open)
            .entry(id)
            .or_insert_with(|| Open::new(id))
            .clone();
        open.stop_follower();
        lock(&open.runs).closed = None;
        let (caught_tx, caught_rx) = oneshot::channel();
        let task = tokio::spawn(follow(
            self.clone(),
            open.clone(),
            cx.clone(),
            replay_to,
            caught_tx,
        ));
        *lock(&open.follower) = Some(task);
        caught_rx
    }

    fn close_all(&self) {
        for (_, open) in lock(&self.open).drain() {
            open.stop();
        }
    }
}

fn parse_id(id: &str) -> Result<Uuid, Error> {
    Uuid::parse_str(id).map_err(|_| {
        Error::new(
            ErrorCode::INVALID_PARAMS,
            format!("session id {id:?} is not a Switchboard session id (a UUID)"),
        )
    })
}

/// An API failure as a JSON-RPC error: the server's code and message are kept in `data`.
fn api_error(step: &str, e: &ClientError) -> Error {
    let code = match e {
        ClientError::Api { status: 404, .. } => ErrorCode::RESOURCE_NOT_FOUND,
        ClientError::Api { status, .. } if (400..500).contains(status) && *status != 429 => {
            ErrorCode::INVALID_PARAMS
        }
        _ => ErrorCode::INTERNAL_ERROR,
    };
    let data = match e {
        ClientError::Api { status, code, .. } => {
            serde_json::json!({"status": status, "code": code})
        }
        _ => serde_json::json!({"code": "server_unreachable"}),
    };
    let message = match e {
        ClientError::Api { message, .. } => message.clone(),
        other => other.to_string(),
    };
    Error::new(code, format!("{step}: {message}")).data(data)
}

/// Serves one ACP connection on `transport` until the editor closes it.
pub async fn serve(
    api: Api,
    opts: HubOptions,
    transport: impl ConnectTo<Agent> + 'static,
) -> Result<(), HubError> {
    let hub = Arc::new(Hub {
        api,
        opts,
        open: Mutex::new(HashMap::new()),
    });
    let (h_new, h_load, h_list, h_prompt, h_cancel, h_mode) = (
        hub.clone(),
        hub.clone(),
        hub.clone(),
        hub.clone(),
        hub.clone(),
        hub.clone(),
    );
    let result = Agent
        .v1()
        .name("switchboard")
        .on_receive_request(
            async move |req: InitializeRequest,
                        responder: v1::Responder<InitializeResponse>,
                        _cx| { responder.respond(initialize(&req)) },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: v1::Responder<NewSessionResponse>,
                        cx: v1::ConnectionTo<Client>| {
                let hub = h_new.clone();
                let cx2 = cx.clone();
                cx.spawn(async move {
                    responder.respond_with_result(new_session(&hub, &cx2, req).await)
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest,
                        responder: v1::Responder<LoadSessionResponse>,
                        cx: v1::ConnectionTo<Client>| {
                let hub = h_load.clone();
                let cx2 = cx.clone();
                cx.spawn(async move {
                    responder.respond_with_result(load_session(&hub, &cx2, req).await)
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: ListSessionsRequest,
                        responder: v1::Responder<ListSessionsResponse>,
                        cx: v1::ConnectionTo<Client>| {
                let hub = h_list.clone();
                cx.spawn(async move { responder.respond_with_result(list(&hub, req).await) })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: v1::Responder<PromptResponse>,
                        cx: v1::ConnectionTo<Client>| {
                let hub = h_prompt.clone();
                cx.spawn(async move { responder.respond_with_result(prompt(&hub, req).await) })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: SetSessionModeRequest,
                        responder: v1::Responder<SetSessionModeResponse>,
                        cx: v1::ConnectionTo<Client>| {
                let hub = h_mode.clone();
                let cx2 = cx.clone();
                cx.spawn(
                    async move { responder.respond_with_result(set_mode(&hub, &cx2, req).await) },
                )
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, cx: v1::ConnectionTo<Client>| {
                let hub = h_cancel.clone();
                cx.spawn(async move {
                    cancel(&hub, &n.session_id.to_string()).await;
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await;
    hub.close_all();
    result.map_err(|e| HubError::Protocol(e.to_string()))
}

fn initialize(req: &InitializeRequest) -> InitializeResponse {
    let version = req.protocol_version.min(ProtocolVersion::LATEST);
    InitializeResponse::new(version)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(true)
                // Images and embedded files become attachments of the message.
                .prompt_capabilities(
                    PromptCapabilities::new()
                        .image(true)
                        .audio(true)
                        .embedded_context(true),
                )
                .session_capabilities(
                    SessionCapabilities::new().list(SessionListCapabilities::new()),
                ),
        )
        .agent_info(Implementation::new(
            "switchboard",
            env!("CARGO_PKG_VERSION"),
        ))
}

/// The backend the editor asks for in `_meta.switchboard`, else the connection's.
fn backend_of(
    meta: Option<&serde_json::Map<String, serde_json::Value>>,
    opts: &HubOptions,
) -> Option<BackendSpec> {
    let ours = meta.and_then(|m| m.get("switchboard"));
    if let Some(agent) = ours.and_then(|s| s.get("agent")).and_then(|a| a.as_str()) {
        return Some(BackendSpec::Acp(agent.to_owned()));
    }
    if ours.and_then(|s| s.get("backend")).and_then(|b| b.as_str()) == Some("builtin") {
        return Some(BackendSpec::Builtin);
    }
    opts.agent.clone().map(BackendSpec::Acp)
}

/// The editor's MCP servers as Switchboard's (SSE servers, which Switchboard does not
/// speak, are left out with a warning).
fn mcp_specs(servers: &[McpServer]) -> Vec<McpServerSpec> {
    servers
        .iter()
        .filter_map(|s| match s {
            McpServer::Stdio(s) => Some(McpServerSpec {
                name: s.name.clone(),
                command: Some(s.command.display().to_string()),
                args: s.args.clone(),
                env: s
                    .env
                    .iter()
                    .map(|e| (e.name.clone(), e.value.clone()))
                    .collect(),
                url: None,
                headers: Default::default(),
            }),
            McpServer::Http(s) => Some(McpServerSpec {
                name: s.name.clone(),
                command: None,
                args: vec![],
                env: Default::default(),
                url: Some(s.url.clone()),
                headers: s
                    .headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
            }),
            other => {
                tracing::warn!(server = ?other, "MCP server over SSE left out: Switchboard speaks stdio and streamable HTTP");
                None
            }
        })
        .collect()
}

async fn new_session(
    hub: &Arc<Hub>,
    cx: &v1::ConnectionTo<Client>,
    req: NewSessionRequest,
) -> Result<NewSessionResponse, Error> {
    let mcp = mcp_specs(&req.mcp_servers);
    let create = CreateSessionRequest {
        cwd: Some(req.cwd.display().to_string()),
        backend: backend_of(req.meta.as_ref(), &hub.opts),
        mcp_servers: (!mcp.is_empty()).then_some(mcp),
        ..CreateSessionRequest::default()
    };
    let summary = hub
        .api
        .create_session(&create)
        .await
        .map_err(|e| api_error("creating the session", &e))?;
    let detail = hub
        .api
        .get_session(summary.id)
        .await
        .map_err(|e| api_error("reading the session", &e))?;
    // Nothing to replay: the follower starts at once.
    drop(hub.open_session(cx, summary.id, 0));
    tracing::info!(session = %summary.id, "ACP session created");
    Ok(NewSessionResponse::new(summary.id.to_string()).modes(modes(detail.config.permission_mode)))
}

async fn load_session(
    hub: &Arc<Hub>,
    cx: &v1::ConnectionTo<Client>,
    req: LoadSessionRequest,
) -> Result<LoadSessionResponse, Error> {
    let id = parse_id(&req.session_id.to_string())?;
    let detail = hub
        .api
        .get_session(id)
        .await
        .map_err(|e| api_error("reading the session", &e))?;
    if !req.mcp_servers.is_empty() {
        // A session's MCP servers are fixed when it is created.
        tracing::info!(session = %id, "session/load: the editor's mcpServers are not added to an existing session");
    }
    let caught = hub.open_session(cx, id, detail.session.last_event_id);
    match tokio::time::timeout(REPLAY_TIMEOUT, caught).await {
        Ok(Ok(())) => {}
        Ok(Err(_)) => {
            return Err(Error::new(
                ErrorCode::INTERNAL_ERROR,
                "the session's event stream ended before its history was replayed",
            ));
        }
        Err(_) => {
            return Err(Error::new(
                ErrorCode::INTERNAL_ERROR,
                format!(
                    "the session's history was not replayed within {} s",
                    REPLAY_TIMEOUT.as_secs()
                ),
            ));
        }
    }
    Ok(LoadSessionResponse::new().modes(modes(detail.config.permission_mode)))
}

async fn list(hub: &Hub, req: ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
    let offset = match req.cursor.as_deref() {
        None => 0,
        Some(c) => c.parse::<u32>().map_err(|_| {
            Error::new(
                ErrorCode::INVALID_PARAMS,
                format!("cursor {c:?} is not one of ours"),
            )
        })?,
    };
    let page = hub
        .api
        .list_sessions(Some(LIST_PAGE), Some(offset))
        .await
        .map_err(|e| api_error("listing sessions", &e))?;
    let seen = offset as u64 + page.sessions.len() as u64;
    let sessions = page
        .sessions
        .into_iter()
        .filter(|s| {
            req.cwd
                .as_ref()
                .is_none_or(|cwd| std::path::Path::new(&s.cwd) == cwd.as_path())
        })
        .map(|s| {
            SessionInfo::new(s.id.to_string(), s.cwd.clone())
                .title(s.title.clone())
                .updated_at(s.updated_at.to_rfc3339())
        })
        .collect();
    let mut resp = ListSessionsResponse::new(sessions);
    if seen < page.total {
        resp = resp.next_cursor(seen.to_string());
    }
    Ok(resp)
}

/// The prompt's text and its attachments (uploaded as files of the session).
async fn prompt_message(
    api: &Api,
    session: Uuid,
    blocks: &[ContentBlock],
) -> Result<InputMessage, Error> {
    let mut text = String::new();
    let mut attachments = Vec::new();
    let mut names: Vec<String> = Vec::new();
    let mut push = |s: &str| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(s);
    };
    let b64 = |data: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .map_err(|e| {
                Error::new(
                    ErrorCode::INVALID_PARAMS,
                    format!("content data is not base64: {e}"),
                )
            })
    };
    for block in blocks {
        let upload: Option<(String, Vec<u8>)> = match block {
            ContentBlock::Text(t) => {
                push(&t.text);
                None
            }
            ContentBlock::ResourceLink(l) => {
                push(&format!("[{}]({})", l.name, l.uri));
                None
            }
            ContentBlock::Image(i) => {
                let ext = i.mime_type.rsplit('/').next().unwrap_or("bin");
                Some((format!("image.{ext}"), b64(&i.data)?))
            }
            ContentBlock::Audio(a) => {
                let ext = a.mime_type.rsplit('/').next().unwrap_or("bin");
                Some((format!("audio.{ext}"), b64(&a.data)?))
            }
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(t) => {
                    Some((file_name(&t.uri), t.text.clone().into_bytes()))
                }
                EmbeddedResourceResource::BlobResourceContents(b) => {
                    Some((file_name(&b.uri), b64(&b.blob)?))
                }
                _ => None,
            },
            _ => None,
        };
        if let Some((name, bytes)) = upload {
            names.push(name.clone());
            let file = api
                .upload_file(session, &name, bytes)
                .await
                .map_err(|e| api_error(&format!("attaching {name}"), &e))?;
            attachments.push(AttachmentRef {
                file_id: file.file_id,
            });
        }
    }
    if text.trim().is_empty() && attachments.is_empty() {
        return Err(Error::new(
            ErrorCode::INVALID_PARAMS,
            "the prompt has no text and nothing attached",
        ));
    }
    if text.trim().is_empty() {
        // A message needs text: say what came.
        text = format!("({} attached)", names.join(", "));
    }
    Ok(InputMessage {
        role: switchboard_protocol::Role::User,
        content: text,
        attachments,
    })
}

/// The last segment of a resource URI, as a file name.
fn file_name(uri: &str) -> String {
    uri.trim_end_matches('/')
        .rsplit(['/', '\\'])
        .next()
        .filter(|n| !n.is_empty() && !n.contains(':'))
        .unwrap_or("resource.txt")
        .to_owned()
}

async fn prompt(hub: &Hub, req: PromptRequest) -> Result<PromptResponse, Error> {
    let open = hub.session(&req.session_id.to_string())?;
    let message = prompt_message(&hub.api, open.id, &req.prompt).await?;
    let content = message.content.clone();
    lock(&open.runs).pending_prompts.push(content.clone());
    let send = SendMessageRequest {
        message,
        // Waits its turn when a run from elsewhere is under way.
        kind: MessageType::FollowUp,
        ..SendMessageRequest::user("", MessageType::FollowUp)
    };
    let sent = match hub.api.send_message(open.id, &send).await {
        Ok(sent) => sent,
        Err(e) => {
            let mut runs = lock(&open.runs);
            if let Some(i) = runs.pending_prompts.iter().position(|p| *p == content) {
                runs.pending_prompts.remove(i);
            }
            return Err(api_error("sending the prompt", &e));
        }
    };
    let run = sent.run_id;
    let (rx, cancel_now) = {
        let mut runs = lock(&open.runs);
        runs.current = Some(run);
        let cancel_now = std::mem::take(&mut runs.cancel_pending);
        let rx = match (runs.ended.remove(&run), runs.closed.clone()) {
            (Some(ending), _) => Err(ending),
            (None, Some(why)) => Err(Ending::Failed {
                error: format!("{why}; session/load the session again"),
                retryable: true,
            }),
            (None, None) => {
                let (tx, rx) = oneshot::channel();
                runs.waiters.insert(run, tx);
                Ok(rx)
            }
        };
        (rx, cancel_now)
    };
    if cancel_now {
        cancel_run(hub, &open, run).await;
    }
    let ending = match rx {
        Err(ending) => ending,
        Ok(rx) => rx.await.unwrap_or(Ending::Failed {
            error: "the session was closed".into(),
            retryable: true,
        }),
    };
    {
        let mut runs = lock(&open.runs);
        if runs.current == Some(run) {
            runs.current = None;
        }
    }
    match ending {
        Ending::Done(reason, backend) => Ok(PromptResponse::new(map::stop_reason(
            reason,
            backend.as_deref(),
        ))),
        Ending::Failed { error, retryable } => Err(Error::new(ErrorCode::INTERNAL_ERROR, error)
            .data(
                serde_json::json!({"code": "run_failed", "retryable": retryable, "run_id": run}),
            )),
    }
}

async fn cancel(hub: &Hub, session: &str) {
    let Ok(open) = hub.session(session) else {
        return;
    };
    let run = {
        let mut runs = lock(&open.runs);
        if runs.current.is_none() && !runs.pending_prompts.is_empty() {
            // The prompt is still being sent: cancelled as soon as its run is known.
            runs.cancel_pending = true;
        }
        runs.current
    };
    if let Some(run) = run {
        cancel_run(hub, &open, run).await;
    }
}

/// Cancels `run`. One still queued (waiting behind a run from elsewhere) is dropped without
/// an event of its own, so its prompt is answered `cancelled` here.
async fn cancel_run(hub: &Hub, open: &Open, run: Uuid) {
    match hub.api.cancel(open.id, run).await {
        Ok(_) => {
            let started = lock(&open.runs).started.contains(&run);
            if !started {
                open.end(
                    run,
                    Ending::Done(switchboard_protocol::StopReason::Cancelled, None),
                );
            }
        }
        Err(e) => tracing::info!(session = %open.id, %run, error = %e, "cancelling the run"),
    }
}

async fn set_mode(
    hub: &Hub,
    cx: &v1::ConnectionTo<Client>,
    req: SetSessionModeRequest,
) -> Result<SetSessionModeResponse, Error> {
    let open = hub.session(&req.session_id.to_string())?;
    let mode_id = req.mode_id.to_string();
    let mode = mode_of(&mode_id).ok_or_else(|| {
        Error::new(
            ErrorCode::INVALID_PARAMS,
            format!("no mode {mode_id:?}: read-only, workspace-write or full-access"),
        )
    })?;
    let update = UpdateSessionRequest {
        permission_mode: Some(mode),
        ..UpdateSessionRequest::default()
    };
    hub.api
        .update_session(open.id, &update)
        .await
        .map_err(|e| api_error("changing the mode", &e))?;
    cx.send_notification(SessionNotification::new(
        req.session_id,
        SessionUpdate::CurrentModeUpdate(CurrentModeUpdate::new(mode.as_str())),
    ))?;
    Ok(SetSessionModeResponse::new())
}

/// Forwards the session's events to the editor, in order, each once. Events up to
/// `replay_to` are history: their approvals are not asked (those still waiting are, once
/// the history is out).
async fn follow(
    hub: Arc<Hub>,
    open: Arc<Open>,
    cx: v1::ConnectionTo<Client>,
    replay_to: u64,
    caught: oneshot::Sender<()>,
) {
    let session = open.id;
    let mut mapper = map::Mapper::new(session, hub.api.base_url());
    let mut caught = Some(caught);
    if replay_to == 0 {
        caught_up(&hub, &open, &cx, &mapper, &mut caught).await;
    }
    let mut events = hub.api.subscribe(session, Some(0));
    // Runs this editor started: their message and files are not echoed.
    let mut own: HashSet<Uuid> = HashSet::new();
    loop {
        // The server sends the stored history at once: a silence while replaying means
        // there is no more of it (its newest events may have been pruned).
        let item = if caught.is_some() {
            match tokio::time::timeout(REPLAY_IDLE, events.next()).await {
                Ok(item) => item,
                Err(_) => {
                    caught_up(&hub, &open, &cx, &mapper, &mut caught).await;
                    continue;
                }
            }
        } else {
            events.next().await
        };
        let Some(item) = item else { break };
        let env = match item {
            Ok(env) => env,
            Err(ClientError::Decode(e)) => {
                tracing::warn!(%session, error = %e, "an event did not parse; skipped");
                continue;
            }
            Err(e) => {
                tracing::warn!(%session, error = %e, "the session's event stream ended");
                open.fail_all(&format!("the session's event stream ended: {e}"));
                return;
            }
        };
        let live = env.id > replay_to;
        let echo = match &env.event {
            AgentEvent::RunStarted { run_id, content } => {
                lock(&open.runs).started.insert(*run_id);
                if open.take_own_prompt(content.as_deref()) {
                    own.insert(*run_id);
                }
                !own.contains(run_id)
            }
            other => !own.contains(&other.run_id()),
        };
        for update in mapper.updates(&env.event, echo) {
            if cx
                .send_notification(SessionNotification::new(session.to_string(), update))
                .is_err()
            {
                // The editor is gone.
                return;
            }
        }
        match &env.event {
            AgentEvent::WaitingForToolApproval {
                run_id,
                tool_call_ids,
            } if live => {
                for id in tool_call_ids {
                    ask(&hub, &open, &cx, &mapper, *run_id, id);
                }
            }
            AgentEvent::ToolExecutionStarted { tool_call_id, .. }
            | AgentEvent::ToolRejected { tool_call_id, .. } => open.withdraw(tool_call_id),
            AgentEvent::RunCompleted {
                run_id,
                stop_reason,
                backend_stop_reason,
                ..
            } => {
                open.withdraw_run(*run_id);
                own.remove(run_id);
                open.end(
                    *run_id,
                    Ending::Done(*stop_reason, backend_stop_reason.clone()),
                );
            }
            AgentEvent::RunError {
                run_id,
                error,
                retryable,
                ..
            } => {
                open.withdraw_run(*run_id);
                own.remove(run_id);
                open.end(
                    *run_id,
                    Ending::Failed {
                        error: error.clone(),
                        retryable: *retryable,
                    },
                );
            }
            _ => {}
        }
        if caught.is_some() && env.id >= replay_to {
            caught_up(&hub, &open, &cx, &mapper, &mut caught).await;
        }
    }
    open.fail_all("the session's event stream ended");
}

/// The history is out: approvals still waiting are asked now.
async fn caught_up(
    hub: &Arc<Hub>,
    open: &Arc<Open>,
    cx: &v1::ConnectionTo<Client>,
    mapper: &map::Mapper,
    caught: &mut Option<oneshot::Sender<()>>,
) {
    if let Ok(pending) = hub.api.pending_tools(open.id).await
        && let Some(run) = pending.run_id
    {
        for call in &pending.tool_calls {
            ask(hub, open, cx, mapper, run, &call.id);
        }
    }
    if let Some(tx) = caught.take() {
        let _ = tx.send(());
    }
}

/// Asks the editor about one waiting call; its answer becomes the decision.
fn ask(
    hub: &Arc<Hub>,
    open: &Arc<Open>,
    cx: &v1::ConnectionTo<Client>,
    mapper: &map::Mapper,
    run: Uuid,
    tool_call_id: &str,
) {
    if !lock(&open.asked).insert(tool_call_id.to_owned()) {
        return;
    }
    let mut fields = ToolCallUpdateFields::new();
    if let Some(call) = mapper.call(tool_call_id) {
        fields = fields
            .title(map::tool_title(call))
            .kind(map::tool_kind(call))
            .raw_input(call.arguments.clone());
    }
    let request = RequestPermissionRequest::new(
        open.id.to_string(),
        ToolCallUpdate::new(tool_call_id.to_owned(), fields),
        vec![
            PermissionOption::new("allow", "Allow", PermissionOptionKind::AllowOnce),
            PermissionOption::new("deny", "Deny", PermissionOptionKind::RejectOnce),
        ],
    );
    let sent = cx.send_request(request);
    lock(&open.asks).insert(tool_call_id.to_owned(), (run, sent.cancellation_handle()));
    let (hub, open, id) = (hub.clone(), open.clone(), tool_call_id.to_owned());
    let spawned = cx.spawn(async move {
        let answer = sent.block_task().await;
        lock(&open.asks).remove(&id);
        let action = match answer {
            Ok(resp) => match resp.outcome {
                RequestPermissionOutcome::Selected(s) if s.option_id.to_string() == "allow" => {
                    Some(DecisionAction::Accept)
                }
                RequestPermissionOutcome::Selected(_) => Some(DecisionAction::Reject),
                // Withdrawn, or the editor's user cancelled the turn: the other surfaces
                // and the approval's timeout decide.
                _ => None,
            },
            Err(e) => {
                tracing::info!(session = %open.id, tool_call_id = %id, error = %e, "no answer from the editor");
                None
            }
        };
        if let Some(action) = action {
            let reject = action == DecisionAction::Reject;
            let req = ToolDecisionsRequest {
                run_id: run,
                decisions: [(
                    id.clone(),
                    ToolDecision {
                        action,
                        content: reject.then(|| "denied in the editor".to_owned()),
                        by: Some("the editor (ACP)".to_owned()),
                        cause: reject.then_some(switchboard_protocol::RejectionCause::User),
                    },
                )]
                .into_iter()
                .collect(),
            };
            if let Err(e) = hub.api.decide_tools(open.id, &req).await {
                // Decided elsewhere meanwhile, or the run ended: nothing to do.
                tracing::info!(session = %open.id, tool_call_id = %id, error = %e, "the editor's decision was not taken");
            }
        }
        Ok(())
    });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "the connection is closing");
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_editor_picks_the_backend_in_meta_else_the_connection_does() {
        let opts = HubOptions {
            agent: Some("claude".into()),
        };
        let meta = |v: serde_json::Value| v.as_object().cloned().unwrap();
        assert_eq!(
            backend_of(
                Some(&meta(
                    serde_json::json!({"switchboard": {"agent": "goose"}})
                )),
                &opts
            ),
            Some(BackendSpec::Acp("goose".into()))
        );
        assert_eq!(
            backend_of(
                Some(&meta(
                    serde_json::json!({"switchboard": {"backend": "builtin"}})
                )),
                &opts
            ),
            Some(BackendSpec::Builtin)
        );
        assert_eq!(
            backend_of(None, &opts),
            Some(BackendSpec::Acp("claude".into()))
        );
        assert_eq!(backend_of(None, &HubOptions::default()), None);
    }

    #[test]
    fn resource_uris_name_their_files() {
        assert_eq!(file_name("file:///home/me/src/main.rs"), "main.rs");
        assert_eq!(file_name("zed:untitled"), "resource.txt");
        assert_eq!(file_name(""), "resource.txt");
    }

    #[test]
    fn api_errors_keep_the_servers_code() {
        let e = api_error(
            "creating the session",
            &ClientError::Api {
                status: 422,
                code: "validation_failed".into(),
                message: "cwd: not a directory".into(),
                request_id: "r".into(),
            },
        );
        assert_eq!(e.code, ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("cwd: not a directory"));
        assert_eq!(e.data.unwrap()["code"], "validation_failed");
        let e = api_error("x", &ClientError::Transport("refused".into()));
        assert_eq!(e.code, ErrorCode::INTERNAL_ERROR);
    }
}
