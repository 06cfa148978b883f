#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

//! The Anthropic provider over real TCP against the mock LLM's Messages route.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::json;
use switchboard_agent::anthropic::{AnthropicConfig, AnthropicProvider};
use switchboard_agent::{ChatMessage, Provider, ProviderError, TextSink, ToolSpec};
use switchboard_protocol::{ToolCall, Usage};
use switchboard_test_support::mock_llm::{MockLlm, MockReply, MockToolCall};
use tokio_util::sync::CancellationToken;

const KEY: &str = "sk-ant-test-secret-0123456789";

#[derive(Default)]
struct Collect(Mutex<Vec<String>>);

#[async_trait]
impl TextSink for Collect {
    async fn text(&self, delta: String) {
        self.0.lock().unwrap().push(delta);
    }
}

impl Collect {
    fn deltas(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

fn provider(mock: &MockLlm) -> AnthropicProvider {
    AnthropicProvider::new(AnthropicConfig {
        base_url: mock.anthropic_base_url(),
        api_key: Some(KEY.into()),
        max_retries: 2,
        idle_timeout: Duration::from_secs(5),
        ..Default::default()
    })
    .unwrap()
}

fn tools() -> Vec<ToolSpec> {
    vec![ToolSpec {
        name: "view".into(),
        description: "Shows a file".into(),
        input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
    }]
}

async fn call(
    p: &AnthropicProvider,
    messages: &[ChatMessage],
) -> (
    Result<switchboard_agent::Completion, ProviderError>,
    Vec<String>,
) {
    let sink = Collect::default();
    let r = p
        .stream(
            "claude-test",
            "You are terse.",
            messages,
            &tools(),
            &CancellationToken::new(),
            &sink,
        )
        .await;
    (r, sink.deltas())
}

fn assert_no_key(e: &ProviderError) {
    let shown = format!("{e} {e:?}");
    assert!(!shown.contains(KEY), "key leaked: {shown}");
}

#[tokio::test]
async fn streams_text_in_order() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text_slow(&["Hel", "lo", ", wor", "ld ✓"], 5));
    let p = provider(&mock);
    assert_eq!(p.name(), "anthropic");

    let (r, deltas) = call(&p, &[ChatMessage::user("say hello")]).await;
    let c = r.unwrap();
    assert_eq!(deltas, ["Hel", "lo", ", wor", "ld ✓"]);
    assert_eq!(c.text, "Hello, world ✓");
    assert_eq!(c.finish_reason, "end_turn");
    assert!(c.tool_calls.is_empty());
    // mock: (14 system + 9 message chars) / 4 → 6 input tokens; one output token per delta
    assert_eq!(c.usage, Some(Usage::tokens(6, 4)));

    let reqs = mock.message_requests();
    assert_eq!(reqs.len(), 1);
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].body["model"], "claude-test");
    assert_eq!(reqs[0].body["stream"], true);
    assert_eq!(reqs[0].body["max_tokens"], 8192);
    assert_eq!(
        reqs[0].body["tools"][0],
        json!({"name": "view", "description": "Shows a file",
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}})
    );
}

#[tokio::test]
async fn base_url_with_v1_is_not_doubled() {
    let mock = MockLlm::start().await;
    let p = AnthropicProvider::new(AnthropicConfig {
        base_url: mock.base_url(), // ends with /v1
        api_key: Some(KEY.into()),
        ..Default::default()
    })
    .unwrap();
    let (r, _) = call(&p, &[ChatMessage::user("hi")]).await;
    assert_eq!(r.unwrap().text, "Hello from mock");
    assert_eq!(mock.requests()[0].path, "/v1/messages");
    assert_eq!(p.models().await.unwrap().len(), 1);
    let models = mock.requests().pop().unwrap();
    assert_eq!(models.path, "/v1/models");
    assert_eq!(models.header("x-api-key"), Some(KEY));
    assert_eq!(models.header("anthropic-version"), Some("2023-06-01"));
}

