#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Resume, restart and crash: the event log loses nothing and repeats nothing.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use futures::StreamExt;
use switchboard_protocol::{AgentEvent, CreateSessionRequest, MessageType, SendMessageRequest};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_with_last_event_id_mid_run_and_after_restart() {
    let llm = MockLlm::start().await;
    llm.push(MockReply::Text {
        chunks: (0..40).map(|i| format!("t{i} ")).collect(),
        delay_ms: 15,
    });
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut sse = RawSse::connect(&server.url, s.id, None).await;
    c.send_message(s.id, &SendMessageRequest::user("go", MessageType::Message))
        .await
        .unwrap();

    let mut seen: Vec<u64> = Vec::new();
    let mut events = Vec::new();
    let mut done = false;
    // Drop the connection after 1, 3, 7, 11 … events and resume each time.
    for take in [1usize, 3, 7, 11, 1000] {
        for _ in 0..take {
            let Some((id, name, event)) = sse.next().await else {
                panic!("stream ended early")
            };
            seen.push(id);
            events.push(event);
            if name == "run_completed" {
                done = true;
                break;
            }
        }
        if done {
            break;
        }
        drop(sse);
        sse = RawSse::connect(&server.url, s.id, seen.last().copied()).await;
    }
    assert!(done, "run completed");
    let n = *seen.last().unwrap();
    assert_eq!(
        seen,
        (1..=n).collect::<Vec<_>>(),
        "exactly 1..N, nothing missing or twice"
    );
    // The log may merge deltas that reach its writer together, so the count of events
    // varies; the text they carry does not.
    assert_eq!(
        text_of(&events),
        (0..40).map(|i| format!("t{i} ")).collect::<String>(),
        "every delta once, in order"
    );

    // Same after a restart on the same data directory.
    server.stop().await;
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    for resume_at in [0, 5, n - 1] {
        let mut sse = RawSse::connect(&server.url, s.id, Some(resume_at)).await;
        let mut got = Vec::new();
        while got.last() != Some(&n) {
            got.push(sse.next().await.unwrap().0);
        }
        assert_eq!(got, (resume_at + 1..=n).collect::<Vec<_>>());
    }
    // ?after= works the same as the header.
    let resp = reqwest::Client::new()
        .get(format!(
            "{}/v1/sessions/{}/events?after={}",
            server.url,
            s.id,
            n - 2
        ))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut text = String::new();
    while !text.contains(&format!("id: {n}\n")) {
        text.push_str(&String::from_utf8_lossy(
            &stream.next().await.unwrap().unwrap(),
        ));
    }
    assert!(text.starts_with(&format!("id: {}\n", n - 1)), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_closes_the_run_as_retryable_and_seq_continues() {
    let llm = MockLlm::start().await;
    llm.push(MockReply::Text {
        chunks: (0..5).map(|i| format!("p{i} ")).collect(),
        delay_ms: 0,
    });
    llm.push(MockReply::Hang);
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest {
            title: Some("crash".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut events = c.subscribe(s.id, None);
    let run1 = c
        .send_message(
            s.id,
            &SendMessageRequest::user("first", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let before_first = until_run_ends(&mut events, run1).await;
    let run2 = c
        .send_message(
            s.id,
            &SendMessageRequest::user("this one hangs", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let queued = c
        .send_message(
            s.id,
            &SendMessageRequest::user("queued before the crash", MessageType::FollowUp),
        )
        .await
        .unwrap()
        .run_id;
    // Wait until the hanging run is visibly running.
    let last_before = loop {
        let env = events.next().await.unwrap().unwrap();
        if matches!(env.event, AgentEvent::RunStarted { run_id, .. } if run_id == run2) {
            break env.id;
        }
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(events);
    server.kill().await;

    llm.set_default(MockReply::Text {
        chunks: vec!["after".into(), " restart".into()],
        delay_ms: 0,
    });
    let server = start(dir.path(), &llm.base_url(), &[]).await;
    let c = client(&server);
    let mut sse = RawSse::connect(&server.url, s.id, None).await;
    let mut all = Vec::new();
    // Everything stored before is still there, then the run is closed as retryable, then
    // the stored follow-up runs.
    loop {
        let (id, _, env) = sse.next().await.unwrap();
        all.push(env.clone());
        if env.event.is_terminal() && env.event.run_id() == queued {
            assert_eq!(env.event.kind(), "run_completed");
            break;
        }
        assert!(id <= 100, "runaway");
    }
    let ids: Vec<u64> = all.iter().map(|e| e.id).collect();
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "no seq reused or skipped"
    );
    assert_eq!(
        &all[..before_first.len()],
        &before_first[..],
        "stored events unchanged"
    );
    let err = all
        .iter()
        .find(|e| matches!(&e.event, AgentEvent::RunError { run_id, .. } if *run_id == run2))
        .expect("interrupted run closed");
    assert!(
        err.id > last_before,
        "the closing event has a higher seq than any before"
    );
    match &err.event {
        AgentEvent::RunError {
            error, retryable, ..
        } => {
            assert!(*retryable);
            assert!(error.contains("interrupted by restart"), "{error}");
        }
        _ => unreachable!(),
    }
    // The session is usable again.
    let mut events = c.subscribe(s.id, Some(*ids.last().unwrap()));
    let run3 = c
        .send_message(
            s.id,
            &SendMessageRequest::user("hello again", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let got = until_run_ends(&mut events, run3).await;
    assert!(got[0].id > *ids.last().unwrap());
    assert_eq!(text_of(&got), "after restart");
    let msgs = c.list_messages(s.id, None, None).await.unwrap();
    let contents: Vec<&str> = msgs.messages.iter().map(|m| m.content.as_str()).collect();
    assert!(
        contents.contains(&"this one hangs"),
        "the interrupted user message is kept: {contents:?}"
    );
    assert!(contents.contains(&"queued before the crash"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_subscribe_survives_a_server_restart_and_yields_each_seq_once() {
    let llm = MockLlm::start().await;
    // Long enough (6 s) that the stop below always lands mid-stream, even on a loaded
    // machine (30 chunks once finished before a slow shutdown began).
    llm.push(MockReply::Text {
        chunks: (0..300).map(|i| format!("c{i} ")).collect(),
        delay_ms: 20,
    });
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_LISTEN", &listen)],
    )
    .await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mut events = c.subscribe(s.id, None);
    let run1 = c
        .send_message(
            s.id,
            &SendMessageRequest::user("stream a while", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let mut seen = Vec::new();
    while seen.len() < 8 {
        seen.push(events.next().await.unwrap().unwrap());
    }
    server.stop().await;
    let _server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_LISTEN", &listen)],
    )
    .await;
    // The run ended on shutdown with a retryable error; the stream resumes by itself.
    let rest = until_run_ends(&mut events, run1).await;
    seen.extend(rest);
    match &seen.last().unwrap().event {
        AgentEvent::RunError { retryable, .. } => assert!(*retryable),
        other => panic!("expected RunError, got {other:?}"),
    }
    let run2 = c
        .send_message(
            s.id,
            &SendMessageRequest::user("and now", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    seen.extend(until_run_ends(&mut events, run2).await);
    let ids: Vec<u64> = seen.iter().map(|e| e.id).collect();
    let unique: BTreeSet<u64> = ids.iter().copied().collect();
    assert_eq!(unique.len(), ids.len(), "no seq twice: {ids:?}");
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "no seq missing: {ids:?}"
    );
}
