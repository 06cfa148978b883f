//! `/v1/settings` and `/v1/providers` against a real `serve` with a configuration file: the
//! model, the key and a Telegram channel changed while serving (no restart), what is written
//! where (the key and token only in the 0600 secrets file, never in an answer), a refused
//! token leaving the files as they were, settings an environment variable sets refused, and
//! a configuration that is not a file refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use common::{TOKEN, bin, client, send, until_run_ends};
use serde_json::{Value, json};
use switchboard_protocol::CreateSessionRequest;
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::{MockLlm, MockReply};
use switchboard_test_support::process::ServerProcess;

struct Api {
    http: reqwest::Client,
    url: String,
}

impl Api {
    fn new(server: &ServerProcess) -> Api {
        Api {
            http: reqwest::Client::new(),
            url: server.url.clone(),
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(TOKEN)
            .timeout(Duration::from_secs(60));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn put(&self, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::PUT, "/v1/settings", Some(body))
            .await
    }
}

/// The model the last chat request to the mock named.
fn last_model(llm: &MockLlm) -> String {
    llm.requests()
        .into_iter()
        .rev()
        .find(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.body["model"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

/// One message in a new session, to its end: the model the mock was asked for.
async fn chat_model(server: &ServerProcess, llm: &MockLlm) -> String {
    let c = client(server);
    let s = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let (mut events, run) = send(&c, s.id, "hello").await;
    until_run_ends(&mut events, run).await;
    last_model(llm)
}

#[tokio::test]
async fn settings_change_the_model_key_and_channels_while_serving() {
    let llm = MockLlm::start().await;
    llm.set_responder(|_| MockReply::text(&["hi"]));
    let tg = FakeTelegram::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "# mine\n[provider]\nkind = \"openai\"\nbase_url = \"{}\"\nmodel = \"first-model\"\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let secrets = dir.path().join("secrets.toml");
    let tg_url = tg.base_url();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
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
        ],
    )
    .await
    .unwrap();
    let api = Api::new(&server);

    // What is in force, and what the environment sets.
    let (status, s) = api.get("/v1/settings").await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["provider"]["model"], "first-model");
    assert_eq!(s["provider"]["api_key_set"], false);
    assert_eq!(s["writable"], true);
    assert_eq!(
        s["environment"]["default_permission_mode"],
        "SWITCHBOARD_PERMISSION_MODE"
    );
    assert_eq!(
        s["channels"][0],
        json!({"name": "telegram", "configured": false})
    );
    assert_eq!(chat_model(&server, &llm).await, "first-model");

    // Another model: the next run uses it, no restart.
    let (status, s) = api
        .put(json!({"provider": {"model": "second-model"}}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["provider"]["model"], "second-model");
    assert_eq!(chat_model(&server, &llm).await, "second-model");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(
        text.starts_with("# mine\n") && text.contains("model = \"second-model\""),
        "{text}"
    );

    // A key: checked by listing the models with it, kept in the secrets file only.
    let (status, s) = api
        .put(json!({"provider": {"api_key": "sk-live-secret-1"}}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["provider"]["api_key_set"], true);
    assert!(!s.to_string().contains("sk-live"), "{s}");
    let models_call = llm
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path.ends_with("/models"))
        .unwrap();
    assert_eq!(
        models_call.header("authorization"),
        Some("Bearer sk-live-secret-1")
    );
    assert!(
        !std::fs::read_to_string(&config)
            .unwrap()
            .contains("sk-live")
    );
    assert!(
        std::fs::read_to_string(&secrets)
            .unwrap()
            .contains("api_key = \"sk-live-secret-1\"")
    );
    assert_eq!(
        std::fs::metadata(&secrets).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The next run calls the provider with it.
    chat_model(&server, &llm).await;
    let chat = llm
        .requests()
        .into_iter()
        .rev()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    assert_eq!(
        chat.header("authorization"),
        Some("Bearer sk-live-secret-1")
    );

    // The providers, and the models of the one in force (with its key).
    let (status, p) = api.get("/v1/providers").await;
    assert_eq!(status, 200, "{p}");
    let names: Vec<&str> = p["providers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        names.starts_with(&["openai", "anthropic", "openrouter"]),
        "{names:?}"
    );
    let current: Vec<&Value> = p["providers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["current"] == true)
        .collect();
    assert_eq!(current.len(), 1, "{p}");
    let (status, m) = api.get("/v1/providers/current/models").await;
    assert_eq!(
        (status, m["models"].clone()),
        (200, json!(["mock-model"])),
        "{m}"
    );
    assert_eq!(api.get("/v1/providers/nope/models").await.0, 404);

    // A Telegram token the platform refuses: 422, and the files are as they were.
    let before = (
        std::fs::read_to_string(&config).unwrap(),
        std::fs::read_to_string(&secrets).unwrap(),
    );
    let (status, e) = api.put(json!({"telegram": {"token": "42:WRONG"}})).await;
    assert_eq!(
        (status, e["code"].as_str()),
        (422, Some("check_failed")),
        "{e}"
    );
    assert!(!e.to_string().contains("WRONG"), "{e}");
    assert_eq!(
        before,
        (
            std::fs::read_to_string(&config).unwrap(),
            std::fs::read_to_string(&secrets).unwrap()
        )
    );
    assert_eq!(api.get("/v1/gateway/status").await.0, 404);

    // The right one: the channel starts without a restart, and a DM reaches the agent.
    let (status, s) = api
        .put(json!({"telegram": {"token": FakeTelegram::TOKEN}}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(
        s["channels"][0],
        json!({"name": "telegram", "configured": true})
    );
    assert!(!s.to_string().contains("TEST-TOKEN"), "{s}");
    let (status, g) = api.get("/v1/gateway/status").await;
    assert_eq!(status, 200, "{g}");
    assert_eq!(g["channels"][0]["name"], "telegram", "{g}");
    let (status, t) = api
        .call(
            reqwest::Method::POST,
            "/v1/settings/channels/telegram/test",
            None,
        )
        .await;
    assert_eq!(status, 200, "{t}");
    assert!(
        t["identity"]
            .as_str()
            .unwrap()
            .contains(FakeTelegram::BOT_USERNAME),
        "{t}"
    );
    assert_eq!(
        t["link"],
        format!("https://t.me/{}", FakeTelegram::BOT_USERNAME)
    );
    assert!(
        std::fs::read_to_string(&secrets)
            .unwrap()
            .contains(FakeTelegram::TOKEN)
    );
    // Unknown users get a pairing code from the running channel.
    tg.dm(7, "Ada", "hello bot");
    tg.wait_until(Duration::from_secs(20), "a pairing answer", |t| {
        !t.bot_messages(7).is_empty()
    })
    .await;

    // What the environment sets is refused, naming the variable.
    let (status, e) = api
        .put(json!({"default_permission_mode": "read-only"}))
        .await;
    assert_eq!(
        (status, e["code"].as_str()),
        (409, Some("set_by_environment")),
        "{e}"
    );
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("SWITCHBOARD_PERMISSION_MODE")
    );
    // Unknown fields are refused, not ignored.
    assert_eq!(api.put(json!({"provider": {"modle": "x"}})).await.0, 400);

    // Removed: the channel stops, its section is gone from both files.
    let (status, s) = api.put(json!({"remove_channels": ["telegram"]})).await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["channels"][0]["configured"], false);
    assert_eq!(api.get("/v1/gateway/status").await.0, 404);
    assert!(
        !std::fs::read_to_string(&secrets)
            .unwrap()
            .contains("telegram")
    );
}

#[tokio::test]
async fn a_configuration_that_is_not_a_file_is_read_only() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let server = common::start(&dir.path().join("data"), &llm.base_url(), &[]).await;
    let api = Api::new(&server);
    let (status, s) = api.get("/v1/settings").await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["writable"], false);
    assert_eq!(s["environment"]["provider.model"], "SWITCHBOARD_MODEL");
    let (status, e) = api.put(json!({"provider": {"model": "x"}})).await;
    assert_eq!(
        (status, e["code"].as_str()),
        (409, Some("settings_read_only")),
        "{e}"
    );
}

#[tokio::test]
async fn the_default_permission_mode_reaches_new_sessions_only() {
    let llm = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nbase_url = \"{}\"\nmodel = \"m\"\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let server = ServerProcess::start(
        &bin(),
        &dir.path().join("data"),
        TOKEN,
        &[
            ("SWITCHBOARD_CONFIG", config.to_str().unwrap()),
            ("SWITCHBOARD_DEFAULT_CWD", "/tmp"),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
            ("SWITCHBOARD_LOCAL_MODEL_PORTS", "off"),
        ],
    )
    .await
    .unwrap();
    let api = Api::new(&server);
    let c = client(&server);
    let before = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let (status, s) = api
        .put(json!({"default_permission_mode": "read-only"}))
        .await;
    assert_eq!(status, 200, "{s}");
    assert_eq!(s["default_permission_mode"], "read-only");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("permission_mode = \"read-only\"")
    );
    let after = c
        .create_session(&CreateSessionRequest::default())
        .await
        .unwrap();
    let mode = |id| {
        let c = c.clone();
        async move { c.get_session(id).await.unwrap().config.permission_mode }
    };
    assert_eq!(
        mode(before.id).await,
        switchboard_protocol::PermissionMode::WorkspaceWrite
    );
    assert_eq!(
        mode(after.id).await,
        switchboard_protocol::PermissionMode::ReadOnly
    );
    // What the console offers a new session follows.
    let (status, me) = api.get("/v1/console/me").await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["default_permission_mode"], "read-only");
    assert_eq!(me["default_model"], "m");
}

