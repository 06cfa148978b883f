//! Property tests of the signed webhook's inbound side: the signature headers and the
//! body are outside input. Arbitrary input never panics; a body is taken only when it has
//! the documented shape, and a malformed one is an error that names what is wrong.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;
use crate::prop_json::{body, json, object, set_path};

/// An id as the format allows it: a non-blank string or an integer.
fn ids() -> impl Strategy<Value = Value> {
    prop_oneof![
        "[a-zA-Z0-9:_-]{1,20}".prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
    ]
}

fn id_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn valid_messages() -> impl Strategy<Value = Value> {
    (
        ids(),
        ids(),
        prop::sample::select(vec!["direct", "group", "thread"]),
        prop::option::of(ids()),
        ids(),
        "[^\u{0}]{0,40}[a-z]",
        prop::option::of("[a-z ]{0,10}"),
    )
        .prop_map(|(peer, chat, kind, thread, message_id, text, name)| {
            json!({
                "type": "message",
                "peer": {"id": peer, "name": name},
                "chat": {"id": chat, "kind": kind, "thread": thread},
                "message_id": message_id,
                "text": text,
            })
        })
}

/// The body's values, whether arbitrary or a message / press with arbitrary parts.
fn bodies() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => body(),
        2 => (object(), prop::sample::select(vec!["message", "press", "reaction", "other"])).prop_map(|(mut v, t)| {
            set_path(&mut v, &["type"], json!(t));
            v.to_string().into_bytes()
        }),
        2 => (valid_messages(), prop::sample::select(vec![
            "peer", "chat", "message_id", "text", "type", "peer.id", "chat.id", "chat.kind",
        ]), json()).prop_map(|(mut v, field, value)| {
            // a valid message with one field replaced by arbitrary JSON
            let path: Vec<&str> = field.split('.').collect();
            set_path(&mut v, &path, value);
            v.to_string().into_bytes()
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any body: no panic; an error is a non-empty sentence; a taken item has the body's
    /// `type`, and its ids and text are the body's.
    #[test]
    fn any_body_is_parsed_or_refused_with_a_reason(raw in bodies()) {
        let v = serde_json::from_slice::<Value>(&raw);
        match parse_inbound("webhook:ops", &raw) {
            Err(e) => {
                prop_assert!(!e.trim().is_empty());
                if v.is_err() {
                    prop_assert!(e.starts_with("body is not valid JSON"), "{}", e);
                } else if !v.as_ref().unwrap().is_object() {
                    prop_assert_eq!(e, "body must be a JSON object");
                }
            }
            Ok(item) => {
                let v = v.unwrap();
                let s = |k: &str| id_text(&v[k]);
                match item {
                    Inbound::Message(m) => {
                        prop_assert_eq!(v["type"].as_str(), Some("message"));
                        prop_assert_eq!(m.channel.as_str(), "webhook:ops");
                        prop_assert_eq!(Some(m.text.as_str()), v["text"].as_str());
                        prop_assert_eq!(m.message_id, s("message_id"));
                        prop_assert_eq!(m.peer.id, id_text(&v["peer"]["id"]));
                        prop_assert_eq!(m.chat.id, id_text(&v["chat"]["id"]));
                        prop_assert!(!m.text.trim().is_empty() || !m.attachments.is_empty());
                    }
                    Inbound::Press(p) => {
                        prop_assert_eq!(v["type"].as_str(), Some("press"));
                        prop_assert_eq!(Some(p.data.as_str()), v["data"].as_str());
                        prop_assert_eq!(p.press_id, s("press_id"));
                    }
                    Inbound::Reaction(r) => {
                        prop_assert_eq!(v["type"].as_str(), Some("reaction"));
                        prop_assert_eq!(Some(r.key.as_str()), v["key"].as_str());
                        prop_assert_eq!(r.reaction_id, s("reaction_id"));
                        prop_assert_eq!(r.message_id, s("message_id"));
                    }
                }
            }
        }
    }

    /// A message of the documented shape is taken exactly.
    #[test]
    fn a_valid_message_is_taken_exactly(v in valid_messages()) {
        let raw = v.to_string();
        let Ok(Inbound::Message(m)) = parse_inbound("webhook:ops", raw.as_bytes()) else {
            return Err(TestCaseError::fail(format!("refused: {raw}")));
        };
        prop_assert_eq!(Some(m.text.as_str()), v["text"].as_str());
        prop_assert_eq!(m.peer.id, id_text(&v["peer"]["id"]));
        let name = v["peer"]["name"].as_str().filter(|n| !n.trim().is_empty());
        prop_assert_eq!(m.peer.name, name.map_or_else(|| id_text(&v["peer"]["id"]), str::to_string));
        prop_assert_eq!(m.chat.id, id_text(&v["chat"]["id"]));
        prop_assert_eq!(m.chat.thread, v["chat"].get("thread").filter(|t| !t.is_null()).map(id_text));
        let kind = match v["chat"]["kind"].as_str() {
            Some("direct") => ChatKind::Direct,
            Some("group") => ChatKind::Group,
            _ => ChatKind::Thread,
        };
        prop_assert_eq!(m.chat.kind, kind);
        prop_assert_eq!(m.message_id, id_text(&v["message_id"]));
        prop_assert!(m.addressed);
    }

    /// A required field missing from a valid message is refused, naming the field.
    #[test]
    fn a_missing_field_is_named(
        v in valid_messages(),
        field in prop::sample::select(vec!["peer", "chat", "message_id", "text", "type", "peer.id", "chat.id", "chat.kind"]),
    ) {
        let mut v = v;
        let path: Vec<&str> = field.split('.').collect();
        let (last, parent) = path.split_last().unwrap();
        let mut at = &mut v;
        for p in parent {
            at = &mut at[*p];
        }
        at.as_object_mut().unwrap().remove(*last);
        let e = parse_inbound("webhook:ops", v.to_string().as_bytes()).unwrap_err();
        prop_assert!(e.contains(&format!("`{field}`")), "{}", e);
    }

    /// Any signature headers: no panic; only the right signature of a fresh timestamp
    /// verifies.
    #[test]
    fn signatures_of_any_shape(
        raw in body(),
        ts in prop_oneof![any::<i64>().prop_map(|t| t.to_string()), "[0-9]{0,20}", any::<String>()],
        sig in prop_oneof![
            "sha256=[0-9a-f]{64}", "sha256=[0-9a-zA-Z]{0,70}", any::<String>(),
        ],
        now in 0i64..4_000_000_000,
    ) {
        let mut headers = HeaderMap::new();
        if let (Ok(t), Ok(s)) = (ts.parse(), sig.parse()) {
            headers.insert(TIMESTAMP_HEADER, t);
            headers.insert(SIGNATURE_HEADER, s);
        }
        prop_assert!(verify("secret", &headers, &raw, now, Duration::from_secs(300)).is_err());
        // the right signature, now
        let mut headers = HeaderMap::new();
        headers.insert(TIMESTAMP_HEADER, now.to_string().parse().unwrap());
        headers.insert(SIGNATURE_HEADER, sign("secret", now, &raw).parse().unwrap());
        prop_assert!(verify("secret", &headers, &raw, now, Duration::from_secs(300)).is_ok());
        prop_assert!(matches!(
            verify("secret", &headers, &raw, now + 301, Duration::from_secs(300)),
            Err(VerifyError::Stale)
        ));
        prop_assert!(verify("other", &headers, &raw, now, Duration::from_secs(300)).is_err());
    }
}
