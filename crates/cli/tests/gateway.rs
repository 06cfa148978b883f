#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The chat gateway end to end: the real server with its in-process gateway, a fake
//! Telegram Bot API speaking the real wire format, and the mock LLM.

mod common;

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
async fn unknown_chats_pair_and_commands_work() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    w.tg.dm(7, "Stranger", "hello?");
    let m = w
        .wait_message(7, "a pairing code", |m| {
            m.text.contains("switchboard pairing approve")
        })
        .await;
    let code = m
        .text
        .split_whitespace()
        .skip_while(|t| *t != "telegram")
        .nth(1)
        .unwrap()
        .to_string();
    assert!(
        w.llm.chat_requests().is_empty(),
        "a stranger never reaches the agent"
    );
    let data = w.dir.path().to_string_lossy().to_string();
    let pairing = |args: Vec<String>| {
        let data = data.clone();
        tokio::task::spawn_blocking(move || {
            std::process::Command::new(bin())
                .arg("pairing")
                .args(args)
                .env("SWITCHBOARD_DATA_DIR", &data)
                .env("SWITCHBOARD_CONFIG", "/dev/null")
                .output()
                .unwrap()
        })
    };
    let listed = pairing(vec!["list".into()]).await.unwrap();
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    assert!(
        listed.contains(&format!("telegram {code}")) && listed.contains("Stranger (7)"),
        "{listed}"
    );
    let wrong = pairing(vec!["refuse".into(), "telegram".into(), "NOSUCH99".into()])
        .await
        .unwrap();
    assert!(!wrong.status.success());
    let out = pairing(vec!["approve".into(), "telegram".into(), code.clone()])
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let listed = pairing(vec!["list".into()]).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout),
        "no pending pairing requests\n"
    );
    w.llm.push(MockReply::text(&["Welcome."]));
    w.tg.dm(7, "Stranger", "hello again");
    w.wait_message(7, "a real reply", |m| m.text.contains("Welcome."))
        .await;

    // /status, /new.
    w.tg.dm(7, "Stranger", "/status");
    w.wait_message(7, "a status", |m| {
        // Its commands are sandboxed (workspace-write, this machine has Landlock).
        m.text.contains("Run: idle") && m.text.contains("Sandbox: on: workspace only, no network")
    })
    .await;
    w.tg.dm(7, "Stranger", "/new");
    w.wait_message(7, "/new confirmed", |m| {
        m.text.contains("next message starts a new session")
    })
    .await;
    let c = client(&server);
    let before = c.list_sessions(None, None).await.unwrap().total;
    w.llm.push(MockReply::text(&["Fresh."]));
    w.tg.dm(7, "Stranger", "start over");
    w.wait_message(7, "a reply in a new session", |m| m.text.contains("Fresh."))
        .await;
    assert_eq!(c.list_sessions(None, None).await.unwrap().total, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_api_reports_unbinds_and_sends_notifications_with_context() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    w.llm.push(MockReply::text(&["Hi."]));
    w.tg.dm(ALICE, "Alice", "hello");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Hi."))
        .await;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        http.get(format!("{}{path}", server.url))
            .bearer_auth(TOKEN)
            .send()
    };
    let status: serde_json::Value = get("/v1/gateway/status")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(status["channels"][0]["name"], "telegram");
    assert_eq!(status["sessions"], 1);
    let no_auth = http
        .get(format!("{}/v1/gateway/status", server.url))
        .send()
        .await
        .unwrap();
    assert_eq!(no_auth.status(), 401);
    let sessions: serde_json::Value = get("/v1/gateway/sessions")
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = sessions["sessions"][0]["routing_key"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(key, "telegram:dm:42");

    // A notification with context: attached once to Alice's next message.
    let sent = http
        .post(format!("{}/v1/gateway/send", server.url))
        .bearer_auth(TOKEN)
        .json(
            &json!({"channel": "telegram", "target": "42", "text": "Nightly build failed.",
                      "context": {"trigger": "nightly", "output": "error[E0425]"}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status(), 200);
    w.wait_message(ALICE, "the notification", |m| {
        m.text == "Nightly build failed."
    })
    .await;
    w.llm.push(MockReply::text(&["Looking at E0425."]));
    w.tg.dm(ALICE, "Alice", "what broke?");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Looking at E0425."))
        .await;
    let last = w.llm.chat_requests().last().unwrap().body.to_string();
    assert!(
        last.contains("error[E0425]") && last.contains("nightly"),
        "{last}"
    );
    w.llm.push(MockReply::text(&["Again."]));
    w.tg.dm(ALICE, "Alice", "and now?");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Again."))
        .await;
    let last = w.llm.chat_requests().last().unwrap().body.to_string();
    assert!(
        !last.contains("error[E0425]"),
        "the context is attached once: {last}"
    );

    // Unbind: the next message starts a new session.
    let del = http
        .delete(format!("{}/v1/gateway/bindings/{key}", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), 204);
    let again = http
        .delete(format!("{}/v1/gateway/bindings/{key}", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
    let bad = http
        .post(format!("{}/v1/gateway/send", server.url))
        .bearer_auth(TOKEN)
        .json(&json!({"channel": "nope", "target": "1", "text": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 422);
    // What the document does not allow is refused: a blank target, a context that is not
    // an object.
    for body in [
        json!({"channel": "telegram", "target": " ", "text": "x"}),
        json!({"channel": "telegram", "target": "1", "text": "x", "context": [1]}),
    ] {
        let bad = http
            .post(format!("{}/v1/gateway/send", server.url))
            .bearer_auth(TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(bad.status(), 400, "{body}");
    }
    // The served document names this server's channels, so an unknown one is not
    // schema-valid there.
    let doc: serde_json::Value = http
        .get(format!("{}/openapi.json", server.url))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for schema in ["GatewaySendRequest", "GatewayAskRequest", "PairingDecision"] {
        assert_eq!(
            doc["components"]["schemas"][schema]["properties"]["channel"]["enum"],
            json!(["telegram"]),
            "{schema}"
        );
    }
}

/// A receiver for the webhook channel's outbound POSTs: checks our signature, records
/// bodies, answers with message ids.
struct Receiver {
    url: String,
    got: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>>,
}

const SECRET: &str = "a-webhook-secret-0123456789";

async fn receiver() -> Receiver {
    use axum::http::HeaderMap;
    let got: std::sync::Arc<std::sync::Mutex<Vec<serde_json::Value>>> = Default::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: HeaderMap, body: axum::body::Bytes| {
            let g = g.clone();
            async move {
                let now = chrono::Utc::now().timestamp();
                if switchboard_gateway::webhook::verify(
                    SECRET,
                    &headers,
                    &body,
                    now,
                    Duration::from_secs(300),
                )
                .is_err()
                {
                    return (
                        axum::http::StatusCode::UNAUTHORIZED,
                        "bad signature".to_string(),
                    );
                }
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let mut g = g.lock().unwrap();
                g.push(v);
                (
                    axum::http::StatusCode::OK,
                    json!({"message_id": format!("m{}", g.len())}).to_string(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Receiver { url, got }
}

fn signed(body: &serde_json::Value, at: i64, secret: &str) -> (String, String, Vec<u8>) {
    let raw = serde_json::to_vec(body).unwrap();
    let sig = switchboard_gateway::webhook::sign(secret, at, &raw);
    (at.to_string(), sig, raw)
}

/// The server with the signed webhook channel `ops` sending to a [`receiver`], in `ws`.
struct Hooked {
    _dir: tempfile::TempDir,
    llm: MockLlm,
    rx: Receiver,
    server: ServerProcess,
}

impl Hooked {
    async fn start(ws: &std::path::Path) -> Hooked {
        let dir = tempfile::tempdir().unwrap();
        let llm = MockLlm::start().await;
        let rx = receiver().await;
        let config = dir.path().join("switchboard.toml");
        std::fs::write(
            &config,
            format!(
                "[channels.webhook.ops]\nsecret = {SECRET:?}\nurl = {:?}\n",
                rx.url
            ),
        )
        .unwrap();
        let (config_s, ws_s) = (
            config.to_string_lossy().to_string(),
            ws.to_string_lossy().to_string(),
        );
        let server = start(
            &dir.path().join("data"),
            &llm.base_url(),
            &[
                ("SWITCHBOARD_CONFIG", config_s.as_str()),
                ("SWITCHBOARD_DEFAULT_CWD", ws_s.as_str()),
            ],
        )
        .await;
        Hooked {
            _dir: dir,
            llm,
            rx,
            server,
        }
    }

    /// POSTs `body` to the channel's inbound route, signed for `at` with `secret`.
    async fn post(&self, body: &serde_json::Value, at: i64, secret: &str) -> reqwest::Response {
        let (ts, sig, raw) = signed(body, at, secret);
        self.post_raw(ts, sig, raw).await
    }

    async fn post_raw(&self, ts: String, sig: String, raw: Vec<u8>) -> reqwest::Response {
        reqwest::Client::new()
            .post(format!("{}/v1/gateway/webhook/ops", self.server.url))
            .header("x-switchboard-timestamp", ts)
            .header("x-switchboard-signature", sig)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await
            .unwrap()
    }

    /// The first request the receiver got that satisfies `f`, waiting up to 30 s.
    async fn sent(&self, what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
        for _ in 0..600 {
            if let Some(v) = self.rx.got.lock().unwrap().iter().find(|v| f(v)) {
                return v.clone();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!(
            "timed out waiting for {what}: {:?}",
            self.rx.got.lock().unwrap()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_webhook_round_trip_and_refused_signatures() {
    let ws = tempfile::tempdir().unwrap();
    let h = Hooked::start(ws.path()).await;
    h.llm.push(MockReply::text(&["Deploy looks fine."]));
    let body = json!({"type": "message", "peer": {"id": "u1", "name": "Ops"},
                      "chat": {"id": "c1", "kind": "direct"}, "text": "how is the deploy?", "message_id": "x1"});
    let now = chrono::Utc::now().timestamp();
    assert_eq!(h.post(&body, now, SECRET).await.status(), 200);
    h.sent("the reply", |v| {
        v["type"] == "send" && v["chat"]["id"] == "c1" && v["text"] == "Deploy looks fine."
    })
    .await;
    // A wrong signature, a tampered body and a replayed old request are refused.
    let r = h.post(&body, now, "another-secret-0123456789").await;
    assert_eq!(r.status(), 401);
    let err: serde_json::Value = r.json().await.unwrap();
    assert_eq!(err["code"], "unauthorized");
    let (ts, sig, _) = signed(&body, now, SECRET);
    let tampered = serde_json::to_vec(
        &json!({"type": "message", "peer": {"id": "u1", "name": "Ops"},
        "chat": {"id": "c1", "kind": "direct"}, "text": "rm -rf", "message_id": "x2"}),
    )
    .unwrap();
    assert_eq!(h.post_raw(ts, sig, tampered).await.status(), 401);
    assert_eq!(h.post(&body, now - 3600, SECRET).await.status(), 401);
    assert_eq!(
        h.llm.chat_requests().len(),
        1,
        "only the good request reached the agent"
    );
    // A malformed body (validly signed) is a 400 naming the problem.
    let bad = json!({"type": "message", "peer": {"id": "u1"}, "chat": {"id": "c1", "kind": "channel"}, "text": "x", "message_id": "x3"});
    let r = h.post(&bad, now, SECRET).await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("chat.kind"));
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telegram_webhook_mode_checks_the_secret_token() {
    let w = World::new().await;
    let server = w
        .server(&[
            (
                "SWITCHBOARD_TELEGRAM_WEBHOOK_URL",
                "https://bot.example.com/v1/gateway/channels/telegram/webhook",
            ),
            ("SWITCHBOARD_TELEGRAM_WEBHOOK_SECRET", "s3cret_Token-1"),
        ])
        .await;
    w.tg.wait_until(WAIT, "setWebhook called", |tg| {
        !tg.calls("setWebhook").is_empty()
    })
    .await;
    let set = &w.tg.calls("setWebhook")[0];
    assert_eq!(
        set["url"],
        "https://bot.example.com/v1/gateway/channels/telegram/webhook"
    );
    assert_eq!(set["secret_token"], "s3cret_Token-1");
    w.llm.push(MockReply::text(&["Pushed and answered."]));
    let update = json!({"update_id": 1000, "message": {"message_id": 5, "date": 0,
        "from": {"id": ALICE, "is_bot": false, "first_name": "Alice"},
        "chat": {"id": ALICE, "type": "private"}, "text": "hello over the webhook"}});
    let url = format!("{}/v1/gateway/channels/telegram/webhook", server.url);
    let http = reqwest::Client::new();
    let wrong = http
        .post(&url)
        .header("x-telegram-bot-api-secret-token", "nope")
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let missing = http.post(&url).json(&update).send().await.unwrap();
    assert_eq!(missing.status(), 401);
    let ok = http
        .post(&url)
        .header("x-telegram-bot-api-secret-token", "s3cret_Token-1")
        .json(&update)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    w.wait_message(ALICE, "the reply", |m| {
        m.text.contains("Pushed and answered.")
    })
    .await;
    assert!(
        w.tg.calls("getUpdates").is_empty(),
        "no polling in webhook mode"
    );
    assert_eq!(w.user_text(0), "hello over the webhook");
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

#[test]
fn channels_test_help_names_every_platform() {
    let out = std::process::Command::new(bin())
        .args(["channels", "test", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for name in ["telegram", "slack", "discord", "webhook:NAME"] {
        assert!(help.contains(name), "{name} missing from:\n{help}");
    }
}

/// The pairing code in the bot's answer to a stranger (`… approve telegram CODE …`).
fn pairing_code_in(m: &BotMessage) -> String {
    m.text
        .split_whitespace()
        .skip_while(|t| *t != "telegram")
        .nth(1)
        .unwrap()
        .to_string()
}

/// The gateway API as the web console calls it.
struct Api {
    url: String,
    http: reqwest::Client,
}

impl Api {
    fn new(server: &ServerProcess) -> Api {
        Api {
            url: server.url.clone(),
            http: reqwest::Client::new(),
        }
    }

    async fn get(&self, path: &str) -> serde_json::Value {
        let r = self
            .http
            .get(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "GET {path}");
        r.json().await.unwrap()
    }

    /// POSTs `body` as JSON: the status and the answer.
    async fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        self.post_raw(path, "application/json", body.to_string())
            .await
    }

    async fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: String,
    ) -> (u16, serde_json::Value) {
        let r = self
            .http
            .post(format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .header("content-type", content_type)
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or_default())
    }

    /// The channel `telegram` in `GET /v1/gateway/status`.
    async fn telegram(&self) -> serde_json::Value {
        let status = self.get("/v1/gateway/status").await;
        status["channels"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == "telegram")
            .unwrap()
            .clone()
    }

    /// Polls the status until the channel `telegram` is in `state`; returns its line.
    async fn wait_state(&self, state: &str) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let ch = self.telegram().await;
            if ch["state"] == state {
                return ch;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the channel never was {state}: {ch}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The one conversation of `GET /v1/gateway/sessions` with routing key `key`.
    async fn session(&self, key: &str) -> serde_json::Value {
        let all = self.get("/v1/gateway/sessions").await;
        all["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["routing_key"] == key)
            .unwrap_or_else(|| panic!("no session {key} in {all}"))
            .clone()
    }

    /// Polls until the conversation `key`'s last activity is after `after`; returns it.
    async fn activity_after(&self, key: &str, after: &str) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let s = self.session(key).await;
            if let Some(t) = s["last_activity"].as_str()
                && time(t) > time(after)
            {
                return t.to_string();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the last activity of {key} never moved past {after}: {s}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

fn time(t: &str) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(t).unwrap().into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_requests_are_listed_approved_and_refused_over_the_api() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    let api = Api::new(&server);
    assert_eq!(
        api.get("/v1/gateway/pairing").await,
        json!({"requests": []})
    );
    w.tg.dm(7, "Stranger", "hello?");
    let asked = w
        .wait_message(7, "a pairing code", |m| m.text.contains("pairing approve"))
        .await;
    assert!(asked.text.contains("web console"), "{}", asked.text);
    let code = pairing_code_in(&asked);
    w.tg.dm(8, "Other", "me too");
    let code8 = pairing_code_in(&w.wait_message(8, "a second code", |_| true).await);

    let listed = api.get("/v1/gateway/pairing").await;
    let requests = listed["requests"].as_array().unwrap();
    assert_eq!(requests.len(), 2, "{listed}");
    let mine = requests
        .iter()
        .find(|r| r["code"] == code.as_str())
        .unwrap();
    assert_eq!(mine["channel"], "telegram");
    assert_eq!(mine["peer"]["id"], "7");
    assert_eq!(mine["peer"]["name"], "Stranger");
    assert_eq!(mine["chat"], json!({"id": "7", "kind": "direct"}));
    let expires = time(mine["expires_at"].as_str().unwrap());
    let left = expires - chrono::Utc::now();
    assert!(
        left > chrono::Duration::minutes(55) && left <= chrono::Duration::minutes(60),
        "valid for an hour: {left}"
    );

    // Malformed bodies: the field is named; nothing is decided.
    let approve = "/v1/gateway/pairing/approve";
    for (body, code_want, names) in [
        (json!({"channel": "telegram"}), "validation_failed", "code"),
        (
            json!({"channel": "telegram", "code": code, "extra": 1}),
            "validation_failed",
            "extra",
        ),
        (
            json!({"channel": "telegram", "code": "  "}),
            "validation_failed",
            "code",
        ),
        (
            json!({"channel": "", "code": code}),
            "validation_failed",
            "channel",
        ),
        (
            json!({"channel": "telegram", "code": 7}),
            "validation_failed",
            "code",
        ),
    ] {
        let (status, err) = api.post(approve, &body).await;
        assert_eq!(
            (status, err["code"].as_str()),
            (400, Some(code_want)),
            "{body}: {err}"
        );
        assert!(err["error"].as_str().unwrap().contains(names), "{err}");
    }
    let (status, err) = api
        .post_raw(approve, "application/json", "{not json".into())
        .await;
    assert_eq!((status, err["code"].as_str()), (400, Some("invalid_json")));
    let (status, err) = api
        .post_raw(
            approve,
            "text/plain",
            json!({"channel": "telegram", "code": code}).to_string(),
        )
        .await;
    assert_eq!(
        (status, err["code"].as_str()),
        (415, Some("unsupported_media_type"))
    );
    let unauthenticated = reqwest::Client::new()
        .post(format!("{}{approve}", server.url))
        .json(&json!({"channel": "telegram", "code": code}))
        .send()
        .await
        .unwrap();
    assert_eq!(unauthenticated.status(), 401);
    // Unknown codes, and codes of another channel.
    for body in [
        json!({"channel": "telegram", "code": "NOSUCH99"}),
        json!({"channel": "slack", "code": code}),
    ] {
        for route in [approve, "/v1/gateway/pairing/refuse"] {
            let (status, err) = api.post(route, &body).await;
            assert_eq!(
                (status, err["code"].as_str()),
                (404, Some("pairing_not_found")),
                "{route} {body}: {err}"
            );
            assert!(
                err["error"]
                    .as_str()
                    .unwrap()
                    .contains(body["code"].as_str().unwrap())
            );
        }
    }
    assert_eq!(
        api.get("/v1/gateway/pairing").await["requests"]
            .as_array()
            .unwrap()
            .len(),
        2,
        "nothing was decided"
    );
    assert!(w.llm.chat_requests().is_empty());

    // Approved (the code as typed by a person): the stranger's next message reaches the agent.
    let (status, approved) = api
        .post(
            approve,
            &json!({"channel": "telegram", "code": format!(" {} ", code.to_lowercase())}),
        )
        .await;
    assert_eq!(status, 200, "{approved}");
    assert_eq!(&approved, mine, "the request approved");
    let (status, again) = api
        .post(approve, &json!({"channel": "telegram", "code": code}))
        .await;
    assert_eq!(
        (status, again["code"].as_str()),
        (404, Some("pairing_not_found"))
    );
    w.llm.push(MockReply::text(&["Welcome."]));
    w.tg.dm(7, "Stranger", "hello again");
    w.wait_message(7, "a real reply", |m| m.text.contains("Welcome."))
        .await;
    assert_eq!(w.user_text(0), "hello again");

    // Refused: gone from the list, and the person is told once.
    let (status, refused) = api
        .post(
            "/v1/gateway/pairing/refuse",
            &json!({"channel": "telegram", "code": code8}),
        )
        .await;
    assert_eq!(status, 200, "{refused}");
    assert_eq!(refused["peer"]["id"], "8");
    w.wait_message(8, "the refusal", |m| m.text.contains("declined"))
        .await;
    assert_eq!(
        api.get("/v1/gateway/pairing").await,
        json!({"requests": []})
    );
    let (status, _) = api
        .post(
            "/v1/gateway/pairing/refuse",
            &json!({"channel": "telegram", "code": code8}),
        )
        .await;
    assert_eq!(status, 404);
    // Still a stranger: a new message asks anew and never reaches the agent.
    w.tg.dm(8, "Other", "please?");
    w.tg.wait_until(WAIT, "a new code", |tg| {
        tg.bot_messages(8)
            .iter()
            .filter(|m| m.text.contains("pairing approve"))
            .count()
            == 2
    })
    .await;
    assert_eq!(w.llm.chat_requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_state_and_last_activity_for_the_console() {
    let w = World::new().await;
    let server = w.server(&[]).await;
    let api = Api::new(&server);
    let up = api.wait_state("connected").await;
    assert_eq!(up["status"], "polling");
    assert!(up["since"].is_string(), "{up}");
    assert_eq!(up["reason"], serde_json::Value::Null);

    w.llm.push(MockReply::text(&["Hi."]));
    w.tg.dm(ALICE, "Alice", "hello");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Hi."))
        .await;
    let key = "telegram:dm:42";
    let s = api.session(key).await;
    assert_eq!(s["channel"], "telegram");
    assert_eq!(s["chat"], json!({"id": "42", "kind": "direct"}));
    assert_eq!(s["peer"]["name"], "Alice");
    let first = s["last_activity"].as_str().unwrap().to_string();
    assert!(chrono::Utc::now() - time(&first) < chrono::Duration::seconds(30));

    // A test message from the console, with the conversation's own fields: it lands in the
    // chat, and counts as activity.
    let (status, sent) = api
        .post(
            "/v1/gateway/send",
            &json!({
                "channel": s["channel"],
                "target": s["chat"]["id"],
                "thread": s["chat"]["thread"],
                "kind": s["chat"]["kind"],
                "text": "Test message from the console.",
            }),
        )
        .await;
    assert_eq!(status, 200, "{sent}");
    let m = w
        .wait_message(ALICE, "the test message", |m| {
            m.text == "Test message from the console."
        })
        .await;
    assert_eq!(sent["message_id"], m.message_id.to_string());
    let second = api.activity_after(key, &first).await;
    // A message from the chat moves it again.
    w.llm.push(MockReply::text(&["Again."]));
    w.tg.dm(ALICE, "Alice", "and now?");
    w.wait_message(ALICE, "a reply", |m| m.text.contains("Again."))
        .await;
    api.activity_after(key, &second).await;
    let (status, err) = api
        .post(
            "/v1/gateway/send",
            &json!({"channel": "telegram", "target": "42", "kind": "thread", "text": "x"}),
        )
        .await;
    // One field read against another: 422, as the document says.
    assert_eq!(
        (status, err["code"].as_str()),
        (422, Some("unprocessable_entity"))
    );

    // Telegram fails: reconnecting, then failing, with the reason; connected after.
    w.tg.outage("getUpdates", 3);
    let down = api.wait_state("reconnecting").await;
    let reason = down["reason"].as_str().unwrap();
    assert!(reason.contains("Bad Gateway"), "{down}");
    assert!(!reason.contains(FakeTelegram::TOKEN), "{down}");
    let failing = api.wait_state("failing").await;
    assert!(
        failing["reason"].as_str().unwrap().contains("Bad Gateway"),
        "{failing}"
    );
    assert_eq!(
        failing["since"], down["since"],
        "since: when the failures began"
    );
    assert!(failing["status"].as_str().unwrap().starts_with("error: "));
    let back = api.wait_state("connected").await;
    assert_eq!(back["reason"], serde_json::Value::Null);
    assert!(
        back["last_error"].as_str().unwrap().contains("Bad Gateway"),
        "{back}"
    );
    assert!(back["last_error_at"].is_string(), "{back}");
    assert_eq!(w.tg.outage_left("getUpdates"), 0);
    // And it receives again.
    w.llm.push(MockReply::text(&["Back."]));
    w.tg.dm(ALICE, "Alice", "still there?");
    w.wait_message(ALICE, "a reply after the outage", |m| {
        m.text.contains("Back.")
    })
    .await;
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