/// A client that gives up while a change is being checked does not leave it half done: the
/// change carries on, and is applied (or put back) as if it had waited.
#[tokio::test]
async fn a_change_whose_client_goes_away_is_finished_anyway() {
    let llm = MockLlm::start().await;
    let tg = FakeTelegram::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(
        &config,
        format!(
            "[provider]\nbase_url = \"{}\"\nmodel = \"m\"\n",
            llm.base_url()
        ),
    )
    .unwrap();
    let tg_url = tg.base_url();
    let server = ServerProcess::start(
        &bin(),
        &dir.path().join("data"),
        TOKEN,
        &[
            ("SWITCHBOARD_CONFIG", config.to_str().unwrap()),
            ("SWITCHBOARD_DEFAULT_CWD", "/tmp"),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
            ("SWITCHBOARD_LOCAL_MODEL_PORTS", "off"),
            ("SWITCHBOARD_TELEGRAM_BASE_URL", &tg_url),
            ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
        ],
    )
    .await
    .unwrap();
    // Telegram takes two seconds to say who the bot is; the client waits a quarter of one.
    tg.slow_answers("getMe", 1, Duration::from_secs(2));
    let gave_up = reqwest::Client::new()
        .put(format!("{}/v1/settings", server.url))
        .bearer_auth(TOKEN)
        .json(&json!({"telegram": {"token": FakeTelegram::TOKEN}}))
        .timeout(Duration::from_millis(250))
        .send()
        .await;
    assert!(gave_up.is_err(), "the client was meant to give up");
    let api = Api::new(&server);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let (_, s) = api.get("/v1/settings").await;
        if s["channels"][0]["configured"] == true {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the change was not finished: {s}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(api.get("/v1/gateway/status").await.0, 200);
}

/// The README's path: `serve` started with no configuration file and no variables, the model
/// chosen over the API (the console's Settings page): the configuration file is made where
/// `setup` would make it, and the next chat streams an answer — no restart, nothing edited.
#[tokio::test]
async fn without_a_configuration_file_the_settings_make_the_default_one() {
    let llm = MockLlm::start().await;
    llm.set_responder(|_| MockReply::text(&["hello", " there"]));
    let dir = tempfile::tempdir().unwrap();
    let xdg = dir.path().join("xdg");
    let server = ServerProcess::start(
        &bin(),
        &dir.path().join("data"),
        TOKEN,
        &[
            ("XDG_CONFIG_HOME", xdg.to_str().unwrap()),
            ("SWITCHBOARD_DEFAULT_CWD", "/tmp"),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
            ("SWITCHBOARD_LOCAL_MODEL_PORTS", "off"),
        ],
    )
    .await
    .unwrap();
    let api = Api::new(&server);
    let (_, s) = api.get("/v1/settings").await;
    assert_eq!(s["writable"], true, "{s}");
    assert!(s["provider"]["model"].is_null(), "{s}");
    let (status, s) = api
        .put(json!({"provider": {"kind": "openai", "base_url": llm.base_url()}}))
        .await;
    assert_eq!(status, 200, "{s}");
    // No model given: the provider's first one to chat with.
    assert_eq!(s["provider"]["model"], "mock-model", "{s}");
    let file = xdg.join("switchboard/switchboard.toml");
    assert_eq!(s["config_file"], file.to_str().unwrap());
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(chat_model(&server, &llm).await, "mock-model");
}
