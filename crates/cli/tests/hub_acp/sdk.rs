//! The official Python ACP SDK (`agent-client-protocol` on PyPI, installed by scripts/test)
//! drives `switchboard acp` through the methods of ACP beyond create/prompt/approve (the
//! script, `tests/acp_sdk_client.py`, checks each answer), and the server shows their effect.

use super::*;

/// `mock-model` priced, so the built-in agent's turn has a cost to report.
const PRICES: &str = "\n[prices.\"openai/mock-model\"]\ninput = 2.0\noutput = 8.0\n";

async fn sdk(url: &str, ws: &std::path::Path, args: &[&str]) -> serde_json::Value {
    sdk_with(url, ws, args, &[]).await
}

async fn sdk_with(
    url: &str,
    ws: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> serde_json::Value {
    let ws = ws.display().to_string();
    let mut all = vec![
        ("SWITCHBOARD_URL", url),
        ("SWITCHBOARD_TOKEN", TOKEN),
        ("WS", ws.as_str()),
    ];
    all.extend_from_slice(env);
    python("acp_sdk_client.py", args, &all).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_drives_every_stable_method() {
    let world = World::new().await;
    let mut config = std::fs::read_to_string(&world.config).unwrap();
    config.push_str(PRICES);
    std::fs::write(&world.config, config).unwrap();
    let ws = world.ws.path().canonicalize().unwrap();
    let server = world.server(&[]).await;
    let c = client(&server);

    let ids = sdk(&server.url, &ws, &["main"]).await;
    let id = |k: &str| Uuid::parse_str(ids[k].as_str().unwrap()).unwrap();

    // The config options changed the session on the server.
    let b = c.get_session(id("builtin")).await.unwrap();
    assert_eq!(b.config.model.as_deref(), Some("mock-model-b"));
    assert_eq!(
        b.config.permission_mode,
        switchboard_protocol::PermissionMode::ReadOnly
    );
    assert!(b.usage.unwrap().cost_microdollars > 0);
    // The reason from the editor's form is the rejection's, as every surface shows it.
    let (reason, _) = rejection(&server.url, id("tool")).await;
    assert!(
        reason.ends_with("denied in the editor: not on main"),
        "{reason}"
    );
    // Deleted on the server, not only here.
    assert!(c.get_session(id("deleted")).await.is_err());

    // The server restarts; a new editor resumes the session and goes on with it.
    drop(server);
    let server = world.server(&[]).await;
    let tool = ids["tool"].as_str().unwrap();
    let resumed = sdk(&server.url, &ws, &["resume", tool]).await;
    assert_eq!(resumed["resumed"], tool);
}

/// The SDK's remote clients on `/v1/acp`: streamable HTTP and the WebSocket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_reaches_v1_acp_over_http_and_websocket() {
    let world = World::new().await;
    let ws = world.ws.path().canonicalize().unwrap();
    let server = world.server(&[]).await;
    let c = client(&server);
    let acp_url = format!("{}/v1/acp", server.url);
    // A session made elsewhere, with a turn in it, for the editor to load.
    let other = c
        .create_session(&CreateSessionRequest {
            cwd: Some(ws.display().to_string()),
            backend: Some(BackendSpec::Acp("test".into())),
            ..CreateSessionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let (mut events, run) = send(&c, other, "made elsewhere").await;
    until_run_ends(&mut events, run).await;
    let other = other.to_string();
    for kind in ["http", "ws"] {
        let out = sdk_with(
            &server.url,
            &ws,
            &[kind],
            &[("ACP_URL", &acp_url), ("OTHER_SESSION", &other)],
        )
        .await;
        let id = Uuid::parse_str(out["session"].as_str().unwrap()).unwrap();
        let detail = c.get_session(id).await.unwrap();
        assert_eq!(
            detail.config.backend,
            BackendSpec::Acp("test".into()),
            "{kind}"
        );
    }
}

/// Streamable HTTP by hand: the connection's stream numbers its events, and a GET with
/// `Last-Event-ID` resumes after the one named (what a client does after a dropped
/// stream), with nothing doubled or skipped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_over_http_streams_resume_with_last_event_id() {
    let world = World::new().await;
    let server = world.server(&[]).await;
    let url = format!("{}/v1/acp?agent=test", server.url);
    let http = reqwest::Client::new();
    let post = |body: serde_json::Value, conn: Option<String>| {
        let mut req = http.post(&url).bearer_auth(TOKEN).json(&body);
        if let Some(c) = conn {
            req = req.header("acp-connection-id", c);
        }
        req.send()
    };
    let init = post(
        serde_json::json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": 1, "clientCapabilities": {}}}),
        None,
    )
    .await
    .unwrap();
    assert_eq!(init.status(), 200);
    let conn = init.headers()["acp-connection-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let answer: serde_json::Value = init.json().await.unwrap();
    assert_eq!(answer["id"], 0);
    assert!(answer["result"]["agentCapabilities"]["sessionCapabilities"]["resume"].is_object());
    // Three requests answered on the connection's stream.
    for id in 1..=3 {
        let r = post(
            serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "session/list", "params": {}}),
            Some(conn.clone()),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), 202);
    }
    let read = |last: Option<&str>, n: usize| {
        let mut req = http
            .get(format!("{}/v1/acp", server.url))
            .bearer_auth(TOKEN)
            .header("accept", "text/event-stream")
            .header("acp-connection-id", &conn);
        if let Some(l) = last {
            req = req.header("last-event-id", l);
        }
        async move {
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200);
            let mut sse = RawSse::from_response(resp);
            let mut got = Vec::new();
            while got.len() < n {
                let f = tokio::time::timeout(WAIT, sse.next_frame())
                    .await
                    .expect("an event")
                    .expect("the stream goes on");
                let msg: serde_json::Value = serde_json::from_str(&f.data).unwrap();
                got.push((f.id.unwrap(), msg["id"].as_u64().unwrap()));
            }
            got
        }
    };
    // (The agent answers requests as each is done: in any order.)
    let first = read(None, 3).await;
    let mut answered: Vec<u64> = first.iter().map(|(_, rpc)| *rpc).collect();
    answered.sort();
    assert_eq!(answered, [1, 2, 3]);
    assert!(
        first.windows(2).all(|w| w[0].0 < w[1].0),
        "numbered in order: {first:?}"
    );
    // The stream dropped after the first answer: resumed after it, the other two again.
    let after = first[0].0.to_string();
    let again = read(Some(&after), 2).await;
    assert_eq!(again, first[1..].to_vec());
    // DELETE ends the connection, and the stream a client still reads ends with it.
    let open_stream = http
        .get(format!("{}/v1/acp", server.url))
        .bearer_auth(TOKEN)
        .header("accept", "text/event-stream")
        .header("acp-connection-id", &conn)
        .send()
        .await
        .unwrap();
    assert_eq!(open_stream.status(), 200);
    let mut open_stream = RawSse::from_response(open_stream);
    let r = http
        .delete(format!("{}/v1/acp", server.url))
        .bearer_auth(TOKEN)
        .header("acp-connection-id", &conn)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let ended = tokio::time::timeout(WAIT, open_stream.next_frame()).await;
    assert!(
        matches!(ended, Ok(None)),
        "the open stream ends with the connection"
    );
    let r = post(
        serde_json::json!({"jsonrpc": "2.0", "id": 9, "method": "session/list", "params": {}}),
        Some(conn.clone()),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 404);
    let b: serde_json::Value = r.json().await.unwrap();
    assert_eq!(b["code"], "connection_not_found");
}
