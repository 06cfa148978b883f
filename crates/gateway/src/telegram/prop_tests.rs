//! Property tests of the Telegram inbound mapping: updates are outside input (the long-poll
//! answer or the webhook's body). Arbitrary JSON never panics and never becomes a message
//! unless it has a message's shape; well-formed updates map exactly.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::inbound::{mentions_in_entities, strip_mention};
use super::*;
use crate::channel::{Channel, ChatKind, Inbound, InboundHttpError};
use crate::prop_json::{body, flag, int, json, list, obj, object, one_of, set_path, string};

const BOT: &str = "switchboard_test_bot";
const SECRET: &str = "hook-secret";

fn me() -> BotIdentity {
    BotIdentity {
        id: 999,
        username: BOT.into(),
    }
}

fn channel() -> TelegramChannel {
    let mut cfg = TelegramConfig::new("1:abc");
    cfg.webhook = Some(TelegramWebhook {
        url: "https://example.com/hook".into(),
        secret_token: SECRET.into(),
    });
    let ch = TelegramChannel::new(cfg).unwrap();
    ch.me.set(me()).unwrap();
    ch
}

fn user() -> BoxedStrategy<Value> {
    obj(vec![
        ("id", true, prop_oneof![Just(json!(999)), int()].boxed()),
        ("is_bot", false, flag()),
        ("first_name", false, string()),
        ("last_name", false, string()),
        ("username", false, string()),
    ])
}

fn file() -> BoxedStrategy<Value> {
    obj(vec![
        ("file_id", false, string()),
        ("file_name", false, string()),
        ("mime_type", false, string()),
        (
            "file_size",
            false,
            any::<u64>().prop_map(Value::from).boxed(),
        ),
    ])
}

/// A message, mostly well-typed (see [`obj`]); `reply` nests one more message.
fn message(reply: bool) -> BoxedStrategy<Value> {
    let text = prop_oneof![
        string(),
        "(@switchboard_test_bot )?[a-z ]{0,10}"
            .prop_map(Value::from)
            .boxed(),
    ]
    .boxed();
    let entity = obj(vec![
        (
            "type",
            true,
            one_of(vec![json!("mention"), json!("text_mention"), json!("bold")]),
        ),
        ("offset", true, (0u64..30).prop_map(Value::from).boxed()),
        ("length", true, (0u64..30).prop_map(Value::from).boxed()),
        ("user", false, user()),
    ]);
    let photo = obj(vec![
        ("file_id", false, string()),
        ("width", false, any::<u64>().prop_map(Value::from).boxed()),
        ("height", false, any::<u64>().prop_map(Value::from).boxed()),
        (
            "file_size",
            false,
            any::<u64>().prop_map(Value::from).boxed(),
        ),
    ]);
    let chat = obj(vec![
        ("id", true, int()),
        (
            "type",
            true,
            one_of(vec![
                json!("private"),
                json!("private"),
                json!("private"),
                json!("group"),
                json!("supergroup"),
                json!("channel"),
            ]),
        ),
    ]);
    let mut fields = vec![
        ("message_id", true, int()),
        ("from", true, user()),
        ("chat", true, chat),
        ("message_thread_id", false, int()),
        ("is_topic_message", false, flag()),
        ("forum_topic_created", false, json().boxed()),
        ("text", true, text.clone()),
        ("entities", false, list(entity.clone(), 3)),
        ("caption", false, text),
        ("caption_entities", false, list(entity, 3)),
        ("photo", false, list(photo, 3)),
        ("document", false, file()),
        ("voice", false, file()),
    ];
    if reply {
        fields.push(("reply_to_message", false, message(false)));
    }
    obj(fields)
}

