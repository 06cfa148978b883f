//! MCP servers' tools for the built-in agent, through the `rmcp` client.
//!
//! For each run the agent starts the session's stdio MCP servers in its workspace (their
//! own process groups, stopped when the run ends) and connects to its streamable-HTTP ones
//! (with their headers; the MCP session is ended when the run ends), lists their tools and
//! offers them to the model as `mcp__SERVER__TOOL`. Each call goes through the same permission gate as the
//! built-in tools: a tool annotated `readOnlyHint: true` counts as a read, everything else
//! as "other" (asks unless the mode or `auto_approve` allows it). A server that cannot be
//! started or does not answer is left out with a `Notice`; the run goes on.

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use rmcp::ServiceExt as _;
use rmcp::model::{CallToolRequestParams, Tool};
use rmcp::service::{RoleClient, RunningService};
use serde_json::Value;
use switchboard_engine::ToolClass;
use switchboard_protocol::McpServerSpec;
use tokio_util::sync::CancellationToken;

use crate::provider::ToolSpec;

/// How long a server may take to start and list its tools.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one tool call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(300);
/// Longest tool result handed to the model, in characters.
const MAX_RESULT_CHARS: usize = 50_000;

struct Server {
    name: String,
    client: RunningService<RoleClient, ()>,
    /// Kept so that dropping the server stops the process (none for an HTTP server).
    _child: Option<tokio::process::Child>,
    /// What the sandbox keeps while a confined server runs.
    _confined: Option<switchboard_sandbox::Confined>,
}

/// How a run's MCP servers over stdio are confined: with the run's workspace, the network of
/// `[sandbox] mcp_network`.
pub(crate) struct McpSandbox<'a> {
    pub sandbox: &'a switchboard_sandbox::Sandbox,
    pub hidden: Vec<std::path::PathBuf>,
}

/// One exposed tool: where it lives and what it is.
struct Exposed {
    server: usize,
    tool: Tool,
}

/// The MCP tools of one run.
#[derive(Default)]
pub(crate) struct McpTools {
    servers: Vec<Server>,
    tools: HashMap<String, Exposed>,
}

