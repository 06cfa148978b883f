//! Property tests of the Slack inbound side: Socket Mode frames, Events API bodies (JSON,
//! form-encoded payloads, slash commands) and their payloads are outside input. Arbitrary
//! input never panics, what is not JSON is refused, and only a payload of a message's
//! shape becomes a message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::socket_mode::{SocketFrame, SocketKind, socket_frame};
use super::*;
use crate::channel::{Channel, ChatKind, Inbound, InboundHttpError};
use crate::prop_json::{body, json, list, obj, object, one_of, string};

const SECRET: &str = "signing-secret";

fn me() -> BotIdentity {
    BotIdentity {
        user_id: "UBOT".into(),
        user: "bot".into(),
        team: "T1".into(),
    }
}

fn channel() -> SlackChannel {
    let mut cfg = SlackConfig::new("xoxb-1");
    cfg.signing_secret = Some(SECRET.into());
    // nothing listens there; the tests never let the mapping ask (see `known_names`)
    cfg.api_base = "http://127.0.0.1:9/api".into();
    let ch = SlackChannel::new(cfg).unwrap();
    ch.me.set(me()).unwrap();
    ch
}

/// Every string in `v` becomes a user whose display name is known, so the mapping never
/// calls `users.info`.
fn known_names(ch: &SlackChannel, v: &Value) {
    match v {
        Value::String(s) => {
            ch.names
                .lock()
                .insert(s.clone(), (Some("Known".into()), std::time::Instant::now()));
        }
        Value::Array(a) => a.iter().for_each(|v| known_names(ch, v)),
        Value::Object(m) => m.values().for_each(|v| known_names(ch, v)),
        _ => {}
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn kinds() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "hello",
        "disconnect",
        "events_api",
        "interactive",
        "slash_commands",
        "event_callback",
        "block_actions",
        "slash_command",
        "url_verification",
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

/// A message event, mostly well-typed (see [`obj`]).
fn message_event() -> BoxedStrategy<Value> {
    let profile = obj(vec![
        ("display_name", false, string()),
        ("real_name", false, string()),
        ("name", false, string()),
    ]);
    let file = obj(vec![
        ("filetype", false, string()),
        ("name", false, string()),
        ("size", false, any::<u64>().prop_map(Value::from).boxed()),
        ("mimetype", false, string()),
        ("url_private", false, string()),
    ]);
    obj(vec![
        (
            "type",
            true,
            ids(&["message", "message", "app_mention", "reaction_added"]),
        ),
        ("user", true, ids(&["U1", "U1", "U1", "UBOT", ""])),
        ("channel", true, ids(&["C1", "D1", "D1", "C1", ""])),
        ("ts", true, ids(&["1.1", "1.2", "1.2", ""])),
        (
            "text",
            false,
            prop_oneof![
                string(),
                "(<@UBOT(\\|bot)?>[ ,:]*)?[a-z ]{0,10}"
                    .prop_map(Value::from)
                    .boxed(),
            ]
            .boxed(),
        ),
        ("channel_type", false, ids(&["im", "channel"])),
        ("thread_ts", false, ids(&["1.1", "1.3"])),
        (
            "subtype",
            false,
            prop_oneof![
                2 => Just(Value::Null),
                1 => ids(&["file_share", "thread_broadcast", "message_changed"]),
            ]
            .boxed(),
        ),
        (
            "bot_id",
            false,
            prop_oneof![3 => Just(Value::Null), 1 => string()].boxed(),
        ),
        ("user_profile", false, profile),
        ("files", false, list(file, 3)),
        ("team", false, string()),
    ])
}

fn event_callback() -> BoxedStrategy<Value> {
    obj(vec![
        ("type", true, ids(&["event_callback"])),
        ("event_id", false, string()),
        ("event", true, message_event()),
    ])
}

fn block_actions() -> BoxedStrategy<Value> {
    let action = obj(vec![
        ("value", false, string()),
        ("action_id", false, string()),
        ("action_ts", false, string()),
    ]);
    obj(vec![
        ("type", true, ids(&["block_actions", "view_submission"])),
        ("actions", true, list(action, 2)),
        (
            "user",
            true,
            obj(vec![
                ("id", true, ids(&["U1"])),
                ("username", false, string()),
            ]),
        ),
        (
            "channel",
            false,
            obj(vec![("id", true, ids(&["C1", "D1"]))]),
        ),
        (
            "container",
            false,
            obj(vec![
                ("channel_id", false, ids(&["C1", "D1"])),
                ("message_ts", false, ids(&["1.1"])),
            ]),
        ),
        (
            "message",
            false,
            obj(vec![
                ("ts", false, ids(&["1.1"])),
                ("thread_ts", false, ids(&["1.0"])),
            ]),
        ),
        ("trigger_id", false, string()),
    ])
}

fn slash_command() -> BoxedStrategy<Value> {
    obj(vec![
        ("type", true, ids(&["slash_command"])),
        ("command", true, ids(&["/new", "/x", ""])),
        ("user_id", true, ids(&["U1", ""])),
        ("channel_id", true, ids(&["C1", "D1", ""])),
        ("trigger_id", true, ids(&["tr1", ""])),
        ("text", false, string()),
        ("user_name", false, string()),
    ])
}

/// Payloads: arbitrary JSON, or mostly well-typed event callbacks, interactive payloads
/// and slash commands.
fn payloads() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => json(),
        1 => object(),
        4 => event_callback(),
        2 => block_actions(),
        2 => slash_command(),
    ]
}

