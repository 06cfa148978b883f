//! Starting and stopping sessions, and what their panes are doing.

use std::time::Duration;

use super::command::{command_error, is_absent, pane_target, server_vanished};
use super::{
    DEAD_STATUS_ATTEMPTS, DEAD_STATUS_POLL, EXIT_OUTPUT_LINES, MAX_CAPTURE_LINES, OWNED_OPTION,
    PaneState, SessionInfo, StartOutcome, StartSpec, Tmux, TmuxError,
};

impl Tmux {
    /// Starts session `spec.session` running `spec.command` (see [`StartSpec`]), tagged as
    /// owned, with `remain-on-exit on` so a command that exits at once is noticed: after
    /// `spec.settle` a dead pane makes this return [`TmuxError::Exited`] (with the last lines
    /// of its output) and the session is removed again.
    ///
    /// An owned session of that name that is alive: [`StartOutcome::AlreadyRunning`]; owned
    /// but dead: replaced; not owned: [`TmuxError::Foreign`].
    pub async fn start(&self, spec: &StartSpec) -> Result<StartOutcome, TmuxError> {
        match tokio::fs::metadata(&spec.directory).await {
            Ok(meta) if meta.is_dir() => {}
            _ => return Err(TmuxError::DirectoryMissing(spec.directory.clone())),
        }
        for (key, value) in &spec.env {
            if key.is_empty() || key.contains(['=', '\0']) || value.contains('\0') {
                return Err(TmuxError::Command {
                    args: "new-session".to_owned(),
                    stderr: format!("invalid environment variable {key:?}"),
                });
            }
        }
        self.ensure_socket_dir().await?;

        let _guard = self.lifecycle.lock().await;
        let name = spec.session.as_str();
        match self.session_info(name).await? {
            Some(SessionInfo { owned: false, .. }) => {
                return Err(TmuxError::Foreign(name.to_owned()));
            }
            Some(SessionInfo { dead: false, .. }) => {
                tracing::debug!(session = name, "tmux session already running");
                return Ok(StartOutcome::AlreadyRunning);
            }
            Some(SessionInfo { dead: true, .. }) => {
                tracing::info!(session = name, "replacing dead tmux session");
                self.kill_session(name).await?;
            }
            None => {}
        }

        let pane = pane_target(name);
        let width = if spec.width == 0 {
            StartSpec::DEFAULT_WIDTH
        } else {
            spec.width
        }
        .to_string();
        let height = if spec.height == 0 {
            StartSpec::DEFAULT_HEIGHT
        } else {
            spec.height
        }
        .to_string();
        let directory = spec.directory.to_string_lossy();
        let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args: Vec<&str> = vec![
            "new-session",
            "-d",
            "-s",
            name,
            "-c",
            &directory,
            "-x",
            &width,
            "-y",
            &height,
        ];
        for pair in &env {
            args.extend(["-e", pair.as_str()]);
        }
        if !spec.command.is_empty() {
            // `--`: a command starting with `-` is not an option.
            args.extend(["--", spec.command.as_str()]);
        }
        // Tag and configure in the same client command as the creation: tmux runs the whole
        // `;`-separated list before it handles the child's exit, so even `exit 3` leaves a dead
        // pane behind, and no untagged session of ours is ever visible. `remain-on-exit` is a
        // window option; the session has a single window.
        args.extend([
            ";",
            "set-option",
            "-t",
            &pane,
            OWNED_OPTION,
            "1",
            ";",
            "set-option",
            "-t",
            &pane,
            "remain-on-exit",
            "on",
        ]);
        let mut output = self.exec(&args, None).await?;
        if !output.success && server_vanished(&output.stderr) {
            // We connected to a server that was just exiting (its last session died).
            tracing::debug!(session = name, stderr = %output.stderr.trim(), "retrying new-session");
            tokio::time::sleep(Duration::from_millis(100)).await;
            output = self.exec(&args, None).await?;
        }
        if !output.success {
            return Err(command_error(&args, &output));
        }
        tracing::info!(session = name, socket = %self.socket.display(), "started tmux session");

        tokio::time::sleep(spec.settle).await;
        match self.pane_state(name).await? {
            Some(state) if !state.dead => Ok(StartOutcome::Started),
            Some(state) => {
                let output = self
                    // The "Pane is dead" line sits at the bottom of the screen, below blank
                    // rows, so look further back than the lines we keep.
                    .capture(name, MAX_CAPTURE_LINES)
                    .await
                    .map(|lines| exit_output(lines, EXIT_OUTPUT_LINES as usize))
                    .unwrap_or_default();
                if let Err(error) = self.kill_session(name).await {
                    tracing::warn!(session = name, %error, "could not remove exited session");
                }
                self.remove_empty_server().await;
                tracing::info!(session = name, status = ?state.dead_status, "command exited at once");
                Err(TmuxError::Exited {
                    status: state.dead_status,
                    output,
                })
            }
            None => Err(TmuxError::Exited {
                status: None,
                output: String::new(),
            }),
        }
    }

