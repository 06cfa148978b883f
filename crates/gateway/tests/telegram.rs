//! The Telegram channel against the fake Bot API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use switchboard_gateway::health::{ConnectionState, FAILING_AFTER};
use switchboard_gateway::telegram::{TelegramChannel, TelegramConfig};
use switchboard_gateway::{
    Button, ButtonPress, Channel, ChannelError, ChatKind, ChatRef, Inbound, InboundMessage,
};
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::wait::{until, until_within};

use common::*;

const BOT: &str = "switchboard_test_bot";

fn config(fake: &FakeTelegram) -> TelegramConfig {
    let mut cfg = TelegramConfig::new(FakeTelegram::TOKEN);
    cfg.base_url = fake.base_url();
    cfg.poll_timeout_secs = 1;
    cfg
}

fn channel(fake: &FakeTelegram) -> Arc<TelegramChannel> {
    Arc::new(TelegramChannel::new(config(fake)).unwrap())
}

fn update_id(m: &InboundMessage) -> i64 {
    m.meta["update_id"].as_i64().unwrap()
}

fn group(id: i64) -> ChatRef {
    ChatRef {
        id: id.to_string(),
        kind: ChatKind::Group,
        thread: None,
    }
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

#[tokio::test]
async fn dm_arrives_and_offset_is_persisted() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let first = fake.dm(42, "Alice", "hello there");
    let running = run(&ch, &sink, &state);
    until("the DM arrives", || sink.len() == 1).await;
    assert_eq!(ch.status(), "polling");
    let m = &sink.messages()[0];
    assert_eq!(m.channel, "telegram");
    assert_eq!(m.peer.id, "42");
    assert_eq!(m.peer.name, "Alice");
    assert_eq!(
        m.chat,
        ChatRef {
            id: "42".into(),
            kind: ChatKind::Direct,
            thread: None
        }
    );
    assert_eq!(m.text, "hello there");
    assert_eq!(m.message_id, first.to_string());
    assert!(m.addressed);
    let uid = update_id(m);
    until("the offset is stored", || state.offset() == Some(uid + 1)).await;
    let polls = fake.calls("getUpdates");
    assert_eq!(
        polls[0]["allowed_updates"],
        serde_json::json!(["message", "edited_message", "callback_query"])
    );
    assert_eq!(polls[0]["timeout"], 1);
    assert_eq!(fake.calls("getMe").len(), 1);
    running.stop().await.unwrap();
    assert_eq!(ch.status(), "stopped");

    // a restart with the same state resumes after the stored offset
    let before = fake.calls("getUpdates").len();
    let sink2 = Arc::new(Sink::default());
    let running = run(&ch, &sink2, &state);
    until("the restarted channel polls twice", || {
        fake.calls("getUpdates").len() >= before + 2
    })
    .await;
    assert_eq!(fake.calls("getUpdates")[before]["offset"], uid + 1);
    assert_eq!(sink2.len(), 0, "no update is delivered twice");
    fake.dm(42, "Alice", "second");
    until("the second DM arrives", || sink2.len() == 1).await;
    assert_eq!(sink2.messages()[0].text, "second");
    assert_eq!(sink.len(), 1);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_failing_sink_gets_the_update_again() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let sink = Sink::failing(1);
    let state = Arc::new(MemState::default());
    fake.dm(7, "Bob", "one");
    fake.dm(7, "Bob", "two");
    let running = run(&ch, &sink, &state);
    until("the first refusal", || {
        sink.attempts.load(Ordering::SeqCst) >= 1
    })
    .await;
    // refused: the offset did not move, the second update was not offered
    assert_eq!(state.offset(), None);
    assert_eq!(sink.attempts.load(Ordering::SeqCst), 1);
    until("both DMs are delivered", || sink.len() == 2).await;
    let texts: Vec<String> = sink.messages().into_iter().map(|m| m.text).collect();
    assert_eq!(texts, ["one", "two"]);
    assert_eq!(sink.attempts.load(Ordering::SeqCst), 3);
    let last = update_id(&sink.messages()[1]);
    until("the offset is stored", || state.offset() == Some(last + 1)).await;
    running.stop().await.unwrap();
}

