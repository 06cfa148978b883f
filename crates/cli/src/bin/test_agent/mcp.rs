//! A real MCP client over stdio, for the markers that call the `switchboard` MCP server.

use std::time::Duration;

use agent_client_protocol::v1::schema::McpServer;
use serde_json::json;

/// One MCP client connection over a child's stdio (newline-delimited JSON-RPC).
pub(crate) struct McpPipe {
    pub(crate) stdin: tokio::process::ChildStdin,
    pub(crate) lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    pub(crate) next_id: u64,
}

impl McpPipe {
    pub(crate) async fn write(&mut self, msg: serde_json::Value) -> Result<(), String> {
        use tokio::io::AsyncWriteExt as _;
        self.stdin
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .map_err(|e| format!("writing to the MCP server: {e}"))
    }

    /// A request, and its answer's `result` (other messages in between are skipped).
    pub(crate) async fn call(
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
pub(crate) async fn mcp_send_file(
    servers: &[McpServer],
    path: &str,
) -> Result<(bool, String), String> {
    mcp_call(
        servers,
        "switchboard",
        "send_file",
        json!({"path": path, "caption": "from the test agent"}),
    )
    .await
}

/// Calls `tool` of the stdio MCP server named `name` in `servers` (see [`mcp_send_file`]).
pub(crate) async fn mcp_call(
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
pub(crate) async fn probe_token(servers: &[McpServer], other: &str) -> Result<String, String> {
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
