//! `switchboard-test-agent`: a scriptable ACP agent for Switchboard's end-to-end tests.
//!
//! It speaks the agent side of the Agent Client Protocol (newline-delimited JSON-RPC over
//! stdio). Behaviour is driven by environment variables and by markers in the prompt text:
//!
//! Environment (all optional):
//! - `TEST_AGENT_LOG=/path`: append one line per notable event (see [`Shared::log`]).
//! - `TEST_AGENT_STATE_DIR=/dir`: persist sessions as `<dir>/<session_id>`, one prompt a line.
//! - `TEST_AGENT_NO_LOAD=1`: advertise `loadSession: false` and refuse `session/load`.
//! - `TEST_AGENT_RESUME=1`: advertise and answer `session/resume` and `session/close`, and
//!   offer a `model` config option (see `lifecycle.rs`).
//! - `TEST_AGENT_FAIL_INIT=1`: answer `initialize` with an error.
//! - `TEST_AGENT_EXIT_AT_ONCE=1`: exit with status 1 before reading anything.
//! - `TEST_AGENT_PROMPT_CAPS=image,audio,embedded_context`: the prompt capabilities it
//!   advertises (default none: text and resource links only). Every non-text block of a
//!   prompt is logged as `block KIND mime=… uri=… bytes=…`.
//!
//! Prompt markers (may combine; processed in this order): `[think]`, `[plan]`, `[elicit]`
//! (question.rs), `[tool]`,
//! `[edit]`, `[slow]`, `[crash]`, `[write:NAME]`, `[read:PATH]`, `[share:PATH]`, `[recall:QUERY]` (`search_sessions` on the same server), `[calc]`, `[probe-token:SESSION]`, `[count]`, `[refuse]`, `[error]`.
//! `[share:PATH]` calls `send_file {path: PATH}` on the `switchboard` MCP server the session
//! was opened with (a real MCP client over stdio) and says the outcome; every session's
//! `mcpServers` are logged as `mcp_servers SESSION NAME(stdio),…`. `[probe-token:SESSION]`
//! tries that server's session token on other routes and logs the statuses. Without any marker other
//! than `[think]`/`[plan]` the agent streams "Hello from the test agent".

use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ContentBlock, ContentChunk, EmbeddedResourceResource,
    Implementation, InitializeRequest, InitializeResponse, LoadSessionRequest, LoadSessionResponse,
    McpServer, NewSessionRequest, NewSessionResponse, PromptCapabilities, PromptRequest,
    PromptResponse, SessionCapabilities, SessionCloseCapabilities, SessionNotification,
    SessionResumeCapabilities, SessionUpdate,
};
use agent_client_protocol::v1::schema::{
    CloseSessionRequest, CloseSessionResponse, ResumeSessionRequest, ResumeSessionResponse,
    SetSessionConfigOptionRequest, SetSessionConfigOptionResponse,
};
use agent_client_protocol::{Agent, ByteStreams, Client, Error, ErrorCode, v1};
use tokio::sync::watch;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

mod lifecycle;
mod mcp;
mod question;
mod turn;

use mcp::*;
use turn::*;

/// The chunk sent by `[crash]`; the stdout wrapper watches for it to know it reached the pipe.
pub(crate) const CRASH_TEXT: &str = "about to crash";

pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "0")
}

pub(crate) fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Keeps a logged or stored text on one line.
pub(crate) fn one_line(text: &str) -> String {
    text.replace('\r', "\\r").replace('\n', "\\n")
}

/// Tells the `[crash]` path when its last chunk has been flushed to stdout.
pub(crate) struct CrashWatch {
    pub(crate) armed: AtomicBool,
    pub(crate) flushed: watch::Sender<bool>,
}

