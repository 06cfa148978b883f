//! The Slack channel against the fake Slack (Web API + Socket Mode websocket).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use switchboard_gateway::channel::InboundHttpError;
use switchboard_gateway::slack::{self, SlackChannel, SlackConfig};
use switchboard_gateway::{
    Button, ButtonPress, Channel, ChannelError, ChannelState, ChatKind, ChatRef, Inbound,
};
use switchboard_test_support::fake_slack::FakeSlack;
use switchboard_test_support::wait::until;

use common::*;

const WAIT: Duration = Duration::from_secs(10);
const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

fn config(fake: &FakeSlack) -> SlackConfig {
    let mut cfg = SlackConfig::new(FakeSlack::BOT_TOKEN);
    cfg.app_token = Some(FakeSlack::APP_TOKEN.into());
    cfg.api_base = fake.api_base();
    cfg
}

fn channel(fake: &FakeSlack) -> Arc<SlackChannel> {
    Arc::new(SlackChannel::new(config(fake)).unwrap())
}

fn events_channel(fake: &FakeSlack) -> Arc<SlackChannel> {
    let mut cfg = SlackConfig::new(FakeSlack::BOT_TOKEN);
    cfg.signing_secret = Some(SECRET.into());
    cfg.api_base = fake.api_base();
    Arc::new(SlackChannel::new(cfg).unwrap())
}

/// Starts the channel and waits until its socket is connected.
async fn start(
    fake: &FakeSlack,
    ch: &Arc<SlackChannel>,
    sink: &Arc<Sink>,
    state: &Arc<MemState>,
) -> Running {
    let running = run(ch, sink, state);
    until("the socket is connected", || {
        fake.connected() && ch.status() == "socket: connected"
    })
    .await;
    running
}

fn buttons(pairs: &[(&str, &str)]) -> Vec<Button> {
    pairs
        .iter()
        .map(|(t, d)| Button {
            text: (*t).into(),
            data: (*d).into(),
        })
        .collect()
}

fn thread(channel: &str, ts: &str) -> ChatRef {
    ChatRef {
        id: channel.into(),
        kind: ChatKind::Thread,
        thread: Some(ts.into()),
    }
}

