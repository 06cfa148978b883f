//! Running the tmux client: one invocation per command, on the bundle's socket, with a
//! scrubbed environment; its errors and how tmux says "not there".

use std::process::Stdio;

use super::{COMMAND_TIMEOUT, OWNED_OPTION, Output, SessionInfo, TMUX_BIN, Tmux, TmuxError};
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

impl Tmux {
    /// Checks that the tmux binary runs (`tmux -V`) and returns its version line, e.g.
    /// `tmux 3.3a`.
    pub async fn available() -> Result<String, TmuxError> {
        let mut cmd = Command::new(TMUX_BIN);
        cmd.arg("-V")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        prepare_env(&mut cmd);
        let output = match tokio::time::timeout(COMMAND_TIMEOUT, cmd.output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(error)) => {
                tracing::debug!(%error, "tmux -V could not be run");
                return Err(TmuxError::NotInstalled);
            }
            Err(_) => {
                tracing::debug!("tmux -V timed out");
                return Err(TmuxError::NotInstalled);
            }
        };
        if !output.status.success() {
            tracing::debug!(status = ?output.status, "tmux -V failed");
            return Err(TmuxError::NotInstalled);
        }
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    }

    /// Runs one tmux client command; a failing exit status is returned, not an error.
    pub(super) async fn exec(
        &self,
        args: &[&str],
        stdin: Option<&[u8]>,
    ) -> Result<Output, TmuxError> {
        let mut cmd = Command::new(TMUX_BIN);
        cmd.arg("-S")
            .arg(&self.socket)
            .arg("-f")
            .arg("/dev/null")
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        prepare_env(&mut cmd);
        let run = async {
            let mut child = cmd.spawn()?;
            let input = child.stdin.take();
            let feed = async {
                if let (Some(mut pipe), Some(data)) = (input, stdin) {
                    pipe.write_all(data).await?;
                    pipe.shutdown().await?;
                }
                Ok::<(), std::io::Error>(())
            };
            let (fed, output) = tokio::join!(feed, child.wait_with_output());
            let output = output?;
            if let Err(error) = fed {
                // tmux stopped reading (it failed); its stderr says why.
                tracing::debug!(%error, "writing to tmux stdin");
            }
            Ok::<_, std::io::Error>(output)
        };
        let output = match tokio::time::timeout(COMMAND_TIMEOUT, run).await {
            Ok(Ok(output)) => output,
            Ok(Err(error)) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(TmuxError::NotInstalled);
            }
            Ok(Err(error)) => return Err(TmuxError::Io(error)),
            Err(_) => {
                return Err(TmuxError::Command {
                    args: describe_args(args),
                    stderr: format!("timed out after {COMMAND_TIMEOUT:?}"),
                });
            }
        };
        let output = Output {
            success: output.status.success(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        };
        tracing::trace!(?args, success = output.success, stderr = %output.stderr.trim(), "tmux");
        Ok(output)
    }

    /// Expands `format` for the session's active pane; `None` when the session is absent.
    pub(super) async fn display(
        &self,
        session: &str,
        format: &str,
    ) -> Result<Option<String>, TmuxError> {
        let exact = format!("={session}");
        let pane = pane_target(session);
        // `display-message` alone does not fail for a missing target (it expands the format
        // against nothing), so `has-session` goes first and stops the list if needed.
        let args = [
            "has-session",
            "-t",
            exact.as_str(),
            ";",
            "display-message",
            "-p",
            "-t",
            pane.as_str(),
            format,
        ];
        let output = self.exec(&args, None).await?;
        if !output.success {
            if is_absent(&output.stderr) {
                return Ok(None);
            }
            return Err(command_error(&args, &output));
        }
        Ok(Some(
            output
                .stdout
                .strip_suffix('\n')
                .unwrap_or(&output.stdout)
                .to_owned(),
        ))
    }

    pub(super) async fn session_info(
        &self,
        session: &str,
    ) -> Result<Option<SessionInfo>, TmuxError> {
        let fmt = format!("#{{{OWNED_OPTION}}}\t#{{pane_dead}}");
        Ok(self.display(session, &fmt).await?.map(|line| {
            let (owned, dead) = line.split_once('\t').unwrap_or((line.as_str(), ""));
            SessionInfo {
                owned: owned == "1",
                dead: dead == "1",
            }
        }))
    }

    /// Kills a session by exact name; `Ok(false)` when it was already gone.
    pub(super) async fn kill_session(&self, session: &str) -> Result<bool, TmuxError> {
        let exact = format!("={session}");
        let args = ["kill-session", "-t", exact.as_str()];
        let output = self.exec(&args, None).await?;
        if output.success {
            Ok(true)
        } else if is_absent(&output.stderr) {
            Ok(false)
        } else {
            Err(command_error(&args, &output))
        }
    }

    /// Shuts the server down when it has no sessions left. tmux normally exits by itself then
    /// (`exit-empty` is on), but a server started without sessions would linger.
    pub(super) async fn remove_empty_server(&self) {
        let Ok(output) = self
            .exec(&["list-sessions", "-F", "#{session_name}"], None)
            .await
        else {
            return;
        };
        if output.success && output.stdout.trim().is_empty() {
            tracing::debug!(socket = %self.socket.display(), "killing empty tmux server");
            let _ = self.exec(&["kill-server"], None).await;
        }
    }

    pub(super) async fn ensure_socket_dir(&self) -> Result<(), TmuxError> {
        let Some(parent) = self.socket.parent() else {
            return Ok(());
        };
        if parent.as_os_str().is_empty() || tokio::fs::metadata(parent).await.is_ok() {
            return Ok(());
        }
        let mut builder = tokio::fs::DirBuilder::new();
        builder.recursive(true).mode(0o700);
        builder.create(parent).await?;
        Ok(())
    }
}

