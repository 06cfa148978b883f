//! Property tests of the Discord inbound side: gateway frames and their dispatches
//! (MESSAGE_CREATE, INTERACTION_CREATE, thread events, READY) are outside input. They are
//! read here as the connection reads them; arbitrary input never panics and becomes a
//! message or press only with the shape of one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::gateway::GatewayPayload;
use super::inbound::strip_mention;
use super::wire::{ApiInteraction, ApiMessage, ApiReady};
use super::*;
use crate::channel::ChatKind;
use crate::platform::wire::from_object;
use crate::prop_json::{flag, int, json, list, obj, object, one_of, string};

const BOT: &str = "900";

fn channel() -> DiscordChannel {
    let mut cfg = DiscordConfig::new("abc");
    cfg.channels = vec!["C1".into()];
    let ch = DiscordChannel::new(cfg).unwrap();
    *ch.bot_id.lock() = Some(BOT.into());
    ch
}

fn events() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "MESSAGE_CREATE",
        "INTERACTION_CREATE",
        "READY",
        "RESUMED",
        "THREAD_CREATE",
        "THREAD_UPDATE",
        "THREAD_DELETE",
        "GUILD_CREATE",
        "THREAD_LIST_SYNC",
        "",
    ])
}

fn ids(values: &[&str]) -> BoxedStrategy<Value> {
    prop_oneof![
        4 => one_of(values.iter().map(|v| json!(v)).collect()),
        1 => string(),
    ]
    .boxed()
}

fn user() -> BoxedStrategy<Value> {
    obj(vec![
        ("id", true, ids(&["U1", "U1", "U1", BOT])),
        ("username", false, string()),
        ("global_name", false, string()),
        ("bot", false, flag()),
    ])
}

/// A MESSAGE_CREATE `d`, mostly well-typed (see [`obj`]).
fn message() -> BoxedStrategy<Value> {
    let attachment = obj(vec![
        ("filename", false, string()),
        ("url", false, string()),
        ("size", false, any::<u64>().prop_map(Value::from).boxed()),
        (
            "content_type",
            false,
            ids(&["image/png", "audio/ogg", "video/mp4", "text/plain"]),
        ),
    ]);
    obj(vec![
        ("id", true, ids(&["M1"])),
        ("channel_id", true, ids(&["C1", "C1", "C2", "T1"])),
        ("guild_id", false, ids(&["G1"])),
        ("author", true, user()),
        (
            "content",
            false,
            prop_oneof![
                string(),
                "(<@!?900>[ ,:]*)?[a-z ]{0,10}"
                    .prop_map(Value::from)
                    .boxed(),
            ]
            .boxed(),
        ),
        ("mentions", false, list(user(), 2)),
        (
            "type",
            false,
            one_of(vec![json!(0), json!(0), json!(19), json!(7)]),
        ),
        ("attachments", false, list(attachment, 2)),
        (
            "webhook_id",
            false,
            prop_oneof![3 => Just(Value::Null), 1 => string()].boxed(),
        ),
        (
            "referenced_message",
            false,
            obj(vec![("author", false, user())]),
        ),
        (
            "channel_type",
            false,
            one_of(vec![json!(0), json!(1), json!(11)]),
        ),
    ])
}

/// An INTERACTION_CREATE `d`, mostly well-typed.
fn interaction() -> BoxedStrategy<Value> {
    obj(vec![
        ("id", true, ids(&["I1"])),
        ("type", true, one_of(vec![json!(3), json!(2)])),
        ("token", true, string()),
        ("application_id", false, ids(&["123", "not an id"])),
        ("channel_id", false, ids(&["C1", "T1"])),
        ("guild_id", false, ids(&["G1"])),
        ("member", false, obj(vec![("user", false, user())])),
        ("user", false, user()),
        ("message", false, obj(vec![("id", true, ids(&["M1"]))])),
        ("data", false, obj(vec![("custom_id", false, string())])),
    ])
}

fn thread() -> BoxedStrategy<Value> {
    obj(vec![
        ("id", true, ids(&["T1"])),
        ("parent_id", true, ids(&["C1"])),
        (
            "type",
            true,
            one_of(vec![json!(10), json!(11), json!(12), json!(0)]),
        ),
    ])
}

