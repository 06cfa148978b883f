#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The console's Settings page in headless Chromium (`tests/e2e/settings.mjs`): a server
//! started from a configuration file with one model and no chat channel gets another model
//! and a Telegram bot (the fake Telegram) from the page, without a restart.
//!
//! The script asks this test, one JSON line each way, for what only it can do: `dm` (a
//! Telegram user writes), `bot_messages`, `last_model` (the model the mock LLM was last
//! asked for), `secrets` (the secrets file's mode, and whether it holds the token).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{TOKEN, bin};
use serde_json::{Value, json};
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settings_page_changes_the_model_and_connects_telegram_without_a_restart() {
    let root = repo_root();
    let e2e = root.join("tests/e2e");
    assert!(
        e2e.join("node_modules/playwright-core").exists(),
        "playwright-core is missing: run scripts/test (it runs `npm ci` in tests/e2e)"
    );
    let llm = MockLlm::start().await;
    llm.set_responder(|_| MockReply::text(&["hi from the mock"]));
    let tg = FakeTelegram::start().await;
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"first-model\"\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let secrets = dir.path().join("secrets.toml");
    let tg_url = tg.base_url();
    let server = ServerProcess::start(
        &bin(),
        &dir.path().join("data"),
        TOKEN,
        &[
            ("SWITCHBOARD_CONFIG", config.to_str().unwrap()),
            ("SWITCHBOARD_PROVIDER_MAX_RETRIES", "0"),
            ("SWITCHBOARD_DEFAULT_CWD", ws.to_str().unwrap()),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
            ("SWITCHBOARD_LOCAL_MODEL_PORTS", "off"),
            ("SWITCHBOARD_PERMISSION_MODE", "workspace-write"),
            ("SWITCHBOARD_TELEGRAM_BASE_URL", &tg_url),
            ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
            (
                "SWITCHBOARD_BUNDLES_DIR",
                dir.path().join("no-bundles").to_str().unwrap(),
            ),
        ],
    )
    .await
    .unwrap();

    let shots = root.join("target/console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    let mut child = tokio::process::Command::new("node")
        .arg(e2e.join("settings.mjs"))
        .current_dir(&e2e)
        .env("SB_URL", &server.url)
        .env("SB_TOKEN", TOKEN)
        .env("SB_TELEGRAM_TOKEN", FakeTelegram::TOKEN)
        .env("SB_TELEGRAM_BOT", FakeTelegram::BOT_USERNAME)
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
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut stdout = String::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match tokio::time::timeout(left, lines.next_line()).await {
            Ok(Ok(Some(l))) => l,
            Ok(_) => break,
            Err(_) => panic!("the browser test did not finish within 240 s:\n{stdout}"),
        };
        let Some(cmd) = line.strip_prefix("@@ ") else {
            println!("{line}");
            stdout.push_str(&line);
            stdout.push('\n');
            continue;
        };
        let cmd: Value = serde_json::from_str(cmd).unwrap();
        let answer = match cmd["cmd"].as_str().unwrap() {
            "dm" => {
                let id = tg.dm(
                    cmd["user"].as_i64().unwrap(),
                    cmd["name"].as_str().unwrap(),
                    cmd["text"].as_str().unwrap(),
                );
                json!({"update_id": id})
            }
            "bot_messages" => {
                let texts: Vec<String> = tg
                    .bot_messages(cmd["chat"].as_i64().unwrap())
                    .into_iter()
                    .map(|m| m.text)
                    .collect();
                json!({"texts": texts})
            }
            "last_model" => {
                let model = llm
                    .requests()
                    .into_iter()
                    .rev()
                    .find(|r| r.path.ends_with("/chat/completions"))
                    .map(|r| r.body["model"].clone())
                    .unwrap_or(Value::Null);
                json!({"model": model})
            }
            "secrets" => {
                let mode = std::fs::metadata(&secrets)
                    .map(|m| m.permissions().mode() & 0o777)
                    .unwrap_or(0);
                let has_token = std::fs::read_to_string(&secrets)
                    .unwrap_or_default()
                    .contains(FakeTelegram::TOKEN);
                json!({"mode": mode, "has_token": has_token})
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
    assert!(
        status.success(),
        "browser test failed:\n{stdout}\n--- stderr\n{stderr}\n--- server\n{}",
        server.logs()
    );
    assert!(!stdout.contains("not ok"), "{stdout}");
    assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
    // The server was never restarted: the same process served every step.
    assert!(server.pid().is_some());
    let shot = shots.join("13-settings.png");
    assert!(
        std::fs::metadata(&shot)
            .map(|m| m.len() > 1000)
            .unwrap_or(false),
        "{} missing",
        shot.display()
    );
}
