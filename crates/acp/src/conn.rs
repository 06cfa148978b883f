//! One running agent process and its ACP connection.
//!
//! The agent is spawned in the session's workspace, its stdin/stdout carry newline-delimited
//! JSON-RPC (framed by `agent-client-protocol`'s `ByteStreams`), and its stderr goes to the
//! log line by line. What the agent sends us — `session/update` notifications and
//! `session/request_permission` requests — is handed over on a channel, so the run that owns
//! the connection handles it in order and nothing waits inside the protocol's dispatch loop.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::{self, schema::*};
use agent_client_protocol::{Agent, ByteStreams, Client};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::AcpError;

/// How long `initialize` may take.
const INIT_TIMEOUT: Duration = Duration::from_secs(60);

/// Something the agent sent that the run must handle.
pub(crate) enum Incoming {
    Update(Box<SessionNotification>),
    Permission(
        Box<RequestPermissionRequest>,
        Box<v1::Responder<RequestPermissionResponse>>,
    ),
    /// The agent asks the person something (`elicitation/create`).
    Question(
        Box<CreateElicitationRequest>,
        Box<v1::Responder<CreateElicitationResponse>>,
    ),
}

impl Incoming {
    /// Answers a request that no run will handle (a stale one, or one that came after the
    /// turn ended): cancelled, so the agent is not left waiting.
    pub(crate) fn dismiss(self) {
        match self {
            Self::Update(_) => {}
            Self::Permission(_, responder) => {
                let _ = responder.respond(RequestPermissionResponse::new(
                    RequestPermissionOutcome::Cancelled,
                ));
            }
            Self::Question(_, responder) => {
                let _ =
                    responder.respond(CreateElicitationResponse::new(ElicitationAction::Cancel));
            }
        }
    }
}

/// What to run and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    pub command: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
}

/// A live agent process with an initialized connection.
pub(crate) struct Conn {
    pub cx: v1::ConnectionTo<Agent>,
    pub incoming: mpsc::UnboundedReceiver<Incoming>,
    pub load_session: bool,
    /// Whether the agent offers `session/resume` and `session/close`.
    pub resume_session: bool,
    pub close_session: bool,
    /// Whether the agent takes MCP servers over HTTP (`mcpCapabilities.http`).
    pub mcp_http: bool,
    /// What the agent takes in a prompt besides text and resource links.
    pub prompt_caps: PromptCapabilities,
    /// Whether the process runs in the sandbox.
    pub confined: bool,
    child: Child,
    stop: Option<oneshot::Sender<()>>,
    driver: JoinHandle<()>,
    /// What the sandbox keeps while the process runs (its cgroup, its network proxy).
    _confined: Option<switchboard_sandbox::Confined>,
}

/// How one agent process is confined.
pub(crate) struct Confinement<'a> {
    pub sandbox: &'a crate::AgentSandbox,
    /// The agent's network, or its session's.
    pub network: switchboard_sandbox::NetworkPolicy,
    /// Switchboard's own state, never granted.
    pub hidden: Vec<std::path::PathBuf>,
    /// Switchboard's own port, for the agent's `switchboard mcp`.
    pub connect_ports: Vec<u16>,
    /// What the MCP servers it is given are made of (it starts them).
    pub read_only: Vec<std::path::PathBuf>,
}

