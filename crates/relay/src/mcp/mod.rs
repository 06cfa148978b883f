//! Switchboard's MCP server (`switchboard mcp`): the tools an external agent gets from
//! Switchboard.
//!
//! The server speaks MCP over newline-delimited JSON-RPC (stdio for a real agent). It offers
//! up to two tool sets:
//! - **relay** (`list`, `send`, `look`), for an agent that is a member of a bundle, to talk to
//!   its peers — forwarded to a [`RelayOps`];
//! - **session** (`send_file`), for the agent behind a Switchboard session, to share a file of
//!   its workspace with the user — forwarded to a [`SessionOps`]. Switchboard passes this
//!   server to every ACP agent it starts (`session/new`'s `mcpServers`), holding that
//!   session's own token, so any MCP-capable agent can send files as the built-in agent does.
//!
//! It performs no authorization or validation of its own: the binary implements the ops
//! over the HTTP API and the server's answer is passed back to the agent unchanged.
//!
//! A relay error is a *tool* error, not a protocol error (per the MCP spec): the agent gets a
//! `CallToolResult` with `isError: true` whose text content (and structured content) is
//! `{"code": …, "message": …, "details": …}`. Tool arguments that do not match the input schema
//! are reported by rmcp as a tool error too (`isError: true`, plain text starting "failed to
//! deserialize parameters"); an unknown tool name is a JSON-RPC invalid-params error (-32602).
//! Either way the session carries on.
//!
//! stdout is the MCP channel: this module logs through `tracing` only, and the binary must send
//! its subscriber's output to stderr.

use std::borrow::Cow;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::{QuitReason, ServerInitializeError};
use rmcp::{ServerHandler, ServiceExt, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncWrite};

/// What the MCP tools call. Implemented by the binary over the HTTP API; by a fake in tests.
#[async_trait::async_trait]
pub trait RelayOps: Send + Sync + 'static {
    /// The bundle's members as seen by this member (JSON object from the relay).
    async fn list(&self) -> Result<serde_json::Value, RelayCallError>;
    /// Sends a message to some (or all) peers; returns the relay's JSON answer.
    async fn send(&self, req: McpSend) -> Result<serde_json::Value, RelayCallError>;
    /// Looks at a peer's recent output; returns the relay's JSON answer.
    async fn look(
        &self,
        target: String,
        lines: Option<u32>,
    ) -> Result<serde_json::Value, RelayCallError>;
}

/// What the session tools call. Implemented by the binary over the HTTP API (with the
/// session's token); by a fake in tests.
#[async_trait::async_trait]
pub trait SessionOps: Send + Sync + 'static {
    /// Shares a file of the session's workspace with the user from the running turn;
    /// returns the server's JSON answer (`{"run_id", "file"}`).
    async fn send_file(
        &self,
        path: String,
        caption: Option<String>,
    ) -> Result<serde_json::Value, RelayCallError>;
    /// Searches the sessions the session's owner sees (`GET /v1/sessions/{id}/search`);
    /// returns the server's JSON answer.
    async fn search(
        &self,
        query: String,
        limit: Option<u32>,
    ) -> Result<serde_json::Value, RelayCallError>;
}

/// The tool sets one MCP server offers (at least one).
#[derive(Clone, Default)]
pub struct McpTools {
    /// The relay tools, for this member of this bundle.
    pub relay: Option<(Arc<dyn RelayOps>, McpInfo)>,
    /// The session tools.
    pub session: Option<Arc<dyn SessionOps>>,
}

/// A `send` request as the agent made it, forwarded verbatim to the relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpSend {
    /// Member names to send to (empty when the agent gave none).
    pub targets: Vec<String>,
    /// Send to every peer this member may reach.
    pub broadcast: bool,
    /// The message text.
    pub message: String,
    /// Wait for delivery instead of returning once the relay has accepted the message.
    pub sync: bool,
    /// The relayed message this one answers (its id), continuing its chain.
    pub in_reply_to: Option<String>,
}

/// An error the server answered with: stable code, human message, details object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct RelayCallError {
    /// Stable machine-readable code (e.g. `not_found`, `forbidden`).
    pub code: String,
    /// Human-readable message.
    pub message: String,
    /// Extra structured details (an object; `null` if the relay gave none).
    #[serde(default)]
    pub details: serde_json::Value,
}

/// Who this MCP server speaks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpInfo {
    /// The relay bundle's name.
    pub bundle: String,
    /// This agent's member name within the bundle.
    pub member: String,
}

/// Why the MCP server stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The client went away or misbehaved before the MCP handshake completed.
    #[error("MCP session did not initialize: {0}")]
    Initialize(#[source] Box<ServerInitializeError>),
    /// The task serving the session panicked or was aborted.
    #[error("MCP service task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// Serves the relay tools over the given reader/writer until the client disconnects.
///
/// Returns `Ok(())` when the client closes the connection after the handshake, and
/// [`McpError::Initialize`] if it goes away (or sends something else) before initializing.
pub async fn serve<R, W>(
    ops: Arc<dyn RelayOps>,
    info: McpInfo,
    reader: R,
    writer: W,
) -> Result<(), McpError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    serve_tools(
        McpTools {
            relay: Some((ops, info)),
            session: None,
        },
        reader,
        writer,
    )
    .await
}

