//! The [`GatewayStore`] cases every back-end must pass: a round trip of each record type and
//! the semantics callers rely on. `store_sqlite.rs` and `store_postgres.rs` run them, each on
//! a fresh store per case, through [`store_suite!`].

use std::time::Duration;

use serde_json::json;
use switchboard_gateway::store::{
    FollowedRun, NamespacedState, Pairing, Prompt, Queued, Route, ShownPage,
};
use switchboard_gateway::{ButtonPress, ChannelState, ChatKind, ChatRef, GatewayStore, Peer};
use uuid::Uuid;

mod ledger;
pub use ledger::*;

/// One `#[tokio::test]` per case, each on the store (and its guard: a temporary directory, a
/// test database) returned by `$open().await`.
macro_rules! store_suite {
    ($open:path) => {
        store_suite!(@cases $open;
            routes_round_trip,
            inbox_keeps_order_and_dequeues,
            inbox_keeps_a_message_s_files,
            presses_round_trip,
            followed_runs_round_trip,
            start_run_resets_the_cursor_and_takes_the_batch,
            first_seen_detects_repeats,
            take_inbound_marks_and_queues_at_once,
            prompts_round_trip,
            a_prompt_replaces_the_one_of_its_session,
            take_prompt_succeeds_once,
            prompts_in_a_chat_are_found_in_every_thread,
            contexts_are_used_once_and_expire,
            pairing_and_allowed_chats,
            kv_and_namespaced_state,
            send_claims_and_undo_offers_expire,
            pending_pairings_are_listed_and_refused,
            chat_activity_keeps_the_latest_time,
            the_ledger_follows_a_message_from_queued_to_answered,
            ignored_messages_say_why_and_name_their_original,
            a_failed_message_is_retried_once,
            stopped_and_interrupted_messages_do_not_stay_pending,
            old_ledger_entries_are_pruned
        );
    };
    (@cases $open:path; $($case:ident),* $(,)?) => {$(
        #[tokio::test]
        async fn $case() {
            let (_guard, store) = $open().await;
            store_suite::$case(&store).await;
        }
    )*};
}

pub fn peer(id: &str) -> Peer {
    Peer {
        id: id.into(),
        name: format!("name of {id}"),
        username: Some(format!("@{id}")),
    }
}

pub fn chat(id: &str, kind: ChatKind) -> ChatRef {
    ChatRef {
        id: id.into(),
        kind,
        thread: (kind == ChatKind::Thread).then(|| format!("thread-{id}")),
    }
}

pub fn route(key: &str, session_id: Uuid, bound: bool) -> Route {
    Route {
        routing_key: key.into(),
        session_id,
        channel: "telegram".into(),
        chat: chat("100", ChatKind::Group),
        requester: peer("alice"),
        requesters: vec!["bob".into(), "alice".into()],
        bound,
    }
}

pub fn queued(key: &str, text: &str, context: Option<serde_json::Value>) -> Queued {
    Queued {
        id: 0,
        routing_key: key.into(),
        channel: "telegram".into(),
        peer: peer("alice"),
        chat: chat("100", ChatKind::Thread),
        text: text.into(),
        context,
        attachments: Vec::new(),
    }
}

pub fn press(data: &str) -> ButtonPress {
    ButtonPress {
        channel: "slack".into(),
        press_id: format!("press-{data}"),
        peer: peer("bob"),
        chat: chat("C1", ChatKind::Group),
        message_id: "m-1".into(),
        data: data.into(),
        via: Default::default(),
        reason: None,
    }
}

pub fn followed(key: &str) -> FollowedRun {
    FollowedRun {
        routing_key: key.into(),
        session_id: Uuid::now_v7(),
        run_id: Uuid::now_v7(),
        last_event_id: 42,
        stream_message: Some("msg-7".into()),
        streamed: "Hello, wor".into(),
        delivered: 3,
        deadline: Some("2030-01-01T00:00:00.000000Z".into()),
        pending: "ld".into(),
        pages: vec![
            ShownPage {
                id: "msg-6".into(),
                text: "Page one, \"quoted\" ✓".into(),
            },
            ShownPage {
                id: "msg-7".into(),
                text: "Hello, wor".into(),
            },
        ],
        outbound: vec![switchboard_protocol::gateway::Outbound {
            kind: "reply".into(),
            id: Some("msg-6".into()),
            attempts: 2,
            error: None,
            at: chrono::DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
                .unwrap()
                .with_timezone(&chrono::Utc),
        }],
    }
}

