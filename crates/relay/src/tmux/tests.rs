use std::process::Stdio;
use std::time::Instant;

use super::command::describe_args;
use super::pane::prompt_visible;
use super::*;

const AGENT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/echo_agent.py");

/// A tempdir with a tmux socket in it; the server is killed when this is dropped, also
/// when a test fails.
struct Harness {
    dir: tempfile::TempDir,
    tmux: Tmux,
}

impl Harness {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        // The socket's directory does not exist yet: `start` creates it.
        let tmux = Tmux::new(dir.path().join("run").join("tmux.sock"));
        Harness { dir, tmux }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn spec(&self, session: &str, command: &str) -> StartSpec {
        StartSpec::new(session, self.dir.path(), command)
    }

    /// Runs tmux directly on the harness socket (as a person would), returning success.
    fn raw(&self, args: &[&str]) -> std::process::Output {
        let mut cmd = std::process::Command::new(TMUX_BIN);
        cmd.arg("-S")
            .arg(self.tmux.socket())
            .arg("-f")
            .arg("/dev/null");
        if std::env::var_os("TERM").is_none() {
            cmd.env("TERM", "xterm-256color");
        }
        cmd.args(args).stdin(Stdio::null()).output().unwrap()
    }

    async fn agent(&self, session: &str, mode: &str, out: &Path) {
        let command = format!(
            "python3 {} {mode} {}",
            quote(AGENT),
            quote(&out.to_string_lossy())
        );
        let outcome = self
            .tmux
            .start(&self.spec(session, &command))
            .await
            .unwrap();
        assert_eq!(outcome, StartOutcome::Started);
        self.wait_screen(session, |lines| lines.last().is_some_and(|l| l == ">"))
            .await;
    }