fn section_texts(blocks: &Value) -> Vec<String> {
    blocks
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "section")
        .map(|b| b["text"]["text"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn dm_arrives_and_is_acked_after_accept() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;
    assert_eq!(fake.calls("auth.test").len(), 1);
    assert_eq!(fake.calls("apps.connections.open").len(), 1);

    let held = sink.hold.lock().await;
    let ts = fake.dm("U1", "hello there");
    until("the sink is asked", || sink.attempts() == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(fake.acked().is_empty(), "acked before accept returned");
    drop(held);
    until("the envelope is acked", || fake.acked().len() == 1).await;
    assert_eq!(sink.len(), 1);
    let m = &sink.messages()[0];
    assert_eq!(m.channel, "slack");
    assert_eq!(m.peer.id, "U1");
    assert_eq!(m.peer.name, "U1");
    assert_eq!(
        m.chat,
        ChatRef {
            id: "DU1".into(),
            kind: ChatKind::Direct,
            thread: None
        }
    );
    assert_eq!(m.text, "hello there");
    assert_eq!(m.message_id, ts);
    assert!(m.addressed);
    assert!(m.meta["event_id"].as_str().unwrap().starts_with("Ev"));
    // the event id is remembered durably
    let seen = state.get(slack::SEEN_KEY).await.unwrap();
    assert!(
        seen.contains(m.meta["event_id"].as_str().unwrap()),
        "{seen}"
    );

    running.stop().await.unwrap();
    assert_eq!(ch.status(), "stopped");
}

#[tokio::test]
async fn sink_failure_is_not_acked_and_comes_again() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Sink::failing(1);
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;

    fake.dm("U1", "important");
    until("the sink refused it", || sink.attempts() == 1).await;
    until("the status shows it", || {
        ch.status().starts_with("error: inbound not stored")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(fake.acked().is_empty(), "a refused event must not be acked");
    assert_eq!(sink.len(), 0);

    // Slack retries (same event id, new envelope)
    fake.redeliver_last();
    until("the retry is taken", || sink.len() == 1).await;
    until("and acked", || fake.acked().len() == 1).await;
    assert_eq!(ch.status(), "socket: connected");

    // the first envelope, never acked, comes again on the next connection: a duplicate now
    fake.drop_socket();
    until("reconnected", || fake.connections() == 2).await;
    until("the old envelope is acked", || fake.acked().len() == 2).await;
    assert_eq!(sink.len(), 1);
    assert_eq!(sink.messages()[0].text, "important");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn unacked_event_is_redelivered_after_reconnect() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Sink::failing(1);
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;
    fake.dm("U1", "again please");
    until("the sink refused it", || sink.attempts() == 1).await;
    fake.disconnect();
    until("it arrives on the new connection", || sink.len() == 1).await;
    until("and is acked", || fake.acked().len() == 1).await;
    assert_eq!(fake.connections(), 2);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn channel_mentions_start_threads_that_survive_a_restart() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;

    fake.channel_message("C1", "U1", "just chatting", None);
    until("acked", || fake.acked().len() == 1).await;
    assert_eq!(
        sink.len(),
        0,
        "a channel message without a mention is ignored"
    );

    // comes as `message` and as `app_mention`: taken once
    let root = fake.channel_message("C1", "U1", "<@UBOT> summarize this", None);
    until("both envelopes acked", || fake.acked().len() == 3).await;
    assert_eq!(sink.len(), 1);
    let m = &sink.messages()[0];
    assert_eq!(m.chat, thread("C1", &root));
    assert_eq!(m.text, "summarize this");
    assert_eq!(m.message_id, root);
    assert_eq!(m.meta["mentioned"], true);
    assert!(state.get(&format!("thread:C1:{root}")).await.is_some());

    // a reply in that thread needs no mention
    let reply = fake.channel_message("C1", "U2", "and the costs too", Some(&root));
    until("the reply arrives", || sink.len() == 2).await;
    let m = &sink.messages()[1];
    assert_eq!(m.chat, thread("C1", &root));
    assert_eq!(m.text, "and the costs too");
    assert_eq!(m.message_id, reply);
    assert_eq!(m.peer.id, "U2");

    // a reply in a thread the bot is not part of is ignored
    let other = fake.channel_message("C1", "U1", "elsewhere", None);
    fake.channel_message("C1", "U2", "reply elsewhere", Some(&other));
    until("acked", || fake.acked().len() == 6).await;
    assert_eq!(sink.len(), 2);
    running.stop().await.unwrap();

    // a restarted channel (same state) still knows the thread
    let ch2 = channel(&fake);
    let running = start(&fake, &ch2, &sink, &state).await;
    fake.channel_message("C1", "U1", "one more thing", Some(&root));
    until("the reply arrives after the restart", || sink.len() == 3).await;
    assert_eq!(sink.messages()[2].chat, thread("C1", &root));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn bot_messages_edits_and_subtypes_are_ignored() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;
    let base = json!({"type": "message", "channel": "DU1", "channel_type": "im", "text": "x"});
    let with = |extra: Value| {
        let mut e = base.clone();
        for (k, v) in extra.as_object().unwrap() {
            e[k] = v.clone();
        }
        e
    };
    fake.push_event(with(json!({"user": "U9", "bot_id": "B9", "ts": "1.1"})));
    fake.push_event(with(
        json!({"subtype": "bot_message", "bot_id": "B9", "ts": "1.2"}),
    ));
    fake.push_event(with(json!({"user": "UBOT", "ts": "1.3"})));
    fake.push_event(with(json!({
        "subtype": "message_changed", "ts": "1.4",
        "message": {"user": "U1", "text": "edited", "ts": "1.0"},
    })));
    fake.push_event(with(
        json!({"subtype": "channel_join", "user": "U1", "ts": "1.5"}),
    ));
    fake.push_event(
        json!({"type": "reaction_added", "user": "U1", "reaction": "+1", "event_ts": "1.6"}),
    );
    // a person's message with a profile: the display name is used
    fake.push_event(with(json!({
        "user": "U1", "ts": "1.7", "text": "real one",
        "user_profile": {"display_name": "", "real_name": "Alice Example", "name": "alice"},
    })));
    until("all acked", || fake.acked().len() == 7).await;
    assert_eq!(sink.len(), 1);
    let m = &sink.messages()[0];
    assert_eq!(m.text, "real one");
    assert_eq!(m.peer.name, "Alice Example");
    assert_eq!(m.peer.username.as_deref(), Some("alice"));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn duplicates_are_ignored_also_after_a_restart() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;
    fake.dm("U1", "once");
    until("taken", || sink.len() == 1).await;
    fake.redeliver_last();
    until("the duplicate is acked", || fake.acked().len() == 2).await;
    assert_eq!(sink.len(), 1);
    running.stop().await.unwrap();

    let ch2 = channel(&fake);
    let running = start(&fake, &ch2, &sink, &state).await;
    fake.redeliver_last();
    until("the duplicate is acked", || fake.acked().len() == 3).await;
    assert_eq!(sink.len(), 1, "a restart must not take it again");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn disconnect_reconnects_and_events_keep_flowing() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;
    fake.dm("U1", "before");
    until("taken", || sink.len() == 1).await;
    fake.disconnect();
    // queued while no socket takes envelopes
    fake.dm("U1", "during");
    until("reconnected", || fake.connections() == 2).await;
    until("the queued one arrives", || sink.len() == 2).await;
    fake.dm("U1", "after");
    until("taken", || sink.len() == 3).await;
    let texts: Vec<String> = sink.messages().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["before", "during", "after"]);
    assert_eq!(fake.calls("apps.connections.open").len(), 2);
    assert_eq!(fake.calls("auth.test").len(), 1);
    until("connected", || ch.status() == "socket: connected").await;
    running.stop().await.unwrap();
}

#[tokio::test]
async fn dropped_socket_reconnects() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;
    fake.drop_socket();
    until("the status shows the reconnect", || {
        ch.status().starts_with("socket: reconnecting")
    })
    .await;
    until("reconnected", || {
        fake.connections() == 2 && fake.connected()
    })
    .await;
    fake.dm("U1", "still there?");
    until("taken", || sink.len() == 1).await;
    until("connected", || ch.status() == "socket: connected").await;
    running.stop().await.unwrap();
}

/// A socket that stays open while nothing flows (a proxy or NAT that forgot it): pinged
/// after `socket_idle`, unanswered after twice that, it is dropped and opened again, and
/// what waited comes over the new one.
#[tokio::test]
async fn a_silent_socket_is_pinged_then_replaced() {
    let fake = FakeSlack::start().await;
    let mut cfg = config(&fake);
    cfg.socket_idle = Duration::from_millis(300);
    let ch = Arc::new(SlackChannel::new(cfg).unwrap());
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;
    fake.freeze_socket();
    fake.dm("U1", "sent while the socket was silent");
    until("the status shows the reconnect", || {
        ch.status().starts_with("socket: reconnecting")
    })
    .await;
    assert!(
        ch.status().contains("not even to a ping"),
        "{}",
        ch.status()
    );
    until("taken over a new socket", || sink.len() == 1).await;
    assert_eq!(fake.connections(), 2);
    assert_eq!(sink.texts(), ["sent while the socket was silent"]);
    until("connected", || ch.status() == "socket: connected").await;
    running.stop().await.unwrap();
}

#[tokio::test]
async fn buttons_press_and_edit() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = start(&fake, &ch, &sink, &state).await;

    let chat = thread("C1", "1700000000.000001");
    let ts = ch
        .send(
            &chat,
            "Run `rm -rf build`?",
            &buttons(&[("Approve", "approve:7"), ("Deny", "deny:7")]),
        )
        .await
        .unwrap();
    let msgs = fake.bot_messages("C1");
    assert_eq!(msgs.len(), 1);
    let m = &msgs[0];
    assert_eq!(m.ts, ts);
    assert_eq!(m.thread_ts.as_deref(), Some("1700000000.000001"));
    assert_eq!(m.text, "Run `rm -rf build`?");
    assert_eq!(
        m.buttons,
        [
            ("Approve".to_owned(), "approve:7".to_owned()),
            ("Deny".to_owned(), "deny:7".to_owned())
        ]
    );
    let actions = m
        .blocks
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "actions")
        .unwrap();
    let e = &actions["elements"];
    assert_eq!(e[0]["action_id"], "approve:7");
    assert_eq!(e[0]["value"], "approve:7");
    assert_eq!(e[0]["style"], "primary");
    assert!(e[1].get("style").is_none());
    assert_eq!(section_texts(&m.blocks), ["Run `rm -rf build`?"]);

    fake.press("C1", &ts, "U1", "approve:7");
    until("the press arrives", || sink.len() == 1).await;
    until("acked", || fake.acked().len() == 1).await;
    let p = &sink.presses()[0];
    assert_eq!(p.channel, "slack");
    assert_eq!(p.data, "approve:7");
    assert_eq!(p.peer.id, "U1");
    assert_eq!(p.message_id, ts);
    assert_eq!(p.chat, chat);
    assert!(!p.press_id.is_empty());
    ch.answer_press(p, Some("Approved")).await.unwrap();
    // a second press of the same button (Slack retry) is a duplicate
    fake.redeliver_last();
    until("acked", || fake.acked().len() == 2).await;
    assert_eq!(sink.len(), 1);

    // the dispatcher edits the message: buttons gone, who decided written
    let decided = format!(
        "Run `rm -rf build`?\n\nApproved by {}",
        slack::mention("U1")
    );
    ch.edit(&chat, &ts, &decided, &[]).await.unwrap();
    let m = &fake.bot_messages("C1")[0];
    assert!(m.buttons.is_empty());
    assert_eq!(m.updates, 1);
    assert!(
        !m.blocks
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["type"] == "actions")
    );
    // the mention stays a mention (other `<…>` is escaped)
    assert_eq!(section_texts(&m.blocks)[1], "Approved by <@U1>");
    assert!(m.text.ends_with("Approved by <@U1>"), "{}", m.text);
    let update = &fake.calls("chat.update")[0];
    assert_eq!(update["channel"], "C1");
    assert_eq!(update["ts"], ts.as_str());

    // a DM press is a direct chat
    let dm = ChatRef {
        id: "DU1".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    let ts = ch
        .send(&dm, "ok?", &buttons(&[("Yes", "yes")]))
        .await
        .unwrap();
    assert!(fake.bot_messages("DU1")[0].thread_ts.is_none());
    fake.press("DU1", &ts, "U1", "yes");
    until("the press arrives", || sink.len() == 2).await;
    assert_eq!(sink.presses()[1].chat, dm);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn markdown_becomes_block_kit() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let dm = ChatRef {
        id: "DU1".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    let md = "# Report\n\nSome **bold** and a [link](https://example.com/a?b=1).\n\n```rust\nfn main() { if a < b {} }\n```\n\n- one\n- two\n\n---\n\n<!channel> ping";
    ch.send(&dm, md, &[]).await.unwrap();
    let m = &fake.bot_messages("DU1")[0];
    let blocks = m.blocks.as_array().unwrap();
    assert_eq!(blocks[0]["type"], "header");
    assert_eq!(blocks[0]["text"]["text"], "Report");
    assert_eq!(
        section_texts(&m.blocks),
        [
            "Some *bold* and a <https://example.com/a?b=1|link>.",
            "```\nfn main() { if a &lt; b {} }\n```",
            "• one\n• two",
            "&lt;!channel&gt; ping",
        ]
    );
    assert!(blocks.iter().any(|b| b["type"] == "divider"));
    assert!(!m.text.is_empty());
    assert!(
        !m.text.contains("<!channel>"),
        "the fallback is escaped too"
    );

    // a section longer than 3000 chars is split
    let long = "word ".repeat(1500);
    ch.send(&dm, &long, &[]).await.unwrap();
    let m = &fake.bot_messages("DU1")[1];
    let texts = section_texts(&m.blocks);
    assert!(texts.len() >= 3, "{}", texts.len());
    assert!(texts.iter().all(|t| t.chars().count() <= 3000));
    // The fallback keeps the whole text (Slack keeps 40,000 characters of it).
    assert_eq!(m.text, long);

    // a long code block stays fenced in every part
    let code = format!("```\n{}```", "let x = 1;\n".repeat(600));
    ch.send(&dm, &code, &[]).await.unwrap();
    let texts = section_texts(&fake.bot_messages("DU1")[2].blocks);
    assert!(texts.len() >= 2);
    assert!(
        texts
            .iter()
            .all(|t| t.starts_with("```") && t.ends_with("```"))
    );

    // many paragraphs: at most 50 blocks, merged
    let many: String = (0..200).map(|i| format!("paragraph {i}\n\n")).collect();
    ch.send(&dm, &many, &buttons(&[("Go", "go")]))
        .await
        .unwrap();
    let m = &fake.bot_messages("DU1")[3];
    let blocks = m.blocks.as_array().unwrap();
    assert!(blocks.len() <= 50, "{}", blocks.len());
    let all = section_texts(&m.blocks).join("\n");
    assert!(all.contains("paragraph 0") && all.contains("paragraph 199"));
    assert_eq!(m.buttons.len(), 1);

    // and far too much text: cut, still ≤ 50 blocks (the fake refuses more)
    let huge: String = (0..120)
        .map(|i| format!("{i} {}\n\n", "x".repeat(2900)))
        .collect();
    ch.send(&dm, &huge, &[]).await.unwrap();
    assert!(fake.bot_messages("DU1")[4].blocks.as_array().unwrap().len() <= 50);
}

#[tokio::test]
async fn rate_limits_are_waited_out() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let dm = ChatRef {
        id: "DU1".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    fake.rate_limit("chat.postMessage", 1, 1);
    let t0 = Instant::now();
    ch.send(&dm, "hi", &[]).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(900));
    assert_eq!(fake.calls("chat.postMessage").len(), 2);
    assert_eq!(fake.bot_messages("DU1").len(), 1);

    let mut cfg = config(&fake);
    cfg.max_retries = 0;
    let ch = SlackChannel::new(cfg).unwrap();
    fake.rate_limit("chat.postMessage", 1, 1);
    match ch.send(&dm, "hi", &[]).await {
        Err(ChannelError::RateLimited {
            retry_after_secs, ..
        }) => assert_eq!(retry_after_secs, 1),
        other => panic!("expected RateLimited, got {other:?}"),
    }
}

