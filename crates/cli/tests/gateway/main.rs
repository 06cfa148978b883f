#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The chat gateway end to end: the real server with its in-process gateway, a fake
//! Telegram Bot API speaking the real wire format, and the mock LLM.

mod api;
mod approvals;
#[path = "../common/mod.rs"]
mod common;
mod ledger;
mod restarts;
mod webhooks;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use serde_json::json;
use switchboard_test_support::fake_telegram::{BotMessage, FakeTelegram};
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;

const ALICE: i64 = 42;
const WAIT: Duration = Duration::from_secs(30);

struct World {
    dir: tempfile::TempDir,
    ws: tempfile::TempDir,
    llm: MockLlm,
    tg: FakeTelegram,
}

impl World {
    async fn new() -> World {
        World {
            dir: tempfile::tempdir().unwrap(),
            ws: tempfile::tempdir().unwrap(),
            llm: MockLlm::start().await,
            tg: FakeTelegram::start().await,
        }
    }

    async fn server(&self, extra: &[(&str, &str)]) -> ServerProcess {
        let base = self.tg.base_url();
        let ws = self.ws.path().to_string_lossy().to_string();
        let mut env: Vec<(&str, &str)> = vec![
            ("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN),
            ("SWITCHBOARD_TELEGRAM_BASE_URL", base.as_str()),
            ("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", "42,-100"),
            ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
            ("SWITCHBOARD_DEFAULT_CWD", ws.as_str()),
        ];
        env.extend_from_slice(extra);
        start(self.dir.path(), &self.llm.base_url(), &env).await
    }

    fn messages(&self, chat: i64) -> Vec<BotMessage> {
        self.tg.bot_messages(chat)
    }

    /// Waits until some bot message in `chat` satisfies `f`; returns it.
    async fn wait_message(
        &self,
        chat: i64,
        what: &str,
        f: impl Fn(&BotMessage) -> bool,
    ) -> BotMessage {
        self.tg
            .wait_until(WAIT, what, |tg| tg.bot_messages(chat).iter().any(&f))
            .await;
        self.messages(chat).into_iter().find(|m| f(m)).unwrap()
    }

    /// The user content of the model's `n`th request.
    fn user_text(&self, n: usize) -> String {
        let reqs = self.llm.chat_requests();
        let msgs = reqs[n].body["messages"].as_array().unwrap().clone();
        msgs.iter()
            .rev()
            .find(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    }
}

fn prompt_of(m: &BotMessage) -> Option<(String, String)> {
    let allow = m.buttons.iter().find(|(t, _)| t.starts_with("Allow"))?;
    let deny = m.buttons.iter().find(|(t, _)| t.starts_with("Deny"))?;
    Some((allow.1.clone(), deny.1.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_direct_message_gets_a_streamed_reply_edited_in_place() {
    let w = World::new().await;
    let _server = w.server(&[]).await;
    w.llm.push(MockReply::text_slow(
        &[
            "Hello Alice.\n\n",
            "Here is ",
            "more text ",
            "for you.\n\n",
            "The end.",
        ],
        300,
    ));
    w.tg.dm(ALICE, "Alice", "hi bot");
    let m = w
        .wait_message(ALICE, "the whole reply", |m| {
            m.text.contains("Hello Alice.") && m.text.contains("The end.")
        })
        .await;
    assert!(m.edits >= 1, "streamed by editing one message: {m:?}");
    assert_eq!(
        m.text, "Hello Alice.\n\nHere is more text for you.\n\nThe end.",
        "line breaks between flushes are kept"
    );
    assert_eq!(
        w.messages(ALICE).len(),
        1,
        "one message, edited: {:?}",
        w.messages(ALICE)
    );
    assert_eq!(w.user_text(0), "hi bot");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_while_busy_are_batched_with_attribution() {
    let w = World::new().await;
    let _server = w.server(&[]).await;
    w.llm
        .push(MockReply::text_slow(&["Working", " on", " it", "."], 400));
    w.llm.push(MockReply::text(&["Both noted."]));
    w.tg.group_message(
        -100,
        1,
        "alice",
        "@switchboard_test_bot first task",
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
        "@switchboard_test_bot also this",
        None,
        false,
    );
    w.tg.group_message(
        -100,
        2,
        "bob",
        "@switchboard_test_bot and that",
        None,
        false,
    );
    // Not addressed: ignored.
    w.tg.group_message(-100, 3, "carol", "just chatting", None, false);
    w.wait_message(-100, "the batched reply", |m| {
        m.text.contains("Both noted.")
    })
    .await;
    assert_eq!(
        w.llm.chat_requests().len(),
        2,
        "one run for the two queued messages"
    );
    assert_eq!(w.user_text(1), "alice: also this\nbob: and that");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_is_split_without_breaking_its_code_fence() {
    let w = World::new().await;
    let _server = w.server(&[]).await;
    let mut long = String::new();
    for i in 0..60 {
        long.push_str(&format!("Paragraph {i}: {}\n\n", "words ".repeat(12)));
    }
    long.push_str("```rust\n");
    for i in 0..80 {
        long.push_str(&format!(
            "let value_{i} = compute({i}); // a line of code\n"
        ));
    }
    long.push_str("```\n\nDone.");
    assert!(long.len() > 8000);
    w.llm.push(MockReply::text(&[&long]));
    w.tg.dm(ALICE, "Alice", "write a lot");
    w.wait_message(ALICE, "the end of the reply", |m| m.text.ends_with("Done."))
        .await;
    let msgs = w.messages(ALICE);
    assert!(msgs.len() >= 3, "{}", msgs.len());
    for m in &msgs {
        assert!(m.text.chars().count() <= 4096, "{}", m.text.chars().count());
        assert_eq!(
            m.text.matches("```").count() % 2,
            0,
            "fence balanced in: {}",
            m.text
        );
    }
    let all: String = msgs
        .iter()
        .map(|m| m.text.clone())
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        all.contains("let value_0 = compute(0);") && all.contains("let value_79 = compute(79);")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_waited_out() {
    let w = World::new().await;
    let _server = w.server(&[]).await;
    w.tg.rate_limit("sendMessage", 1, 1);
    w.llm.push(MockReply::text(&["Still here."]));
    w.tg.dm(ALICE, "Alice", "hello");
    w.wait_message(ALICE, "the reply despite a 429", |m| {
        m.text.contains("Still here.")
    })
    .await;
    assert!(w.tg.calls("sendMessage").len() >= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_past_its_timeout_is_cancelled_with_a_notice() {
    let w = World::new().await;
    let server = w
        .server(&[("SWITCHBOARD_GATEWAY_RUN_TIMEOUT_SECS", "2")])
        .await;
    w.llm.push(MockReply::Hang);
    w.tg.dm(ALICE, "Alice", "take forever");
    w.wait_message(ALICE, "a timeout notice", |m| {
        m.text.contains("took longer than")
    })
    .await;
    let c = client(&server);
    let sessions = c.list_sessions(None, None).await.unwrap().sessions;
    let id = sessions[0].id;
    for _ in 0..200 {
        if c.get_session(id)
            .await
            .unwrap()
            .session
            .active_run_id
            .is_none()
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the timed-out run was not cancelled on the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_rejects_pending_approvals_and_channels_test_reports() {
    let w = World::new().await;
    let mut server = w.server(&[]).await;
    w.llm.push(MockReply::tool_call(
        "c1",
        "run_command",
        json!({"command": "touch late.txt"}),
    ));
    w.tg.dm(ALICE, "Alice", "do it");
    let prompt = w
        .wait_message(ALICE, "a prompt", |m| prompt_of(m).is_some())
        .await;
    server.stop().await; // SIGTERM: graceful
    let edited = w
        .messages(ALICE)
        .into_iter()
        .find(|m| m.message_id == prompt.message_id)
        .unwrap();
    assert!(
        edited.text.contains("gateway shutting down"),
        "{}",
        edited.text
    );
    assert!(edited.buttons.is_empty());

    // `switchboard channels test` prints the bot identity, or the exact failure.
    let base = w.tg.base_url();
    let run = |token: &'static str| {
        let base = base.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin())
                .args(["channels", "test"])
                .env("SWITCHBOARD_TELEGRAM_TOKEN", token)
                .env("SWITCHBOARD_TELEGRAM_BASE_URL", &base)
                .env("SWITCHBOARD_CONFIG", "/dev/null")
                .output()
                .unwrap()
        })
    };
    let ok = run(FakeTelegram::TOKEN).await.unwrap();
    assert!(ok.status.success());
    assert!(String::from_utf8_lossy(&ok.stdout).contains("@switchboard_test_bot"));
    let bad = run("111:WRONG-TOKEN").await.unwrap();
    assert!(!bad.status.success());
    let out = String::from_utf8_lossy(&bad.stdout);
    assert!(
        out.contains("Unauthorized") && !out.contains("WRONG-TOKEN"),
        "{out}"
    );
}

#[test]
fn channels_test_help_names_every_platform() {
    let out = std::process::Command::new(bin())
        .args(["channels", "test", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for name in [
        "telegram",
        "slack",
        "discord",
        "matrix",
        "email",
        "whatsapp",
        "webhook:NAME",
    ] {
        assert!(help.contains(name), "{name} missing from:\n{help}");
    }
}
