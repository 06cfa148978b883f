//! The Microsoft Teams channel end to end: the real server, a fake Bot Framework (OpenID
//! metadata and keys, the token endpoint, the Connector API, signed activities posted to
//! the server's messaging endpoint), and the mock LLM. One scenario, in steps.

use std::time::Duration;

use crate::common::*;
use crate::until;
use serde_json::json;
use switchboard_test_support::fake_teams::{FakeTeams, TeamsActivity, TeamsUser};
use switchboard_test_support::mock_llm::{MockLlm, MockReply, MockToolCall};

const PERSONAL: &str = "a:1personal-chat-with-alice";
const GROUP: &str = "19:groupchat0001@thread.v2";
const THREAD: &str = "19:channel0001@thread.tacv2;messageid=1699999999999";

/// A 1×1 PNG.
const PNG: &[u8] = &[
    0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x48, 0x44, 0x52,
    0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x01, 0x08, 0x06, 0x00, 0x00, 0x00, 0x1f, 0x15, 0xc4,
    0x89, 0x00, 0x00, 0x00, 0x0d, 0x49, 0x44, 0x41, 0x54, 0x78, 0x9c, 0x63, 0xf8, 0xcf, 0xc0, 0xf0,
    0x1f, 0x00, 0x05, 0x00, 0x01, 0xff, 0x89, 0x99, 0x3d, 0x1d, 0x00, 0x00, 0x00, 0x00, 0x49, 0x45,
    0x4e, 0x44, 0xae, 0x42, 0x60, 0x82,
];