/// Serves the given tool sets over the reader/writer until the client disconnects (see
/// [`serve`]).
pub async fn serve_tools<R, W>(tools: McpTools, reader: R, writer: W) -> Result<(), McpError>
where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send + 'static,
{
    match &tools.relay {
        Some((_, info)) => {
            tracing::info!(bundle = %info.bundle, member = %info.member, session_tools = tools.session.is_some(), "MCP server starting")
        }
        None => tracing::info!(
            session_tools = tools.session.is_some(),
            "MCP server starting"
        ),
    }
    let server = SwitchboardMcp::new(tools);
    let running = server
        .serve((reader, writer))
        .await
        .map_err(|e| McpError::Initialize(Box::new(e)))?;
    let reason = running.waiting().await?;
    match reason {
        QuitReason::JoinError(e) => Err(McpError::Task(e)),
        other => {
            tracing::info!(reason = ?other, "MCP server stopped");
            Ok(())
        }
    }
}

/// [`serve_tools`] on the process's stdin/stdout.
pub async fn serve_stdio(tools: McpTools) -> Result<(), McpError> {
    let (stdin, stdout) = rmcp::transport::stdio();
    serve_tools(tools, stdin, stdout).await
}

/// Arguments of the `send_file` tool.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SendFileArgs {
    /// The file to send: a path relative to your workspace (or absolute inside it).
    path: String,
    /// A short caption shown with the file.
    caption: Option<String>,
}

/// Arguments of the `search_sessions` tool.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    /// What to look for: words (all required), "a phrase", prefix*.
    query: String,
    /// How many hits, best first (1–100, default 20).
    #[schemars(range(min = 1, max = 100))]
    limit: Option<u32>,
}

/// Arguments of the `send` tool.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SendArgs {
    /// Names of the peers (members of this bundle) to send the message to.
    to: Option<Vec<String>>,
    /// Send the message to every peer you are allowed to reach. Default false.
    #[serde(default)]
    broadcast: bool,
    /// The message text to deliver.
    message: String,
    /// Wait for delivery before returning. Default false: return once the relay has accepted it.
    #[serde(default)]
    sync: bool,
    /// The id of the relayed message you are answering (`msg_…`, from its header), if any.
    in_reply_to: Option<String>,
}

/// Arguments of the `look` tool.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct LookArgs {
    /// Name of the peer (member of this bundle) to look at.
    target: String,
    /// How many recent lines of its output to return (1–1000); the relay's default if omitted.
    #[schemars(range(min = 1, max = 1000))]
    lines: Option<u32>,
}

/// The MCP service: the relay tools forwarding to a [`RelayOps`], the session tools to a
/// [`SessionOps`]; only the sets it was given are listed.
#[derive(Clone)]
struct SwitchboardMcp {
    tools: McpTools,
    tool_router: ToolRouter<Self>,
}

impl SwitchboardMcp {
    fn new(tools: McpTools) -> Self {
        let mut tool_router = ToolRouter::new();
        if let Some((_, info)) = &tools.relay {
            let mut relay = Self::relay_router();
            for route in relay.map.values_mut() {
                let base = route.attr.description.clone().unwrap_or_default();
                route.attr.description = Some(Cow::Owned(format!(
                    "{base} (Relay bundle `{}`; you are member `{}`.)",
                    info.bundle, info.member
                )));
            }
            tool_router += relay;
        }
        if tools.session.is_some() {
            tool_router += Self::session_router();
        }
        Self { tools, tool_router }
    }

    fn relay(&self) -> Result<&Arc<dyn RelayOps>, RelayCallError> {
        self.tools
            .relay
            .as_ref()
            .map(|(ops, _)| ops)
            .ok_or_else(|| not_offered("relay"))
    }
}

/// A call to a tool of a set this server was not started with (the router does not list
/// them, so only a client that ignores `tools/list` gets here).
fn not_offered(set: &str) -> RelayCallError {
    RelayCallError {
        code: "not_found".into(),
        message: format!("this MCP server was started without the {set} tools"),
        details: serde_json::json!({}),
    }
}