#[tokio::test]
async fn edits_are_spaced_per_channel() {
    let fake = FakeSlack::start().await;
    let mut cfg = config(&fake);
    cfg.edit_interval = Duration::from_millis(300);
    let ch = SlackChannel::new(cfg).unwrap();
    let chat = thread("C1", "1.1");
    let ts = ch.send(&chat, "v0", &[]).await.unwrap();
    let t0 = Instant::now();
    for i in 1..=3 {
        ch.edit(&chat, &ts, &format!("v{i}"), &[]).await.unwrap();
    }
    assert!(
        t0.elapsed() >= Duration::from_millis(550),
        "{:?}",
        t0.elapsed()
    );
    let m = &fake.bot_messages("C1")[0];
    assert_eq!(m.updates, 3);
    assert_eq!(m.text, "v3");
}

#[tokio::test]
async fn api_errors_are_surfaced() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    assert_eq!(
        ch.test().await.unwrap(),
        "@switchboard in Test Team (bot id UBOT); Socket Mode token ok"
    );

    let mut cfg = config(&fake);
    cfg.bot_token = "xoxb-wrong-SECRET".into();
    let bad = Arc::new(SlackChannel::new(cfg).unwrap());
    let e = bad.test().await.unwrap_err();
    match &e {
        ChannelError::Api {
            method,
            code,
            description,
            ..
        } => {
            assert_eq!(method, "auth.test");
            assert_eq!(*code, 200);
            assert_eq!(description, "invalid_auth");
        }
        other => panic!("expected Api, got {other:?}"),
    }
    assert_eq!(e.to_string(), "slack: auth.test failed: invalid_auth");
    // run gives up on a bad token
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&bad, &sink, &state);
    let r = tokio::time::timeout(WAIT, running.handle)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(r, Err(ChannelError::Api { .. })));
    assert!(bad.status().contains("invalid_auth"), "{}", bad.status());
    assert!(!bad.status().contains("SECRET"));

    let e = ch
        .send(
            &ChatRef {
                id: "Xnope".into(),
                kind: ChatKind::Group,
                thread: None,
            },
            "hi",
            &[],
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, ChannelError::Api { description, .. } if description == "channel_not_found"),
        "{e:?}"
    );
    let e = ch
        .edit(&thread("C1", "1.1"), "9.9", "x", &[])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("message_not_found"), "{e}");
    assert!(
        ch.send(&thread("C1", "1.1"), "x", &buttons(&[("Bad", "")]))
            .await
            .is_err()
    );
}

