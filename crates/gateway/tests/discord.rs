//! The Discord channel against the fake Discord (REST and Gateway on real TCP).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;
use switchboard_gateway::discord::{DiscordChannel, DiscordConfig, INTENTS};
use switchboard_gateway::{Button, Channel, ChannelError, ChatKind, ChatRef};
use switchboard_test_support::fake_discord::FakeDiscord;
use switchboard_test_support::wait::until;

use common::*;

const WAIT: Duration = Duration::from_secs(10);

fn config(fake: &FakeDiscord) -> DiscordConfig {
    let mut cfg = DiscordConfig::new(FakeDiscord::TOKEN);
    cfg.api_base = fake.api_base();
    cfg.edit_interval = Duration::from_millis(100);
    cfg
}

fn channel_with(cfg: DiscordConfig) -> Arc<DiscordChannel> {
    Arc::new(DiscordChannel::new(cfg).unwrap())
}

/// A channel running against `fake`, connected (READY seen).
async fn connected(cfg: DiscordConfig) -> (Arc<DiscordChannel>, Arc<Sink>, Arc<MemState>, Running) {
    let ch = channel_with(cfg);
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&ch, &sink, &state);
    until("connected", || ch.status() == "connected").await;
    (ch, sink, state, running)
}

fn dm_chat(user: &str) -> ChatRef {
    ChatRef {
        id: format!("dm-{user}"),
        kind: ChatKind::Direct,
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
async fn dm_arrives_with_one_identify_and_heartbeats() {
    let fake = FakeDiscord::start().await;
    let first = fake.dm("42", "alice", "hello there");
    let ch = channel_with(config(&fake));
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&ch, &sink, &state);
    until("the DM arrives", || sink.len() == 1).await;
    let m = &sink.messages()[0];
    assert_eq!(m.channel, "discord");
    assert_eq!(m.peer.id, "42");
    assert_eq!(m.peer.name, "alice");
    assert_eq!(m.peer.username.as_deref(), Some("alice"));
    assert_eq!(m.chat, dm_chat("42"));
    assert_eq!(m.text, "hello there");
    assert_eq!(m.message_id, first);
    assert_eq!(m.meta["message_id"], json!(first));
    assert!(m.addressed);
    assert_eq!(ch.status(), "connected");
    // IDENTIFY once, with the intents and properties
    assert_eq!(fake.identifies(), 1);
    let identify = &fake.identify_payloads()[0];
    assert_eq!(identify["intents"], json!(INTENTS));
    assert_eq!(INTENTS, 1 | 512 | 4096 | 32768);
    assert_eq!(identify["properties"]["browser"], "switchboard");
    assert_eq!(identify["properties"]["device"], "switchboard");
    assert_eq!(fake.calls("GET /gateway/bot").len(), 1);
    // heartbeats flow (500 ms interval) and are ACKed: no reconnects
    fake.wait_until(WAIT, "heartbeats flow", |f| f.heartbeats() >= 3)
        .await;
    assert_eq!(fake.resumes(), 0);
    assert_eq!(fake.identifies(), 1);
    // the session and the sequence number are stored
    assert_eq!(state.value("session_id").as_deref(), Some("fake-session-1"));
    assert!(
        state
            .value("resume_gateway_url")
            .unwrap()
            .starts_with("ws://")
    );
    assert_eq!(
        state.value("bot_user_id").as_deref(),
        Some(FakeDiscord::BOT_ID)
    );
    // READY is s=1, the DM s=2
    assert_eq!(state.value("seq").as_deref(), Some("2"));
    running.stop().await.unwrap();
    assert_eq!(ch.status(), "stopped");
}

#[tokio::test]
async fn guild_messages_need_a_mention_or_a_configured_channel() {
    let fake = FakeDiscord::start().await;
    let mut cfg = config(&fake);
    cfg.channels = vec!["open".into()];
    let (_ch, sink, _state, running) = connected(cfg).await;
    fake.guild_message("g1", "c1", "7", "bob", "not for the bot", false);
    fake.guild_message("g1", "c1", "7", "bob", "hi bot, status?", true);
    fake.guild_message("g1", "open", "8", "carol", "no mention needed here", false);
    // an explicit nickname mention in the text
    fake.push_dispatch(
        "MESSAGE_CREATE",
        json!({"id": "5001", "type": 0, "channel_id": "c1", "guild_id": "g1",
               "author": {"id": "7", "username": "bob", "global_name": "Bob B."},
               "content": "<@!900>: nick mention", "mentions": []}),
    );
    until("three messages arrive", || sink.len() == 3).await;
    let msgs = sink.messages();
    assert_eq!(msgs[0].text, "hi bot, status?");
    assert_eq!(
        msgs[0].chat,
        ChatRef {
            id: "c1".into(),
            kind: ChatKind::Group,
            thread: None
        }
    );
    assert!(msgs[0].addressed);
    assert_eq!(msgs[0].meta["guild_id"], "g1");
    assert_eq!(msgs[1].text, "no mention needed here");
    assert_eq!(msgs[1].chat.id, "open");
    assert_eq!(msgs[1].chat.kind, ChatKind::Group);
    assert!(!msgs[1].addressed);
    assert_eq!(msgs[2].text, "nick mention");
    assert_eq!(msgs[2].peer.name, "Bob B.");
    // nothing else trickles in
    fake.dm("1", "z", "marker");
    until("the marker arrives", || sink.len() == 4).await;
    assert_eq!(sink.texts()[3], "marker");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn other_guilds_and_bots_are_ignored() {
    let fake = FakeDiscord::start().await;
    let mut cfg = config(&fake);
    cfg.guilds = vec!["g1".into()];
    let (_ch, sink, _state, running) = connected(cfg).await;
    fake.guild_message("g2", "c9", "7", "bob", "other guild", true);
    fake.push_dispatch(
        "MESSAGE_CREATE",
        json!({"id": "6001", "type": 0, "channel_id": "dm-77",
               "author": {"id": "77", "username": "otherbot", "bot": true},
               "content": "I am a bot", "mentions": []}),
    );
    fake.push_dispatch(
        "MESSAGE_CREATE",
        json!({"id": "6002", "type": 0, "channel_id": "c1", "guild_id": "g1",
               "author": {"id": "78", "username": "hook", "bot": true},
               "content": "<@900> bot in guild", "mentions": [{"id": "900", "username": "x"}]}),
    );
    fake.guild_message("g1", "c1", "7", "bob", "allowed guild", true);
    until("the allowed message arrives", || sink.len() == 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(sink.texts(), ["allowed guild"]);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn threads_are_thread_chats() {
    let fake = FakeDiscord::start().await;
    let mut cfg = config(&fake);
    cfg.channels = vec!["open".into()];
    let (ch, sink, _state, running) = connected(cfg).await;
    fake.thread_create("g1", "open", "t1");
    fake.guild_message(
        "g1",
        "t1",
        "7",
        "bob",
        "in a thread under a configured channel",
        false,
    );
    until("the thread message arrives", || sink.len() == 1).await;
    let m = &sink.messages()[0];
    assert_eq!(
        m.chat,
        ChatRef {
            id: "t1".into(),
            kind: ChatKind::Thread,
            thread: Some("t1".into())
        }
    );
    let id = ch.send(&m.chat, "thread reply", &[]).await.unwrap();
    let sent = fake.bot_messages("t1");
    assert_eq!(sent[0].id, id);
    assert_eq!(sent[0].reply_to.as_deref(), Some(m.message_id.as_str()));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_dropped_socket_resumes_without_loss_or_repeats() {
    let fake = FakeDiscord::start().await;
    let (_ch, sink, state, running) = connected(config(&fake)).await;
    fake.dm("42", "alice", "before");
    until("the first DM arrives", || sink.len() == 1).await;
    fake.drop_connection();
    // injected while the socket is down (or being re-opened): delivered by the RESUME replay
    fake.dm("42", "alice", "while down 1");
    fake.dm("42", "alice", "while down 2");
    fake.wait_until(WAIT, "the channel resumes", |f| f.resumes() == 1)
        .await;
    until("both DMs arrive", || sink.len() == 3).await;
    fake.dm("42", "alice", "after");
    until("the last DM arrives", || sink.len() == 4).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        sink.texts(),
        ["before", "while down 1", "while down 2", "after"]
    );
    assert_eq!(fake.identifies(), 1);
    assert_eq!(fake.resumes(), 1);
    assert_eq!(state.value("session_id").as_deref(), Some("fake-session-1"));
    running.stop().await.unwrap();
}

#[tokio::test]
async fn missing_heartbeat_acks_reconnect_and_resume() {
    let fake = FakeDiscord::start().await;
    let (ch, sink, _state, running) = connected(config(&fake)).await;
    fake.withhold_acks(true);
    fake.wait_until(WAIT, "the channel resumes", |f| f.resumes() >= 1)
        .await;
    fake.withhold_acks(false);
    fake.dm("42", "alice", "after the zombie");
    until("the DM arrives", || sink.len() == 1).await;
    until("connected again", || ch.status() == "connected").await;
    assert_eq!(fake.identifies(), 1);
    assert_eq!(sink.texts(), ["after the zombie"]);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn an_invalid_session_identifies_afresh() {
    let fake = FakeDiscord::start().await;
    let (ch, sink, state, running) = connected(config(&fake)).await;
    fake.invalidate_session();
    fake.drop_connection();
    fake.wait_until(Duration::from_secs(15), "a second IDENTIFY", |f| {
        f.identifies() == 2
    })
    .await;
    assert_eq!(fake.resumes(), 1);
    until("connected again", || ch.status() == "connected").await;
    assert_eq!(state.value("session_id").as_deref(), Some("fake-session-2"));
    fake.dm("42", "alice", "new session");
    until("the DM arrives", || sink.len() == 1).await;
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_sink_failure_resumes_and_gets_the_event_again() {
    let fake = FakeDiscord::start().await;
    let (_ch, sink, _state, running) = connected(config(&fake)).await;
    sink.fail.store(1, Ordering::SeqCst);
    fake.dm("42", "alice", "one");
    fake.dm("42", "alice", "two");
    until("both DMs arrive", || sink.len() == 2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(sink.texts(), ["one", "two"]);
    assert_eq!(fake.resumes(), 1);
    assert_eq!(fake.identifies(), 1);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn known_threads_survive_a_restart() {
    let fake = FakeDiscord::start().await;
    let mut cfg = config(&fake);
    cfg.channels = vec!["open".into()];
    let (_ch, sink, state, running) = connected(cfg.clone()).await;
    fake.thread_create("g1", "open", "t1");
    fake.guild_message("g1", "t1", "7", "bob", "before", false);
    until("the thread message arrives", || sink.len() == 1).await;
    running.stop().await.unwrap();
    // A new process resumes (Discord sends no THREAD_CREATE again): still a thread chat.
    let ch2 = channel_with(cfg);
    let sink2 = Arc::new(Sink::default());
    let running = run(&ch2, &sink2, &state);
    until("connected again", || ch2.status() == "connected").await;
    fake.guild_message("g1", "t1", "7", "bob", "after", false);
    until("the thread message arrives after the restart", || {
        sink2.len() == 1
    })
    .await;
    assert_eq!(sink2.messages()[0].chat.kind, ChatKind::Thread);
    assert_eq!(fake.resumes(), 1);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_restart_resumes_the_stored_session() {
    let fake = FakeDiscord::start().await;
    let (_ch, sink, state, running) = connected(config(&fake)).await;
    fake.dm("42", "alice", "first");
    until("the DM arrives", || sink.len() == 1).await;
    running.stop().await.unwrap();
    fake.dm("42", "alice", "while stopped");
    // a new process: same state, new channel and sink
    let ch2 = channel_with(config(&fake));
    let sink2 = Arc::new(Sink::default());
    let running = run(&ch2, &sink2, &state);
    until("the missed DM arrives", || sink2.len() == 1).await;
    assert_eq!(sink2.texts(), ["while stopped"]);
    assert_eq!(fake.identifies(), 1);
    assert_eq!(fake.resumes(), 1);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn presses_are_acknowledged_within_3s() {
    let fake = FakeDiscord::start().await;
    let (ch, sink, _state, running) = connected(config(&fake)).await;
    let chat = dm_chat("42");
    let mid = ch
        .send(
            &chat,
            "Approve?",
            &buttons(&[("Yes", "ap:1:y"), ("No", "ap:1:n")]),
        )
        .await
        .unwrap();
    let pressed_at = Instant::now();
    let press_id = fake.press("dm-42", &mid, "42", "ap:1:y");
    until("the press arrives", || !sink.presses().is_empty()).await;
    fake.wait_until(WAIT, "the interaction is acknowledged", |f| {
        !f.callbacks().is_empty()
    })
    .await;
    assert!(pressed_at.elapsed() < Duration::from_secs(3));
    assert_eq!(fake.callbacks(), [(press_id.clone(), json!({"type": 6}))]);
    let p = &sink.presses()[0];
    assert_eq!(p.press_id, press_id);
    assert_eq!(p.data, "ap:1:y");
    assert_eq!(p.message_id, mid);
    assert_eq!(p.peer.id, "42");
    assert_eq!(p.chat, chat);
    ch.answer_press(p, Some("ok")).await.unwrap();
    // a guild press: member.user, a group chat
    fake.guild_message("g1", "c1", "7", "bob", "hi", true);
    until("the guild message arrives", || sink.len() == 2).await;
    let group = sink.messages()[0].chat.clone();
    let gm = ch
        .send(&group, "pick", &buttons(&[("A", "a")]))
        .await
        .unwrap();
    fake.press("c1", &gm, "7", "a");
    until("the guild press arrives", || sink.presses().len() == 2).await;
    let p = &sink.presses()[1];
    assert_eq!(p.chat, group);
    assert_eq!(p.peer.id, "7");
    fake.wait_until(WAIT, "both acknowledged", |f| f.callbacks().len() == 2)
        .await;
    running.stop().await.unwrap();
}

#[tokio::test]
async fn send_replies_first_and_edit_removes_buttons() {
    let fake = FakeDiscord::start().await;
    let (ch, sink, _state, running) = connected(config(&fake)).await;
    assert_eq!(ch.max_chars(), 2000);
    assert!(ch.can_edit());
    let user_msg = fake.dm("42", "alice", "question");
    until("the DM arrives", || sink.len() == 1).await;
    let chat = sink.messages()[0].chat.clone();
    let first = ch
        .send(
            &chat,
            "answer part 1",
            &buttons(&[("Stop", "stop"), ("More", "more")]),
        )
        .await
        .unwrap();
    let second = ch.send(&chat, "answer part 2", &[]).await.unwrap();
    let sent = fake.bot_messages("dm-42");
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].id, first);
    assert_eq!(sent[0].reply_to.as_deref(), Some(user_msg.as_str()));
    assert_eq!(
        sent[0].components,
        [
            ("Stop".into(), "stop".into()),
            ("More".into(), "more".into())
        ]
    );
    assert_eq!(sent[1].id, second);
    assert_eq!(sent[1].reply_to, None);
    let posted = fake.calls("POST /channels/dm-42/messages");
    assert_eq!(posted[0]["components"][0]["type"], 1);
    assert_eq!(posted[0]["components"][0]["components"][0]["type"], 2);
    assert_eq!(posted[0]["components"][0]["components"][0]["style"], 1);
    assert_eq!(posted[0]["components"][0]["components"][1]["style"], 2);
    assert_eq!(
        posted[0]["message_reference"]["message_id"],
        json!(user_msg)
    );
    assert!(posted[1].get("message_reference").is_none());
    // edits: text replaced, buttons removed, spaced by edit_interval
    let t0 = Instant::now();
    ch.edit(&chat, &first, "answer part 1 (done)", &[])
        .await
        .unwrap();
    ch.edit(&chat, &first, "answer part 1 (final)", &[])
        .await
        .unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(100));
    let sent = fake.bot_messages("dm-42");
    assert_eq!(sent[0].content, "answer part 1 (final)");
    assert!(sent[0].components.is_empty());
    assert_eq!(sent[0].edits, 2);
    assert_eq!(
        fake.calls("PATCH /channels/dm-42/messages/")[0]["components"],
        json!([])
    );
    // an unknown message: Discord's error, with its message
    let err = ch.edit(&chat, "12345", "x", &[]).await.unwrap_err();
    match err {
        ChannelError::Api {
            code, description, ..
        } => {
            assert_eq!(code, 404);
            assert!(description.contains("Unknown Message"), "{description}");
        }
        other => panic!("unexpected {other:?}"),
    }
    // too long: refused by Discord with its message
    let err = ch.send(&chat, &"x".repeat(2001), &[]).await.unwrap_err();
    assert!(err.to_string().contains("Invalid Form Body"), "{err}");
    running.stop().await.unwrap();
}

#[tokio::test]
async fn rate_limits_are_waited_out() {
    let fake = FakeDiscord::start().await;
    let ch = channel_with(config(&fake));
    let chat = dm_chat("42");
    fake.rate_limit("POST /channels/dm-42/messages", 1, 0.5);
    let t0 = Instant::now();
    ch.send(&chat, "hello", &[]).await.unwrap();
    assert!(t0.elapsed() >= Duration::from_millis(450));
    assert_eq!(fake.calls("POST /channels/dm-42/messages").len(), 2);
    assert_eq!(fake.bot_messages("dm-42").len(), 1);
    // more 429s than retries: RateLimited
    let mut cfg = config(&fake);
    cfg.max_retries = 1;
    let ch = channel_with(cfg);
    fake.rate_limit("POST /channels/dm-42/messages", 5, 0.1);
    let err = ch.send(&chat, "again", &[]).await.unwrap_err();
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
}

#[tokio::test]
async fn test_names_the_bot_and_hides_a_bad_token() {
    let fake = FakeDiscord::start().await;
    let ch = channel_with(config(&fake));
    assert_eq!(ch.test().await.unwrap(), "@switchboard_test_bot (id 900)");
    // The invite link: the bot's id as the client id, the bot scope, and the permissions
    // the gateway uses (view, send, send in threads, attach, read history).
    assert_eq!(
        ch.open_link().await.unwrap().as_deref(),
        Some(
            "https://discord.com/oauth2/authorize?client_id=900&scope=bot%20applications.commands&permissions=274878008320"
        )
    );
    let mut cfg = config(&fake);
    cfg.token = "WRONG-TOKEN.secretpart.xyz".into();
    let bad = channel_with(cfg);
    let err = bad.test().await.unwrap_err();
    let text = err.to_string();
    assert!(
        matches!(err, ChannelError::Api { code: 401, .. }),
        "{err:?}"
    );
    assert!(text.contains("401: Unauthorized"), "{text}");
    assert!(!text.contains("WRONG-TOKEN"), "{text}");
    // run with a bad token: a fatal error, no token in it
    let sink = Arc::new(Sink::default());
    let state = Arc::new(MemState::default());
    let running = run(&bad, &sink, &state);
    let r = tokio::time::timeout(WAIT, running.handle)
        .await
        .unwrap()
        .unwrap();
    let err = r.unwrap_err();
    assert!(!err.to_string().contains("WRONG-TOKEN"), "{err}");
    assert!(bad.status().starts_with("error:"), "{}", bad.status());
    // the gateway itself refusing the token (close code 4004) ends run too
    let mut cfg = config(&fake);
    cfg.token = "WRONG-TOKEN.secretpart.xyz".into();
    cfg.gateway_url = Some(fake.gateway_url());
    let bad = channel_with(cfg);
    let running = run(&bad, &sink, &state);
    let r = tokio::time::timeout(WAIT, running.handle)
        .await
        .unwrap()
        .unwrap();
    match r.unwrap_err() {
        ChannelError::Api {
            code, description, ..
        } => {
            assert_eq!(code, 4004);
            assert!(!description.contains("WRONG-TOKEN"), "{description}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn fatal_close_codes_end_run() {
    let fake = FakeDiscord::start().await;
    let (ch, _sink, _state, running) = connected(config(&fake)).await;
    fake.close_with(4014);
    let r = tokio::time::timeout(WAIT, running.handle)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(r, Err(ChannelError::Api { code: 4014, .. })),
        "{r:?}"
    );
    assert!(
        ch.status().contains("disallowed intents"),
        "{}",
        ch.status()
    );
}

#[tokio::test]
async fn a_resumable_close_code_resumes() {
    let fake = FakeDiscord::start().await;
    let (_ch, sink, _state, running) = connected(config(&fake)).await;
    fake.close_with(4000);
    fake.dm("42", "alice", "after close");
    until("the DM arrives", || sink.len() == 1).await;
    assert_eq!(fake.resumes(), 1);
    assert_eq!(fake.identifies(), 1);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn server_heartbeat_requests_and_reconnects_are_honoured() {
    // a long interval: the heartbeat that follows the request is the answer to it
    let fake = FakeDiscord::start_with(Duration::from_secs(60)).await;
    let (_ch, sink, _state, running) = connected(config(&fake)).await;
    let before = fake.heartbeats();
    fake.request_heartbeat();
    fake.wait_until(Duration::from_secs(2), "an immediate heartbeat", |f| {
        f.heartbeats() > before
    })
    .await;
    fake.request_reconnect();
    fake.wait_until(WAIT, "the channel resumes", |f| f.resumes() == 1)
        .await;
    fake.dm("42", "alice", "after reconnect");
    until("the DM arrives", || sink.len() == 1).await;
    assert_eq!(fake.identifies(), 1);
    running.stop().await.unwrap();
}

#[tokio::test]
async fn a_rate_limit_holds_the_route_for_the_calls_behind_it() {
    let fake = FakeDiscord::start().await;
    let ch = channel_with(config(&fake));
    let chat = dm_chat("42");
    fake.rate_limit("POST /channels/dm-42/messages", 1, 1.0);
    let first = {
        let (ch, chat) = (ch.clone(), chat.clone());
        tokio::spawn(async move { ch.send(&chat, "first", &[]).await })
    };
    until("the first send refused", || {
        fake.calls("POST /channels/dm-42/messages").len() == 1
    })
    .await;
    let t0 = Instant::now();
    ch.send(&chat, "second", &[]).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(700),
        "{:?}",
        t0.elapsed()
    );
    first.await.unwrap().unwrap();
    assert_eq!(fake.calls("POST /channels/dm-42/messages").len(), 3);
    assert_eq!(fake.bot_messages("dm-42").len(), 2);
}

#[tokio::test]
async fn pending_edits_of_one_message_coalesce() {
    let fake = FakeDiscord::start().await;
    let mut cfg = config(&fake);
    cfg.edit_interval = Duration::from_millis(300);
    let ch = channel_with(cfg);
    let chat = dm_chat("42");
    let id = ch.send(&chat, "v0", &[]).await.unwrap();
    ch.edit(&chat, &id, "v1", &[]).await.unwrap();
    let texts: Vec<String> = (2..=6).map(|i| format!("v{i}")).collect();
    let results =
        futures::future::join_all(texts.iter().map(|t| ch.edit(&chat, &id, t, &[]))).await;
    for r in results {
        r.unwrap();
    }
    let m = &fake.bot_messages("dm-42")[0];
    assert_eq!(m.content, "v6", "the newest edit goes out");
    assert_eq!(m.edits, 2, "v1, then only the newest of the five");
}