#[tokio::test]
async fn group_messages_need_a_mention_or_a_reply() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    // the bot's message to reply to
    ch.send(&group(-100), "I am here", &[]).await.unwrap();
    let running = run(&ch, &sink, &state);
    fake.group_message(-100, 1, "Carol", "just chatting", None, false);
    let skipped_last = fake.group_message(
        -100,
        1,
        "Carol",
        "mail me@switchboard_test_bot",
        None,
        false,
    );
    fake.group_message(
        -100,
        1,
        "Carol",
        &format!("@{BOT} what's the status?"),
        None,
        false,
    );
    fake.group_message(
        -100,
        2,
        "Dave",
        &format!("hey @{} do it", BOT.to_uppercase()),
        None,
        false,
    );
    fake.group_message(-100, 1, "Carol", "yes, that one", None, true);
    until("three addressed messages", || sink.len() == 3).await;
    let msgs = sink.messages();
    let texts: Vec<&str> = msgs.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["what's the status?", "hey do it", "yes, that one"]);
    for m in &msgs {
        assert!(m.addressed);
        assert_eq!(m.chat, group(-100));
        assert_ne!(m.message_id, skipped_last.to_string());
    }
    assert_eq!(msgs[1].peer.id, "2");
    // skipped updates still advance the offset
    let last = update_id(&msgs[2]);
    until("the offset passes everything", || {
        state.offset() == Some(last + 1)
    })
    .await;
    running.stop().await.unwrap();

    // without require_mention_in_groups every group message comes, marked
    let mut cfg = config(&fake);
    cfg.require_mention_in_groups = false;
    let ch = Arc::new(TelegramChannel::new(cfg).unwrap());
    let sink = Arc::new(Sink::default());
    let running = run(&ch, &sink, &state);
    fake.group_message(-100, 1, "Carol", "unaddressed", None, false);
    fake.group_message(-100, 1, "Carol", &format!("@{BOT} addressed"), None, false);
    until("both group messages", || sink.len() == 2).await;
    let msgs = sink.messages();
    assert_eq!(
        (msgs[0].text.as_str(), msgs[0].addressed),
        ("unaddressed", false)
    );
    assert_eq!(
        (msgs[1].text.as_str(), msgs[1].addressed),
        ("addressed", true)
    );
    running.stop().await.unwrap();
}

