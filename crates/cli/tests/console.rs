#![allow(clippy::unwrap_used, clippy::expect_used)] // test code
//! The web console in a real browser: the server with the mock LLM, a relay bundle of two
//! tmux members, and `tests/e2e/console.mjs` driving headless Chromium through
//! `playwright-core` (both installed by `scripts/test`). Screenshots land in
//! `target/console-screenshots/`.

mod common;

use std::time::{Duration, Instant};

use common::browser::{Script, assert_shots};
use common::*;
use serde_json::json;
use switchboard_test_support::mock_llm::{MockLlm, MockReply};

/// The replies, in the order the e2e script's steps ask for them.
fn script(llm: &MockLlm) {
    llm.push(MockReply::text_slow(
        &["Hello **world**.\n\n", "```rust\nfn main() {}\n```\n"],
        50,
    ));
    llm.push(MockReply::tool_call(
        "call_run",
        "run_command",
        json!({"command": "echo tool-output-42"}),
    ));
    llm.push(MockReply::text(&["The command printed tool-output-42."]));
    let parts: Vec<String> = (0..30).map(|i| format!("part-{i} ")).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    llm.push(MockReply::text_slow(&parts, 200));
    llm.push(MockReply::tool_call(
        "call_cli",
        "run_command",
        json!({"command": "echo from-cli"}),
    ));
    llm.push(MockReply::text(&["Approved from the CLI."]));
    llm.push(MockReply::tool_call(
        "call_deny",
        "run_command",
        json!({"command": "rm -rf /tmp/nothing-here"}),
    ));
    llm.push(MockReply::text(&["Understood, not running it."]));
    llm.push(MockReply::text(&[
        "<script>window.__pwned = 1</script>",
        "<img src=x onerror=\"window.__pwned = 2\"> done",
    ]));
    // an image attached in the console; the agent shares a file back
    llm.push(MockReply::tool_call(
        "call_share",
        "send_file",
        json!({"path": "shared.txt", "caption": "the notes"}),
    ));
    llm.push(MockReply::text(&["I see a red pixel."]));
    // a run that changes the workspace: its diff, then undo
    llm.push(MockReply::tool_call(
        "call_notes",
        "create",
        json!({"path": "notes.md", "file_text": "# Notes\nfirst line\n"}),
    ));
    llm.push(MockReply::text(&["Wrote the notes."]));
    // the schedules page: a firing run by hand
    llm.push(MockReply::text(&["Scheduled hello."]));
}

#[tokio::test]
async fn console_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("shared.txt"), "notes from the agent\n").unwrap();
    let bundles = dir.path().join("bundles");
    std::fs::create_dir_all(&bundles).unwrap();
    let member = |id: &str| {
        let log = dir.path().join(format!("{id}.log"));
        let cmd = format!(
            "bash -c 'printf \"> \"; while IFS= read -r l; do printf \"%s\\n\" \"$l\" >> {}; printf \"> \"; done'",
            log.display()
        );
        format!(
            "[[members]]\nid = \"{id}\"\ndirectory = \"{}\"\n[members.tmux]\ncommand = \"{}\"\nquiet_window_ms = 300\n\n",
            ws.display(),
            cmd.replace('"', "\\\"")
        )
    };
    std::fs::write(
        bundles.join("dev.toml"),
        format!(
            "format-version = 1\n{}{}",
            member("builder"),
            member("reviewer")
        ),
    )
    .unwrap();
    std::fs::write(
        bundles.join("policies.toml"),
        "format-version = 1\n[[principals]]\nid = \"alice\"\nname = \"Alice\"\npolicy = \"operator\"\n",
    )
    .unwrap();
    let config = dir.path().join("switchboard.toml");
    std::fs::write(&config, "").unwrap();

    let llm = MockLlm::start().await;
    script(&llm);
    let data = dir.path().join("data");
    let server = start(
        &data,
        &llm.base_url(),
        &[
            ("SWITCHBOARD_BUNDLES_DIR", bundles.to_str().unwrap()),
            ("SWITCHBOARD_CONFIG", config.to_str().unwrap()),
            ("SWITCHBOARD_PERMISSION_MODE", "workspace-write"),
            ("SWITCHBOARD_CHECKPOINTS", "true"),
        ],
    )
    .await;
    // The one-time sign-in link `serve` prints after it listens.
    let start_wait = Instant::now();
    let login_url = loop {
        if let Some(line) = server.logs().lines().find(|l| l.starts_with("console: ")) {
            break line
                .trim_start_matches("console: ")
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
        }
        assert!(
            start_wait.elapsed() < Duration::from_secs(20),
            "{}",
            server.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        login_url.starts_with(&format!("{}/login?code=", server.url)),
        "{login_url}"
    );

    let (bin, ws_s, data_s, config_s) = (
        bin().to_str().unwrap().to_string(),
        ws.to_str().unwrap().to_string(),
        data.to_str().unwrap().to_string(),
        config.to_str().unwrap().to_string(),
    );
    Script::start(
        "console.mjs",
        &[
            ("SB_URL", &server.url),
            ("SB_TOKEN", TOKEN),
            ("SB_LOGIN_URL", &login_url),
            ("SB_BIN", &bin),
            ("SB_WORKSPACE", &ws_s),
            ("SB_BUNDLE", "dev"),
            ("SWITCHBOARD_DATA_DIR", &data_s),
            ("SWITCHBOARD_CONFIG", &config_s),
        ],
        Duration::from_secs(400),
    )
    .finish(|| server.logs())
    .await;
    assert_shots(&[
        "01-sign-in.png",
        "02-session-streamed.png",
        "03-approval-card.png",
        "04-transcript.png",
        "05-relay.png",
        "06-phone-approval.png",
        "07-attachments.png",
    ]);
    assert_eq!(llm.queued(), 0, "every scripted reply was used");
    let attached = llm
        .requests()
        .into_iter()
        .find(|r| r.last_user_text().contains("see attached"))
        .expect("the attached message reached the model");
    assert_eq!(
        attached.images().len(),
        1,
        "the image went as an image part"
    );
    assert_eq!(attached.images()[0].0, "image/png");
    // Leave no tmux server behind.
    let _ = std::process::Command::new("tmux")
        .arg("-S")
        .arg(data.join("run/relay-dev.sock"))
        .arg("kill-server")
        .output();
}