#[tokio::test]
async fn tool_use_round_trip() {
    let mock = MockLlm::start().await;
    let input = json!({"path": "src/main.rs", "lines": [1, 20], "note": "é✓"});
    mock.push(MockReply::ToolCalls {
        text: Some("Let me look.".into()),
        calls: vec![MockToolCall::new("toolu_01A", "view", input.clone())],
        delay_ms: 0,
    });
    mock.push(MockReply::text(&["It is a main function."]));
    let p = provider(&mock);

    let history = vec![ChatMessage::user("what is in main.rs?")];
    let (r, deltas) = call(&p, &history).await;
    let c = r.unwrap();
    assert_eq!(deltas, ["Let me look."]);
    assert_eq!(c.finish_reason, "tool_use");
    assert_eq!(c.tool_calls.len(), 1);
    let tc = &c.tool_calls[0];
    assert_eq!((tc.id.as_str(), tc.name.as_str()), ("toolu_01A", "view"));
    let args: serde_json::Value = serde_json::from_str(&tc.arguments).unwrap();
    assert_eq!(args, input);

    let mut history = history;
    history.push(ChatMessage::assistant(
        c.text.clone(),
        vec![ToolCall {
            id: tc.id.clone(),
            name: tc.name.clone(),
            arguments: args,
            metadata: None,
        }],
    ));
    history.push(ChatMessage::tool_result("toolu_01A", "fn main() {}", false));
    let (r, _) = call(&p, &history).await;
    let c = r.unwrap();
    assert_eq!(c.text, "It is a main function.");
    assert_eq!(c.finish_reason, "end_turn");

    let reqs = mock.message_requests();
    assert_eq!(reqs.len(), 2);
    let req = &reqs[1];
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert!(
        req.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    assert!(req.header("authorization").is_none());
    let body = &req.body;
    assert_eq!(body["system"], "You are terse.");
    let msgs = body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 3);
    assert!(msgs.iter().all(|m| m["role"] != "system"));
    assert_eq!(msgs[0]["role"], "user");
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        msgs[1]["content"],
        json!([
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": "toolu_01A", "name": "view", "input": input},
        ])
    );
    assert_eq!(msgs[2]["role"], "user");
    let first = &msgs[2]["content"][0];
    assert_eq!(first["type"], "tool_result");
    assert_eq!(first["tool_use_id"], "toolu_01A");
    assert_eq!(first["is_error"], false);
    assert_eq!(first["content"], "fn main() {}");
}

#[tokio::test]
async fn several_tool_calls_keep_block_order() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::tool_calls(vec![
        MockToolCall::new("toolu_1", "view", json!({"path": "a"})),
        MockToolCall::new("toolu_2", "list", json!({})),
    ]));
    let (r, deltas) = call(&provider(&mock), &[ChatMessage::user("go")]).await;
    let c = r.unwrap();
    assert!(deltas.is_empty());
    assert_eq!(c.text, "");
    let got: Vec<(&str, &str, serde_json::Value)> = c
        .tool_calls
        .iter()
        .map(|t| {
            (
                t.id.as_str(),
                t.name.as_str(),
                serde_json::from_str(&t.arguments).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("toolu_1", "view", json!({"path": "a"})),
            ("toolu_2", "list", json!({})),
        ]
    );
}

#[tokio::test]
async fn unauthorized_is_not_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::status(401, format!("invalid x-api-key {KEY}")));
    let (r, _) = call(&provider(&mock), &[ChatMessage::user("hi")]).await;
    let e = r.unwrap_err();
    match &e {
        ProviderError::Http { status, body } => {
            assert_eq!(*status, 401);
            assert!(body.contains("authentication_error"), "{body}");
            assert!(body.contains("[redacted]"), "{body}");
        }
        other => panic!("expected Http 401, got {other:?}"),
    }
    assert!(!e.retryable());
    assert_no_key(&e);
    assert_eq!(mock.message_requests().len(), 1);
}