pub fn prompt(id: &str, session_id: Uuid) -> Prompt {
    Prompt {
        id: id.into(),
        routing_key: "tg:100".into(),
        session_id,
        run_id: Uuid::now_v7(),
        tool_call_ids: vec!["call_1".into(), "call_2".into()],
        channel: "telegram".into(),
        chat: chat("100", ChatKind::Direct),
        prompt_message: String::new(),
        prompt_text: "Run `ls`?".into(),
        requester: peer("alice"),
        requesters: vec!["bob".into(), "alice".into()],
    }
}

fn rfc3339_in(d: chrono::Duration) -> String {
    (chrono::Utc::now() + d).to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

pub fn pairing(code: &str, peer_id: &str, expires_in: chrono::Duration) -> Pairing {
    Pairing {
        code: code.into(),
        channel: "telegram".into(),
        peer: peer(peer_id),
        chat: chat(&format!("dm-{peer_id}"), ChatKind::Direct),
        expires_at: rfc3339_in(expires_in),
    }
}

pub async fn routes_round_trip(s: &GatewayStore) {
    assert_eq!(s.route("tg:1").await.unwrap(), None);
    assert!(s.routes().await.unwrap().is_empty());

    let session = Uuid::now_v7();
    let a = route("tg:1", session, false);
    s.put_route(&a).await.unwrap();
    assert_eq!(s.route("tg:1").await.unwrap(), Some(a.clone()));

    // An update changes everything but the key.
    let mut a2 = route("tg:1", Uuid::now_v7(), true);
    a2.chat = chat("100", ChatKind::Thread);
    a2.requester = peer("carol");
    a2.channel = "discord".into();
    s.put_route(&a2).await.unwrap();
    assert_eq!(s.route("tg:1").await.unwrap(), Some(a2.clone()));

    // Newest first; a session's latest route wins.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let b = route("tg:2", a2.session_id, false);
    s.put_route(&b).await.unwrap();
    let keys: Vec<_> = s
        .routes()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.routing_key)
        .collect();
    assert_eq!(keys, ["tg:2", "tg:1"]);
    assert_eq!(
        s.route_of_session(a2.session_id).await.unwrap(),
        Some(b.clone())
    );
    assert_eq!(s.route_of_session(session).await.unwrap(), None);

    assert!(s.delete_route("tg:2").await.unwrap());
    assert!(!s.delete_route("tg:2").await.unwrap());
    assert_eq!(
        s.route_of_session(a2.session_id).await.unwrap(),
        Some(a2.clone())
    );

    // Every session a chat had is remembered (a chat's /search), newest first, once each,
    // after its route is gone too.
    tokio::time::sleep(Duration::from_millis(2)).await;
    s.put_route(&a2).await.unwrap();
    assert_eq!(
        s.chat_sessions("tg:1", 10).await.unwrap(),
        [a2.session_id, session]
    );
    assert_eq!(s.chat_sessions("tg:1", 1).await.unwrap(), [a2.session_id]);
    assert_eq!(s.chat_sessions("tg:2", 10).await.unwrap(), [a2.session_id]);
    assert!(s.chat_sessions("tg:3", 10).await.unwrap().is_empty());
}

pub async fn inbox_keeps_a_message_s_files(s: &GatewayStore) {
    let mut q = queued("files", "", None);
    q.attachments = vec![
        switchboard_gateway::channel::Attachment {
            kind: "photo".into(),
            name: None,
            size: Some(123_456),
            mime: Some("image/jpeg".into()),
            source: Some("AgACAgIAAxkBAAIB".into()),
        },
        switchboard_gateway::channel::Attachment {
            kind: "document".into(),
            name: Some("build log ✓.txt".into()),
            size: None,
            mime: None,
            source: None,
        },
    ];
    q.id = s.enqueue(&q).await.unwrap();
    assert_eq!(s.queued("files").await.unwrap(), vec![q]);
}