// ---- Events API ----

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn signed(body: &[u8], ts: u64, secret: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    let ts = ts.to_string();
    h.insert(slack::TIMESTAMP_HEADER, HeaderValue::from_str(&ts).unwrap());
    h.insert(
        slack::SIGNATURE_HEADER,
        HeaderValue::from_str(&slack::signature(secret, &ts, body)).unwrap(),
    );
    h
}

fn dm_callback(event_id: &str, ts: &str, text: &str) -> Vec<u8> {
    json!({
        "token": "x", "team_id": "T0001", "api_app_id": "A0001", "type": "event_callback",
        "event_id": event_id, "event_time": now(),
        "event": {"type": "message", "channel": "DU1", "channel_type": "im", "user": "U1",
                  "text": text, "ts": ts, "event_ts": ts},
    })
    .to_string()
    .into_bytes()
}

fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".into(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[tokio::test]
async fn events_api_checks_signatures() {
    let fake = FakeSlack::start().await;
    let ch = events_channel(&fake);
    let body = dm_callback("Ev1", "1.1", "hello over http");

    let item = ch
        .inbound_http(&signed(&body, now(), SECRET), &body)
        .await
        .unwrap()
        .expect("a message");
    match item {
        Inbound::Message(m) => {
            assert_eq!(m.text, "hello over http");
            assert_eq!(m.chat.kind, ChatKind::Direct);
            assert_eq!(m.peer.id, "U1");
        }
        other => panic!("{other:?}"),
    }

    let wrong = ch
        .inbound_http(&signed(&body, now(), "another-secret"), &body)
        .await;
    assert_eq!(wrong, Err(InboundHttpError::Unauthorized));
    let old = ch
        .inbound_http(&signed(&body, now() - 600, SECRET), &body)
        .await;
    assert_eq!(old, Err(InboundHttpError::Unauthorized));
    let mut tampered = signed(&body, now(), SECRET);
    tampered.insert(slack::TIMESTAMP_HEADER, HeaderValue::from_static("1"));
    assert_eq!(
        ch.inbound_http(&tampered, &body).await,
        Err(InboundHttpError::Unauthorized)
    );
    assert_eq!(
        ch.inbound_http(&HeaderMap::new(), &body).await,
        Err(InboundHttpError::Unauthorized)
    );
    let mut other_body = body.clone();
    other_body.push(b' ');
    assert_eq!(
        ch.inbound_http(&signed(&body, now(), SECRET), &other_body)
            .await,
        Err(InboundHttpError::Unauthorized)
    );

    // a Socket Mode channel takes nothing over HTTP, and answers no challenge
    let socket = channel(&fake);
    assert_eq!(
        socket
            .inbound_http(&signed(&body, now(), SECRET), &body)
            .await,
        Err(InboundHttpError::NotSupported)
    );
    let challenge = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    assert_eq!(
        socket.http_challenge(&signed(challenge, now(), SECRET), challenge),
        None
    );
}

