#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

//! The signed-webhook channel against a real HTTP receiver on 127.0.0.1.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use switchboard_gateway::webhook::{
    DEFAULT_MAX_CHARS, DEFAULT_TOLERANCE, SIGNATURE_HEADER, TIMESTAMP_HEADER, VerifyError,
    WebhookChannel, WebhookConfig, parse_inbound, sign, verify,
};
use switchboard_gateway::{
    Button, ButtonPress, Channel, ChannelContext, ChannelError, ChannelState, ChatKind, ChatRef,
    Inbound, InboundSink, Peer,
};
use tokio_util::sync::CancellationToken;

const SECRET: &str = "test-secret-0123456789abcdef";

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

// ---------------------------------------------------------------------------------------
// A receiver that verifies our signature and records what it got
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Got {
    verified: Result<(), String>,
    timestamp: String,
    signature: String,
    raw: Bytes,
    body: Value,
}

/// A scripted answer: status, extra headers, body.
type Answer = (u16, Vec<(&'static str, String)>, String);

#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    script: Arc<Mutex<VecDeque<Answer>>>,
}

impl Receiver {
    fn got(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }
    fn push(&self, status: u16, headers: Vec<(&'static str, String)>, body: &str) {
        self.script
            .lock()
            .unwrap()
            .push_back((status, headers, body.to_string()));
    }
}

async fn receive(State(rx): State<Receiver>, headers: HeaderMap, raw: Bytes) -> Response {
    let verified =
        verify(SECRET, &headers, &raw, now(), DEFAULT_TOLERANCE).map_err(|e| e.to_string());
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let body: Value = serde_json::from_slice(&raw).unwrap_or(Value::Null);
    let ok = verified.is_ok();
    rx.got.lock().unwrap().push(Got {
        verified,
        timestamp: header(TIMESTAMP_HEADER),
        signature: header(SIGNATURE_HEADER),
        raw,
        body,
    });
    if !ok {
        return (StatusCode::UNAUTHORIZED, "bad signature").into_response();
    }
    let next = rx.script.lock().unwrap().pop_front();
    let (status, extra, text) =
        next.unwrap_or((200, Vec::new(), r#"{"message_id":"default-id"}"#.into()));
    let mut resp = (StatusCode::from_u16(status).unwrap(), text).into_response();
    for (k, v) in extra {
        resp.headers_mut()
            .insert(k, HeaderValue::from_str(&v).unwrap());
    }
    resp
}

/// Starts a receiver; returns it and its URL.
async fn start_receiver() -> (Receiver, String) {
    let rx = Receiver::default();
    let app = Router::new()
        .route("/hook", post(receive))
        .with_state(rx.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (rx, format!("http://{addr}/hook"))
}

fn channel(url: &str) -> WebhookChannel {
    WebhookChannel::new(WebhookConfig::new("ops", SECRET, url)).unwrap()
}

fn chat() -> ChatRef {
    ChatRef {
        id: "c1".into(),
        kind: ChatKind::Group,
        thread: Some("t9".into()),
    }
}

fn buttons() -> Vec<Button> {
    vec![
        Button {
            text: "Approve".into(),
            data: "a:1".into(),
        },
        Button {
            text: "Deny".into(),
            data: "d:1".into(),
        },
    ]
}

fn assert_correctly_signed(got: &Got) {
    assert_eq!(got.verified, Ok(()), "receiver rejected our signature");
    let ts: i64 = got.timestamp.parse().unwrap();
    assert!((now() - ts).abs() <= 5, "timestamp {ts} is not now");
    assert_eq!(got.signature, sign(SECRET, ts, &got.raw));
}

// ---------------------------------------------------------------------------------------
// sign / verify
// ---------------------------------------------------------------------------------------

#[test]
fn sign_matches_known_vectors() {
    // printf '%s' '1700000000.{"type":"ping"}' | openssl dgst -sha256 -hmac 'topsecret'
    assert_eq!(
        sign("topsecret", 1_700_000_000, br#"{"type":"ping"}"#),
        "sha256=c914a6d13437891cdf712946864ed7f86c164151ca119fb8b1f4623837a44e1c"
    );
    // printf '%s' '0.' | openssl dgst -sha256 -hmac 'k'
    assert_eq!(
        sign("k", 0, b""),
        "sha256=6b4a4b8b3c40f1e8f53a3d36682e5f99f7ad2ac1df1c93dfe336f329167641e7"
    );
}

fn signed_headers(secret: &str, ts: i64, body: &[u8]) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(TIMESTAMP_HEADER, ts.to_string().parse().unwrap());
    h.insert(SIGNATURE_HEADER, sign(secret, ts, body).parse().unwrap());
    h
}

const BODY: &[u8] = br#"{"type":"message","text":"hi"}"#;

#[test]
fn verify_accepts_a_fresh_correct_signature() {
    let t = now();
    let h = signed_headers(SECRET, t, BODY);
    assert!(verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE).is_ok());
    // Within the window on either side.
    assert!(verify(SECRET, &h, BODY, t + 299, DEFAULT_TOLERANCE).is_ok());
    assert!(verify(SECRET, &h, BODY, t - 299, DEFAULT_TOLERANCE).is_ok());
    // Header names are case-insensitive and an upper-case hex digest is accepted.
    let mut h2 = HeaderMap::new();
    h2.insert("X-Switchboard-Timestamp", t.to_string().parse().unwrap());
    h2.insert(
        "X-Switchboard-Signature",
        format!(
            "sha256={}",
            sign(SECRET, t, BODY)
                .trim_start_matches("sha256=")
                .to_uppercase()
        )
        .parse()
        .unwrap(),
    );
    assert!(verify(SECRET, &h2, BODY, t, DEFAULT_TOLERANCE).is_ok());
}

#[test]
fn verify_rejects_a_wrong_secret() {
    let t = now();
    let h = signed_headers("another-secret", t, BODY);
    assert!(matches!(
        verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    ));
}

#[test]
fn verify_rejects_a_tampered_body() {
    let t = now();
    let h = signed_headers(SECRET, t, BODY);
    let tampered = br#"{"type":"message","text":"rm -rf"}"#;
    assert!(matches!(
        verify(SECRET, &h, tampered, t, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    ));
}

#[test]
fn verify_rejects_a_tampered_timestamp() {
    let t = now();
    let mut h = signed_headers(SECRET, t - 1, BODY);
    h.insert(TIMESTAMP_HEADER, t.to_string().parse().unwrap());
    assert!(matches!(
        verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    ));
}

#[test]
fn verify_rejects_stale_and_future_timestamps() {
    let t = now();
    let old = t - 600;
    let h = signed_headers(SECRET, old, BODY);
    assert!(matches!(
        verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE),
        Err(VerifyError::Stale)
    ));
    let future = t + 600;
    let h = signed_headers(SECRET, future, BODY);
    assert!(matches!(
        verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE),
        Err(VerifyError::Stale)
    ));
    // A wider tolerance accepts it.
    assert!(verify(SECRET, &h, BODY, t, Duration::from_secs(900)).is_ok());
    // A stale request with a wrong signature is reported as a bad signature.
    let h = signed_headers("another-secret", old, BODY);
    assert!(matches!(
        verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    ));
}

#[test]
fn verify_rejects_missing_headers() {
    let t = now();
    let full = signed_headers(SECRET, t, BODY);
    for drop in [TIMESTAMP_HEADER, SIGNATURE_HEADER] {
        let mut h = full.clone();
        h.remove(drop);
        assert!(
            matches!(
                verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE),
                Err(VerifyError::BadSignature)
            ),
            "without {drop}"
        );
    }
    assert!(matches!(
        verify(SECRET, &HeaderMap::new(), BODY, t, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    ));
}

#[test]
fn verify_rejects_malformed_headers() {
    let t = now();
    let good_sig = sign(SECRET, t, BODY);
    let hex = good_sig.trim_start_matches("sha256=").to_string();
    let cases: Vec<(String, String)> = vec![
        (t.to_string(), hex.clone()),                       // no sha256= prefix
        (t.to_string(), format!("sha1={hex}")),             // wrong algorithm
        (t.to_string(), format!("sha256={}", &hex[2..])),   // too short
        (t.to_string(), format!("sha256={}zz", &hex[2..])), // not hex
        (t.to_string(), "sha256=".into()),
        (format!("{t}.5"), good_sig.clone()), // not an integer
        (format!("-{t}"), good_sig.clone()),  // signed
        ("soon".into(), good_sig.clone()),    // not a number
        (String::new(), good_sig.clone()),    // empty
    ];
    for (ts, sig) in cases {
        let mut h = HeaderMap::new();
        h.insert(TIMESTAMP_HEADER, ts.parse().unwrap());
        h.insert(SIGNATURE_HEADER, sig.parse().unwrap());
        assert!(
            matches!(
                verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE),
                Err(VerifyError::BadSignature)
            ),
            "ts={ts:?} sig={sig:?}"
        );
    }
    // Two signature headers are ambiguous.
    let mut h = signed_headers(SECRET, t, BODY);
    h.append(SIGNATURE_HEADER, good_sig.parse().unwrap());
    assert!(matches!(
        verify(SECRET, &h, BODY, t, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    ));
}

#[test]
fn verify_with_an_empty_secret_accepts_nothing() {
    let t = now();
    let h = signed_headers("", t, BODY);
    assert!(matches!(
        verify("", &h, BODY, t, DEFAULT_TOLERANCE),
        Err(VerifyError::BadSignature)
    ));
}

#[test]
fn verify_error_messages() {
    assert_eq!(
        VerifyError::BadSignature.to_string(),
        "missing or malformed signature"
    );
    assert_eq!(
        VerifyError::Stale.to_string(),
        "timestamp outside the allowed window"
    );
}

// ---------------------------------------------------------------------------------------
// parse_inbound
// ---------------------------------------------------------------------------------------

#[test]
fn parse_inbound_message() {
    let body = br#"{"type":"message","peer":{"id":"u1","name":"Alice"},
        "chat":{"id":"c1","kind":"direct","thread":null},"text":"hi","message_id":"m1"}"#;
    let Inbound::Message(m) = parse_inbound("webhook:ops", body).unwrap() else {
        panic!("not a message");
    };
    assert_eq!(m.channel, "webhook:ops");
    assert_eq!(
        m.peer,
        Peer {
            id: "u1".into(),
            name: "Alice".into(),
            username: None
        }
    );
    assert_eq!(
        m.chat,
        ChatRef {
            id: "c1".into(),
            kind: ChatKind::Direct,
            thread: None
        }
    );
    assert_eq!(m.text, "hi");
    assert_eq!(m.message_id, "m1");
    assert!(m.addressed, "webhook messages are always addressed");
    assert!(m.attachments.is_empty());
    assert_eq!(m.meta, Value::Null);
}

#[test]
fn parse_inbound_message_extras() {
    // Thread chat, integer ids, a username, no name (defaults to the id), attachments,
    // an extra field kept in meta, group messages addressed too.
    let body = json!({
        "type": "message",
        "peer": {"id": 42, "username": "bob"},
        "chat": {"id": "c2", "kind": "thread", "thread": "t1"},
        "text": "",
        "message_id": 7,
        "attachments": [{"kind": "image", "name": "a.png", "size": 12}],
        "source": "jira"
    });
    let Inbound::Message(m) = parse_inbound("webhook:ops", body.to_string().as_bytes()).unwrap()
    else {
        panic!("not a message");
    };
    assert_eq!(m.peer.id, "42");
    assert_eq!(m.peer.name, "42");
    assert_eq!(m.peer.username.as_deref(), Some("bob"));
    assert_eq!(m.chat.kind, ChatKind::Thread);
    assert_eq!(m.chat.thread.as_deref(), Some("t1"));
    assert_eq!(m.message_id, "7");
    assert_eq!(m.attachments.len(), 1);
    assert_eq!(m.attachments[0].kind, "image");
    assert_eq!(m.meta, json!({"source": "jira"}));
    assert!(m.addressed);

    let group = json!({"type":"message","peer":{"id":"u1","name":"A"},
        "chat":{"id":"g","kind":"group"},"text":"x","message_id":"m"});
    let Inbound::Message(m) = parse_inbound("webhook:ops", group.to_string().as_bytes()).unwrap()
    else {
        panic!("not a message");
    };
    assert!(m.addressed);
}

#[test]
fn parse_inbound_press() {
    let body = br#"{"type":"press","press_id":"p1","peer":{"id":"u1","name":"Alice"},
        "chat":{"id":"c1","kind":"group"},"message_id":"our-1","data":"a:1"}"#;
    let Inbound::Press(p) = parse_inbound("webhook:ops", body).unwrap() else {
        panic!("not a press");
    };
    assert_eq!(
        p,
        ButtonPress {
            channel: "webhook:ops".into(),
            press_id: "p1".into(),
            peer: Peer {
                id: "u1".into(),
                name: "Alice".into(),
                username: None
            },
            chat: ChatRef {
                id: "c1".into(),
                kind: ChatKind::Group,
                thread: None
            },
            message_id: "our-1".into(),
            data: "a:1".into(),
            via: Default::default(),
            reason: None,
        }
    );
}

#[test]
fn parse_inbound_rejects_malformed_bodies_clearly() {
    let msg = |patch: &dyn Fn(&mut Value)| {
        let mut v = json!({"type":"message","peer":{"id":"u1","name":"Alice"},
            "chat":{"id":"c1","kind":"direct"},"text":"hi","message_id":"m1"});
        patch(&mut v);
        v.to_string()
    };
    let press = |patch: &dyn Fn(&mut Value)| {
        let mut v = json!({"type":"press","press_id":"p1","peer":{"id":"u1","name":"A"},
            "chat":{"id":"c1","kind":"direct"},"message_id":"m1","data":"a:1"});
        patch(&mut v);
        v.to_string()
    };
    let long = "x".repeat(64 * 1024 + 1);
    let cases: Vec<(String, &str)> = vec![
        ("not json".into(), "body is not valid JSON"),
        ("[1,2]".into(), "body must be a JSON object"),
        ("{}".into(), "`type` is missing"),
        (r#"{"type":5}"#.into(), "`type` must be a string"),
        (
            r#"{"type":"ping"}"#.into(),
            r#"`type` must be "message", "press" or "reaction" (got "ping")"#,
        ),
        (
            msg(&|v| {
                v.as_object_mut().unwrap().remove("peer");
            }),
            "`peer` is missing",
        ),
        (
            msg(&|v| v["peer"] = json!("u1")),
            "`peer` must be an object",
        ),
        (
            msg(&|v| v["peer"]["id"] = json!("")),
            "`peer.id` must not be empty",
        ),
        (
            msg(&|v| {
                v["peer"].as_object_mut().unwrap().remove("id");
            }),
            "`peer.id` is missing",
        ),
        (
            msg(&|v| v["peer"]["id"] = json!(true)),
            "`peer.id` must be a string",
        ),
        (
            msg(&|v| {
                v.as_object_mut().unwrap().remove("chat");
            }),
            "`chat` is missing",
        ),
        (
            msg(&|v| v["chat"]["id"] = json!("  ")),
            "`chat.id` must not be empty",
        ),
        (
            msg(&|v| v["chat"]["kind"] = json!("channel")),
            r#"`chat.kind` must be "direct", "group" or "thread" (got "channel")"#,
        ),
        (
            msg(&|v| {
                v["chat"].as_object_mut().unwrap().remove("kind");
            }),
            "`chat.kind` is missing",
        ),
        (
            msg(&|v| v["chat"]["thread"] = json!("")),
            "`chat.thread` must not be empty",
        ),
        (
            msg(&|v| {
                v.as_object_mut().unwrap().remove("text");
            }),
            "`text` is missing",
        ),
        (
            msg(&|v| v["text"] = json!(["hi"])),
            "`text` must be a string",
        ),
        (
            msg(&|v| v["text"] = json!("")),
            "`text` must not be empty (unless there are attachments)",
        ),
        (
            msg(&|v| v["text"] = json!(long)),
            "`text` is 65537 bytes; the limit is 65536",
        ),
        (
            msg(&|v| {
                v.as_object_mut().unwrap().remove("message_id");
            }),
            "`message_id` is missing",
        ),
        (
            msg(&|v| v["message_id"] = json!("")),
            "`message_id` must not be empty",
        ),
        (
            msg(&|v| v["message_id"] = json!("m".repeat(513))),
            "`message_id` is 513 bytes; the limit is 512",
        ),
        (
            msg(&|v| v["attachments"] = json!([{"name": "x"}])),
            "`attachments` is malformed",
        ),
        (
            press(&|v| {
                v.as_object_mut().unwrap().remove("press_id");
            }),
            "`press_id` is missing",
        ),
        (
            press(&|v| v["press_id"] = json!("")),
            "`press_id` must not be empty",
        ),
        (
            press(&|v| {
                v.as_object_mut().unwrap().remove("data");
            }),
            "`data` is missing",
        ),
        (
            press(&|v| {
                v.as_object_mut().unwrap().remove("message_id");
            }),
            "`message_id` is missing",
        ),
        (
            press(&|v| v["chat"]["kind"] = json!(3)),
            r#"`chat.kind` must be "direct", "group" or "thread""#,
        ),
    ];
    for (body, want) in cases {
        let err = parse_inbound("webhook:ops", body.as_bytes())
            .expect_err(&format!("accepted {}", &body[..body.len().min(200)]));
        assert!(
            err.starts_with(want),
            "for {}: got {err:?}, want {want:?}",
            &body[..body.len().min(200)]
        );
    }
}

// ---------------------------------------------------------------------------------------
// Outbound over real HTTP
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn send_is_signed_and_uses_the_returned_message_id() {
    let (rx, url) = start_receiver().await;
    rx.push(200, vec![], r#"{"message_id":"m-42"}"#);
    let ch = channel(&url);
    assert_eq!(ch.name(), "webhook:ops");
    assert!(ch.can_edit());
    assert_eq!(ch.max_chars(), DEFAULT_MAX_CHARS);

    let id = ch.send(&chat(), "hello *world*", &buttons()).await.unwrap();
    assert_eq!(id, "m-42");

    let got = rx.got();
    assert_eq!(got.len(), 1);
    assert_correctly_signed(&got[0]);
    assert_eq!(
        got[0].body,
        json!({
            "type": "send",
            "chat": {"id": "c1", "kind": "group", "thread": "t9"},
            "text": "hello *world*",
            "buttons": [{"text": "Approve", "data": "a:1"}, {"text": "Deny", "data": "d:1"}],
        })
    );
}

#[tokio::test]
async fn send_without_a_returned_id_makes_one_up() {
    let (rx, url) = start_receiver().await;
    rx.push(200, vec![], "ok");
    rx.push(204, vec![], "");
    let ch = channel(&url);
    let direct = ChatRef {
        id: "c1".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    let a = ch.send(&direct, "one", &[]).await.unwrap();
    let b = ch.send(&direct, "two", &[]).await.unwrap();
    assert!(uuid::Uuid::parse_str(&a).is_ok(), "{a}");
    assert!(uuid::Uuid::parse_str(&b).is_ok(), "{b}");
    assert_ne!(a, b);
    let got = rx.got();
    assert_eq!(
        got[0].body,
        json!({"type": "send", "chat": {"id": "c1", "kind": "direct"}, "text": "one", "buttons": []})
    );
}

#[tokio::test]
async fn edit_is_signed() {
    let (rx, url) = start_receiver().await;
    rx.push(200, vec![], "{}");
    let ch = channel(&url);
    ch.edit(&chat(), "m-42", "updated", &[]).await.unwrap();
    let got = rx.got();
    assert_eq!(got.len(), 1);
    assert_correctly_signed(&got[0]);
    assert_eq!(
        got[0].body,
        json!({
            "type": "edit",
            "chat": {"id": "c1", "kind": "group", "thread": "t9"},
            "message_id": "m-42",
            "text": "updated",
            "buttons": [],
        })
    );
}

#[tokio::test]
async fn a_shared_file_is_posted_as_its_url_signed() {
    let (rx, url) = start_receiver().await;
    rx.push(200, vec![], "{}");
    let ch = channel(&url);
    let file = switchboard_gateway::channel::OutgoingFile {
        path: "/v1/sessions/s1/files/f1".into(),
        name: "report.pdf".into(),
        mime: "application/pdf".into(),
        bytes: Bytes::from_static(b"%PDF-1.4 tiny"),
        caption: Some("the report".into()),
    };
    ch.send_file(&chat(), &file).await.unwrap();
    let got = rx.got();
    assert_eq!(got.len(), 1);
    assert_correctly_signed(&got[0]);
    assert_eq!(
        got[0].body,
        json!({
            "type": "file",
            "chat": {"id": "c1", "kind": "group", "thread": "t9"},
            "name": "report.pdf",
            "mime": "application/pdf",
            "size": 13,
            "url": "/v1/sessions/s1/files/f1",
            "caption": "the report",
        })
    );
}

#[tokio::test]
async fn press_answer_is_signed() {
    let (rx, url) = start_receiver().await;
    let ch = channel(&url);
    let press = ButtonPress {
        channel: "webhook:ops".into(),
        press_id: "p1".into(),
        peer: Peer {
            id: "u1".into(),
            name: "Alice".into(),
            username: None,
        },
        chat: chat(),
        message_id: "m-42".into(),
        data: "a:1".into(),
        via: Default::default(),
        reason: None,
    };
    ch.answer_press(&press, Some("Approved")).await.unwrap();
    ch.answer_press(&press, None).await.unwrap();
    let got = rx.got();
    assert_eq!(got.len(), 2);
    assert_correctly_signed(&got[0]);
    assert_correctly_signed(&got[1]);
    assert_eq!(
        got[0].body,
        json!({"type": "press_answer", "press_id": "p1", "text": "Approved"})
    );
    assert_eq!(
        got[1].body,
        json!({"type": "press_answer", "press_id": "p1", "text": null})
    );
}

#[tokio::test]
async fn receiver_error_is_an_api_error_with_a_short_description() {
    let (rx, url) = start_receiver().await;
    let long = format!("database exploded: {}", "x".repeat(1000));
    rx.push(500, vec![], &long);
    let ch = channel(&url);
    let err = ch.send(&chat(), "hi", &[]).await.unwrap_err();
    match &err {
        ChannelError::Api {
            channel,
            method,
            code,
            description,
        } => {
            assert_eq!(channel, "webhook:ops");
            assert_eq!(method, "send");
            assert_eq!(*code, 500);
            assert!(description.starts_with("database exploded: xxx"));
            assert_eq!(description.chars().count(), 300);
        }
        other => panic!("expected Api, got {other:?}"),
    }
    assert!(!err.to_string().contains(SECRET));
    assert!(
        ch.status().contains("last delivery failed"),
        "{}",
        ch.status()
    );

    // A wrong secret on our side: the receiver's 401 comes back as an Api error.
    let wrong =
        WebhookChannel::new(WebhookConfig::new("ops", "not-the-secret", url.as_str())).unwrap();
    let err = wrong.edit(&chat(), "m", "x", &[]).await.unwrap_err();
    assert!(
        matches!(&err, ChannelError::Api { code: 401, description, .. } if description == "bad signature"),
        "{err:?}"
    );
}

#[tokio::test]
async fn rate_limit_is_waited_out_then_succeeds() {
    let (rx, url) = start_receiver().await;
    rx.push(429, vec![("retry-after", "1".into())], "slow down");
    rx.push(200, vec![], r#"{"message_id":"after-wait"}"#);
    let ch = channel(&url);
    let started = Instant::now();
    let id = ch.send(&chat(), "hi", &[]).await.unwrap();
    assert_eq!(id, "after-wait");
    assert!(started.elapsed() >= Duration::from_secs(1), "did not wait");
    let got = rx.got();
    assert_eq!(got.len(), 2);
    assert_correctly_signed(&got[1]);
    assert_eq!(got[0].body, got[1].body);
}

#[tokio::test]
async fn rate_limit_gives_up_after_three_retries() {
    let (rx, url) = start_receiver().await;
    for _ in 0..5 {
        rx.push(429, vec![("retry-after", "0".into())], "");
    }
    let ch = channel(&url);
    let err = ch.send(&chat(), "hi", &[]).await.unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::RateLimited {
                retry_after_secs: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(rx.got().len(), 4, "one try and three retries");

    // A Retry-After too long to wait for fails at once.
    let (rx, url) = start_receiver().await;
    rx.push(429, vec![("retry-after", "3600".into())], "");
    let ch = channel(&url);
    let err = ch.send(&chat(), "hi", &[]).await.unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::RateLimited {
                retry_after_secs: 3600,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(rx.got().len(), 1);
}

#[tokio::test]
async fn unreachable_receiver() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let url = format!("http://user:pw@{addr}/hook?token=hunter2");
    let ch = channel(&url);
    let err = ch.send(&chat(), "hi", &[]).await.unwrap_err();
    let ChannelError::Unreachable { channel, reason } = &err else {
        panic!("expected Unreachable, got {err:?}");
    };
    assert_eq!(channel, "webhook:ops");
    assert!(reason.contains(&format!("http://{addr}/hook")), "{reason}");
    let shown = format!("{err} {err:?} {:?}", ch.config());
    for secret in [SECRET, "hunter2", "pw@"] {
        assert!(!shown.contains(secret), "{secret} leaked: {shown}");
    }
    let err = ch.test().await.unwrap_err();
    assert!(matches!(err, ChannelError::Unreachable { .. }), "{err:?}");
}

#[tokio::test]
async fn test_pings_signed() {
    let (rx, url) = start_receiver().await;
    rx.push(200, vec![], "pong");
    let ch = channel(&url);
    let msg = ch.test().await.unwrap();
    assert_eq!(msg, format!("webhook:ops → {url} answered 200"));
    let got = rx.got();
    assert_correctly_signed(&got[0]);
    assert_eq!(got[0].body, json!({"type": "ping"}));

    rx.push(503, vec![], "maintenance");
    let err = ch.test().await.unwrap_err();
    assert!(
        matches!(&err, ChannelError::Api { code: 503, method, description, .. }
            if method == "ping" && description == "maintenance"),
        "{err:?}"
    );
    assert_eq!(err.to_string(), "webhook:ops: ping failed: maintenance");
}

// ---------------------------------------------------------------------------------------
// Config and lifecycle
// ---------------------------------------------------------------------------------------

#[test]
fn config_defaults_and_debug_redaction() {
    let cfg = WebhookConfig::new("ops", SECRET, "https://example.com/hook?key=abc");
    assert_eq!(cfg.tolerance, Duration::from_secs(300));
    assert_eq!(cfg.max_chars, 4000);
    assert_eq!(cfg.channel_name(), "webhook:ops");
    let shown = format!("{cfg:?}");
    assert!(!shown.contains(SECRET), "{shown}");
    assert!(!shown.contains("key=abc"), "{shown}");
    assert!(shown.contains("[redacted]"), "{shown}");
    let ch = WebhookChannel::new(WebhookConfig {
        max_chars: 1000,
        ..cfg
    })
    .unwrap();
    assert_eq!(ch.max_chars(), 1000);
    assert_eq!(ch.config().name, "ops");
    assert!(!format!("{ch:?}").contains(SECRET));
}

#[test]
fn new_rejects_bad_settings() {
    let bad = [
        WebhookConfig::new("", SECRET, "https://example.com"),
        WebhookConfig::new("webhook:ops", SECRET, "https://example.com"),
        WebhookConfig::new("a b", SECRET, "https://example.com"),
        WebhookConfig::new("ops", "", "https://example.com"),
        WebhookConfig::new("ops", SECRET, "not a url"),
        WebhookConfig::new("ops", SECRET, "ftp://example.com/x"),
        WebhookConfig {
            max_chars: 0,
            ..WebhookConfig::new("ops", SECRET, "https://example.com")
        },
    ];
    for cfg in bad {
        let shown = format!("{cfg:?}");
        match WebhookChannel::new(cfg) {
            Err(ChannelError::Other { reason, .. }) => {
                assert!(!reason.contains(SECRET), "{reason}");
            }
            Err(other) => panic!("{shown}: unexpected {other:?}"),
            Ok(_) => panic!("{shown}: accepted"),
        }
    }
}

struct NoSink;
#[async_trait]
impl InboundSink for NoSink {
    async fn accept(&self, _item: Inbound) -> Result<(), String> {
        Err("webhook channels do not push inbound from run()".into())
    }
}
struct NoState;
#[async_trait]
impl ChannelState for NoState {
    async fn get(&self, _key: &str) -> Option<String> {
        None
    }
    async fn set(&self, _key: &str, _value: &str) -> Result<(), String> {
        Ok(())
    }
}

#[tokio::test]
async fn run_waits_for_cancel() {
    let ch = Arc::new(channel("http://127.0.0.1:9/hook"));
    assert_eq!(ch.status(), "configured");
    let cancel = CancellationToken::new();
    let ctx = ChannelContext {
        sink: Arc::new(NoSink),
        state: Arc::new(NoState),
    };
    let task = tokio::spawn({
        let ch = ch.clone();
        let cancel = cancel.clone();
        async move { ch.run(ctx, cancel).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!task.is_finished(), "run returned before cancel");
    assert_eq!(ch.status(), "listening");
    cancel.cancel();
    let result = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .unwrap()
        .unwrap();
    assert!(result.is_ok());
    assert_eq!(ch.status(), "configured");
}
