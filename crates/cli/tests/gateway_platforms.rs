#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The chat gateway's scenarios on Slack (Socket Mode) and Discord (gateway websocket),
//! end to end: the real server, fake platforms speaking their wire formats, the mock LLM.

mod common;

use std::time::Duration;

use common::chat::{Fake, Msg, World};
use common::*;
use serde_json::json;
use switchboard_test_support::fake_discord::FakeDiscord;
use switchboard_test_support::fake_slack::FakeSlack;
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

const WAIT: Duration = Duration::from_secs(30);

fn prompt_of(m: &Msg) -> Option<(String, String)> {
    let allow = m.buttons.iter().find(|(t, _)| t.starts_with("Allow"))?;
    let deny = m.buttons.iter().find(|(t, _)| t.starts_with("Deny"))?;
    Some((allow.1.clone(), deny.1.clone()))
}

/// Streamed reply, approve, deny, auto-reject on a new message, a long reply with a fence,
/// and a 429 — the Telegram scenarios, on another platform.
async fn scenarios(w: World) {
    let _server = w.server().await;
    let dm = w.dm_chat();

    // A reply streamed into one message (edited as it grows).
    w.llm.push(MockReply::text_slow(
        &["Hello Alice.\n\n", "More ", "text.\n\n", "The end."],
        300,
    ));
    w.dm("hi bot");
    let m = w
        .wait(dm, "the whole reply", |m| m.text.contains("The end."))
        .await;
    assert!(
        m.text.contains("Hello Alice.") && m.text.contains("More text."),
        "{}",
        m.text
    );
    assert_eq!(
        w.messages(dm).len(),
        1,
        "one message, edited: {:?}",
        w.messages(dm)
    );
    assert_eq!(w.user_text(0), "hi bot");

    // Approve.
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "echo ok > approved.txt"}),
    ));
    w.llm.push(MockReply::text(&["It ran."]));
    w.dm("make a file");
    let prompt = w.wait(dm, "a prompt", |m| prompt_of(m).is_some()).await;
    assert!(prompt.text.contains("approved.txt"), "{}", prompt.text);
    let (allow, _) = prompt_of(&prompt).unwrap();
    w.press(dm, &prompt.id, &allow);
    w.wait(dm, "the reply", |m| m.text.contains("It ran."))
        .await;
    assert!(w.ws.path().join("approved.txt").exists());
    let who = match w.fake {
        Fake::Slack(_) => "Allowed by <@U42>",
        Fake::Discord(_) => "Allowed by user42",
        Fake::Telegram(_) => unreachable!("these scenarios run on Slack and Discord"),
    };
    w.wait(dm, "the prompt names who decided", |m| {
        m.id == prompt.id && m.text.contains(who) && m.buttons.is_empty()
    })
    .await;

    // Deny.
    w.llm.push(MockReply::tool_call(
        "c2",
        "run_command",
        json!({"command": "touch denied.txt"}),
    ));
    w.llm.push(MockReply::text(&["Not done."]));
    w.dm("touch it");
    let prompt = w
        .wait(dm, "a second prompt", |m| {
            prompt_of(m).is_some() && m.text.contains("denied.txt")
        })
        .await;
    let (_, deny) = prompt_of(&prompt).unwrap();
    w.press(dm, &prompt.id, &deny);
    w.wait(dm, "the reply", |m| m.text.contains("Not done."))
        .await;
    assert!(!w.ws.path().join("denied.txt").exists());

    // A new message rejects the pending approval and goes next.
    w.llm.push(MockReply::tool_call(
        "c3",
        "run_command",
        json!({"command": "touch never.txt"}),
    ));
    w.llm.push(MockReply::text(&["Skipped."]));
    w.llm.push(MockReply::text(&["On the new thing."]));
    w.dm("do the thing");
    let prompt = w
        .wait(dm, "a third prompt", |m| {
            prompt_of(m).is_some() && m.text.contains("never.txt")
        })
        .await;
    w.dm("never mind");
    w.wait(dm, "the new message answered", |m| {
        m.text.contains("On the new thing.")
    })
    .await;
    w.wait(dm, "the prompt says why", |m| {
        m.id == prompt.id && m.text.contains("new message received")
    })
    .await;
    assert!(!w.ws.path().join("never.txt").exists());

    // A long reply with a code fence: split at the platform limit, fences balanced.
    let mut long = String::new();
    for i in 0..40 {
        long.push_str(&format!("Paragraph {i}: {}\n\n", "words ".repeat(12)));
    }
    long.push_str("```rust\n");
    for i in 0..60 {
        long.push_str(&format!("let value_{i} = compute({i});\n"));
    }
    long.push_str("```\n\nDone.");
    w.llm.push(MockReply::text(&[&long]));
    let before = w.messages(dm).len();
    w.dm("write a lot");
    w.wait(dm, "the end of the long reply", |m| {
        m.text.trim_end().ends_with("Done.")
    })
    .await;
    let new: Vec<Msg> = w.messages(dm).into_iter().skip(before).collect();
    assert!(new.len() >= 2, "{}", new.len());
    for m in &new {
        assert!(
            m.text.chars().count() <= w.max_chars(),
            "{}",
            m.text.chars().count()
        );
        assert_eq!(m.text.matches("```").count() % 2, 0, "balanced: {}", m.text);
    }

    // A 429 is waited out.
    w.rate_limit_sends();
    w.llm.push(MockReply::text(&["After the limit."]));
    w.dm("once more");
    w.wait(dm, "the reply after a 429", |m| {
        m.text.contains("After the limit.")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_scenarios() {
    scenarios(World::slack().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discord_scenarios() {
    scenarios(World::discord().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_batching_with_attribution_in_a_slack_thread_and_a_discord_channel() {
    // Slack: a mention starts a thread; replies in it need no mention.
    let w = World::slack().await;
    let _server = w.server().await;
    let Fake::Slack(f) = &w.fake else {
        unreachable!()
    };
    w.llm
        .push(MockReply::text_slow(&["Working", " on", " it."], 2000));
    w.llm.push(MockReply::text(&["Both noted."]));
    let thread = f.channel_message("C1", "U1", "<@UBOT> first task", None);
    let ready = |_: &FakeSlack| w.llm.chat_requests().len() == 1;
    f.wait_until(WAIT, "the first run started", ready).await;
    f.channel_message("C1", "U1", "also this", Some(&thread));
    f.channel_message("C1", "U2", "and that", Some(&thread));
    w.wait("C1", "the batched reply", |m| {
        m.text.contains("Both noted.")
    })
    .await;
    assert_eq!(w.llm.chat_requests().len(), 2);
    let batched = w.user_text(1);
    assert!(
        batched.contains("also this") && batched.contains("and that") && batched.contains(": "),
        "{batched}"
    );

    // Discord: mentions in a guild channel.
    let w = World::discord().await;
    let _server = w.server().await;
    let Fake::Discord(f) = &w.fake else {
        unreachable!()
    };
    w.llm
        .push(MockReply::text_slow(&["Working", " on", " it."], 2000));
    w.llm.push(MockReply::text(&["Both noted."]));
    f.guild_message("G1", "C1", "1", "alice", "first task", true);
    let ready = |_: &FakeDiscord| w.llm.chat_requests().len() == 1;
    f.wait_until(WAIT, "the first run started", ready).await;
    f.guild_message("G1", "C1", "1", "alice", "also this", true);
    f.guild_message("G1", "C1", "2", "bob", "and that", true);
    w.wait("C1", "the batched reply", |m| {
        m.text.contains("Both noted.")
    })
    .await;
    assert_eq!(w.user_text(1), "alice: also this\nbob: and that");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_events_api_checks_signatures_and_answers_url_verification() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let fake = FakeSlack::start().await;
    let secret = "8f742231b10e8888abcd99yyyzzz85a5";
    let base = fake.api_base();
    let server = start(
        dir.path(),
        &llm.base_url(),
        &[
            ("SWITCHBOARD_SLACK_BOT_TOKEN", FakeSlack::BOT_TOKEN),
            ("SWITCHBOARD_SLACK_SIGNING_SECRET", secret),
            ("SWITCHBOARD_SLACK_API_BASE", base.as_str()),
            ("SWITCHBOARD_SLACK_ALLOWED_USERS", "U42"),
        ],
    )
    .await;
    let url = format!("{}/v1/gateway/channels/slack/webhook", server.url);
    let http = reqwest::Client::new();
    let post = |body: String, ts: i64, sig: String| {
        http.post(&url)
            .header("x-slack-request-timestamp", ts.to_string())
            .header("x-slack-signature", sig)
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let now = chrono::Utc::now().timestamp();
    let challenge =
        json!({"type": "url_verification", "challenge": "c-123", "token": "x"}).to_string();
    let sig = switchboard_gateway::slack::signature(secret, &now.to_string(), challenge.as_bytes());
    let r = post(challenge, now, sig).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "c-123");
    llm.push(MockReply::text(&["Hi from the Events API."]));
    let event = json!({"type": "event_callback", "event_id": "Ev1", "team_id": "T1",
        "event": {"type": "message", "channel": "DU42", "channel_type": "im", "user": "U42",
                  "text": "hello", "ts": "1700000000.000100"}})
    .to_string();
    let bad =
        switchboard_gateway::slack::signature("wrong-secret", &now.to_string(), event.as_bytes());
    assert_eq!(post(event.clone(), now, bad).await.unwrap().status(), 401);
    let old =
        switchboard_gateway::slack::signature(secret, &(now - 3600).to_string(), event.as_bytes());
    assert_eq!(
        post(event.clone(), now - 3600, old).await.unwrap().status(),
        401
    );
    let good = switchboard_gateway::slack::signature(secret, &now.to_string(), event.as_bytes());
    assert_eq!(
        post(event.clone(), now, good.clone())
            .await
            .unwrap()
            .status(),
        200
    );
    // Slack's retry of the same event is dropped.
    assert_eq!(post(event, now, good).await.unwrap().status(), 200);
    fake.wait_until(WAIT, "the reply", |f| {
        f.bot_messages("DU42")
            .iter()
            .any(|m| m.text.contains("Hi from the Events API."))
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        llm.chat_requests().len(),
        1,
        "the retried event reached the agent once"
    );

    // A slash command comes as a signed form; the answer to the request is empty (Slack
    // would post a body in the chat) and the command's answer is a message in the channel.
    let form = "token=x&team_id=T1&channel_id=DU42&channel_name=directmessage&user_id=U42&user_name=alice\
                &command=%2Fstatus&text=&response_url=http%3A%2F%2Fexample.invalid%2Fr&trigger_id=1.2.abc";
    let sig = switchboard_gateway::slack::signature(secret, &now.to_string(), form.as_bytes());
    let r = http
        .post(&url)
        .header("x-slack-request-timestamp", now.to_string())
        .header("x-slack-signature", sig)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(form)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "", "nothing for Slack to post");
    fake.wait_until(WAIT, "the /status answer", |f| {
        f.bot_messages("DU42")
            .iter()
            .any(|m| m.text.contains("Run: idle"))
    })
    .await;
    assert_eq!(llm.chat_requests().len(), 1, "a command is not a prompt");
}

/// Slack's client sends a message starting with `/` as a slash command, never as text: the
/// commands come over Socket Mode as `slash_commands` envelopes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slack_slash_commands_over_socket_mode_reach_the_dispatcher() {
    let w = World::slack().await;
    let _server = w.server().await;
    let Fake::Slack(f) = &w.fake else {
        unreachable!()
    };
    let env = f.slash_command("DU42", "U42", "/status", "");
    let m = w
        .wait("DU42", "the /status answer", |m| {
            m.text.contains("No session yet")
        })
        .await;
    assert!(m.buttons.is_empty());
    // The ack follows the sink's acceptance, so the answer can reach Slack before it.
    f.wait_until(WAIT, "the envelope is acknowledged", |f| {
        f.acked().contains(&env)
    })
    .await;

    // A run, then /stop ends it.
    w.llm.push(MockReply::text_slow(
        &["Thinking", " very", " slowly", " now."],
        1500,
    ));
    w.dm("start something long");
    f.wait_until(WAIT, "the run started", |_| {
        w.llm.chat_requests().len() == 1
    })
    .await;
    f.slash_command("DU42", "U42", "/stop", "");
    w.wait("DU42", "the /stop answer", |m| {
        m.text.contains("Stopping the current run.")
    })
    .await;
    f.slash_command("DU42", "U42", "/new", "");
    w.wait("DU42", "the /new answer", |m| {
        m.text.contains("starts a new session")
    })
    .await;
    assert_eq!(w.llm.chat_requests().len(), 1, "commands are not prompts");
}

/// The person who may not decide is told so where only they see it, and the prompt stays
/// for those who may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_press_by_someone_who_may_not_decide_gets_a_private_answer() {
    use switchboard_gateway::NOT_AN_APPROVER;

    // Slack: in a channel thread, U7 presses U1's prompt: an ephemeral message to U7 there.
    // The approvers come from the environment: U1 asked, U9 decides.
    let w = World::slack().await;
    let _server = w
        .server_with(&[("SWITCHBOARD_SLACK_APPROVERS", "U9")])
        .await;
    let Fake::Slack(f) = &w.fake else {
        unreachable!()
    };
    f.set_user("U1", "Alice A.", "Alice Anderson");
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "echo hi > slack.txt"}),
    ));
    w.llm.push(MockReply::text(&["Done in Slack."]));
    let thread = f.channel_message("C1", "U1", "<@UBOT> make a file", None);
    let prompt = w.wait("C1", "the prompt", |m| prompt_of(m).is_some()).await;
    let (allow, _) = prompt_of(&prompt).unwrap();
    f.press("C1", &prompt.id, "U7", &allow);
    f.wait_until(WAIT, "the ephemeral answer", |f| !f.ephemerals().is_empty())
        .await;
    assert_eq!(
        f.ephemerals(),
        vec![(
            "C1".to_string(),
            "U7".to_string(),
            NOT_AN_APPROVER.to_string(),
            Some(thread.clone())
        )]
    );
    assert!(!w.ws.path().join("slack.txt").exists());
    // The session is titled with the requester's display name (users.info), not `U1`.
    let sessions: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/v1/sessions", _server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(sessions.to_string().contains("Alice A."), "{sessions}");
    // Not the requester either, here: only the configured approver.
    f.press("C1", &prompt.id, "U1", &allow);
    f.wait_until(WAIT, "the requester's refusal", |f| {
        f.ephemerals().len() == 2
    })
    .await;
    assert_eq!(f.ephemerals()[1].1, "U1");
    f.press("C1", &prompt.id, "U9", &allow);
    w.wait("C1", "the reply", |m| m.text.contains("Done in Slack."))
        .await;
    assert!(w.ws.path().join("slack.txt").exists());

    // Discord: in a guild channel, user 7 presses user 1's prompt: an ephemeral follow-up.
    let w = World::discord().await;
    let _server = w.server().await;
    let Fake::Discord(f) = &w.fake else {
        unreachable!()
    };
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "echo hi > discord.txt"}),
    ));
    w.llm.push(MockReply::text(&["Done in Discord."]));
    f.guild_message("G1", "C1", "1", "alice", "make a file", true);
    let prompt = w.wait("C1", "the prompt", |m| prompt_of(m).is_some()).await;
    let (allow, _) = prompt_of(&prompt).unwrap();
    f.press("C1", &prompt.id, "7", &allow);
    f.wait_until(WAIT, "the follow-up", |f| !f.follow_ups().is_empty())
        .await;
    let ups = f.follow_ups();
    assert_eq!(ups.len(), 1);
    assert_eq!(ups[0].1["content"], NOT_AN_APPROVER);
    assert_eq!(ups[0].1["flags"], 64, "ephemeral");
    assert!(!w.ws.path().join("discord.txt").exists());
    f.press("C1", &prompt.id, "1", &allow);
    w.wait("C1", "the reply", |m| m.text.contains("Done in Discord."))
        .await;
    assert!(w.ws.path().join("discord.txt").exists());
}