/// The agent's command, through the sandbox's launcher when it is confined (and refused when
/// the sandbox is required but this machine cannot).
fn command(
    name: &str,
    cmd: &AgentCommand,
    cwd: &Path,
    confinement: Option<Confinement<'_>>,
) -> Result<(Command, Option<switchboard_sandbox::Confined>), AcpError> {
    let spawn_error = |reason: String| AcpError::Spawn {
        agent: name.to_string(),
        command: cmd.command.clone(),
        reason,
    };
    let Some(c) = confinement else {
        return Ok((Command::new(&cmd.command), None));
    };
    let sb = &c.sandbox.sandbox;
    if !sb.available {
        if sb.required {
            return Err(spawn_error(
                "refused: the sandbox is required ([sandbox] mode = \"required\") and this machine cannot sandbox processes (no Landlock in its kernel)".into(),
            ));
        }
        tracing::warn!(agent = %name, "this machine cannot sandbox processes (no Landlock in its kernel): the agent runs as the server's user");
        return Ok((Command::new(&cmd.command), None));
    }
    let env: Vec<(String, String)> = cmd
        .env
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let spec = switchboard_sandbox::Spec {
        workspace: cwd,
        hidden: &c.hidden,
        read_write: &c.sandbox.read_write,
        read_only: &c.read_only,
        network: &c.network,
        connect_ports: &c.connect_ports,
        private_home: false,
        own_pids: true,
        env: &env,
    };
    let (command, confined) = sb
        .command(&spec, &cmd.command)
        .map_err(|e| spawn_error(e.to_string()))?;
    Ok((command, Some(confined)))
}

