#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
#![recursion_limit = "256"] // matrix-sdk's sync future is deeply nested
//! The Matrix channel against a real homeserver (Synapse), end to end: the real server with
//! its gateway logged in as `@bot`, and Alice's own `matrix-sdk` client in an end-to-end
//! encrypted DM — what she sends is encrypted by her client and decrypted by the bot, and
//! what the bot answers is decrypted by hers. One homeserver for the whole binary: one
//! scenario, in steps.

mod common;

use std::time::{Duration, Instant};

use common::synapse::Synapse;
use common::*;
use matrix_sdk::Client;
use matrix_sdk::config::SyncSettings;
use matrix_sdk::deserialized_responses::TimelineEventKind;
use matrix_sdk::room::MessagesOptions;
use matrix_sdk::ruma::events::reaction::ReactionEventContent;
use matrix_sdk::ruma::events::relation::{Annotation, InReplyTo};
use matrix_sdk::ruma::events::room::message::{MessageType, Relation, RoomMessageEventContent};
use matrix_sdk::ruma::events::{
    AnySyncMessageLikeEvent, AnySyncTimelineEvent, SyncMessageLikeEvent,
};
use matrix_sdk::ruma::{OwnedEventId, UserId};
use serde_json::json;
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

const WAIT: Duration = Duration::from_secs(60);

/// One message of the bot as Alice's client shows it (its latest edit applied).
#[derive(Debug, Clone)]
struct Shown {
    id: OwnedEventId,
    body: String,
    html: Option<String>,
    /// Whether it came encrypted (and her client decrypted it).
    encrypted: bool,
    edits: usize,
    notice: bool,
    /// The thread it is in (its root).
    thread: Option<OwnedEventId>,
    /// For a file: its source and name.
    file: Option<(matrix_sdk::ruma::events::room::MediaSource, String)>,
}

/// The bot's messages in `room`, oldest first, as Alice's client decrypts them.
async fn shown(room: &matrix_sdk::Room, bot: &UserId) -> Vec<Shown> {
    let mut opts = MessagesOptions::backward();
    opts.limit = 100u32.into();
    let page = room.messages(opts).await.unwrap();
    let mut out: Vec<Shown> = Vec::new();
    for ev in page.chunk.iter().rev() {
        let encrypted = matches!(ev.kind, TimelineEventKind::Decrypted(_));
        let Ok(AnySyncTimelineEvent::MessageLike(AnySyncMessageLikeEvent::RoomMessage(
            SyncMessageLikeEvent::Original(m),
        ))) = ev.raw().deserialize()
        else {
            continue;
        };
        if m.sender != bot {
            continue;
        }
        let text = |t: &MessageType| match t {
            MessageType::Text(t) => (t.body.clone(), t.formatted.as_ref().map(|f| f.body.clone())),
            MessageType::Notice(n) => (n.body.clone(), None),
            other => (other.body().to_owned(), None),
        };
        if let Some(Relation::Replacement(r)) = &m.content.relates_to {
            if let Some(s) = out.iter_mut().find(|s| s.id == r.event_id) {
                (s.body, s.html) = text(&r.new_content.msgtype);
                s.edits += 1;
            }
            continue;
        }
        let (body, html) = text(&m.content.msgtype);
        let file = match &m.content.msgtype {
            MessageType::Image(i) => Some((i.source.clone(), i.filename().to_owned())),
            MessageType::File(f) => Some((f.source.clone(), f.filename().to_owned())),
            _ => None,
        };
        out.push(Shown {
            id: m.event_id.clone(),
            body,
            html,
            encrypted,
            edits: 0,
            notice: matches!(m.content.msgtype, MessageType::Notice(_)),
            thread: match &m.content.relates_to {
                Some(Relation::Thread(t)) => Some(t.event_id.clone()),
                _ => None,
            },
            file,
        });
    }
    out
}

