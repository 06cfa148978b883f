//! `run_command`: `bash -c COMMAND` in the workspace root, in its own process group, with
//! bounded output capture, a timeout and cancellation that kill the whole group.

use std::collections::VecDeque;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio_util::sync::CancellationToken;

use super::{ToolLimits, ToolOutput, Workspace, as_integer, json_kind, req_str, thousands};

/// How long to keep reading after the group was killed, or after the shell exited while
/// something still holds its output open.
const GRACE: Duration = Duration::from_secs(2);
/// Read buffer per pipe.
const READ_BUF: usize = 16 * 1024;

pub(super) async fn run_command(
    ws: &Workspace,
    limits: &ToolLimits,
    args: &Value,
    cancel: &CancellationToken,
) -> ToolOutput {
    let command = match req_str("run_command", args, "command") {
        Ok(c) if c.trim().is_empty() => {
            return ToolOutput::error("run_command: argument `command` is empty");
        }
        Ok(c) => c,
        Err(e) => return e,
    };
    let mut notes = Vec::new();
    let timeout = match args.get("timeout_secs") {
        None | Some(Value::Null) => limits.default_timeout,
        Some(v) => match as_integer(v) {
            Some(secs) if secs > 0 => {
                let asked = Duration::from_secs(secs.unsigned_abs());
                if asked > limits.max_timeout {
                    notes.push(format!(
                        "note: timeout_secs {secs} is above the maximum of {}; clamped to it",
                        secs_text(limits.max_timeout)
                    ));
                    limits.max_timeout
                } else {
                    asked
                }
            }
            Some(secs) => {
                return ToolOutput::error(format!(
                    "run_command: argument `timeout_secs` must be a positive number of seconds, got {secs}"
                ));
            }
            None => {
                return ToolOutput::error(format!(
                    "run_command: argument `timeout_secs` must be an integer number of seconds, got {}",
                    json_kind(v)
                ));
            }
        },
    };
    // Confined when the run is sandboxed and this machine can; refused when it cannot and
    // the sandbox is required.
    let (mut cmd, confined, told) = match ws.sandbox() {
        Some(sb) if sb.available => {
            let hidden = ws.protected_paths();
            match super::sandbox::bash(sb, ws.root(), hidden, command) {
                Ok((cmd, confined)) => (cmd, Some(confined), Some(sb.told(ws.root(), &sb.network))),
                Err(e) => return ToolOutput::error(format!("run_command: {e}")),
            }
        }
        Some(sb) if sb.required => {
            return ToolOutput::error(
                "run_command: refused: the sandbox is required ([sandbox] mode = \"required\") and this machine cannot sandbox commands (no Landlock in its kernel)",
            );
        }
        Some(_) => {
            notes.push(
                "note: this machine cannot sandbox commands (no Landlock in its kernel): it ran as the server's user"
                    .to_owned(),
            );
            (plain_bash(command), None, None)
        }
        None => (plain_bash(command), None, None),
    };
    prepare(&mut cmd, ws.root());
    scrub_env(&mut cmd);
    tracing::debug!(
        command,
        timeout_s = timeout.as_secs(),
        sandboxed = confined.is_some(),
        "run_command"
    );
    let mut out = run(cmd, timeout, limits.output_cap, notes, cancel).await;
    drop(confined);
    if let Some(told) = told
        && out.is_error
        && denied(&out.content)
    {
        out.content.push_str("\nnote: ");
        out.content.push_str(&told);
        out.notice = Some(format!(
            "run_command failed with a permission error inside the sandbox ({}); the session may need a wider sandbox (docs/sandbox.md)",
            match ws.sandbox().map(|s| &s.network) {
                Some(super::sandbox::NetworkPolicy::Full) | None => "workspace only".to_owned(),
                Some(n) => format!("workspace only, network {}", n.describe()),
            }
        ));
    }
    out
}