/// `mcp__SERVER__TOOL` as a function name every provider accepts (`[A-Za-z0-9_-]`, at most
/// 64 characters).
fn exposed_name(server: &str, tool: &str) -> String {
    let clean = |s: &str| -> String {
        s.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut n = format!("mcp__{}__{}", clean(server), clean(tool));
    n.truncate(64);
    n
}

impl McpTools {
    /// Starts the servers in `cwd` (those over stdio confined by `sandbox`, if given); returns
    /// the tools and a notice per server left out.
    pub(crate) async fn connect(
        specs: &[McpServerSpec],
        cwd: &Path,
        sandbox: Option<McpSandbox<'_>>,
    ) -> (Self, Vec<String>) {
        let mut out = Self::default();
        let mut notices = Vec::new();
        for spec in specs {
            let started = match (&spec.command, &spec.url) {
                (Some(command), _) => start(spec, command, cwd, sandbox.as_ref()).await,
                (None, Some(url)) => connect_http(spec, url).await,
                (None, None) => Err("neither command nor url".to_owned()),
            };
            match started {
                Ok((server, tools)) => {
                    let index = out.servers.len();
                    for tool in tools {
                        let name = exposed_name(&spec.name, &tool.name);
                        if out.tools.contains_key(&name) {
                            notices.push(format!(
                                "MCP tool {name} is offered twice; the second is left out"
                            ));
                            continue;
                        }
                        out.tools.insert(
                            name,
                            Exposed {
                                server: index,
                                tool,
                            },
                        );
                    }
                    out.servers.push(server);
                }
                Err(e) if e == TIMED_OUT => notices.push(format!(
                    "MCP server {:?} did not answer within {} s; its tools are left out",
                    spec.name,
                    START_TIMEOUT.as_secs()
                )),
                Err(e) => notices.push(format!(
                    "MCP server {:?} could not be started ({e}); its tools are left out",
                    spec.name
                )),
            }
        }
        (out, notices)
    }

    /// The tools as the model sees them, by name.
    pub(crate) fn specs(&self) -> Vec<ToolSpec> {
        let mut specs: Vec<ToolSpec> = self
            .tools
            .iter()
            .map(|(name, e)| ToolSpec {
                name: name.clone(),
                description: format!(
                    "{} (MCP server {})",
                    e.tool.description.as_deref().unwrap_or(&e.tool.name),
                    self.servers[e.server].name
                ),
                input_schema: Value::Object((*e.tool.input_schema).clone()),
            })
            .collect();
        specs.sort_by(|a, b| a.name.cmp(&b.name));
        specs
    }

    /// How a call of `name` is approved, if it is one of these tools.
    pub(crate) fn class(&self, name: &str) -> Option<ToolClass> {
        let e = self.tools.get(name)?;
        let read_only = e
            .tool
            .annotations
            .as_ref()
            .and_then(|a| a.read_only_hint)
            .unwrap_or(false);
        Some(if read_only {
            ToolClass::Read
        } else {
            ToolClass::Other
        })
    }

    /// Calls `name` (one of these tools): the result's text and whether it is an error.
    pub(crate) async fn call(
        &self,
        name: &str,
        args: &Value,
        cancel: &CancellationToken,
    ) -> Option<(String, bool)> {
        let e = self.tools.get(name)?;
        let server = &self.servers[e.server];
        let mut params = CallToolRequestParams::new(e.tool.name.to_string());
        params.arguments = match args {
            Value::Object(m) => Some(m.clone()),
            Value::Null => None,
            _ => return Some((format!("{name}: arguments must be an object"), true)),
        };
        let call = tokio::time::timeout(CALL_TIMEOUT, server.client.call_tool(params));
        let result = tokio::select! {
            r = call => r,
            _ = cancel.cancelled() => return Some(("cancelled".into(), true)),
        };
        Some(match result {
            Err(_) => (
                format!("{name}: no answer within {} s", CALL_TIMEOUT.as_secs()),
                true,
            ),
            Ok(Err(e)) => (format!("{name}: {e}"), true),
            Ok(Ok(r)) => {
                let mut text: Vec<String> = r
                    .content
                    .iter()
                    .filter_map(|c| {
                        let v = serde_json::to_value(c).ok()?;
                        match v.get("type").and_then(Value::as_str) {
                            Some("text") => {
                                v.get("text").and_then(Value::as_str).map(str::to_owned)
                            }
                            Some(kind) => Some(format!("[{kind} content]")),
                            None => None,
                        }
                    })
                    .collect();
                if text.is_empty()
                    && let Some(s) = &r.structured_content
                {
                    text.push(s.to_string());
                }
                let mut text = text.join("\n");
                if text.chars().count() > MAX_RESULT_CHARS {
                    text = text.chars().take(MAX_RESULT_CHARS).collect::<String>() + "\n[cut]";
                }
                (text, r.is_error.unwrap_or(false))
            }
        })
    }

    /// Ends every server's session (their processes are killed as they drop).
    pub(crate) async fn close(self) {
        for s in self.servers {
            let _ = s.client.cancel().await;
        }
    }
}

/// The error of a server that did not start in time.
const TIMED_OUT: &str = "timed out";

/// The handshake and the tool list, within [`START_TIMEOUT`].
async fn handshake<T, E, A>(
    name: &str,
    transport: T,
) -> Result<(RunningService<RoleClient, ()>, Vec<Tool>), String>
where
    T: rmcp::transport::IntoTransport<RoleClient, E, A>,
    E: std::error::Error + Send + Sync + 'static,
{
    let work = async {
        let client = ().serve(transport).await.map_err(|e| format!("MCP handshake: {e}"))?;
        let tools = client
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list: {e}"))?;
        tracing::info!(server = %name, tools = tools.len(), "MCP server connected");
        Ok((client, tools))
    };
    tokio::time::timeout(START_TIMEOUT, work)
        .await
        .unwrap_or_else(|_| Err(TIMED_OUT.to_owned()))
}

/// A streamable-HTTP server: `headers` go with every request (`Authorization: Bearer …`
/// as rmcp's auth header, other schemes as they are).
async fn connect_http(spec: &McpServerSpec, url: &str) -> Result<(Server, Vec<Tool>), String> {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
    // The workspace's rustls provider (ring) for reqwest 0.13; a no-op once installed.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest013::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let mut config = StreamableHttpClientTransportConfig::with_uri(url.to_owned());
    let mut headers = HashMap::new();
    for (k, v) in &spec.headers {
        // rmcp sends its auth header as `Bearer …`; any other scheme goes as it is.
        if k.eq_ignore_ascii_case("authorization")
            && v.len() > 7
            && v[..7].eq_ignore_ascii_case("bearer ")
        {
            config = config.auth_header(v[7..].trim().to_owned());
            continue;
        }
        if [
            "accept",
            "mcp-session-id",
            "last-event-id",
            "mcp-protocol-version",
        ]
        .iter()
        .any(|r| k.eq_ignore_ascii_case(r))
        {
            return Err(format!(
                "header {k} is the MCP transport's own; leave it out"
            ));
        }
        let name = http::HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| format!("header name {k:?} is not valid"))?;
        let value = http::HeaderValue::from_str(v)
            .map_err(|_| format!("the value of header {k} is not valid"))?;
        headers.insert(name, value);
    }
    let transport =
        StreamableHttpClientTransport::with_client(http, config.custom_headers(headers));
    let (client, tools) = handshake(&spec.name, transport).await?;
    Ok((
        Server {
            name: spec.name.clone(),
            client,
            _child: None,
            _confined: None,
        },
        tools,
    ))
}