#[tool_router(router = session_router)]
impl SwitchboardMcp {
    #[tool(
        description = "Send a file of your workspace to the user: it is delivered where they \
                       talk to you (a chat gets it as a photo or document; the console shows \
                       it). Use it for screenshots, reports, logs or anything they asked for. \
                       Returns the stored file's JSON (name, type, size)."
    )]
    async fn send_file(&self, Parameters(args): Parameters<SendFileArgs>) -> CallToolResult {
        tracing::debug!(path = %args.path, "MCP send_file");
        let outcome = match &self.tools.session {
            Some(ops) => ops.send_file(args.path, args.caption).await,
            None => Err(not_offered("session")),
        };
        to_result("send_file", outcome)
    }

    #[tool(
        description = "Search what was said and done in the user's sessions, this one and \
                       earlier ones: messages, tool calls and their results, file names. Use \
                       it to recall a decision, a fix or a command from earlier work. Words \
                       are all required; \"a phrase\" and prefix* work. Returns the hits, \
                       best first, each with its passage.",
        annotations(read_only_hint = true)
    )]
    async fn search_sessions(&self, Parameters(args): Parameters<SearchArgs>) -> CallToolResult {
        tracing::debug!("MCP search_sessions");
        let outcome = match &self.tools.session {
            Some(ops) => ops.search(args.query, args.limit).await,
            None => Err(not_offered("session")),
        };
        to_result("search_sessions", outcome)
    }
}

#[tool_router(router = relay_router)]
impl SwitchboardMcp {
    #[tool(
        description = "List the members of your relay bundle as the relay shows them to you \
                       (names, kinds, state). Returns the relay's JSON.",
        annotations(read_only_hint = true)
    )]
    async fn list(&self) -> CallToolResult {
        tracing::debug!("MCP list");
        let outcome = match self.relay() {
            Ok(ops) => ops.list().await,
            Err(e) => Err(e),
        };
        to_result("list", outcome)
    }

    #[tool(
        description = "Send a message to peers in your relay bundle: name them in `to`, or set \
                       `broadcast` to reach every peer you may message. Asynchronous by default \
                       (returns once the relay has accepted the message); set `sync` to wait \
                       for delivery. Returns the relay's JSON."
    )]
    async fn send(&self, Parameters(args): Parameters<SendArgs>) -> CallToolResult {
        let req = McpSend {
            targets: args.to.unwrap_or_default(),
            broadcast: args.broadcast,
            message: args.message,
            sync: args.sync,
            in_reply_to: args.in_reply_to,
        };
        tracing::debug!(
            targets = ?req.targets,
            broadcast = req.broadcast,
            sync = req.sync,
            "MCP send"
        );
        let outcome = match self.relay() {
            Ok(ops) => ops.send(req).await,
            Err(e) => Err(e),
        };
        to_result("send", outcome)
    }

    #[tool(
        description = "Look at a peer in your relay bundle: returns its recent output (the last \
                       `lines` lines) as the relay's JSON.",
        annotations(read_only_hint = true)
    )]
    async fn look(&self, Parameters(args): Parameters<LookArgs>) -> CallToolResult {
        tracing::debug!(target = %args.target, lines = ?args.lines, "MCP look");
        let outcome = match self.relay() {
            Ok(ops) => ops.look(args.target, args.lines).await,
            Err(e) => Err(e),
        };
        to_result("look", outcome)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for SwitchboardMcp {
    fn get_info(&self) -> ServerConfig {
        let (title, mut instructions) = match &self.tools.relay {
            Some((_, McpInfo { bundle, member })) => (
                format!("Switchboard relay: bundle {bundle}, member {member}"),
                format!(
                    "You are member {member} of relay bundle {bundle}; use list/send/look to \
                     coordinate with your peers. `list` shows the bundle's members, `send` \
                     messages one or more of them (asynchronous unless `sync` is true), `look` \
                     shows a peer's recent output."
                ),
            ),
            None => ("Switchboard".to_owned(), String::new()),
        };
        if self.tools.session.is_some() {
            if !instructions.is_empty() {
                instructions.push(' ');
            }
            instructions.push_str(
                "`send_file` sends a file of your workspace to the user you are working for; \
                 `search_sessions` finds what was said and done in their sessions.",
            );
        }
        instructions.push_str(
            " Errors come back as tool results with isError set and a JSON body \
             {\"code\", \"message\", \"details\"} from Switchboard.",
        );
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("switchboard-relay", env!("CARGO_PKG_VERSION"))
                    .with_title(title),
            )
            .with_instructions(instructions)
    }
}

/// Turns the relay's answer into a tool result: JSON text (plus structured content when it is
/// an object), or an `isError` result carrying the relay's error.
fn to_result(tool: &str, outcome: Result<serde_json::Value, RelayCallError>) -> CallToolResult {
    match outcome {
        Ok(value @ serde_json::Value::Object(_)) => CallToolResult::structured(value),
        Ok(value) => {
            CallToolResult::success(vec![rmcp::model::ContentBlock::text(value.to_string())])
        }
        Err(err) => {
            tracing::warn!(tool, code = %err.code, message = %err.message, "relay call failed");
            CallToolResult::structured_error(serde_json::json!({
                "code": err.code,
                "message": err.message,
                "details": err.details,
            }))
        }
    }
}

#[cfg(test)]
mod tests;
