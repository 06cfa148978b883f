//! Strategies for the platform-payload property tests: arbitrary JSON built from the field
//! names the platforms really use, so that the generated garbage reaches deep into the
//! mapping code instead of failing at the first `get`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;
use serde_json::{Map, Value};

/// Keys of Telegram updates, Slack envelopes and events, Discord gateway payloads and the
/// signed webhook's body, plus a few random ones.
pub(crate) const KEYS: &[&str] = &[
    // Telegram
    "update_id",
    "message",
    "edited_message",
    "callback_query",
    "message_id",
    "from",
    "chat",
    "id",
    "type",
    "is_bot",
    "first_name",
    "last_name",
    "username",
    "text",
    "caption",
    "entities",
    "caption_entities",
    "offset",
    "length",
    "user",
    "message_thread_id",
    "is_topic_message",
    "reply_to_message",
    "forum_topic_created",
    "photo",
    "document",
    "voice",
    "file_id",
    "file_size",
    "file_name",
    "mime_type",
    "width",
    "height",
    "data",
    // Slack
    "event",
    "event_id",
    "envelope_id",
    "payload",
    "subtype",
    "bot_id",
    "channel",
    "channel_type",
    "ts",
    "thread_ts",
    "user_profile",
    "display_name",
    "real_name",
    "name",
    "files",
    "filetype",
    "url_private",
    "actions",
    "value",
    "action_id",
    "container",
    "message_ts",
    "channel_id",
    "trigger_id",
    "command",
    "user_id",
    "user_name",
    "team",
    // Discord
    "op",
    "d",
    "s",
    "t",
    "author",
    "bot",
    "content",
    "guild_id",
    "webhook_id",
    "mentions",
    "referenced_message",
    "attachments",
    "member",
    "custom_id",
    "application_id",
    "token",
    "global_name",
    "threads",
    "parent_id",
    "content_type",
    "url",
    "size",
    "filename",
    // webhook
    "peer",
    "kind",
    "thread",
    "press_id",
];

/// String values that mean something to one of the mappers.
pub(crate) const WORDS: &[&str] = &[
    "",
    " ",
    "message",
    "private",
    "group",
    "supergroup",
    "channel",
    "mention",
    "text_mention",
    "event_callback",
    "app_mention",
    "block_actions",
    "slash_command",
    "events_api",
    "interactive",
    "slash_commands",
    "hello",
    "disconnect",
    "im",
    "file_share",
    "thread_broadcast",
    "D123",
    "C123",
    "U123",
    "UBOT",
    "1.2",
    "1.3",
    "MESSAGE_CREATE",
    "INTERACTION_CREATE",
    "READY",
    "THREAD_CREATE",
    "GUILD_CREATE",
    "THREAD_DELETE",
    "900",
    "direct",
    "thread",
    "press",
    "<@UBOT> hi",
    "<@900> hi",
    "@switchboard_test_bot hi",
    "/new",
    "/stop@switchboard_test_bot",
    "ap:abc:y",
    "é✓🙂",
    "\u{0}",
];

pub(crate) fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => prop::sample::select(KEYS).prop_map(str::to_string),
        1 => "[a-z_]{0,8}",
    ]
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::Bool),
        2 => prop_oneof![
            Just(0i64), Just(1), Just(3), Just(10), Just(11), Just(-1), Just(900),
            any::<i64>(),
        ]
        .prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        3 => prop::sample::select(WORDS).prop_map(Value::from),
        2 => any::<String>().prop_map(Value::from),
    ]
}

/// Nested JSON (objects keyed by [`KEYS`], arrays, leaves), a few levels deep.
pub(crate) fn json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            1 => prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            4 => prop::collection::vec((key(), inner), 0..8)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A JSON object (what most payloads are), keyed by [`KEYS`].
pub(crate) fn object() -> impl Strategy<Value = Value> {
    prop::collection::vec((key(), json()), 0..10)
        .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>()))
}

/// Bytes a body may be: random, JSON text of [`json`], or that text cut or spoiled.
pub(crate) fn body() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        2 => prop::collection::vec(any::<u8>(), 0..64),
        3 => json().prop_map(|v| v.to_string().into_bytes()),
        2 => (json(), any::<usize>()).prop_map(|(v, cut)| {
            let mut b = v.to_string().into_bytes();
            b.truncate(cut % (b.len() + 1));
            b
        }),
        1 => (json(), any::<usize>(), any::<u8>()).prop_map(|(v, at, byte)| {
            let mut b = v.to_string().into_bytes();
            let i = at % b.len().max(1);
            if let Some(x) = b.get_mut(i) {
                *x = byte;
            }
            b
        }),
    ]
}

/// `v` with the object at `path` (made if missing) holding `key: value`.
pub(crate) fn set_path(v: &mut Value, path: &[&str], value: Value) {
    let mut cur = v;
    for p in path {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        cur = cur
            .as_object_mut()
            .unwrap()
            .entry(p.to_string())
            .or_insert(Value::Null);
    }
    *cur = value;
}

/// An object of `fields` (name, required, strategy of its value). Each field is absent
/// now and then (rarely when required), mostly of its type, and now and then arbitrary
/// JSON: payloads that are mostly well-typed reach the mapping's decisions, and the rest
/// its error paths.
pub(crate) fn obj(fields: Vec<(&'static str, bool, BoxedStrategy<Value>)>) -> BoxedStrategy<Value> {
    let parts: Vec<BoxedStrategy<Option<(String, Value)>>> = fields
        .into_iter()
        .map(|(name, required, typed)| {
            // one field in about 120 is malformed: a payload has up to a hundred, and
            // most should get through deserialization
            let absent = if required { 3 } else { 36 };
            prop_oneof![
                absent => Just(None),
                120 => typed.prop_map(move |v| Some((name.to_string(), v))),
                1 => json().prop_map(move |v| Some((name.to_string(), v))),
            ]
            .boxed()
        })
        .collect();
    parts
        .prop_map(|kv| Value::Object(kv.into_iter().flatten().collect::<Map<_, _>>()))
        .boxed()
}

/// A value picked from `values`.
pub(crate) fn one_of(values: Vec<Value>) -> BoxedStrategy<Value> {
    prop::sample::select(values).boxed()
}

/// Integers: small ones that ids and types use, and any.
pub(crate) fn int() -> BoxedStrategy<Value> {
    prop_oneof![
        3 => (0i64..20).prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
    ]
    .boxed()
}

/// Strings: meaningful words, and any.
pub(crate) fn string() -> BoxedStrategy<Value> {
    prop_oneof![
        2 => prop::sample::select(WORDS).prop_map(Value::from),
        1 => any::<String>().prop_map(Value::from),
    ]
    .boxed()
}

/// Mostly `false`.
pub(crate) fn flag() -> BoxedStrategy<Value> {
    prop_oneof![3 => Just(Value::Bool(false)), 1 => Just(Value::Bool(true))].boxed()
}

/// A JSON array of `item`s.
pub(crate) fn list(item: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
    prop::collection::vec(item, 0..max)
        .prop_map(Value::Array)
        .boxed()
}
