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

/// The bot-wide limit counts sends and edits in every chat together, refuses with 429 and
/// `retry_after` as the Bot API does, and does not carry the refused call out.
#[tokio::test]
async fn the_bot_wide_limit_spans_chats_and_refuses_with_retry_after() {
    let fake = super::FakeTelegram::start().await;
    fake.bot_flood_control(3, std::time::Duration::from_secs(1));
    let http = reqwest::Client::new();
    let call = |method: &str, body: serde_json::Value| {
        let req = http
            .post(format!(
                "{}/bot{}/{method}",
                fake.base_url(),
                super::FakeTelegram::TOKEN
            ))
            .json(&body);
        async move {
            let r = req.send().await.unwrap();
            (
                r.status().as_u16(),
                r.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    for chat in [1, 2, 3] {
        fake.dm(chat, "u", "hi");
        let (status, body) = call(
            "sendMessage",
            serde_json::json!({"chat_id": chat, "text": "x"}),
        )
        .await;
        assert_eq!(status, 200, "{body}");
    }
    let (status, body) = call(
        "sendMessage",
        serde_json::json!({"chat_id": 1, "text": "y"}),
    )
    .await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["parameters"]["retry_after"], 1);
    let (status, _) = call(
        "editMessageText",
        serde_json::json!({"chat_id": 2, "message_id": 2, "text": "z"}),
    )
    .await;
    assert_eq!(status, 429, "edits count too");
    assert_eq!(
        fake.bot_messages(1).len(),
        1,
        "the refused send was not carried out"
    );
    assert_eq!(fake.refused("sendMessage"), 1);
    // getUpdates is not a message: never limited.
    let (status, _) = call("getUpdates", serde_json::json!({"timeout": 0})).await;
    assert_eq!(status, 200);
    tokio::time::sleep(std::time::Duration::from_millis(1050)).await;
    let (status, body) = call(
        "sendMessage",
        serde_json::json!({"chat_id": 1, "text": "y"}),
    )
    .await;
    assert_eq!(status, 200, "after the window: {body}");
}
