//! The Signal channel end to end: the real server, a fake signal-cli daemon speaking its
//! JSON-RPC over HTTP and Server-Sent Events, and the mock LLM. One scenario, in steps.

use std::time::Duration;

use crate::common::*;
use crate::until;
use serde_json::json;
use switchboard_test_support::fake_signal::{FakeSignal, SignalSent, SignalUser};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

const GROUP: &str = "R3JvdXBJZDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDA=";

/// Polls `f` until it gives something, or fails naming `what`.
/// The bot's message to `to` whose text contains `text`.
async fn sent(sig: &FakeSignal, to: &str, text: &str) -> SignalSent {
    until(&format!("a message to {to} with {text:?}"), || {
        sig.sent_to(to).into_iter().find(|m| m.text.contains(text))
    })
    .await
}

fn user(i: u32, name: &str) -> SignalUser {
    SignalUser::new(
        &format!("+49151000000{i:02}"),
        &format!("a1b2c3d4-0000-4000-8000-0000000000{i:02}"),
        name,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_dms_groups_approvals_files_bursts_and_a_kill() {
    let sig = FakeSignal::start().await;
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = tempfile::tempdir().unwrap();
    let ws_s = ws.path().to_string_lossy().to_string();
    let alice = user(1, "Alice");
    let mallory = user(2, "Mallory");
    let crowd: Vec<SignalUser> = (10..18).map(|i| user(i, &format!("P{i}"))).collect();
    // Mallory may talk to the bot, but not answer approvals.
    let allowed = [alice.uuid.clone(), mallory.uuid.clone()]
        .into_iter()
        .chain(crowd.iter().map(|u| u.uuid.clone()))
        .collect::<Vec<_>>()
        .join(",");
    let url = sig.url();
    let env = [
        ("SWITCHBOARD_SIGNAL_URL", url.as_str()),
        ("SWITCHBOARD_SIGNAL_ACCOUNT", FakeSignal::ACCOUNT),
        ("SWITCHBOARD_SIGNAL_ALLOWED_USERS", allowed.as_str()),
        ("SWITCHBOARD_SIGNAL_APPROVERS", alice.uuid.as_str()),
        ("SWITCHBOARD_SIGNAL_EDIT_INTERVAL_MS", "300"),
        ("SWITCHBOARD_DEFAULT_CWD", ws_s.as_str()),
    ];
    let out = channels_test(
        "signal",
        env.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
    .await;
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success()
            && said.contains("signal: ok — +15550100199 (signal-cli 0.13.22, in 0 groups)"),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = start(dir.path(), &llm.base_url(), &env).await;
    until("receiving", || (sig.receives() > 0).then_some(())).await;

    // 1. A direct message: the reply streams by edits of one message, its final text
    //    exact, within Signal's ten edits.
    llm.push(MockReply::text_slow(
        &["First paragraph.\n\n", "Second paragraph.\n\n", "The end."],
        700,
    ));
    sig.dm(&alice, "hello");
    let reply = until("the whole reply", || {
        sig.sent_to(&alice.uuid)
            .into_iter()
            .find(|m| m.text.ends_with("The end."))
    })
    .await;
    assert_eq!(
        reply.text,
        "First paragraph.\n\nSecond paragraph.\n\nThe end."
    );
    assert!(
        !reply.edits.is_empty() && reply.edits.len() <= 10,
        "{reply:?}"
    );
    assert_eq!(sig.sent_to(&alice.uuid).len(), 1);

    // 2. A group: a message without a mention is not for the bot; a mention is.
    sig.group_message(&alice, GROUP, "lunch anyone?", false);
    llm.push(MockReply::text(&["Hello, group."]));
    sig.group_message(&alice, GROUP, "are you there?", true);
    sent(&sig, GROUP, "Hello, group.").await;
    let texts: Vec<String> = llm.requests().iter().map(|r| r.last_user_text()).collect();
    assert!(
        !texts.iter().any(|t| t.contains("lunch")),
        "a message without a mention reached the agent: {texts:?}"
    );

    // 3. A long reply is split under Signal's 2,000 characters, nothing lost.
    let long: String = (0..700).map(|i| format!("word{i} ")).collect();
    llm.push(MockReply::text(&[long.as_str()]));
    let before = sig.sent_to(&alice.uuid).len();
    sig.dm(&alice, "say a lot");
    until("the long reply", || {
        sig.sent_to(&alice.uuid)
            .iter()
            .any(|m| m.text.contains("word699"))
            .then_some(())
    })
    .await;
    let parts: Vec<SignalSent> = sig.sent_to(&alice.uuid)[before..].to_vec();
    assert!(parts.len() >= 3, "{parts:#?}");
    assert!(parts.iter().all(|m| m.text.chars().count() <= 2000));
    let joined = parts
        .iter()
        .map(|m| m.text.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(
        joined.split_whitespace().collect::<Vec<_>>(),
        long.split_whitespace().collect::<Vec<_>>()
    );

    // 4. An approval in the group: Mallory's 👍 is refused (and she is told), Alice's
    //    reply quoting the prompt allows.
    llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch allowed.txt"}),
    ));
    llm.push(MockReply::text(&["Ran it."]));
    sig.group_message(&alice, GROUP, "make the file", true);
    let prompt = sent(&sig, GROUP, "allowed.txt").await;
    sig.react(&mallory, Some(GROUP), prompt.timestamp, "👍");
    sent(&sig, GROUP, "Mallory:").await;
    assert!(!ws.path().join("allowed.txt").exists());
    sig.group_reply(&alice, GROUP, prompt.timestamp, "allow");
    sent(&sig, GROUP, "Ran it.").await;
    assert!(ws.path().join("allowed.txt").exists());

    // 5. Denied by a 👎 reaction on a prompt in the direct message.
    llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "touch denied.txt"}),
    ));
    llm.push(MockReply::text(&["Not touching it."]));
    sig.dm(&alice, "another one");
    let prompt = sent(&sig, &alice.uuid, "denied.txt").await;
    sig.react(&alice, None, prompt.timestamp, "👎");
    sent(&sig, &alice.uuid, "Not touching it.").await;
    assert!(!ws.path().join("denied.txt").exists());

    // 6. A file each way; one send answered "rate limited" is waited out.
    std::fs::write(ws.path().join("report.txt"), "all green\n").unwrap();
    llm.push(MockReply::tool_call(
        "c3",
        "send_file",
        json!({"path": "report.txt", "caption": "the report"}),
    ));
    llm.push(MockReply::text(&["Read it and sent the report."]));
    sig.throttle(1);
    sig.send_file(
        &alice,
        "notes.txt",
        "text/plain",
        b"the notes: 42\n",
        "read my notes",
    );
    sent(&sig, &alice.uuid, "sent the report").await;
    let shared = sig
        .sent_to(&alice.uuid)
        .into_iter()
        .find(|m| !m.attachments.is_empty())
        .unwrap();
    assert_eq!(shared.text, "the report");
    assert_eq!(
        shared.attachments,
        [("report.txt".to_string(), b"all green\n".to_vec())]
    );
    assert_eq!(
        sig.limited(),
        1,
        "one send was rate limited, then went through"
    );
    let copies: Vec<_> = std::fs::read_dir(ws.path().join(".switchboard/inbox"))
        .unwrap_or_else(|e| panic!("{e}: {}", server.logs()))
        .flatten()
        .collect();
    assert_eq!(copies.len(), 1);
    assert_eq!(std::fs::read(copies[0].path()).unwrap(), b"the notes: 42\n");

    // 7. A burst: eight people write at once while signal-cli allows 6 sends a second in
    //    bursts of 6 (the bot keeps to 5): every one answered, none refused.
    sig.rate_limit(6, 6);
    for _ in &crowd {
        llm.push(MockReply::text(&["Burst answer."]));
    }
    for u in &crowd {
        sig.dm(u, "burst");
    }
    until("every burst message answered", || {
        crowd
            .iter()
            .all(|u| {
                sig.sent_to(&u.uuid)
                    .iter()
                    .any(|m| m.text == "Burst answer.")
            })
            .then_some(())
    })
    .await;
    assert_eq!(sig.limited(), 1, "the burst stayed under the rate limit");

    // 8. kill -9 mid-reply; a message sent while the server is down waits (on Signal's
    //    servers, in manual receive mode) and is taken after the restart: what was sent
    //    stays sent once, the interrupted run is said to have failed (once), the message is
    //    answered once.
    let mut server = server;
    llm.push(MockReply::text_slow(
        &["Part one.\n\n", "Part two.\n\n", "Part three."],
        1500,
    ));
    sig.dm(&alice, "tell me slowly");
    sent(&sig, &alice.uuid, "Part one.").await;
    // (Not in the instant between the platform taking a message and the server recording
    // it: a crash there sends that message again, as with any platform without idempotent
    // sends; under load that instant grows.)
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill().await;
    // A receive call the killed server had under way runs out first (a message handed to
    // it would be lost with it: what signal-cli does too).
    sig.wait_not_receiving().await;
    sig.dm(&alice, "are you still there?");
    llm.push(MockReply::text(&["Still here."]));
    let _server = start(dir.path(), &llm.base_url(), &env).await;
    sent(&sig, &alice.uuid, "interrupted by restart").await;
    sent(&sig, &alice.uuid, "Still here.").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let all = sig.sent_to(&alice.uuid);
    for (text, times) in [
        ("Part one.", 1),
        ("interrupted by restart", 1),
        ("Still here.", 1),
    ] {
        assert_eq!(
            all.iter().filter(|m| m.text.contains(text)).count(),
            times,
            "{text:?}: {all:#?}"
        );
    }
    for asked in ["tell me slowly", "are you still there?", "hello"] {
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
