#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! `switchboard serve --store postgres://…`: the whole API on PostgreSQL, across a restart.
//! Needs `SWITCHBOARD_TEST_POSTGRES_URL` (set by `scripts/test`, via scripts/test-services).

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use switchboard_protocol::{CreateSessionRequest, MessageType, SendMessageRequest};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

#[tokio::test]
async fn serve_on_postgres_keeps_sessions_across_a_restart() {
    let db = Db::create().await;
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    llm.push(MockReply::text(&["Stored ", "in PostgreSQL"]));
    let env = [("SWITCHBOARD_STORE_URL", db.url.as_str())];
    let mut server = start(&dir.path().join("data"), &llm.base_url(), &env).await;
    let c = client(&server);
    let health: serde_json::Value = reqwest::get(format!("{}/v1/health", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["store"]["kind"], "postgres", "{health}");
    assert_eq!(health["store"]["status"], "ok");
    let password = db
        .url
        .split_once("://")
        .unwrap()
        .1
        .split_once('@')
        .unwrap()
        .0;
    let password = password.split_once(':').map(|p| p.1).unwrap_or("");
    assert!(
        password.is_empty() || !server.logs().contains(&format!(":{password}@")),
        "the password is never logged"
    );

    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut events = c.subscribe(s.id, None);
    let run = c
        .send_message(s.id, &SendMessageRequest::user("hi", MessageType::Message))
        .await
        .unwrap()
        .run_id;
    let done = until_run_ends(&mut events, run).await;
    assert_eq!(text_of(&done), "Stored in PostgreSQL");
    let last = c.get_session(s.id).await.unwrap().session.last_event_id;
    drop(events);
    server.stop().await;

    // Another process on the same database sees everything, and seq goes on from there.
    llm.push(MockReply::text(&["Again"]));
    let server = start(&dir.path().join("data2"), &llm.base_url(), &env).await;
    let c = client(&server);
    let shown = c.get_session(s.id).await.unwrap();
    assert_eq!(shown.session.last_event_id, last);
    let msgs = c.list_messages(s.id, None, None).await.unwrap();
    assert_eq!(msgs.total, 2);
    let mut replay = c.subscribe(s.id, None);
    let first = tokio::time::timeout(Duration::from_secs(10), replay.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.id, 1);
    drop(replay);
    let mut events = c.subscribe(s.id, Some(last));
    let run = c
        .send_message(
            s.id,
            &SendMessageRequest::user("again", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let done = until_run_ends(&mut events, run).await;
    assert_eq!(done.first().unwrap().id, last + 1, "seq continues");
    drop(events);
    drop(server);
    db.drop_now().await;
}

#[tokio::test]
async fn an_unreachable_store_is_a_clear_start_error_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(bin())
        .args([
            "serve",
            "--store",
            "postgres://sb:hunter2-secret@127.0.0.1:1/none",
        ])
        .env("SWITCHBOARD_DATA_DIR", dir.path())
        .env("SWITCHBOARD_LISTEN", "127.0.0.1:0")
        .env("SWITCHBOARD_CONFIG", "/dev/null")
        .env("SWITCHBOARD_TOKEN", TOKEN)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(60), out)
        .await
        .unwrap()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("opening store postgres://sb:***@127.0.0.1:1/none"),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}
