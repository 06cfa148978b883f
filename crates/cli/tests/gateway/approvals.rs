//! Approvals in chats: buttons, allow-lists, approval modes, group approvers, a new message
//! settling a prompt, answers in words and by reaction.

use super::webhooks::{Hooked, SECRET};
use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_is_approved_or_denied_with_buttons() {
    let w = World::new().await;
    let _server = w.server(&[]).await;
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "echo approved > proof.txt"}),
    ));
    w.llm.push(MockReply::text(&["It ran."]));
    w.tg.dm(ALICE, "Alice", "make proof");
    let prompt = w
        .wait_message(ALICE, "an approval prompt", |m| prompt_of(m).is_some())
        .await;
    assert!(
        prompt.text.contains("echo approved > proof.txt"),
        "{}",
        prompt.text
    );
    let (allow, _) = prompt_of(&prompt).unwrap();
    assert!(allow.len() <= 64);
    // A stranger cannot answer in Alice's DM.
    let stranger = w.tg.press(ALICE, prompt.message_id, 99, "Mallory", &allow);
    w.tg.wait_until(WAIT, "the stranger's press answered", |tg| {
        tg.answered().contains(&stranger)
    })
    .await;
    // Told privately, as an alert only the presser sees.
    let answer =
        w.tg.calls("answerCallbackQuery")
            .into_iter()
            .find(|c| c["callback_query_id"] == stranger.as_str())
            .unwrap();
    assert_eq!(answer["text"], switchboard_gateway::NOT_AN_APPROVER);
    assert_eq!(answer["show_alert"], true);
    assert!(!w.ws.path().join("proof.txt").exists());
    let press = w.tg.press(ALICE, prompt.message_id, ALICE, "Alice", &allow);
    w.wait_message(ALICE, "the final reply", |m| m.text.contains("It ran."))
        .await;
    assert!(w.tg.answered().contains(&press));
    assert!(w.ws.path().join("proof.txt").exists());
    w.wait_message(ALICE, "the prompt says who allowed", |m| {
        m.message_id == prompt.message_id
            && m.text.contains("Allowed by Alice")
            && m.buttons.is_empty()
    })
    .await;

    // Deny.
    w.llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "touch denied.txt"}),
    ));
    w.llm.push(MockReply::text(&["Fine, I won't."]));
    w.tg.dm(ALICE, "Alice", "touch it");
    let prompt = w
        .wait_message(ALICE, "a second prompt", |m| {
            prompt_of(m).is_some() && m.text.contains("denied.txt")
        })
        .await;
    let (_, deny) = prompt_of(&prompt).unwrap();
    w.tg.press(ALICE, prompt.message_id, ALICE, "Alice", &deny);
    w.wait_message(ALICE, "the reply after deny", |m| {
        m.text.contains("Fine, I won't.")
    })
    .await;
    assert!(!w.ws.path().join("denied.txt").exists());
    w.wait_message(ALICE, "the prompt says who denied", |m| {
        m.message_id == prompt.message_id
            && m.text.contains("Denied by Alice")
            && m.buttons.is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allowlisted_calls_run_without_a_prompt() {
    // (How a prompt counts the calls the allowlist accepted is unit-tested in `preview`:
    // with the built-in agent only `run_command` ever waits, so a step cannot mix.)
    let w = World::new().await;
    let _server = w
        .server(&[("SWITCHBOARD_GATEWAY_ALLOWLIST", "run_command")])
        .await;
    w.llm.push(MockReply::tool_call(
        "r1",
        "run_command",
        json!({"command": "touch allowed.txt"}),
    ));
    w.llm.push(MockReply::text(&["Ran it."]));
    w.tg.dm(ALICE, "Alice", "run");
    w.wait_message(ALICE, "the reply", |m| m.text.contains("Ran it."))
        .await;
    assert!(w.ws.path().join("allowed.txt").exists());
    assert!(
        w.messages(ALICE).iter().all(|m| prompt_of(m).is_none()),
        "no prompt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_all_rejects_without_asking() {
    let w = World::new().await;
    let _server = w
        .server(&[("SWITCHBOARD_GATEWAY_APPROVAL_MODE", "deny_all")])
        .await;
    w.llm.push(MockReply::tool_call(
        "r1",
        "run_command",
        json!({"command": "touch nope.txt"}),
    ));
    w.llm.push(MockReply::text(&["Not allowed, then."]));
    w.tg.dm(ALICE, "Alice", "run");
    w.wait_message(ALICE, "the reply", |m| {
        m.text.contains("Not allowed, then.")
    })
    .await;
    assert!(!w.ws.path().join("nope.txt").exists());
    assert!(
        w.messages(ALICE).iter().all(|m| prompt_of(m).is_none()),
        "no prompt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_rejects_the_pending_approval_and_goes_next() {
    new_message_rejects_the_pending_approval(None).await;
}

/// The message arrives while the prompt is posted but its id not yet known to the gateway
/// (Telegram slow to answer): the prompt still ends with the rejection's note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_message_while_the_prompt_is_being_posted_still_settles_it() {
    new_message_rejects_the_pending_approval(Some(Duration::from_millis(1500))).await;
}

async fn new_message_rejects_the_pending_approval(slow_prompt: Option<Duration>) {
    let w = World::new().await;
    let server = w.server(&[]).await;
    if let Some(delay) = slow_prompt {
        // The first message the bot sends in this test is the prompt.
        w.tg.slow_answers("sendMessage", 1, delay);
    }
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch never.txt"}),
    ));
    w.llm.push(MockReply::text(&["OK, skipped."]));
    w.llm.push(MockReply::text(&["Doing the new thing."]));
    w.tg.dm(ALICE, "Alice", "do the thing");
    let prompt = w
        .wait_message(ALICE, "a prompt", |m| prompt_of(m).is_some())
        .await;
    w.tg.dm(ALICE, "Alice", "never mind, do this instead");
    w.wait_message(ALICE, "the reply to the new message", |m| {
        m.text.contains("Doing the new thing.")
    })
    .await;
    let edited = w
        .messages(ALICE)
        .into_iter()
        .find(|m| m.message_id == prompt.message_id)
        .unwrap();
    assert!(
        edited.text.contains("new message received"),
        "{}",
        edited.text
    );
    assert!(edited.buttons.is_empty());
    assert!(!w.ws.path().join("never.txt").exists());
    assert!(
        w.messages(ALICE)
            .iter()
            .any(|m| m.text.contains("OK, skipped."))
    );
    assert_eq!(w.user_text(2), "never mind, do this instead");
    // The session's log says why, typed: the approval yielded to a new message.
    let c = client(&server);
    let id = c.list_sessions(None, None).await.unwrap().sessions[0].id;
    let mut events = c.subscribe(id, None);
    let cause = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let e = events.next().await.unwrap().unwrap();
            if let switchboard_protocol::AgentEvent::ToolRejected { cause, .. } = e.event {
                return cause;
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(cause, switchboard_protocol::RejectionCause::NewMessage);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_approvers_stop_allow_all_allowed_users_and_config_errors() {
    let w = World::new().await;
    let config = w.dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        "[channels.telegram]\napprovers = [\"5\"]\nallowed_users = [\"77\"]\n",
    )
    .unwrap();
    let config_s = config.to_string_lossy().to_string();
    let _server = w.server(&[("SWITCHBOARD_CONFIG", config_s.as_str())]).await;

    // In a group, only a configured approver may answer, even if someone else asked.
    w.llm.push(MockReply::tool_call(
        "g1",
        "run_command",
        json!({"command": "touch group.txt"}),
    ));
    w.llm.push(MockReply::text(&["Group done."]));
    w.tg.group_message(
        -100,
        1,
        "alice",
        "@switchboard_test_bot touch it",
        None,
        false,
    );
    let prompt = w
        .wait_message(-100, "a group prompt", |m| prompt_of(m).is_some())
        .await;
    let (allow, _) = prompt_of(&prompt).unwrap();
    let by_alice = w.tg.press(-100, prompt.message_id, 1, "alice", &allow);
    w.tg.wait_until(WAIT, "alice's press answered", |tg| {
        tg.answered().contains(&by_alice)
    })
    .await;
    let answer =
        w.tg.calls("answerCallbackQuery")
            .into_iter()
            .find(|c| c["callback_query_id"] == by_alice.as_str())
            .unwrap();
    assert_eq!(answer["text"], switchboard_gateway::NOT_AN_APPROVER);
    assert!(
        !w.ws.path().join("group.txt").exists(),
        "the requester is not an approver here"
    );
    w.tg.press(-100, prompt.message_id, 5, "boss", &allow);
    w.wait_message(-100, "the reply", |m| m.text.contains("Group done."))
        .await;
    assert!(w.ws.path().join("group.txt").exists());

    // A user allowed by id may write from any chat (no pairing).
    w.llm.push(MockReply::text(&["Hello user 77."]));
    w.tg.dm(77, "Seven", "hi");
    w.wait_message(77, "a reply without pairing", |m| {
        m.text.contains("Hello user 77.")
    })
    .await;

    // /stop cancels the running reply.
    w.llm.push(MockReply::Hang);
    w.tg.dm(77, "Seven", "take forever");
    w.tg.wait_until(WAIT, "the hanging run started", |_| {
        w.llm.chat_requests().len() == 4
    })
    .await;
    w.tg.dm(77, "Seven", "/stop");
    for _ in 0..100 {
        if w.messages(77).iter().any(|m| m.text.contains("Stopping")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !w.messages(77).iter().any(|m| m.text.contains("Stopping")) {
        panic!(
            "no /stop reply; bot messages {:?}\nlogs:\n{}",
            w.messages(77),
            _server.logs()
        );
    }
    w.wait_message(77, "the run ended", |m| m.text == "Stopped.")
        .await;

    // A configuration error stops start-up, naming the key.
    let bad = w.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[channels.telegram]\ntoken = \"123:abc\"\napproval_mode = \"sometimes\"\n",
    )
    .unwrap();
    let out = std::process::Command::new(bin())
        .args(["serve"])
        .env("SWITCHBOARD_CONFIG", &bad)
        .env("SWITCHBOARD_DATA_DIR", w.dir.path().join("other"))
        .env("SWITCHBOARD_LISTEN", "127.0.0.1:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("approval_mode") && err.contains("sometimes"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_all_accepts_without_asking() {
    let w = World::new().await;
    let _server = w
        .server(&[("SWITCHBOARD_GATEWAY_APPROVAL_MODE", "allow_all")])
        .await;
    w.llm.push(MockReply::tool_call(
        "a1",
        "run_command",
        json!({"command": "touch all.txt"}),
    ));
    w.llm.push(MockReply::text(&["All good."]));
    w.tg.dm(ALICE, "Alice", "go");
    w.wait_message(ALICE, "the reply", |m| m.text.contains("All good."))
        .await;
    assert!(w.ws.path().join("all.txt").exists());
    assert!(w.messages(ALICE).iter().all(|m| prompt_of(m).is_none()));
}

/// In a group with no approvers configured, every sender of a batch asked for its calls: the
/// first member's press of Allow counts, though a second member's message came after theirs
/// in the same batch (the requester used to be the last sender alone, so the one who asked
/// was refused and the one who said "ok" could decide). Someone outside the batch may not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sender_of_a_batch_may_answer_its_prompt() {
    let w = World::new().await;
    let _server = w.server(&[]).await;
    w.llm.push(MockReply::text_slow(&["Busy", "."], 400));
    w.llm.push(MockReply::tool_call(
        "b1",
        "run_command",
        json!({"command": "touch batch.txt"}),
    ));
    w.llm.push(MockReply::text(&["Batch done."]));
    w.tg.group_message(
        -100,
        3,
        "carol",
        "@switchboard_test_bot warm up",
        None,
        false,
    );
    w.tg.wait_until(WAIT, "the first run started", |_| {
        w.llm.chat_requests().len() == 1
    })
    .await;
    w.tg.group_message(
        -100,
        1,
        "alice",
        "@switchboard_test_bot please touch batch.txt",
        None,
        false,
    );
    w.tg.group_message(-100, 2, "bob", "@switchboard_test_bot ok", None, false);
    let prompt = w
        .wait_message(-100, "the batch's prompt", |m| prompt_of(m).is_some())
        .await;
    let (allow, _) = prompt_of(&prompt).unwrap();
    // Carol's message was in the run before, not in this batch.
    let by_carol = w.tg.press(-100, prompt.message_id, 3, "carol", &allow);
    w.tg.wait_until(WAIT, "carol's press answered", |tg| {
        tg.answered().contains(&by_carol)
    })
    .await;
    assert!(!w.ws.path().join("batch.txt").exists());
    w.tg.press(-100, prompt.message_id, 1, "alice", &allow);
    w.wait_message(-100, "the reply", |m| m.text.contains("Batch done."))
        .await;
    assert!(
        w.ws.path().join("batch.txt").exists(),
        "alice asked: her Allow counts"
    );
}

/// Approvals answered in words (`answers.rs`): a reply to the prompt that denies with a
/// reason, `/allow` in the conversation, `/deny` with nothing waiting, and a reply that is no
/// answer (a message for the agent).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_are_answered_by_a_reply_or_allow_and_deny_commands() {
    let w = World::new().await;
    let _server = w.server(&[]).await;
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch words1.txt"}),
    ));
    w.llm.push(MockReply::text(&["Understood, not on main."]));
    w.tg.dm(ALICE, "Alice", "make it");
    let prompt = w
        .wait_message(ALICE, "a prompt", |m| prompt_of(m).is_some())
        .await;
    w.tg.dm_reply(ALICE, "Alice", "deny, not on main", prompt.message_id);
    w.wait_message(ALICE, "the reply after the denial", |m| {
        m.text.contains("Understood, not on main.")
    })
    .await;
    w.wait_message(ALICE, "the prompt says who denied", |m| {
        m.message_id == prompt.message_id && m.text.contains("Denied by Alice")
    })
    .await;
    assert!(!w.ws.path().join("words1.txt").exists());
    let requests = w.llm.chat_requests();
    assert!(
        requests[1].body.to_string().contains("not on main"),
        "the reason reaches the agent: {}",
        requests[1].body
    );

    // `/allow`, replying to nothing: the only prompt waiting here.
    w.llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "echo yes > words2.txt"}),
    ));
    w.llm.push(MockReply::text(&["Done with two."]));
    w.tg.dm(ALICE, "Alice", "again");
    let second = w
        .wait_message(ALICE, "a second prompt", |m| {
            prompt_of(m).is_some() && m.text.contains("words2.txt")
        })
        .await;
    w.tg.dm(ALICE, "Alice", "/allow");
    w.wait_message(ALICE, "the reply after /allow", |m| {
        m.text.contains("Done with two.")
    })
    .await;
    assert!(w.ws.path().join("words2.txt").exists());
    w.wait_message(ALICE, "the prompt says who allowed", |m| {
        m.message_id == second.message_id && m.text.contains("Allowed by Alice")
    })
    .await;

    // Nothing waits: said so; a "yes" replying to a reply is a message for the agent.
    w.tg.dm(ALICE, "Alice", "/deny");
    w.wait_message(ALICE, "nothing waits", |m| {
        m.text.contains("Nothing here waits for an approval.")
    })
    .await;
    w.llm.push(MockReply::text(&["Glad you agree."]));
    let reply = w
        .wait_message(ALICE, "the reply", |m| m.text.contains("Done with two."))
        .await;
    w.tg.dm_reply(ALICE, "Alice", "yes", reply.message_id);
    w.wait_message(ALICE, "the agent's answer to a plain reply", |m| {
        m.text.contains("Glad you agree.")
    })
    .await;
    assert_eq!(
        w.llm.chat_requests().len(),
        5,
        "only the last reply reached the agent"
    );
}

