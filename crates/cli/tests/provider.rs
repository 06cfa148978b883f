#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Provider failures end the run with a clear RunError and leave the session usable.

mod common;

use common::*;
use switchboard_protocol::{
    AgentEvent, CreateSessionRequest, MessageType, RunErrorCode, SendMessageRequest,
};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

const KEY: &str = "sk-test-SECRET-4242";

async fn run_error(
    c: &switchboard_client::Client,
    session: uuid::Uuid,
) -> (String, bool, RunErrorCode) {
    let after = c.get_session(session).await.unwrap().session.last_event_id;
    let mut events = c.subscribe(session, Some(after));
    let run = c
        .send_message(
            session,
            &SendMessageRequest::user("hi", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let got = until_run_ends(&mut events, run).await;
    match &got.last().unwrap().event {
        AgentEvent::RunError {
            error,
            retryable,
            code,
            ..
        } => (error.clone(), *retryable, *code),
        other => panic!("expected RunError, got {other:?}"),
    }
}

async fn completes(c: &switchboard_client::Client, session: uuid::Uuid) {
    let after = c.get_session(session).await.unwrap().session.last_event_id;
    let mut events = c.subscribe(session, Some(after));
    let run = c
        .send_message(
            session,
            &SendMessageRequest::user("again", MessageType::Message),
        )
        .await
        .unwrap()
        .run_id;
    let got = until_run_ends(&mut events, run).await;
    assert_eq!(
        got.last().unwrap().event.kind(),
        "run_completed",
        "session usable after a failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_provider_failure_is_a_clear_run_error_without_the_key() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[("SWITCHBOARD_OPENAI_API_KEY", KEY)],
    )
    .await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();

    llm.push(MockReply::Status {
        status: 401,
        body: format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#),
    });
    let (e, retryable, code) = run_error(&c, s.id).await;
    assert_eq!(code, RunErrorCode::ProviderRefused, "{e}");
    assert!(e.contains("401") && e.contains("Incorrect API key"), "{e}");
    assert!(!e.contains(KEY), "key leaked: {e}");
    assert!(!retryable);
    completes(&c, s.id).await;
    // The key was sent to the provider as a bearer token.
    let auth = llm
        .requests()
        .last()
        .unwrap()
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .map(|(_, v)| v.clone());
    assert_eq!(auth.as_deref(), Some(format!("Bearer {KEY}").as_str()));

    llm.push(MockReply::Status {
        status: 503,
        body: "overloaded".into(),
    });
    let (e, retryable, code) = run_error(&c, s.id).await;
    assert_eq!(code, RunErrorCode::ProviderFailed, "{e}");
    assert!(e.contains("503") && e.contains("overloaded"), "{e}");
    assert!(retryable);

    llm.push(MockReply::Malformed);
    let (e, retryable, code) = run_error(&c, s.id).await;
    assert_eq!(code, RunErrorCode::ProviderFailed, "{e}");
    assert!(e.contains("malformed"), "{e}");
    assert!(!retryable);

    llm.push(MockReply::stream_error("model overloaded mid-stream"));
    let (e, retryable, code) = run_error(&c, s.id).await;
    assert_eq!(code, RunErrorCode::ProviderFailed, "{e}");
    assert!(e.contains("model overloaded mid-stream"), "{e}");
    assert!(retryable);

    llm.push(MockReply::Status {
        status: 429,
        body: "rate limited".into(),
    });
    let (_, retryable, code) = run_error(&c, s.id).await;
    assert_eq!(code, RunErrorCode::ProviderRateLimited);
    assert!(retryable);

    llm.push(MockReply::Status {
        status: 400,
        body: r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","code":"context_length_exceeded"}}"#.into(),
    });
    let (_, retryable, code) = run_error(&c, s.id).await;
    assert_eq!(code, RunErrorCode::ContextTooLong);
    assert!(!retryable);

    llm.push(MockReply::CutOff {
        chunks: vec!["partial ".into(), "answ".into()],
    });
    let (e, retryable, code) = run_error(&c, s.id).await;
    assert_eq!(code, RunErrorCode::ProviderFailed, "{e}");
    assert!(e.contains("ended before the reply was complete"), "{e}");
    assert!(retryable);
    completes(&c, s.id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_provider_is_a_clear_run_error() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let server = start(dir.path(), &url, &[("SWITCHBOARD_OPENAI_API_KEY", KEY)]).await;
    let c = client(&server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let (e, retryable, code) = run_error(&c, s.id).await;
    assert_eq!(code, RunErrorCode::ProviderUnreachable, "{e}");
    assert!(
        e.contains("unreachable") && e.contains(&format!("127.0.0.1:{port}")),
        "{e}"
    );
    assert!(retryable);
    assert!(!e.contains(KEY));
    assert!(!server.logs().contains(KEY), "key in the server log");
}
