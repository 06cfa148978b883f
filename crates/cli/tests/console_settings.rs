#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The console's Settings page in headless Chromium (`tests/e2e/settings.mjs`): a server
//! started from a configuration file with one model and no chat channel gets another model
//! and a Telegram bot (the fake Telegram) from the page, without a restart.
//!
//! The script asks this test, one JSON line each way, for what only it can do: `dm` (a
//! Telegram user writes), `last_model` (the model the mock LLM was last asked for),
//! `secrets` (the secrets file's mode, and whether it holds the token).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::browser::{Script, assert_shots};
use common::{TOKEN, bin};
use serde_json::{Value, json};
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_settings_page_changes_the_model_and_connects_telegram_without_a_restart() {
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

    let tg_bot = FakeTelegram::BOT_USERNAME;
    let mut script = Script::start(
        "settings.mjs",
        &[
            ("SB_URL", &server.url),
            ("SB_TOKEN", TOKEN),
            ("SB_TELEGRAM_TOKEN", FakeTelegram::TOKEN),
            ("SB_TELEGRAM_BOT", tg_bot),
        ],
        Duration::from_secs(240),
    );
    while let Some(cmd) = script.next_command().await {
        let answer = match cmd["cmd"].as_str().unwrap() {
            "dm" => {
                let id = tg.dm(
                    cmd["user"].as_i64().unwrap(),
                    cmd["name"].as_str().unwrap(),
                    cmd["text"].as_str().unwrap(),
                );
                json!({"update_id": id})
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
        script.answer(answer).await;
    }
    script.finish(|| server.logs()).await;
    // The server was never restarted: the same process served every step.
    assert!(server.pid().is_some());
    assert_shots(&["13-settings.png"]);
}
