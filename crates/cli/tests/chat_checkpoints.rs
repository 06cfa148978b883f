#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! Checkpoints from a chat: the reply of a run that changed files ends with what changed,
//! `/diff` shows it (as a file when long), `/undo` asks with a button and puts the workspace
//! back. The real server, Slack's and Discord's fakes (their wire formats), the mock LLM.

mod common;

use common::chat::{Fake, World};
use switchboard_test_support::mock_llm::MockReply;

async fn diff_and_undo_from_the_chat(platform: &str) {
    let w = World::new(platform).await;
    std::fs::write(w.ws.path().join("notes.txt"), "old line\n").unwrap();
    let _server = w.server_with(&[("SWITCHBOARD_CHECKPOINTS", "true")]).await;
    let chat = w.dm_chat();
    w.llm.push(MockReply::tool_call(
        "c1",
        "create",
        serde_json::json!({"path": "notes.txt", "file_text": "new line\nsecond\n"}),
    ));
    w.llm.push(MockReply::text(&["Rewrote the notes."]));
    w.dm("rewrite my notes");
    w.wait(chat, "the reply with the change summary", |m| {
        m.text.contains("Rewrote the notes.")
            && m.text
                .contains("📝 1 file changed, +2 −1 (/diff shows them, /undo reverts them)")
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(w.ws.path().join("notes.txt")).unwrap(),
        "new line\nsecond\n"
    );

    // /diff: short, so as text.
    w.dm("/diff");
    let diff = w
        .wait(chat, "the diff", |m| m.text.starts_with("1 file changed"))
        .await;
    assert!(
        diff.text.contains("-old line\n+new line\n+second"),
        "{}",
        diff.text
    );

    // /undo asks first; Keep keeps.
    w.dm("/undo");
    let ask = w
        .wait(chat, "the undo question", |m| {
            m.text
                .starts_with("Undo the last run's changes (1 file changed, +2 −1)?")
                && m.buttons.len() == 2
        })
        .await;
    let keep = ask
        .buttons
        .iter()
        .find(|(t, _)| t == "Keep")
        .unwrap()
        .1
        .clone();
    let undo = ask
        .buttons
        .iter()
        .find(|(t, _)| t == "Undo")
        .unwrap()
        .1
        .clone();
    assert!(undo.len() <= 64, "fits Telegram's callback data: {undo}");
    if let Fake::Slack(f) = &w.fake {
        // Someone else in the workspace cannot answer it.
        f.press(chat, &ask.id, "U7", &undo);
    }
    w.press(chat, &ask.id, &keep);
    w.wait(chat, "kept", |m| {
        m.id == ask.id && m.text == "Kept the changes."
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(w.ws.path().join("notes.txt")).unwrap(),
        "new line\nsecond\n"
    );
    // The answered offer's other button does nothing any more: the offer is kept on the
    // server and answered once (its buttons used to carry the checkpoint and the requester,
    // and restored whenever pressed).
    w.press(chat, &ask.id, &undo);
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    assert_eq!(
        std::fs::read_to_string(w.ws.path().join("notes.txt")).unwrap(),
        "new line\nsecond\n"
    );

    // Undo undoes.
    w.dm("/undo");
    let ask = w
        .wait(chat, "the second undo question", |m| {
            m.text.starts_with("Undo the last run's changes") && m.id != ask.id
        })
        .await;
    let undo = ask
        .buttons
        .iter()
        .find(|(t, _)| t == "Undo")
        .unwrap()
        .1
        .clone();
    w.press(chat, &ask.id, &undo);
    w.wait(chat, "undone", |m| {
        m.id == ask.id && m.text.starts_with("↩️ Undone by") && m.buttons.is_empty()
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(w.ws.path().join("notes.txt")).unwrap(),
        "old line\n"
    );

    // A long diff goes as a file.
    let long: String = (0..400).map(|i| format!("line number {i}\n")).collect();
    w.llm.push(MockReply::tool_call(
        "c2",
        "create",
        serde_json::json!({"path": "long.txt", "file_text": long}),
    ));
    w.llm.push(MockReply::text(&["Wrote a long file."]));
    w.dm("write a long file");
    w.wait(chat, "the second reply", |m| {
        m.text.contains("Wrote a long file.") && m.text.contains("+400 −0")
    })
    .await;
    w.dm("/diff");
    let deadline = std::time::Instant::now() + common::chat::WAIT;
    loop {
        let ups = w.uploads();
        if let Some((_, name, bytes, caption)) = ups.iter().find(|u| u.1 == "changes.diff") {
            assert_eq!(name, "changes.diff");
            assert!(String::from_utf8_lossy(bytes).contains("+line number 399"));
            assert_eq!(caption.as_deref(), Some("1 file changed, +400 −0"));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no diff file; uploads {ups:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_diff_and_undo() {
    diff_and_undo_from_the_chat("slack").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_diff_and_undo() {
    diff_and_undo_from_the_chat("discord").await;
}