pub async fn inbox_keeps_order_and_dequeues(s: &GatewayStore) {
    assert!(s.queued("k").await.unwrap().is_empty());
    let ctx = json!({"notification": {"id": 7, "text": "ünïcode ✓"}});
    let mut ids = Vec::new();
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        let context = (i == 1).then(|| ctx.clone());
        ids.push(s.enqueue(&queued("k", text, context)).await.unwrap());
    }
    let other = s.enqueue(&queued("other", "x", None)).await.unwrap();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    assert!(other > ids[2]);

    let got = s.queued("k").await.unwrap();
    assert_eq!(got.iter().map(|q| q.id).collect::<Vec<_>>(), ids);
    let mut want = queued("k", "two", Some(ctx));
    want.id = ids[1];
    assert_eq!(got[1], want);
    assert_eq!(got[0].context, None);

    let mut routes = s.queued_routes().await.unwrap();
    routes.sort();
    assert_eq!(routes, ["k", "other"]);

    s.dequeue("k", ids[1]).await.unwrap();
    let left: Vec<_> = s
        .queued("k")
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.text)
        .collect();
    assert_eq!(left, ["three"]);
    // Only the named route.
    assert_eq!(s.queued("other").await.unwrap().len(), 1);
    s.dequeue("k", ids[2]).await.unwrap();
    assert_eq!(s.queued_routes().await.unwrap(), ["other"]);
}

pub async fn presses_round_trip(s: &GatewayStore) {
    assert!(s.presses().await.unwrap().is_empty());
    let a = s.push_press(&press("approve:1")).await.unwrap();
    let b = s.push_press(&press("reject:1")).await.unwrap();
    assert!(a < b);
    assert_eq!(
        s.presses().await.unwrap(),
        vec![(a, press("approve:1")), (b, press("reject:1"))]
    );
    s.drop_press(a).await.unwrap();
    s.drop_press(a).await.unwrap(); // twice is fine
    assert_eq!(s.presses().await.unwrap(), vec![(b, press("reject:1"))]);
}

pub async fn followed_runs_round_trip(s: &GatewayStore) {
    assert_eq!(s.run("k").await.unwrap(), None);
    let mut r = followed("k");
    s.put_run(&r).await.unwrap();
    assert_eq!(s.run("k").await.unwrap(), Some(r.clone()));

    // The cursor moves on.
    r.last_event_id = u64::from(u32::MAX) + 5;
    r.stream_message = None;
    r.streamed = "Hello, world — ✓".into();
    r.delivered = 16;
    r.deadline = None;
    r.pending = String::new();
    s.put_run(&r).await.unwrap();
    assert_eq!(s.run("k").await.unwrap(), Some(r.clone()));

    let other = followed("other");
    s.put_run(&other).await.unwrap();
    let mut all = s.runs().await.unwrap();
    all.sort_by(|a, b| a.routing_key.cmp(&b.routing_key));
    assert_eq!(all, vec![r.clone(), other.clone()]);

    s.finish_run("k").await.unwrap();
    assert_eq!(s.run("k").await.unwrap(), None);
    assert_eq!(s.runs().await.unwrap(), vec![other]);
}

pub async fn start_run_resets_the_cursor_and_takes_the_batch(s: &GatewayStore) {
    // A previous run left a cursor with text in flight.
    s.put_run(&followed("k")).await.unwrap();
    let first = s.enqueue(&queued("k", "a", None)).await.unwrap();
    let second = s.enqueue(&queued("k", "b", None)).await.unwrap();
    let later = s.enqueue(&queued("k", "c", None)).await.unwrap();
    s.enqueue(&queued("other", "x", None)).await.unwrap();

    let mut next = followed("k");
    next.last_event_id = 9;
    next.deadline = Some("2031-01-01T00:00:00.000000Z".into());
    s.start_run(&next, second).await.unwrap();

    let got = s.run("k").await.unwrap().unwrap();
    assert_eq!(
        got,
        FollowedRun {
            stream_message: None,
            streamed: String::new(),
            delivered: 0,
            pending: String::new(),
            pages: vec![],
            outbound: vec![],
            ..next
        }
    );
    let left: Vec<_> = s
        .queued("k")
        .await
        .unwrap()
        .into_iter()
        .map(|q| q.id)
        .collect();
    assert_eq!(left, [later]);
    assert!(first < second);
    assert_eq!(s.queued("other").await.unwrap().len(), 1);
}