/// Sign-in, cookie, one-time link and the Host/Origin guard over plain HTTP.
#[tokio::test]
async fn console_sign_in_and_guards() {
    let dir = tempfile::tempdir().unwrap();
    let llm = MockLlm::start().await;
    let server = start(&dir.path().join("data"), &llm.base_url(), &[]).await;
    let url = &server.url;
    let host = url.trim_start_matches("http://").to_string();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let code_of = |r: serde_json::Value| r["code"].as_str().unwrap_or("").to_string();

    let page = http.get(format!("{url}/")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(page.text().await.unwrap().contains("/assets/app.js"));
    assert_eq!(
        http.get(format!("{url}/assets/app.js"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        http.get(format!("{url}/assets/nope.js"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );

    // DNS rebinding: a console page under a foreign Host name.
    let r = http
        .get(format!("{url}/"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    assert_eq!(code_of(r.json().await.unwrap()), "host_not_allowed");
    // Health and bearer-token clients are not browsers: no Host check.
    let r = http
        .get(format!("{url}/v1/health"))
        .header("host", "proxy.internal")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // Sign-in with the token.
    let me = http
        .get(format!("{url}/v1/console/me"))
        .send()
        .await
        .unwrap();
    assert_eq!(me.status(), 401);
    let r = http
        .post(format!("{url}/v1/console/login"))
        .json(&json!({"token": "wrong"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(code_of(r.json().await.unwrap()), "invalid_token");
    let r = http
        .post(format!("{url}/v1/console/login"))
        .json(&json!({"token": TOKEN}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let set = r.headers()["set-cookie"].to_str().unwrap().to_string();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    assert!(!set.contains(TOKEN), "the cookie is not the token");
    let cookie = set.split(';').next().unwrap().to_string();

    // The cookie works on every API route, the relay's included.
    let r = http
        .get(format!("{url}/v1/sessions"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = http
        .get(format!("{url}/v1/relay/bundles"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let me: serde_json::Value = http
        .get(format!("{url}/v1/console/me"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["signed_in"], true);
    assert_eq!(me["default_model"], "mock-model");
    // A forged or foreign cookie does not.
    let r = http
        .get(format!("{url}/v1/sessions"))
        .header(
            "cookie",
            "switchboard_session=v1.00000000000000000000000000000000.abc",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    // Same origin passes; a foreign Origin is refused, with the cookie or the token.
    let r = http
        .post(format!("{url}/v1/sessions"))
        .header("cookie", &cookie)
        .header("origin", format!("http://{host}"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    for auth in [
        ("cookie", cookie.clone()),
        ("authorization", format!("Bearer {TOKEN}")),
    ] {
        let r = http
            .post(format!("{url}/v1/sessions"))
            .header(auth.0, &auth.1)
            .header("origin", "http://evil.example")
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403);
        assert_eq!(code_of(r.json().await.unwrap()), "origin_not_allowed");
    }
    let r = http
        .get(format!("{url}/v1/sessions"))
        .header("cookie", &cookie)
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Sign-out clears the cookie.
    let r = http
        .post(format!("{url}/v1/console/logout"))
        .header("cookie", &cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert!(
        r.headers()["set-cookie"]
            .to_str()
            .unwrap()
            .contains("Max-Age=0")
    );

    // The one-time link: works once.
    let start_wait = Instant::now();
    let link = loop {
        if let Some(l) = server.logs().lines().find(|l| l.starts_with("console: ")) {
            break l
                .trim_start_matches("console: ")
                .split_whitespace()
                .next()
                .unwrap()
                .to_string();
        }
        assert!(start_wait.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let bad = http
        .get(format!("{url}/login?code=nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 303);
    assert_eq!(bad.headers()["location"], "/?login=expired");
    assert!(bad.headers().get("set-cookie").is_none());
    let ok = http.get(&link).send().await.unwrap();
    assert_eq!(ok.status(), 303);
    assert_eq!(ok.headers()["location"], "/");
    let c2 = ok.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .split(';')
        .next()
        .unwrap()
        .to_string();
    let r = http
        .get(format!("{url}/v1/sessions"))
        .header("cookie", &c2)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let again = http.get(&link).send().await.unwrap();
    assert_eq!(again.headers()["location"], "/?login=expired");
    assert!(again.headers().get("set-cookie").is_none());
}

/// The console's Markdown renderer and code highlighter, unit-tested in node
/// (`tests/e2e/md.test.mjs`, `node --test`): tables, highlighting per language, escaping,
/// and pathological input in bounded time.
#[tokio::test]
async fn markdown_and_highlighter_unit_tests_pass_in_node() {
    let e2e = common::browser::repo_root().join("tests/e2e");
    let out = tokio::process::Command::new("node")
        .args(["--test", "md.test.mjs"])
        .current_dir(&e2e)
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(180), out)
        .await
        .expect("node --test finished within 180 s")
        .expect("node runs (scripts/test installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
    let passed: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("# pass "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(passed >= 20, "only {passed} tests ran:\n{stdout}");
}
