#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The console as a daily tool, in headless Chromium (`tests/e2e/daily.mjs`): the approvals
//! inbox across sessions, notifications, the manifest and service worker with an offline
//! start, the connection banner across a real kill and restart, the home composer, session
//! settings, the Channels page with a pairing request from a fake Telegram user, chat basics
//! and the relay's empty state.
//!
//! The script asks this test for what only it can do, one line each way: it prints
//! `@@ {"cmd": …}` on its stdout and reads one JSON line answer on its stdin — `kill` and
//! `restart` the server (same data, same port, so the browser's cookie still works), `dm`
//! (a Telegram user writes to the bot), `bot_messages` (what the bot sent a chat), `outage`
//! (Telegram answers the next polls 502).

mod common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{Value, json};
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::{MockLlm, MockReply, RecordedRequest};
use switchboard_test_support::process::ServerProcess;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn chromium() -> PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("no chromium found (scripts/test installs Debian's `chromium`)")
}

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
    let root = repo_root();
    let e2e = root.join("tests/e2e");
    assert!(
        e2e.join("node_modules/playwright-core").exists(),
        "playwright-core is missing: run scripts/test (it runs `npm ci` in tests/e2e)"
    );
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

    let shots = root.join("target/console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut child = tokio::process::Command::new("node")
        .arg(e2e.join("daily.mjs"))
        .current_dir(&e2e)
        .env("SB_URL", &url)
        .env("SB_TOKEN", TOKEN)
        .env("SB_WORKSPACE", &ws)
        .env("SB_SCREENSHOTS", &shots)
        .env("CHROMIUM", chromium())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let stderr = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut out = String::new();
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(l)) = lines.next_line().await {
            out.push_str(&l);
            out.push('\n');
        }
        out
    });
    let deadline = Instant::now() + Duration::from_secs(400);
    let mut stdout = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match tokio::time::timeout(left, lines.next_line()).await {
            Ok(Ok(Some(l))) => l,
            Ok(_) => break,
            Err(_) => panic!("the browser test did not finish within 400 s:\n{stdout}"),
        };
        let Some(cmd) = line.strip_prefix("@@ ") else {
            println!("{line}");
            stdout.push_str(&line);
            stdout.push('\n');
            continue;
        };
        let cmd: Value = serde_json::from_str(cmd).unwrap();
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
        stdin
            .write_all(format!("{answer}\n").as_bytes())
            .await
            .unwrap();
    }
    let status = child.wait().await.unwrap();
    let stderr = stderr.await.unwrap();
    let logs = server.as_ref().map(|s| s.logs()).unwrap_or_default();
    assert!(
        status.success(),
        "browser test failed:\n{stdout}\n--- stderr\n{stderr}\n--- server\n{logs}"
    );
    assert!(!stdout.contains("not ok"), "{stdout}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    for shot in ["10-inbox.png", "11-channels.png", "12-home.png"] {
        let p = shots.join(shot);
        assert!(
            std::fs::metadata(&p)
                .map(|m| m.len() > 1000)
                .unwrap_or(false),
            "{} missing",
            p.display()
        );
    }
}
