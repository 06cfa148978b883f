#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The OpenAI-compatible front door, driven by the official `openai` Python SDK (PyPI):
//! models, a streamed completion, the conversation continued by header and by metadata, a
//! denied tool call, and errors in OpenAI's shape raised as the SDK's exceptions.

mod common;

use common::*;
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_streams_continues_and_gets_its_errors() {
    let llm = MockLlm::start().await;
    llm.push(MockReply::text_slow(&["Hel", "lo ", "there"], 30));
    llm.push(MockReply::text(&["Again."]));
    llm.push(MockReply::text(&["Third."]));
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        serde_json::json!({"command": "touch denied.txt"}),
    ));
    llm.push(MockReply::text(&["Not running it."]));
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let cwd = ws.path().to_string_lossy().to_string();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_DEFAULT_CWD", cwd.as_str())],
    )
    .await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/openai_client.py");
    let url = server.url.clone();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .arg(script)
            .env("SB_URL", &url)
            .env("SB_TOKEN", TOKEN)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{}", server.logs());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();

    assert_eq!(v["models"], serde_json::json!(["switchboard/builtin"]));
    assert_eq!(v["streamed"], "Hello there");
    assert_eq!(v["finish"], "stop");
    assert!(v["usage"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["chunks"].as_u64().unwrap() >= 4,
        "role, text, finish, usage: {v}"
    );
    assert_eq!(v["second"], "Again.");
    assert_eq!(v["second_finish"], "stop");
    assert_eq!(v["third"], "Third.");
    assert_eq!(v["denied"], "Not running it.");
    assert!(
        !ws.path().join("denied.txt").exists(),
        "a denied command ran"
    );
    assert_eq!(v["unknown_model"]["status"], 404);
    assert_eq!(v["unknown_model"]["code"], "model_not_found");
    assert_eq!(v["unknown_model"]["type"], "not_found_error");
    assert_eq!(v["bad_token"]["status"], 401);
    assert_eq!(v["bad_token"]["code"], "invalid_token");
    assert_eq!(v["unknown_session"]["code"], "session_not_found");

    // One session carried the three turns; the first had the client's context.
    let c = client(&server);
    let session: uuid::Uuid = v["session"].as_str().unwrap().parse().unwrap();
    let msgs = c.list_messages(session, None, None).await.unwrap().messages;
    let users: Vec<&str> = msgs
        .iter()
        .filter(|m| m.role == switchboard_protocol::Role::User)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(users.len(), 3, "{users:?}");
    assert!(users[0].starts_with("say hello"), "{users:?}");
    assert_eq!(users[1], "and again");
    let first = llm.chat_requests()[0].body.to_string();
    assert!(first.contains("Be brief."), "{first}");
    assert!(first.contains("earlier answer"), "{first}");
    // The denied call was recorded as refused, in its own session.
    let denied: uuid::Uuid = v["denied_session"].as_str().unwrap().parse().unwrap();
    assert_ne!(denied, session);
    let transcript = c.transcript_markdown(denied).await.unwrap();
    assert!(
        transcript.contains("OpenAI-compatible endpoint"),
        "{transcript}"
    );
}