    /// Polls the pane (up to 10 s) until `pred` holds for its last lines.
    async fn wait_screen(&self, session: &str, pred: impl Fn(&[String]) -> bool) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let lines = self.tmux.capture(session, 100).await.unwrap();
            if pred(&lines) {
                return lines;
            }
            assert!(Instant::now() < deadline, "screen never matched: {lines:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::process::Command::new(TMUX_BIN)
            .arg("-S")
            .arg(self.tmux.socket())
            .arg("-f")
            .arg("/dev/null")
            .arg("kill-server")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Polls for `path` up to 10 s and returns its contents once `pred` accepts them.
async fn wait_file(path: &Path, pred: impl Fn(&[u8]) -> bool) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(data) = tokio::fs::read(path).await
            && pred(&data)
        {
            return data;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn sample_text() -> String {
    format!(
        "first line with \"double\" and 'single' quotes\n$HOME stays $HOME, a back\\slash and `ticks`\n{}\n\ttabbed last line ü",
        "x".repeat(5000)
    )
}

#[tokio::test]
async fn tmux_is_available() {
    let version = Tmux::available().await.unwrap();
    assert!(version.starts_with("tmux "), "{version}");
}

#[tokio::test]
async fn lifecycle_ownership_and_startup_failures() {
    let h = Harness::new();
    let tmux = &h.tmux;
    assert_eq!(tmux.owned_sessions().await.unwrap(), Vec::<String>::new());
    assert_eq!(tmux.pane_state("build").await.unwrap(), None);
    assert!(!tmux.stop("build").await.unwrap());

    let spec = h.spec("build", "sleep 60");
    assert_eq!(tmux.start(&spec).await.unwrap(), StartOutcome::Started);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let parent = tmux.socket().parent().unwrap();
        let mode = std::fs::metadata(parent).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
    }
    assert_eq!(
        tmux.owned_sessions().await.unwrap(),
        vec!["build".to_owned()]
    );
    let state = tmux.pane_state("build").await.unwrap().unwrap();
    assert!(!state.dead && !state.in_mode && state.dead_status.is_none());
    assert!(state.pid.is_some());
    // Exact matching: `b` is not `build`.
    assert_eq!(tmux.pane_state("b").await.unwrap(), None);
    assert!(!tmux.stop("b").await.unwrap());
    assert_eq!(
        tmux.start(&spec).await.unwrap(),
        StartOutcome::AlreadyRunning
    );

    // A session someone made by hand on the same socket.
    assert!(
        h.raw(&["new-session", "-d", "-s", "foreign", "sleep 60"])
            .status
            .success()
    );
    let err = tmux.stop("foreign").await.unwrap_err();
    assert!(
        matches!(&err, TmuxError::Foreign(name) if name == "foreign"),
        "{err:?}"
    );
    assert_eq!(err.code(), "tmux_foreign_session");
    let err = tmux
        .start(&h.spec("foreign", "sleep 60"))
        .await
        .unwrap_err();
    assert!(matches!(err, TmuxError::Foreign(_)), "{err:?}");
    assert!(h.raw(&["has-session", "-t", "=foreign"]).status.success());
    assert_eq!(
        tmux.owned_sessions().await.unwrap(),
        vec!["build".to_owned()]
    );

    assert!(tmux.stop("build").await.unwrap());
    assert_eq!(tmux.pane_state("build").await.unwrap(), None);
    assert!(!tmux.stop("build").await.unwrap());
    assert!(h.raw(&["has-session", "-t", "=foreign"]).status.success());

    // A command that exits at once.
    let err = tmux
        .start(&h.spec("quick", "echo going away; exit 3"))
        .await
        .unwrap_err();
    match &err {
        TmuxError::Exited { status, output } => {
            assert_eq!(*status, Some(3));
            assert!(output.contains("going away"), "{output:?}");
            assert!(!output.contains("Pane is dead"), "{output:?}");
        }
        other => panic!("expected Exited, got {other:?}"),
    }
    assert_eq!(err.code(), "startup_exited");
    assert_eq!(tmux.pane_state("quick").await.unwrap(), None);

    // A dead owned session is replaced by a new start.
    let mut slow_exit = h.spec("phoenix", "sleep 1; exit 4");
    slow_exit.settle = Duration::from_millis(50);
    assert_eq!(tmux.start(&slow_exit).await.unwrap(), StartOutcome::Started);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = tmux.pane_state("phoenix").await.unwrap().unwrap();
        if state.dead {
            assert_eq!(state.dead_status, Some(4), "{state:?}");
            break;
        }
        assert!(Instant::now() < deadline, "pane never died");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut spec = h.spec("phoenix", "sleep 60");
    spec.env = vec![("PHOENIX_VAR".into(), "risen again".into())];
    assert_eq!(tmux.start(&spec).await.unwrap(), StartOutcome::Started);
    assert!(!tmux.pane_state("phoenix").await.unwrap().unwrap().dead);
    let env = h.raw(&["show-environment", "-t", "=phoenix", "PHOENIX_VAR"]);
    assert_eq!(
        String::from_utf8_lossy(&env.stdout).trim(),
        "PHOENIX_VAR=risen again"
    );

    // A missing directory is reported before tmux runs.
    let missing = h.path("does-not-exist");
    let err = tmux
        .start(&StartSpec::new("nowhere", &missing, "sleep 60"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, TmuxError::DirectoryMissing(p) if *p == missing),
        "{err:?}"
    );
    assert_eq!(err.code(), "startup_directory_missing");
    let file = h.path("a-file");
    std::fs::write(&file, "").unwrap();
    let err = tmux
        .start(&StartSpec::new("nowhere", &file, "sleep 60"))
        .await
        .unwrap_err();
    assert!(matches!(err, TmuxError::DirectoryMissing(_)), "{err:?}");
}

#[tokio::test]
async fn environment_and_working_directory() {
    let h = Harness::new();
    let out = h.path("env.out");
    let mut spec = h.spec(
        "envcheck",
        &format!(
            "{{ pwd; echo \"A=$SB_TEST_A\"; env | grep -c '^SWITCHBOARD_TOKEN' ; }} > {}; sleep 60",
            quote(&out.to_string_lossy())
        ),
    );
    spec.env = vec![("SB_TEST_A".into(), "it's \"here\" $HOME".into())];
    spec.width = 100;
    spec.height = 30;
    assert_eq!(h.tmux.start(&spec).await.unwrap(), StartOutcome::Started);
    let data = wait_file(&out, |d| d.iter().filter(|b| **b == b'\n').count() >= 3).await;
    let text = String::from_utf8(data).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let dir = std::fs::canonicalize(h.dir.path()).unwrap();
    assert_eq!(std::fs::canonicalize(lines[0]).unwrap(), dir);
    assert_eq!(lines[1], "A=it's \"here\" $HOME");
    assert_eq!(lines[2], "0");
    let size = h.raw(&[
        "display-message",
        "-p",
        "-t",
        "=envcheck:",
        "#{pane_width}x#{pane_height}",
    ]);
    assert_eq!(String::from_utf8_lossy(&size.stdout).trim(), "100x30");
}

#[tokio::test]
async fn paste_into_bracketed_paste_application_is_exact() {
    let h = Harness::new();
    let out = h.path("bracketed.out");
    h.agent("agent", "bracketed", &out).await;
    let text = sample_text();
    h.tmux.paste("agent", &text).await.unwrap();
    let received = wait_file(&out, |_| true).await;
    assert_eq!(String::from_utf8(received).unwrap(), text);
    // The Enter after the paste reached the program as a key of its own.
    h.wait_screen("agent", |lines| lines.iter().any(|l| l == "enter"))
        .await;
}

#[tokio::test]
async fn paste_into_line_reading_program_delivers_every_line() {
    let h = Harness::new();
    let out = h.path("plain.out");
    h.agent("plain", "plain", &out).await;
    let text = sample_text();
    h.tmux.paste("plain", &text).await.unwrap();
    let expected: Vec<&str> = text.lines().collect();
    let data = wait_file(&out, |d| d.iter().filter(|b| **b == b'\n').count() >= 4).await;
    let data = String::from_utf8(data).unwrap();
    let got: Vec<&str> = data.lines().collect();
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(got[0], expected[0]);
    assert_eq!(got[1], expected[1]);
    // A cooked tty keeps at most 4095 bytes of a line; the rest of that line is dropped by
    // the kernel, not by tmux.
    assert!(
        got[2].len() >= 4000 && got[2].bytes().all(|b| b == b'x'),
        "{}",
        got[2].len()
    );
    assert_eq!(got[3], expected[3]);
}

#[tokio::test]
async fn paste_limits() {
    let h = Harness::new();
    let err = h
        .tmux
        .paste("anything", &"y".repeat(MAX_PASTE_BYTES + 1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, TmuxError::TooLarge(n) if n == MAX_PASTE_BYTES + 1),
        "{err:?}"
    );
    assert_eq!(err.code(), "message_too_large");
    let err = h.tmux.paste("absent", "hello").await.unwrap_err();
    assert!(matches!(err, TmuxError::Command { .. }), "{err:?}");

    // An empty text is just an Enter; nothing is left behind in tmux's buffers.
    let out = h.path("plain.out");
    h.agent("plain", "plain", &out).await;
    h.tmux.paste("plain", "").await.unwrap();
    h.tmux.paste("plain", "after").await.unwrap();
    let data = wait_file(&out, |d| d.ends_with(b"after\n")).await;
    assert_eq!(data, b"\nafter\n");
    let buffers = h.raw(&["list-buffers"]);
    assert_eq!(String::from_utf8_lossy(&buffers.stdout), "");
}

#[tokio::test]
async fn quiescent_pane_with_prompt_returns_after_the_quiet_window() {
    let h = Harness::new();
    h.agent("calm", "plain", &h.path("calm.out")).await;
    let q = Quiescence {
        quiet_window: Duration::from_millis(500),
        timeout: Duration::from_secs(10),
        prompt: Some(Regex::new(r"^>\s*$").unwrap()),
        ..Quiescence::default()
    };
    let started = Instant::now();
    h.tmux.wait_quiescent("calm", &q).await.unwrap();
    let took = started.elapsed();
    assert!(took >= q.quiet_window, "{took:?}");
    assert!(
        took < q.quiet_window + Duration::from_millis(1500),
        "{took:?}"
    );
}

#[tokio::test]
async fn quiescence_times_out_while_output_changes() {
    let h = Harness::new();
    // Output that never stops.
    let counter = "i=0; while true; do i=$((i+1)); echo count $i; sleep 0.2; done";
    assert_eq!(
        h.tmux.start(&h.spec("busy", counter)).await.unwrap(),
        StartOutcome::Started
    );
    let q = Quiescence {
        quiet_window: Duration::from_millis(750),
        timeout: Duration::from_secs(2),
        ..Quiescence::default()
    };
    let started = Instant::now();
    let err = h.tmux.wait_quiescent("busy", &q).await.unwrap_err();
    match &err {
        QuiescenceError::Timeout { blocked_by, waited } => {
            assert_eq!(*blocked_by, Blocker::OutputChanging);
            assert_eq!(blocked_by.code(), "quiescence_output_changing");
            assert!(*waited >= q.timeout);
        }
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn quiescence_prompt_not_seen_and_gone() {
    let h = Harness::new();
    // A prompt that never shows.
    h.agent("calm", "plain", &h.path("calm.out")).await;
    let q = Quiescence {
        quiet_window: Duration::from_millis(300),
        timeout: Duration::from_millis(1500),
        prompt: Some(Regex::new("^never-there$").unwrap()),
        ..Quiescence::default()
    };
    let err = h.tmux.wait_quiescent("calm", &q).await.unwrap_err();
    assert!(
        matches!(
            &err,
            QuiescenceError::Timeout {
                blocked_by: Blocker::PromptNotSeen,
                ..
            }
        ),
        "{err:?}"
    );

    // Gone: absent sessions and dead panes.
    let err = h.tmux.wait_quiescent("nobody", &q).await.unwrap_err();
    assert!(matches!(err, QuiescenceError::Gone), "{err:?}");
    let mut spec = h.spec("mortal", "sleep 0.5; exit 0");
    spec.settle = Duration::from_millis(10);
    h.tmux.start(&spec).await.unwrap();
    let q = Quiescence {
        quiet_window: Duration::from_secs(60),
        timeout: Duration::from_secs(10),
        ..Quiescence::default()
    };
    let err = h.tmux.wait_quiescent("mortal", &q).await.unwrap_err();
    assert!(matches!(err, QuiescenceError::Gone), "{err:?}");
}

#[tokio::test]
async fn copy_mode_blocks_quiescence_until_left() {
    let h = Harness::new();
    h.agent("calm", "plain", &h.path("calm.out")).await;
    assert!(h.raw(&["copy-mode", "-t", "=calm:"]).status.success());
    assert!(h.tmux.pane_state("calm").await.unwrap().unwrap().in_mode);
    let q = Quiescence {
        quiet_window: Duration::from_millis(300),
        timeout: Duration::from_millis(1000),
        prompt: Some(Regex::new(r"^>").unwrap()),
        ..Quiescence::default()
    };
    let err = h.tmux.wait_quiescent("calm", &q).await.unwrap_err();
    match &err {
        QuiescenceError::Timeout { blocked_by, .. } => {
            assert_eq!(*blocked_by, Blocker::CopyMode);
            assert_eq!(blocked_by.code(), "quiescence_copy_mode");
            assert!(!blocked_by.to_string().is_empty());
        }
        other => panic!("expected a timeout, got {other:?}"),
    }

    let socket = h.tmux.socket().to_owned();
    let leave = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let status = tokio::process::Command::new(TMUX_BIN)
            .arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "send-keys",
                "-t",
                "=calm:",
                "-X",
                "cancel",
            ])
            .env("TERM", "xterm-256color")
            .status()
            .await
            .unwrap();
        assert!(status.success());
    });
    let q = Quiescence {
        timeout: Duration::from_secs(10),
        ..q
    };
    let started = Instant::now();
    h.tmux.wait_quiescent("calm", &q).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(900));
    leave.await.unwrap();
    assert!(!h.tmux.pane_state("calm").await.unwrap().unwrap().in_mode);
}