#[tokio::test]
async fn rate_limit_is_retried_honouring_retry_after() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::status(429, "slow down"));
    mock.push(MockReply::text(&["ok"]));
    let started = Instant::now();
    let (r, _) = call(&provider(&mock), &[ChatMessage::user("hi")]).await;
    assert_eq!(r.unwrap().text, "ok");
    assert_eq!(mock.message_requests().len(), 2);
    // Retry-After: 0 replaces the default 500 ms backoff
    assert!(started.elapsed() < Duration::from_millis(450));
}

#[tokio::test]
async fn overloaded_529_is_retried() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::status(529, "Overloaded"));
    mock.push(MockReply::text(&["fine"]));
    let (r, _) = call(&provider(&mock), &[ChatMessage::user("hi")]).await;
    assert_eq!(r.unwrap().text, "fine");
    assert_eq!(mock.message_requests().len(), 2);
}

#[tokio::test]
async fn stream_error_event() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::stream_error("Overloaded"));
    let (r, _) = call(&provider(&mock), &[ChatMessage::user("hi")]).await;
    let e = r.unwrap_err();
    assert_eq!(e, ProviderError::Stream("Overloaded".into()));
    assert!(e.retryable());
    assert_eq!(
        mock.message_requests().len(),
        1,
        "not retried by the provider"
    );
}

#[tokio::test]
async fn cut_off_stream() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::cut_off(&["Hel", "lo"]));
    let (r, deltas) = call(&provider(&mock), &[ChatMessage::user("hi")]).await;
    let e = r.unwrap_err();
    assert!(matches!(e, ProviderError::CutOff(_)), "{e:?}");
    assert_eq!(deltas, ["Hel", "lo"]);
    assert_no_key(&e);
}

#[tokio::test]
async fn malformed_stream() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::Malformed);
    let (r, _) = call(&provider(&mock), &[ChatMessage::user("hi")]).await;
    let e = r.unwrap_err();
    assert!(matches!(e, ProviderError::Malformed(_)), "{e:?}");
    assert!(!e.retryable());
    assert_no_key(&e);
}

#[tokio::test]
async fn idle_and_cancel() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::Hang);
    let p = AnthropicProvider::new(AnthropicConfig {
        base_url: mock.anthropic_base_url(),
        api_key: Some(KEY.into()),
        idle_timeout: Duration::from_millis(200),
        ..Default::default()
    })
    .unwrap();
    let (r, _) = call(&p, &[ChatMessage::user("hi")]).await;
    assert!(matches!(r, Err(ProviderError::Idle(_))), "{r:?}");

    mock.push(MockReply::Hang);
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        c2.cancel();
    });
    let r = provider(&mock)
        .stream(
            "claude-test",
            "",
            &[ChatMessage::user("hi")],
            &[],
            &cancel,
            &Collect::default(),
        )
        .await;
    assert_eq!(r, Err(ProviderError::Cancelled));
    let body = &mock.message_requests()[1].body;
    assert!(body.get("system").is_none(), "empty system is omitted");
    assert!(body.get("tools").is_none());
}

#[tokio::test]
async fn unreachable_and_check_errors_hide_the_key() {
    let mock = MockLlm::start().await;
    let addr = mock.addr();
    drop(mock);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let p = AnthropicProvider::new(AnthropicConfig {
        base_url: format!("http://{addr}"),
        api_key: Some(KEY.into()),
        max_retries: 0,
        ..Default::default()
    })
    .unwrap();
    let (r, _) = call(&p, &[ChatMessage::user("hi")]).await;
    let e = r.unwrap_err();
    assert!(matches!(e, ProviderError::Unreachable { .. }), "{e:?}");
    assert_no_key(&e);
    let e = p.models().await.unwrap_err();
    assert_no_key(&e);
    assert!(!format!("{:?}", p.config()).contains(KEY));
}
