//! [`ServerProcess`]: the `switchboard` binary run as a child process for end-to-end tests.

use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// How long `start` waits for the `listening on` line.
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `stop` waits after SIGTERM before SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(10);
/// Output lines kept for [`ServerProcess::logs`].
const KEPT_LINES: usize = 200;
/// What the server prints once it accepts connections.
const READY_MARKER: &str = "listening on http://";

type Lines = Arc<Mutex<VecDeque<String>>>;

/// A running `switchboard serve`; killed when dropped.
pub struct ServerProcess {
    /// `http://ADDR:PORT`, as printed by the server.
    pub url: String,
    pub token: String,
    pub data_dir: PathBuf,
    child: Child,
    lines: Lines,
}

impl std::fmt::Debug for ServerProcess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerProcess")
            .field("url", &self.url)
            .field("data_dir", &self.data_dir)
            .field("pid", &self.child.id())
            .finish()
    }
}

impl ServerProcess {
    /// Spawns `bin serve` with `SWITCHBOARD_LISTEN=127.0.0.1:0`, `SWITCHBOARD_DATA_DIR`,
    /// `SWITCHBOARD_TOKEN` and `extra_env`, and waits (up to 30 s) for the line
    /// `listening on http://ADDR:PORT` on its stdout. The error says what the process printed.
    /// Its stdout and stderr keep being drained afterwards; see [`ServerProcess::logs`].
    pub async fn start(
        bin: &Path,
        data_dir: &Path,
        token: &str,
        extra_env: &[(&str, &str)],
    ) -> io::Result<ServerProcess> {
        Self::start_with_timeout(bin, data_dir, token, extra_env, READY_TIMEOUT).await
    }

    /// [`ServerProcess::start`] with another wait for readiness.
    pub async fn start_with_timeout(
        bin: &Path,
        data_dir: &Path,
        token: &str,
        extra_env: &[(&str, &str)],
        ready_timeout: Duration,
    ) -> io::Result<ServerProcess> {
        Self::start_command(bin, &["serve"], data_dir, token, extra_env, ready_timeout).await
    }

    /// Runs `bin ARGS…` (e.g. `gateway --server URL --listen 127.0.0.1:0`) the same way and
    /// waits for its `listening on http://…` line.
    pub async fn start_command(
        bin: &Path,
        args: &[&str],
        data_dir: &Path,
        token: &str,
        extra_env: &[(&str, &str)],
        ready_timeout: Duration,
    ) -> io::Result<ServerProcess> {
        let mut child = Command::new(bin)
            .args(args)
            .env("SWITCHBOARD_LISTEN", "127.0.0.1:0")
            .env("SWITCHBOARD_DATA_DIR", data_dir)
            .env("SWITCHBOARD_TOKEN", token)
            .envs(extra_env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("spawning {}: {e}", bin.display())))?;
        let lines: Lines = Arc::default();
        let (ready_tx, ready_rx) = oneshot::channel();
        let mut drains = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            drains.push(tokio::spawn(drain(stdout, lines.clone(), Some(ready_tx))));
        }
        if let Some(stderr) = child.stderr.take() {
            drains.push(tokio::spawn(drain(stderr, lines.clone(), None)));
        }
        let failure = match tokio::time::timeout(ready_timeout, ready_rx).await {
            Ok(Ok(url)) => {
                return Ok(ServerProcess {
                    url,
                    token: token.to_owned(),
                    data_dir: data_dir.to_path_buf(),
                    child,
                    lines,
                });
            }
            Ok(Err(_)) => io::Error::other(format!(
                "{} serve closed its stdout without printing {READY_MARKER:?}",
                bin.display()
            )),
            Err(_) => io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "{} serve did not print {READY_MARKER:?} within {ready_timeout:?}",
                    bin.display()
                ),
            ),
        };
        let _ = child.start_kill();
        let status = child.wait().await;
        for drain in drains {
            let _ = tokio::time::timeout(Duration::from_secs(2), drain).await;
        }
        let status = match status {
            Ok(status) => status.to_string(),
            Err(err) => format!("unknown exit status ({err})"),
        };
        Err(io::Error::new(
            failure.kind(),
            format!(
                "{failure}; process ended: {status}; output:\n{}",
                join(&lines)
            ),
        ))
    }

    /// The output so far once it holds `needle` (within `timeout`).
    ///
    /// # Panics
    /// When `needle` has not come by then, with the output.
    pub async fn wait_for_log(&self, needle: &str, timeout: Duration) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let logs = self.logs();
            if logs.contains(needle) {
                return logs;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("{needle:?} not in the server's output within {timeout:?}:\n{logs}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The last ~200 lines the process printed (stdout and stderr, interleaved).
    pub fn logs(&self) -> String {
        join(&self.lines)
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The exit status, once the process has ended.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGKILL, then wait for the process to end.
    pub async fn kill(&mut self) {
        let _ = self.child.start_kill();
        let _ = self.child.wait().await;
    }

    /// SIGTERM (via the `kill` command), wait up to 10 s for the process to end, then SIGKILL.
    pub async fn stop(&mut self) {
        let Some(pid) = self.child.id() else {
            let _ = self.child.wait().await;
            return;
        };
        let sent = Command::new("kill")
            .arg("-TERM")
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .await
            .is_ok_and(|status| status.success());
        if sent
            && tokio::time::timeout(STOP_GRACE, self.child.wait())
                .await
                .is_ok()
        {
            return;
        }
        self.kill().await;
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn join(lines: &Lines) -> String {
    let lines = lines.lock();
    lines
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Reads `pipe` line by line into `lines` (keeping the last [`KEPT_LINES`]) until it closes;
/// sends the URL of the first `listening on` line to `ready`.
async fn drain(
    pipe: impl AsyncRead + Unpin,
    lines: Lines,
    mut ready: Option<oneshot::Sender<String>>,
) {
    let mut reader = BufReader::new(pipe);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&buf)
            .trim_end_matches(['\r', '\n'])
            .to_owned();
        if let Some(url) = listening_url(&line)
            && let Some(tx) = ready.take()
        {
            let _ = tx.send(url);
        }
        let mut kept = lines.lock();
        if kept.len() == KEPT_LINES {
            kept.pop_front();
        }
        kept.push_back(line);
    }
}

/// The URL in a `... listening on http://ADDR:PORT ...` line.
fn listening_url(line: &str) -> Option<String> {
    let start = line.find(READY_MARKER)? + "listening on ".len();
    let url: String = line
        .get(start..)?
        .chars()
        .take_while(|c| !c.is_whitespace() && !matches!(c, '"' | '\'' | ',' | ')' | '\u{1b}'))
        .collect();
    let url = url.trim_end_matches(['/', '.']);
    (url.len() > "http://".len()).then(|| url.to_owned())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_url() {
        assert_eq!(
            listening_url("listening on http://127.0.0.1:40123").as_deref(),
            Some("http://127.0.0.1:40123")
        );
        assert_eq!(
            listening_url(
                "2026-01-01T00:00:00Z  INFO switchboard: listening on http://127.0.0.1:5/ now"
            )
            .as_deref(),
            Some("http://127.0.0.1:5")
        );
        assert_eq!(listening_url("listening on http:// "), None);
        assert_eq!(listening_url("starting"), None);
    }
}
