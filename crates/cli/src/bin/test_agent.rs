//! `switchboard-test-agent`: a scriptable ACP agent for Switchboard's end-to-end tests.
//!
//! It speaks the agent side of the Agent Client Protocol (newline-delimited JSON-RPC over
//! stdio). Behaviour is driven by environment variables and by markers in the prompt text:
//!
//! Environment (all optional):
//! - `TEST_AGENT_LOG=/path`: append one line per notable event (see [`Shared::log`]).
//! - `TEST_AGENT_STATE_DIR=/dir`: persist sessions as `<dir>/<session_id>`, one prompt a line.
//! - `TEST_AGENT_NO_LOAD=1`: advertise `loadSession: false` and refuse `session/load`.
//! - `TEST_AGENT_FAIL_INIT=1`: answer `initialize` with an error.
//! - `TEST_AGENT_EXIT_AT_ONCE=1`: exit with status 1 before reading anything.
//! - `TEST_AGENT_PROMPT_CAPS=image,audio,embedded_context`: the prompt capabilities it
//!   advertises (default none: text and resource links only). Every non-text block of a
//!   prompt is logged as `block KIND mime=… uri=… bytes=…`.
//!
//! Prompt markers (may combine; processed in this order): `[think]`, `[plan]`, `[tool]`,
//! `[edit]`, `[slow]`, `[crash]`, `[write:NAME]`, `[share:PATH]`, `[calc]`, `[probe-token:SESSION]`, `[count]`, `[refuse]`, `[error]`.
//! `[share:PATH]` calls `send_file {path: PATH}` on the `switchboard` MCP server the session
//! was opened with (a real MCP client over stdio) and says the outcome; every session's
//! `mcpServers` are logged as `mcp_servers SESSION NAME(stdio),…`. `[probe-token:SESSION]`
//! tries that server's session token on other routes and logs the statuses. Without any marker other
//! than `[think]`/`[plan]` the agent streams "Hello from the test agent".

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, Content, ContentBlock, ContentChunk,
    EmbeddedResourceResource, Implementation, InitializeRequest, InitializeResponse,
    LoadSessionRequest, LoadSessionResponse, McpServer, NewSessionRequest, NewSessionResponse,
    PermissionOption, PermissionOptionKind, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    PromptCapabilities, PromptRequest, PromptResponse, RequestPermissionOutcome,
    RequestPermissionRequest, SessionId, SessionNotification, SessionUpdate, StopReason, ToolCall,
    ToolCallContent, ToolCallLocation, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields,
    ToolKind,
};
use agent_client_protocol::{Agent, ByteStreams, Client, Error, ErrorCode, v1};
use serde_json::json;
use tokio::sync::watch;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// The chunk sent by `[crash]`; the stdout wrapper watches for it to know it reached the pipe.
const CRASH_TEXT: &str = "about to crash";

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Keeps a logged or stored text on one line.
fn one_line(text: &str) -> String {
    text.replace('\r', "\\r").replace('\n', "\\n")
}

/// Tells the `[crash]` path when its last chunk has been flushed to stdout.
struct CrashWatch {
    armed: AtomicBool,
    flushed: watch::Sender<bool>,
}

/// Stdout wrapper that reports when a line containing [`CRASH_TEXT`] has been flushed.
struct WatchedStdout<W> {
    inner: W,
    crash: Arc<CrashWatch>,
}

impl<W: futures::AsyncWrite + Unpin> futures::AsyncWrite for WatchedStdout<W> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if memchr::memmem::find(buf, CRASH_TEXT.as_bytes()).is_some() {
            this.crash.armed.store(true, Ordering::SeqCst);
        }
        Pin::new(&mut this.inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let result = futures::ready!(Pin::new(&mut this.inner).poll_flush(cx));
        if result.is_ok() && this.crash.armed.load(Ordering::SeqCst) {
            this.crash.flushed.send_replace(true);
        }
        Poll::Ready(result)
    }

    fn poll_close(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_close(cx)
    }
}