    /// Names of the sessions the relay owns on this socket; empty when no server runs.
    pub async fn owned_sessions(&self) -> Result<Vec<String>, TmuxError> {
        let fmt = format!("#{{session_name}}\t#{{{OWNED_OPTION}}}");
        let args = ["list-sessions", "-F", fmt.as_str()];
        let output = self.exec(&args, None).await?;
        if !output.success {
            if is_absent(&output.stderr) {
                return Ok(Vec::new());
            }
            return Err(command_error(&args, &output));
        }
        Ok(output
            .stdout
            .lines()
            .filter_map(|line| {
                let (name, owned) = line.split_once('\t')?;
                (owned == "1").then(|| name.to_owned())
            })
            .collect())
    }

    /// The state of the session's active pane; `None` when the session or the server does not
    /// exist.
    pub async fn pane_state(&self, session: &str) -> Result<Option<PaneState>, TmuxError> {
        // tmux calls a pane dead as soon as its pty reports EOF, which can be before it has
        // reaped the process and knows the exit status. Worse, a tmux built with libutempter
        // (Debian's is) swaps in its own SIGCHLD handler while it updates utmp for a pane, and a
        // child exiting in that window is never reaped (tmux issue #311): the status would stay
        // unknown for good. Any later child exit makes tmux reap them all, so when the status is
        // missing, have the server run a trivial job and look again.
        let mut attempts = 0;
        loop {
            let Some((state, exit_known)) = self.pane_state_once(session).await? else {
                return Ok(None);
            };
            if !state.dead || exit_known || attempts >= DEAD_STATUS_ATTEMPTS {
                return Ok(Some(state));
            }
            attempts += 1;
            tracing::debug!(
                session,
                attempts,
                "dead pane without exit status; nudging tmux"
            );
            let _ = self.exec(&["run-shell", "true"], None).await;
            tokio::time::sleep(DEAD_STATUS_POLL).await;
        }
    }

    /// One look at the pane; the flag says whether tmux knows how a dead pane's process ended.
    async fn pane_state_once(&self, session: &str) -> Result<Option<(PaneState, bool)>, TmuxError> {
        let fmt = "#{pane_dead}\t#{pane_dead_status}\t#{pane_dead_signal}\t#{pane_in_mode}\t#{pane_pid}\t#{pane_current_command}";
        let Some(line) = self.display(session, fmt).await? else {
            return Ok(None);
        };
        let mut fields = line.splitn(6, '\t');
        let mut next = || fields.next().unwrap_or_default();
        let dead = next() == "1";
        let status = next();
        let signal = next();
        let exit_known = !status.is_empty() || !signal.is_empty();
        let in_mode = next() == "1";
        let pid = next().parse().ok();
        let current_command = next().to_owned();
        let state = PaneState {
            dead,
            dead_status: if dead { status.parse().ok() } else { None },
            in_mode,
            pid,
            current_command,
        };
        Ok(Some((state, exit_known)))
    }

    /// Kills `session` if the relay owns it: `Ok(true)` when killed, `Ok(false)` when there is
    /// no such session, [`TmuxError::Foreign`] when it exists but is not ours. A server left
    /// without sessions is shut down.
    pub async fn stop(&self, session: &str) -> Result<bool, TmuxError> {
        let _guard = self.lifecycle.lock().await;
        let killed = match self.session_info(session).await? {
            None => false,
            Some(SessionInfo { owned: false, .. }) => {
                return Err(TmuxError::Foreign(session.to_owned()));
            }
            Some(SessionInfo { owned: true, .. }) => self.kill_session(session).await?,
        };
        if killed {
            tracing::info!(session, socket = %self.socket.display(), "stopped tmux session");
        }
        self.remove_empty_server().await;
        Ok(killed)
    }
}

/// The output of a dead pane without tmux's "Pane is dead (status …)" line.
fn exit_output(mut lines: Vec<String>, keep: usize) -> String {
    lines.retain(|line| !line.starts_with("Pane is dead"));
    while lines.last().is_some_and(|line| line.is_empty()) {
        lines.pop();
    }
    let skip = lines.len().saturating_sub(keep);
    lines[skip..].join("\n")
}
