#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::bot_api::params;
use super::wire::entities;

#[test]
fn entities_use_utf16_offsets() {
    let e = entities("hé 🙂 @switchboard_test_bot hi @abc");
    assert_eq!(e.len(), 1);
    assert_eq!(e[0]["type"], "mention");
    assert_eq!(e[0]["offset"], 6);
    assert_eq!(e[0]["length"], 21);
    let e = entities("/start@switchboard_test_bot");
    assert_eq!(e[0]["type"], "bot_command");
    assert_eq!(e[0]["length"], 27);
}

#[test]
fn query_params_decode() {
    let p = params(Some("chat_id=-100&text=a%20b+c&offset=5"), b"").unwrap();
    assert_eq!(p["chat_id"], -100);
    assert_eq!(p["text"], "a b c");
    assert_eq!(p["offset"], 5);
}