/// Whether a command's output reads like a refusal (of the sandbox, when it ran in one) —
/// or like a file under `/tmp` that is not there (under namespaces each command has a
/// fresh `/tmp`: what another wrote there is gone).
fn denied(output: &str) -> bool {
    [
        "Permission denied",
        "Operation not permitted",
        "Network is unreachable",
    ]
    .iter()
    .any(|w| output.contains(w))
        || (output.contains("No such file or directory") && output.contains("/tmp/"))
}

/// `bash -c COMMAND`, unconfined.
fn plain_bash(command: &str) -> Command {
    let mut cmd = Command::new("bash");
    cmd.arg("-c").arg(command);
    cmd
}

/// In `root`: stdin closed, stdout and stderr piped, its own process group, killed when
/// dropped. The environment still needs [`scrub_env`].
fn prepare(cmd: &mut Command, root: &Path) {
    cmd.current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // git would otherwise ask for credentials on the terminal and hang until the timeout.
        .env("GIT_TERMINAL_PROMPT", "0")
        .process_group(0)
        .kill_on_drop(true);
}

/// Removes the server's secrets from the child's environment: every `SWITCHBOARD_*` variable,
/// `OPENAI_API_KEY` and `ANTHROPIC_API_KEY`, whether inherited or set on `cmd`.
fn scrub_env(cmd: &mut Command) {
    use switchboard_protocol::secrets::{is_server_secret, server_secrets_in_env};
    let mut names = server_secrets_in_env();
    names.extend(
        cmd.as_std()
            .get_envs()
            .map(|(name, _)| name.to_os_string())
            .filter(|name| is_server_secret(name)),
    );
    for name in names {
        cmd.env_remove(name);
    }
}

/// Sends SIGKILL to the process group when dropped while armed, so that even a caller that
/// drops the future mid-run leaves no processes behind.
struct GroupGuard(Option<Pid>);

impl GroupGuard {
    fn kill(&self) {
        if let Some(pgid) = self.0 {
            match killpg(pgid, Signal::SIGKILL) {
                Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                Err(e) => {
                    tracing::warn!(%pgid, error = %e, "killing a command's process group failed")
                }
            }
        }
    }

    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
    /// Waiting for the shell failed (should not happen).
    Lost(std::io::Error),
}

/// Reads from `pipe` or, once it is gone, never completes.
async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> std::io::Result<usize> {
    match pipe {
        Some(p) => p.read(buf).await,
        None => std::future::pending().await,
    }
}

struct Pipes<O, E> {
    out: Option<O>,
    err: Option<E>,
    out_buf: Vec<u8>,
    err_buf: Vec<u8>,
}

impl<O: AsyncRead + Unpin, E: AsyncRead + Unpin> Pipes<O, E> {
    fn open(&self) -> bool {
        self.out.is_some() || self.err.is_some()
    }

    /// Reads whatever arrives first into `capture`; closes a pipe at EOF or on error.
    async fn read_into(&mut self, capture: &mut Capture) {
        tokio::select! {
            r = read_some(&mut self.out, &mut self.out_buf) => match r {
                Ok(n) if n > 0 => capture.push(&self.out_buf[..n]),
                _ => self.out = None,
            },
            r = read_some(&mut self.err, &mut self.err_buf) => match r {
                Ok(n) if n > 0 => capture.push(&self.err_buf[..n]),
                _ => self.err = None,
            },
        }
    }

    /// Reads until both pipes close or `limit` passes; whether they closed.
    async fn drain(&mut self, capture: &mut Capture, limit: Duration) -> bool {
        let deadline = tokio::time::sleep(limit);
        tokio::pin!(deadline);
        while self.open() {
            tokio::select! {
                () = self.read_into(capture) => {}
                () = &mut deadline => return false,
            }
        }
        true
    }
}

