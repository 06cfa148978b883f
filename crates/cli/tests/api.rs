#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! End to end over real TCP against the real binary: the chat flow, conflicts, bad input.

mod common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use switchboard_protocol::{
    AgentEvent, CreateSessionRequest, MessageType, Role, SendMessageRequest,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_subscribe_send_stream_and_transcript() {
    let llm = MockLlm::start().await;
    llm.set_default(MockReply::Text {
        chunks: vec!["Hel".into(), "lo ".into(), "there".into()],
        delay_ms: 5,
    });
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    assert_eq!(c.health().await.unwrap().status, "ok");

    let s = c
        .create_session(&CreateSessionRequest {
            title: Some("demo".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(s.title, "demo");
    let mut events = c.subscribe(s.id, None);
    let run_id = c
        .send_message(
            s.id,
            &SendMessageRequest::user("say hello", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let got = until_run_ends(&mut events, run_id).await;
    // The log may merge deltas that reach its writer together (a busy machine), so the
    // three chunks are one to three `text_delta`s; the ids have no gaps either way.
    let mut shape = kinds(&got);
    shape.dedup();
    assert_eq!(
        shape,
        vec![
            "run_started",
            "text_delta",
            "usage_report",
            "text_complete",
            "run_completed"
        ]
    );
    assert_eq!(
        got.iter().map(|e| e.id).collect::<Vec<_>>(),
        (1..=got.len() as u64).collect::<Vec<_>>()
    );
    assert_eq!(text_of(&got), "Hello there");
    match &got.last().unwrap().event {
        AgentEvent::RunCompleted {
            stop_reason,
            backend_stop_reason,
            total_turns,
            ..
        } => {
            assert_eq!(*stop_reason, switchboard_protocol::StopReason::Completed);
            assert_eq!(backend_stop_reason.as_deref(), Some("stop"));
            assert_eq!(*total_turns, 1);
        }
        other => panic!("{other:?}"),
    }
    // The provider saw the model, the system prompt and the user message, with the key.
    let reqs = llm.requests();
    let body = &reqs.last().unwrap().body;
    assert_eq!(body["model"], "mock-model");
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["messages"].as_array().unwrap().last().unwrap()["content"],
        "say hello"
    );

    let msgs = c.list_messages(s.id, None, None).await.unwrap();
    assert_eq!(msgs.total, 2);
    assert_eq!(msgs.messages[0].role, Role::User);
    assert_eq!(msgs.messages[0].content, "say hello");
    assert_eq!(msgs.messages[1].role, Role::Assistant);
    assert_eq!(msgs.messages[1].content, "Hello there");
    let md = c.transcript_markdown(s.id).await.unwrap();
    assert!(md.starts_with("# demo"), "{md}");
    let (u, a) = (
        md.find("## User").unwrap(),
        md.find("## Assistant").unwrap(),
    );
    assert!(
        u < a && md.contains("say hello") && md.contains("Hello there"),
        "{md}"
    );

    // A second message carries the history to the provider.
    let run2 = c
        .send_message(
            s.id,
            &SendMessageRequest::user("again", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let last = until_run_ends(&mut events, run2).await.last().unwrap().id;
    let reqs = llm.requests();
    let body = &reqs.last().unwrap().body;
    let contents: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap())
        .collect();
    assert_eq!(&contents[1..], &["say hello", "Hello there", "again"]);

    let list = c.list_sessions(None, None).await.unwrap();
    assert_eq!(list.total, 1);
    assert_eq!(
        list.sessions[0].backend,
        Some(switchboard_protocol::BackendSpec::Builtin)
    );
    assert_eq!(list.sessions[0].pending_approvals, 0);
    let shown = c.get_session(s.id).await.unwrap();
    assert_eq!(
        shown.session.last_event_id, last,
        "the run's last event is stored"
    );
    // The first event of each run carries the user's message.
    let mut replay = c.subscribe(s.id, None);
    let first = replay.next().await.unwrap().unwrap();
    assert!(
        matches!(&first.event, AgentEvent::RunStarted { content: Some(m), .. } if m == "say hello"),
        "{first:?}"
    );
    drop(replay);

    // Rename, archive (hidden from the default list), unarchive.
    let upd =
        |title: Option<&str>, archived: Option<bool>| switchboard_protocol::UpdateSessionRequest {
            title: title.map(str::to_string),
            archived,
            ..Default::default()
        };
    let r = c
        .update_session(s.id, &upd(Some("renamed"), Some(true)))
        .await
        .unwrap();
    assert_eq!((r.title.as_str(), r.archived), ("renamed", true));
    assert_eq!(c.list_sessions(None, None).await.unwrap().total, 0);
    let archived = c.list_archived_sessions(None, None).await.unwrap();
    assert_eq!(archived.total, 1);
    assert!(archived.sessions[0].archived);
    let r = c
        .update_session(s.id, &upd(None, Some(false)))
        .await
        .unwrap();
    assert_eq!((r.title.as_str(), r.archived), ("renamed", false));
    assert_eq!(c.list_sessions(None, None).await.unwrap().total, 1);
    let e = c
        .update_session(s.id, &upd(Some("  "), None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("validation_failed"));
    let e = c
        .update_session(uuid::Uuid::now_v7(), &upd(Some("x"), None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some("session_not_found"));
    // The permission mode of the next runs; the title and the rest of the config stay.
    let mode = switchboard_protocol::UpdateSessionRequest {
        permission_mode: Some(switchboard_protocol::PermissionMode::ReadOnly),
        ..Default::default()
    };
    let before = c.get_session(s.id).await.unwrap().config;
    c.update_session(s.id, &mode).await.unwrap();
    let after = c.get_session(s.id).await.unwrap();
    assert_eq!(after.session.title, "renamed");
    assert_eq!(after.config.permission_mode.as_str(), "read-only");
    assert_eq!(
        (after.config.backend, after.config.model),
        (before.backend, before.model)
    );
    // Model and auto_approve likewise.
    let more = switchboard_protocol::UpdateSessionRequest {
        model: Some("other-model".into()),
        auto_approve: Some(switchboard_protocol::AutoApprove::Tools(vec![
            "view".into(),
        ])),
        ..Default::default()
    };
    c.update_session(s.id, &more).await.unwrap();
    let after = c.get_session(s.id).await.unwrap().config;
    assert_eq!(after.model.as_deref(), Some("other-model"));
    assert_eq!(
        after.auto_approve,
        switchboard_protocol::AutoApprove::Tools(vec!["view".into()])
    );
    assert_eq!(after.permission_mode.as_str(), "read-only", "kept");
    let blank = switchboard_protocol::UpdateSessionRequest {
        model: Some(" ".into()),
        ..Default::default()
    };
    let e = c.update_session(s.id, &blank).await.unwrap_err();
    assert_eq!(e.code(), Some("validation_failed"));
    // Every field is checked as create checks it; nothing of a refused request is kept.
    let refused = |body: serde_json::Value| {
        let url = format!("{}/v1/sessions/{}", server.url, s.id);
        async move {
            let r = reqwest::Client::new()
                .patch(url)
                .bearer_auth(TOKEN)
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let body: serde_json::Value = r.json().await.unwrap();
            (
                status,
                body["code"].as_str().unwrap_or_default().to_string(),
                body,
            )
        }
    };
    let bad = (400, "validation_failed");
    let unprocessable = (422, "unprocessable_entity");
    for (body, field, want) in [
        (serde_json::json!({"title": "   "}), "title", bad),
        (serde_json::json!({"title": "x".repeat(201)}), "title", bad),
        (
            serde_json::json!({"auto_approve": ["view", " "]}),
            "auto_approve[1]",
            unprocessable,
        ),
        (
            serde_json::json!({"auto_approve": [" run_command"], "title": "kept?"}),
            "auto_approve[0]",
            unprocessable,
        ),
    ] {
        let (status, code, err) = refused(body.clone()).await;
        assert_eq!((status, code.as_str()), want, "{body} → {err}");
        assert!(err.to_string().contains(field), "{body} → {err}");
    }
    for body in [
        serde_json::json!({"auto_approve": "some"}),
        serde_json::json!({"auto_aprove": "all"}),
        serde_json::json!({"archived": "yes"}),
    ] {
        let (status, code, err) = refused(body.clone()).await;
        assert!(status == 400 || status == 422, "{body} → {status} {err}");
        assert!(!code.is_empty(), "{body} → {err}");
    }
    let kept = c.get_session(s.id).await.unwrap();
    assert_ne!(
        kept.session.title, "kept?",
        "a refused request changes nothing"
    );
    let renamed = c
        .update_session(
            s.id,
            &switchboard_protocol::UpdateSessionRequest {
                title: Some("  Trimmed  ".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(renamed.title, "Trimmed");
    let raw = reqwest::Client::new()
        .patch(format!("{}/v1/sessions/{}", server.url, s.id))
        .bearer_auth(TOKEN)
        .json(&serde_json::json!({"permission_mode": "yolo"}))
        .send()
        .await
        .unwrap();
    assert_eq!(raw.status().as_u16(), 400, "an unknown mode is refused");
    c.delete_session(s.id).await.unwrap();
    assert_eq!(
        c.get_session(s.id).await.unwrap_err().code(),
        Some("session_not_found")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_follow_ups_and_cancel() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let other = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut events = c.subscribe(s.id, None);

    llm.push(MockReply::Hang);
    llm.set_default(MockReply::Text {
        chunks: vec!["follow".into(), "-up done".into()],
        delay_ms: 0,
    });
    let run1 = c
        .send_message(
            s.id,
            &SendMessageRequest::user("first", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let err = c
        .send_message(
            s.id,
            &SendMessageRequest::user("second", MessageType::Message),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("session_already_running"))
    );
    let err = c
        .send_message(
            other.id,
            &SendMessageRequest::user("steer", MessageType::Steering),
        )
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("session_not_running"))
    );
    let run2 = c
        .send_message(
            s.id,
            &SendMessageRequest::user("then this", MessageType::FollowUp),
        )
        .await
        .unwrap()
        .run_id;
    assert_ne!(run1, run2);
    let err = c.cancel(s.id, run2_or_random(run2)).await.unwrap_err();
    assert_eq!(
        (err.status(), err.code()),
        (Some(409), Some("run_mismatch"))
    );
    let shown = c.get_session(s.id).await.unwrap();
    assert_eq!(shown.session.active_run_id, Some(run1));

    // The first run's model call is under way (the mock holds it): its cancel is what ends
    // it, and the follow-up's call gets the mock's next reply, not the held one.
    for _ in 0..600 {
        if !llm.chat_requests().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        llm.chat_requests().len(),
        1,
        "the first run called the model"
    );
    c.cancel(s.id, run1).await.unwrap();
    let first = until_run_ends(&mut events, run1).await;
    match &first.last().unwrap().event {
        AgentEvent::RunCompleted { stop_reason, .. } => {
            assert_eq!(*stop_reason, switchboard_protocol::StopReason::Cancelled)
        }
        other => panic!("{other:?}"),
    }
    assert!(kinds(&first).contains(&"follow_up_queued"));
    // The follow-up starts by itself once the first run has ended.
    let second = until_run_ends(&mut events, run2).await;
    assert!(matches!(
        second.first().unwrap().event,
        AgentEvent::RunStarted { run_id, .. } if run_id == run2
    ));
    assert_eq!(text_of(&second), "follow-up done");
    let msgs = c.list_messages(s.id, None, None).await.unwrap();
    let contents: Vec<&str> = msgs.messages.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents, vec!["first", "then this", "follow-up done"]);
    // Cancelling a run that is over is a mismatch too.
    let err = c.cancel(s.id, run1).await.unwrap_err();
    assert_eq!(err.code(), Some("run_mismatch"));
}

/// A run id that is surely not the active one.
fn run2_or_random(_queued: uuid::Uuid) -> uuid::Uuid {
    uuid::Uuid::now_v7()
}

async fn raw(
    server: &switchboard_test_support::process::ServerProcess,
    method: reqwest::Method,
    path: &str,
    token: Option<&str>,
    body: Option<(&str, Vec<u8>)>,
    headers: &[(&str, &str)],
) -> (u16, Value) {
    let mut req = reqwest::Client::new().request(method, format!("{}{path}", server.url));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some((ct, b)) = body {
        req = req.header("content-type", ct).body(b);
    }
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn assert_error(got: (u16, Value), status: u16, code: &str) {
    assert_eq!(got.0, status, "{:?}", got.1);
    assert_eq!(got.1["code"], code, "{:?}", got.1);
    assert!(
        got.1["error"].as_str().is_some_and(|e| !e.is_empty()),
        "human message: {:?}",
        got.1
    );
    assert!(
        got.1["request_id"].as_str().is_some_and(|e| !e.is_empty()),
        "request id: {:?}",
        got.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_precise_errors_and_the_server_keeps_serving() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_MAX_BODY_BYTES", "65536")],
    )
    .await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let msgs = format!("/v1/sessions/{}/messages", s.id);
    let json_ct = "application/json";
    use reqwest::Method;

    assert_error(
        raw(&server, Method::GET, "/v1/sessions", None, None, &[]).await,
        401,
        "unauthorized",
    );
    assert_error(
        raw(
            &server,
            Method::GET,
            "/v1/sessions",
            Some("wrong"),
            None,
            &[],
        )
        .await,
        401,
        "invalid_token",
    );
    assert_error(
        raw(
            &server,
            Method::GET,
            "/v1/sessions",
            None,
            None,
            &[("authorization", "Basic Zm9vOmJhcg==")],
        )
        .await,
        401,
        "unauthorized",
    );
    assert_error(
        raw(
            &server,
            Method::POST,
            &msgs,
            Some(TOKEN),
            Some((json_ct, b"{\"message\": ".to_vec())),
            &[],
        )
        .await,
        400,
        "invalid_json",
    );
    assert_error(
        raw(
            &server,
            Method::POST,
            &msgs,
            Some(TOKEN),
            Some((
                json_ct,
                br#"{"message": {"role": "user", "content": 5}}"#.to_vec(),
            )),
            &[],
        )
        .await,
        400,
        "validation_failed",
    );
    assert_error(
        raw(
            &server,
            Method::POST,
            &msgs,
            Some(TOKEN),
            Some((
                json_ct,
                br#"{"message": {"role": "user", "content": "  "}}"#.to_vec(),
            )),
            &[],
        )
        .await,
        400,
        "validation_failed",
    );
    assert_error(
        raw(
            &server,
            Method::POST,
            &msgs,
            Some(TOKEN),
            Some((
                "text/plain",
                br#"{"message": {"role": "user", "content": "x"}}"#.to_vec(),
            )),
            &[],
        )
        .await,
        415,
        "unsupported_media_type",
    );
    let big =
        serde_json::to_vec(&json!({"message": {"role": "user", "content": "x".repeat(100_000)}}))
            .unwrap();
    assert_error(
        raw(
            &server,
            Method::POST,
            &msgs,
            Some(TOKEN),
            Some((json_ct, big)),
            &[],
        )
        .await,
        413,
        "payload_too_large",
    );
    let ghost = format!("/v1/sessions/{}/messages", uuid::Uuid::now_v7());
    assert_error(
        raw(
            &server,
            Method::POST,
            &ghost,
            Some(TOKEN),
            Some((
                json_ct,
                br#"{"message": {"role": "user", "content": "x"}}"#.to_vec(),
            )),
            &[],
        )
        .await,
        404,
        "session_not_found",
    );
    assert_error(
        raw(
            &server,
            Method::GET,
            "/v1/sessions/not-a-uuid",
            Some(TOKEN),
            None,
            &[],
        )
        .await,
        400,
        "validation_failed",
    );
    let ev = format!("/v1/sessions/{}/events", s.id);
    assert_error(
        raw(
            &server,
            Method::GET,
            &ev,
            Some(TOKEN),
            None,
            &[("last-event-id", "abc")],
        )
        .await,
        400,
        "invalid_header",
    );
    assert_error(
        raw(
            &server,
            Method::GET,
            &format!("{ev}?after=-1"),
            Some(TOKEN),
            None,
            &[],
        )
        .await,
        400,
        "invalid_header",
    );
    assert_error(
        raw(
            &server,
            Method::GET,
            "/v1/sessions?limit=0",
            Some(TOKEN),
            None,
            &[],
        )
        .await,
        400,
        "invalid_query",
    );
    assert_error(
        raw(
            &server,
            Method::GET,
            "/v1/sessions?limit=x",
            Some(TOKEN),
            None,
            &[],
        )
        .await,
        400,
        "invalid_query",
    );
    assert_error(
        raw(
            &server,
            Method::POST,
            "/v1/sessions",
            Some(TOKEN),
            Some((json_ct, br#"{"cwd": "relative/path"}"#.to_vec())),
            &[],
        )
        .await,
        400,
        "validation_failed",
    );
    // Well-formed, but no such directory on this server: 422, as for an unknown agent.
    assert_error(
        raw(
            &server,
            Method::POST,
            "/v1/sessions",
            Some(TOKEN),
            Some((json_ct, br#"{"cwd": "/no/such/workspace"}"#.to_vec())),
            &[],
        )
        .await,
        422,
        "unprocessable_entity",
    );
    assert_error(
        raw(
            &server,
            Method::POST,
            "/v1/sessions",
            Some(TOKEN),
            Some((json_ct, br#"{"backend": {"acp": "nope"}}"#.to_vec())),
            &[],
        )
        .await,
        422,
        "unprocessable_entity",
    );
    assert_error(
        raw(
            &server,
            Method::GET,
            "/v1/nothing-here",
            Some(TOKEN),
            None,
            &[],
        )
        .await,
        404,
        "not_found",
    );
    assert_error(
        raw(&server, Method::PUT, "/v1/health", None, None, &[]).await,
        405,
        "method_not_allowed",
    );
    let cancel = format!("/v1/sessions/{}/cancel", s.id);
    assert_error(
        raw(
            &server,
            Method::POST,
            &cancel,
            Some(TOKEN),
            Some((
                json_ct,
                format!(r#"{{"run_id": "{}"}}"#, uuid::Uuid::now_v7()).into_bytes(),
            )),
            &[],
        )
        .await,
        409,
        "run_mismatch",
    );
    // The request id the client sent comes back.
    let (status, body) = raw(
        &server,
        Method::GET,
        "/v1/sessions",
        Some("wrong"),
        None,
        &[("x-request-id", "abc-123")],
    )
    .await;
    assert_eq!(
        (status, body["request_id"].as_str()),
        (401, Some("abc-123"))
    );

    // Health needs no token, and everything still works.
    let (status, body) = raw(&server, Method::GET, "/v1/health", None, None, &[]).await;
    assert_eq!((status, body["status"].as_str()), (200, Some("ok")));
    let mut events = c.subscribe(s.id, None);
    let run = c
        .send_message(
            s.id,
            &SendMessageRequest::user("still there?", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let got = until_run_ends(&mut events, run).await;
    assert_eq!(got.last().unwrap().event.kind(), "run_completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_describes_every_route() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let doc: Value = reqwest::get(format!("{}/openapi.json", server.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let paths = doc["paths"].as_object().unwrap();
    for p in [
        "/v1/health",
        "/v1/sessions",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/messages",
        "/v1/sessions/{id}/transcript.md",
        "/v1/sessions/{id}/events",
        "/v1/sessions/{id}/cancel",
    ] {
        assert!(paths.contains_key(p), "missing {p}");
    }
    for schema in [
        "SendMessageRequest",
        "AgentEvent",
        "EventEnvelope",
        "ErrorBody",
        "ToolDecisionsRequest",
    ] {
        assert!(
            doc["components"]["schemas"].get(schema).is_some(),
            "missing schema {schema}"
        );
    }
    assert!(doc["paths"]["/v1/sessions"]["post"]["security"].is_array());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steering_reaches_the_agent_before_its_next_step() {
    let llm = MockLlm::start().await;
    llm.push(MockReply::Text {
        chunks: (0..20).map(|i| format!("w{i} ")).collect(),
        delay_ms: 50,
    });
    llm.push(MockReply::Text {
        chunks: vec!["steered".into()],
        delay_ms: 0,
    });
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut events = c.subscribe(s.id, None);
    let run = c
        .send_message(
            s.id,
            &SendMessageRequest::user("long answer please", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    // Wait for the reply to start, then steer.
    loop {
        let env = events.next().await.unwrap().unwrap();
        if env.event.kind() == "text_delta" {
            break;
        }
    }
    let mut steer = SendMessageRequest::user("focus on tests", MessageType::Steering);
    steer.run_id = Some(uuid::Uuid::now_v7());
    let err = c.send_message(s.id, &steer).await.unwrap_err();
    assert_eq!(err.code(), Some("run_mismatch"));
    steer.run_id = Some(run);
    assert_eq!(c.send_message(s.id, &steer).await.unwrap().run_id, run);
    let got = until_run_ends(&mut events, run).await;
    assert!(got.iter().any(|e| matches!(&e.event, AgentEvent::SteeringReceived { content, .. } if content == "focus on tests")));
    assert_eq!(got.last().unwrap().event.kind(), "run_completed");
    let reqs = llm.requests();
    let last = reqs.last().unwrap();
    let msgs = last.body["messages"].as_array().unwrap();
    assert_eq!(
        msgs.last().unwrap()["content"],
        "focus on tests",
        "the next step carries the steering"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let transcript = c.list_messages(s.id, None, None).await.unwrap();
    assert!(
        transcript
            .messages
            .iter()
            .any(|m| m.content == "focus on tests" && m.role == Role::User)
    );
}

/// `[sessions] history_max_*`: a run gives its agent only the session's recent messages,
/// cut at a user's message, while the transcript keeps everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_gives_the_agent_only_the_recent_history() {
    let llm = MockLlm::start().await;
    llm.set_responder(|req| {
        let n = req.body["messages"]
            .as_array()
            .map_or(0, |m| m.iter().filter(|m| m["role"] != "system").count());
        MockReply::text(&[&format!("reply to {n}")])
    });
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_HISTORY_MAX_MESSAGES", "3")],
    )
    .await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut events = c.subscribe(s.id, None);
    for text in ["one", "two", "three"] {
        let run = c
            .send_message(s.id, &SendMessageRequest::user(text, MessageType::Message))
            .await
            .unwrap()
            .run_id;
        until_run_ends(&mut events, run).await;
    }
    let said = |i: usize| -> Vec<String> {
        let reqs = llm.chat_requests();
        reqs[i].body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] != "system")
            .map(|m| {
                format!(
                    "{}: {}",
                    m["role"].as_str().unwrap(),
                    m["content"].as_str().unwrap()
                )
            })
            .collect()
    };
    assert_eq!(said(1), ["user: one", "assistant: reply to 1", "user: two"]);
    // The newest 3 stored are "reply to 1", "two", "reply to 3": the cut starts at "two",
    // so the first reply, whose question is gone, is not sent either.
    assert_eq!(
        said(2),
        ["user: two", "assistant: reply to 3", "user: three"],
        "only the recent turn, opening with the user"
    );
    // The model is told when earlier messages were left out, and only then.
    let system = |i: usize| -> String {
        let reqs = llm.chat_requests();
        reqs[i].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let note = switchboard_agent::EARLIER_LEFT_OUT;
    assert!(!system(0).contains(note) && !system(1).contains(note));
    assert!(system(2).ends_with(note), "{}", system(2));
    let all = c.list_messages(s.id, None, None).await.unwrap();
    assert_eq!(all.total, 6, "the transcript keeps every message");
}
