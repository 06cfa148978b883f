//! The mock LLM driven by a real HTTP client, checked against the OpenAI streaming format.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use switchboard_test_support::mock_llm::{MockLlm, MockReply, MockToolCall};

fn chat_body(stream: bool, include_usage: bool) -> Value {
    let mut body = json!({
        "model": "gpt-test",
        "stream": stream,
        "messages": [{"role": "user", "content": "hello there mock"}],
    });
    if include_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

async fn post(url: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .bearer_auth("sk-test")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// The `data:` payloads of an SSE body.
fn data_lines(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("\n\n"),
        "body must end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|f| !f.is_empty())
        .map(|f| {
            f.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data frame: {f:?}"))
                .to_owned()
        })
        .collect()
}

/// Parses a whole stream; checks the invariants of every chunk. Returns (chunks, usage chunk).
fn parse_stream(body: &str) -> (Vec<Value>, Option<Value>) {
    let mut lines = data_lines(body);
    assert_eq!(lines.pop().as_deref(), Some("[DONE]"));
    let mut chunks: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["id"], "chatcmpl-1");
        assert_eq!(c["model"], "gpt-test");
        assert!(c["created"].as_u64().unwrap() > 1_600_000_000);
    }
    let usage = match chunks.last() {
        Some(last) if last["choices"] == json!([]) => chunks.pop(),
        _ => None,
    };
    for c in &chunks {
        assert_eq!(c["choices"].as_array().unwrap().len(), 1);
        assert_eq!(c["choices"][0]["index"], 0);
        assert!(c.get("usage").is_none());
    }
    (chunks, usage)
}

fn content(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}

fn finish_reasons(chunks: &[Value]) -> Vec<Value> {
    chunks
        .iter()
        .map(|c| c["choices"][0]["finish_reason"].clone())
        .collect()
}

#[tokio::test]
async fn text_stream_with_usage() {
    let mock = MockLlm::start().await;
    assert!(mock.base_url().starts_with("http://127.0.0.1:") && mock.base_url().ends_with("/v1"));
    mock.push(MockReply::text(&["Hel", "lo", " ✓"]));
    let resp = post(
        &format!("{}/chat/completions", mock.base_url()),
        &chat_body(true, true),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let (chunks, usage) = parse_stream(&resp.text().await.unwrap());

    assert_eq!(content(&chunks), "Hello ✓");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let mut reasons = finish_reasons(&chunks);
    assert_eq!(reasons.pop(), Some(json!("stop")));
    assert!(reasons.iter().all(Value::is_null));

    let usage = usage.expect("usage chunk requested");
    let u = &usage["usage"];
    assert_eq!(u["prompt_tokens"], 4); // 16 chars / 4
    assert_eq!(u["completion_tokens"], 3);
    assert_eq!(u["total_tokens"], 7);

    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("Authorization"), Some("Bearer sk-test"));
    assert_eq!(requests[0].body["model"], "gpt-test");
}

#[tokio::test]
async fn default_reply_without_usage_on_the_short_path() {
    let mock = MockLlm::start().await;
    let url = format!("http://{}/chat/completions", mock.addr());
    let resp = post(&url, &chat_body(true, false)).await;
    let (chunks, usage) = parse_stream(&resp.text().await.unwrap());
    assert_eq!(content(&chunks), "Hello from mock");
    assert!(usage.is_none(), "no usage chunk without include_usage");
    assert_eq!(mock.chat_requests()[0].path, "/chat/completions");
}

#[tokio::test]
async fn tool_calls_stream_the_openai_way() {
    let mock = MockLlm::start().await;
    let calls = vec![
        MockToolCall::new("call_1", "view", json!({"path": "src/main.rs"})),
        MockToolCall::new("call_2", "run_command", json!({"command": "ls -la /tmp"})),
    ];
    mock.push(MockReply::ToolCalls {
        text: Some("Let me look.".into()),
        calls,
        delay_ms: 0,
    });
    let resp = post(
        &format!("{}/chat/completions", mock.base_url()),
        &chat_body(true, false),
    )
    .await;
    let (chunks, _) = parse_stream(&resp.text().await.unwrap());
    assert_eq!(content(&chunks), "Let me look.");
    assert_eq!(finish_reasons(&chunks).last(), Some(&json!("tool_calls")));

    // reassemble like an OpenAI client does: by index
    let mut calls: BTreeMap<u64, (String, String, String, usize)> = BTreeMap::new();
    for c in &chunks {
        let Some(deltas) = c["choices"][0]["delta"]["tool_calls"].as_array() else {
            continue;
        };
        for d in deltas {
            let entry = calls.entry(d["index"].as_u64().unwrap()).or_default();
            if let Some(id) = d["id"].as_str() {
                assert!(entry.0.is_empty(), "id sent twice");
                assert_eq!(d["type"], "function");
                assert_eq!(d["function"]["arguments"], "");
                entry.0 = id.to_owned();
                entry.1 = d["function"]["name"].as_str().unwrap().to_owned();
            }
            entry
                .2
                .push_str(d["function"]["arguments"].as_str().unwrap());
            entry.3 += 1;
        }
    }
    let got: Vec<_> = calls.into_values().collect();
    assert_eq!(got.len(), 2);
    assert_eq!((got[0].0.as_str(), got[0].1.as_str()), ("call_1", "view"));
    assert_eq!(
        (got[1].0.as_str(), got[1].1.as_str()),
        ("call_2", "run_command")
    );
    assert_eq!(
        serde_json::from_str::<Value>(&got[0].2).unwrap(),
        json!({"path": "src/main.rs"})
    );
    assert_eq!(
        serde_json::from_str::<Value>(&got[1].2).unwrap(),
        json!({"command": "ls -la /tmp"})
    );
    for call in &got {
        assert!(
            (3..=4).contains(&call.3),
            "head + 2-3 argument pieces, got {} deltas",
            call.3
        );
    }
}

