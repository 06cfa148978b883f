#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The console as a daily tool, in headless Chromium (`tests/e2e/daily.mjs`): the approvals
//! inbox across sessions, notifications, the manifest and service worker with an offline
//! start, the connection banner across a real kill and restart, the home composer, session
//! settings, the Channels page with a pairing request from a fake Telegram user and the
//! delivery ledger of that conversation (a failed message retried), chat basics and the
//! relay's empty state.
//!
//! The script asks this test for what only it can do, one line each way: it prints
//! `@@ {"cmd": …}` on its stdout and reads one JSON line answer on its stdin — `kill` and
//! `restart` the server (same data, same port, so the browser's cookie still works), `dm`
//! (a Telegram user writes to the bot), `bot_messages` (what the bot sent a chat), `outage`
//! (Telegram answers the next polls 502).

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::browser::{Script, assert_shots};
use common::*;
use serde_json::json;
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::{MockLlm, MockReply, RecordedRequest};
use switchboard_test_support::process::ServerProcess;

/// The last message of a chat-completions request: its role and text.
fn last_message(r: &RecordedRequest) -> (String, String) {
    let m = r.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    (
        m["role"].as_str().unwrap_or_default().to_string(),
        m["content"].as_str().unwrap_or_default().to_string(),
    )
}

/// Replies chosen by what the user wrote, so the script's steps need no fixed order.
fn responder(llm: &MockLlm) {
    let failures = Arc::new(AtomicUsize::new(0));
    let chat_failures = Arc::new(AtomicUsize::new(0));
    llm.set_responder(move |r| {
        let (role, text) = last_message(r);
        if role == "tool" {
            return MockReply::text(&["The tool ran."]);
        }
        if let Some(tag) = text
            .split_whitespace()
            .find_map(|w| w.strip_prefix("approve-me-"))
        {
            return MockReply::tool_call(
                &format!("call_{tag}"),
                "run_command",
                json!({"command": format!("echo inbox-{tag}")}),
            );
        }
        if text.contains("fail once") && failures.fetch_add(1, Ordering::SeqCst) == 0 {
            return MockReply::status(500, r#"{"error":{"message":"the model broke"}}"#);
        }
        if text.contains("fail once") {
            return MockReply::text(&["Recovered on the retry."]);
        }
        if text.contains("show code") {
            return MockReply::text(&[
                "| Tool | Runs |\n|:-----|-----:|\n| `cargo` | **12** |\n| npm | 3 |\n\n",
                "```rust\nfn main() { let answer = 42; println!(\"{answer} is a very long line that scrolls sideways instead of wrapping, because code keeps its lines as written and a wrapped line would read as two; this one is long enough to scroll on any screen\"); }\n```\n",
            ]);
        }
        if text.contains("break in chat") && chat_failures.fetch_add(1, Ordering::SeqCst) == 0 {
            return MockReply::status(500, r#"{"error":{"message":"the model broke"}}"#);
        }
        if text.contains("break in chat") {
            return MockReply::text(&["Fixed on the retry."]);
        }
        if text.contains("hello from telegram") {
            return MockReply::text(&["Hi, Telegram user."]);
        }
        MockReply::text(&["Started from the home screen."])
    });
}

async fn serve(
    data: &Path,
    llm: &MockLlm,
    listen: &str,
    tg: &FakeTelegram,
    ws: &Path,
) -> ServerProcess {
    let tg_url = tg.base_url();
    start(
        data,
        &llm.base_url(),
        &[
            ("SWITCHBOARD_LISTEN", listen),
            ("SWITCHBOARD_DEFAULT_CWD", ws.to_str().unwrap()),
            ("SWITCHBOARD_PERMISSION_MODE", "workspace-write"),
            ("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN),
            ("SWITCHBOARD_TELEGRAM_BASE_URL", &tg_url),
            ("SWITCHBOARD_TELEGRAM_ALLOWED_CHATS", "42"),
            ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
            (
                "SWITCHBOARD_BUNDLES_DIR",
                data.parent().unwrap().join("no-bundles").to_str().unwrap(),
            ),
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_as_a_daily_tool_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::create_dir_all(dir.path().join("no-bundles")).unwrap();
    let data = dir.path().join("data");
    let llm = MockLlm::start().await;
    responder(&llm);
    let tg = FakeTelegram::start().await;
    let listen = format!("127.0.0.1:{}", free_port());
    let mut server = Some(serve(&data, &llm, &listen, &tg, &ws).await);
    let url = server.as_ref().unwrap().url.clone();

    let workspace = ws.to_str().unwrap().to_string();
    let mut script = Script::start(
        "daily.mjs",
        &[
            ("SB_URL", &url),
            ("SB_TOKEN", TOKEN),
            ("SB_WORKSPACE", &workspace),
        ],
        Duration::from_secs(400),
    );
    while let Some(cmd) = script.next_command().await {
        let answer = match cmd["cmd"].as_str().unwrap() {
            "kill" => {
                server.as_mut().unwrap().kill().await;
                server = None;
                json!({"ok": true})
            }
            "restart" => {
                server = Some(serve(&data, &llm, &listen, &tg, &ws).await);
                json!({"ok": true})
            }
            "dm" => {
                let id = tg.dm(
                    cmd["user"].as_i64().unwrap(),
                    cmd["name"].as_str().unwrap(),
                    cmd["text"].as_str().unwrap(),
                );
                json!({"update_id": id})
            }
            "outage" => {
                let n = cmd["n"].as_u64().unwrap() as usize;
                tg.outage("getUpdates", n);
                json!({"ok": true})
            }
            "bot_messages" => {
                let texts: Vec<String> = tg
                    .bot_messages(cmd["chat"].as_i64().unwrap())
                    .into_iter()
                    .map(|m| m.text)
                    .collect();
                json!({"texts": texts})
            }
            other => panic!("unknown command from the browser test: {other}"),
        };
        script.answer(answer).await;
    }
    script
        .finish(|| server.as_ref().map(|s| s.logs()).unwrap_or_default())
        .await;
    assert_shots(&[
        "10-inbox.png",
        "11-channels.png",
        "12-home.png",
        "13-ledger.png",
    ]);
}
