//! Restarts and kills: mid-approval, mid-queue, mid-reply (a standalone gateway), a poll
//! left open by a killed process.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_mid_approval_and_mid_queue_loses_and_doubles_nothing() {
    let w = World::new().await;
    let mut server = w.server(&[]).await;
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch x.txt"}),
    ));
    w.tg.dm(ALICE, "Alice", "first");
    let prompt = w
        .wait_message(ALICE, "a prompt", |m| prompt_of(m).is_some())
        .await;
    // Let the gateway record the prompt's message id (a kill between posting a prompt and
    // recording it leaves that one prompt's buttons live: pressing them is answered "no
    // longer pending"; see the notes).
    tokio::time::sleep(Duration::from_millis(1000)).await;
    server.kill().await;
    // Written while the server is down: Telegram keeps it until the next poll.
    w.tg.dm(ALICE, "Alice", "second, while you were away");
    w.llm
        .push(MockReply::text(&["Back, and on the second message."]));
    let _server = w.server(&[]).await;
    w.wait_message(ALICE, "the queued message answered", |m| {
        m.text.contains("Back, and on the second message.")
    })
    .await;
    // The prompt says it can no longer be answered; pressing it now does nothing harmful.
    let edited = w
        .messages(ALICE)
        .into_iter()
        .find(|m| m.message_id == prompt.message_id)
        .unwrap();
    assert!(edited.buttons.is_empty(), "{edited:?}");
    assert!(!w.ws.path().join("x.txt").exists());
    // Nothing was posted twice.
    let texts: Vec<String> = w.messages(ALICE).iter().map(|m| m.text.clone()).collect();
    let mut dedup = texts.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), texts.len(), "{texts:?}");
    assert_eq!(
        w.llm
            .chat_requests()
            .iter()
            .filter(|r| r.body.to_string().contains("second, while you were away"))
            .count(),
        1,
        "the queued message reached the agent once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_gateway_killed_mid_reply_resumes_without_losing_or_repeating_text() {
    let w = World::new().await;
    // The server without channels; the gateway as its own process against it.
    let server = start(w.dir.path(), &w.llm.base_url(), &[]).await;
    let gw_dir = tempfile::tempdir().unwrap();
    let base = w.tg.base_url();
    let gw_env: Vec<(&str, &str)> = vec![
        ("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN),
        ("SWITCHBOARD_TELEGRAM_BASE_URL", base.as_str()),
        ("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", "42"),
        ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
        ("SWITCHBOARD_CONFIG", "/dev/null"),
    ];
    let gateway = |url: String| {
        let dir = gw_dir.path().to_path_buf();
        let env = gw_env.clone();
        async move {
            ServerProcess::start_command(
                &bin(),
                &["gateway", "--server", &url, "--listen", "127.0.0.1:0"],
                &dir,
                TOKEN,
                &env,
                WAIT,
            )
            .await
            .unwrap()
        }
    };
    let mut gw = gateway(server.url.clone()).await;
    let paragraphs: Vec<String> = (0..12)
        .map(|i| format!("Paragraph number {i}.\n\n"))
        .collect();
    let chunks: Vec<&str> = paragraphs.iter().map(String::as_str).collect();
    w.llm.push(MockReply::text_slow(&chunks, 400));
    w.tg.dm(ALICE, "Alice", "tell me a lot");
    w.wait_message(ALICE, "the reply has started", |m| {
        m.text.contains("Paragraph number 2.")
    })
    .await;
    gw.kill().await;
    let _gw = gateway(server.url.clone()).await;
    w.wait_message(ALICE, "the reply has ended", |m| {
        m.text.contains("Paragraph number 11.")
    })
    .await;
    let all: String = w
        .messages(ALICE)
        .iter()
        .map(|m| m.text.clone())
        .collect::<Vec<_>>()
        .join("\n\n");
    for i in 0..12 {
        assert_eq!(
            all.matches(&format!("Paragraph number {i}.")).count(),
            1,
            "paragraph {i} exactly once in:\n{all}"
        );
    }
    assert_eq!(
        w.llm.chat_requests().len(),
        1,
        "the message reached the agent once"
    );
}

/// The independent check's sequence, twice over: `kill -9` while a prompt waits in a DM,
/// restart, a press of that prompt's Allow (answered: no longer pending), then a new
/// message a few seconds later — which must be taken and answered.
/// Telegram keeps a killed process's long poll open on its side for a while and answers
/// the restarted bot's polls 409 Conflict meanwhile. The restarted bot waits that out and
/// answers; it used to stop polling for good at the first 409, so nothing sent after the
/// restart got a reply, and nothing in the chat said why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_left_open_by_a_killed_process_delays_the_restarted_bot_but_does_not_stop_it() {
    let w = World::new().await;
    w.tg.abandoned_polls_linger(Duration::from_secs(3));
    let mut server = w.server(&[]).await;
    w.llm.push(MockReply::text(&["First answer."]));
    w.tg.dm(ALICE, "Alice", "hello");
    w.wait_message(ALICE, "the first answer", |m| {
        m.text.contains("First answer.")
    })
    .await;
    server.kill().await;
    let _server = w.server(&[]).await;
    w.llm.push(MockReply::text(&["Answer after the restart."]));
    w.tg.dm(ALICE, "Alice", "still there?");
    w.wait_message(ALICE, "the answer after the restart", |m| {
        m.text.contains("Answer after the restart.")
    })
    .await;
    assert!(
        w.tg.conflicts() > 0,
        "the restarted bot never met the poll the killed one left open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_a_press_on_the_old_prompt_then_a_new_message_is_answered() {
    let w = World::new().await;
    let mut server = w.server(&[]).await;
    for round in 0..2 {
        w.llm.push(MockReply::tool_call(
            &format!("k{round}"),
            "run_command",
            json!({"command": "touch never.txt"}),
        ));
        w.tg.dm(ALICE, "Alice", &format!("round {round}: do it"));
        let prompt = w
            .wait_message(ALICE, "a prompt", |m| {
                prompt_of(m).is_some() && !m.text.contains("no longer")
            })
            .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        server.kill().await;
        server = w.server(&[]).await;
        let (allow, _) = prompt_of(&prompt).unwrap();
        let press = w.tg.press(ALICE, prompt.message_id, ALICE, "Alice", &allow);
        w.tg.wait_until(WAIT, "the press answered", |tg| {
            tg.answered().contains(&press)
        })
        .await;
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let reply = format!("Answer after restart {round}.");
        w.llm.push(MockReply::text(&[reply.as_str()]));
        w.tg.dm(ALICE, "Alice", &format!("round {round}: anything new?"));
        w.wait_message(ALICE, "the answer after the restart", |m| {
            m.text.contains(&reply)
        })
        .await;
    }
    assert!(!w.ws.path().join("never.txt").exists());
}
