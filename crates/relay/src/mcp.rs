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
                "`send_file` sends a file of your workspace to the user you are working for.",
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
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use serde_json::{Value, json};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, DuplexStream, Lines};
    use tokio::task::JoinHandle;

    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    enum Call {
        List,
        Send(McpSend),
        Look(String, Option<u32>),
        SendFile(String, Option<String>),
    }

    /// Records calls; answers with `fail` if set, else a canned JSON per operation.
    #[derive(Default)]
    struct FakeOps {
        calls: Mutex<Vec<Call>>,
        fail: Option<RelayCallError>,
    }

    impl FakeOps {
        fn calls(&self) -> Vec<Call> {
            self.calls.lock().unwrap().clone()
        }
        fn answer(&self, call: Call, ok: Value) -> Result<Value, RelayCallError> {
            self.calls.lock().unwrap().push(call);
            match &self.fail {
                Some(e) => Err(e.clone()),
                None => Ok(ok),
            }
        }
    }

    fn list_json() -> Value {
        json!({"bundle": "b1", "members": [{"name": "alice"}, {"name": "bob"}]})
    }
    fn send_json() -> Value {
        json!({"accepted": ["bob"], "ids": ["m-1"]})
    }
    fn look_json() -> Value {
        json!({"target": "bob", "text": "hello\nworld"})
    }

    #[async_trait::async_trait]
    impl RelayOps for FakeOps {
        async fn list(&self) -> Result<Value, RelayCallError> {
            self.answer(Call::List, list_json())
        }
        async fn send(&self, req: McpSend) -> Result<Value, RelayCallError> {
            self.answer(Call::Send(req), send_json())
        }
        async fn look(&self, target: String, lines: Option<u32>) -> Result<Value, RelayCallError> {
            self.answer(Call::Look(target, lines), look_json())
        }
    }

    /// A raw JSON-RPC client over duplex pipes.
    struct Client {
        tx: DuplexStream,
        rx: Lines<BufReader<DuplexStream>>,
        server: JoinHandle<Result<(), McpError>>,
        next_id: u64,
    }

    #[async_trait::async_trait]
    impl SessionOps for FakeOps {
        async fn send_file(
            &self,
            path: String,
            caption: Option<String>,
        ) -> Result<Value, RelayCallError> {
            self.answer(
                Call::SendFile(path.clone(), caption),
                json!({"run_id": "r-1", "file": {"name": path}}),
            )
        }
    }

    impl Client {
        fn start(ops: Arc<FakeOps>) -> Self {
            let info = McpInfo {
                bundle: "b1".into(),
                member: "alice".into(),
            };
            Self::with_tools(McpTools {
                relay: Some((ops, info)),
                session: None,
            })
        }

        fn with_tools(tools: McpTools) -> Self {
            let (tx, server_in) = tokio::io::duplex(64 * 1024);
            let (server_out, rx) = tokio::io::duplex(64 * 1024);
            let server = tokio::spawn(serve_tools(tools, server_in, server_out));
            Self {
                tx,
                rx: BufReader::new(rx).lines(),
                server,
                next_id: 1,
            }
        }

        async fn write(&mut self, msg: &Value) {
            let mut line = serde_json::to_string(msg).unwrap();
            line.push('\n');
            self.tx.write_all(line.as_bytes()).await.unwrap();
            self.tx.flush().await.unwrap();
        }

        /// Sends a request and returns the response with the same id (skipping anything else).
        async fn request(&mut self, method: &str, params: Value) -> Value {
            let id = self.next_id;
            self.next_id += 1;
            self.write(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
                .await;
            loop {
                let line = tokio::time::timeout(Duration::from_secs(10), self.rx.next_line())
                    .await
                    .expect("timed out waiting for the server")
                    .unwrap()
                    .expect("server closed its output");
                let msg: Value = serde_json::from_str(&line).unwrap();
                assert_eq!(msg["jsonrpc"], "2.0", "{msg}");
                if msg.get("id") == Some(&json!(id)) {
                    return msg;
                }
            }
        }

        async fn call(&mut self, tool: &str, arguments: Value) -> Value {
            self.request("tools/call", json!({"name": tool, "arguments": arguments}))
                .await
        }

        /// Performs the initialize handshake and returns the initialize result.
        async fn handshake(&mut self) -> Value {
            let resp = self
                .request(
                    "initialize",
                    json!({
                        "protocolVersion": "2025-06-18",
                        "capabilities": {},
                        "clientInfo": {"name": "test-agent", "version": "0.0.1"}
                    }),
                )
                .await;
            self.write(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
                .await;
            resp["result"].clone()
        }

        /// Closes the client side and checks the server ends cleanly.
        async fn finish(self) {
            drop(self.tx);
            let ended = tokio::time::timeout(Duration::from_secs(10), self.server)
                .await
                .expect("server did not stop after the client disconnected")
                .unwrap();
            assert!(ended.is_ok(), "{ended:?}");
        }
    }

    /// The tool result's single text content, parsed as JSON.
    fn result_json(resp: &Value) -> Value {
        let content = resp["result"]["content"].as_array().unwrap();
        assert_eq!(content.len(), 1, "{resp}");
        assert_eq!(content[0]["type"], "text");
        serde_json::from_str(content[0]["text"].as_str().unwrap()).unwrap()
    }

    #[tokio::test]
    async fn mcp_initialize_and_list_tools() {
        let mut c = Client::start(Arc::new(FakeOps::default()));
        let init = c.handshake().await;
        assert_eq!(init["protocolVersion"], "2025-06-18", "{init}");
        assert_eq!(init["serverInfo"]["name"], "switchboard-relay");
        assert!(init["capabilities"]["tools"].is_object(), "{init}");
        let instructions = init["instructions"].as_str().unwrap();
        assert!(
            instructions.contains("You are member alice of relay bundle b1"),
            "{instructions}"
        );

        let resp = c.request("tools/list", json!({})).await;
        let tools = resp["result"]["tools"].as_array().unwrap();
        let mut names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
        names.sort_unstable();
        assert_eq!(names, ["list", "look", "send"]);
        let tool = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap().clone();

        for t in tools {
            let desc = t["description"].as_str().unwrap();
            assert!(desc.contains("`b1`") && desc.contains("`alice`"), "{desc}");
            assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        }

        let send = tool("send");
        let schema = &send["inputSchema"];
        assert_eq!(schema["required"], json!(["message"]), "{schema}");
        for prop in ["to", "broadcast", "message", "sync"] {
            assert!(schema["properties"][prop].is_object(), "{prop}: {schema}");
        }
        assert_eq!(schema["properties"]["message"]["type"], "string");

        let look = tool("look");
        let schema = &look["inputSchema"];
        assert_eq!(schema["required"], json!(["target"]), "{schema}");
        assert_eq!(schema["properties"]["lines"]["minimum"], 1, "{schema}");
        assert_eq!(schema["properties"]["lines"]["maximum"], 1000, "{schema}");

        let list = tool("list");
        assert!(
            list["inputSchema"]
                .get("required")
                .is_none_or(|r| r.as_array().is_some_and(|r| r.is_empty())),
            "{list}"
        );

        c.finish().await;
    }

    async fn tool_names(c: &mut Client) -> Vec<String> {
        let resp = c.request("tools/list", json!({})).await;
        let mut names: Vec<String> = resp["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort_unstable();
        names
    }

    #[tokio::test]
    async fn the_session_tools_are_offered_alone_or_beside_the_relay_tools() {
        let ops = Arc::new(FakeOps::default());
        let mut c = Client::with_tools(McpTools {
            relay: None,
            session: Some(ops.clone()),
        });
        let init = c.handshake().await;
        let instructions = init["instructions"].as_str().unwrap();
        assert!(instructions.contains("send_file"), "{instructions}");
        assert!(!instructions.contains("relay bundle"), "{instructions}");
        assert_eq!(tool_names(&mut c).await, ["send_file"]);
        let resp = c
            .call(
                "send_file",
                json!({"path": "out/report.pdf", "caption": "the report"}),
            )
            .await;
        assert_eq!(resp["result"]["isError"], false, "{resp}");
        assert_eq!(
            resp["result"]["structuredContent"]["file"]["name"],
            "out/report.pdf"
        );
        // A relay tool it does not list is not callable either.
        let resp = c.call("list", json!({})).await;
        assert!(
            resp.get("error").is_some() || resp["result"]["isError"] == true,
            "{resp}"
        );
        assert_eq!(
            ops.calls(),
            [Call::SendFile(
                "out/report.pdf".into(),
                Some("the report".into())
            )]
        );
        c.finish().await;

        let info = McpInfo {
            bundle: "b1".into(),
            member: "alice".into(),
        };
        let mut c = Client::with_tools(McpTools {
            relay: Some((ops.clone(), info)),
            session: Some(ops.clone()),
        });
        c.handshake().await;
        assert_eq!(
            tool_names(&mut c).await,
            ["list", "look", "send", "send_file"]
        );
        c.finish().await;
    }

    #[tokio::test]
    async fn a_failed_send_file_is_a_tool_error_with_the_servers_code() {
        let ops = Arc::new(FakeOps {
            fail: Some(RelayCallError {
                code: "session_not_running".into(),
                message: "session has no active run".into(),
                details: json!({"status": 409}),
            }),
            ..FakeOps::default()
        });
        let mut c = Client::with_tools(McpTools {
            relay: None,
            session: Some(ops),
        });
        c.handshake().await;
        let resp = c.call("send_file", json!({"path": "a.txt"})).await;
        assert_eq!(resp["result"]["isError"], true, "{resp}");
        assert_eq!(result_json(&resp)["code"], "session_not_running");
        c.finish().await;
    }

    #[tokio::test]
    async fn mcp_tools_forward_to_relay() {
        let ops = Arc::new(FakeOps::default());
        let mut c = Client::start(ops.clone());
        c.handshake().await;

        let resp = c.call("list", json!({})).await;
        assert_ne!(resp["result"]["isError"], true, "{resp}");
        assert_eq!(result_json(&resp), list_json());
        assert_eq!(resp["result"]["structuredContent"], list_json());

        let resp = c
            .call("send", json!({"to": ["bob"], "message": "hi bob"}))
            .await;
        assert_ne!(resp["result"]["isError"], true, "{resp}");
        assert_eq!(result_json(&resp), send_json());

        let resp = c
            .call(
                "send",
                json!({"broadcast": true, "message": "hi all", "sync": true}),
            )
            .await;
        assert_eq!(result_json(&resp), send_json());

        let resp = c.call("look", json!({"target": "bob", "lines": 20})).await;
        assert_eq!(result_json(&resp), look_json());
        let resp = c.call("look", json!({"target": "bob"})).await;
        assert_eq!(result_json(&resp), look_json());

        assert_eq!(
            ops.calls(),
            vec![
                Call::List,
                Call::Send(McpSend {
                    targets: vec!["bob".into()],
                    broadcast: false,
                    message: "hi bob".into(),
                    sync: false,
                    in_reply_to: None,
                }),
                Call::Send(McpSend {
                    targets: vec![],
                    broadcast: true,
                    message: "hi all".into(),
                    sync: true,
                    in_reply_to: None,
                }),
                Call::Look("bob".into(), Some(20)),
                Call::Look("bob".into(), None),
            ]
        );
        c.finish().await;
    }

    #[tokio::test]
    async fn mcp_relay_error_is_tool_error() {
        let ops = Arc::new(FakeOps {
            fail: Some(RelayCallError {
                code: "forbidden".into(),
                message: "alice may not message carol".into(),
                details: json!({"target": "carol"}),
            }),
            ..FakeOps::default()
        });
        let mut c = Client::start(ops.clone());
        c.handshake().await;

        let resp = c
            .call("send", json!({"to": ["carol"], "message": "psst"}))
            .await;
        assert!(resp.get("error").is_none(), "{resp}");
        assert_eq!(resp["result"]["isError"], true, "{resp}");
        let body = result_json(&resp);
        assert_eq!(
            body,
            json!({
                "code": "forbidden",
                "message": "alice may not message carol",
                "details": {"target": "carol"}
            })
        );
        assert_eq!(resp["result"]["structuredContent"], body);

        let resp = c.call("look", json!({"target": "carol"})).await;
        assert_eq!(resp["result"]["isError"], true, "{resp}");
        assert_eq!(result_json(&resp)["code"], "forbidden");
        assert_eq!(ops.calls().len(), 2);
        c.finish().await;
    }

    #[tokio::test]
    async fn mcp_bad_arguments_then_keeps_serving() {
        let ops = Arc::new(FakeOps::default());
        let mut c = Client::start(ops.clone());
        c.handshake().await;

        // rmcp reports arguments that do not deserialize as a tool error (`isError`, plain
        // text), so the model can correct itself (MCP 2025-11-25).
        let bad_args = |resp: &Value| {
            assert!(resp.get("error").is_none(), "{resp}");
            assert_eq!(resp["result"]["isError"], true, "{resp}");
            let text = resp["result"]["content"][0]["text"].as_str().unwrap();
            assert!(text.contains("failed to deserialize parameters"), "{text}");
        };
        // `message` missing.
        let resp = c.call("send", json!({"to": ["bob"]})).await;
        bad_args(&resp);
        assert!(
            resp["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("message")
        );
        // `message` of the wrong type.
        bad_args(&c.call("send", json!({"message": 42})).await);
        // Unknown argument.
        bad_args(&c.call("send", json!({"message": "x", "snyc": true})).await);
        // `target` missing; `lines` not an integer.
        bad_args(&c.call("look", json!({})).await);
        bad_args(
            &c.call("look", json!({"target": "bob", "lines": "ten"}))
                .await,
        );
        // An unknown tool is a JSON-RPC invalid-params error.
        let resp = c.call("shout", json!({})).await;
        assert_eq!(resp["error"]["code"], -32602, "{resp}");
        assert!(ops.calls().is_empty(), "{:?}", ops.calls());

        let resp = c
            .call("send", json!({"to": ["bob"], "message": "ok"}))
            .await;
        assert_eq!(result_json(&resp), send_json());
        assert_eq!(ops.calls().len(), 1);
        c.finish().await;
    }
}
