#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! MCP servers for every backend: a real MCP server (the official Python SDK, over stdio
//! and streamable HTTP)
//! whose tools the built-in agent calls through the permission gate — the read-only one at
//! once, the other after an approval — a server that cannot start is a notice, and an ACP
//! agent gets the session's servers in `session/new`.

mod common;

use common::*;
use switchboard_protocol::{
    AgentEvent, CreateSessionRequest, DecisionAction, McpServerSpec, MessageType,
    SendMessageRequest,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

fn calc() -> McpServerSpec {
    McpServerSpec {
        name: "calc".into(),
        command: Some("python3".into()),
        args: vec![concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp_test_server.py").into()],
        env: [("CALC_SECRET".to_string(), "s3cret".to_string())].into(),
        ..McpServerSpec::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_agent_calls_mcp_tools_through_the_permission_gate() {
    let llm = MockLlm::start().await;
    llm.push(MockReply::tool_call(
        "c1",
        "mcp__calc__add",
        serde_json::json!({"a": 2, "b": 3}),
    ));
    llm.push(MockReply::tool_call(
        "c2",
        "mcp__calc__note",
        serde_json::json!({"text": "from the agent"}),
    ));
    llm.push(MockReply::text(&["All done."]));
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    // A server-wide server that cannot start: a notice, and the run goes on.
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        "[mcp.servers.broken]\ncommand = \"/nonexistent/mcp-server\"\n",
    )
    .unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_CONFIG", config.to_str().unwrap())],
    )
    .await;
    let c = client(&server);
    let session = c
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.path().to_string_lossy().into_owned()),
            mcp_servers: Some(vec![calc()]),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    // The API never shows the env's values.
    let shown = c.get_session(session).await.unwrap().config.mcp_servers;
    assert_eq!(shown[0].env["CALC_SECRET"], "[redacted]");

    let mut events = c.subscribe(session, None);
    let run = c
        .send_message(
            session,
            &SendMessageRequest::user("add and note", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    // `add` is read-only: it ran without asking; `note` waits for a decision.
    let seen = until(&mut events, "the approval request", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    let notices: Vec<String> = seen
        .iter()
        .filter_map(|e| match &e.event {
            AgentEvent::Notice { message, .. } => Some(message.clone()),
            _ => None,
        })
        .collect();
    assert!(
        notices
            .iter()
            .any(|n| n.contains("\"broken\" could not be started")),
        "{notices:?}"
    );
    assert!(seen.iter().any(|e| matches!(&e.event,
        AgentEvent::ToolExecutionCompleted { result, is_error: false, .. } if result == "5")));
    let pending = c.pending_tools(session).await.unwrap();
    assert_eq!(pending.tool_calls[0].name, "mcp__calc__note");
    assert!(!ws.path().join("note.txt").exists());
    c.decide_tools(session, &decide(run, "c2", DecisionAction::Accept, None))
        .await
        .unwrap();
    let evs = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&evs), "All done.");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("note.txt")).unwrap(),
        "from the agent",
        "the MCP server ran in the session's workspace"
    );
    // The model was offered the tools, and got the results.
    let reqs = llm.chat_requests();
    let tools = reqs[0].body["tools"].to_string();
    assert!(
        tools.contains("mcp__calc__add") && tools.contains("mcp__calc__note"),
        "{tools}"
    );
    assert!(
        reqs[1].body.to_string().contains("\"5\""),
        "{}",
        reqs[1].body
    );

    // Bad specs are refused with the field named.
    let err = c
        .create_session(&CreateSessionRequest {
            mcp_servers: Some(vec![McpServerSpec {
                name: "two ways".into(),
                command: Some("x".into()),
                url: Some("http://x".into()),
                ..McpServerSpec::default()
            }]),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some("unprocessable_entity"), "{err}");
    assert!(err.to_string().contains("mcp_servers"), "{err}");
}

/// The test server over streamable HTTP in `dir`, on a port it binds itself (`--http 0`: a
/// port picked here and bound later by Python could be taken in between, as a CI run once
/// showed); returns it and its URL once it prints that it listens.
async fn http_calc(dir: &std::path::Path, token: &str) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/mcp_test_server.py"
        ))
        .args(["--http", "0"])
        .env("MCP_TEST_TOKEN", token)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let url = tokio::time::timeout(std::time::Duration::from_secs(30), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            if let Some(base) = line.strip_prefix("listening on ") {
                return format!("{base}/mcp");
            }
        }
        panic!("the MCP test server exited without listening")
    })
    .await
    .expect("the MCP test server listens within 30 s");
    // Keep reading, so that a later print never meets a closed pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_built_in_agent_reaches_mcp_servers_over_streamable_http() {
    let srv_dir = tempfile::tempdir().unwrap();
    let (_srv, url) = http_calc(srv_dir.path(), "mcp-secret-token").await;
    let llm = MockLlm::start().await;
    llm.push(MockReply::tool_call(
        "c1",
        "mcp__calc__add",
        serde_json::json!({"a": 20, "b": 22}),
    ));
    llm.push(MockReply::tool_call(
        "c2",
        "mcp__calc__note",
        serde_json::json!({"text": "over http"}),
    ));
    llm.push(MockReply::text(&["Done over HTTP."]));
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let spec = |name: &str, token: &str| McpServerSpec {
        name: name.into(),
        url: Some(url.clone()),
        headers: [("Authorization".to_string(), format!("Bearer {token}"))].into(),
        ..McpServerSpec::default()
    };
    let session = c
        .create_session(&CreateSessionRequest {
            // A second server with the wrong token: refused by it, a notice, the run goes on.
            mcp_servers: Some(vec![
                spec("calc", "mcp-secret-token"),
                spec("locked", "wrong"),
            ]),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let shown = c.get_session(session).await.unwrap().config.mcp_servers;
    assert_eq!(shown[0].headers["Authorization"], "[redacted]");
    let mut events = c.subscribe(session, None);
    let run = c
        .send_message(
            session,
            &SendMessageRequest::user("add and note over http", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let seen = until(&mut events, "the approval request", |e| {
        matches!(e, AgentEvent::WaitingForToolApproval { .. })
    })
    .await;
    assert!(
        seen.iter().any(|e| matches!(&e.event,
            AgentEvent::Notice { message, .. } if message.contains("\"locked\" could not be started"))),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|e| matches!(&e.event,
            AgentEvent::ToolExecutionCompleted { result, is_error: false, .. } if result == "42")),
        "the read-only tool ran without asking: {seen:?}"
    );
    assert!(
        !srv_dir.path().join("note.txt").exists(),
        "not before the approval"
    );
    c.decide_tools(session, &decide(run, "c2", DecisionAction::Accept, None))
        .await
        .unwrap();
    let evs = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&evs), "Done over HTTP.");
    assert_eq!(
        std::fs::read_to_string(srv_dir.path().join("note.txt")).unwrap(),
        "over http"
    );
}
