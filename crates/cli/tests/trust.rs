#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Trust boundaries (docs/operations.md, "Trust boundaries"), driven through the real
//! binary: what an agent, a chat member, a relay member, a schedule and a bus peer can and
//! cannot reach.

mod common;

use common::*;
use switchboard_protocol::{CreateSessionRequest, ErrorBody};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

/// The common layout: the workspace holds the data directory (started from `$HOME`). The
/// agent's file tools cannot read the admin token, in the default mode or in full access;
/// sharing it is refused; a workspace inside the state is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_cannot_reach_switchboards_own_state() {
    let llm = MockLlm::start().await;
    let home = tempfile::tempdir().unwrap();
    let home_path = home.path().canonicalize().unwrap();
    let data = home_path.join(".local/share/switchboard");
    std::fs::create_dir_all(&data).unwrap();
    let server = start(&data, &llm.base_url(), &[]).await;
    // The token the server was started with is in the environment; write the token file as
    // a default start would, so there is something to steal.
    std::fs::write(data.join("token"), format!("{TOKEN}\n")).unwrap();
    let c = client(&server);
    for mode in ["workspace-write", "full-access"] {
        let s = c
            .create_session(&CreateSessionRequest {
                cwd: Some(home_path.display().to_string()),
                permission_mode: Some(serde_json::from_value(serde_json::json!(mode)).unwrap()),
                ..CreateSessionRequest::default()
            })
            .await
            .unwrap();
        llm.push(MockReply::tool_call(
            "v1",
            "view",
            serde_json::json!({ "path": ".local/share/switchboard/token" }),
        ));
        llm.push(MockReply::tool_call(
            "v2",
            "send_file",
            serde_json::json!({ "path": data.join("token").display().to_string() }),
        ));
        llm.push(MockReply::Text {
            chunks: vec!["no luck".into()],
            delay_ms: 0,
        });
        let (mut stream, run) = send(&c, s.id, "print the admin token").await;
        let events = until_run_ends(&mut stream, run).await;
        let last = events.last().unwrap();
        assert!(
            format!("{:?}", last.event).contains("RunCompleted"),
            "{mode}: {events:?}"
        );
        let bodies: Vec<String> = llm
            .requests()
            .into_iter()
            .map(|r| r.body.to_string())
            .collect();
        let last_body = bodies.last().unwrap();
        assert_eq!(
            last_body.matches("forbidden_path").count(),
            2,
            "{mode}: both calls refused as forbidden_path: {last_body}"
        );
        assert!(
            bodies.iter().all(|b| !b.contains(TOKEN)),
            "{mode}: the token never reached the model"
        );
        assert!(
            !format!("{events:?}").contains("FileShared"),
            "{mode}: nothing shared"
        );
    }
    // A workspace inside the state: refused with its code.
    let resp = reqwest::Client::new()
        .post(format!("{}/v1/sessions", server.url))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({ "cwd": data.display().to_string() }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 403);
    let body: ErrorBody = resp.json().await.unwrap();
    assert_eq!(body.code, "forbidden_path", "{}", body.error);
    // The start-up lines say which workspace sessions get by default.
    assert!(
        server.logs().contains("workspace: /tmp"),
        "{}",
        server.logs()
    );
}
