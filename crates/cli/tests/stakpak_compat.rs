#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Wire compatibility with the stakpak agent server, as its own client sees it.
//!
//! `/v1` follows the contract of the stakpak agent server so that a client written for it
//! works against Switchboard unchanged. These tests send, byte for byte, the requests of that
//! client — the gateway's `StakpakClient` (`libs/gateway/src/client.rs` of stakpak/agent
//! **v0.3.88**, commit 4e44be9, read with the search tool) — and read the answers with the
//! shapes that client declares, so a change here that would break it fails a test:
//!
//! - bodies are built with `serde_json::json!` under serde_json's `preserve_order` (enabled
//!   in that workspace), so keys come in the order the client writes them, and absent
//!   options are `null`, never left out: `{"message":…,"type":…,"run_id":null,"model":null,
//!   "sandbox":null,"context":null,"overrides":null}`;
//! - `stakai::Message` serializes as `{"role":"user","content":"…"}`; transcripts are read back
//!   as such messages (`role` one of system/user/assistant/tool, `content` a string or parts);
//! - SSE is read as that client does: blocks split at a blank line, `id:` parsed as `u64`,
//!   `event:` the snake_case type, `data` with a top-level `run_id` and the externally
//!   tagged `event` object whose payloads it reads for `text_delta`, `tool_calls_proposed`,
//!   `run_completed` and `run_error`; a run ends at `run_completed` or `run_error`;
//! - `404` is "not found", `409` is "conflict" (the gateway then queues the message).
//!
//! The client's code is not copied: the shapes below are written from it.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::*;
use serde::Deserialize;
use serde_json::{Value, json};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;
use uuid::Uuid;

// --- the shapes the stakpak client reads ----------------------------------------------------

#[derive(Debug, Deserialize)]
struct HealthResponse {
    status: String,
    #[allow(dead_code)]
    version: String,
    #[allow(dead_code)]
    uptime_seconds: u64,
}

#[derive(Debug, Deserialize)]
struct SessionResponse {
    id: Uuid,
    title: String,
}

#[derive(Debug, Deserialize)]
struct ListSessionsResponse {
    sessions: Vec<SessionResponse>,
    total: usize,
}

#[derive(Debug, Deserialize)]
struct SessionDetailResponse {
    session: SessionResponse,
}

#[derive(Debug, Deserialize)]
struct SendMessageResponse {
    run_id: Uuid,
}

/// `stakai::Message`: the role in lowercase, the content a string or a list of parts.
#[derive(Debug, Deserialize)]
struct StakaiMessage {
    role: StakaiRole,
    content: StakaiContent,
}

#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "lowercase")]
enum StakaiRole {
    System,
    User,
    Assistant,
    Tool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum StakaiContent {
    Text(String),
    Parts(Vec<Value>),
}

impl StakaiContent {
    fn text(&self) -> String {
        match self {
            Self::Text(t) => t.clone(),
            Self::Parts(p) => p
                .iter()
                .filter_map(|p| p["text"].as_str())
                .collect::<String>(),
        }
    }
}

#[derive(Debug, Deserialize)]
struct GetMessagesResponse {
    messages: Vec<StakaiMessage>,
    total: usize,
}

/// `stakpak_agent_core::ProposedToolCall`.
#[derive(Debug, Deserialize)]
struct ProposedToolCall {
    id: String,
    name: String,
    arguments: Value,
    #[allow(dead_code)]
    metadata: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct PendingToolsResponse {
    run_id: Option<Uuid>,
    tool_calls: Vec<ProposedToolCall>,
}

#[derive(Debug, Deserialize)]
struct RunCompletedPayload {
    run_id: Option<Uuid>,
    total_turns: Option<u32>,
    /// Decoded as the client's enum: a value outside it fails the decode.
    stop_reason: StakpakStopReason,
}

/// `stop_reason` as a stakpak client decodes it (its five values, nothing else).
#[derive(Debug, Deserialize, PartialEq)]
#[serde(rename_all = "snake_case")]
enum StakpakStopReason {
    Completed,
    Cancelled,
    MaxTurns,
    Error,
    Refused,
}

#[derive(Debug, Deserialize)]
struct RunErrorPayload {
    #[allow(dead_code)]
    run_id: Option<Uuid>,
    #[allow(dead_code)]
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ToolCallsProposedPayload {
    run_id: Option<Uuid>,
    tool_calls: Vec<ProposedToolCall>,
}

/// The envelope as that client reads it: only these two fields, both optional.
#[derive(Debug, Deserialize)]
struct EnvelopeData {
    run_id: Option<String>,
    event: Option<Value>,
}

/// One SSE block as that client parses it.
#[derive(Debug, Clone)]
struct SseEvent {
    event_id_u64: Option<u64>,
    event_type: String,
    data: String,
}

impl SseEvent {
    fn envelope(&self) -> EnvelopeData {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("data {:?}: {e}", self.data))
    }

    /// The top-level `run_id`, else the one inside the payload.
    fn run_id(&self) -> Option<String> {
        let env = self.envelope();
        env.run_id.or_else(|| {
            let map = env.event?.as_object()?.clone();
            let (_, payload) = map.into_iter().next()?;
            payload.get("run_id")?.as_str().map(str::to_string)
        })
    }