pub async fn first_seen_detects_repeats(s: &GatewayStore) {
    assert!(s.first_seen("telegram", "100", "1").await.unwrap());
    assert!(!s.first_seen("telegram", "100", "1").await.unwrap());
    // Each part of the key counts.
    assert!(s.first_seen("telegram", "100", "2").await.unwrap());
    assert!(s.first_seen("telegram", "101", "1").await.unwrap());
    assert!(s.first_seen("slack", "100", "1").await.unwrap());
    // Forgotten (the message could not be stored): the redelivery is taken.
    s.forget_seen("telegram", "100", "1").await.unwrap();
    assert!(s.first_seen("telegram", "100", "1").await.unwrap());
    assert!(!s.first_seen("telegram", "100", "1").await.unwrap());
}

pub async fn take_inbound_marks_and_queues_at_once(s: &GatewayStore) {
    let hour = Duration::from_secs(3600);
    s.put_context("telegram", "100", &json!({"n": 1}), hour)
        .await
        .unwrap();
    let q = queued("k", "hello", Some(json!("not read")));
    let id = s.take_inbound(&q, "m1").await.unwrap().expect("new");
    let mut want = queued("k", "hello", Some(json!({"n": 1})));
    want.id = id;
    assert_eq!(
        s.queued("k").await.unwrap(),
        vec![want],
        "the chat's context taken"
    );
    assert_eq!(s.take_context("telegram", "100").await.unwrap(), None);
    // Marked: a redelivery changes nothing, and `first_seen` agrees.
    s.put_context("telegram", "100", &json!({"n": 2}), hour)
        .await
        .unwrap();
    assert_eq!(s.take_inbound(&q, "m1").await.unwrap(), None);
    assert_eq!(s.queued("k").await.unwrap().len(), 1);
    assert!(!s.first_seen("telegram", "100", "m1").await.unwrap());
    assert_eq!(
        s.take_context("telegram", "100").await.unwrap(),
        Some(json!({"n": 2})),
        "a repeat takes no context"
    );
    // Marked by `first_seen` (a command, say): not queued.
    assert!(s.first_seen("telegram", "100", "m2").await.unwrap());
    assert_eq!(s.take_inbound(&q, "m2").await.unwrap(), None);
    // No id: always new, never marked.
    let a = s.take_inbound(&q, "").await.unwrap().expect("new");
    let b = s.take_inbound(&q, "").await.unwrap().expect("new");
    assert!(id < a && a < b);
    assert!(s.first_seen("telegram", "100", "").await.unwrap());
    // An expired context is dropped, not attached.
    s.put_context("telegram", "100", &json!({"n": 3}), Duration::ZERO)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    let c = s.take_inbound(&q, "m3").await.unwrap().expect("new");
    let last = s.queued("k").await.unwrap().pop().unwrap();
    assert_eq!((last.id, last.context), (c, None));
    assert_eq!(s.take_context("telegram", "100").await.unwrap(), None);
}