/// Arbitrary JSON, and updates that are mostly well-typed (so the mapping gets past
/// deserialization to its decisions) with now and then a field of any JSON.
fn updates() -> impl Strategy<Value = Value> {
    let press = obj(vec![
        ("id", true, string()),
        ("from", true, user()),
        ("message", false, message(false)),
        ("data", false, string()),
    ]);
    prop_oneof![
        1 => json(),
        1 => (any::<i64>(), object(), any::<bool>()).prop_map(|(id, inner, press)| {
            let key = if press { "callback_query" } else { "message" };
            json!({ "update_id": id, key: inner })
        }),
        12 => obj(vec![
            ("update_id", true, int()),
            ("message", false, message(true)),
            ("callback_query", false, press),
        ]),
        1 => (any::<i64>(), object(), object(), object(), prop_oneof![
            Just("private"), Just("group"), Just("supergroup"), Just("channel"), Just("x"),
        ])
        .prop_map(|(id, mut msg, from, chat, kind)| {
            // a message with a chat and a sender, the rest arbitrary
            set_path(&mut msg, &["message_id"], json!(id));
            let mut chat = chat;
            set_path(&mut chat, &["id"], json!(id));
            set_path(&mut chat, &["type"], json!(kind));
            set_path(&mut msg, &["chat"], chat);
            let mut from = from;
            set_path(&mut from, &["id"], json!(id));
            set_path(&mut msg, &["from"], from);
            json!({ "update_id": id, "message": msg })
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// No panic; an update is a message only with a non-bot sender in a private chat or a
    /// group, and then carries that message's ids; a press only with data; anything
    /// without `message` or `callback_query` is ignored.
    #[test]
    fn arbitrary_updates_never_panic_and_garbage_is_ignored(raw in updates()) {
        let ch = channel();
        let got = ch.map_update(raw.clone(), &me());
        match got {
            None => {}
            Some(Inbound::Reaction(r)) => prop_assert!(false, "Telegram hands in no reactions: {r:?}"),
            Some(Inbound::Message(m)) => {
                let msg = &raw["message"];
                prop_assert!(msg.is_object(), "{}", raw);
                prop_assert!(msg["from"]["is_bot"] != json!(true));
                prop_assert!(matches!(
                    msg["chat"]["type"].as_str(),
                    Some("private" | "group" | "supergroup")
                ));
                prop_assert_eq!(m.message_id, msg["message_id"].as_i64().unwrap().to_string());
                prop_assert_eq!(m.chat.id, msg["chat"]["id"].as_i64().unwrap().to_string());
                prop_assert_eq!(m.peer.id, msg["from"]["id"].as_i64().unwrap().to_string());
                // groups need the bot named (mention, entity or reply) by default
                prop_assert!(m.addressed);
                prop_assert_eq!(m.chat.kind == ChatKind::Direct, msg["chat"]["type"] == "private");
                prop_assert!(m.text.len() <= msg["text"].as_str()
                    .or(msg["caption"].as_str()).map_or(0, str::len));
            }
            Some(Inbound::Press(p)) => {
                let q = &raw["callback_query"];
                prop_assert!(q.is_object() && raw["message"].is_null(), "{}", raw);
                prop_assert_eq!(Some(p.data.as_str()), q["data"].as_str());
                prop_assert_eq!(Some(p.press_id.as_str()), q["id"].as_str());
            }
        }
        if raw.get("message").is_none_or(Value::is_null)
            && raw.get("callback_query").is_none_or(Value::is_null)
        {
            prop_assert!(ch.map_update(raw, &me()).is_none());
        }
    }

    /// A private text message maps exactly: its text (without a mention of the bot), its
    /// ids, a direct chat, addressed.
    #[test]
    fn a_private_message_maps_exactly(
        update_id in any::<i64>(),
        message_id in any::<i64>(),
        chat_id in any::<i64>(),
        user_id in any::<i64>(),
        first in any::<String>(),
        text in any::<String>(),
    ) {
        let raw = json!({
            "update_id": update_id,
            "message": {
                "message_id": message_id,
                "from": {"id": user_id, "is_bot": false, "first_name": first},
                "chat": {"id": chat_id, "type": "private"},
                "text": text,
            },
        });
        let Some(Inbound::Message(m)) = channel().map_update(raw, &me()) else {
            return Err(TestCaseError::fail("not a message"));
        };
        prop_assert_eq!(m.text, strip_mention(&text, BOT).0);
        prop_assert_eq!(m.message_id, message_id.to_string());
        prop_assert_eq!(m.chat.id, chat_id.to_string());
        prop_assert_eq!(m.chat.kind, ChatKind::Direct);
        prop_assert_eq!(m.peer.id, user_id.to_string());
        prop_assert_eq!(m.peer.name, first);
        prop_assert!(m.addressed);
        prop_assert_eq!(m.meta, json!({"update_id": update_id}));
    }

    /// Photos of any announced size (Telegram's numbers, not ours) give one attachment,
    /// the largest.
    #[test]
    fn photos_of_any_size_give_one_attachment(
        sizes in prop::collection::vec(
            (prop::option::of(any::<u64>()), prop::option::of(any::<u64>()), prop::option::of(any::<u64>())),
            1..5,
        ),
    ) {
        let photo: Vec<Value> = sizes
            .iter()
            .enumerate()
            .map(|(i, (w, h, size))| json!({"file_id": format!("f{i}"), "width": w, "height": h, "file_size": size}))
            .collect();
        let raw = json!({
            "update_id": 1,
            "message": {
                "message_id": 2,
                "from": {"id": 3, "first_name": "A"},
                "chat": {"id": 3, "type": "private"},
                "photo": photo,
            },
        });
        let Some(Inbound::Message(m)) = channel().map_update(raw, &me()) else {
            return Err(TestCaseError::fail("not a message"));
        };
        prop_assert_eq!(m.attachments.len(), 1);
        prop_assert_eq!(m.attachments[0].kind.as_str(), "photo");
        prop_assert!(m.attachments[0].source.as_deref().is_some_and(|s| s.starts_with('f')));
    }

    /// The webhook route with the right secret: a body that is not JSON is `Malformed`;
    /// JSON is taken or ignored, never a panic.
    #[test]
    fn webhook_bodies_are_malformed_or_mapped(body in body()) {
        let ch = channel();
        let mut headers = axum::http::HeaderMap::new();
        headers.insert("x-telegram-bot-api-secret-token", SECRET.parse().unwrap());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let got = rt.block_on(ch.inbound_http(&headers, &body));
        match serde_json::from_slice::<Value>(&body) {
            Err(_) => prop_assert!(matches!(got, Err(InboundHttpError::Malformed(_))), "{:?}", got),
            Ok(v) => prop_assert_eq!(got, Ok(ch.map_update(v, &me()))),
        }
    }

    /// Mentions in any text, of any bot name: no panic; without one the text is only
    /// trimmed; the result is never longer; a leading `@bot` is taken off.
    #[test]
    fn strip_mention_takes_any_text(
        text in prop_oneof![any::<String>(), "[@a-zA-Z_ :,/é]{0,40}"],
        name in prop_oneof![Just(BOT.to_string()), "[a-zA-Zé_]{0,6}"],
        rest in "[^@]{0,20}",
    ) {
        let (out, found) = strip_mention(&text, &name);
        prop_assert!(out.len() <= text.len());
        if !found {
            prop_assert_eq!(out, text.trim());
        }
        let (out, found) = strip_mention(&format!("@{name} {rest}"), &name);
        if !name.is_empty() && !rest.starts_with([',', ':']) {
            prop_assert!(found);
            prop_assert_eq!(out, rest.trim());
        }
    }

    /// Entities at any offsets and lengths (Telegram's numbers): no panic; an entity that
    /// covers `@bot` exactly is a mention.
    #[test]
    fn entities_at_any_offsets(
        text in any::<String>(),
        entities in prop::collection::vec((any::<usize>(), any::<usize>()), 0..4),
    ) {
        let me = me();
        let e: Vec<ApiEntity> = entities
            .iter()
            .map(|&(offset, length)| ApiEntity { kind: "mention".into(), offset, length, user: None })
            .collect();
        let _ = mentions_in_entities(&text, Some(&e), &me);
        let full = format!("{text} @{BOT}");
        let offset = text.encode_utf16().count() + 1;
        let e = vec![ApiEntity { kind: "mention".into(), offset, length: BOT.len() + 1, user: None }];
        prop_assert!(mentions_in_entities(&full, Some(&e), &me));
    }
}

/// Found by the property above: serde builds a struct from an array, by position, so
/// `"from": [42]` was a user with id 42. An object-typed field that is not an object now
/// makes the update ignored; so does an update that is not an object.
#[test]
fn arrays_in_place_of_objects_are_refused() {
    let ch = channel();
    let ok = json!({"update_id": 1, "message": {"message_id": 5, "from": {"id": 42},
        "chat": {"id": 42, "type": "private"}, "text": "hi",
        "entities": [{"type": "bold", "offset": 0, "length": 2}], "photo": [{"file_id": "p"}]}});
    assert!(
        ch.map_update(ok.clone(), &me()).is_some(),
        "the object form is a message"
    );
    for (pointer, array) in [
        ("/message/from", json!([42])),
        ("/message/chat", json!([42, "private"])),
        ("/message/entities/0", json!(["bold", 0, 2])),
        ("/message/photo/0", json!(["p"])),
        (
            "/message",
            json!([5, {"id": 42}, {"id": 42, "type": "private"}]),
        ),
    ] {
        let mut bad = ok.clone();
        *bad.pointer_mut(pointer).unwrap() = array;
        assert!(ch.map_update(bad.clone(), &me()).is_none(), "{bad}");
    }
    assert!(ch.map_update(json!([1, ok["message"]]), &me()).is_none());
    let press = json!({"update_id": 2, "callback_query": {"id": "q", "from": [42], "data": "x",
        "message": {"message_id": 5, "chat": {"id": 42, "type": "private"}}}});
    assert!(ch.map_update(press, &me()).is_none());
}
