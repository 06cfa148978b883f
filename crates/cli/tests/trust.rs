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

/// `Idempotency-Key` on `POST …/messages`: a repeat answers the first send's run (while it
/// runs, and after), starts nothing and stores nothing; follow-ups likewise; a malformed key
/// is a 400 `invalid_header`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_repeated_with_its_idempotency_key_runs_once() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    llm.push(MockReply::Text {
        chunks: vec!["once".into(), " only".into()],
        delay_ms: 300,
    });
    let http = reqwest::Client::new();
    let post = |key: &'static str, kind: &'static str, text: &'static str| {
        http.post(format!("{}/v1/sessions/{}/messages", server.url, s.id))
            .bearer_auth(TOKEN)
            .header("Idempotency-Key", key)
            .json(&serde_json::json!({
                "message": { "role": "user", "content": text },
                "type": kind,
            }))
            .send()
    };
    let run_of = |r: reqwest::Response| async move {
        assert_eq!(r.status(), 200);
        let v: serde_json::Value = r.json().await.unwrap();
        v["run_id"].as_str().unwrap().to_string()
    };
    let first = run_of(post("chat-42-7", "message", "yes").await.unwrap()).await;
    // While it runs: the same run, not 409 session_already_running.
    let again = run_of(post("chat-42-7", "message", "yes").await.unwrap()).await;
    assert_eq!(again, first);
    let mut events = c.subscribe(s.id, None);
    until(&mut events, "the run's end", |e| {
        e.is_terminal() && e.run_id().to_string() == first
    })
    .await;
    // After it ended, and with another body: still the same run.
    let later = run_of(post("chat-42-7", "message", "yes, again").await.unwrap()).await;
    assert_eq!(later, first);
    assert_eq!(llm.chat_requests().len(), 1, "the model was asked once");
    // Follow-ups: the same.
    llm.push(MockReply::text(&["two"]));
    let f1 = run_of(post("chat-42-8", "follow_up", "ok").await.unwrap()).await;
    let f2 = run_of(post("chat-42-8", "follow_up", "ok").await.unwrap()).await;
    assert_eq!(f1, f2);
    assert_ne!(f1, first);
    until(&mut events, "the follow-up's end", |e| {
        e.is_terminal() && e.run_id().to_string() == f1
    })
    .await;
    let msgs = c.list_messages(s.id, None, None).await.unwrap();
    let users: Vec<&str> = msgs
        .messages
        .iter()
        .filter(|m| m.role == switchboard_protocol::Role::User)
        .map(|m| m.content.as_str())
        .collect();
    assert_eq!(users, ["yes", "ok"], "each stored once");
    // A malformed key.
    let bad = post("has space", "message", "x").await.unwrap();
    assert_eq!(bad.status(), 400);
    let body: ErrorBody = bad.json().await.unwrap();
    assert_eq!(body.code, "invalid_header");
}

/// `/v1/health` tells the truth about writes: with the SQLite file write-locked by another
/// process (reads still answer), it says `degraded` / 503 within its 2 s budget, so a load
/// balancer stops sending traffic; once the lock goes, `ok` again. (It used to read only,
/// and kept answering 200 `store: ok` while every write waited 10 s and failed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_a_store_that_takes_no_writes() {
    use sqlx::Connection as _;
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let health = || async {
        let r = reqwest::get(format!("{}/v1/health", server.url))
            .await
            .unwrap();
        let status = r.status().as_u16();
        let body: serde_json::Value = r.json().await.unwrap();
        (
            status,
            body["store"]["status"].as_str().unwrap_or("").to_string(),
        )
    };
    assert_eq!(health().await, (200, "ok".to_string()));
    let db = dir.path().join("switchboard.db");
    let mut other = sqlx::SqliteConnection::connect(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut other)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    assert_eq!(health().await, (503, "unavailable".to_string()));
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Reads still work meanwhile: it is writes that do not.
    let c = client(&server);
    c.list_sessions(None, None).await.unwrap();
    sqlx::query("ROLLBACK").execute(&mut other).await.unwrap();
    assert_eq!(health().await, (200, "ok".to_string()));
}