    fn payload(&self, variant: &str) -> Option<Value> {
        self.envelope().event?.as_object()?.get(variant).cloned()
    }

    fn text_delta(&self) -> Option<String> {
        self.payload("TextDelta")?["delta"]
            .as_str()
            .map(str::to_string)
    }

    fn run_completed(&self) -> Option<RunCompletedPayload> {
        serde_json::from_value(self.payload("RunCompleted")?).ok()
    }

    fn run_error(&self) -> Option<RunErrorPayload> {
        serde_json::from_value(self.payload("RunError")?).ok()
    }

    fn tool_calls_proposed(&self) -> Option<ToolCallsProposedPayload> {
        serde_json::from_value(self.payload("ToolCallsProposed")?).ok()
    }

    fn is_run_terminal(&self) -> bool {
        self.event_type == "run_completed" || self.event_type == "run_error"
    }
}

/// Reads blocks the way that client does: split at `\n\n` (or `\r\n\r\n`), skip comments,
/// `id:`/`event:`/`data:` with the value trimmed.
struct EventStream {
    resp: reqwest::Response,
    buf: String,
}

impl EventStream {
    async fn next_event(&mut self) -> Option<SseEvent> {
        loop {
            let sep = self
                .buf
                .find("\n\n")
                .map(|i| (i, 2))
                .or_else(|| self.buf.find("\r\n\r\n").map(|i| (i, 4)));
            if let Some((i, n)) = sep {
                let block: String = self.buf[..i].to_string();
                self.buf.drain(..i + n);
                if block.trim().is_empty() {
                    continue;
                }
                let mut id = None;
                let mut event_type = "message".to_string();
                let mut data = Vec::new();
                for line in block.lines() {
                    let line = line.trim_end_matches('\r');
                    if line.is_empty() || line.starts_with(':') {
                        continue;
                    }
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event_type = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push(v.trim_start().to_string());
                    }
                }
                if id.is_none() && data.is_empty() {
                    continue; // a keep-alive comment block
                }
                return Some(SseEvent {
                    event_id_u64: id.and_then(|v| v.parse().ok()),
                    event_type,
                    data: data.join("\n"),
                });
            }
            match tokio::time::timeout(Duration::from_secs(30), self.resp.chunk()).await {
                Ok(Ok(Some(bytes))) => self
                    .buf
                    .push_str(std::str::from_utf8(&bytes).expect("the stream is UTF-8")),
                Ok(Ok(None)) | Ok(Err(_)) => return None,
                Err(_) => panic!("no SSE data for 30 s"),
            }
        }
    }

    /// Every event of `run_id` up to and including its terminal one, as the gateway's run
    /// consumer reads them (other runs' events are skipped).
    async fn until_terminal(&mut self, run_id: Uuid) -> Vec<SseEvent> {
        let mut out = Vec::new();
        loop {
            let ev = self
                .next_event()
                .await
                .expect("stream ended before the run");
            if ev.run_id().as_deref() != Some(run_id.to_string().as_str()) {
                continue;
            }
            let done = ev.is_run_terminal();
            out.push(ev);
            if done {
                return out;
            }
        }
    }