#[tokio::test]
async fn events_api_url_verification_and_interactivity() {
    let fake = FakeSlack::start().await;
    let ch = events_channel(&fake);
    let challenge = br#"{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}"#;
    assert_eq!(
        ch.http_challenge(&signed(challenge, now(), SECRET), challenge)
            .as_deref(),
        Some("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P")
    );
    // Unsigned or wrongly signed: not answered.
    assert_eq!(
        ch.http_challenge(&axum::http::HeaderMap::new(), challenge),
        None
    );
    assert_eq!(
        ch.http_challenge(&signed(challenge, now(), "wrong-secret"), challenge),
        None
    );
    let cb = dm_callback("Ev1", "1.1", "x");
    assert_eq!(ch.http_challenge(&signed(&cb, now(), SECRET), &cb), None);
    assert_eq!(
        ch.inbound_http(&signed(challenge, now(), SECRET), challenge)
            .await,
        Ok(None)
    );

    let payload = json!({
        "type": "block_actions",
        "user": {"id": "U1", "username": "alice", "name": "alice"},
        "trigger_id": "123.456.abc",
        "container": {"type": "message", "message_ts": "1700000000.000009", "channel_id": "C1"},
        "channel": {"id": "C1", "name": "general"},
        "message": {"ts": "1700000000.000009", "thread_ts": "1700000000.000001", "text": "ok?"},
        "actions": [{"action_id": "approve:1", "value": "approve:1", "type": "button", "action_ts": "1.2"}],
    });
    let body = format!("payload={}", form_encode(&payload.to_string())).into_bytes();
    let mut headers = signed(&body, now(), SECRET);
    headers.insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    let item = ch.inbound_http(&headers, &body).await.unwrap();
    assert_eq!(
        item,
        Some(Inbound::Press(ButtonPress {
            channel: "slack".into(),
            press_id: "123.456.abc".into(),
            peer: switchboard_gateway::Peer {
                id: "U1".into(),
                name: "<@U1>".into(),
                username: Some("alice".into()),
            },
            chat: thread("C1", "1700000000.000001"),
            message_id: "1700000000.000009".into(),
            data: "approve:1".into(),
            via: Default::default(),
            reason: None,
        }))
    );
}

