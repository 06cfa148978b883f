//! `switchboard setup` and the first run: the configuration and secrets it writes, a model
//! server on this machine found with nothing configured, and what a user without any model
//! is told.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{TOKEN, bin};
use switchboard_test_support::fake_telegram::FakeTelegram;
use switchboard_test_support::mock_llm::MockLlm;
use switchboard_test_support::process::ServerProcess;

/// Runs `switchboard ARGS` with `env`, `stdin` written to it, off the async runtime.
async fn run(args: &[&str], env: &[(&str, &str)], stdin: &str) -> Output {
    let mut cmd = Command::new(bin());
    cmd.args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let stdin = stdin.to_string();
    tokio::task::spawn_blocking(move || {
        let mut child = cmd.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    })
    .await
    .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The last request to the mock at `path` carried `Authorization: Bearer KEY`.
fn bearer_of(llm: &MockLlm, path: &str) -> Option<String> {
    llm.requests()
        .into_iter()
        .rev()
        .find(|r| r.path.ends_with(path))
        .and_then(|r| r.header("authorization").map(str::to_string))
}

/// The mock model and the fake Telegram, and where `setup` writes (`file`, under a
/// directory that may not exist yet).
struct World {
    llm: MockLlm,
    tg: FakeTelegram,
    dir: tempfile::TempDir,
    config: std::path::PathBuf,
    config_s: String,
    tg_url: String,
}

impl World {
    async fn new(file: &str) -> World {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join(file);
        let tg = FakeTelegram::start().await;
        World {
            llm: MockLlm::start().await,
            config_s: config.to_string_lossy().to_string(),
            tg_url: tg.base_url(),
            tg,
            dir,
            config,
        }
    }
}

/// `setup`'s environment: the configuration file, the fake Telegram, no local model servers
/// looked for.
fn setup_env<'a>(config_s: &'a str, tg_url: &'a str) -> [(&'a str, &'a str); 3] {
    [
        ("SWITCHBOARD_CONFIG", config_s),
        ("SWITCHBOARD_TELEGRAM_BASE_URL", tg_url),
        ("SWITCHBOARD_LOCAL_MODEL_PORTS", "off"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_with_flags_writes_the_config_and_a_private_secrets_file_and_the_next_chat_works() {
    // A directory that does not exist yet, as on a fresh machine.
    let World {
        llm,
        tg: _tg,
        dir,
        config,
        config_s,
        tg_url,
    } = World::new("conf/switchboard.toml").await;
    let secrets = dir.path().join("conf/secrets.toml");
    let env = setup_env(&config_s, &tg_url);
    let out = run(
        &[
            "setup",
            "--provider",
            &llm.base_url(),
            "--api-key-stdin",
            "--telegram-token",
            FakeTelegram::TOKEN,
            "--yes",
        ],
        &env,
        "sk-setup-secret\n",
    )
    .await;
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(said.contains("1 models"), "the models were listed: {said}");
    assert!(
        said.contains("test call to mock-model: Hello from mock"),
        "the test call's answer is shown: {said}"
    );
    assert!(
        said.contains("@switchboard_test_bot")
            && said.contains("https://t.me/switchboard_test_bot"),
        "the bot is named, with the link to talk to it: {said}"
    );
    assert_eq!(
        bearer_of(&llm, "/models").as_deref(),
        Some("Bearer sk-setup-secret")
    );

    let written = std::fs::read_to_string(&config).unwrap();
    assert!(written.contains("model = \"mock-model\""), "{written}");
    assert!(written.contains(&llm.base_url()), "{written}");
    assert!(
        !written.contains("sk-setup-secret") && !written.contains(FakeTelegram::TOKEN),
        "no secret in the configuration file: {written}"
    );
    let kept = std::fs::read_to_string(&secrets).unwrap();
    assert!(
        kept.contains("sk-setup-secret") && kept.contains(FakeTelegram::TOKEN),
        "{kept}"
    );
    assert_eq!(
        mode(&secrets),
        0o600,
        "the secrets file is the owner's alone"
    );
    assert_eq!(mode(&dir.path().join("conf")), 0o700);

    // Again, with nothing given: everything is kept, the file edited in place — a model
    // the provider does not list (an alias) too.
    let aliased = written.replace("model = \"mock-model\"", "model = \"my-alias\"");
    std::fs::write(&config, format!("# my notes\n{aliased}")).unwrap();
    let again = run(&["setup", "--yes", "--no-test"], &env, "").await;
    assert!(again.status.success(), "{}", text(&again));
    let rewritten = std::fs::read_to_string(&config).unwrap();
    assert!(rewritten.starts_with("# my notes\n"), "{rewritten}");
    assert!(rewritten.contains("model = \"my-alias\""), "{rewritten}");
    assert!(text(&again).contains("\"my-alias\" is not among the models"));
    assert!(
        std::fs::read_to_string(&secrets)
            .unwrap()
            .contains("sk-setup-secret")
    );
    std::fs::write(&config, &written).unwrap();

    // Only a channel, the model set up: the provider is left as it is (no listing, no call).
    let before = llm.requests().len();
    let mut channel_env = env.to_vec();
    channel_env.push(("SWITCHBOARD_TELEGRAM_TOKEN", FakeTelegram::TOKEN));
    let channel_only = run(&["setup", "--yes"], &channel_env, "").await;
    assert!(channel_only.status.success(), "{}", text(&channel_only));
    assert!(
        text(&channel_only).contains("provider: keeping openai"),
        "{}",
        text(&channel_only)
    );
    assert!(text(&channel_only).contains("telegram: ok"));
    assert_eq!(llm.requests().len(), before, "the model was not called");
    // A token in the environment that is not the one given would win: refused.
    let mut conflict_env = env.to_vec();
    conflict_env.push(("SWITCHBOARD_TELEGRAM_TOKEN", "999:OTHER"));
    let conflict = run(
        &["setup", "--yes", "--telegram-token", FakeTelegram::TOKEN],
        &conflict_env,
        "",
    )
    .await;
    assert!(!conflict.status.success());
    assert!(
        text(&conflict)
            .contains("SWITCHBOARD_TELEGRAM_TOKEN is set in this environment to another token"),
        "{}",
        text(&conflict)
    );

    // The server reads both files: the model, the key and the channel, nothing exported.
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        &bin(),
        data.path(),
        TOKEN,
        &[
            ("SWITCHBOARD_CONFIG", config_s.as_str()),
            ("SWITCHBOARD_TELEGRAM_BASE_URL", tg_url.as_str()),
            ("SWITCHBOARD_TELEGRAM_POLL_TIMEOUT_SECS", "1"),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
        ],
    )
    .await
    .unwrap();
    let logs = server
        .wait_for_log("console: ", Duration::from_secs(10))
        .await;
    assert!(logs.contains("model: mock-model"), "{logs}");
    assert!(logs.contains("channels: telegram"), "{logs}");
    let chat = run(
        &["chat", "--cwd", "/tmp", "hello"],
        &[
            ("SWITCHBOARD_URL", server.url.as_str()),
            ("SWITCHBOARD_TOKEN", TOKEN),
            ("SWITCHBOARD_CONFIG", config_s.as_str()),
        ],
        "",
    )
    .await;
    assert!(chat.status.success(), "{}", text(&chat));
    assert_eq!(
        String::from_utf8_lossy(&chat.stdout).trim(),
        "Hello from mock"
    );
    assert_eq!(
        bearer_of(&llm, "/chat/completions").as_deref(),
        Some("Bearer sk-setup-secret"),
        "the server called the model with the key from the secrets file"
    );

    let doctor = run(&["doctor"], &env, "").await;
    assert!(
        text(&doctor).contains(&format!("{} (mode 0600)", secrets.display())),
        "{}",
        text(&doctor)
    );

    // Another provider never gets the key: choosing one without a key removes it.
    let other = MockLlm::start().await;
    let switched = run(
        &[
            "setup",
            "--provider",
            &other.base_url(),
            "--yes",
            "--no-test",
        ],
        &env,
        "",
    )
    .await;
    assert!(switched.status.success(), "{}", text(&switched));
    assert_eq!(
        bearer_of(&other, "/models"),
        None,
        "no key sent to the new provider"
    );
    let kept = std::fs::read_to_string(&secrets).unwrap();
    assert!(!kept.contains("sk-setup-secret"), "{kept}");
    assert!(
        kept.contains(FakeTelegram::TOKEN),
        "the channel's token stays: {kept}"
    );

    // A secrets file others may read is refused, with what to do.
    std::fs::set_permissions(&secrets, std::fs::Permissions::from_mode(0o644)).unwrap();
    let refused = run(&["doctor"], &env, "").await;
    let said = text(&refused);
    assert!(!refused.status.success(), "{said}");
    assert!(said.contains("chmod 600"), "{said}");
}

/// The questions, answered at a real (pseudo-)terminal: the provider picked with the arrow
/// keys, its URL typed, the key typed without echo, the model and a Telegram bot chosen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_asks_at_a_terminal_and_never_echoes_a_secret() {
    let llm = MockLlm::start().await;
    let tg = FakeTelegram::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("switchboard.toml");
    let secrets = dir.path().join("secrets.toml");
    let down = "\u{1b}[B";
    let steps = serde_json::json!([
        {"expect": "Which model provider?"},
        // OpenAI, Anthropic, OpenRouter, then "another OpenAI-compatible server".
        {"send": format!("{down}{down}{down}\r")},
        {"expect": "Its base URL"},
        {"send": format!("{}\r", llm.base_url())},
        {"expect": "API key for"},
        {"send": "sk-typed-secret\r"},
        {"expect": "Which model?"},
        {"send": "\r"},
        {"expect": "test call to mock-model: Hello from mock"},
        {"expect": "Connect a chat channel"},
        {"send": "y"},
        {"expect": "Which?"},
        {"send": "\r"},
        {"expect": "Telegram bot token"},
        {"send": format!("{}\r", FakeTelegram::TOKEN)},
        {"expect": "https://t.me/switchboard_test_bot"},
        {"expect": "wrote "},
    ]);
    let driver = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/pty_drive.py");
    let bin = bin().to_string_lossy().to_string();
    let mut cmd = Command::new("python3");
    cmd.args([driver, &steps.to_string(), &bin, "setup"])
        .env("SWITCHBOARD_CONFIG", &config)
        .env("SWITCHBOARD_TELEGRAM_BASE_URL", tg.base_url())
        .env("SWITCHBOARD_LOCAL_MODEL_PORTS", "off")
        .env("TERM", "xterm");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let screen = text(&out);
    assert!(out.status.success(), "{screen}");
    assert!(
        !screen.contains("sk-typed-secret") && !screen.contains(FakeTelegram::TOKEN),
        "a secret was echoed: {screen}"
    );
    assert_eq!(
        bearer_of(&llm, "/models").as_deref(),
        Some("Bearer sk-typed-secret")
    );
    let written = std::fs::read_to_string(&config).unwrap();
    assert!(written.contains("model = \"mock-model\""), "{written}");
    let kept = std::fs::read_to_string(&secrets).unwrap();
    assert!(
        kept.contains("sk-typed-secret") && kept.contains(FakeTelegram::TOKEN),
        "{kept}"
    );
    assert_eq!(mode(&secrets), 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_or_token_is_refused_before_anything_is_written() {
    let World {
        llm,
        tg: _tg,
        dir: _dir,
        config,
        config_s,
        tg_url,
    } = World::new("switchboard.toml").await;
    let env = setup_env(&config_s, &tg_url);
    let out = run(
        &[
            "setup",
            "--provider",
            &llm.base_url(),
            "--telegram-token",
            "999:WRONG",
            "--yes",
        ],
        &env,
        "",
    )
    .await;
    let said = text(&out);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("telegram: the token was not accepted"),
        "{said}"
    );
    assert!(
        !said.contains("999:WRONG"),
        "the token is not repeated: {said}"
    );
    assert!(!config.exists(), "nothing written");

    let unknown = run(&["setup", "--provider", "gemini", "--yes"], &env, "").await;
    assert!(!unknown.status.success());
    assert!(text(&unknown).contains("expected openai, anthropic, openrouter, local"));
}

/// Ollama's port, where a model server is looked for first: a mock model server there is
/// found and used with nothing configured. (This port must be free on the machine running
/// the tests.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_server_on_this_machine_is_found_and_used_with_nothing_configured() {
    let llm = MockLlm::start_on(11434).await;
    let data = tempfile::tempdir().unwrap();
    let server = ServerProcess::start(
        &bin(),
        data.path(),
        TOKEN,
        &[
            ("SWITCHBOARD_CONFIG", "/dev/null"),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
        ],
    )
    .await
    .unwrap();
    let logs = server
        .wait_for_log("console: ", Duration::from_secs(10))
        .await;
    assert!(
        logs.contains("model: mock-model on Ollama at http://127.0.0.1:11434/v1"),
        "{logs}"
    );
    let chat = run(
        &["chat", "--cwd", "/tmp", "hello"],
        &[
            ("SWITCHBOARD_URL", server.url.as_str()),
            ("SWITCHBOARD_TOKEN", TOKEN),
            ("SWITCHBOARD_CONFIG", "/dev/null"),
        ],
        "",
    )
    .await;
    assert!(chat.status.success(), "{}", text(&chat));
    assert_eq!(
        String::from_utf8_lossy(&chat.stdout).trim(),
        "Hello from mock"
    );
    assert_eq!(llm.chat_requests().len(), 1);

    let doctor = run(
        &["doctor"],
        &[
            ("SWITCHBOARD_CONFIG", "/dev/null"),
            ("SWITCHBOARD_DATA_DIR", &data.path().to_string_lossy()),
        ],
        "",
    )
    .await;
    assert!(
        text(&doctor)
            .contains("mock-model on Ollama at http://127.0.0.1:11434/v1 (found on this machine;"),
        "{}",
        text(&doctor)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_any_model_the_start_and_the_chat_say_to_run_setup() {
    let data = tempfile::tempdir().unwrap();
    let closed = common::free_port().to_string();
    let server = ServerProcess::start(
        &bin(),
        data.path(),
        TOKEN,
        &[
            ("SWITCHBOARD_CONFIG", "/dev/null"),
            ("SWITCHBOARD_CHECKPOINTS", "false"),
            ("SWITCHBOARD_LOCAL_MODEL_PORTS", closed.as_str()),
        ],
    )
    .await
    .unwrap();
    let logs = server
        .wait_for_log("console: ", Duration::from_secs(10))
        .await;
    assert!(
        logs.contains("no local model server found: run `switchboard setup`"),
        "{logs}"
    );
    assert!(logs.contains("channels: none"), "{logs}");
    let chat = run(
        &["chat", "--cwd", "/tmp", "hello"],
        &[
            ("SWITCHBOARD_URL", server.url.as_str()),
            ("SWITCHBOARD_TOKEN", TOKEN),
            ("SWITCHBOARD_CONFIG", "/dev/null"),
        ],
        "",
    )
    .await;
    assert!(!chat.status.success());
    assert!(
        text(&chat).contains("run `switchboard setup` on the server"),
        "{}",
        text(&chat)
    );
    // And where the console's Settings are, on the server it talked to.
    assert!(
        text(&chat).contains(&format!("{}/#/settings", server.url.trim_end_matches('/'))),
        "{}",
        text(&chat)
    );
}

/// The repository's Dockerfile builds the release binary as the README installs it, keeps
/// the build output and history out of its context, and sets only settings that exist;
/// where a container engine runs (`docker info` or `podman info` answers), the image is
/// built and its binary run. (None runs on the CI machine: there, the checks above.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dockerfile_builds_a_small_image_of_the_release_binary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    assert!(dockerfile.contains("cargo build --release --locked -p switchboard"));
    assert!(
        dockerfile.contains("FROM debian:bookworm-slim"),
        "a slim runtime image"
    );
    assert!(dockerfile.contains("USER switchboard"), "not root");
    let ignore = std::fs::read_to_string(root.join(".dockerignore")).unwrap();
    for kept_out in ["target", ".git"] {
        assert!(ignore.lines().any(|l| l.trim() == kept_out), "{kept_out}");
    }
    // Every SWITCHBOARD_* the image sets is one the binary reads.
    let sources: String = ["src/config/mod.rs", "src/config/parse.rs"]
        .iter()
        .map(|f| std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(f)).unwrap())
        .collect();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("cargo install --locked --path crates/cli"));
    for var in dockerfile
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("SWITCHBOARD_"))
    {
        assert!(
            sources.contains(&format!("\"{var}\"")),
            "{var} is not a setting"
        );
    }
    let engine = ["docker", "podman"].into_iter().find(|e| {
        Command::new(e)
            .arg("info")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    let Some(engine) = engine else {
        eprintln!("no container engine runs here: the image is not built");
        return;
    };
    let tag = "switchboard-test-image";
    let built = Command::new(engine)
        .args(["build", "-q", "-t", tag])
        .arg(&root)
        .output()
        .unwrap();
    assert!(built.status.success(), "{}", text(&built));
    let ran = Command::new(engine)
        .args(["run", "--rm", tag, "--version"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&ran.stdout).starts_with("switchboard "),
        "{}",
        text(&ran)
    );
}
