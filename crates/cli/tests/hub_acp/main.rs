#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Switchboard as an ACP agent, end to end: a real ACP client (the client side of the same
//! crate, as an editor is) drives `switchboard acp` over stdio, `GET /v1/acp` over a
//! WebSocket, and `switchboard acp --url ws://…/v1/acp` (the bridge between the two), in
//! front of a real server whose sessions run the scriptable test agent.

mod a2a;
mod a2a_backend;
mod acpx;
#[path = "../common/mod.rs"]
mod common;
mod mcp;
mod sdk;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::v1::schema::{
    CancelNotification, ContentBlock, InitializeRequest, ListSessionsRequest, LoadSessionRequest,
    NewSessionRequest, PromptRequest, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionNotification, SessionUpdate,
    SetSessionModeRequest, StopReason, ToolCallStatus,
};
use agent_client_protocol::{Agent, ByteStreams, Client as AcpClient, v1};
use common::*;
use futures::{SinkExt, StreamExt};
use switchboard_protocol::{AgentEvent, BackendSpec, CreateSessionRequest, DecisionAction};
use switchboard_test_support::mock_llm::MockLlm;
use switchboard_test_support::process::ServerProcess;
use tokio::sync::{mpsc, oneshot};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(30);

/// A data dir, a workspace and a config whose `[agents.test]` is the test agent.
struct World {
    dir: tempfile::TempDir,
    ws: tempfile::TempDir,
    config: PathBuf,
    llm: MockLlm,
}

impl World {
    async fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let ws = tempfile::tempdir().unwrap();
        let config = test_agent_config(dir.path());
        World {
            dir,
            ws,
            config,
            llm: MockLlm::start().await,
        }
    }

    async fn server(&self, extra: &[(&str, &str)]) -> ServerProcess {
        let config = self.config.to_string_lossy().to_string();
        let mut env: Vec<(&str, &str)> = vec![("SWITCHBOARD_CONFIG", config.as_str())];
        env.extend_from_slice(extra);
        start(&self.dir.path().join("data"), &self.llm.base_url(), &env).await
    }
}

/// A permission request the editor got, with the means to answer it.
struct Ask {
    req: RequestPermissionRequest,
    responder: v1::Responder<RequestPermissionResponse>,
}

impl Ask {
    fn answer(self, option: &str) {
        self.responder
            .respond(RequestPermissionResponse::new(
                RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(
                    option.to_owned(),
                )),
            ))
            .unwrap();
    }

    /// Waits, as an editor's dialog does, until the agent withdraws the request; answers
    /// `cancelled` as the protocol asks.
    async fn until_withdrawn(self) {
        tokio::time::timeout(WAIT, self.responder.cancellation().cancelled())
            .await
            .expect("the agent withdraws the request");
        self.responder
            .respond(RequestPermissionResponse::new(
                RequestPermissionOutcome::Cancelled,
            ))
            .unwrap();
    }
}

/// An editor: an ACP client connection, the updates it got and the questions it was asked.
struct Editor {
    cx: v1::ConnectionTo<Agent>,
    updates: Arc<Mutex<Vec<SessionNotification>>>,
    asks: mpsc::UnboundedReceiver<Ask>,
    _stop: oneshot::Sender<()>,
    _child: Option<tokio::process::Child>,
}