#[tokio::test]
async fn replies_are_fifo_then_default() {
    let mock = MockLlm::start().await;
    let url = format!("{}/chat/completions", mock.base_url());
    mock.push(MockReply::status(
        429,
        r#"{"error":{"message":"slow down"}}"#,
    ));
    mock.push(MockReply::Malformed);
    mock.push(MockReply::text(&["second"]));
    assert_eq!(mock.queued(), 3);

    let resp = post(&url, &chat_body(true, false)).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["content-type"], "application/json");
    assert_eq!(
        resp.text().await.unwrap(),
        r#"{"error":{"message":"slow down"}}"#
    );

    let resp = post(&url, &chat_body(true, false)).await;
    assert_eq!(resp.status(), 200);
    let lines = data_lines(&resp.text().await.unwrap());
    assert_eq!(lines[0], "{not json");
    assert!(serde_json::from_str::<Value>(&lines[0]).is_err());

    let resp = post(&url, &chat_body(true, false)).await;
    assert_eq!(
        content(&parse_stream(&resp.text().await.unwrap()).0),
        "second"
    );

    mock.set_default(MockReply::text(&["again"]));
    for _ in 0..2 {
        let resp = post(&url, &chat_body(true, false)).await;
        assert_eq!(
            content(&parse_stream(&resp.text().await.unwrap()).0),
            "again"
        );
    }
    assert_eq!(mock.chat_requests().len(), 5);
}

#[tokio::test]
async fn cut_off_breaks_the_connection() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::cut_off(&["par", "tial"]));
    let resp = post(
        &format!("{}/chat/completions", mock.base_url()),
        &chat_body(true, true),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut broke = false;
    while let Some(chunk) = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .unwrap()
    {
        match chunk {
            Ok(bytes) => text.push_str(std::str::from_utf8(&bytes).unwrap()),
            Err(_) => {
                broke = true;
                break;
            }
        }
    }
    assert!(broke, "the body must end with an error, got {text:?}");
    let chunks: Vec<Value> = data_lines(&text)
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(content(&chunks), "partial");
    assert!(finish_reasons(&chunks).iter().all(Value::is_null));
    assert!(!text.contains("[DONE]"));
}

#[tokio::test]
async fn hang_sends_headers_then_nothing_until_dropped() {
    let mock = MockLlm::start().await;
    let addr = mock.addr();
    mock.push(MockReply::Hang);
    let url = format!("{}/chat/completions", mock.base_url());
    let resp = tokio::time::timeout(Duration::from_secs(5), post(&url, &chat_body(true, false)))
        .await
        .expect("headers must arrive");
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), body.next())
            .await
            .is_err()
    );

    drop(mock);
    let end = tokio::time::timeout(Duration::from_secs(5), body.next())
        .await
        .expect("dropping the mock must end the hanging stream");
    assert!(!matches!(end, Some(Ok(_))), "got data after drop: {end:?}");

    let mut refused = false;
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "the mock still accepts connections after drop");
}

#[tokio::test]
async fn slow_text_is_paced() {
    let mock = MockLlm::start().await;
    mock.push(MockReply::text_slow(&["a", "b", "c"], 100));
    let started = Instant::now();
    let resp = post(
        &format!("{}/chat/completions", mock.base_url()),
        &chat_body(true, false),
    )
    .await;
    let (chunks, _) = parse_stream(&resp.text().await.unwrap());
    assert_eq!(content(&chunks), "abc");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn models_and_non_streamed_completions() {
    let mock = MockLlm::start().await;
    let models: Value = reqwest::get(format!("{}/models", mock.base_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        models,
        json!({"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
    );

    mock.push(MockReply::tool_call("call_9", "view", json!({"path": "a"})));
    let resp = post(
        &format!("{}/chat/completions", mock.base_url()),
        &chat_body(false, false),
    )
    .await;
    let completion: Value = resp.json().await.unwrap();
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
    let call = &completion["choices"][0]["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_9");
    assert_eq!(call["function"]["arguments"], r#"{"path":"a"}"#);
    assert!(completion["usage"]["total_tokens"].as_u64().unwrap() > 0);

    let resp = post(&format!("{}/nope", mock.base_url()), &json!({})).await;
    assert_eq!(resp.status(), 404);
    let paths: Vec<_> = mock.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(paths, ["/v1/models", "/v1/chat/completions", "/v1/nope"]);
}