async fn run(
    mut cmd: Command,
    timeout: Duration,
    cap: usize,
    mut notes: Vec<String>,
    cancel: &CancellationToken,
) -> ToolOutput {
    let mut child: Child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return ToolOutput::error(format!("run_command: cannot start bash: {e}")),
    };
    let mut guard = GroupGuard(
        child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw),
    );
    let mut pipes = Pipes {
        out: child.stdout.take(),
        err: child.stderr.take(),
        out_buf: vec![0; READ_BUF],
        err_buf: vec![0; READ_BUF],
    };
    let mut capture = Capture::new(cap);

    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut status: Option<ExitStatus> = None;
    // Started when the shell exits while its output is still held open.
    let grace = tokio::time::sleep(GRACE);
    tokio::pin!(grace);
    let mut lingering = false;
    let ending = loop {
        if let Some(s) = status
            && !pipes.open()
        {
            break Ending::Exited(s);
        }
        tokio::select! {
            () = pipes.read_into(&mut capture), if pipes.open() => {}
            s = child.wait(), if status.is_none() => match s {
                Ok(s) => {
                    status = Some(s);
                    grace.as_mut().reset(tokio::time::Instant::now() + GRACE);
                }
                Err(e) => break Ending::Lost(e),
            },
            () = &mut grace, if status.is_some() => {
                lingering = true;
                break Ending::Exited(status.unwrap_or_default());
            }
            () = &mut deadline, if status.is_none() => break Ending::TimedOut,
            () = cancel.cancelled(), if status.is_none() => break Ending::Cancelled,
        }
    };

    let (last, is_error) = match &ending {
        Ending::Exited(s) => match (s.code(), s.signal()) {
            (Some(code), _) => (format!("exit code: {code}"), code != 0),
            (None, Some(sig)) => {
                let name = Signal::try_from(sig)
                    .map(|s| s.as_str())
                    .unwrap_or("unknown signal");
                (format!("killed by signal {sig} ({name})"), true)
            }
            (None, None) => ("exit status unknown".to_owned(), true),
        },
        Ending::TimedOut => (
            format!("killed: timed out after {}", secs_text(timeout)),
            true,
        ),
        Ending::Cancelled => ("killed: cancelled".to_owned(), true),
        Ending::Lost(e) => (format!("killed: waiting for the command failed: {e}"), true),
    };

    if lingering || !matches!(ending, Ending::Exited(_)) {
        tracing::debug!(ending = %last, lingering, "killing a command's process group");
        guard.kill();
        if !pipes.drain(&mut capture, GRACE).await {
            notes.push(
                "note: stopped reading output: a process outside the command's process group \
                 still holds it open"
                    .to_owned(),
            );
        }
        if lingering {
            notes.push(format!(
                "note: background processes kept the output open {} after the command exited and \
                 were killed; redirect their output (`cmd > log 2>&1 &`) to keep them running",
                secs_text(GRACE)
            ));
        }
        if status.is_none() {
            // SIGKILLed: reaping is immediate unless the kill failed.
            if tokio::time::timeout(GRACE, child.wait()).await.is_err() {
                let _ = child.start_kill();
            }
        }
    }
    guard.disarm();

    let mut content = capture.finish();
    if content.is_empty() {
        content.push_str("(no output)");
    }
    if !content.ends_with('\n') {
        content.push('\n');
    }
    for note in notes {
        content.push_str(&note);
        content.push('\n');
    }
    content.push_str(&last);
    ToolOutput {
        content,
        is_error,
        notice: None,
    }
}

fn secs_text(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// Command output, bounded: the first half of the cap, a rolling last half, and a count of
/// what fell in between. Holds at most `cap` bytes whatever the command prints, and since
/// every character is at least one byte, its text is at most `cap` characters plus the note.
pub(crate) struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    dropped: u64,
}

