//! The Mattermost channel end to end: the real server, a fake Mattermost speaking REST v4
//! and the WebSocket (posting button presses to the server's webhook as Mattermost does),
//! and the mock LLM. One scenario, in steps.

use std::time::Duration;

use crate::common::*;
use crate::until;
use serde_json::json;
use switchboard_test_support::fake_mattermost::{FakeMattermost, FakePost};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

/// Polls `f` until it gives something, or fails naming `what`.
/// The bot's post in `channel` (in thread `root`, if given) whose text contains `text`.
async fn bot_post(mm: &FakeMattermost, channel: &str, root: Option<&str>, text: &str) -> FakePost {
    until(&format!("a bot post with {text:?}"), || {
        mm.bot_posts(channel)
            .into_iter()
            .find(|p| p.message.contains(text) && root.is_none_or(|r| p.root_id == r))
    })
    .await
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mattermost_dms_threads_approvals_files_bursts_and_a_kill() {
    let mm = FakeMattermost::start().await;
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_s = ws.path().to_string_lossy().to_string();
    let alice = mm.user("alice");
    let mallory = mm.user("mallory");
    let bob = mm.user("bob");
    let allowed = format!("{alice},{bob}");
    let dm = mm.dm_channel(&alice);
    let town = mm.channel("town-square", &[&alice, &mallory]);
    let listen = format!("127.0.0.1:{}", free_port());
    let action_url = format!("http://{listen}/v1/gateway/channels/mattermost/webhook");
    let url = mm.url();
    let env = [
        ("SWITCHBOARD_LISTEN", listen.as_str()),
        ("SWITCHBOARD_MATTERMOST_URL", url.as_str()),
        ("SWITCHBOARD_MATTERMOST_TOKEN", FakeMattermost::TOKEN),
        ("SWITCHBOARD_MATTERMOST_ACTION_URL", action_url.as_str()),
        ("SWITCHBOARD_MATTERMOST_ALLOWED_USERS", allowed.as_str()),
        ("SWITCHBOARD_MATTERMOST_APPROVERS", alice.as_str()),
        // Under the server's 10 a second (step 7), with room for the network's jitter.
        ("SWITCHBOARD_MATTERMOST_RATE_PER_SECOND", "8"),
        ("SWITCHBOARD_DEFAULT_CWD", ws_s.as_str()),
    ];
    let out = channels_test(
        "mattermost",
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
    .await;
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success()
            && said.contains(&format!(
                "mattermost: ok — @switchboard (id {})",
                FakeMattermost::BOT_ID
            )),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = start(dir.path(), &llm.base_url(), &env).await;
    until("the WebSocket", || (mm.ws_connections() > 0).then_some(())).await;

    // A press whose context was not signed by the gateway is refused.
    let forged = json!({"user_id": alice, "user_name": "alice", "channel_id": dm,
        "post_id": "p0000000000000000000000099", "trigger_id": "x1",
        "context": {"data": "y:1", "chat": dm, "kind": "D", "root": "", "sig": "00"}});
    assert_eq!(mm.integration_request(&action_url, &forged).await, 401);

    // 1. A direct message: the reply streams by edits of one post, its final text exact.
    llm.push(MockReply::text_slow(
        &["First paragraph.\n\n", "Second paragraph.\n\n", "The end."],
        700,
    ));
    mm.post(&alice, &dm, None, "hello", &[]);
    let reply = bot_post(&mm, &dm, None, "The end.").await;
    assert_eq!(
        reply.message,
        "First paragraph.\n\nSecond paragraph.\n\nThe end."
    );
    assert!(reply.edits >= 1, "streamed by edits: {reply:?}");
    assert_eq!(mm.bot_posts(&dm).len(), 1);

    // 2. In a channel: a post without a mention is not for the bot; a mention starts a
    //    thread, and later posts in that thread need none.
    mm.post(&alice, &town, None, "lunch anyone?", &[]);
    llm.push(MockReply::text(&["Hi from the thread."]));
    let asked = mm.post(&alice, &town, None, "@switchboard are you there?", &[]);
    bot_post(&mm, &town, Some(&asked), "Hi from the thread.").await;
    llm.push(MockReply::text(&["Still in the thread."]));
    mm.post(
        &alice,
        &town,
        Some(&asked),
        "and now without a mention",
        &[],
    );
    bot_post(&mm, &town, Some(&asked), "Still in the thread.").await;
    let texts: Vec<String> = llm.requests().iter().map(|r| r.last_user_text()).collect();
    assert!(
        !texts.iter().any(|t| t.contains("lunch")),
        "a post without a mention reached the agent: {texts:?}"
    );
    assert!(texts.iter().any(|t| t.contains("are you there?")));

    // 3. A long reply is split under the 16,383 characters of a post, nothing lost.
    let long: String = (0..2600).map(|i| format!("word{i} ")).collect();
    llm.push(MockReply::text(&[long.as_str()]));
    let before = mm.bot_posts(&dm).len();
    mm.post(&alice, &dm, None, "say a lot", &[]);
    until("the long reply", || {
        mm.bot_posts(&dm)
            .iter()
            .any(|p| p.message.contains("word2599"))
            .then_some(())
    })
    .await;
    let parts: Vec<FakePost> = mm.bot_posts(&dm)[before..].to_vec();
    assert!(parts.len() >= 2, "{parts:#?}");
    assert!(parts.iter().all(|p| p.message.chars().count() <= 16_383));
    let joined = parts
        .iter()
        .map(|p| p.message.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        joined.split_whitespace().collect::<Vec<_>>(),
        long.split_whitespace().collect::<Vec<_>>()
    );

    // 4. An approval in the channel's thread, with buttons: Mallory's press is refused
    //    (and she is told), Alice's allows; the prompt loses its buttons.
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch allowed.txt"}),
    ));
    llm.push(MockReply::text(&["Ran it."]));
    mm.post(&alice, &town, Some(&asked), "make the file", &[]);
    let prompt = until("the prompt", || {
        mm.bot_posts(&town)
            .into_iter()
            .find(|p| !p.buttons().is_empty())
    })
    .await;
    assert_eq!(prompt.root_id, asked);
    assert!(prompt.message.contains("allowed.txt"), "{prompt:?}");
    assert_eq!(mm.press(&mallory, &prompt.id, "Allow").await, 200);
    bot_post(&mm, &town, Some(&asked), "@mallory:").await;
    assert!(!ws.path().join("allowed.txt").exists());
    assert_eq!(mm.press(&alice, &prompt.id, "Allow").await, 200);
    bot_post(&mm, &town, Some(&asked), "Ran it.").await;
    assert!(ws.path().join("allowed.txt").exists());
    let settled = until("the prompt settled", || {
        mm.bot_posts(&town)
            .into_iter()
            .find(|p| p.id == prompt.id && p.buttons().is_empty())
    })
    .await;
    assert!(settled.message.contains("alice"), "{settled:?}");

    // 5. Denied by a 👎 reaction on a prompt in the direct message.
    llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "touch denied.txt"}),
    ));
    llm.push(MockReply::text(&["Not touching it."]));
    mm.post(&alice, &dm, None, "another one", &[]);
    let prompt = until("the second prompt", || {
        mm.bot_posts(&dm)
            .into_iter()
            .find(|p| !p.buttons().is_empty() && p.message.contains("denied.txt"))
    })
    .await;
    mm.react(&alice, &prompt.id, "-1");
    bot_post(&mm, &dm, None, "Not touching it.").await;
    assert!(!ws.path().join("denied.txt").exists());

    // 6. A file each way; one call answered 429 is waited out.
    std::fs::write(ws.path().join("report.txt"), "all green\n").unwrap();
    llm.push(MockReply::tool_call(
        "c3",
        "send_file",
        json!({"path": "report.txt", "caption": "the report"}),
    ));
    llm.push(MockReply::text(&["Read it and sent the report."]));
    mm.throttle(1);
    mm.post(
        &alice,
        &dm,
        None,
        "read my notes",
        &[("notes.txt", "text/plain", b"the notes: 42\n")],
    );
    bot_post(&mm, &dm, None, "sent the report").await;
    let shared = mm
        .bot_posts(&dm)
        .into_iter()
        .find(|p| !p.file_ids.is_empty())
        .unwrap();
    assert_eq!(shared.message, "the report");
    assert_eq!(
        mm.file(&shared.file_ids[0]),
        Some(("report.txt".into(), b"all green\n".to_vec()))
    );
    assert_eq!(
        mm.limited(),
        1,
        "one call was answered 429, then went through"
    );
    let copies: Vec<_> = std::fs::read_dir(ws.path().join(".switchboard/inbox"))
        .unwrap_or_else(|e| panic!("{e}: {}", server.logs()))
        .flatten()
        .collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(std::fs::read(copies[0].path()).unwrap(), b"the notes: 42\n");

    // 7. A burst: twelve threads asked at once while the server limits the bot to 10
    //    calls a second (bursts of 10) and the bot keeps to 8: every one answered, no call
    //    refused.
    mm.rate_limit(10, 10);
    let calls_before = mm.calls().len();
    for _ in 0..12 {
        llm.push(MockReply::text(&["Burst answer."]));
    }
    let roots: Vec<String> = (0..12)
        .map(|i| mm.post(&alice, &town, None, &format!("@switchboard burst {i}"), &[]))
        .collect();
    until("every burst thread answered", || {
        let posts = mm.bot_posts(&town);
        roots
            .iter()
            .all(|r| {
                posts
                    .iter()
                    .any(|p| &p.root_id == r && p.message == "Burst answer.")
            })
            .then_some(())
    })
    .await;
    assert_eq!(mm.limited(), 1, "the burst stayed under the rate limit");
    // Without the outbox's pacing, twelve replies at once would overrun the burst of 10.
    let burst = mm.calls().len() - calls_before;
    assert!(burst >= 12, "{burst} calls");
    assert!(!server.logs().contains(FakeMattermost::TOKEN));

    // 8. kill -9 mid-reply; a message sent while the server is down is read after the
    //    restart — in a chat the bot knows, and in one it has never seen (Bob's first
    //    message): what was sent stays sent once, the interrupted run is said to have
    //    failed (once), each message is answered once.
    let mut server = server;
    llm.push(MockReply::text_slow(
        &["Part one.\n\n", "Part two.\n\n", "Part three."],
        1500,
    ));
    mm.post(&alice, &dm, None, "tell me slowly", &[]);
    bot_post(&mm, &dm, None, "Part one.").await;
    // (Not in the instant between the platform taking a message and the server recording
    // it: a crash there sends that message again, as with any platform without idempotent
    // sends; under load that instant grows.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill().await;
    mm.post(&alice, &dm, None, "are you still there?", &[]);
    let bob_dm = mm.dm_channel(&bob);
    mm.post(&bob, &bob_dm, None, "hi, I am new here", &[]);
    llm.push(MockReply::text(&["Still here."]));
    llm.push(MockReply::text(&["Still here."]));
    let _server = start(dir.path(), &llm.base_url(), &env).await;
    bot_post(&mm, &dm, None, "interrupted by restart").await;
    bot_post(&mm, &dm, None, "Still here.").await;
    bot_post(&mm, &bob_dm, None, "Still here.").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let posts = mm.bot_posts(&dm);
    for (text, times) in [
        ("Part one.", 1),
        ("interrupted by restart", 1),
        ("Still here.", 1),
    ] {
        assert_eq!(
            posts.iter().filter(|p| p.message.contains(text)).count(),
            times,
            "{text:?}: {posts:#?}"
        );
    }
    assert_eq!(mm.bot_posts(&bob_dm).len(), 1);
    for asked in [
        "tell me slowly",
        "are you still there?",
        "hi, I am new here",
    ] {
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