#[tokio::test]
async fn client_in_a_key_table_blocks_quiescence() {
    let h = Harness::new();
    h.agent("calm", "plain", &h.path("calm.out")).await;
    // A real client, attached from a pseudo-terminal; killed when the test ends.
    let mut client = tokio::process::Command::new("python3")
        .arg(AGENT)
        .arg("client")
        .arg(h.tmux.socket())
        .arg("calm")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let name = loop {
        let out = h.raw(&["list-clients", "-t", "=calm", "-F", "#{client_name}"]);
        let names = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        if !names.is_empty() {
            break names;
        }
        assert!(Instant::now() < deadline, "the client never attached");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // As if someone had pressed the prefix key and not yet the next one.
    assert!(
        h.raw(&["switch-client", "-c", &name, "-T", "prefix"])
            .status
            .success()
    );
    let q = Quiescence {
        quiet_window: Duration::from_millis(300),
        timeout: Duration::from_millis(1200),
        ..Quiescence::default()
    };
    let err = h.tmux.wait_quiescent("calm", &q).await.unwrap_err();
    assert!(
        matches!(&err, QuiescenceError::Timeout { blocked_by: Blocker::KeyTable(t), .. } if t == "prefix"),
        "{err:?}"
    );
    assert!(
        h.raw(&["switch-client", "-c", &name, "-T", "root"])
            .status
            .success()
    );
    h.tmux.wait_quiescent("calm", &q).await.unwrap();
    client.start_kill().unwrap();
}

#[tokio::test]
async fn capture_returns_the_last_lines() {
    let h = Harness::new();
    let mut spec = h.spec("short", "printf 'a\\nb  \\n\\n\\nc\\n'; exec sleep 60");
    spec.height = 10;
    h.tmux.start(&spec).await.unwrap();
    h.wait_screen("short", |lines| lines.last().is_some_and(|l| l == "c"))
        .await;
    assert_eq!(
        h.tmux.capture("short", 1000).await.unwrap(),
        ["a", "b", "", "", "c"]
    );
    assert_eq!(h.tmux.capture("short", 2).await.unwrap(), ["", "c"]);
    assert_eq!(h.tmux.capture("short", 1).await.unwrap(), ["c"]);
    // 0 is taken as 1.
    assert_eq!(h.tmux.capture("short", 0).await.unwrap(), ["c"]);

    let mut spec = h.spec("long", "seq 1 1500; exec sleep 60");
    spec.height = 20;
    h.tmux.start(&spec).await.unwrap();
    h.wait_screen("long", |lines| lines.last().is_some_and(|l| l == "1500"))
        .await;
    assert_eq!(h.tmux.capture("long", 1).await.unwrap(), ["1500"]);
    let ten = h.tmux.capture("long", 10).await.unwrap();
    let expected: Vec<String> = (1491..=1500).map(|n| n.to_string()).collect();
    assert_eq!(ten, expected);
    let all = h.tmux.capture("long", 1000).await.unwrap();
    assert_eq!(all.len(), 1000);
    assert_eq!(all[0], "501");
    assert_eq!(all[999], "1500");
    // More than 1000 is capped.
    assert_eq!(h.tmux.capture("long", 5000).await.unwrap(), all);

    let err = h.tmux.capture("absent", 10).await.unwrap_err();
    assert!(matches!(err, TmuxError::Command { .. }), "{err:?}");
}

#[test]
fn prompt_matching_looks_at_last_non_empty_lines() {
    let screen: Vec<String> = ["> old", "output", "", "more", "", ""]
        .into_iter()
        .map(String::from)
        .collect();
    let prompt = Regex::new("^>").unwrap();
    assert!(prompt_visible(&screen, &prompt, 3));
    assert!(!prompt_visible(&screen, &prompt, 2));
    assert!(!prompt_visible(&screen, &prompt, 0));
}

#[test]
fn error_messages_do_not_show_environment_values() {
    let text = describe_args(&[
        "new-session",
        "-e",
        "API_KEY=s3cret",
        "-s",
        "x",
        "--",
        "a=b",
    ]);
    assert_eq!(text, "new-session -e API_KEY=… -s x -- a=b");
}

#[test]
fn codes() {
    assert_eq!(TmuxError::NotInstalled.code(), "tmux_not_installed");
    assert_eq!(
        TmuxError::Command {
            args: String::new(),
            stderr: String::new()
        }
        .code(),
        "tmux_command_failed"
    );
    assert_eq!(TmuxError::Io(std::io::Error::other("x")).code(), "tmux_io");
    assert_eq!(Blocker::PromptNotSeen.code(), "quiescence_prompt_not_seen");
    assert_eq!(
        Blocker::KeyTable("prefix".into()).code(),
        "quiescence_key_table"
    );
    assert!(
        Blocker::KeyTable("prefix".into())
            .to_string()
            .contains("prefix")
    );
}
