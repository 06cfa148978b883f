//! The official Python ACP SDK (`agent-client-protocol` on PyPI, installed by scripts/test)
//! drives `switchboard acp` through the methods of ACP beyond create/prompt/approve (the
//! script, `tests/acp_sdk_client.py`, checks each answer), and the server shows their effect.

use super::*;

/// `mock-model` priced, so the built-in agent's turn has a cost to report.
const PRICES: &str = "\n[prices.\"openai/mock-model\"]\ninput = 2.0\noutput = 8.0\n";

async fn sdk(url: &str, ws: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let out = tokio::process::Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/acp_sdk_client.py"
        ))
        .args(args)
        .env("SWITCHBOARD_BIN", bin())
        .env("SWITCHBOARD_URL", url)
        .env("SWITCHBOARD_TOKEN", TOKEN)
        .env("WS", ws)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out)
        .await
        .expect("the SDK script ends")
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the Python ACP SDK script failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap()
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
    let mut sse = RawSse::connect(&server.url, id("tool"), Some(0)).await;
    let reason = tokio::time::timeout(WAIT, async {
        loop {
            let (_, _, env) = sse.next().await.expect("the log has the rejection");
            if let AgentEvent::ToolRejected { reason, .. } = env.event {
                return reason;
            }
        }
    })
    .await
    .unwrap();
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