/// The active pane of the current window of exactly `session`.
pub(super) fn pane_target(session: &str) -> String {
    format!("={session}:")
}

/// The environment of a tmux client, which becomes the server's if it starts one.
fn prepare_env(cmd: &mut Command) {
    // The same scrub as every process started for an agent: no server token, no provider
    // keys (a member's shell could otherwise print them).
    for key in switchboard_protocol::secrets::server_secrets_in_env() {
        cmd.env_remove(key);
    }
    // Running inside another tmux must not leak into ours.
    cmd.env_remove("TMUX").env_remove("TMUX_PANE");
    if std::env::var_os("TERM").is_none_or(|term| term.is_empty()) {
        cmd.env("TERM", "xterm-256color");
    }
}

/// tmux's ways of saying the server or the session is not there.
pub(super) fn is_absent(stderr: &str) -> bool {
    stderr.contains("no server running")
        || stderr.contains("error connecting to")
        || stderr.contains("can't find session")
        || stderr.contains("no such session")
        || server_vanished(stderr)
}

/// The server went away while we talked to it (it exits once its last session is gone).
pub(super) fn server_vanished(stderr: &str) -> bool {
    stderr.contains("server exited unexpectedly") || stderr.contains("lost server")
}

pub(super) fn command_error(args: &[&str], output: &Output) -> TmuxError {
    TmuxError::Command {
        args: describe_args(args),
        stderr: output.stderr.trim().to_owned(),
    }
}

/// The arguments for an error message, without the values of `-e NAME=VALUE` (they may be
/// secrets handed to an agent).
pub(super) fn describe_args(args: &[&str]) -> String {
    let mut out: Vec<String> = Vec::with_capacity(args.len());
    let mut after_env_flag = false;
    for arg in args {
        if after_env_flag && let Some((name, _)) = arg.split_once('=') {
            out.push(format!("{name}=…"));
        } else {
            out.push((*arg).to_owned());
        }
        after_env_flag = *arg == "-e";
    }
    out.join(" ")
}