#[tokio::test]
async fn events_api_while_running_takes_each_event_once() {
    let fake = FakeSlack::start().await;
    let ch = events_channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&ch, &sink, &state);
    until("events api", || ch.status() == "events api").await;
    assert_eq!(fake.connections(), 0);

    let body = dm_callback("Ev7", "7.7", "pushed");
    let r = ch.inbound_http(&signed(&body, now(), SECRET), &body).await;
    assert_eq!(r, Ok(None), "taken by the sink directly");
    assert_eq!(sink.len(), 1);
    // Slack's retry of the same event
    let r = ch.inbound_http(&signed(&body, now(), SECRET), &body).await;
    assert_eq!(r, Ok(None));
    assert_eq!(sink.len(), 1);

    // channel thread over HTTP: a mention starts it, a reply continues it
    let mention = json!({
        "type": "event_callback", "event_id": "Ev8",
        "event": {"type": "app_mention", "channel": "C1", "user": "U1", "text": "<@UBOT> hi", "ts": "8.8"},
    })
    .to_string();
    ch.inbound_http(
        &signed(mention.as_bytes(), now(), SECRET),
        mention.as_bytes(),
    )
    .await
    .unwrap();
    let reply = json!({
        "type": "event_callback", "event_id": "Ev9",
        "event": {"type": "message", "channel": "C1", "channel_type": "channel", "user": "U2",
                  "text": "more", "ts": "9.9", "thread_ts": "8.8"},
    })
    .to_string();
    ch.inbound_http(&signed(reply.as_bytes(), now(), SECRET), reply.as_bytes())
        .await
        .unwrap();
    let msgs = sink.messages();
    assert_eq!(msgs.len(), 3);
    assert_eq!(msgs[1].chat, thread("C1", "8.8"));
    assert_eq!(msgs[1].text, "hi");
    assert_eq!(msgs[2].chat, thread("C1", "8.8"));

    running.stop().await.unwrap();
    assert_eq!(ch.status(), "stopped");
}