/// Two forum topics of one group: each its own session by default, one shared with
/// `thread_sessions = false`; either way every reply lands in the topic it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forum_topics_are_conversations_and_replies_land_in_them() {
    use switchboard_test_support::fake_telegram::FakeTelegram;
    for thread_sessions in [true, false] {
        let w = World::new("telegram").await;
        let Fake::Telegram(tg) = &w.fake else {
            unreachable!()
        };
        let flag = thread_sessions.to_string();
        let server = w
            .server_with(&[
                ("SWITCHBOARD_TELEGRAM_ALLOWED_USERS", "5"),
                ("SWITCHBOARD_TELEGRAM_THREAD_SESSIONS", &flag),
            ])
            .await;
        let bot = FakeTelegram::BOT_USERNAME;
        for (topic, word) in [(42, "alpha"), (43, "beta")] {
            w.llm.push(MockReply::Text {
                chunks: vec![format!("reply {word}")],
                delay_ms: 0,
            });
            tg.group_message(
                -200,
                5,
                "Erin",
                &format!("@{bot} {word}"),
                Some(topic),
                false,
            );
            switchboard_test_support::wait::until_within(
                common::chat::WAIT,
                "the reply in its topic",
                || {
                    tg.bot_messages(-200)
                        .iter()
                        .any(|m| m.text.contains(&format!("reply {word}")))
                },
            )
            .await;
            let shown: Vec<_> = tg
                .bot_messages(-200)
                .into_iter()
                .filter(|m| m.text.contains(&format!("reply {word}")))
                .collect();
            assert!(
                shown.iter().all(|m| m.thread_id == Some(topic)),
                "thread_sessions={thread_sessions}: {shown:?}"
            );
        }
        let sessions = client(&server)
            .list_sessions(None, None)
            .await
            .unwrap()
            .sessions;
        assert_eq!(
            sessions.len(),
            if thread_sessions { 2 } else { 1 },
            "thread_sessions={thread_sessions}"
        );
    }
}