async fn start(
    spec: &McpServerSpec,
    command: &str,
    cwd: &Path,
    sandbox: Option<&McpSandbox<'_>>,
) -> Result<(Server, Vec<Tool>), String> {
    let (mut cmd, confined) = match sandbox {
        Some(s) if s.sandbox.available => {
            let needed = switchboard_sandbox::needed_by(command, &spec.args);
            let env: Vec<(String, String)> = spec
                .env
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let spec_ = switchboard_sandbox::Spec {
                workspace: cwd,
                hidden: &s.hidden,
                read_write: &[],
                read_only: &needed,
                network: &s.sandbox.mcp_network,
                connect_ports: &[],
                private_home: true,
                own_pids: true,
                env: &env,
            };
            let (cmd, confined) = s
                .sandbox
                .command(&spec_, command)
                .map_err(|e| e.to_string())?;
            (cmd, Some(confined))
        }
        Some(s) if s.sandbox.required => {
            return Err("refused: the sandbox is required and this machine cannot sandbox processes (no Landlock in its kernel)".into());
        }
        _ => (tokio::process::Command::new(command), None),
    };
    // The server's secrets are not the MCP server's (as for ACP agents).
    switchboard_engine::child::scrub_server_secrets(&mut cmd, &spec.env);
    let mut child = cmd
        .args(&spec.args)
        .envs(&spec.env)
        .current_dir(cwd)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("{command}: {e}"))?;
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err("no pipes to the process".into());
    };
    let (client, tools) = handshake(&spec.name, (stdout, stdin)).await?;
    Ok((
        Server {
            name: spec.name.clone(),
            client,
            _child: Some(child),
            _confined: confined,
        },
        tools,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_are_valid_function_names() {
        assert_eq!(exposed_name("calc", "add"), "mcp__calc__add");
        assert_eq!(exposed_name("my server", "do.it"), "mcp__my_server__do_it");
        let long = exposed_name("s", &"x".repeat(100));
        assert_eq!(long.len(), 64);
    }
}