/// Stdout wrapper that reports when a line containing [`CRASH_TEXT`] has been flushed.
pub(crate) struct WatchedStdout<W> {
    pub(crate) inner: W,
    pub(crate) crash: Arc<CrashWatch>,
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
pub(crate) struct Shared {
    pub(crate) log: Option<Mutex<File>>,
    pub(crate) state_dir: Option<PathBuf>,
    pub(crate) no_load: bool,
    /// `TEST_AGENT_RESUME`: resume, close and a model option.
    pub(crate) resume: bool,
    /// Each session's model (`TEST_AGENT_RESUME`).
    pub(crate) models: Mutex<HashMap<String, String>>,
    pub(crate) fail_init: bool,
    pub(crate) tool_counter: AtomicU64,
    /// In-memory prompt history per session (used when there is no state dir).
    pub(crate) history: Mutex<HashMap<String, Vec<String>>>,
    /// Cancel flag of each session's current (or last) turn.
    pub(crate) cancels: Mutex<HashMap<String, watch::Sender<bool>>>,
    pub(crate) crash: Arc<CrashWatch>,
    /// The `mcpServers` each session was opened with (`session/new` or `session/load`).
    pub(crate) mcp: Mutex<HashMap<String, Vec<McpServer>>>,
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
        self.mcp.lock().insert(session.to_owned(), servers);
    }

    /// Appends one line to `TEST_AGENT_LOG`, flushed at once.
    fn log(&self, line: &str) {
        if let Some(file) = &self.log {
            let mut file = file.lock();
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
        self.history.lock().insert(session.to_owned(), Vec::new());
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
        self.history.lock().get(session).cloned()
    }

    /// Appends a prompt to the session's history; returns the number of prompts so far.
    fn record_prompt(&self, session: &str, text: &str) -> Result<usize, Error> {
        let line = one_line(text);
        let in_memory = {
            let mut history = self.history.lock();
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
        self.cancels.lock().insert(session.to_owned(), tx);
        rx
    }

    fn cancel(&self, session: &str) {
        if let Some(tx) = self.cancels.lock().get(session) {
            tx.send_replace(true);
        }
    }
}

pub(crate) fn count_lines(path: &Path) -> usize {
    std::fs::read_to_string(path).map_or(0, |t| t.lines().count())
}

/// Resolves once the turn is cancelled; never resolves if the flag can no longer change.
pub(crate) async fn cancelled(rx: &mut watch::Receiver<bool>) {
    let fired = rx.wait_for(|c| *c).await.is_ok();
    if !fired {
        std::future::pending::<()>().await;
    }
}

/// `TEST_AGENT_PROMPT_CAPS` as capabilities.
pub(crate) fn prompt_caps() -> PromptCapabilities {
    let caps = std::env::var("TEST_AGENT_PROMPT_CAPS").unwrap_or_default();
    let has = |c: &str| caps.split(',').any(|x| x.trim() == c);
    PromptCapabilities::new()
        .image(has("image"))
        .audio(has("audio"))
        .embedded_context(has("embedded_context"))
}

/// A log line for a non-text prompt block: its kind, type, URI and decoded size.
pub(crate) fn block_line(block: &ContentBlock) -> Option<String> {
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

pub(crate) fn report(result: Result<(), Error>) {
    if let Err(e) = result {
        eprintln!("test agent: cannot send a response: {e:?}");
    }
}

pub(crate) fn handle_load(
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
    shared
        .history
        .lock()
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
        let _ = file.lock().write_all(line.as_bytes());
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
        resume: env_flag("TEST_AGENT_RESUME"),
        models: Mutex::new(HashMap::new()),
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
    let (s_life, s_close, s_option) = (shared.clone(), shared.clone(), shared.clone());
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
                let mut caps = AgentCapabilities::new()
                    .load_session(!s_init.no_load)
                    .prompt_capabilities(prompt_caps());
                if s_init.resume {
                    caps = caps.session_capabilities(
                        SessionCapabilities::new()
                            .resume(SessionResumeCapabilities::new())
                            .close(SessionCloseCapabilities::new()),
                    );
                }
                report(
                    responder.respond(
                        InitializeResponse::new(version)
                            .agent_capabilities(caps)
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
                let offer = s_new.resume;
                let result = s_new.create_session(&id).map(|()| {
                    let resp = NewSessionResponse::new(id);
                    if offer {
                        resp.config_options(lifecycle::options("fast"))
                    } else {
                        resp
                    }
                });
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
            async move |req: ResumeSessionRequest,
                        responder: v1::Responder<ResumeSessionResponse>,
                        _cx| {
                report(responder.respond_with_result(s_life.resume(&req)));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: CloseSessionRequest,
                        responder: v1::Responder<CloseSessionResponse>,
                        _cx| {
                report(responder.respond(s_close.close(&req)));
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |req: SetSessionConfigOptionRequest,
                        responder: v1::Responder<SetSessionConfigOptionResponse>,
                        _cx| {
                report(responder.respond_with_result(s_option.set_option(&req)));
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