impl Capture {
    pub(crate) fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        let tail_cap = cap - head_cap;
        Self {
            head: Vec::with_capacity(head_cap.min(64 * 1024)),
            head_cap,
            tail: VecDeque::with_capacity(tail_cap.min(64 * 1024)),
            tail_cap,
            dropped: 0,
        }
    }

    pub(crate) fn push(&mut self, mut data: &[u8]) {
        if self.head.len() < self.head_cap {
            let n = (self.head_cap - self.head.len()).min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        if data.len() >= self.tail_cap {
            self.dropped += (self.tail.len() + data.len() - self.tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
            self.dropped += overflow as u64;
            self.tail.drain(..overflow);
            self.tail.extend(data);
        }
    }

    /// The text: head, then (when something was dropped) a note, then tail. Invalid UTF-8 is
    /// replaced; characters cut at the edges of the gap are dropped whole.
    pub(crate) fn finish(self) -> String {
        let Capture {
            mut head,
            tail,
            mut dropped,
            ..
        } = self;
        let mut tail: Vec<u8> = tail.into();
        if dropped == 0 {
            head.extend_from_slice(&tail);
            return String::from_utf8_lossy(&head).into_owned();
        }
        // A character cut at the end of the head.
        if let Err(e) = std::str::from_utf8(&head)
            && e.error_len().is_none()
        {
            dropped += (head.len() - e.valid_up_to()) as u64;
            head.truncate(e.valid_up_to());
        }
        // Continuation bytes of a character cut at the start of the tail.
        let cut = tail
            .iter()
            .take(3)
            .take_while(|&&b| b & 0xC0 == 0x80)
            .count();
        dropped += cut as u64;
        tail.drain(..cut);

        let mut out = String::from_utf8_lossy(&head).into_owned();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(&format!(
            "[… {} bytes of output dropped …]\n",
            thousands(dropped)
        ));
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn capture_keeps_head_and_tail() {
        let mut c = Capture::new(10);
        c.push(b"0123");
        c.push(b"456789abcdef");
        c.push(b"XYZ");
        // The first 5 bytes, the last 5, and 19 - 10 = 9 dropped in between.
        assert_eq!(c.finish(), "01234\n[… 9 bytes of output dropped …]\nefXYZ");

        let mut c = Capture::new(10);
        c.push(b"short");
        c.push(b"er");
        assert_eq!(c.finish(), "shorter");

        let mut c = Capture::new(4);
        for _ in 0..1000 {
            c.push(b"ab");
        }
        assert_eq!(c.finish(), "ab\n[… 1,996 bytes of output dropped …]\nab");
    }

    #[test]
    fn capture_drops_cut_characters_whole() {
        let mut c = Capture::new(6);
        // "ééééé…" — 2 bytes each: the head (3 bytes) ends mid-character.
        for _ in 0..10 {
            c.push("é".as_bytes());
        }
        let text = c.finish();
        assert!(text.starts_with("é\n[… "), "{text}");
        assert!(text.ends_with("\né"), "{text}");
        assert!(!text.contains('\u{FFFD}'), "{text}");
        assert!(text.contains("[… 16 bytes of output dropped …]"), "{text}");
    }

    #[tokio::test]
    async fn secrets_are_removed_from_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = plain_bash("env");
        prepare(&mut cmd, dir.path());
        cmd.env("SWITCHBOARD_TOKEN", "s3cret")
            .env("SWITCHBOARD_DB_URL", "s3cret")
            .env("OPENAI_API_KEY", "s3cret")
            .env("ANTHROPIC_API_KEY", "s3cret")
            .env("KEEP_ME", "visible");
        scrub_env(&mut cmd);
        let out = run(
            cmd,
            Duration::from_secs(10),
            100_000,
            Vec::new(),
            &CancellationToken::new(),
        )
        .await;
        assert!(!out.is_error, "{}", out.content);
        assert!(out.content.contains("KEEP_ME=visible"), "{}", out.content);
        assert!(!out.content.contains("s3cret"), "{}", out.content);
        assert!(!out.content.contains("SWITCHBOARD_"), "{}", out.content);
    }
}
