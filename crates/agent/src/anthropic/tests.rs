use switchboard_protocol::{ToolCall, Usage};

use super::stream::Reply;
use super::wire::{wire_id, wire_messages};
use super::*;
use crate::provider::StreamedToolCall;

#[test]
fn tool_ids_are_made_acceptable_on_both_sides() {
    assert_eq!(wire_id("call:1/a"), "call_1_a");
    assert_eq!(wire_id("toolu_01-x"), "toolu_01-x");
    assert_eq!(wire_id(""), "call");
}

fn call(id: &str, name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments,
        metadata: None,
    }
}

#[test]
fn tool_results_merge_into_one_user_message_before_text() {
    let msgs = wire_messages(&[
        ChatMessage::user("look at a and b"),
        ChatMessage::assistant(
            "Sure.",
            vec![
                call("toolu_1", "view", json!({"path": "a"})),
                call("toolu_2", "view", json!({"path": "b"})),
            ],
        ),
        ChatMessage::tool_result("toolu_1", "A", false),
        ChatMessage::tool_result("toolu_2", "no such file", true),
        ChatMessage::user("and then?"),
    ]);
    assert_eq!(
        Value::Array(msgs),
        json!([
            {"role": "user", "content": [{"type": "text", "text": "look at a and b"}]},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Sure."},
                {"type": "tool_use", "id": "toolu_1", "name": "view", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "view", "input": {"path": "b"}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A", "is_error": false},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "no such file", "is_error": true},
                {"type": "text", "text": "and then?"},
            ]},
        ])
    );
}

#[test]
fn tool_results_come_first_even_after_user_text() {
    let msgs = wire_messages(&[
        ChatMessage::user("go"),
        ChatMessage::assistant("", vec![call("t1", "run", json!({}))]),
        ChatMessage::user("also, hurry"),
        ChatMessage::tool_result("t1", "", false),
    ]);
    assert_eq!(msgs.len(), 3);
    assert_eq!(
        msgs[1]["content"],
        json!([{"type": "tool_use", "id": "t1", "name": "run", "input": {}}])
    );
    assert_eq!(
        msgs[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "t1", "is_error": false},
            {"type": "text", "text": "also, hurry"},
        ])
    );
}

#[test]
fn consecutive_same_roles_merge_and_empty_blocks_are_skipped() {
    let msgs = wire_messages(&[
        ChatMessage::assistant("earlier reply", vec![]),
        ChatMessage::user("one"),
        ChatMessage::user(""),
        ChatMessage::user("two"),
        ChatMessage::assistant("", vec![]),
        ChatMessage::assistant("", vec![]),
    ]);
    assert_eq!(
        Value::Array(msgs),
        json!([
            {"role": "user", "content": [{"type": "text", "text": "(conversation resumed)"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "earlier reply"}]},
            {"role": "user", "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two"},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "(no content)"}]},
        ])
    );
}

#[test]
fn non_object_input_is_wrapped() {
    let msgs = wire_messages(&[
        ChatMessage::user("x"),
        ChatMessage::assistant(
            "",
            vec![
                call("t1", "a", json!("not json {")),
                call("t2", "b", json!([1, 2])),
                call("t3", "c", Value::Null),
            ],
        ),
    ]);
    let inputs: Vec<&Value> = msgs[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| &b["input"])
        .collect();
    assert_eq!(
        inputs,
        [
            &json!({"value": "not json {"}),
            &json!({"value": [1, 2]}),
            &json!({"value": null}),
        ]
    );
}

#[test]
fn body_shape() {
    let p = AnthropicProvider::new(AnthropicConfig::default()).unwrap();
    let tools = [ToolSpec {
        name: "view".into(),
        description: "View a file".into(),
        input_schema: json!({"type": "object"}),
    }];
    let body = p.body("claude-x", "", &[ChatMessage::user("hi")], &tools);
    assert!(body.get("system").is_none());
    assert_eq!(body["max_tokens"], 8192);
    assert_eq!(body["stream"], true);
    assert_eq!(
        body["tools"],
        json!([{"name": "view", "description": "View a file", "input_schema": {"type": "object"}}])
    );
    let body = p.body("claude-x", "be brief", &[], &[]);
    assert_eq!(body["system"], "be brief");
    assert!(body.get("tools").is_none());
}

#[test]
fn urls_do_not_double_v1() {
    for (base, want) in [
        (
            "https://api.anthropic.com",
            "https://api.anthropic.com/v1/messages",
        ),
        (
            "https://api.anthropic.com/",
            "https://api.anthropic.com/v1/messages",
        ),
        ("http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1/messages"),
        ("http://127.0.0.1:9/v1/", "http://127.0.0.1:9/v1/messages"),
    ] {
        let p = AnthropicProvider::new(AnthropicConfig {
            base_url: base.into(),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(p.url("messages"), want);
    }
}

#[test]
fn events_assemble_a_completion() {
    let mut r = Reply::default();
    let events = [
        json!({"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "hm"}}),
        json!({"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Hi"}}),
        json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "t1", "name": "view", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
        json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "th\":1}"}}),
        json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "t2", "name": "ls", "input": {}}}),
        json!({"type": "some_future_event", "x": 1}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 7}}),
        json!({"type": "message_stop"}),
    ];
    let mut texts = Vec::new();
    for e in events {
        if let Some(t) = r.apply(serde_json::from_value(e).unwrap()).unwrap() {
            texts.push(t);
        }
    }
    assert!(r.stopped);
    let c = r.finish();
    assert_eq!(texts, ["Hi"]);
    assert_eq!(c.text, "Hi");
    assert_eq!(c.finish_reason, "tool_use");
    assert_eq!(
        c.tool_calls,
        [
            StreamedToolCall {
                id: "t1".into(),
                name: "view".into(),
                arguments: "{\"path\":1}".into()
            },
            StreamedToolCall {
                id: "t2".into(),
                name: "ls".into(),
                arguments: "{}".into()
            },
        ]
    );
    assert_eq!(c.usage, Some(Usage::tokens(10, 7)));
}

#[test]
fn error_event_and_stray_json_delta() {
    let mut r = Reply::default();
    let e = serde_json::from_value(
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    )
    .unwrap();
    assert_eq!(
        r.apply(e).unwrap_err(),
        ProviderError::Stream("Overloaded".into())
    );
    let e = serde_json::from_value(json!({"type": "content_block_delta", "index": 4, "delta": {"type": "input_json_delta", "partial_json": "{"}})).unwrap();
    assert!(matches!(r.apply(e), Err(ProviderError::Malformed(_))));
}

#[test]
fn redacts_key() {
    let p = AnthropicProvider::new(AnthropicConfig {
        api_key: Some("sk-ant-secret-123".into()),
        ..Default::default()
    })
    .unwrap();
    assert_eq!(
        p.redact("bad key sk-ant-secret-123!"),
        "bad key [redacted]!"
    );
    let debug = format!("{:?}", p.config());
    assert!(!debug.contains("sk-ant"), "{debug}");
    assert!(debug.contains("[redacted]"));
    assert_eq!(p.name(), "anthropic");
}