impl Editor {
    async fn connect(
        transport: impl agent_client_protocol::ConnectTo<AcpClient> + 'static,
    ) -> Editor {
        let updates: Arc<Mutex<Vec<SessionNotification>>> = Arc::default();
        let (ask_tx, asks) = mpsc::unbounded_channel();
        let (cx_tx, cx_rx) = oneshot::channel();
        let (stop, stop_rx) = oneshot::channel::<()>();
        let u = updates.clone();
        tokio::spawn(async move {
            let _ = AcpClient
                .v1()
                .name("test-editor")
                .on_receive_notification(
                    async move |n: SessionNotification, _cx| {
                        u.lock().unwrap().push(n);
                        Ok(())
                    },
                    agent_client_protocol::on_receive_notification!(),
                )
                .on_receive_request(
                    async move |req: RequestPermissionRequest, responder, _cx| {
                        let _ = ask_tx.send(Ask { req, responder });
                        Ok(())
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .connect_with(transport, async move |cx: v1::ConnectionTo<Agent>| {
                    let _ = cx_tx.send(cx.clone());
                    let _ = stop_rx.await;
                    Ok(())
                })
                .await;
        });
        Editor {
            cx: cx_rx.await.unwrap(),
            updates,
            asks,
            _stop: stop,
            _child: None,
        }
    }

    /// `switchboard acp --agent test` on stdio, against `url`.
    async fn stdio(url: &str, extra: &[&str]) -> Editor {
        let mut child = tokio::process::Command::new(bin())
            .arg("acp")
            .args(extra)
            .env("SWITCHBOARD_URL", url)
            .env("SWITCHBOARD_TOKEN", TOKEN)
            .env("SWITCHBOARD_CONFIG", "/dev/null")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut editor =
            Editor::connect(ByteStreams::new(stdin.compat_write(), stdout.compat())).await;
        editor._child = Some(child);
        editor
    }

    /// `GET /v1/acp` as a WebSocket, one JSON-RPC message per text frame.
    async fn websocket(base: &str, query: &str) -> Editor {
        use tokio_tungstenite::tungstenite::{Message, client::IntoClientRequest};
        let url = format!("{}{query}", acp_ws_url(base));
        let mut req = url.into_client_request().unwrap();
        req.headers_mut()
            .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
        let (socket, _) = tokio_tungstenite::connect_async(req).await.unwrap();
        let (sink, stream) = socket.split();
        let sink = sink
            .sink_map_err(std::io::Error::other)
            .with(|line: String| {
                futures::future::ready(Ok::<_, std::io::Error>(Message::Text(line.into())))
            });
        let stream = stream.filter_map(|m| {
            futures::future::ready(match m {
                Ok(Message::Text(t)) => Some(Ok(t.to_string())),
                Ok(_) => None,
                Err(e) => Some(Err(std::io::Error::other(e))),
            })
        });
        Editor::connect(agent_client_protocol::Lines::new(
            Box::pin(sink),
            Box::pin(stream),
        ))
        .await
    }

    async fn initialize(&self) -> agent_client_protocol::v1::schema::InitializeResponse {
        let req = InitializeRequest::new(agent_client_protocol::schema::ProtocolVersion::V1);
        tokio::time::timeout(WAIT, self.cx.send_request(req).block_task())
            .await
            .unwrap()
            .unwrap()
    }

    async fn new_session(
        &self,
        cwd: &std::path::Path,
    ) -> (
        String,
        agent_client_protocol::v1::schema::NewSessionResponse,
    ) {
        let resp = self
            .new_session_with(NewSessionRequest::new(cwd))
            .await
            .unwrap();
        (resp.session_id.to_string(), resp)
    }

    async fn new_session_with(
        &self,
        req: NewSessionRequest,
    ) -> Result<agent_client_protocol::v1::schema::NewSessionResponse, agent_client_protocol::Error>
    {
        tokio::time::timeout(WAIT, self.cx.send_request(req).block_task())
            .await
            .expect("session/new is answered")
    }

    fn prompt(
        &self,
        session: &str,
        text: &str,
    ) -> impl Future<
        Output = Result<
            agent_client_protocol::v1::schema::PromptResponse,
            agent_client_protocol::Error,
        >,
    > + use<> {
        let req = PromptRequest::new(
            session.to_owned(),
            vec![ContentBlock::from(text.to_owned())],
        );
        let sent = self.cx.send_request(req).block_task();
        async move {
            tokio::time::timeout(WAIT, sent)
                .await
                .expect("the prompt ends")
        }
    }

    async fn ask(&mut self) -> Ask {
        tokio::time::timeout(WAIT, self.asks.recv())
            .await
            .expect("a permission request")
            .unwrap()
    }

    fn updates_of(&self, session: &str) -> Vec<SessionUpdate> {
        self.updates
            .lock()
            .unwrap()
            .iter()
            .filter(|n| n.session_id.to_string() == session)
            .map(|n| n.update.clone())
            .collect()
    }

    fn take_updates(&self) -> Vec<SessionUpdate> {
        std::mem::take(&mut *self.updates.lock().unwrap())
            .into_iter()
            .map(|n| n.update)
            .collect()
    }

    async fn until_update(&self, what: &str, f: impl Fn(&SessionUpdate) -> bool) {
        let deadline = tokio::time::Instant::now() + WAIT;
        while !self.updates.lock().unwrap().iter().any(|n| f(&n.update)) {
            assert!(tokio::time::Instant::now() < deadline, "no update: {what}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `ws://HOST/v1/acp` of the server at `base` (`http://HOST`).
fn acp_ws_url(base: &str) -> String {
    format!("{}/v1/acp", base.replacen("http", "ws", 1))
}

/// `_meta` naming a Switchboard choice for `session/new`: `{"switchboard": {key: value}}`.
fn switchboard_meta(key: &str, value: &str) -> serde_json::Map<String, serde_json::Value> {
    let mut meta = serde_json::Map::new();
    meta.insert("switchboard".into(), serde_json::json!({ key: value }));
    meta
}

/// Prompts `[tool]` and, while the editor's permission dialog is open, decides the call over
/// HTTP (`POST /v1/sessions/{id}/tools/decisions`, as the console or the phone would): the
/// editor's request is withdrawn and the prompt ends. Returns the turn's updates.
async fn approval_decided_over_http(
    ed: &mut Editor,
    c: &switchboard_client::Client,
    sid: &str,
    action: DecisionAction,
) -> Vec<SessionUpdate> {
    let id = Uuid::parse_str(sid).unwrap();
    ed.take_updates();
    let turn = ed.prompt(sid, "[tool]");
    let ask = ed.ask().await;
    assert_eq!(ask.req.session_id.to_string(), sid);
    let call_id = ask.req.tool_call.tool_call_id.to_string();
    let pending = c.pending_tools(id).await.unwrap();
    let run = pending.run_id.expect("a run waits");
    assert_eq!(pending.tool_calls[0].id, call_id);
    let withdrawn = tokio::spawn(ask.until_withdrawn());
    c.decide_tools(
        id,
        &decide(run, &call_id, action, Some("decided on the phone")),
    )
    .await
    .unwrap();
    withdrawn.await.unwrap();
    assert_eq!(turn.await.unwrap().stop_reason, StopReason::EndTurn);
    ed.take_updates()
}

fn text_chunk(u: &SessionUpdate, agent: bool) -> Option<String> {
    let chunk = match (u, agent) {
        (SessionUpdate::AgentMessageChunk(c), true)
        | (SessionUpdate::UserMessageChunk(c), false) => c,
        _ => return None,
    };
    match &chunk.content {
        ContentBlock::Text(t) => Some(t.text.clone()),
        _ => None,
    }
}

fn agent_text(updates: &[SessionUpdate]) -> String {
    updates.iter().filter_map(|u| text_chunk(u, true)).collect()
}

fn user_texts(updates: &[SessionUpdate]) -> Vec<String> {
    updates
        .iter()
        .filter_map(|u| text_chunk(u, false))
        .collect()
}

fn tool_statuses(updates: &[SessionUpdate]) -> Vec<ToolCallStatus> {
    updates
        .iter()
        .filter_map(|u| match u {
            SessionUpdate::ToolCallUpdate(t) => t.fields.status,
            _ => None,
        })
        .collect()
}

/// The reply text of every run in the session's log.
async fn log_text(c: &switchboard_client::Client, id: Uuid) -> String {
    let last = c.get_session(id).await.unwrap().session.last_event_id;
    let mut events = c.subscribe(id, Some(0));
    let mut text = String::new();
    while let Some(Ok(env)) = events.next().await {
        if let AgentEvent::TextDelta { delta, .. } = &env.event {
            text.push_str(delta);
        }
        if env.id >= last {
            break;
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_drives_a_session_over_stdio() {
    let world = World::new().await;
    let server = world.server(&[]).await;
    let c = client(&server);
    let mut ed = Editor::stdio(&server.url, &["--agent", "test"]).await;

    let init = ed.initialize().await;
    assert!(
        init.agent_capabilities.load_session,
        "loadSession advertised"
    );
    assert!(init.agent_capabilities.session_capabilities.list.is_some());
    assert!(init.agent_capabilities.prompt_capabilities.image);

    let (sid, new) = ed.new_session(world.ws.path()).await;
    let id = Uuid::parse_str(&sid).unwrap();
    let modes = new.modes.expect("modes are the permission modes");
    assert_eq!(modes.current_mode_id.to_string(), "workspace-write");
    let ids: Vec<String> = modes
        .available_modes
        .iter()
        .map(|m| m.id.to_string())
        .collect();
    assert_eq!(ids, ["read-only", "workspace-write", "full-access"]);
    let detail = c.get_session(id).await.unwrap();
    assert_eq!(detail.config.backend, BackendSpec::Acp("test".into()));
    assert_eq!(detail.session.cwd, world.ws.path().to_string_lossy());

    // Streaming: reasoning, the plan, the reply; the editor's own prompt is not echoed.
    let resp = ed.prompt(&sid, "[think] [plan] hello").await.unwrap();
    assert_eq!(resp.stop_reason, StopReason::EndTurn);
    let ups = ed.updates_of(&sid);
    assert!(
        ups.iter()
            .any(|u| matches!(u, SessionUpdate::AgentThoughtChunk(_))),
        "{ups:?}"
    );
    assert!(
        ups.iter()
            .any(|u| matches!(u, SessionUpdate::Plan(p) if !p.entries.is_empty())),
        "{ups:?}"
    );
    assert!(
        agent_text(&ups).contains("Hello from the test agent"),
        "{ups:?}"
    );
    assert!(
        user_texts(&ups).is_empty(),
        "no echo of the editor's prompt: {ups:?}"
    );
    ed.take_updates();

    // An approval answered in the editor.
    let turn = ed.prompt(&sid, "[tool]");
    let ask = ed.ask().await;
    assert_eq!(ask.req.session_id.to_string(), sid);
    let title = ask.req.tool_call.fields.title.clone().unwrap_or_default();
    assert!(title.contains("echo hi"), "{title}");
    let options: Vec<String> = ask
        .req
        .options
        .iter()
        .map(|o| o.option_id.to_string())
        .collect();
    assert_eq!(options, ["allow", "deny"]);
    ask.answer("allow");
    assert_eq!(turn.await.unwrap().stop_reason, StopReason::EndTurn);
    let ups = ed.take_updates();
    let statuses = tool_statuses(&ups);
    assert!(
        statuses.contains(&ToolCallStatus::InProgress),
        "the allowed call ran: {ups:?}"
    );
    assert!(!statuses.contains(&ToolCallStatus::Failed), "{ups:?}");

    // An approval answered elsewhere while the editor's dialog is open: the editor's request
    // is withdrawn and the call shows the outcome.
    let ups = approval_decided_over_http(&mut ed, &c, &sid, DecisionAction::Reject).await;
    assert!(
        tool_statuses(&ups).contains(&ToolCallStatus::Failed),
        "the rejection shows: {ups:?}"
    );

    // Modes: set_mode changes the session's permission mode.
    let req = SetSessionModeRequest::new(sid.clone(), "read-only");
    ed.cx.send_request(req).block_task().await.unwrap();
    ed.until_update("current_mode_update", |u| {
        matches!(u, SessionUpdate::CurrentModeUpdate(m) if m.current_mode_id.to_string() == "read-only")
    })
    .await;
    let detail = c.get_session(id).await.unwrap();
    assert_eq!(detail.config.permission_mode.as_str(), "read-only");
    let bad = ed
        .cx
        .send_request(SetSessionModeRequest::new(sid.clone(), "yolo"))
        .block_task()
        .await;
    assert!(bad.is_err(), "an unknown mode is refused");

    // Cancel: the run stops and the prompt ends `cancelled`.
    let turn = ed.prompt(&sid, "[slow]");
    ed.until_update("a tick", |u| {
        text_chunk(u, true).is_some_and(|t| t.contains("tick"))
    })
    .await;
    ed.cx
        .send_notification(CancelNotification::new(sid.clone()))
        .unwrap();
    assert_eq!(turn.await.unwrap().stop_reason, StopReason::Cancelled);

    // `$/cancel_request` of the prompt request: the same (ACP's request cancellation).
    ed.take_updates();
    let sent = ed.cx.send_request(PromptRequest::new(
        sid.clone(),
        vec![ContentBlock::from("[slow]".to_owned())],
    ));
    let handle = sent.cancellation_handle();
    let turn = tokio::spawn(async move { tokio::time::timeout(WAIT, sent.block_task()).await });
    ed.until_update("a tick", |u| {
        text_chunk(u, true).is_some_and(|t| t.contains("tick"))
    })
    .await;
    handle.cancel().unwrap();
    let answer = turn.await.unwrap().expect("the prompt ends");
    assert_eq!(answer.unwrap().stop_reason, StopReason::Cancelled);

    // The session is listed, and everything the editor saw is what the log holds.
    let list = ed
        .cx
        .send_request(ListSessionsRequest::new())
        .block_task()
        .await
        .unwrap();
    assert!(
        list.sessions
            .iter()
            .any(|s| s.session_id.to_string() == sid)
    );

    // A prompt to a session that is not open is an error, not a hang.
    let err = ed.prompt(&Uuid::now_v7().to_string(), "hi").await;
    assert!(err.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_over_the_websocket_loads_a_session_started_elsewhere() {
    let world = World::new().await;
    let server = world.server(&[]).await;
    let c = client(&server);

    // Not a handshake, or no token: clear refusals.
    let http = reqwest::Client::new();
    let plain = http
        .get(format!("{}/v1/acp", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 426);
    let body: serde_json::Value = plain.json().await.unwrap();
    assert_eq!(body["code"], "upgrade_required");
    let anon = http
        .get(format!("{}/v1/acp", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(anon.status().as_u16(), 401);

    // A session started over HTTP (as from a chat), with one run in it.
    let s = c
        .create_session(&CreateSessionRequest {
            cwd: Some(world.ws.path().to_string_lossy().into()),
            backend: Some(BackendSpec::Acp("test".into())),
            ..Default::default()
        })
        .await
        .unwrap();
    let (mut events, run) = send(&c, s.id, "started from the phone").await;
    until_run_ends(&mut events, run).await;

    let mut ed = Editor::websocket(&server.url, "?agent=test").await;
    ed.initialize().await;
    let sid = s.id.to_string();
    let load = LoadSessionRequest::new(sid.clone(), world.ws.path());
    let resp = tokio::time::timeout(WAIT, ed.cx.send_request(load).block_task())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        resp.modes.unwrap().current_mode_id.to_string(),
        "workspace-write"
    );
    // The history came before the answer: the user's message and the reply.
    let ups = ed.updates_of(&sid);
    assert_eq!(user_texts(&ups), ["started from the phone"], "{ups:?}");
    assert!(
        agent_text(&ups).contains("Hello from the test agent"),
        "{ups:?}"
    );

    // The editor carries on; a run started elsewhere meanwhile is shown live.
    let resp = ed.prompt(&sid, "and now from the editor").await.unwrap();
    assert_eq!(resp.stop_reason, StopReason::EndTurn);
    let (mut events, run) = send(&c, s.id, "phone again").await;
    until_run_ends(&mut events, run).await;
    ed.until_update("the phone's message", |u| {
        text_chunk(u, false).is_some_and(|t| t == "phone again")
    })
    .await;
    // The phone's run ended before the editor's follower passed it on: wait for its reply.
    let logged = log_text(&c, s.id).await;
    let deadline = std::time::Instant::now() + WAIT;
    while agent_text(&ed.updates_of(&sid)).len() < logged.len()
        && std::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ups = ed.updates_of(&sid);
    assert_eq!(user_texts(&ups), ["started from the phone", "phone again"]);
    assert_eq!(agent_text(&ups), logged, "each event once, in order");

    // An approval asked in the editor over the network, answered there.
    let turn = ed.prompt(&sid, "[tool]");
    ed.ask().await.answer("deny");
    turn.await.unwrap();
    let ups = ed.take_updates();
    assert!(
        tool_statuses(&ups).contains(&ToolCallStatus::Failed),
        "{ups:?}"
    );

    // An approval decided over HTTP while the editor's dialog is open over the network: the
    // request is withdrawn (cancelled) and the approved call runs.
    let ups = approval_decided_over_http(&mut ed, &c, &sid, DecisionAction::Accept).await;
    let statuses = tool_statuses(&ups);
    assert!(
        statuses.contains(&ToolCallStatus::Completed),
        "the approved call ran: {ups:?}"
    );
    assert!(!statuses.contains(&ToolCallStatus::Failed), "{ups:?}");
    assert!(agent_text(&ups).contains("The tool ran."), "{ups:?}");
    assert!(c.pending_tools(s.id).await.unwrap().run_id.is_none());

    // A new session over the WebSocket runs the agent named in the URL.
    let (new_sid, _) = ed.new_session(world.ws.path()).await;
    let detail = c
        .get_session(Uuid::parse_str(&new_sid).unwrap())
        .await
        .unwrap();
    assert_eq!(detail.config.backend, BackendSpec::Acp("test".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_editor_through_the_websocket_bridge_streams_and_gets_approvals() {
    let world = World::new().await;
    let server = world.server(&[]).await;
    let c = client(&server);
    // `switchboard acp --url ws://…/v1/acp`: only a bridge to the server's agent, so the
    // API address it is given (where nothing listens) is never used.
    let url = acp_ws_url(&server.url);
    let nowhere = format!("http://127.0.0.1:{}", free_port());
    let mut ed = Editor::stdio(&nowhere, &["--url", url.as_str(), "--agent", "test"]).await;

    let init = ed.initialize().await;
    assert!(init.agent_capabilities.load_session, "{init:?}");

    // `--agent` went along in the URL: the new session runs the test agent.
    let (sid, new) = ed.new_session(world.ws.path()).await;
    let id = Uuid::parse_str(&sid).unwrap();
    assert_eq!(
        new.modes.unwrap().current_mode_id.to_string(),
        "workspace-write"
    );
    let detail = c.get_session(id).await.unwrap();
    assert_eq!(detail.config.backend, BackendSpec::Acp("test".into()));
    assert_eq!(detail.session.cwd, world.ws.path().to_string_lossy());

    // A prompt's reply comes through the bridge as the log holds it.
    let resp = ed.prompt(&sid, "[think] hello").await.unwrap();
    assert_eq!(resp.stop_reason, StopReason::EndTurn);
    let ups = ed.updates_of(&sid);
    assert!(
        ups.iter()
            .any(|u| matches!(u, SessionUpdate::AgentThoughtChunk(_))),
        "{ups:?}"
    );
    assert_eq!(agent_text(&ups), "Hello from the test agent");
    assert_eq!(agent_text(&ups), log_text(&c, id).await);
    let mut seen = agent_text(&ed.take_updates());

    // Streamed: the text arrives while the prompt is still going; a cancel crosses too.
    let turn = ed.prompt(&sid, "[slow]");
    ed.until_update("a tick before the end", |u| {
        text_chunk(u, true).is_some_and(|t| t.contains("tick"))
    })
    .await;
    ed.cx
        .send_notification(CancelNotification::new(sid.clone()))
        .unwrap();
    assert_eq!(turn.await.unwrap().stop_reason, StopReason::Cancelled);
    let ups = ed.take_updates();
    let ticks = agent_text(&ups);
    assert!(
        ticks.starts_with("tick ") && ticks.len() < 60 * "tick ".len(),
        "cut short: {ticks}"
    );
    seen.push_str(&ticks);

    // A permission request crosses the bridge to the editor and its answer back.
    let turn = ed.prompt(&sid, "[tool]");
    let ask = ed.ask().await;
    assert_eq!(ask.req.session_id.to_string(), sid);
    ask.answer("deny");
    assert_eq!(turn.await.unwrap().stop_reason, StopReason::EndTurn);
    let ups = ed.take_updates();
    assert!(
        tool_statuses(&ups).contains(&ToolCallStatus::Failed),
        "{ups:?}"
    );
    assert!(agent_text(&ups).contains("was rejected"), "{ups:?}");
    seen.push_str(&agent_text(&ups));

    // One decided over HTTP while the editor waits: the editor's request is withdrawn.
    let ups = approval_decided_over_http(&mut ed, &c, &sid, DecisionAction::Accept).await;
    assert!(
        tool_statuses(&ups).contains(&ToolCallStatus::Completed),
        "{ups:?}"
    );
    assert!(agent_text(&ups).contains("The tool ran."), "{ups:?}");
    seen.push_str(&agent_text(&ups));

    // The editor saw every reply of the session once, in order.
    assert_eq!(seen, log_text(&c, id).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_editor_chooses_the_agent_in_meta() {
    let world = World::new().await;
    let server = world.server(&[]).await;
    let c = client(&server);
    let backend = async |sid: &str| {
        c.get_session(Uuid::parse_str(sid).unwrap())
            .await
            .unwrap()
            .config
            .backend
    };

    // No `--agent`: without `_meta` a new session runs the server's default backend …
    let ed = Editor::stdio(&server.url, &[]).await;
    ed.initialize().await;
    let (plain, _) = ed.new_session(world.ws.path()).await;
    assert_eq!(backend(&plain).await, BackendSpec::Builtin);

    // … and with `_meta.switchboard.agent` the agent the editor named, which then answers.
    let req = NewSessionRequest::new(world.ws.path()).meta(switchboard_meta("agent", "test"));
    let sid = ed
        .new_session_with(req)
        .await
        .unwrap()
        .session_id
        .to_string();
    assert_eq!(backend(&sid).await, BackendSpec::Acp("test".into()));
    let resp = ed.prompt(&sid, "hello").await.unwrap();
    assert_eq!(resp.stop_reason, StopReason::EndTurn);
    assert_eq!(
        agent_text(&ed.updates_of(&sid)),
        "Hello from the test agent"
    );

    // An agent the server does not have is refused, not silently replaced.
    let req = NewSessionRequest::new(world.ws.path()).meta(switchboard_meta("agent", "nope"));
    assert!(ed.new_session_with(req).await.is_err());

    // `_meta` wins over `--agent`: `backend: builtin` picks the built-in agent.
    let ed = Editor::stdio(&server.url, &["--agent", "test"]).await;
    ed.initialize().await;
    let req = NewSessionRequest::new(world.ws.path()).meta(switchboard_meta("backend", "builtin"));
    let sid = ed
        .new_session_with(req)
        .await
        .unwrap()
        .session_id
        .to_string();
    assert_eq!(backend(&sid).await, BackendSpec::Builtin);
    let (sid, _) = ed.new_session(world.ws.path()).await;
    assert_eq!(backend(&sid).await, BackendSpec::Acp("test".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_mid_prompt_ends_the_prompt_and_the_editor_carries_on() {
    let world = World::new().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = world
        .server(&[("SWITCHBOARD_LISTEN", listen.as_str())])
        .await;
    let c = client(&server);
    let ed = Editor::stdio(&server.url, &["--agent", "test"]).await;
    ed.initialize().await;
    let (sid, _) = ed.new_session(world.ws.path()).await;
    let id = Uuid::parse_str(&sid).unwrap();

    let turn = ed.prompt(&sid, "[slow]");
    ed.until_update("a tick", |u| {
        text_chunk(u, true).is_some_and(|t| t.contains("tick"))
    })
    .await;
    server.kill().await;
    let server = world
        .server(&[("SWITCHBOARD_LISTEN", listen.as_str())])
        .await;
    // The interrupted run is closed (retryable) when the server comes back; the editor's
    // prompt ends with that error, reconnected with Last-Event-ID.
    let err = turn.await.expect_err("the interrupted run fails");
    let data = err.data.clone().unwrap_or_default();
    assert_eq!(data["retryable"], true, "{err:?}");
    assert!(err.message.contains("interrupted"), "{err:?}");

    let resp = ed.prompt(&sid, "hello again").await.unwrap();
    assert_eq!(resp.stop_reason, StopReason::EndTurn);
    let c2 = client(&server);
    let ups = ed.updates_of(&sid);
    assert_eq!(
        agent_text(&ups),
        log_text(&c2, id).await,
        "nothing seen twice across the restart"
    );
    assert!(agent_text(&ups).ends_with("Hello from the test agent"));
    drop(c);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_prompts_can_be_cancelled_and_survive_a_reload() {
    use agent_client_protocol::v1::schema::ImageContent;
    let world = World::new().await;
    let server = world.server(&[]).await;
    let c = client(&server);
    let ed = Editor::stdio(&server.url, &["--agent", "test"]).await;
    ed.initialize().await;
    let (sid, _) = ed.new_session(world.ws.path()).await;
    let id = Uuid::parse_str(&sid).unwrap();

    // A run from elsewhere is going: the editor's prompt waits its turn, and a cancel ends
    // it at once, while that run goes on.
    let (_events, other) = send(&c, id, "[slow]").await;
    let queued = ed.prompt(&sid, "wait for me");
    ed.until_update("the other run's ticks", |u| {
        text_chunk(u, true).is_some_and(|t| t.contains("tick"))
    })
    .await;
    ed.cx
        .send_notification(CancelNotification::new(sid.clone()))
        .unwrap();
    assert_eq!(queued.await.unwrap().stop_reason, StopReason::Cancelled);
    let s = c.get_session(id).await.unwrap().session;
    assert_eq!(
        s.active_run_id,
        Some(other),
        "the other run was not touched"
    );

    // Queued again, then the session is loaded again while the prompt waits: the prompt is
    // still answered when its run ends.
    let waiting = ed.prompt(&sid, "still here");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let load = LoadSessionRequest::new(sid.clone(), world.ws.path());
    tokio::time::timeout(WAIT, ed.cx.send_request(load).block_task())
        .await
        .unwrap()
        .unwrap();
    c.cancel(id, other).await.unwrap();
    assert_eq!(waiting.await.unwrap().stop_reason, StopReason::EndTurn);

    // An image alone is a prompt: it is attached, with a line saying so.
    let png = base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        [
            0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d,
        ],
    );
    let req = PromptRequest::new(
        sid.clone(),
        vec![ContentBlock::Image(ImageContent::new(png, "image/png"))],
    );
    let resp = tokio::time::timeout(WAIT, ed.cx.send_request(req).block_task())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(resp.stop_reason, StopReason::EndTurn);
    let files = c.list_files(id).await.unwrap();
    assert!(
        files.files.iter().any(|f| f.name == "image.png"),
        "{files:?}"
    );
}

/// Runs `tests/SCRIPT` (a client written with a third party's official SDK) with `args`
/// and `env`; it checks what it is answered and prints one JSON line of what it saw.
async fn python(script: &str, args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    let path = format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR"));
    let out = tokio::process::Command::new("python3")
        .arg(&path)
        .args(args)
        .envs(env.iter().copied())
        .env("SWITCHBOARD_BIN", bin())
        .env("SWITCHBOARD_CONFIG", "/dev/null")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out)
        .await
        .unwrap_or_else(|_| panic!("{script} ends"))
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
}

/// The first rejection in a session's log: its reason and who decided.
async fn rejection(base: &str, session: Uuid) -> (String, Option<String>) {
    let mut sse = RawSse::connect(base, session, Some(0)).await;
    tokio::time::timeout(WAIT, async {
        loop {
            let (_, _, env) = sse.next().await.expect("the log has the rejection");
            if let AgentEvent::ToolRejected {
                reason, decided_by, ..
            } = env.event
            {
                return (reason, decided_by);
            }
        }
    })
    .await
    .expect("a rejection in the log")
}
