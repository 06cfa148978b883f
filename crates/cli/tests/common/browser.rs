//! The browser tests' side in Rust: a script of `tests/e2e` run in node against headless
//! Chromium, with the harness's protocol — `ok - …` / `not ok - …` lines and `N passed, M
//! failed` on stdout, and `@@ {json}` lines asking this side for what only it can do (kill
//! the server, a chat user writing …), each answered with one JSON line on stdin.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// `tests/e2e`, with `playwright-core` installed.
pub fn e2e_dir() -> PathBuf {
    let e2e = repo_root().join("tests/e2e");
    assert!(
        e2e.join("node_modules/playwright-core").exists(),
        "playwright-core is missing: run scripts/test (it runs `npm ci` in tests/e2e)"
    );
    e2e
}

pub fn chromium() -> PathBuf {
    ["/usr/bin/chromium", "/usr/bin/chromium-browser"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("no chromium found (scripts/test installs Debian's `chromium`)")
}

/// Where the scripts leave their screenshots.
pub fn shots_dir() -> PathBuf {
    let shots = repo_root().join("target/console-screenshots");
    std::fs::create_dir_all(&shots).unwrap();
    shots
}

/// Each of `names` is a screenshot the script left (over 1 kB).
pub fn assert_shots(names: &[&str]) {
    let shots = shots_dir();
    for name in names {
        let p = shots.join(name);
        assert!(
            std::fs::metadata(&p)
                .map(|m| m.len() > 1000)
                .unwrap_or(false),
            "{} missing",
            p.display()
        );
    }
}

/// A running script.
pub struct Script {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
    stdout: String,
    deadline: Instant,
    limit: Duration,
}

impl Script {
    /// Starts `tests/e2e/NAME` with `env` (besides `SB_SCREENSHOTS` and `CHROMIUM`); it
    /// must end within `limit`.
    pub fn start(name: &str, env: &[(&str, &str)], limit: Duration) -> Script {
        let e2e = e2e_dir();
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(e2e.join(name))
            .current_dir(&e2e)
            .env("SB_SCREENSHOTS", shots_dir())
            .env("CHROMIUM", chromium());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
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
        Script {
            child,
            stdin,
            lines,
            stderr,
            stdout: String::new(),
            deadline: Instant::now() + limit,
            limit,
        }
    }

    /// The script's next request (`{"cmd": …}`), its report lines printed and kept on the
    /// way; `None` once it has ended.
    pub async fn next_command(&mut self) -> Option<Value> {
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let line = match tokio::time::timeout(left, self.lines.next_line()).await {
                Ok(Ok(Some(l))) => l,
                Ok(_) => return None,
                Err(_) => panic!(
                    "the browser test did not finish within {:?}:\n{}",
                    self.limit, self.stdout
                ),
            };
            match line.strip_prefix("@@ ") {
                Some(cmd) => return Some(serde_json::from_str(cmd).unwrap()),
                None => {
                    println!("{line}");
                    self.stdout.push_str(&line);
                    self.stdout.push('\n');
                }
            }
        }
    }

    /// Answers the request just read.
    pub async fn answer(&mut self, answer: Value) {
        self.stdin
            .write_all(format!("{answer}\n").as_bytes())
            .await
            .unwrap();
    }

    /// Waits for the script to end and asserts every step passed (`server_logs` goes into
    /// the failure message); its report.
    pub async fn finish(mut self, server_logs: impl FnOnce() -> String) -> String {
        if let Some(cmd) = self.next_command().await {
            panic!("unanswered command from the browser test: {cmd}");
        }
        let status = self.child.wait().await.unwrap();
        let stderr = self.stderr.await.unwrap();
        let stdout = self.stdout;
        assert!(
            status.success(),
            "browser test failed:\n{stdout}\n--- stderr\n{stderr}\n--- server\n{}",
            server_logs()
        );
        assert!(!stdout.contains("not ok"), "{stdout}");
        assert!(stdout.contains(" passed, 0 failed"), "{stdout}");
        stdout
    }
}
