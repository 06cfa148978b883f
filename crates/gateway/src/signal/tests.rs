use serde_json::json;

use super::*;
use crate::channel::Inbound;

fn channel() -> SignalChannel {
    SignalChannel::new(SignalConfig::new("http://127.0.0.1:9", "+15550100199")).unwrap()
}

fn event(data: serde_json::Value) -> serde_json::Value {
    json!({"account": "+15550100199", "envelope": {
        "source": "+4915112345", "sourceNumber": "+4915112345",
        "sourceUuid": "a1b2c3d4-0000-4000-8000-000000000001", "sourceName": "Alice",
        "sourceDevice": 1, "timestamp": 1700000000001u64, "dataMessage": data}})
}

#[test]
fn a_direct_message_its_quote_and_attachments_are_read() {
    let ch = channel();
    let Some(Inbound::Message(m)) = ch.map_envelope(&event(json!({
        "timestamp": 1700000000001u64, "message": "deny, not today",
        "quote": {"id": 1699999999999u64, "authorNumber": "+15550100199", "text": "Allow?"},
        "attachments": [{"contentType": "audio/aac", "filename": null, "id": "xyz.aac", "size": 4}]
    }))) else {
        panic!("not a message")
    };
    assert_eq!(m.chat.kind, ChatKind::Direct);
    assert_eq!(m.chat.id, "a1b2c3d4-0000-4000-8000-000000000001");
    assert_eq!(m.peer.name, "Alice");
    assert_eq!(m.reply_to.as_deref(), Some("1699999999999"));
    assert_eq!(
        m.message_id,
        "a1b2c3d4-0000-4000-8000-000000000001:1700000000001"
    );
    assert_eq!(m.attachments[0].kind, "voice");
    assert_eq!(
        m.attachments[0].source.as_deref(),
        Some("xyz.aac\nr:a1b2c3d4-0000-4000-8000-000000000001")
    );
}

#[test]
fn in_a_group_only_a_mention_or_a_reply_to_the_bot_is_taken() {
    let ch = channel();
    let group = json!({"groupId": "R3JvdXAgb25l", "type": "DELIVER"});
    assert!(
        ch.map_envelope(&event(
            json!({"timestamp": 1u64, "message": "lunch?", "groupInfo": group})
        ))
        .is_none()
    );
    // "Hi ￼, and ￼" mentioning the bot (cut) and Bob (written out); offsets in UTF-16.
    let Some(Inbound::Message(m)) = ch.map_envelope(&event(json!({
        "timestamp": 2u64, "message": "😀 \u{fffc} ask \u{fffc}", "groupInfo": group,
        "mentions": [{"name": "Bob", "number": "+4917000000", "start": 9, "length": 1},
                     {"name": "bot", "number": "+15550100199", "start": 3, "length": 1}]
    }))) else {
        panic!("a mention is taken")
    };
    assert_eq!(m.chat.kind, ChatKind::Group);
    assert_eq!(m.chat.id, "R3JvdXAgb25l");
    assert_eq!(m.text, "😀  ask @Bob");
    assert!(m.addressed);
}

#[test]
fn reactions_are_answers_and_the_bots_own_or_removed_ones_are_skipped() {
    let ch = channel();
    let Some(Inbound::Reaction(r)) = ch.map_envelope(&event(json!({"timestamp": 3u64,
        "reaction": {"emoji": "👍", "targetAuthorNumber": "+15550100199",
                     "targetSentTimestamp": 1699999999999u64, "isRemove": false}})))
    else {
        panic!("a reaction")
    };
    assert_eq!(r.message_id, "1699999999999");
    assert_eq!(r.key, "👍");
    assert!(
        ch.map_envelope(&event(json!({"timestamp": 4u64,
            "reaction": {"emoji": "👍", "targetSentTimestamp": 1u64, "isRemove": true}})))
            .is_none()
    );
    let mut own = event(json!({"timestamp": 5u64, "message": "echo"}));
    own["envelope"]["sourceNumber"] = json!("+15550100199");
    assert!(ch.map_envelope(&own).is_none());
}

#[tokio::test]
async fn an_eleventh_edit_is_refused_so_the_reply_goes_on_in_a_new_message() {
    let ch = channel();
    ch.edits.lock().insert("1700000000000".into(), MAX_EDITS);
    let chat = ChatRef {
        id: "a".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    let e = ch
        .edit(&chat, "1700000000000", "more", &[])
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ChannelError::Api { code: 400, description, .. } if description.contains("Signal's limit")),
        "{e:?}"
    );
    assert!(SignalChannel::new(SignalConfig::new("http://127.0.0.1:9", "4915")).is_err());
}