/// State shared by all handlers and prompt turns.
struct Shared {
    log: Option<Mutex<File>>,
    state_dir: Option<PathBuf>,
    no_load: bool,
    fail_init: bool,
    tool_counter: AtomicU64,
    /// In-memory prompt history per session (used when there is no state dir).
    history: Mutex<HashMap<String, Vec<String>>>,
    /// Cancel flag of each session's current (or last) turn.
    cancels: Mutex<HashMap<String, watch::Sender<bool>>>,
    crash: Arc<CrashWatch>,
    /// The `mcpServers` each session was opened with (`session/new` or `session/load`).
    mcp: Mutex<HashMap<String, Vec<McpServer>>>,
}

impl Shared {
    /// Keeps a session's MCP servers and logs them: `mcp_servers NAME,NAME` (or `none`).
    fn set_mcp(&self, session: &str, servers: Vec<McpServer>) {
        let names: Vec<String> = servers
            .iter()
            .map(|s| match s {
                McpServer::Stdio(s) => format!("{}(stdio)", s.name),
                McpServer::Http(s) => format!("{}(http)", s.name),
                McpServer::Sse(s) => format!("{}(sse)", s.name),
                _ => "other".into(),
            })
            .collect();
        let names = if names.is_empty() {
            "none".into()
        } else {
            names.join(",")
        };
        self.log(&format!("mcp_servers {session} {names}"));
        lock(&self.mcp).insert(session.to_owned(), servers);
    }

    /// Appends one line to `TEST_AGENT_LOG`, flushed at once.
    fn log(&self, line: &str) {
        if let Some(file) = &self.log {
            let mut file = lock(file);
            let written = writeln!(file, "{line}").and_then(|()| file.flush());
            if let Err(e) = written {
                eprintln!("test agent: cannot write log: {e}");
            }
        }
    }

    fn state_file(&self, session: &str) -> Option<PathBuf> {
        let dir = self.state_dir.as_ref()?;
        // Refuse ids that could escape the state dir.
        if session.is_empty() || session.contains(['/', '\\']) || session.starts_with('.') {
            return None;
        }
        Some(dir.join(session))
    }

    /// Records a new, empty session.
    fn create_session(&self, session: &str) -> Result<(), Error> {
        lock(&self.history).insert(session.to_owned(), Vec::new());
        if let Some(dir) = &self.state_dir {
            std::fs::create_dir_all(dir).map_err(Error::into_internal_error)?;
            if let Some(path) = self.state_file(session) {
                File::create(path).map_err(Error::into_internal_error)?;
            }
        }
        Ok(())
    }

    /// The stored prompts of a session, or `None` when the session is unknown.
    fn load_history(&self, session: &str) -> Option<Vec<String>> {
        if self.state_dir.is_some() {
            let path = self.state_file(session)?;
            let text = std::fs::read_to_string(path).ok()?;
            return Some(text.lines().map(str::to_owned).collect());
        }
        lock(&self.history).get(session).cloned()
    }

    /// Appends a prompt to the session's history; returns the number of prompts so far.
    fn record_prompt(&self, session: &str, text: &str) -> Result<usize, Error> {
        let line = one_line(text);
        let in_memory = {
            let mut history = lock(&self.history);
            let prompts = history.entry(session.to_owned()).or_default();
            prompts.push(line.clone());
            prompts.len()
        };
        match self.state_file(session) {
            Some(path) => {
                let mut file = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(Error::into_internal_error)?;
                writeln!(file, "{line}").map_err(Error::into_internal_error)?;
                Ok(count_lines(&path))
            }
            None => Ok(in_memory),
        }
    }

    /// Arms a fresh cancel flag for a new turn of `session`.
    fn start_turn(&self, session: &str) -> watch::Receiver<bool> {
        let (tx, rx) = watch::channel(false);
        lock(&self.cancels).insert(session.to_owned(), tx);
        rx
    }

    fn cancel(&self, session: &str) {
        if let Some(tx) = lock(&self.cancels).get(session) {
            tx.send_replace(true);
        }
    }
}

fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// Resolves once the turn is cancelled; never resolves if the flag can no longer change.
async fn cancelled(rx: &mut watch::Receiver<bool>) {
    let fired = rx.wait_for(|c| *c).await.is_ok();
    if !fired {
        std::future::pending::<()>().await;
    }
}

/// How a scripted step ended.
enum Flow {
    Continue,
    Cancelled,
}

/// One prompt turn.
struct Turn {
    cx: v1::ConnectionTo<Client>,
    shared: Arc<Shared>,
    session: SessionId,
    cancel: watch::Receiver<bool>,
}

impl Turn {
    fn update(&self, update: SessionUpdate) -> Result<(), Error> {
        self.cx
            .send_notification(SessionNotification::new(self.session.clone(), update))
    }

    fn say(&self, text: &str) -> Result<(), Error> {
        self.update(SessionUpdate::AgentMessageChunk(ContentChunk::new(
            text.into(),
        )))
    }

    fn is_cancelled(&self) -> bool {
        *self.cancel.borrow()
    }

    /// Reports a tool call, asks permission, and settles it.
    async fn tool(
        &mut self,
        kind: ToolKind,
        title: &str,
        raw_input: serde_json::Value,
        noun: &str,
        locations: Vec<PathBuf>,
        crash_after_ms: Option<u64>,
    ) -> Result<Flow, Error> {
        let n = self.shared.tool_counter.fetch_add(1, Ordering::SeqCst) + 1;
        let id = format!("tool-{n}");
        let locs: Vec<ToolCallLocation> =
            locations.into_iter().map(ToolCallLocation::new).collect();
        self.update(SessionUpdate::ToolCall(
            ToolCall::new(id.clone(), title)
                .kind(kind)
                .status(ToolCallStatus::Pending)
                .locations(locs.clone())
                .raw_input(raw_input.clone()),
        ))?;
        let request = RequestPermissionRequest::new(
            self.session.clone(),
            ToolCallUpdate::new(
                id.clone(),
                ToolCallUpdateFields::new()
                    .title(title.to_owned())
                    .kind(kind)
                    .locations(locs)
                    .raw_input(raw_input),
            ),
            vec![
                PermissionOption::new("allow-once", "Allow", PermissionOptionKind::AllowOnce),
                PermissionOption::new(
                    "allow-always",
                    "Always allow",
                    PermissionOptionKind::AllowAlways,
                ),
                PermissionOption::new("reject-once", "Reject", PermissionOptionKind::RejectOnce),
            ],
        );
        let answer = self.cx.send_request(request).block_task();
        tokio::pin!(answer);
        if let Some(ms) = crash_after_ms {
            // Dies while its permission request waits.
            tokio::select! {
                _ = &mut answer => {}
                () = tokio::time::sleep(Duration::from_millis(ms)) => {}
            }
            eprintln!("test agent crashing while a permission request waits (exit 4)");
            std::process::exit(4);
        }
        // A cancel does not abandon the request: the client still owes it an answer
        // (normally `cancelled`), so keep waiting for it and then end the turn.
        let mut was_cancelled = false;
        let answer = tokio::select! {
            answer = &mut answer => answer,
            () = cancelled(&mut self.cancel) => {
                was_cancelled = true;
                answer.await
            }
        };
        let outcome = match answer {
            Ok(response) => response.outcome,
            Err(e) => {
                self.shared
                    .log(&format!("permission_error {}", one_line(&e.message)));
                return if was_cancelled || self.is_cancelled() {
                    Ok(Flow::Cancelled)
                } else {
                    Err(e)
                };
            }
        };
        let allowed = match &outcome {
            RequestPermissionOutcome::Selected(selected) => {
                let option = selected.option_id.to_string();
                self.shared.log(&format!("permission_outcome {option}"));
                option == "allow-once" || option == "allow-always"
            }
            RequestPermissionOutcome::Cancelled => {
                self.shared.log("permission_outcome cancelled");
                return Ok(Flow::Cancelled);
            }
            _ => {
                self.shared.log("permission_outcome unknown");
                false
            }
        };
        if was_cancelled || self.is_cancelled() {
            return Ok(Flow::Cancelled);
        }
        let (status, content, reply) = if allowed {
            (ToolCallStatus::Completed, "hi", format!("The {noun} ran."))
        } else {
            (
                ToolCallStatus::Failed,
                "rejected by the client",
                format!("The {noun} was rejected."),
            )
        };
        self.update(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
            id,
            ToolCallUpdateFields::new()
                .status(status)
                .content(vec![ToolCallContent::Content(Content::new(content))]),
        )))?;
        self.say(&reply)?;
        Ok(Flow::Continue)
    }

    /// Streams 60 "tick " chunks 100 ms apart, stopping on cancel.
    async fn slow(&mut self) -> Result<Flow, Error> {
        for _ in 0..60 {
            if self.is_cancelled() {
                return Ok(Flow::Cancelled);
            }
            self.say("tick ")?;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
                () = cancelled(&mut self.cancel) => return Ok(Flow::Cancelled),
            }
        }
        Ok(Flow::Continue)
    }

    /// Sends one chunk, waits until it reached stdout, then exits with status 3.
    async fn crash(&self) -> Result<(), Error> {
        let crash = &self.shared.crash;
        crash.armed.store(false, Ordering::SeqCst);
        crash.flushed.send_replace(false);
        let mut flushed = crash.flushed.subscribe();
        self.say(CRASH_TEXT)?;
        let waited = tokio::time::timeout(Duration::from_secs(5), flushed.wait_for(|f| *f))
            .await
            .is_ok();
        if !waited {
            eprintln!("test agent: crash chunk not flushed in time");
        }
        eprintln!("test agent crashing on purpose (exit 3)");
        std::process::exit(3);
    }

    async fn run(&mut self, text: &str, count: usize) -> Result<PromptResponse, Error> {
        let has = |marker: &str| text.contains(marker);
        let cancelled_response = || Ok(PromptResponse::new(StopReason::Cancelled));

        if has("[think]") {
            self.update(SessionUpdate::AgentThoughtChunk(ContentChunk::new(
                "pondering".into(),
            )))?;
        }
        if has("[plan]") {
            self.update(SessionUpdate::Plan(Plan::new(vec![
                PlanEntry::new(
                    "read the code",
                    PlanEntryPriority::High,
                    PlanEntryStatus::InProgress,
                ),
                PlanEntry::new(
                    "write the fix",
                    PlanEntryPriority::Medium,
                    PlanEntryStatus::Pending,
                ),
            ])))?;
        }
        if self.is_cancelled() {
            return cancelled_response();
        }
        let mut scripted = false;
        if has("[tool]") || has("[tool-crash]") {
            scripted = true;
            let flow = self
                .tool(
                    ToolKind::Execute,
                    "Run echo hi",
                    json!({"command": "echo hi"}),
                    "tool",
                    Vec::new(),
                    has("[tool-crash]").then_some(300),
                )
                .await?;
            if let Flow::Cancelled = flow {
                return cancelled_response();
            }
        }
        if has("[edit]") {
            scripted = true;
            let here = std::env::current_dir().unwrap_or_default();
            let flow = self
                .tool(
                    ToolKind::Edit,
                    "Edit notes.txt",
                    json!({"path": "notes.txt"}),
                    "edit",
                    vec![here.join("notes.txt")],
                    None,
                )
                .await?;
            if let Flow::Cancelled = flow {
                return cancelled_response();
            }
        }
        if has("[edit-outside]") {
            scripted = true;
            let flow = self
                .tool(
                    ToolKind::Edit,
                    "Edit /etc/hosts",
                    json!({"path": "/etc/hosts"}),
                    "edit",
                    vec![PathBuf::from("/etc/hosts")],
                    None,
                )
                .await?;
            if let Flow::Cancelled = flow {
                return cancelled_response();
            }
        }
        if has("[stubborn]") {
            // Ignores session/cancel.
            scripted = true;
            self.shared.log("stubborn");
            for _ in 0..300 {
                self.say("tock ")?;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        if has("[slow]") {
            scripted = true;
            if let Flow::Cancelled = self.slow().await? {
                return cancelled_response();
            }
        }
        if has("[crash]") {
            self.crash().await?;
        }
        if let Some(name) = marker_arg(text, "[write:") {
            // Straight to disk, as agents with their own file tools do (no permission asked).
            scripted = true;
            let path = std::env::current_dir().unwrap_or_default().join(&name);
            match std::fs::write(&path, "written by the test agent\n") {
                Ok(()) => self.say(&format!("wrote {name}"))?,
                Err(e) => self.say(&format!("could not write {name}: {e}"))?,
            }
        }
        if let Some(path) = marker_arg(text, "[share:") {
            scripted = true;
            let servers = lock(&self.shared.mcp)
                .get(&self.session.to_string())
                .cloned()
                .unwrap_or_default();
            let answer = match mcp_send_file(&servers, &path).await {
                Ok((true, text)) => {
                    self.shared
                        .log(&format!("mcp send_file error {}", one_line(&text)));
                    format!("send_file failed: {text}")
                }
                Ok((false, text)) => {
                    self.shared.log("mcp send_file ok");
                    format!("sent {path}: {text}")
                }
                Err(e) => {
                    self.shared.log(&format!("mcp failed {}", one_line(&e)));
                    format!("MCP failed: {e}")
                }
            };
            self.say(&answer)?;
        }
        if has("[calc]") {
            // The session's own MCP server `calc` (tests/mcp_test_server.py): 40 + 2.
            scripted = true;
            let servers = lock(&self.shared.mcp)
                .get(&self.session.to_string())
                .cloned()
                .unwrap_or_default();
            let answer = match mcp_call(&servers, "calc", "add", json!({"a": 40, "b": 2})).await {
                Ok((false, text)) => format!("calc says {text}"),
                Ok((true, text)) => format!("calc failed: {text}"),
                Err(e) => format!("MCP failed: {e}"),
            };
            self.say(&answer)?;
        }
        if let Some(other) = marker_arg(text, "[probe-token:") {
            scripted = true;
            let servers = lock(&self.shared.mcp)
                .get(&self.session.to_string())
                .cloned()
                .unwrap_or_default();
            let line = match probe_token(&servers, &other).await {
                Ok(line) => line,
                Err(e) => format!("probe failed {e}"),
            };
            self.shared.log(&line);
            self.say(&line)?;
        }
        if has("[count]") {
            scripted = true;
            self.say(&format!("seen {count} prompts"))?;
        }
        if has("[refuse]") {
            return Ok(PromptResponse::new(StopReason::Refusal));
        }
        if has("[error]") {
            return Err(Error::new(ErrorCode::INTERNAL_ERROR, "scripted failure"));
        }
        if !scripted {
            for chunk in ["Hello", " from", " the test agent"] {
                self.say(chunk)?;
            }
        }
        if self.is_cancelled() {
            return cancelled_response();
        }
        Ok(PromptResponse::new(StopReason::EndTurn))
    }
}

fn prompt_text(req: &PromptRequest) -> String {
    req.prompt
        .iter()
        .filter_map(|block| match block {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect()
}

/// The text after `marker` up to the next `]`: `[share:out.png]` → `out.png`.
fn marker_arg(text: &str, marker: &str) -> Option<String> {
    let rest = &text[text.find(marker)? + marker.len()..];
    Some(rest[..rest.find(']')?].trim().to_owned())
}

/// One MCP client connection over a child's stdio (newline-delimited JSON-RPC).
struct McpPipe {
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    next_id: u64,
}

impl McpPipe {
    async fn write(&mut self, msg: serde_json::Value) -> Result<(), String> {
        use tokio::io::AsyncWriteExt as _;
        self.stdin
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .map_err(|e| format!("writing to the MCP server: {e}"))
    }

    /// A request, and its answer's `result` (other messages in between are skipped).
    async fn call(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        self.write(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await?;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(20), self.lines.next_line())
                .await
                .map_err(|_| format!("no answer to {method}"))?
                .map_err(|e| format!("reading: {e}"))?
                .ok_or_else(|| format!("the MCP server exited before answering {method}"))?;
            let v: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("bad JSON {line:?}: {e}"))?;
            if v["id"] == json!(id) {
                if let Some(err) = v.get("error") {
                    return Err(format!("{method}: {err}"));
                }
                return Ok(v["result"].clone());
            }
        }
    }
}

/// Calls `send_file {path}` on the session's `switchboard` MCP server the way an MCP client
/// does: spawns it as `mcpServers` says, `initialize`, `notifications/initialized`,
/// `tools/list`, `tools/call`. Returns whether the result is an error, and its text followed
/// by the tools listed (`[tools send_file]`).
async fn mcp_send_file(servers: &[McpServer], path: &str) -> Result<(bool, String), String> {
    mcp_call(
        servers,
        "switchboard",
        "send_file",
        json!({"path": path, "caption": "from the test agent"}),
    )
    .await
}

/// Calls `tool` of the stdio MCP server named `name` in `servers` (see [`mcp_send_file`]).
async fn mcp_call(
    servers: &[McpServer],
    name: &str,
    tool: &str,
    arguments: serde_json::Value,
) -> Result<(bool, String), String> {
    use tokio::io::AsyncBufReadExt as _;
    let Some(server) = servers.iter().find_map(|s| match s {
        McpServer::Stdio(s) if s.name == name => Some(s),
        _ => None,
    }) else {
        return Err(format!("no `{name}` MCP server was given in mcpServers"));
    };
    let mut child = tokio::process::Command::new(&server.command)
        .args(&server.args)
        .envs(server.env.iter().map(|e| (e.name.clone(), e.value.clone())))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("spawning {}: {e}", server.command.display()))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("no pipes to the MCP server".into());
    };
    let mut mcp = McpPipe {
        stdin,
        lines: tokio::io::BufReader::new(stdout).lines(),
        next_id: 0,
    };
    mcp.call(
        "initialize",
        json!({"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "switchboard-test-agent", "version": "0"}}),
    )
    .await?;
    mcp.write(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await?;
    let listed = mcp.call("tools/list", json!({})).await?;
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default();
    let names = names.join(",");
    let result = mcp
        .call("tools/call", json!({"name": tool, "arguments": arguments}))
        .await?;
    let _ = child.kill().await;
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let text = result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Ok((is_error, format!("{text} [tools {names}]")))
}

/// What an agent holding its session token could try beyond sharing into its own session:
/// list every session, share into `other`. Raw HTTP/1.1 over TCP to the URL the MCP server
/// was given; logs `probe list=STATUS other_share=STATUS`.
async fn probe_token(servers: &[McpServer], other: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let Some(server) = servers.iter().find_map(|s| match s {
        McpServer::Stdio(s) if s.name == "switchboard" => Some(s),
        _ => None,
    }) else {
        return Err("no `switchboard` MCP server".into());
    };
    let var = |name: &str| {
        server
            .env
            .iter()
            .find(|e| e.name == name)
            .map(|e| e.value.clone())
            .ok_or_else(|| format!("the MCP server has no {name}"))
    };
    let (url, token) = (var("SWITCHBOARD_URL")?, var("SWITCHBOARD_SESSION_TOKEN")?);
    let host = url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let status = async |method: &str, path: &str, body: &str| -> Result<String, String> {
        let mut tcp = tokio::net::TcpStream::connect(&host)
            .await
            .map_err(|e| format!("connect {host}: {e}"))?;
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        tcp.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = String::new();
        tcp.read_to_string(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        Ok(answer.split(' ').nth(1).unwrap_or("?").to_owned())
    };
    let list = status("GET", "/v1/sessions", "").await?;
    let share = status(
        "POST",
        &format!("/v1/sessions/{other}/share"),
        r#"{"path":"notes.txt"}"#,
    )
    .await?;
    Ok(format!("probe list={list} other_share={share}"))
}

/// `TEST_AGENT_PROMPT_CAPS` as capabilities.
fn prompt_caps() -> PromptCapabilities {
    let caps = std::env::var("TEST_AGENT_PROMPT_CAPS").unwrap_or_default();
    let has = |c: &str| caps.split(',').any(|x| x.trim() == c);
    PromptCapabilities::new()
        .image(has("image"))
        .audio(has("audio"))
        .embedded_context(has("embedded_context"))
}

/// A log line for a non-text prompt block: its kind, type, URI and decoded size.
fn block_line(block: &ContentBlock) -> Option<String> {
    use base64::Engine as _;
    let decoded = |b64: &str| {
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map(|b| b.len())
            .unwrap_or(0)
    };
    Some(match block {
        ContentBlock::Text(_) => return None,
        ContentBlock::Image(i) => format!(
            "block image mime={} uri={} bytes={}",
            i.mime_type,
            i.uri.as_deref().unwrap_or("-"),
            decoded(&i.data)
        ),
        ContentBlock::Audio(a) => format!(
            "block audio mime={} bytes={}",
            a.mime_type,
            decoded(&a.data)
        ),
        ContentBlock::ResourceLink(l) => format!(
            "block resource_link mime={} uri={} bytes={}",
            l.mime_type.as_deref().unwrap_or("-"),
            l.uri,
            l.size.unwrap_or(-1)
        ),
        ContentBlock::Resource(r) => match &r.resource {
            EmbeddedResourceResource::TextResourceContents(t) => format!(
                "block resource mime={} uri={} bytes={}",
                t.mime_type.as_deref().unwrap_or("-"),
                t.uri,
                t.text.len()
            ),
            EmbeddedResourceResource::BlobResourceContents(b) => format!(
                "block resource mime={} uri={} bytes={}",
                b.mime_type.as_deref().unwrap_or("-"),
                b.uri,
                decoded(&b.blob)
            ),
            _ => "block resource unknown".to_string(),
        },
        _ => "block unknown".to_string(),
    })
}

fn report(result: Result<(), Error>) {
    if let Err(e) = result {
        eprintln!("test agent: cannot send a response: {e:?}");
    }
}

fn handle_load(
    shared: &Shared,
    req: &LoadSessionRequest,
    cx: &v1::ConnectionTo<Client>,
) -> Result<LoadSessionResponse, Error> {
    let session = req.session_id.to_string();
    if shared.no_load {
        return Err(Error::new(
            ErrorCode::METHOD_NOT_FOUND,
            "session/load is not supported",
        ));
    }
    let Some(prompts) = shared.load_history(&session) else {
        return Err(Error::new(ErrorCode::INVALID_PARAMS, "unknown session"));
    };
    // Seed the in-memory history too, so `[count]` keeps counting without a state dir.
    lock(&shared.history)
        .entry(session)
        .or_insert_with(|| prompts.clone());
    for prompt in prompts {
        for update in [
            SessionUpdate::UserMessageChunk(ContentChunk::new(prompt.into())),
            SessionUpdate::AgentMessageChunk(ContentChunk::new("(earlier reply)".into())),
        ] {
            cx.send_notification(SessionNotification::new(req.session_id.clone(), update))?;
        }
    }
    Ok(LoadSessionResponse::new())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    eprintln!("test agent starting pid={}", std::process::id());
    if env_flag("TEST_AGENT_EXIT_AT_ONCE") {
        eprintln!("exiting at once");
        std::process::exit(1);
    }

    let log = match env_path("TEST_AGENT_LOG") {
        Some(path) => {
            let file = OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .map_err(|e| {
                    eprintln!("test agent: cannot open log {}: {e}", path.display());
                    Error::into_internal_error(e)
                })?;
            Some(Mutex::new(file))
        }
        None => None,
    };
    if let Some(file) = &log {
        let set = |k: &str| {
            if std::env::var_os(k).is_some() {
                "set"
            } else {
                "unset"
            }
        };
        let line = format!(
            "start pid={} cwd={} token={} openai={}\n",
            std::process::id(),
            std::env::current_dir().unwrap_or_default().display(),
            set("SWITCHBOARD_TOKEN"),
            set("OPENAI_API_KEY"),
        );
        let _ = lock(file).write_all(line.as_bytes());
    }
    let (flushed, _) = watch::channel(false);
    let crash = Arc::new(CrashWatch {
        armed: AtomicBool::new(false),
        flushed,
    });
    let shared = Arc::new(Shared {
        log,
        state_dir: env_path("TEST_AGENT_STATE_DIR"),
        no_load: env_flag("TEST_AGENT_NO_LOAD"),
        fail_init: env_flag("TEST_AGENT_FAIL_INIT"),
        tool_counter: AtomicU64::new(0),
        history: Mutex::new(HashMap::new()),
        cancels: Mutex::new(HashMap::new()),
        crash: crash.clone(),
        mcp: Mutex::new(HashMap::new()),
    });

    let stdout = WatchedStdout {
        inner: tokio::io::stdout().compat_write(),
        crash,
    };
    let transport = ByteStreams::new(stdout, tokio::io::stdin().compat());

    let (s_init, s_new, s_load, s_prompt, s_cancel) = (
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
        shared.clone(),
    );
    let result = Agent
        .v1()
        .name("switchboard-test-agent")
        .on_receive_request(
            async move |req: InitializeRequest,
                        responder: v1::Responder<InitializeResponse>,
                        _cx| {
                s_init.log("initialize");
                if s_init.fail_init {
                    report(responder.respond_with_error(Error::new(
                        ErrorCode::INTERNAL_ERROR,
                        "test agent refuses to initialize",
                    )));
                    return Ok(());
                }
                let version = req.protocol_version.min(ProtocolVersion::LATEST);
                report(
                    responder.respond(
                        InitializeResponse::new(version)
                            .agent_capabilities(
                                AgentCapabilities::new()
                                    .load_session(!s_init.no_load)
                                    .prompt_capabilities(prompt_caps()),
                            )
                            .agent_info(Implementation::new(
                                "switchboard-test-agent",
                                env!("CARGO_PKG_VERSION"),
                            )),
                    ),
                );
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: NewSessionRequest,
                        responder: v1::Responder<NewSessionResponse>,
                        _cx| {
                let id = format!("sess-{}", uuid::Uuid::new_v4().simple());
                s_new.log(&format!("new_session {id}"));
                s_new.set_mcp(&id, req.mcp_servers);
                let result = s_new
                    .create_session(&id)
                    .map(|()| NewSessionResponse::new(id));
                report(responder.respond_with_result(result));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: LoadSessionRequest,
                        responder: v1::Responder<LoadSessionResponse>,
                        cx: v1::ConnectionTo<Client>| {
                s_load.log(&format!("load_session {}", req.session_id));
                s_load.set_mcp(&req.session_id.to_string(), req.mcp_servers.clone());
                report(responder.respond_with_result(handle_load(&s_load, &req, &cx)));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: PromptRequest,
                        responder: v1::Responder<PromptResponse>,
                        cx: v1::ConnectionTo<Client>| {
                let session = req.session_id.to_string();
                let text = prompt_text(&req);
                s_prompt.log(&format!("prompt {session} {}", one_line(&text)));
                for block in &req.prompt {
                    if let Some(line) = block_line(block) {
                        s_prompt.log(&line);
                    }
                }
                let cancel = s_prompt.start_turn(&session);
                let count = match s_prompt.record_prompt(&session, &text) {
                    Ok(count) => count,
                    Err(e) => {
                        report(responder.respond_with_error(e));
                        return Ok(());
                    }
                };
                let mut turn = Turn {
                    cx: cx.clone(),
                    shared: s_prompt.clone(),
                    session: req.session_id,
                    cancel,
                };
                // The turn waits on the client (permission requests), so it must not run
                // inside this handler: spawn it and answer through the responder.
                cx.spawn(async move {
                    let result = turn.run(&text, count).await;
                    report(responder.respond_with_result(result));
                    Ok(())
                })
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |n: CancelNotification, _cx| {
                let session = n.session_id.to_string();
                s_cancel.log(&format!("cancel {session}"));
                s_cancel.cancel(&session);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_to(transport)
        .await;
    eprintln!("test agent exiting: {result:?}");
    result
}