/// Polls `f` until it gives something, or fails naming `what`.
/// The bot's activity in `conv` whose text (or card text) contains `text`.
async fn sent(t: &FakeTeams, conv: &str, text: &str) -> TeamsActivity {
    until(&format!("an activity in {conv} with {text:?}"), || {
        t.activities(conv).into_iter().find(|a| {
            a.text.contains(text) || a.card_text.as_deref().is_some_and(|c| c.contains(text))
        })
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teams_chats_threads_cards_files_and_a_kill() {
    let t = FakeTeams::start().await;
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_s = ws.path().to_string_lossy().to_string();
    let alice = TeamsUser::new(1, "Alice");
    let mallory = TeamsUser::new(2, "Mallory");
    let allowed = format!("{},{}", alice.aad, mallory.aad);
    let (openid, token_url) = (t.openid_url(), t.token_url());
    let env = [
        ("SWITCHBOARD_TEAMS_APP_ID", FakeTeams::APP_ID),
        ("SWITCHBOARD_TEAMS_APP_PASSWORD", FakeTeams::APP_PASSWORD),
        ("SWITCHBOARD_TEAMS_TOKEN_URL", token_url.as_str()),
        ("SWITCHBOARD_TEAMS_OPENID_URL", openid.as_str()),
        ("SWITCHBOARD_TEAMS_ALLOWED_USERS", allowed.as_str()),
        ("SWITCHBOARD_TEAMS_APPROVERS", alice.aad.as_str()),
        ("SWITCHBOARD_TEAMS_EDIT_INTERVAL_MS", "300"),
        ("SWITCHBOARD_DEFAULT_CWD", ws_s.as_str()),
    ];
    let out = channels_test(
        "teams",
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
    .await;
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success()
            && said.contains(&format!(
                "teams: ok — app {} (token issued)",
                FakeTeams::APP_ID
            )),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = start(dir.path(), &llm.base_url(), &env).await;
    t.set_webhook(&format!("{}/v1/gateway/channels/teams/webhook", server.url));

    // Activities whose token is for another bot, or for another service URL, are refused.
    let forged = json!({"type": "message", "id": "1", "text": "rm -rf",
        "from": {"id": alice.id, "name": "Alice", "aadObjectId": alice.aad},
        "conversation": {"id": PERSONAL, "conversationType": "personal"}});
    assert_eq!(t.push_forged(forged.clone(), true).await, 401);
    assert_eq!(t.push_forged(forged.clone(), false).await, 401);
    // And a well-signed activity from another channel (Direct Line names its own sender).
    assert_eq!(t.push_from_channel(forged, "directline").await, 401);

    // 1. A personal chat: the reply streams by updates of one activity, its text exact.
    llm.push(MockReply::text_slow(
        &["First paragraph.\n\n", "Second paragraph.\n\n", "The end."],
        700,
    ));
    assert_eq!(t.personal(&alice, PERSONAL, "hello").await.0, 200);
    let reply = until("the whole reply", || {
        t.activities(PERSONAL)
            .into_iter()
            .find(|a| a.text.ends_with("The end."))
    })
    .await;
    assert_eq!(
        reply.text,
        "First paragraph.\n\nSecond paragraph.\n\nThe end."
    );
    assert!(reply.edits >= 1, "{reply:?}");
    assert_eq!(t.activities(PERSONAL).len(), 1);
    assert_eq!(
        llm.requests().len(),
        1,
        "the forged activities reached nobody"
    );

    // 2. A group chat and a channel thread, each mentioning the bot.
    llm.push(MockReply::text(&["Hello, group."]));
    t.mention(&alice, GROUP, "groupChat", "are you there?")
        .await;
    sent(&t, GROUP, "Hello, group.").await;
    llm.push(MockReply::text(&["Hello, thread."]));
    t.mention(&alice, THREAD, "channel", "and here?").await;
    sent(&t, THREAD, "Hello, thread.").await;
    assert!(
        llm.requests()
            .iter()
            .any(|r| r.last_user_text() == "and here?"),
        "the mention is cut from the text"
    );

    // 3. A long reply is split under 7,000 characters (Teams' 28 KB), nothing lost.
    let long: String = (0..4200).map(|i| format!("word{i} ")).collect();
    llm.push(MockReply::text(&[long.as_str()]));
    let before = t.activities(PERSONAL).len();
    t.personal(&alice, PERSONAL, "say a lot").await;
    until("the long reply", || {
        t.activities(PERSONAL)
            .iter()
            .any(|a| a.text.contains("word4199"))
            .then_some(())
    })
    .await;
    let parts: Vec<TeamsActivity> = t.activities(PERSONAL)[before..].to_vec();
    assert!(parts.len() >= 2, "{parts:#?}");
    assert!(parts.iter().all(|a| a.text.chars().count() <= 7_000));
    let joined = parts
        .iter()
        .map(|a| a.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        joined.split_whitespace().collect::<Vec<_>>(),
        long.split_whitespace().collect::<Vec<_>>()
    );

    // 4. An approval card in the channel thread: Mallory's submit is refused (and she is
    //    told), Alice's allows; the card loses its buttons.
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch allowed.txt"}),
    ));
    llm.push(MockReply::text(&["Ran it."]));
    t.mention(&alice, THREAD, "channel", "make the file").await;
    let card = until("the approval card", || {
        t.activities(THREAD)
            .into_iter()
            .find(|a| !a.actions.is_empty())
    })
    .await;
    assert!(card.card_text.as_deref().unwrap().contains("allowed.txt"));
    let allow = card
        .actions
        .iter()
        .find(|(title, _)| title.starts_with("Allow"))
        .unwrap()
        .1
        .clone();
    assert_eq!(
        t.submit(&mallory, THREAD, "channel", &card.id, &allow)
            .await,
        200
    );
    sent(&t, THREAD, "Mallory:").await;
    assert!(!ws.path().join("allowed.txt").exists());
    t.submit(&alice, THREAD, "channel", &card.id, &allow).await;
    sent(&t, THREAD, "Ran it.").await;
    assert!(ws.path().join("allowed.txt").exists());
    let settled = until("the card settled", || {
        t.activities(THREAD)
            .into_iter()
            .find(|a| a.id == card.id && a.actions.is_empty())
    })
    .await;
    assert!(settled.text.contains("Alice"), "{settled:?}");

    // 5. Denied with the card's Deny in the personal chat.
    llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "touch denied.txt"}),
    ));
    llm.push(MockReply::text(&["Not touching it."]));
    t.personal(&alice, PERSONAL, "another one").await;
    let card = until("the second card", || {
        t.activities(PERSONAL).into_iter().find(|a| {
            a.card_text
                .as_deref()
                .is_some_and(|c| c.contains("denied.txt"))
        })
    })
    .await;
    let deny = card
        .actions
        .iter()
        .find(|(title, _)| title.starts_with("Deny"))
        .unwrap()
        .1
        .clone();
    t.submit(&alice, PERSONAL, "personal", &card.id, &deny)
        .await;
    sent(&t, PERSONAL, "Not touching it.").await;
    assert!(!ws.path().join("denied.txt").exists());

    // 6. A file each way: a shared file reaches the agent; the agent's file goes by a
    //    consent card, uploaded once accepted; one send answered 429 is waited out.
    std::fs::write(ws.path().join("report.txt"), "all green\n").unwrap();
    llm.push(MockReply::tool_call(
        "c3",
        "send_file",
        json!({"path": "report.txt", "caption": "the report"}),
    ));
    llm.push(MockReply::text(&["Read it and sent the report."]));
    t.throttle(1);
    t.personal_file(
        &alice,
        PERSONAL,
        "notes.txt",
        b"the notes: 42\n",
        "read my notes",
    )
    .await;
    sent(&t, PERSONAL, "sent the report").await;
    let consent = t
        .activities(PERSONAL)
        .into_iter()
        .find(|a| {
            a.attachments.first().is_some_and(|c| {
                c["contentType"] == "application/vnd.microsoft.teams.card.file.consent"
            })
        })
        .unwrap();
    assert_eq!(consent.attachments[0]["name"], "report.txt");
    let (status, upload) = t.consent(&alice, PERSONAL, &consent, true).await;
    assert_eq!(status, 200);
    // Uploaded after the invoke was answered.
    let uploaded = until("the upload", || t.uploaded(&upload)).await;
    assert_eq!(uploaded, b"all green\n".to_vec());
    until("the file card", || {
        t.activities(PERSONAL).into_iter().find(|a| {
            a.attachments.first().is_some_and(|c| {
                c["contentType"] == "application/vnd.microsoft.teams.card.file.info"
            })
        })
    })
    .await;
    assert_eq!(
        t.limited(),
        1,
        "one send was answered 429, then went through"
    );
    let copies: Vec<_> = std::fs::read_dir(ws.path().join(".switchboard/inbox"))
        .unwrap_or_else(|e| panic!("{e}: {}", server.logs()))
        .flatten()
        .collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(std::fs::read(copies[0].path()).unwrap(), b"the notes: 42\n");

    // 7. A burst in one thread: nine images at once (inline in a group chat) are kept
    //    under Teams' per-thread limits (7 in a second, 8 in two) — none refused.
    let calls: Vec<MockToolCall> = (0..9)
        .map(|i| {
            std::fs::write(ws.path().join(format!("p{i}.png")), PNG).unwrap();
            MockToolCall {
                id: format!("img{i}"),
                name: "send_file".into(),
                arguments: json!({"path": format!("p{i}.png")}),
            }
        })
        .collect();
    llm.push(MockReply::tool_calls(calls));
    llm.push(MockReply::text(&["Nine pictures."]));
    t.mention(&alice, GROUP, "groupChat", "pictures please")
        .await;
    sent(&t, GROUP, "Nine pictures.").await;
    let images = t
        .activities(GROUP)
        .iter()
        .filter(|a| {
            a.attachments
                .first()
                .is_some_and(|c| c["contentType"] == "image/png")
        })
        .count();
    assert_eq!(images, 9);
    assert_eq!(
        t.limited(),
        1,
        "the burst stayed under the per-thread limit"
    );
    assert!(!server.logs().contains(FakeTeams::APP_PASSWORD));
    assert!(!server.logs().contains(FakeTeams::BOT_TOKEN));

    // 8. kill -9 mid-reply: what was sent stays sent once, the interrupted run is said to
    //    have failed (once), and the next message is answered once.
    let mut server = server;
    llm.push(MockReply::text_slow(
        &["Part one.\n\n", "Part two.\n\n", "Part three."],
        1500,
    ));
    t.personal(&alice, PERSONAL, "tell me slowly").await;
    sent(&t, PERSONAL, "Part one.").await;
    // (Not in the instant between the platform taking a message and the server recording
    // it: a crash there sends that message again, as with any platform without idempotent
    // sends; under load that instant grows.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill().await;
    let server = start(dir.path(), &llm.base_url(), &env).await;
    t.set_webhook(&format!("{}/v1/gateway/channels/teams/webhook", server.url));
    sent(&t, PERSONAL, "interrupted by restart").await;
    llm.push(MockReply::text(&["Still here."]));
    t.personal(&alice, PERSONAL, "and now?").await;
    sent(&t, PERSONAL, "Still here.").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = t.activities(PERSONAL);
    for (text, times) in [
        ("Part one.", 1),
        ("interrupted by restart", 1),
        ("Still here.", 1),
    ] {
        assert_eq!(
            all.iter().filter(|a| a.text.contains(text)).count(),
            times,
            "{text:?}: {all:#?}"
        );
    }
    for asked in ["tell me slowly", "and now?"] {
        assert_eq!(
            llm.requests()
                .iter()
                .filter(|r| r.last_user_text() == asked)
                .count(),
            1,
            "{asked:?} reached the agent once"
        );
    }
}