#[tokio::test]
async fn forum_topics_are_threads() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&ch, &sink, &state);
    // a topic message "replies" to the topic's creation: not to the bot
    fake.group_message(-200, 5, "Erin", "no mention here", Some(42), false);
    fake.group_message(-200, 5, "Erin", &format!("@{BOT} deploy"), Some(42), false);
    until("the topic message", || sink.len() == 1).await;
    let m = &sink.messages()[0];
    assert_eq!(m.text, "deploy");
    let thread = ChatRef {
        id: "-200".into(),
        kind: ChatKind::Thread,
        thread: Some("42".into()),
    };
    assert_eq!(m.chat, thread);

    // replies go to the topic; a reply to the bot there is addressed
    ch.send(&thread, "on it", &[]).await.unwrap();
    assert_eq!(fake.calls("sendMessage")[0]["message_thread_id"], 42);
    assert_eq!(fake.bot_messages(-200)[0].thread_id, Some(42));
    fake.group_message(-200, 5, "Erin", "thanks", Some(42), true);
    until("the reply in the topic", || sink.len() == 2).await;
    let m = &sink.messages()[1];
    assert_eq!((m.text.as_str(), m.addressed), ("thanks", true));
    assert_eq!(m.chat, thread);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn buttons_are_pressed_and_answered() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let dm = ChatRef {
        id: "42".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    let id = ch
        .send(
            &dm,
            "Run `rm -rf build`? *sure*",
            &buttons(&[("Approve", "ap:1:yes"), ("Deny", "ap:1:no")]),
        )
        .await
        .unwrap();
    let sent = fake.calls("sendMessage");
    assert!(sent[0].get("parse_mode").is_none(), "plain text");
    assert_eq!(sent[0]["chat_id"], 42);
    let msgs = fake.bot_messages(42);
    assert_eq!(msgs.len(), 1);
    assert_eq!(msgs[0].message_id.to_string(), id);
    assert_eq!(msgs[0].text, "Run `rm -rf build`? *sure*");
    assert_eq!(
        msgs[0].buttons,
        [
            ("Approve".to_string(), "ap:1:yes".to_string()),
            ("Deny".to_string(), "ap:1:no".to_string())
        ]
    );

    let running = run(&ch, &sink, &state);
    let query = fake.press(42, msgs[0].message_id, 42, "Alice", "ap:1:no");
    until("the press arrives", || sink.len() == 1).await;
    let Inbound::Press(press) = sink.items().remove(0) else {
        panic!("expected a press");
    };
    assert_eq!(
        press,
        ButtonPress {
            channel: "telegram".into(),
            press_id: query.clone(),
            peer: switchboard_gateway::Peer {
                id: "42".into(),
                name: "Alice".into(),
                username: None
            },
            chat: dm.clone(),
            message_id: id.clone(),
            data: "ap:1:no".into(),
            via: Default::default(),
            reason: None,
        }
    );
    ch.answer_press(&press, Some("Denied")).await.unwrap();
    assert_eq!(fake.answered(), std::slice::from_ref(&query));
    assert_eq!(fake.calls("answerCallbackQuery")[0]["text"], "Denied");
    // answering twice: Telegram refuses, the error says why
    let err = ch.answer_press(&press, None).await.unwrap_err();
    assert!(
        matches!(err, ChannelError::Api { code: 400, .. }),
        "{err:?}"
    );
    running.stop().await.unwrap();

    // callback data longer than 64 bytes is refused before any call
    let long = "x".repeat(65);
    let err = ch
        .send(&dm, "too long", &buttons(&[("Go", &long)]))
        .await
        .unwrap_err();
    assert!(matches!(err, ChannelError::Other { .. }), "{err:?}");
    assert_eq!(fake.calls("sendMessage").len(), 1);
    let ok = "y".repeat(64);
    ch.send(&dm, "just fits", &buttons(&[("Go", &ok)]))
        .await
        .unwrap();
}

