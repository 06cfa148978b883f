use parking_lot::Mutex;
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
    Search(String, Option<u32>),
}

/// Records calls; answers with `fail` if set, else a canned JSON per operation.
#[derive(Default)]
struct FakeOps {
    calls: Mutex<Vec<Call>>,
    fail: Option<RelayCallError>,
}

impl FakeOps {
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }
    fn answer(&self, call: Call, ok: Value) -> Result<Value, RelayCallError> {
        self.calls.lock().push(call);
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

    async fn search(&self, query: String, limit: Option<u32>) -> Result<Value, RelayCallError> {
        self.answer(Call::Search(query, limit), json!({"hits": []}))
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
    assert_eq!(tool_names(&mut c).await, ["search_sessions", "send_file"]);
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
        ["list", "look", "search_sessions", "send", "send_file"]
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