pub async fn prompts_round_trip(s: &GatewayStore) {
    assert_eq!(s.prompt("p1").await.unwrap(), None);
    let session = Uuid::now_v7();
    let p = prompt("p1", session);
    s.put_prompt(&p).await.unwrap();
    assert_eq!(s.prompt("p1").await.unwrap(), Some(p.clone()));
    assert_eq!(s.prompt_of_session(session).await.unwrap(), Some(p.clone()));
    assert_eq!(s.prompt_of_session(Uuid::now_v7()).await.unwrap(), None);

    assert!(s.set_prompt_message("p1", "msg-9").await.unwrap());
    let posted = Prompt {
        prompt_message: "msg-9".into(),
        ..p.clone()
    };
    assert_eq!(s.prompt("p1").await.unwrap(), Some(posted.clone()));

    // Stored again under the same id: replaced.
    let again = Prompt {
        prompt_text: "Run `ls -la`?".into(),
        ..p.clone()
    };
    s.put_prompt(&again).await.unwrap();
    assert_eq!(s.prompts().await.unwrap(), vec![again.clone()]);

    let q = prompt("p2", Uuid::now_v7());
    s.put_prompt(&q).await.unwrap();
    let mut ids: Vec<_> = s
        .prompts()
        .await
        .unwrap()
        .into_iter()
        .map(|p| p.id)
        .collect();
    ids.sort();
    assert_eq!(ids, ["p1", "p2"]);

    // Settled: the message id that raced the settlement does not bring it back.
    assert!(s.take_prompt("p1").await.unwrap());
    assert!(!s.set_prompt_message("p1", "msg-10").await.unwrap());
    assert_eq!(s.prompt("p1").await.unwrap(), None);
    assert_eq!(s.prompts().await.unwrap(), vec![q]);
}

pub async fn a_prompt_replaces_the_one_of_its_session(s: &GatewayStore) {
    let session = Uuid::now_v7();
    s.put_prompt(&prompt("old", session)).await.unwrap();
    let new = prompt("new", session);
    s.put_prompt(&new).await.unwrap();
    assert_eq!(s.prompt("old").await.unwrap(), None);
    assert_eq!(
        s.prompt_of_session(session).await.unwrap(),
        Some(new.clone())
    );
    assert_eq!(s.prompts().await.unwrap(), vec![new]);
}

pub async fn take_prompt_succeeds_once(s: &GatewayStore) {
    s.put_prompt(&prompt("p", Uuid::now_v7())).await.unwrap();
    assert!(s.take_prompt("p").await.unwrap());
    assert!(!s.take_prompt("p").await.unwrap());
    assert!(!s.take_prompt("never").await.unwrap());
}

pub async fn prompts_in_a_chat_are_found_in_every_thread(s: &GatewayStore) {
    let dm = prompt("dm", Uuid::now_v7());
    let in_thread = Prompt {
        chat: chat("C1", ChatKind::Thread),
        ..prompt("thread", Uuid::now_v7())
    };
    let other_thread = Prompt {
        chat: ChatRef {
            thread: Some("another".into()),
            ..chat("C1", ChatKind::Thread)
        },
        ..prompt("other-thread", Uuid::now_v7())
    };
    let other_channel = Prompt {
        channel: "matrix".into(),
        ..prompt("matrix", Uuid::now_v7())
    };
    for p in [&dm, &in_thread, &other_thread, &other_channel] {
        s.put_prompt(p).await.unwrap();
    }
    let ids = |v: Vec<Prompt>| {
        let mut ids: Vec<String> = v.into_iter().map(|p| p.id).collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids(s.prompts_in_chat("telegram", "100").await.unwrap()),
        ["dm"]
    );
    assert_eq!(
        ids(s.prompts_in_chat("matrix", "100").await.unwrap()),
        ["matrix"]
    );
    // Every thread of the chat: the caller tells them apart by `chat.thread`.
    let in_c1 = s.prompts_in_chat("telegram", "C1").await.unwrap();
    assert_eq!(ids(in_c1.clone()), ["other-thread", "thread"]);
    assert!(in_c1.contains(&in_thread) && in_c1.contains(&other_thread));
    assert!(
        s.prompts_in_chat("telegram", "C2")
            .await
            .unwrap()
            .is_empty()
    );
    assert!(s.take_prompt("dm").await.unwrap());
    assert!(
        s.prompts_in_chat("telegram", "100")
            .await
            .unwrap()
            .is_empty()
    );
}