#[tokio::test]
async fn edit_changes_text_and_removes_buttons() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let chat = group(-300);
    let id = ch
        .send(&chat, "thinking…", &buttons(&[("Stop", "stop:1")]))
        .await
        .unwrap();
    ch.edit(&chat, &id, "done: 42", &[]).await.unwrap();
    let m = &fake.bot_messages(-300)[0];
    assert_eq!(m.text, "done: 42");
    assert!(m.buttons.is_empty());
    assert_eq!(m.edits, 1);
    assert_eq!(
        fake.calls("editMessageText")[0]["reply_markup"],
        serde_json::json!({"inline_keyboard": []})
    );
    // the same text again: "message is not modified" is success
    ch.edit(&chat, &id, "done: 42", &[]).await.unwrap();
    assert_eq!(fake.bot_messages(-300)[0].edits, 1);
    assert_eq!(fake.calls("editMessageText").len(), 2);
    // buttons come back
    ch.edit(&chat, &id, "done: 42", &buttons(&[("Again", "again")]))
        .await
        .unwrap();
    assert_eq!(
        fake.bot_messages(-300)[0].buttons,
        [("Again".to_string(), "again".to_string())]
    );
    // an unknown message
    let err = ch.edit(&chat, "9999", "x", &[]).await.unwrap_err();
    match err {
        ChannelError::Api {
            code, description, ..
        } => {
            assert_eq!(code, 400);
            assert!(
                description.contains("message to edit not found"),
                "{description}"
            );
        }
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn rate_limits_are_honoured() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let dm = ChatRef {
        id: "42".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    fake.rate_limit("sendMessage", 1, 1);
    let t = Instant::now();
    ch.send(&dm, "after a pause", &[]).await.unwrap();
    assert!(t.elapsed() >= Duration::from_secs(1), "{:?}", t.elapsed());
    assert_eq!(fake.calls("sendMessage").len(), 2);
    assert_eq!(fake.bot_messages(42).len(), 1);

    let mut cfg = config(&fake);
    cfg.max_retries = 1;
    let ch = TelegramChannel::new(cfg).unwrap();
    fake.rate_limit("sendMessage", 5, 1);
    let err = ch.send(&dm, "never", &[]).await.unwrap_err();
    assert!(
        matches!(
            err,
            ChannelError::RateLimited {
                retry_after_secs: 1,
                ..
            }
        ),
        "{err:?}"
    );
    // one try and one retry
    assert_eq!(fake.calls("sendMessage").len(), 4);
    assert_eq!(fake.bot_messages(42).len(), 1);
}

#[tokio::test]
async fn polling_waits_out_a_rate_limit() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    fake.rate_limit("getUpdates", 1, 1);
    fake.dm(1, "Fay", "hi");
    let t = Instant::now();
    let running = run(&ch, &sink, &state);
    until("the DM after the rate limit", || sink.len() == 1).await;
    assert!(t.elapsed() >= Duration::from_secs(1));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_second_poller_is_a_conflict_waited_out() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    fake.conflict_next_poll();
    fake.dm(1, "Fay", "hi");
    let running = run(&ch, &sink, &state);
    // Reported while it lasts…
    until("the conflict reported", || {
        ch.status() == "conflict: another poller is running"
    })
    .await;
    let h = ch.health();
    assert_eq!(h.state, ConnectionState::Reconnecting, "{h:?}");
    assert!(h.reason.unwrap().contains("409"));
    // …and polling goes on after a back-off, not in a spin.
    until("the DM after the conflict", || sink.len() == 1).await;
    assert_eq!(fake.conflicts(), 1);
    assert_eq!(ch.status(), "polling");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn an_outage_is_reconnecting_then_failing_with_the_reason_and_connected_after() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    assert_eq!(ch.health().state, ConnectionState::Configured);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&ch, &sink, &state);
    until("connected", || {
        ch.health().state == ConnectionState::Connected
    })
    .await;
    let up = ch.health();
    assert_eq!(
        (up.status.as_str(), up.reason.as_deref()),
        ("polling", None)
    );
    assert!(up.since.is_some());

    fake.outage("getUpdates", FAILING_AFTER as usize);
    until("reconnecting", || {
        ch.health().state == ConnectionState::Reconnecting
    })
    .await;
    let first = ch.health();
    let reason = first.reason.clone().unwrap();
    assert!(reason.contains("Bad Gateway"), "{reason}");
    assert!(!reason.contains(FakeTelegram::TOKEN), "{reason}");
    assert!(first.status.starts_with("error: "), "{}", first.status);
    assert!(first.since >= up.since);
    // The back-off waits 1 s, then 2 s: the third failure in a row is `failing`.
    until_within(Duration::from_secs(15), "failing", || {
        ch.health().state == ConnectionState::Failing
    })
    .await;
    let failing = ch.health();
    assert_eq!(failing.since, first.since, "since: when the failures began");
    assert!(failing.reason.unwrap().contains("Bad Gateway"));
    until_within(Duration::from_secs(15), "connected again", || {
        ch.health().state == ConnectionState::Connected
    })
    .await;
    let back = ch.health();
    assert_eq!(back.reason, None);
    assert_eq!(back.status, "polling");
    let (last, at) = back.last_error.unwrap();
    assert!(
        last.contains("Bad Gateway"),
        "the last error is kept: {last}"
    );
    assert!(back.since.unwrap() >= at);
    fake.dm(42, "Alice", "after the outage");
    until("the DM arrives", || sink.len() == 1).await;
    running.stop().await.unwrap();
    assert_eq!(ch.health().state, ConnectionState::Stopped);
}

#[tokio::test]
async fn test_reports_the_bot_or_the_failure() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    assert_eq!(ch.test().await.unwrap(), "@switchboard_test_bot (id 999)");
    assert_eq!(
        ch.open_link().await.unwrap().as_deref(),
        Some("https://t.me/switchboard_test_bot")
    );

    let token = "654321:WRONG-SECRET-TOKEN";
    let mut cfg = config(&fake);
    cfg.token = token.into();
    assert!(!format!("{cfg:?}").contains("WRONG"));
    let bad = Arc::new(TelegramChannel::new(cfg).unwrap());
    let err = bad.test().await.unwrap_err();
    match &err {
        ChannelError::Api {
            code,
            description,
            method,
            ..
        } => {
            assert_eq!(*code, 401);
            assert_eq!(description, "Unauthorized");
            assert_eq!(method, "getMe");
        }
        other => panic!("expected an API error, got {other:?}"),
    }
    assert!(!err.to_string().contains("WRONG"), "{err}");
    assert!(!format!("{err:?}").contains("WRONG"), "{err:?}");

    // run gives up on a bad token (retrying will not fix it)
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&bad, &sink, &state);
    let r = tokio::time::timeout(Duration::from_secs(5), running.handle)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(r, Err(ChannelError::Api { code: 401, .. })),
        "{r:?}"
    );
    assert!(bad.status().starts_with("error: "), "{}", bad.status());
    assert!(!bad.status().contains("WRONG"));
}