/// Gateway frames: random text, arbitrary JSON, payloads with an arbitrary `d`, and
/// dispatches whose `d` is mostly of their event's shape.
fn frames() -> impl Strategy<Value = String> {
    let dispatch = |t: &'static str, d: BoxedStrategy<Value>| {
        obj(vec![
            (
                "op",
                true,
                prop_oneof![4 => Just(json!(0)), 1 => int()].boxed(),
            ),
            ("t", true, ids(&[t])),
            ("d", true, d),
            ("s", false, any::<u64>().prop_map(Value::from).boxed()),
        ])
        .prop_map(|v| v.to_string())
    };
    prop_oneof![
        1 => any::<String>(),
        1 => json().prop_map(|v| v.to_string()),
        1 => (
            prop_oneof![Just(json!(0)), Just(json!(11)), json()],
            events(),
            prop_oneof![json(), object()],
            prop::option::of(any::<u64>()),
        )
            .prop_map(|(op, t, d, s)| json!({"op": op, "t": t, "d": d, "s": s}).to_string()),
        4 => dispatch("MESSAGE_CREATE", message()),
        2 => dispatch("INTERACTION_CREATE", interaction()),
        1 => dispatch("THREAD_CREATE", thread()),
        1 => dispatch("THREAD_LIST_SYNC", obj(vec![("threads", true, list(thread(), 3))])),
        1 => dispatch("READY", obj(vec![
            ("session_id", true, string()),
            ("resume_gateway_url", true, ids(&["wss://x"])),
            ("user", true, user()),
        ])),
    ]
}