/// Socket Mode frames: random text, JSON of any kind, or envelopes around payloads.
fn frames() -> impl Strategy<Value = String> {
    let envelope = |kind: &'static str, payload: BoxedStrategy<Value>| {
        obj(vec![
            ("type", true, ids(&[kind])),
            ("envelope_id", true, ids(&["E1"])),
            ("payload", true, payload),
        ])
    };
    prop_oneof![
        1 => any::<String>(),
        1 => json().prop_map(|v| v.to_string()),
        1 => (kinds(), prop::option::of(prop_oneof![Just(json!("E1")), json()]), prop::option::of(payloads()))
            .prop_map(|(kind, id, payload)| {
                let mut v = json!({"type": kind});
                if let Some(id) = id {
                    v["envelope_id"] = id;
                }
                if let Some(p) = payload {
                    v["payload"] = p;
                }
                v.to_string()
            }),
        4 => envelope("events_api", event_callback()).prop_map(|v| v.to_string()),
        2 => envelope("interactive", block_actions()).prop_map(|v| v.to_string()),
        2 => envelope("slash_commands", slash_command()).prop_map(|v| v.to_string()),
    ]
}

/// What a mapped item may be, given the payload it came from.
fn check_mapped(kind: SocketKind, payload: &Value, mapped: &Mapped) -> Result<(), TestCaseError> {
    match (kind, &mapped.item) {
        (SocketKind::EventsApi, Inbound::Message(m)) => {
            let e = &payload["event"];
            prop_assert!(
                matches!(e["type"].as_str(), Some("message" | "app_mention")),
                "{}",
                payload
            );
            prop_assert!(e.get("bot_id").is_none_or(Value::is_null));
            prop_assert_eq!(Some(m.peer.id.as_str()), e["user"].as_str());
            prop_assert!(m.peer.id != me().user_id && !m.peer.id.is_empty());
            prop_assert_eq!(Some(m.chat.id.as_str()), e["channel"].as_str());
            prop_assert_eq!(Some(m.message_id.as_str()), e["ts"].as_str());
            prop_assert!(!m.message_id.is_empty());
            prop_assert!(!m.text.is_empty() || !m.attachments.is_empty());
        }
        (SocketKind::Interactive, Inbound::Press(p)) => {
            prop_assert_eq!(payload["type"].as_str(), Some("block_actions"));
            prop_assert_eq!(Some(p.peer.id.as_str()), payload["user"]["id"].as_str());
            prop_assert!(!p.data.is_empty());
        }
        (SocketKind::SlashCommands, Inbound::Message(m)) => {
            let cmd = payload["command"].as_str().unwrap();
            prop_assert!(!cmd.is_empty() && m.text.starts_with(cmd.trim_start()));
            prop_assert_eq!(Some(m.message_id.as_str()), payload["trigger_id"].as_str());
        }
        (kind, item) => prop_assert!(false, "{:?} gave {:?}", kind, item),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any Socket Mode frame: no panic; it is read as its `type` says (not JSON, hello,
    /// disconnect, ignored, an envelope without id, or a payload to map), and mapping the
    /// payload gives a message or press only of the payload's shape.
    #[test]
    fn socket_mode_frames_never_panic(text in frames()) {
        let frame = socket_frame(&text);
        let Ok(v) = serde_json::from_str::<Value>(&text) else {
            prop_assert!(matches!(frame, SocketFrame::NotJson(_)), "{:?}", frame);
            return Ok(());
        };
        let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
        let id = v.get("envelope_id").and_then(Value::as_str);
        let payload = v.get("payload").cloned().unwrap_or(Value::Null);
        match (kind, id, frame) {
            ("hello", _, SocketFrame::Hello) | ("disconnect", _, SocketFrame::Disconnect) => {}
            ("events_api" | "interactive" | "slash_commands", None, SocketFrame::NoEnvelopeId(k)) => {
                prop_assert_eq!(k, kind);
            }
            (_, Some(id), SocketFrame::Envelope { kind: k, envelope_id, payload: p }) => {
                prop_assert_eq!(envelope_id.as_str(), id);
                prop_assert_eq!(&p, &payload);
                let want = match kind {
                    "events_api" => SocketKind::EventsApi,
                    "interactive" => SocketKind::Interactive,
                    "slash_commands" => SocketKind::SlashCommands,
                    other => return Err(TestCaseError::fail(format!("{other:?} is no envelope"))),
                };
                prop_assert_eq!(k, want);
                let ch = channel();
                known_names(&ch, &p);
                let mapped = runtime().block_on(ch.map_socket_payload(k, &p, &me(), None));
                if let Some(mapped) = mapped {
                    check_mapped(k, &p, &mapped)?;
                }
            }
            (other, _, SocketFrame::Other(k)) => {
                prop_assert!(!matches!(other, "hello" | "disconnect" | "events_api" | "interactive" | "slash_commands"));
                prop_assert_eq!(k.as_str(), other);
            }
            (kind, id, frame) => prop_assert!(false, "{:?} {:?} read as {:?}", kind, id, frame),
        }
    }

    /// Any correctly signed Events API body: no panic; a body that is neither JSON nor a
    /// form with `payload` or `command` is `Malformed`; the rest is ignored or mapped to
    /// an item of its shape. Without a valid signature: `Unauthorized`, whatever the body.
    #[test]
    fn events_api_bodies_never_panic(
        raw in prop_oneof![
            1 => body(),
            4 => payloads().prop_map(|p| p.to_string().into_bytes()),
            1 => payloads().prop_map(|p| {
                form_urlencoded::Serializer::new(String::new())
                    .append_pair("payload", &p.to_string()).finish().into_bytes()
            }),
            1 => (any::<String>(), any::<String>(), any::<String>()).prop_map(|(c, t, u)| {
                form_urlencoded::Serializer::new(String::new())
                    .append_pair("command", &c).append_pair("text", &t)
                    .append_pair("user_id", &u).append_pair("channel_id", "C1")
                    .append_pair("trigger_id", "tr1").finish().into_bytes()
            }),
            1 => any::<String>().prop_map(|s| format!("payload={s}").into_bytes()),
        ],
        form in any::<bool>(),
        bad_sig in "[0-9a-f]{64}",
    ) {
        let ch = channel();
        let ts = now_secs().to_string();
        let mut headers = axum::http::HeaderMap::new();
        headers.insert(TIMESTAMP_HEADER, ts.parse().unwrap());
        if form {
            headers.insert(axum::http::header::CONTENT_TYPE, "application/x-www-form-urlencoded".parse().unwrap());
        }
        let rt = runtime();
        headers.insert(SIGNATURE_HEADER, format!("v0={bad_sig}").parse().unwrap());
        prop_assert_eq!(rt.block_on(ch.inbound_http(&headers, &raw)), Err(InboundHttpError::Unauthorized));

        headers.insert(SIGNATURE_HEADER, signature(SECRET, &ts, &raw).parse().unwrap());
        let parsed = parse_http_body(&headers, &raw);
        if !form && !raw.starts_with(b"payload=") {
            prop_assert_eq!(parsed.is_ok(), serde_json::from_slice::<Value>(&raw).is_ok());
        }
        if let Ok(p) = &parsed {
            known_names(&ch, p);
        }
        let got = rt.block_on(ch.inbound_http(&headers, &raw));
        match parsed {
            Err(_) => prop_assert!(matches!(got, Err(InboundHttpError::Malformed(_))), "{:?}", got),
            Ok(p) => {
                let got = got.map_err(|e| TestCaseError::fail(format!("{e:?} for {p}")))?;
                if let Some(item) = got {
                    let kind = match p["type"].as_str() {
                        Some("event_callback") => SocketKind::EventsApi,
                        Some("block_actions") => SocketKind::Interactive,
                        Some("slash_command") => SocketKind::SlashCommands,
                        other => return Err(TestCaseError::fail(format!("{other:?} mapped"))),
                    };
                    check_mapped(kind, &p, &Mapped { item, keys: Vec::new(), thread: None })?;
                }
            }
        }
    }

    /// A message that mentions the bot in a channel maps exactly: a thread chat on the
    /// message, the text without the mention.
    #[test]
    fn a_channel_mention_maps_exactly(
        user in "U[A-Z0-9]{1,8}",
        channel_id in "C[A-Z0-9]{1,8}",
        ts in "[0-9]{1,10}\\.[0-9]{1,6}",
        rest in "[^<]{0,30}",
        name in "[a-zA-Z][a-zA-Z ]{0,11}",
    ) {
        let payload = json!({
            "type": "event_callback",
            "event_id": "Ev1",
            "event": {
                "type": "app_mention", "user": user, "channel": channel_id, "ts": ts,
                "text": format!("<@UBOT> {rest}"), "user_profile": {"display_name": name},
            },
        });
        let ch = channel();
        let mapped = runtime().block_on(ch.map_event_callback(&payload, &me(), None));
        let mut want = rest.trim_start();
        if want.starts_with([',', ':']) {
            want = want[1..].trim_start();
        }
        let want = want.trim();
        if want.is_empty() {
            prop_assert!(mapped.is_none());
            return Ok(());
        }
        let Some(Mapped { item: Inbound::Message(m), keys, thread }) = mapped else {
            return Err(TestCaseError::fail("not a message"));
        };
        prop_assert_eq!(m.text.as_str(), want);
        prop_assert_eq!(&m.peer.id, &user);
        prop_assert_eq!(&m.peer.name, &name);
        prop_assert_eq!(m.chat.kind, ChatKind::Thread);
        prop_assert_eq!(m.chat.thread.as_deref(), Some(ts.as_str()));
        prop_assert_eq!(thread, Some(thread_key(&channel_id, &ts)));
        prop_assert_eq!(keys, vec![format!("msg:{channel_id}:{ts}"), "event:Ev1".to_string()]);
    }

    /// Mentions in any text, of any user id: no panic; without one the text is only
    /// trimmed, and the result is never longer.
    #[test]
    fn strip_mention_takes_any_text(
        text in prop_oneof![any::<String>(), "[<@|>UBOT :,é]{0,40}"],
        user in prop_oneof![Just("UBOT".to_string()), any::<String>()],
    ) {
        let (out, found) = strip_mention(&text, &user);
        prop_assert!(out.len() <= text.len());
        if !found {
            prop_assert_eq!(out, text.trim());
        }
    }
}