pub async fn contexts_are_used_once_and_expire(s: &GatewayStore) {
    let hour = Duration::from_secs(3600);
    assert_eq!(s.take_context("telegram", "100").await.unwrap(), None);
    s.put_context("telegram", "100", &json!({"n": 1}), hour)
        .await
        .unwrap();
    // A newer one replaces it.
    s.put_context("telegram", "100", &json!({"n": 2}), hour)
        .await
        .unwrap();
    s.put_context("slack", "100", &json!({"n": 3}), hour)
        .await
        .unwrap();
    assert_eq!(
        s.take_context("telegram", "100").await.unwrap(),
        Some(json!({"n": 2}))
    );
    assert_eq!(s.take_context("telegram", "100").await.unwrap(), None);
    assert_eq!(
        s.take_context("slack", "100").await.unwrap(),
        Some(json!({"n": 3}))
    );

    // Expired: not returned, and gone.
    s.put_context("telegram", "200", &json!({"n": 4}), Duration::ZERO)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(2)).await;
    assert_eq!(s.take_context("telegram", "200").await.unwrap(), None);
    s.put_context("telegram", "200", &json!({"n": 5}), hour)
        .await
        .unwrap();
    assert_eq!(
        s.take_context("telegram", "200").await.unwrap(),
        Some(json!({"n": 5}))
    );
}

pub async fn pairing_and_allowed_chats(s: &GatewayStore) {
    let hour = chrono::Duration::hours(1);
    assert_eq!(s.pairing_of("telegram", "alice").await.unwrap(), None);
    let p = pairing("ABC123", "alice", hour);
    s.put_pairing(&p).await.unwrap();
    assert_eq!(
        s.pairing_of("telegram", "alice").await.unwrap(),
        Some(p.clone())
    );
    assert_eq!(s.pairing_of("telegram", "bob").await.unwrap(), None);
    assert_eq!(s.pairing_of("slack", "alice").await.unwrap(), None);

    // The same code stored again: replaced.
    let p2 = pairing("ABC123", "alice", chrono::Duration::hours(2));
    s.put_pairing(&p2).await.unwrap();
    assert_eq!(
        s.pairing_of("telegram", "alice").await.unwrap(),
        Some(p2.clone())
    );

    // Expired pairings are not found and cannot be approved.
    let stale = pairing("OLD111", "bob", chrono::Duration::seconds(-5));
    s.put_pairing(&stale).await.unwrap();
    assert_eq!(s.pairing_of("telegram", "bob").await.unwrap(), None);
    assert_eq!(s.approve_pairing("telegram", "OLD111").await.unwrap(), None);
    assert!(!s.is_allowed("telegram", "dm-bob").await.unwrap());

    // Approval: the code is case- and space-insensitive, used once, and per channel.
    assert!(!s.is_allowed("telegram", "dm-alice").await.unwrap());
    assert_eq!(s.approve_pairing("slack", "abc123").await.unwrap(), None);
    assert_eq!(
        s.approve_pairing("telegram", " abc123 ").await.unwrap(),
        Some(p2)
    );
    assert!(s.is_allowed("telegram", "dm-alice").await.unwrap());
    assert!(!s.is_allowed("slack", "dm-alice").await.unwrap());
    assert_eq!(s.approve_pairing("telegram", "ABC123").await.unwrap(), None);
    assert_eq!(s.pairing_of("telegram", "alice").await.unwrap(), None);

    // Allowing twice is fine.
    s.allow("slack", "C9").await.unwrap();
    s.allow("slack", "C9").await.unwrap();
    assert!(s.is_allowed("slack", "C9").await.unwrap());
}

pub async fn kv_and_namespaced_state(s: &GatewayStore) {
    assert_eq!(s.kv_get("telegram:offset").await.unwrap(), None);
    s.kv_set("telegram:offset", "17").await.unwrap();
    s.kv_set("telegram:offset", "18").await.unwrap();
    assert_eq!(
        s.kv_get("telegram:offset").await.unwrap().as_deref(),
        Some("18")
    );

    let state = NamespacedState {
        store: s.clone(),
        prefix: "slack".into(),
    };
    assert_eq!(state.get("cursor").await, None);
    state.set("cursor", "abc").await.unwrap();
    assert_eq!(state.get("cursor").await.as_deref(), Some("abc"));
    assert_eq!(
        s.kv_get("slack:cursor").await.unwrap().as_deref(),
        Some("abc")
    );
}