#[tokio::test]
async fn unreachable_api_backs_off_and_hides_the_token() {
    // a port nobody listens on
    let addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut cfg = TelegramConfig::new(FakeTelegram::TOKEN);
    cfg.base_url = format!("http://{addr}/");
    cfg.poll_timeout_secs = 1;
    let ch = Arc::new(TelegramChannel::new(cfg).unwrap());
    let err = ch.test().await.unwrap_err();
    assert!(matches!(err, ChannelError::Unreachable { .. }), "{err:?}");
    assert!(!err.to_string().contains("TEST-TOKEN"), "{err}");

    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&ch, &sink, &state);
    until("an error status", || ch.status().starts_with("error: ")).await;
    assert!(!ch.status().contains("TEST-TOKEN"), "{}", ch.status());
    // still running (retrying), and it stops promptly when cancelled
    assert!(!running.handle.is_finished());
    running.stop().await.unwrap();
}

#[tokio::test]
async fn edits_in_one_chat_are_spaced() {
    let fake = FakeTelegram::start().await;
    let mut cfg = config(&fake);
    cfg.edit_interval = Duration::from_millis(300);
    let ch = TelegramChannel::new(cfg).unwrap();
    let a = group(-1);
    let b = group(-2);
    let ma = ch.send(&a, "a0", &[]).await.unwrap();
    let mb = ch.send(&b, "b0", &[]).await.unwrap();

    let t = Instant::now();
    ch.edit(&a, &ma, "a1", &[]).await.unwrap();
    ch.edit(&b, &mb, "b1", &[]).await.unwrap();
    // the first edits in each chat go at once
    assert!(
        t.elapsed() < Duration::from_millis(2000),
        "{:?}",
        t.elapsed()
    );
    ch.edit(&a, &ma, "a2", &[]).await.unwrap();
    let second = t.elapsed();
    ch.edit(&a, &ma, "a3", &[]).await.unwrap();
    let third = t.elapsed();
    assert!(second >= Duration::from_millis(300), "{second:?}");
    assert!(third >= Duration::from_millis(600), "{third:?}");
    // sends are not delayed
    let s = Instant::now();
    ch.send(&a, "a new message", &[]).await.unwrap();
    assert!(
        s.elapsed() < Duration::from_millis(2000),
        "{:?}",
        s.elapsed()
    );
    assert_eq!(fake.bot_messages(-1)[0].text, "a3");
    assert_eq!(fake.bot_messages(-1)[0].edits, 3);

    // concurrent edits in one chat are spaced too (of two messages: two edits of one
    // message asked at once coalesce, see `pending_edits_of_one_message_coalesce`)
    let mb2 = ch.send(&b, "b'0", &[]).await.unwrap();
    let t = Instant::now();
    let (r1, r2) = tokio::join!(ch.edit(&b, &mb, "b2", &[]), ch.edit(&b, &mb2, "b'1", &[]));
    r1.unwrap();
    r2.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn bots_captions_and_files() {
    let fake = FakeTelegram::start().await;
    let ch = channel(&fake);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&ch, &sink, &state);
    let chat = serde_json::json!({"id": 3, "type": "private", "first_name": "Gus"});
    let gus = serde_json::json!({"id": 3, "is_bot": false, "first_name": "Gus", "last_name": "Grant", "username": "gus"});
    // another bot: ignored
    fake.push_update(
        "message",
        serde_json::json!({"message_id": 1, "date": 0, "chat": chat,
            "from": {"id": 77, "is_bot": true, "first_name": "Other bot"}, "text": "beep"}),
    );
    // an edit: handed on marked `edited` (the dispatcher notes it in the ledger, no more)
    fake.push_update(
        "edited_message",
        serde_json::json!({"message_id": 2, "date": 0, "chat": chat, "from": gus, "text": "edited"}),
    );
    fake.push_update(
        "message",
        serde_json::json!({"message_id": 3, "date": 0, "chat": chat, "from": gus,
            "caption": "look at this",
            "photo": [
                {"file_id": "s", "file_unique_id": "s", "width": 90, "height": 90, "file_size": 1000},
                {"file_id": "l", "file_unique_id": "l", "width": 1280, "height": 960, "file_size": 90000}
            ]}),
    );
    let last = fake.push_update(
        "message",
        serde_json::json!({"message_id": 4, "date": 0, "chat": chat, "from": gus,
            "document": {"file_id": "d", "file_unique_id": "d", "file_name": "report.pdf", "file_size": 5555}}),
    );
    until("the edit, the photo and the document", || sink.len() == 3).await;
    let mut msgs = sink.messages();
    let edit = msgs.remove(0);
    assert!(edit.edited);
    assert_eq!(
        (edit.message_id.as_str(), edit.text.as_str()),
        ("2", "edited")
    );
    assert!(msgs.iter().all(|m| !m.edited));
    assert_eq!(msgs[0].text, "look at this");
    assert_eq!(msgs[0].peer.name, "Gus Grant");
    assert_eq!(msgs[0].peer.username.as_deref(), Some("gus"));
    assert_eq!(msgs[0].attachments.len(), 1);
    assert_eq!(msgs[0].attachments[0].kind, "photo");
    assert_eq!(msgs[0].attachments[0].size, Some(90000));
    assert_eq!(msgs[1].text, "");
    assert_eq!(msgs[1].attachments[0].kind, "document");
    assert_eq!(msgs[1].attachments[0].name.as_deref(), Some("report.pdf"));
    assert_eq!(msgs[1].attachments[0].size, Some(5555));
    until("the offset passes everything", || {
        state.offset() == Some(last + 1)
    })
    .await;
    running.stop().await.unwrap();
}