    /// Events of `run_id` until `tool_calls_proposed`; returns that payload.
    async fn until_proposed(&mut self, run_id: Uuid) -> ToolCallsProposedPayload {
        loop {
            let ev = self.next_event().await.expect("stream ended");
            assert!(!ev.is_run_terminal(), "run ended before proposing: {ev:?}");
            if ev.event_type == "tool_calls_proposed" {
                let p = ev.tool_calls_proposed().expect("payload parses");
                assert_eq!(p.run_id, Some(run_id));
                return p;
            }
        }
    }
}

/// The client: bearer auth, JSON bodies sent as the exact bytes given.
struct StakClient {
    base: String,
    http: reqwest::Client,
}

impl StakClient {
    fn new(server: &ServerProcess) -> Self {
        Self {
            base: server.url.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
        }
    }

    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&str>,
    ) -> (u16, String) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN);
        if let Some(b) = body {
            // What reqwest's `.json(&value)` sends.
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&str>,
    ) -> T {
        let (status, text) = self.request(method, path, body).await;
        assert!((200..300).contains(&status), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
    }

    async fn subscribe(&self, session: Uuid, last_event_id: Option<u64>) -> EventStream {
        let mut req = self
            .http
            .get(format!("{}/v1/sessions/{session}/events", self.base))
            .bearer_auth(TOKEN);
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id.to_string());
        }
        let resp = req.send().await.unwrap();
        assert!(resp.status().is_success(), "{}", resp.status());
        EventStream {
            resp,
            buf: String::new(),
        }
    }

    async fn create_session(&self, title: &str) -> SessionResponse {
        let body = format!(r#"{{"title":{}}}"#, json!(title));
        self.json(reqwest::Method::POST, "/v1/sessions", Some(&body))
            .await
    }

    /// `send_messages` with default options but `message_type`: every option `null`.
    async fn send_message(&self, session: Uuid, text: &str) -> (u16, String) {
        self.send_raw(
            session,
            &message_body(text, "message", "null", "null", "null"),
        )
        .await
    }

    async fn send_raw(&self, session: Uuid, body: &str) -> (u16, String) {
        self.request(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/messages"),
            Some(body),
        )
        .await
    }

    async fn resolve_tools(&self, session: Uuid, run_id: Uuid, decisions: &str) -> (u16, String) {
        let body = format!(r#"{{"run_id":"{run_id}","decisions":{decisions}}}"#);
        self.request(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/tools/decisions"),
            Some(&body),
        )
        .await
    }

    async fn cancel_run(&self, session: Uuid, run_id: Uuid) -> (u16, String) {
        let body = format!(r#"{{"run_id":"{run_id}"}}"#);
        self.request(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/cancel"),
            Some(&body),
        )
        .await
    }

    async fn pending_tools(&self, session: Uuid) -> PendingToolsResponse {
        self.json(
            reqwest::Method::GET,
            &format!("/v1/sessions/{session}/tools/pending"),
            None,
        )
        .await
    }
}

/// The body of `send_messages`, key order and `null`s as that client writes them.
/// `model`, `context` and `overrides` are given as JSON text.
fn message_body(text: &str, kind: &str, model: &str, context: &str, overrides: &str) -> String {
    format!(
        r#"{{"message":{{"role":"user","content":{}}},"type":"{kind}","run_id":null,"model":{model},"sandbox":null,"context":{context},"overrides":{overrides}}}"#,
        json!(text)
    )
}

/// A server (its workspace a temporary directory), the mock model and the client.
struct Setup {
    llm: MockLlm,
    ws: tempfile::TempDir,
    c: StakClient,
    _server: ServerProcess,
    _dir: tempfile::TempDir,
}

impl Setup {
    async fn new() -> Setup {
        let llm = MockLlm::start().await;
        let (dir, ws) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let server = start(
            dir.path(),
            &llm.base_url(),
            &[("SWITCHBOARD_DEFAULT_CWD", ws.path().to_str().unwrap())],
        )
        .await;
        let c = StakClient::new(&server);
        Setup {
            llm,
            ws,
            c,
            _server: server,
            _dir: dir,
        }
    }
}

fn run_id_of(answer: &(u16, String)) -> Uuid {
    assert_eq!(answer.0, 200, "{}", answer.1);
    serde_json::from_str::<SendMessageResponse>(&answer.1)
        .unwrap()
        .run_id
}

// --- the tests ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_flow_with_every_option_null() {
    let setup = Setup::new().await;
    let Setup { llm, c, .. } = &setup;

    let health: HealthResponse = c.json(reqwest::Method::GET, "/v1/health", None).await;
    assert_eq!(health.status, "ok");

    let created = c.create_session("telegram: alice").await;
    assert_eq!(created.title, "telegram: alice");
    let id = created.id;
    let list: ListSessionsResponse = c.json(reqwest::Method::GET, "/v1/sessions", None).await;
    assert_eq!(list.total, 1);
    assert_eq!(list.sessions[0].id, id);
    let detail: SessionDetailResponse = c
        .json(reqwest::Method::GET, &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(detail.session.id, id);
    assert_eq!(detail.session.title, "telegram: alice");

    // The first message: before, every one of these was answered 400 ("context: invalid
    // type: null"), and the gateway's user got no reply at all.
    let mut stream = c.subscribe(id, None).await;
    llm.push(MockReply::text_slow(&["Hel", "lo ", "there"], 30));
    let run = run_id_of(&c.send_message(id, "hi").await);
    // A second message while the run is active is a conflict: the gateway queues it.
    let busy = c.send_message(id, "are you there?").await;
    assert_eq!(busy.0, 409, "{}", busy.1);
    let events = stream.until_terminal(run).await;
    let mut last_id = 0;
    for ev in &events {
        let id = ev.event_id_u64.expect("every event has a u64 id");
        assert!(id > last_id, "ids increase");
        last_id = id;
        assert!(
            ev.event_type
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_'),
            "{}",
            ev.event_type
        );
        let env = ev.envelope();
        assert_eq!(env.run_id.as_deref(), Some(run.to_string().as_str()));
        let event = env.event.unwrap();
        let obj = event.as_object().unwrap();
        assert_eq!(obj.len(), 1, "externally tagged: one key");
        let variant = obj.keys().next().unwrap();
        assert_eq!(to_snake(variant), ev.event_type);
    }
    let text: String = events.iter().filter_map(SseEvent::text_delta).collect();
    assert_eq!(text, "Hello there");
    let last = events.last().unwrap();
    assert_eq!(last.event_type, "run_completed");
    let done = last.run_completed().unwrap();
    assert_eq!(done.run_id, Some(run));
    assert_eq!(done.total_turns, Some(1));
    assert_eq!(done.stop_reason, StakpakStopReason::Completed);

    // The session is free at once for the next message (the gateway sends its queue now).
    llm.push(MockReply::text(&["second answer"]));
    let run2 = run_id_of(&c.send_message(id, "are you there?").await);
    let events2 = stream.until_terminal(run2).await;
    assert_eq!(events2.last().unwrap().event_type, "run_completed");
    assert_eq!(
        events2.last().unwrap().run_completed().unwrap().stop_reason,
        StakpakStopReason::Completed
    );

    // History, with the client's limit and offset.
    let history: GetMessagesResponse = c
        .json(
            reqwest::Method::GET,
            &format!("/v1/sessions/{id}/messages?limit=50&offset=0"),
            None,
        )
        .await;
    assert_eq!(history.total, 4);
    let seen: Vec<(&StakaiRole, String)> = history
        .messages
        .iter()
        .map(|m| (&m.role, m.content.text()))
        .collect();
    assert_eq!(
        seen,
        vec![
            (&StakaiRole::User, "hi".to_string()),
            (&StakaiRole::Assistant, "Hello there".to_string()),
            (&StakaiRole::User, "are you there?".to_string()),
            (&StakaiRole::Assistant, "second answer".to_string()),
        ]
    );
    let page: GetMessagesResponse = c
        .json(
            reqwest::Method::GET,
            &format!("/v1/sessions/{id}/messages?limit=2&offset=2"),
            None,
        )
        .await;
    assert_eq!(page.total, 4);
    assert_eq!(page.messages.len(), 2);
    assert_eq!(page.messages[0].content.text(), "are you there?");

    // Replay from a cursor, as the gateway resumes after a restart: every later event once.
    let cursor = events[1].event_id_u64.unwrap();
    let mut replay = c.subscribe(id, Some(cursor)).await;
    let again = replay.until_terminal(run2).await;
    let first_replayed = {
        let mut s = c.subscribe(id, Some(cursor)).await;
        s.next_event().await.unwrap().event_id_u64.unwrap()
    };
    assert_eq!(first_replayed, cursor + 1);
    let replayed_ids: Vec<u64> = again.iter().map(|e| e.event_id_u64.unwrap()).collect();
    let live_ids: Vec<u64> = events2.iter().map(|e| e.event_id_u64.unwrap()).collect();
    assert_eq!(replayed_ids, live_ids);

    // Delete, then the session is gone (404 is the client's NotFound).
    let (status, _) = c
        .request(reqwest::Method::DELETE, &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);
    let (status, _) = c
        .request(reqwest::Method::GET, &format!("/v1/sessions/{id}"), None)
        .await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_pending_reject_with_reason_and_accept() {
    let setup = Setup::new().await;
    let Setup { llm, ws, c, .. } = &setup;
    let id = c.create_session("slack: C1").await.id;
    let mut stream = c.subscribe(id, None).await;

    llm.push(MockReply::tool_call(
        "call_1",
        "run_command",
        json!({"command": "echo one > one.txt"}),
    ));
    llm.push(MockReply::tool_call(
        "call_2",
        "run_command",
        json!({"command": "echo two > two.txt"}),
    ));
    llm.push(MockReply::text(&["done"]));
    let run = run_id_of(&c.send_message(id, "make the files").await);

    let proposed = stream.until_proposed(run).await;
    assert_eq!(proposed.tool_calls.len(), 1);
    assert_eq!(proposed.tool_calls[0].id, "call_1");
    assert_eq!(proposed.tool_calls[0].name, "run_command");
    assert_eq!(
        proposed.tool_calls[0].arguments["command"],
        "echo one > one.txt"
    );
    let pending = wait_pending(c, id).await;
    assert_eq!(pending.run_id, Some(run));
    assert_eq!(pending.tool_calls[0].id, "call_1");

    // Reject with a reason (the gateway's Deny), exactly as that client writes it.
    let answer = c
        .resolve_tools(
            id,
            run,
            r#"{"call_1":{"action":"reject","content":"not on a Friday"}}"#,
        )
        .await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    // The reason reached the model with the call's result.
    let proposed = stream.until_proposed(run).await;
    assert_eq!(proposed.tool_calls[0].id, "call_2");
    let reqs = llm.chat_requests();
    assert!(
        reqs.last()
            .unwrap()
            .body
            .to_string()
            .contains("not on a Friday"),
        "the model saw the reason"
    );
    assert!(!ws.path().join("one.txt").exists());

    // Accept (the gateway's Allow: no content).
    wait_pending(c, id).await;
    let answer = c
        .resolve_tools(id, run, r#"{"call_2":{"action":"accept"}}"#)
        .await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    let rest = stream.until_terminal(run).await;
    assert_eq!(rest.last().unwrap().event_type, "run_completed");
    assert!(ws.path().join("two.txt").exists());
    // Nothing waits any more; a late decision is a conflict, which the gateway shows as
    // "approval expired".
    let pending = c.pending_tools(id).await;
    assert_eq!(pending.run_id, None);
    assert!(pending.tool_calls.is_empty());
    let late = c
        .resolve_tools(id, run, r#"{"call_2":{"action":"accept"}}"#)
        .await;
    assert_eq!(late.0, 409, "{}", late.1);
}

/// That client's gateway posts a decision for every call it sees proposed, and takes any
/// 409 for a failed run. A call the permission mode runs without asking (`view` is a read)
/// is decided by policy before that decision arrives: it is answered 200 with how it was
/// settled, as the stakpak server answers while the run is active — alone, and beside a
/// call that does wait (which the same request decides).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_on_a_call_policy_settled_is_answered_200() {
    use switchboard_test_support::mock_llm::MockToolCall;
    let setup = Setup::new().await;
    let Setup { llm, ws, c, .. } = &setup;
    std::fs::write(ws.path().join("notes.txt"), "hi\n").unwrap();
    let id = c.create_session("slack: C2").await.id;
    let mut stream = c.subscribe(id, None).await;
    // Turn 1: a read, run at once; the model's next answer takes a while, so the run is
    // still active when the client's decision comes.
    llm.push(MockReply::tool_call(
        "call_1",
        "view",
        json!({"path": "notes.txt"}),
    ));
    // Turn 2: a read and a command that waits.
    llm.push(MockReply::ToolCalls {
        text: None,
        calls: vec![
            MockToolCall::new("call_2", "view", json!({"path": "notes.txt"})),
            MockToolCall::new(
                "call_3",
                "run_command",
                json!({"command": "echo x > x.txt"}),
            ),
        ],
        delay_ms: 1500,
    });
    llm.push(MockReply::text(&["done"]));
    let run = run_id_of(&c.send_message(id, "look, then write").await);
    let proposed = stream.until_proposed(run).await;
    assert_eq!(proposed.tool_calls[0].id, "call_1");
    let answer = c
        .resolve_tools(id, run, r#"{"call_1":{"action":"accept"}}"#)
        .await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    let body: Value = serde_json::from_str(&answer.1).unwrap();
    assert_eq!(body["already_settled"]["call_1"], "allowed_by_policy");
    // Turn 2: the client decides both calls, one after the other, as it sees them.
    let proposed = stream.until_proposed(run).await;
    assert_eq!(proposed.tool_calls.len(), 2);
    wait_pending(c, id).await;
    let answer = c
        .resolve_tools(id, run, r#"{"call_2":{"action":"accept"}}"#)
        .await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    let answer = c
        .resolve_tools(id, run, r#"{"call_3":{"action":"accept"}}"#)
        .await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    // A repeat of a decision already taken: 200, nothing changes.
    let answer = c
        .resolve_tools(id, run, r#"{"call_3":{"action":"reject"}}"#)
        .await;
    assert!(
        answer.0 == 200 || answer.0 == 409,
        "200 while the run is active, 409 once it ended: {}",
        answer.1
    );
    let rest = stream.until_terminal(run).await;
    assert_eq!(rest.last().unwrap().event_type, "run_completed");
    assert!(ws.path().join("x.txt").exists(), "the accepted command ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_ends_the_run_as_the_stakpak_server_does() {
    let setup = Setup::new().await;
    let Setup { llm, ws, c, .. } = &setup;
    let id = c.create_session("discord: 7").await.id;
    let mut stream = c.subscribe(id, None).await;

    llm.push(MockReply::tool_call(
        "call_1",
        "run_command",
        json!({"command": "echo never > never.txt"}),
    ));
    let run = run_id_of(&c.send_message(id, "do something").await);
    stream.until_proposed(run).await;
    wait_pending(c, id).await;

    // A cancel for another run is refused.
    let wrong = c.cancel_run(id, Uuid::now_v7()).await;
    assert_eq!(wrong.0, 409, "{}", wrong.1);
    let answer = c.cancel_run(id, run).await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    let body: Value = serde_json::from_str(&answer.1).unwrap();
    assert_eq!(body, json!({"cancelled": true, "run_id": run}));

    // The stakpak server ends a cancelled run with `RunCompleted {stop_reason: "cancelled"}`
    // (agent-core's loop, not a RunError), after closing each call still waiting; the client's
    // run consumer ends on `run_completed` as for any finished run.
    let rest = stream.until_terminal(run).await;
    let last = rest.last().unwrap();
    assert_eq!(last.event_type, "run_completed", "{rest:?}");
    assert!(last.run_error().is_none());
    let payload = last.payload("RunCompleted").unwrap();
    assert_eq!(payload["stop_reason"], "cancelled");
    assert_eq!(
        last.run_completed().unwrap().stop_reason,
        StakpakStopReason::Cancelled
    );
    assert_eq!(payload["run_id"], run.to_string());
    assert!(payload["total_turns"].is_u64());
    assert!(payload["total_usage"].is_object());
    // The call that waited is closed before the end, and nothing ran.
    let closed = rest
        .iter()
        .position(|e| e.event_type == "tool_rejected")
        .expect("the waiting call is closed");
    assert!(closed < rest.len() - 1);
    assert!(!ws.path().join("never.txt").exists());
    let pending = c.pending_tools(id).await;
    assert_eq!(pending.run_id, None);

    // Idle at once: the next message starts a run (no 409 for the gateway to queue).
    llm.push(MockReply::text(&["fresh start"]));
    let next = run_id_of(&c.send_message(id, "again").await);
    let events = stream.until_terminal(next).await;
    assert_eq!(events.last().unwrap().event_type, "run_completed");
    let text: String = events.iter().filter_map(SseEvent::text_delta).collect();
    assert_eq!(text, "fresh start");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overrides_sandbox_and_context_as_that_client_sends_them() {
    let setup = Setup::new().await;
    let Setup { llm, ws, c, .. } = &setup;
    let id = c.create_session("telegram: bob").await.id;
    let mut stream = c.subscribe(id, None).await;

    // A channel with a model override: the client then sends top-level `model: null` and the
    // model inside `overrides`, with a system prompt and a turn limit; the context carries a
    // priority stakpak allows but Switchboard does not name.
    llm.push(MockReply::text(&["ok"]));
    let body = message_body(
        "status?",
        "message",
        "null",
        r#"[{"name":"watch","content":"disk 91% full","priority":"urgent"}]"#,
        r#"{"model":"override-model","system_prompt":"Answer in one word.","max_turns":4}"#,
    );
    let run = run_id_of(&c.send_raw(id, &body).await);
    stream.until_terminal(run).await;
    let req = llm.chat_requests().last().unwrap().body.clone();
    assert_eq!(req["model"], "override-model");
    assert_eq!(req["messages"][0]["role"], "system");
    assert_eq!(req["messages"][0]["content"], "Answer in one word.");
    let user = req["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        user.contains("disk 91% full") && user.ends_with("status?"),
        "{user}"
    );

    // Both models given: the overrides' one wins, as on the stakpak server.
    llm.push(MockReply::text(&["ok"]));
    let body = message_body(
        "again",
        "message",
        r#""top-level-model""#,
        "null",
        r#"{"model":"override-model-2"}"#,
    );
    let run = run_id_of(&c.send_raw(id, &body).await);
    stream.until_terminal(run).await;
    assert_eq!(
        llm.chat_requests().last().unwrap().body["model"],
        "override-model-2"
    );
    // Only the top-level one: it is used.
    llm.push(MockReply::text(&["ok"]));
    let body = message_body("once more", "message", r#""top-only""#, "null", "null");
    let run = run_id_of(&c.send_raw(id, &body).await);
    stream.until_terminal(run).await;
    assert_eq!(
        llm.chat_requests().last().unwrap().body["model"],
        "top-only"
    );

    // `auto_approve` in the overrides lets this run's command go without asking.
    llm.push(MockReply::tool_call(
        "call_a",
        "run_command",
        json!({"command": "echo auto > auto.txt"}),
    ));
    llm.push(MockReply::text(&["made it"]));
    let body = message_body(
        "make auto.txt",
        "message",
        "null",
        "null",
        r#"{"auto_approve":["run_command"]}"#,
    );
    let run = run_id_of(&c.send_raw(id, &body).await);
    let events = stream.until_terminal(run).await;
    assert!(
        !events
            .iter()
            .any(|e| e.event_type == "waiting_for_tool_approval"),
        "{events:?}"
    );
    assert!(ws.path().join("auto.txt").exists());

    // `sandbox: true` is accepted: this server confines the built-in agent's commands
    // (tests/sandbox.rs shows what that keeps out, and the refusal where it cannot).
    llm.push(MockReply::text(&["confined"]));
    let body = r#"{"message":{"role":"user","content":"rm -rf build"},"type":"message","run_id":null,"model":null,"sandbox":true,"context":null,"overrides":null}"#;
    let run = run_id_of(&c.send_raw(id, body).await);
    stream.until_terminal(run).await;
    // `sandbox: false` is simply a run.
    llm.push(MockReply::text(&["fine"]));
    let body = r#"{"message":{"role":"user","content":"hi"},"type":"message","run_id":null,"model":null,"sandbox":false,"context":null,"overrides":null}"#;
    let run = run_id_of(&c.send_raw(id, body).await);
    stream.until_terminal(run).await;

    // Overrides out of range are named.
    let body = message_body("x", "message", "null", "null", r#"{"max_turns":0}"#);
    let (status, text) = c.send_raw(id, &body).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("overrides.max_turns"), "{text}");
    let body = message_body("x", "message", "null", "null", r#"{"turbo":true}"#);
    let (status, text) = c.send_raw(id, &body).await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("turbo"), "{text}");

    // A follow-up and a steering message with the same null-filled body.
    llm.push(MockReply::text_slow(&["a", "b", "c", "d"], 150));
    // The steering reaches the agent before its first step or after it (a second step),
    // depending on when it lands; every further model call answers "later".
    llm.set_default(MockReply::text(&["later"]));
    let run = run_id_of(&c.send_message(id, "long one").await);
    let body = message_body("then this", "follow_up", "null", "null", "null");
    let queued = run_id_of(&c.send_raw(id, &body).await);
    assert_ne!(queued, run);
    let body = format!(
        r#"{{"message":{{"role":"user","content":"shorter please"}},"type":"steering","run_id":"{run}","model":null,"sandbox":null,"context":null,"overrides":null}}"#
    );
    let steered = run_id_of(&c.send_raw(id, &body).await);
    assert_eq!(steered, run);
    let events = stream.until_terminal(run).await;
    let text: String = events.iter().filter_map(SseEvent::text_delta).collect();
    assert!(text == "abcd" || text == "abcdlater", "{text}");
    assert!(events.iter().any(|e| e.event_type == "steering_received"));
    assert!(
        llm.chat_requests()
            .iter()
            .any(|r| r.body.to_string().contains("shorter please")),
        "the agent saw the steering"
    );
    let events = stream.until_terminal(queued).await;
    let text: String = events.iter().filter_map(SseEvent::text_delta).collect();
    assert_eq!(text, "later");
    let last = llm.chat_requests().last().unwrap().body.to_string();
    assert!(last.contains("then this"), "the follow-up ran last");
}

/// Every JSON request body in the OpenAPI document, with every optional property `null`:
/// accepted, and documented as nullable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_optional_field_may_be_null_on_every_route() {
    let setup = Setup::new().await;
    let Setup { llm, c, .. } = &setup;
    let doc: Value = reqwest::get(format!("{}/openapi.json", c.base))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();

    let mut walk = NullWalk {
        doc: &doc,
        covered: HashSet::new(),
        nulled: Vec::new(),
        not_nullable: Vec::new(),
    };
    // In the order that builds the state each needs; the body is the smallest valid one.
    let (status, text) = walk
        .send(c, "post", "/v1/sessions", "/v1/sessions", json!({}))
        .await;
    assert_eq!(status, 201, "{text}");
    let id: Uuid = serde_json::from_str::<SessionResponse>(&text).unwrap().id;
    let (status, text) = walk
        .send(
            c,
            "patch",
            "/v1/sessions/{id}",
            &format!("/v1/sessions/{id}"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{text}");

    let mut stream = c.subscribe(id, None).await;
    llm.push(MockReply::tool_call(
        "call_1",
        "run_command",
        json!({"command": "true"}),
    ));
    llm.push(MockReply::tool_call(
        "call_2",
        "run_command",
        json!({"command": "true"}),
    ));
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/sessions/{id}/messages",
            &format!("/v1/sessions/{id}/messages"),
            json!({"message": {"role": "user", "content": "go"},
                   "context": [{"name": "n", "content": "c"}]}),
        )
        .await;
    let run = run_id_of(&(status, text));
    stream.until_proposed(run).await;
    wait_pending(c, id).await;
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/sessions/{id}/tools/decisions",
            &format!("/v1/sessions/{id}/tools/decisions"),
            json!({"run_id": run, "decisions": {"call_1": {"action": "reject"}}}),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    stream.until_proposed(run).await;
    wait_pending(c, id).await;
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/sessions/{id}/cancel",
            &format!("/v1/sessions/{id}/cancel"),
            json!({"run_id": run}),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    stream.until_terminal(run).await;
    // The message again with nothing but the message: now `context` itself is `null`.
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/sessions/{id}/messages",
            &format!("/v1/sessions/{id}/messages"),
            json!({"message": {"role": "user", "content": "go on"}}),
        )
        .await;
    let run = run_id_of(&(status, text));
    stream.until_terminal(run).await;

    // A share with its options null: read, then refused for want of a running turn.
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/sessions/{id}/share",
            &format!("/v1/sessions/{id}/share"),
            json!({"path": "notes.txt"}),
        )
        .await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("session_not_running"), "{text}");

    // The OpenAI-compatible door, its options null: read, then an unknown model.
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/chat/completions",
            "/v1/chat/completions",
            json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("model_not_found"), "{text}");

    // The relay's send: the body is read (its nulls taken as absent) before the bundle is
    // looked up, so an unknown bundle answers 404, not 400.
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/relay/bundles/{bundle}/send",
            "/v1/relay/bundles/nope/send",
            json!({"sender": "a", "message": "hi", "targets": ["b"]}),
        )
        .await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("bundle_not_found"), "{text}");
    // Schedules: made with every option null, then changed with every field null (a no-op).
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/schedules",
            "/v1/schedules",
            json!({"every": "1h", "prompt": "check CI"}),
        )
        .await;
    assert_eq!(status, 201, "{text}");
    let schedule: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(schedule["spec"]["approvals"], "deny", "{text}");
    let sid = schedule["id"].as_str().unwrap().to_string();
    let (status, text) = walk
        .send(
            c,
            "patch",
            "/v1/schedules/{id}",
            &format!("/v1/schedules/{sid}"),
            json!({}),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    // The settings: the body is read (its nulls taken as absent) before the server says that
    // its configuration (`/dev/null` here) cannot be written: 409, not 400.
    let (status, text) = walk
        .send(c, "put", "/v1/settings", "/v1/settings", json!({}))
        .await;
    assert_eq!(status, 409, "{text}");
    assert!(text.contains("settings_read_only"), "{text}");
    // A team: a user, changed, their token, a chat account linked.
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/users",
            "/v1/users",
            json!({"name": "nully", "role": "member"}),
        )
        .await;
    assert_eq!(status, 201, "{text}");
    let (status, text) = walk
        .send(c, "patch", "/v1/users/{name}", "/v1/users/nully", json!({}))
        .await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/tokens",
            "/v1/tokens",
            json!({"user": "nully", "name": "n", "scopes": ["sessions:read"]}),
        )
        .await;
    assert_eq!(status, 201, "{text}");
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/links",
            "/v1/links",
            json!({"platform": "telegram", "user_id": "7", "user": "nully"}),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    // A budget made over the API.
    let (status, text) = walk
        .send(
            c,
            "put",
            "/v1/budgets/{name}",
            "/v1/budgets/nully",
            json!({"name": "nully", "scope": "global", "window": "day", "limit_usd": 5}),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    // The console's sign-in.
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/console/login",
            "/v1/console/login",
            json!({"token": TOKEN}),
        )
        .await;
    assert_eq!(status, 204, "{text}");

    // The protocol endpoints: their bodies are JSON-RPC messages (no optional fields of
    // ours); each answers in its own way.
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/acp",
            "/v1/acp",
            json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/a2a",
            "/v1/a2a",
            json!({"jsonrpc": "2.0", "id": "1", "method": "GetTask", "params": {"id": "none"}}),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("-32001"), "{text}");
    // (MCP's transport wants `Accept` naming JSON and an event stream: this client sends none.)
    let (status, text) = walk
        .send(
            c,
            "post",
            "/v1/mcp",
            "/v1/mcp",
            json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        )
        .await;
    assert_eq!(status, 406, "{text}");

    // Every operation with a JSON body was walked (a new one needs its line above).
    let mut with_body = HashSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if op["requestBody"]["content"]["application/json"].is_object() {
                with_body.insert(format!("{method} {path}"));
            }
        }
    }
    assert_eq!(walk.covered, with_body, "operations walked vs documented");
    assert!(
        walk.not_nullable.is_empty(),
        "optional but not nullable in the document: {:?}",
        walk.not_nullable
    );
    // The walk did set the fields of the stakpak client's message body, nested ones too.
    for field in [
        "/v1/sessions/{id}/messages: type",
        "/v1/sessions/{id}/messages: run_id",
        "/v1/sessions/{id}/messages: model",
        "/v1/sessions/{id}/messages: sandbox",
        "/v1/sessions/{id}/messages: overrides",
        "/v1/sessions/{id}/messages: context[0].priority",
        "/v1/sessions/{id}/messages: context",
        "/v1/sessions: title",
        "/v1/sessions: cwd",
        "/v1/sessions/{id}/tools/decisions: decisions.call_1.content",
    ] {
        assert!(
            walk.nulled.iter().any(|n| n == field),
            "{field} not walked: {:?}",
            walk.nulled
        );
    }
}

