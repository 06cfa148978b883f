use serde_json::json;

use super::*;

fn channel() -> TeamsChannel {
    TeamsChannel::new(TeamsConfig::new("app-id-1", "app-secret-1", None)).unwrap()
}

fn activity(conv_type: &str, conv: &str, text: &str) -> serde_json::Value {
    json!({"type": "message", "id": "1700000000001", "channelId": "msteams",
        "serviceUrl": "https://smba.trafficmanager.net/emea/",
        "from": {"id": "29:1abc", "name": "Alice", "aadObjectId": "00000000-0000-4000-8000-00000000a11c"},
        "recipient": {"id": "28:app-id-1", "name": "Switchboard"},
        "conversation": {"id": conv, "conversationType": conv_type},
        "text": text,
        "entities": [{"type": "mention", "text": "<at>Switchboard</at>",
            "mentioned": {"id": "28:app-id-1", "name": "Switchboard"}}]})
}

#[test]
fn chats_are_personal_group_or_a_channel_thread_and_the_mention_is_cut() {
    let ch = channel();
    let Some(Inbound::Message(m)) = ch.map_message(&activity(
        "channel",
        "19:abc@thread.tacv2;messageid=1699999999999",
        "<at>Switchboard</at> fix the build",
    )) else {
        panic!("a message")
    };
    assert_eq!(m.chat.kind, ChatKind::Thread);
    assert_eq!(m.chat.thread.as_deref(), Some("1699999999999"));
    assert_eq!(m.text, "fix the build");
    assert!(m.addressed);
    assert_eq!(m.peer.id, "00000000-0000-4000-8000-00000000a11c");
    let Some(Inbound::Message(m)) = ch.map_message(&activity("personal", "a:1xyz", "hello")) else {
        panic!("a message")
    };
    assert_eq!(m.chat.kind, ChatKind::Direct);
    let Some(Inbound::Message(m)) = ch.map_message(&activity("groupChat", "19:g@thread.v2", "hi"))
    else {
        panic!("a message")
    };
    assert_eq!(m.chat.kind, ChatKind::Group);
}

#[test]
fn a_card_submit_is_a_press_of_the_card() {
    let ch = channel();
    let mut a = activity("personal", "a:1xyz", "");
    a["value"] = json!({"sb": "ap:12:y"});
    a["replyToId"] = json!("1700000000000");
    let Some(Inbound::Press(p)) = ch.map_message(&a) else {
        panic!("a press")
    };
    assert_eq!(p.data, "ap:12:y");
    assert_eq!(p.message_id, "1700000000000");
    assert_eq!(p.press_id, "1700000000001");
    let card = connector::card(
        "Allow?",
        &[Button {
            text: "Allow".into(),
            data: "ap:12:y".into(),
        }],
    );
    assert_eq!(card["content"]["actions"][0]["type"], "Action.Submit");
    assert_eq!(card["content"]["actions"][0]["data"]["sb"], "ap:12:y");
}

#[tokio::test]
async fn an_activity_without_a_valid_token_is_refused_before_anything_else() {
    let mut cfg = TeamsConfig::new("app-id-1", "app-secret-1", None);
    cfg.openid_url = "http://127.0.0.1:9/openid".into();
    let ch = TeamsChannel::new(cfg).unwrap();
    let body = activity("personal", "a:1xyz", "hello").to_string();
    let mut headers = axum::http::HeaderMap::new();
    assert_eq!(
        ch.inbound_http(&headers, body.as_bytes())
            .await
            .unwrap_err(),
        InboundHttpError::Unauthorized
    );
    headers.insert("authorization", "Bearer not.a.jwt".parse().unwrap());
    assert_eq!(
        ch.inbound_http(&headers, body.as_bytes())
            .await
            .unwrap_err(),
        InboundHttpError::Unauthorized
    );
    assert!(ch.services.lock().is_empty(), "nothing noted from it");
    let shown = format!("{:?}", ch.cfg);
    assert!(!shown.contains("app-secret-1"));
}
