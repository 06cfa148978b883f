#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::http::HeaderMap;
use serde_json::Map;

use super::web_api::{blocks_param, params};
use super::*;

#[test]
fn form_params_decode() {
    let headers = HeaderMap::new();
    let p = params(&headers, Some("channel=C1"), b"text=a%20b+c").unwrap();
    assert_eq!(p["channel"], "C1");
    assert_eq!(p["text"], "a b c");
}

#[test]
fn blocks_are_checked() {
    let mut p = Map::new();
    p.insert(
        "blocks".into(),
        json!([{"type": "section", "text": {"type": "mrkdwn", "text": "x".repeat(3001)}}]),
    );
    assert_eq!(blocks_param(&p), Err("invalid_blocks"));
    let many: Vec<Value> = (0..51).map(|_| json!({"type": "divider"})).collect();
    p.insert("blocks".into(), json!(many));
    assert_eq!(blocks_param(&p), Err("invalid_blocks"));
    p.insert("blocks".into(), json!([{"type": "divider"}]));
    assert!(blocks_param(&p).unwrap().is_some());
}