impl Conn {
    /// Spawns the agent in `cwd` and runs `initialize`.
    pub async fn start(
        name: &str,
        cmd: &AgentCommand,
        cwd: &Path,
        confinement: Option<Confinement<'_>>,
    ) -> Result<Self, AcpError> {
        let (mut command, confined) = command(name, cmd, cwd, confinement)?;
        // The server's secrets are not the agent's: with the API token an agent could
        // approve its own permission requests. Keys it needs go in `[agents.NAME] env`.
        switchboard_engine::child::scrub_server_secrets(&mut command, &cmd.env);
        let mut child = command
            .args(&cmd.args)
            .envs(&cmd.env)
            .current_dir(cwd)
            // Its own process group: stopping the agent stops what it started, and a
            // Ctrl-C at the server's terminal is not delivered to it.
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| AcpError::Spawn {
                agent: name.to_string(),
                command: cmd.command.clone(),
                reason: e.to_string(),
            })?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(AcpError::Spawn {
                agent: name.to_string(),
                command: cmd.command.clone(),
                reason: "no stdio pipes".into(),
            });
        };
        if let Some(stderr) = child.stderr.take() {
            let agent = name.to_string();
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::info!(agent = %agent, "agent stderr: {line}");
                }
            });
        }
        let transport = ByteStreams::new(stdin.compat_write(), stdout.compat());
        let (in_tx, incoming) = mpsc::unbounded_channel::<Incoming>();
        let perm_tx = in_tx.clone();
        let question_tx = in_tx.clone();
        let (cx_tx, cx_rx) = oneshot::channel::<v1::ConnectionTo<Agent>>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let agent = name.to_string();
        let driver = tokio::spawn(async move {
            let result = Client
                .v1()
                .name("switchboard")
                .on_receive_notification(
                    async move |n: SessionNotification, _cx| {
                        let _ = in_tx.send(Incoming::Update(Box::new(n)));
                        Ok(())
                    },
                    agent_client_protocol::on_receive_notification!(),
                )
                .on_receive_request(
                    async move |req: RequestPermissionRequest, responder, _cx| {
                        // Handed to the run; answered when a person (or policy) decides.
                        let _ =
                            perm_tx.send(Incoming::Permission(Box::new(req), Box::new(responder)));
                        Ok(())
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .on_receive_request(
                    async move |req: CreateElicitationRequest, responder, _cx| {
                        // Handed to the run: an approval that asks a person.
                        let _ = question_tx
                            .send(Incoming::Question(Box::new(req), Box::new(responder)));
                        Ok(())
                    },
                    agent_client_protocol::on_receive_request!(),
                )
                .connect_with(transport, async move |cx: v1::ConnectionTo<Agent>| {
                    let _ = cx_tx.send(cx.clone());
                    tokio::select! {
                        _ = stop_rx => {}
                        _ = cx.incoming_closed() => {}
                    }
                    Ok(())
                })
                .await;
            if let Err(e) = result {
                tracing::debug!(agent = %agent, error = %e, "agent connection ended");
            }
        });
        let cx = cx_rx.await.map_err(|_| AcpError::Protocol {
            agent: name.to_string(),
            step: "connect",
            reason: "the connection closed before it started".into(),
        })?;
        let mut conn = Self {
            cx,
            incoming,
            load_session: false,
            resume_session: false,
            close_session: false,
            mcp_http: false,
            prompt_caps: PromptCapabilities::default(),
            confined: confined.is_some(),
            child,
            stop: Some(stop_tx),
            driver,
            _confined: confined,
        };
        let init = InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(
                // No fs or terminal methods are implemented: the agent uses its own.
                ClientCapabilities::new()
                    .fs(FileSystemCapabilities::new()
                        .read_text_file(false)
                        .write_text_file(false))
                    .terminal(false)
                    // An agent's questions become approvals (forms and pages to visit).
                    .elicitation(
                        ElicitationCapabilities::new()
                            .form(ElicitationFormCapabilities::new())
                            .url(ElicitationUrlCapabilities::new()),
                    ),
            )
            .client_info(Implementation::new(
                "switchboard",
                env!("CARGO_PKG_VERSION"),
            ));
        let sent = conn.cx.send_request(init).block_task();
        let answer = tokio::select! {
            r = tokio::time::timeout(INIT_TIMEOUT, sent) => r,
            status = conn.child.wait() => {
                return Err(AcpError::Exited {
                    agent: name.to_string(),
                    step: "initialize",
                    status: status.map(|s| s.to_string()).unwrap_or_else(|e| e.to_string()),
                });
            }
        };
        let init = match answer {
            Ok(Ok(init)) => init,
            Ok(Err(e)) => return Err(conn.failure(name, "initialize", &e).await),
            Err(_) => {
                return Err(AcpError::Protocol {
                    agent: name.to_string(),
                    step: "initialize",
                    reason: format!("no answer within {} s", INIT_TIMEOUT.as_secs()),
                });
            }
        };
        conn.load_session = init.agent_capabilities.load_session;
        let sessions = &init.agent_capabilities.session_capabilities;
        conn.resume_session = sessions.resume.is_some();
        conn.close_session = sessions.close.is_some();
        conn.mcp_http = init.agent_capabilities.mcp_capabilities.http;
        conn.prompt_caps = init.agent_capabilities.prompt_capabilities.clone();
        tracing::info!(agent = %name, load_session = conn.load_session, resume_session = conn.resume_session, close_session = conn.close_session, "agent initialized");
        Ok(conn)
    }

    /// Turns a failed request into an error that says whether the agent died.
    pub async fn failure(
        &mut self,
        name: &str,
        step: &'static str,
        e: &agent_client_protocol::Error,
    ) -> AcpError {
        // A dead process makes every pending request fail; report the death, not the echo.
        let exited = tokio::time::timeout(Duration::from_millis(500), self.child.wait()).await;
        match exited {
            Ok(Ok(status)) => AcpError::Exited {
                agent: name.to_string(),
                step,
                status: status.to_string(),
            },
            _ => AcpError::Protocol {
                agent: name.to_string(),
                step,
                reason: if e.message.is_empty() {
                    format!("JSON-RPC error {}", e.code.value())
                } else {
                    format!("{} (JSON-RPC error {})", e.message, e.code.value())
                },
            },
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None)) && !self.driver.is_finished()
    }

    /// Closes the connection (the agent sees its stdin end), then stops the whole process
    /// group: SIGTERM, and SIGKILL if it is still there after a short grace.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let group = self
            .child
            .id()
            .map(|p| nix::unistd::Pid::from_raw(p as i32));
        if let Some(g) = group {
            let _ = nix::sys::signal::killpg(g, nix::sys::signal::Signal::SIGTERM);
        }
        if tokio::time::timeout(Duration::from_secs(2), self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.start_kill();
            let _ = self.child.wait().await;
        }
        if let Some(g) = group {
            // Whatever the agent started and left behind.
            let _ = nix::sys::signal::killpg(g, nix::sys::signal::Signal::SIGKILL);
        }
        self.driver.abort();
    }
}