/// A message mapped from `d` has `d`'s ids, a human author, and a reason to be taken.
fn check_message(d: &Value, m: &crate::channel::InboundMessage) -> Result<(), TestCaseError> {
    prop_assert_eq!(Some(m.message_id.as_str()), d["id"].as_str());
    prop_assert_eq!(Some(m.chat.id.as_str()), d["channel_id"].as_str());
    prop_assert_eq!(Some(m.peer.id.as_str()), d["author"]["id"].as_str());
    prop_assert!(m.peer.id != BOT);
    prop_assert!(d["author"]["bot"] != json!(true));
    prop_assert!(d.get("webhook_id").is_none_or(Value::is_null));
    // (the text may be empty once the mention is taken out: "<@900>" alone)
    prop_assert!(
        d["content"].as_str().is_some_and(|c| !c.trim().is_empty()) || !m.attachments.is_empty()
    );
    match d.get("guild_id").and_then(Value::as_str) {
        None => prop_assert_eq!(m.chat.kind, ChatKind::Direct),
        Some(_) => prop_assert!(m.addressed || m.chat.id == "C1", "{:?}", m),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any gateway frame, read and dispatched as the connection does (without the
    /// socket): no panic; a frame that is not a payload is an error; a dispatch gives a
    /// message or press only with that shape.
    #[test]
    fn gateway_frames_never_panic(text in frames()) {
        let ch = channel();
        let Ok(p) = GatewayPayload::parse(&text) else {
            let v = serde_json::from_str::<Value>(&text).ok();
            prop_assert!(
                v.as_ref().is_none_or(|v| !v["op"].is_u64()
                    || !(v["s"].is_null() || v["s"].is_u64())
                    || !(v["t"].is_null() || v["t"].is_string())),
                "{}", text
            );
            return Ok(());
        };
        if p.op != 0 {
            return Ok(());
        }
        let t = p.t.clone().unwrap_or_default();
        match t.as_str() {
            "READY" => {
                if let Ok(r) = from_object::<ApiReady>(p.d.clone()) {
                    prop_assert_eq!(Some(r.session_id.as_str()), p.d["session_id"].as_str());
                }
            }
            "MESSAGE_CREATE" => match from_object::<ApiMessage>(p.d.clone()) {
                Ok(m) => {
                    if let Some(msg) = ch.map_message(m, p.s) {
                        check_message(&p.d, &msg)?;
                        prop_assert_eq!(msg.meta.get("seq").and_then(Value::as_u64), p.s);
                    }
                }
                Err(_) => prop_assert!(
                    !(p.d["id"].is_string() && p.d["channel_id"].is_string() && p.d["author"]["id"].is_string())
                        // with only those, it parses: else some other field is malformed
                        || p.d.as_object().is_some_and(|o| o.len() > 3)
                        || p.d["author"].as_object().is_some_and(|o| o.len() > 1),
                    "{}", p.d
                ),
            },
            "INTERACTION_CREATE" => {
                if let Ok(i) = from_object::<ApiInteraction>(p.d.clone())
                    && let Some((press, token)) = ch.map_press(i)
                {
                    prop_assert_eq!(p.d["type"].as_u64(), Some(3));
                    prop_assert_eq!(Some(press.press_id.as_str()), p.d["id"].as_str());
                    prop_assert_eq!(Some(token.as_str()), p.d["token"].as_str());
                    prop_assert_eq!(Some(press.data.as_str()), p.d["data"]["custom_id"].as_str());
                    prop_assert_eq!(Some(press.chat.id.as_str()), p.d["channel_id"].as_str());
                }
            }
            _ => {
                let before = ch.threads.lock().clone();
                ch.note_threads(&t, &p.d);
                let after = ch.threads.lock().clone();
                if !matches!(t.as_str(), "THREAD_CREATE" | "THREAD_UPDATE" | "GUILD_CREATE" | "THREAD_LIST_SYNC" | "THREAD_DELETE") {
                    prop_assert_eq!(before, after);
                }
            }
        }
    }

    /// A direct message from a person maps exactly: a direct chat, addressed, the text
    /// without mentions of the bot.
    #[test]
    fn a_direct_message_maps_exactly(
        id in "[0-9]{1,19}",
        channel_id in "[0-9]{1,19}",
        author in "[0-9]{1,19}",
        username in "[a-z]{0,8}",
        content in any::<String>(),
        s in prop::option::of(any::<u64>()),
    ) {
        prop_assume!(author != BOT);
        let d = json!({
            "id": id, "channel_id": channel_id, "content": content,
            "author": {"id": author, "username": username},
        });
        let m: ApiMessage = serde_json::from_value(d).unwrap();
        let got = channel().map_message(m, s);
        let text = strip_mention(&content, BOT);
        if content.trim().is_empty() {
            prop_assert!(got.is_none());
            return Ok(());
        }
        let m = got.unwrap();
        prop_assert_eq!(m.text, text);
        prop_assert_eq!(m.message_id, id);
        prop_assert_eq!(m.chat.id, channel_id);
        prop_assert_eq!(m.chat.kind, ChatKind::Direct);
        prop_assert_eq!(m.peer.id, author);
        prop_assert!(m.addressed);
    }

    /// Thread events of any shape: no panic; a THREAD_CREATE of a thread (type 10-12) is
    /// known afterwards, a THREAD_DELETE forgets it.
    #[test]
    fn thread_events_of_any_shape(
        t in events(),
        d in json(),
        id in "[0-9]{1,19}",
        kind in 10u64..=12,
    ) {
        let ch = channel();
        ch.note_threads(t, &d);
        ch.note_threads("THREAD_CREATE", &json!({"id": id, "parent_id": "C1", "type": kind}));
        let parent = ch.threads.lock().get(&id).cloned();
        prop_assert_eq!(parent.as_deref(), Some("C1"));
        ch.note_threads("THREAD_DELETE", &json!({"id": id}));
        prop_assert!(!ch.threads.lock().contains_key(&id));
    }

    /// Mentions in any text: no panic; the result is never longer, and text without `<@`
    /// is only trimmed.
    #[test]
    fn strip_mention_takes_any_text(
        text in prop_oneof![any::<String>(), "[<@!>90 ,:é]{0,30}"],
        bot in prop_oneof![Just(BOT.to_string()), any::<String>()],
    ) {
        let out = strip_mention(&text, &bot);
        prop_assert!(out.len() <= text.len());
        if !text.contains("<@") {
            prop_assert_eq!(out, text.trim());
        }
    }
}

/// serde builds a struct from an array too, field by position: `"author": ["U1"]` was a
/// user `U1`. Every object-typed field of a dispatch must be an object, or the dispatch is
/// refused.
#[test]
fn arrays_in_place_of_objects_are_refused() {
    let ch = channel();
    let ok = json!({"id": "M1", "channel_id": "C9", "content": "hi",
        "author": {"id": "U1", "username": "u"},
        "mentions": [{"id": BOT}], "attachments": [{"filename": "a.txt", "url": "https://x/a"}],
        "referenced_message": {"author": {"id": BOT}}});
    let m = ch
        .map_message(from_object::<ApiMessage>(ok.clone()).unwrap(), Some(1))
        .expect("the object form is a message");
    assert_eq!(m.peer.id, "U1");
    for (pointer, array) in [
        ("/author", json!(["U1", "u"])),
        ("/mentions/0", json!([BOT])),
        ("/attachments/0", json!(["a.txt", "https://x/a"])),
        ("/referenced_message", json!([{"id": BOT}])),
        ("/referenced_message/author", json!([BOT])),
    ] {
        let mut bad = ok.clone();
        *bad.pointer_mut(pointer).unwrap() = array;
        assert!(from_object::<ApiMessage>(bad.clone()).is_err(), "{bad}");
    }
    assert!(from_object::<ApiMessage>(json!(["M1", "C9", null, {"id": "U1"}])).is_err());

    let press = json!({"id": "I1", "type": 3, "token": "t", "channel_id": "C1",
        "member": {"user": {"id": "U1"}}, "message": {"id": "M1"}, "data": {"custom_id": "x"}});
    assert!(from_object::<ApiInteraction>(press.clone()).is_ok());
    for (pointer, array) in [
        ("/member", json!([{"id": "U1"}])),
        ("/member/user", json!(["U1"])),
        ("/message", json!(["M1"])),
        ("/data", json!(["x"])),
    ] {
        let mut bad = press.clone();
        *bad.pointer_mut(pointer).unwrap() = array;
        assert!(from_object::<ApiInteraction>(bad.clone()).is_err(), "{bad}");
    }
    let ready = json!({"session_id": "s", "resume_gateway_url": "wss://x", "user": ["900", "bot"]});
    assert!(GatewayPayload::parse(r#" {"op": 0, "d": {}, "s": 1, "t": "RESUMED"}"#).is_ok());
    assert!(GatewayPayload::parse(r#"[0, {}, 1, "RESUMED"]"#).is_err());
    assert!(from_object::<ApiReady>(ready).is_err());
}