struct NullWalk<'a> {
    doc: &'a Value,
    covered: HashSet<String>,
    /// `"<path>: <field>"` of every property set to `null`.
    nulled: Vec<String>,
    not_nullable: Vec<String>,
}

impl NullWalk<'_> {
    /// Sends `body` to `method url` with every optional property of the documented schema
    /// that the body leaves out set to `null`.
    async fn send(
        &mut self,
        c: &StakClient,
        method: &str,
        path: &str,
        url: &str,
        mut body: Value,
    ) -> (u16, String) {
        let op = &self.doc["paths"][path][method];
        let schema = op["requestBody"]["content"]["application/json"]["schema"].clone();
        assert!(
            schema.is_object(),
            "{method} {path} has no documented JSON body"
        );
        self.nullify(path, &schema, &mut body, "");
        self.covered.insert(format!("{method} {path}"));
        let m = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
        c.request(m, url, Some(&body.to_string())).await
    }

    fn resolve<'s>(&'s self, mut s: &'s Value) -> &'s Value {
        while let Some(r) = s["$ref"].as_str() {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            s = &self.doc["components"]["schemas"][name];
        }
        s
    }

    /// The object (or array) branch of a schema that may be `oneOf [null, X]`.
    fn concrete<'s>(&'s self, s: &'s Value) -> &'s Value {
        let s = self.resolve(s);
        for key in ["oneOf", "anyOf", "allOf"] {
            if let Some(branches) = s[key].as_array() {
                for b in branches {
                    let b = self.resolve(b);
                    if b["type"] != "null" {
                        return self.concrete(b);
                    }
                }
            }
        }
        s
    }

    fn allows_null(&self, s: &Value) -> bool {
        let s = self.resolve(s);
        s["type"] == "null"
            || s["type"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "null"))
            || s["nullable"] == true
            || ["oneOf", "anyOf"].iter().any(|k| {
                s[*k]
                    .as_array()
                    .is_some_and(|b| b.iter().any(|b| self.allows_null(b)))
            })
    }

    fn nullify(&mut self, path: &str, schema: &Value, value: &mut Value, at: &str) {
        let schema = self.concrete(schema).clone();
        match value {
            Value::Object(map) => {
                let required: HashSet<String> = schema["required"]
                    .as_array()
                    .map(|r| {
                        r.iter()
                            .filter_map(|v| v.as_str().map(str::to_string))
                            .collect()
                    })
                    .unwrap_or_default();
                if let Some(props) = schema["properties"].as_object() {
                    for (name, prop) in props {
                        let here = if at.is_empty() {
                            name.clone()
                        } else {
                            format!("{at}.{name}")
                        };
                        if let Some(v) = map.get_mut(name) {
                            self.nullify(path, prop, v, &here);
                        } else if !required.contains(name) {
                            if !self.allows_null(prop) {
                                self.not_nullable.push(format!("{path}: {here}"));
                            }
                            map.insert(name.clone(), Value::Null);
                            self.nulled.push(format!("{path}: {here}"));
                        }
                    }
                } else if schema["additionalProperties"].is_object() {
                    let each = schema["additionalProperties"].clone();
                    for (k, v) in map.iter_mut() {
                        self.nullify(path, &each, v, &format!("{at}.{k}"));
                    }
                }
            }
            Value::Array(items) => {
                let each = schema["items"].clone();
                for (i, v) in items.iter_mut().enumerate() {
                    self.nullify(path, &each, v, &format!("{at}[{i}]"));
                }
            }
            _ => {}
        }
    }
}

async fn wait_pending(c: &StakClient, id: Uuid) -> PendingToolsResponse {
    for _ in 0..200 {
        let p = c.pending_tools(id).await;
        if !p.tool_calls.is_empty() {
            return p;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no tool call became pending");
}

fn to_snake(pascal: &str) -> String {
    let mut out = String::new();
    for (i, ch) in pascal.chars().enumerate() {
        if ch.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(ch.to_ascii_lowercase());
        } else {
            out.push(ch);
        }
    }
    out
}