#[tokio::test]
async fn a_rate_limit_holds_the_channel_for_the_calls_behind_it() {
    let fake = FakeSlack::start().await;
    let ch = channel(&fake);
    let dm = ChatRef {
        id: "DU1".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    fake.rate_limit("chat.postMessage", 1, 1);
    let first = {
        let (ch, dm) = (ch.clone(), dm.clone());
        tokio::spawn(async move { ch.send(&dm, "first", &[]).await })
    };
    until("the first send refused", || {
        fake.calls("chat.postMessage").len() == 1
    })
    .await;
    // a send queued behind the 429 waits for it instead of going out at once
    let t0 = Instant::now();
    ch.send(&dm, "second", &[]).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t0.elapsed()
    );
    first.await.unwrap().unwrap();
    assert_eq!(fake.calls("chat.postMessage").len(), 3);
    assert_eq!(fake.bot_messages("DU1").len(), 2);
}

#[tokio::test]
async fn pending_edits_of_one_message_coalesce() {
    let fake = FakeSlack::start().await;
    let mut cfg = config(&fake);
    cfg.edit_interval = Duration::from_millis(300);
    let ch = SlackChannel::new(cfg).unwrap();
    let chat = thread("C1", "1.1");
    let ts = ch.send(&chat, "v0", &[]).await.unwrap();
    ch.edit(&chat, &ts, "v1", &[]).await.unwrap();
    let texts: Vec<String> = (2..=6).map(|i| format!("v{i}")).collect();
    let results =
        futures::future::join_all(texts.iter().map(|t| ch.edit(&chat, &ts, t, &[]))).await;
    for r in results {
        r.unwrap();
    }
    let m = &fake.bot_messages("C1")[0];
    assert_eq!(m.text, "v6", "the newest edit goes out");
    assert_eq!(m.updates, 2, "v1, then only the newest of the five");
}