#[tokio::test]
async fn pending_edits_of_one_message_coalesce() {
    let fake = FakeTelegram::start().await;
    let mut cfg = config(&fake);
    cfg.edit_interval = Duration::from_millis(300);
    let ch = TelegramChannel::new(cfg).unwrap();
    let chat = group(-5);
    let m = ch.send(&chat, "v0", &[]).await.unwrap();
    ch.edit(&chat, &m, "v1", &[]).await.unwrap();
    // five edits of the message asked at once, while the next edit slot is 300 ms away
    let texts: Vec<String> = (2..=6).map(|i| format!("v{i}")).collect();
    let results = futures::future::join_all(texts.iter().map(|t| ch.edit(&chat, &m, t, &[]))).await;
    for r in results {
        r.unwrap();
    }
    let shown = &fake.bot_messages(-5)[0];
    assert_eq!(shown.text, "v6", "the newest edit goes out");
    assert_eq!(shown.edits, 2, "v1, then only the newest of the five");
}

#[tokio::test]
async fn flood_control_is_not_answered_with_a_storm_of_retries() {
    let fake = FakeTelegram::start().await;
    // Telegram's flood control: at most 3 messages a second in one chat
    fake.flood_control(3, Duration::from_secs(1));
    let ch = channel(&fake);
    let dm = ChatRef {
        id: "42".into(),
        kind: ChatKind::Direct,
        thread: None,
    };
    let texts: Vec<String> = (0..8).map(|i| format!("part {i}")).collect();
    let results = futures::future::join_all(texts.iter().map(|t| ch.send(&dm, t, &[]))).await;
    for r in results {
        r.unwrap();
    }
    let mut got: Vec<String> = fake.bot_messages(42).into_iter().map(|m| m.text).collect();
    got.sort();
    assert_eq!(got, texts, "every part arrives");
    // 5 refused at first; after the wait the held calls go one a second, so none again
    // (retrying them all at once would be refused again, and again)
    assert_eq!(fake.refused("sendMessage"), 5);
}