async fn wait_shown(
    room: &matrix_sdk::Room,
    bot: &UserId,
    what: &str,
    f: impl Fn(&Shown) -> bool,
) -> Shown {
    let deadline = Instant::now() + WAIT;
    loop {
        let all = shown(room, bot).await;
        if let Some(s) = all.iter().find(|s| f(s)) {
            return s.clone();
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {all:#?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `user`'s membership of `room` as the homeserver has it (`join`, `invite`, `leave` …),
/// asked with `token` (of a member).
async fn membership(
    hs: &Synapse,
    token: &str,
    room: &matrix_sdk::ruma::RoomId,
    user: &str,
) -> String {
    let r = reqwest::Client::new()
        .get(format!(
            "{}/_matrix/client/v3/rooms/{room}/state/m.room.member/{user}",
            hs.url
        ))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    if !r.status().is_success() {
        return String::new();
    }
    let v: serde_json::Value = r.json().await.unwrap();
    v["membership"].as_str().unwrap_or_default().to_owned()
}

/// Waits until `user`'s membership of `room` is `want`.
async fn wait_membership(
    hs: &Synapse,
    token: &str,
    room: &matrix_sdk::ruma::RoomId,
    user: &str,
    want: &str,
) {
    let deadline = Instant::now() + WAIT;
    loop {
        let now = membership(hs, token, room, user).await;
        if now == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{user} in {room}: {now:?}, not {want:?}\n{}",
            hs.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `client` knows `user` joined `room` (so that what it encrypts reaches them).
async fn wait_member_known(room: &matrix_sdk::Room, user: &UserId) {
    let deadline = Instant::now() + WAIT;
    loop {
        room.sync_members().await.unwrap();
        let joined = room
            .members(matrix_sdk::RoomMemberships::JOIN)
            .await
            .unwrap();
        if joined.iter().any(|m| m.user_id() == user) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the client did not see {user} join"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A user's own client, logged in, syncing in the background.
async fn user_client(hs: &str, user: &str, password: &str, dir: &std::path::Path) -> Client {
    let c = Client::builder()
        .homeserver_url(hs)
        .sqlite_store(dir, None)
        .build()
        .await
        .unwrap();
    c.matrix_auth()
        .login_username(user, password)
        .initial_device_display_name("test client")
        .send()
        .await
        .unwrap();
    c.sync_once(SyncSettings::default()).await.unwrap();
    let syncing = c.clone();
    tokio::spawn(async move {
        if let Err(e) = syncing.sync(SyncSettings::default()).await {
            eprintln!("the test client's sync ended: {e}");
        }
    });
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encrypted_dm_streams_answers_approvals_files_and_survives_a_restart() {
    let hs = Synapse::start().await;
    let bot_id = hs.register("bot", "bot-password").await;
    let alice_id = hs.register("alice", "alice-password").await;
    let bot = UserId::parse(bot_id.as_str()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let alice_dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let ws_s = ws.path().to_string_lossy().to_string();
    let env = [
        ("SWITCHBOARD_MATRIX_HOMESERVER", hs.url.as_str()),
        ("SWITCHBOARD_MATRIX_USER", bot_id.as_str()),
        ("SWITCHBOARD_MATRIX_PASSWORD", "bot-password"),
        ("SWITCHBOARD_MATRIX_ALLOWED_USERS", alice_id.as_str()),
        ("SWITCHBOARD_DEFAULT_CWD", ws_s.as_str()),
    ];
    // `switchboard channels test matrix` logs in and says who the bot is, or why not
    // (without the password).
    let check = |password: &str| {
        channels_test(
            "matrix",
            vec![
                ("SWITCHBOARD_MATRIX_HOMESERVER".into(), hs.url.clone()),
                ("SWITCHBOARD_MATRIX_USER".into(), bot_id.clone()),
                ("SWITCHBOARD_MATRIX_PASSWORD".into(), password.into()),
            ],
        )
    };
    let ok = check("bot-password").await;
    let out = String::from_utf8_lossy(&ok.stdout).to_string();
    assert!(
        ok.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        out.contains("matrix: ok — @bot:localhost (device "),
        "{out}"
    );
    let bad = check("not-the-password").await;
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&bad.stdout),
        String::from_utf8_lossy(&bad.stderr)
    );
    assert!(!bad.status.success(), "{out}");
    assert!(
        out.contains("FAILED") && !out.contains("not-the-password"),
        "{out}"
    );

    // With an access token instead of a password: the token's own user and device.
    let login: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/_matrix/client/v3/login", hs.url))
        .json(&json!({
            "type": "m.login.password",
            "identifier": {"type": "m.id.user", "user": "bot"},
            "password": "bot-password",
            "device_id": "TOKENDEVICE",
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let by_token = channels_test(
        "matrix",
        vec![
            ("SWITCHBOARD_MATRIX_HOMESERVER".into(), hs.url.clone()),
            ("SWITCHBOARD_MATRIX_USER".into(), bot_id.clone()),
            (
                "SWITCHBOARD_MATRIX_ACCESS_TOKEN".into(),
                login["access_token"].as_str().unwrap().into(),
            ),
        ],
    )
    .await;
    let out = String::from_utf8_lossy(&by_token.stdout).to_string();
    assert!(
        by_token.status.success() && out.contains("@bot:localhost (device TOKENDEVICE)"),
        "{out}{}",
        String::from_utf8_lossy(&by_token.stderr)
    );

    let mut server = start(dir.path(), &llm.base_url(), &env).await;
    // The bot's session and stores are kept, the session file private.
    let session = dir.path().join("matrix/session.json");
    let deadline = Instant::now() + WAIT;
    while !session.exists() {
        assert!(
            Instant::now() < deadline,
            "no session stored: {}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&session).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(&session).unwrap();
        assert!(!server.logs().contains("bot-password"));
        assert!(text.contains("access_token"));
    }

    let alice = user_client(&hs.url, "alice", "alice-password", alice_dir.path()).await;
    let room = alice.create_dm(&bot).await.unwrap();
    assert!(room.latest_encryption_state().await.unwrap().is_encrypted());
    // The bot accepts an allowed user's invite (as the homeserver says), and Alice's
    // client learns of it (and of the bot's device keys) before she writes.
    let http = reqwest::Client::new();
    let token = alice.access_token().unwrap();
    wait_membership(&hs, &token, room.room_id(), &bot_id, "join").await;
    wait_member_known(&room, &bot).await;

    // 1. A reply streamed by edits, Markdown as HTML, encrypted both ways.
    llm.push(MockReply::text_slow(
        &["Hello **Alice**.", " Here is more", " and the end."],
        900,
    ));
    room.send(RoomMessageEventContent::text_plain("hi bot"))
        .await
        .unwrap();
    let reply = wait_shown(&room, &bot, "the whole reply", |s| {
        s.body.contains("the end.")
    })
    .await;
    assert!(reply.encrypted, "{reply:?}");
    assert!(reply.edits >= 1, "streamed by edits: {reply:?}");
    assert!(
        reply
            .html
            .as_deref()
            .unwrap_or("")
            .contains("<strong>Alice</strong>"),
        "{reply:?}"
    );
    assert_eq!(llm.requests()[0].last_user_text(), "hi bot");

    // 2. An approval answered by a reaction.
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch reacted.txt"}),
    ));
    llm.push(MockReply::text(&["Ran it."]));
    room.send(RoomMessageEventContent::text_plain("make the file"))
        .await
        .unwrap();
    let prompt = wait_shown(&room, &bot, "the prompt", |s| {
        s.body.contains("reacted.txt")
    })
    .await;
    assert!(prompt.body.contains("react with ✅"), "{prompt:?}");
    room.send(ReactionEventContent::new(Annotation::new(
        prompt.id.clone(),
        "✅".into(),
    )))
    .await
    .unwrap();
    wait_shown(&room, &bot, "the reply after ✅", |s| {
        s.body.contains("Ran it.")
    })
    .await;
    assert!(ws.path().join("reacted.txt").exists());
    let settled = wait_shown(&room, &bot, "the prompt says who allowed", |s| {
        s.id == prompt.id && s.body.contains("Allowed by alice")
    })
    .await;
    assert!(!settled.body.contains("To answer"), "{settled:?}");

    // 3. An approval answered by a reply, with a reason.
    llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "touch denied.txt"}),
    ));
    llm.push(MockReply::text(&["Not touching it."]));
    room.send(RoomMessageEventContent::text_plain("touch again"))
        .await
        .unwrap();
    let prompt = wait_shown(&room, &bot, "the second prompt", |s| {
        s.body.contains("denied.txt")
    })
    .await;
    let mut answer = RoomMessageEventContent::text_plain("deny, not today");
    answer.relates_to = Some(Relation::Reply(
        matrix_sdk::ruma::events::relation::Reply::new(InReplyTo::new(prompt.id.clone())),
    ));
    room.send(answer).await.unwrap();
    wait_shown(&room, &bot, "the reply after the denial", |s| {
        s.body.contains("Not touching it.")
    })
    .await;
    assert!(!ws.path().join("denied.txt").exists());
    assert!(
        llm.requests()
            .iter()
            .any(|r| r.body.to_string().contains("not today")),
        "the reason reaches the agent"
    );

    // 4. A file in (encrypted upload, decrypted by the bot) and one out.
    std::fs::write(ws.path().join("report.txt"), "all green\n").unwrap();
    llm.push(MockReply::tool_call(
        "c3",
        "send_file",
        json!({"path": "report.txt", "caption": "the report"}),
    ));
    llm.push(MockReply::text(&["Read it and sent the report."]));
    room.send_attachment(
        "notes.txt",
        &mime::TEXT_PLAIN,
        b"the notes: 42\n".to_vec(),
        matrix_sdk::attachment::AttachmentConfig::new().caption(Some(
            matrix_sdk::ruma::events::room::message::TextMessageEventContent::plain(
                "read my notes",
            ),
        )),
    )
    .await
    .unwrap();
    wait_shown(&room, &bot, "the reply about the file", |s| {
        s.body.contains("sent the report")
    })
    .await;
    let inbox = ws.path().join(".switchboard/inbox");
    let copies: Vec<_> = std::fs::read_dir(&inbox).unwrap().flatten().collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(std::fs::read(copies[0].path()).unwrap(), b"the notes: 42\n");
    let sent = wait_shown(&room, &bot, "the shared file", |s| s.file.is_some()).await;
    let (source, name) = sent.file.clone().unwrap();
    assert_eq!(name, "report.txt");
    assert!(
        matches!(
            source,
            matrix_sdk::ruma::events::room::MediaSource::Encrypted(_)
        ),
        "uploaded encrypted in an encrypted room"
    );
    let content = alice
        .media()
        .get_media_content(
            &matrix_sdk::media::MediaRequestParameters {
                source,
                format: matrix_sdk::media::MediaFormat::File,
            },
            false,
        )
        .await
        .unwrap();
    assert_eq!(content, b"all green\n");

    // 5. A message the bot cannot decrypt is answered in words.
    let r = http
        .put(format!(
            "{}/_matrix/client/v3/rooms/{}/send/m.room.encrypted/utd-1",
            hs.url,
            room.room_id()
        ))
        .bearer_auth(&token)
        .json(&json!({
            "algorithm": "m.megolm.v1.aes-sha2",
            "ciphertext": "AwgAEnACgAkLmt6qF84IK++J7UDH2Za1YVchHyprqTqsg",
            "device_id": "NOSUCHDEVICE",
            "sender_key": "aV9BpqYFqJpKYmgERyGv/6QyKMcgLqxM05V0gvzg9Yk",
            "session_id": "X3lUlvLELLYxeTx4yOVu6UDpasGEVO0Jbu+QFnm0cKQ",
        }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let notice = wait_shown(&room, &bot, "the undecryptable notice", |s| {
        s.body.contains("could not decrypt")
    })
    .await;
    assert!(
        notice.notice,
        "sent as a notice (bots do not answer notices)"
    );

    // 6. A restart: what came while the bot was down is answered once, nothing before is
    // answered again.
    server.kill().await;
    let before = shown(&room, &bot).await.len();
    llm.push(MockReply::text(&["Back again."]));
    room.send(RoomMessageEventContent::text_plain("are you there?"))
        .await
        .unwrap();
    let server = start(dir.path(), &llm.base_url(), &env).await;
    wait_shown(&room, &bot, "the answer after the restart", |s| {
        s.body.contains("Back again.")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = shown(&room, &bot).await;
    assert_eq!(
        after.len(),
        before + 1,
        "only the new message was answered: {after:#?}\n{}",
        server.logs()
    );
    assert_eq!(
        llm.requests().last().unwrap().last_user_text(),
        "are you there?"
    );

    // 6b. kill -9 mid-reply: after the restart the interrupted run is said to have failed,
    // once; nothing is posted twice and the message reached the agent once.
    let mut server = server;
    llm.push(MockReply::text_slow(
        &["Part one.", " Part two.", " Part three.", " Part four."],
        1500,
    ));
    room.send(RoomMessageEventContent::text_plain("tell me slowly"))
        .await
        .unwrap();
    wait_shown(&room, &bot, "the reply has started", |s| {
        s.body.contains("Part one.")
    })
    .await;
    server.kill().await;
    let mut server = start(dir.path(), &llm.base_url(), &env).await;
    wait_shown(&room, &bot, "the interrupted run told", |s| {
        s.body.contains("interrupted")
    })
    .await;
    // 6c. kill -9 mid-approval: the prompt is closed after the restart (the call rejected,
    // failing closed), a ✅ on it then runs nothing, and the next message is answered once.
    llm.push(MockReply::tool_call(
        "c9",
        "run_command",
        json!({"command": "touch never.txt"}),
    ));
    room.send(RoomMessageEventContent::text_plain("one more file"))
        .await
        .unwrap();
    let prompt = wait_shown(&room, &bot, "the prompt before the kill", |s| {
        s.body.contains("never.txt")
    })
    .await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    server.kill().await;
    let server = start(dir.path(), &llm.base_url(), &env).await;
    wait_shown(&room, &bot, "the prompt closed", |s| {
        s.id == prompt.id && s.edits > 0
    })
    .await;
    room.send(ReactionEventContent::new(Annotation::new(
        prompt.id.clone(),
        "✅".into(),
    )))
    .await
    .unwrap();
    llm.push(MockReply::text(&["Still here."]));
    room.send(RoomMessageEventContent::text_plain("and now?"))
        .await
        .unwrap();
    wait_shown(&room, &bot, "the answer after the second restart", |s| {
        s.body.contains("Still here.")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!ws.path().join("never.txt").exists());
    let all = shown(&room, &bot).await;
    for (text, times) in [
        ("Part one.", 1),
        ("never.txt", 1),
        ("Still here.", 1),
        // One notice per interrupted run (the reply's, the approval's).
        ("The run failed: interrupted by restart", 2),
    ] {
        assert_eq!(
            all.iter().filter(|s| s.body.contains(text)).count(),
            times,
            "{text:?} {times} time(s): {all:#?}\n{}",
            server.logs()
        );
    }
    let closed = all.iter().find(|s| s.id == prompt.id).unwrap();
    assert!(
        closed.body.ends_with("❌ Rejected: interrupted by restart"),
        "{closed:?}"
    );
    for asked in ["tell me slowly", "one more file", "and now?"] {
        assert_eq!(
            llm.requests()
                .iter()
                .filter(|r| r.last_user_text() == asked)
                .count(),
            1,
            "{asked:?} reached the agent once"
        );
    }

    // 7. A room of three: a message is answered only when it mentions the bot; a thread is
    // a conversation of its own, answered in the thread.
    let carol_id = hs.register("carol", "carol-password").await;
    let carol_dir = tempfile::tempdir().unwrap();
    let carol = user_client(&hs.url, "carol", "carol-password", carol_dir.path()).await;
    let mut req = matrix_sdk::ruma::api::client::room::create_room::v3::Request::new();
    req.invite = vec![bot.clone(), UserId::parse(carol_id.as_str()).unwrap()];
    req.name = Some("team".into());
    let group = alice.create_room(req).await.unwrap();
    carol.join_room_by_id(group.room_id()).await.unwrap();
    wait_membership(&hs, &token, group.room_id(), &bot_id, "join").await;
    wait_member_known(&group, &bot).await;
    let requests = llm.requests().len();
    let chatting = group
        .send(RoomMessageEventContent::text_plain(
            "just chatting among us",
        ))
        .await
        .unwrap()
        .response
        .event_id;
    llm.push(MockReply::text(&["Four."]));
    group
        .send(RoomMessageEventContent::text_plain(format!(
            "{bot_id} what is 2+2?"
        )))
        .await
        .unwrap();
    wait_shown(&group, &bot, "the answer to the mention", |s| {
        s.body == "Four."
    })
    .await;
    assert_eq!(llm.requests().len(), requests + 1);
    let asked = llm.requests().last().unwrap().last_user_text();
    assert!(
        asked.contains("what is 2+2?") && !asked.contains(bot_id.as_str()),
        "{asked}"
    );
    assert!(!asked.contains("just chatting"), "{asked}");
    llm.push(MockReply::text(&["In the thread."]));
    let mut in_thread = RoomMessageEventContent::text_plain(format!("{bot_id} answer here please"));
    in_thread.relates_to = Some(Relation::Thread(
        matrix_sdk::ruma::events::relation::Thread::plain(chatting.clone(), chatting.clone()),
    ));
    group.send(in_thread).await.unwrap();
    let threaded = wait_shown(&group, &bot, "the answer in the thread", |s| {
        s.body == "In the thread."
    })
    .await;
    assert_eq!(threaded.thread.as_ref(), Some(&chatting), "{threaded:?}");

    // 8. Someone not allowed: an invite to their room is declined; their DM is joined and
    // answered with a pairing code, and nothing reaches the agent.
    hs.register("mallory", "mallory-password").await;
    let mallory_dir = tempfile::tempdir().unwrap();
    let mallory = user_client(&hs.url, "mallory", "mallory-password", mallory_dir.path()).await;
    let mallory_token = mallory.access_token().unwrap();
    let mut req = matrix_sdk::ruma::api::client::room::create_room::v3::Request::new();
    req.invite = vec![bot.clone()];
    let lair = mallory.create_room(req).await.unwrap();
    wait_membership(&hs, &mallory_token, lair.room_id(), &bot_id, "leave").await;
    let requests = llm.requests().len();
    let dm = mallory.create_dm(&bot).await.unwrap();
    wait_membership(&hs, &mallory_token, dm.room_id(), &bot_id, "join").await;
    wait_member_known(&dm, &bot).await;
    dm.send(RoomMessageEventContent::text_plain("let me in"))
        .await
        .unwrap();
    wait_shown(&dm, &bot, "a pairing code", |s| {
        s.body.contains("does not know you yet")
    })
    .await;
    assert_eq!(llm.requests().len(), requests);
    drop(hs);
}