/// Send claims and /undo offers are dropped once older than the cutoff; a channel's state
/// is kept whatever its age.
pub async fn send_claims_and_undo_offers_expire(s: &GatewayStore) {
    use switchboard_gateway::store::SendClaim;
    assert!(matches!(s.claim_send("k1").await.unwrap(), SendClaim::Mine));
    s.send_done("k1", "m1").await.unwrap();
    s.kv_set("undo:0123", "{}").await.unwrap();
    s.kv_set("telegram:offset", "5").await.unwrap();
    // Within the window: all kept, the key answers its message.
    s.prune_kv().await.unwrap();
    s.prune_kv_before(chrono::Utc::now() - chrono::Duration::hours(1))
        .await
        .unwrap();
    assert!(matches!(s.claim_send("k1").await.unwrap(), SendClaim::Sent(m) if m == "m1"));
    assert!(s.kv_get("undo:0123").await.unwrap().is_some());
    // Past it: the claim and the offer are gone, the channel's state is not.
    s.prune_kv_before(chrono::Utc::now() + chrono::Duration::seconds(1))
        .await
        .unwrap();
    assert_eq!(s.kv_get("send:k1").await.unwrap(), None);
    assert_eq!(s.kv_get("undo:0123").await.unwrap(), None);
    assert_eq!(
        s.kv_get("telegram:offset").await.unwrap().as_deref(),
        Some("5")
    );
    assert!(matches!(s.claim_send("k1").await.unwrap(), SendClaim::Mine));
}

pub async fn pending_pairings_are_listed_and_refused(s: &GatewayStore) {
    assert!(s.pairings().await.unwrap().is_empty());
    let later = pairing("LATER222", "bob", chrono::Duration::hours(2));
    let sooner = pairing("SOON1111", "alice", chrono::Duration::hours(1));
    let stale = pairing("OLD33333", "carol", chrono::Duration::seconds(-5));
    for p in [&later, &sooner, &stale] {
        s.put_pairing(p).await.unwrap();
    }
    assert_eq!(
        s.pairings().await.unwrap(),
        vec![sooner.clone(), later.clone()],
        "pending ones, the oldest request (first to expire) first; expired ones left out"
    );

    // Refused: gone, the chat not allowed; case and spaces do not matter; once; per channel.
    assert_eq!(s.refuse_pairing("slack", "soon1111").await.unwrap(), None);
    assert_eq!(
        s.refuse_pairing("telegram", " soon1111 ").await.unwrap(),
        Some(sooner)
    );
    assert_eq!(
        s.refuse_pairing("telegram", "SOON1111").await.unwrap(),
        None
    );
    assert!(!s.is_allowed("telegram", "dm-alice").await.unwrap());
    assert_eq!(s.pairing_of("telegram", "alice").await.unwrap(), None);
    assert_eq!(s.pairings().await.unwrap(), vec![later]);
    // An expired one cannot be refused either (it is gone for good).
    s.put_pairing(&stale).await.unwrap();
    assert_eq!(
        s.refuse_pairing("telegram", "OLD33333").await.unwrap(),
        None
    );
}

pub async fn chat_activity_keeps_the_latest_time(s: &GatewayStore) {
    use switchboard_gateway::store::chat_key;
    assert!(s.chat_activity().await.unwrap().is_empty());
    let dm = chat("100", ChatKind::Direct);
    let topic = chat("-200", ChatKind::Thread);
    s.touch_chat("telegram", &dm).await.unwrap();
    let first = s.chat_activity().await.unwrap()[&chat_key("telegram", &dm)].clone();
    tokio::time::sleep(Duration::from_millis(5)).await;
    s.touch_chat("telegram", &topic).await.unwrap();
    s.touch_chat("telegram", &dm).await.unwrap();
    let now = s.chat_activity().await.unwrap();
    assert_eq!(now.len(), 2, "{now:?}");
    let second = &now[&chat_key("telegram", &dm)];
    assert!(*second > first, "{second} after {first}");
    assert!(now.contains_key(&("telegram".into(), "-200".into(), "thread--200".into())));
    assert!(!now.contains_key(&chat_key("slack", &dm)), "per channel");
}