/// A reaction on a prompt answers it, over the signed webhook channel: a stranger's is
/// refused (told so), the requester's 👍 allows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reaction_on_a_prompt_answers_it() {
    let ws = tempfile::tempdir().unwrap();
    let h = Hooked::start(ws.path()).await;
    h.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch reacted.txt"}),
    ));
    h.llm.push(MockReply::text(&["Reacted and ran."]));
    let now = || chrono::Utc::now().timestamp();
    let chat = json!({"id": "c1", "kind": "direct"});
    let r = h
        .post(
            &json!({"type": "message", "peer": {"id": "u1", "name": "Ops"}, "chat": chat,
                    "text": "touch it", "message_id": "x1"}),
            now(),
            SECRET,
        )
        .await;
    assert_eq!(r.status(), 200);
    let text = |v: &serde_json::Value| v["text"].as_str().unwrap_or("").to_owned();
    let prompt = h
        .sent("a prompt", |v| {
            v["type"] == "send" && text(v).contains("reacted.txt")
        })
        .await;
    // The receiver numbers the messages it was sent: `m<n>`.
    let n =
        h.rx.got
            .lock()
            .unwrap()
            .iter()
            .position(|v| v == &prompt)
            .unwrap()
            + 1;
    let prompt_id = format!("m{n}");
    let react = |id: &str, who: (&str, &str), key: &str| {
        json!({"type": "reaction", "reaction_id": id, "peer": {"id": who.0, "name": who.1},
               "chat": chat, "message_id": prompt_id, "key": key})
    };
    let r = h
        .post(&react("r1", ("u9", "Mallory"), "👍"), now(), SECRET)
        .await;
    assert_eq!(r.status(), 200);
    let told = h
        .sent("the stranger is told", |v| {
            text(v).contains(switchboard_gateway::NOT_AN_APPROVER)
        })
        .await;
    assert!(text(&told).starts_with("Mallory:"), "{told}");
    assert!(!ws.path().join("reacted.txt").exists());
    // Another emoji is no answer; the requester's 👍 (with a skin tone) is.
    h.post(&react("r2", ("u1", "Ops"), "🎉"), now(), SECRET)
        .await;
    h.post(&react("r3", ("u1", "Ops"), "👍🏽"), now(), SECRET)
        .await;
    h.sent("the reply", |v| v["text"] == "Reacted and ran.")
        .await;
    assert!(ws.path().join("reacted.txt").exists());
    h.sent("the prompt says who allowed", |v| {
        v["type"] == "edit"
            && v["message_id"] == prompt_id.as_str()
            && text(v).contains("Allowed by Ops")
    })
    .await;
}
