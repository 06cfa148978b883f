//! The official MCP Python SDK (`mcp` on PyPI) drives Switchboard's sessions as tools over
//! streamable HTTP at `/v1/mcp` (and `switchboard mcp --hub` over stdio): the script,
//! `tests/mcp_hub_client.py`, checks each answer; the server shows their effect.

use super::*;
use switchboard_protocol::people::{CreateTokenRequest, CreateUserRequest, Role, Scope};

async fn script(args: &[&str], env: &[(&str, &str)]) -> serde_json::Value {
    python("mcp_hub_client.py", args, env).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_mcp_sdk_drives_sessions_over_streamable_http() {
    let world = World::new().await;
    let ws = world.ws.path().canonicalize().unwrap();
    let ws = ws.to_str().unwrap();
    let server = world.server(&[]).await;
    let c = client(&server);
    let url = format!("{}/v1/mcp", server.url);

    let seen = script(
        &["main"],
        &[("MCP_URL", &url), ("TOKEN", TOKEN), ("WS", ws)],
    )
    .await;
    let builtin = Uuid::parse_str(seen["builtin"].as_str().unwrap()).unwrap();
    let detail = c.get_session(builtin).await.unwrap();
    assert_eq!(detail.session.title, "from MCP");
    assert_eq!(detail.session.cwd, ws);
    assert_eq!(detail.config.backend, BackendSpec::Builtin);
    // The denial over MCP is the run's, with its reason and who decided.
    let tool = Uuid::parse_str(seen["tool"].as_str().unwrap()).unwrap();
    let (reason, by) = rejection(&server.url, tool).await;
    assert!(reason.ends_with("not over MCP"), "{reason}");
    assert_eq!(by.as_deref(), Some("an MCP client"));

    // A person's token with `sessions:read` only: the tools refuse what it may not do.
    c.create_user(&CreateUserRequest {
        name: "reader".into(),
        role: Role::Member,
        password: None,
    })
    .await
    .unwrap();
    let read = c
        .create_token(&CreateTokenRequest {
            user: Some("reader".into()),
            name: "mcp".into(),
            scopes: vec![Scope::SessionsRead],
            expires_in_days: None,
        })
        .await
        .unwrap();
    let refused = script(
        &["read-only"],
        &[
            ("MCP_URL", &url),
            ("READ_TOKEN", &read.token),
            ("BUILTIN", &builtin.to_string()),
        ],
    )
    .await;
    assert_eq!(refused["start"], "forbidden", "{refused}");
    // Someone else's session is not even there for this person.
    assert_eq!(refused["send"], "session_not_found", "{refused}");
    assert_eq!(refused["listed"], serde_json::json!([]), "{refused}");

    // An MCP session is its caller's: another token naming it gets nothing.
    let init = http_init(&url).await;
    let r = reqwest::Client::new()
        .delete(&url)
        .bearer_auth(&read.token)
        .header("mcp-session-id", &init)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["code"], "session_not_found");
    let r = reqwest::Client::new()
        .delete(&url)
        .bearer_auth(TOKEN)
        .header("mcp-session-id", &init)
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());

    // `switchboard mcp --hub` on stdio: the same tools, with the command's server and token.
    let stdio = script(
        &["stdio"],
        &[
            ("SWITCHBOARD_URL", &server.url),
            ("SWITCHBOARD_TOKEN", TOKEN),
        ],
    )
    .await;
    let listed: Vec<&str> = stdio["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap())
        .collect();
    assert!(listed.contains(&builtin.to_string().as_str()), "{stdio}");

    // The transport's refusals are the API's errors.
    let http = reqwest::Client::new();
    let r = http
        .post(&url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["code"], "not_acceptable");
    let r = http
        .post(&url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"foo": 1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["code"], "invalid_message");
    let r = http.post(&url).body("{}").send().await.unwrap();
    assert_eq!(r.status(), 401);
}

/// `initialize` by hand (the 2025-06-18 version, which has sessions): the session's id.
async fn http_init(url: &str) -> String {
    let r = reqwest::Client::new()
        .post(url)
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "test", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.headers()["mcp-session-id"].to_str().unwrap().to_owned()
}
