//! Driving the tmux server of one bundle.
//!
//! Every bundle has its own tmux socket; every command runs as
//! `tmux -S <socket> -f /dev/null <args…>` (argv, never a shell string), so the user's
//! `~/.tmux.conf` never changes behavior and the relay never sees the user's own server.
//!
//! Sessions the relay creates carry the session user option `@switchboard-owned` = `1`.
//! Stopping (and restarting a dead one) only ever touches sessions with that tag; a session
//! someone created by hand on the same socket is reported as [`TmuxError::Foreign`].
//!
//! Sessions are always targeted with tmux's exact-match form `=NAME` (a plain `NAME` is a
//! prefix match: target `b` would hit a session `build`), and panes with `=NAME:` (the active
//! pane of the session's current window).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use regex::Regex;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;
use tokio::sync::Mutex;

/// The session user option that marks a session as created by the relay.
pub const OWNED_OPTION: &str = "@switchboard-owned";
/// The largest text [`Tmux::paste`] accepts, in bytes.
pub const MAX_PASTE_BYTES: usize = 1024 * 1024;
/// The most lines [`Tmux::capture`] returns.
pub const MAX_CAPTURE_LINES: u32 = 1000;
/// How many lines of output an immediately exiting command reports in [`TmuxError::Exited`].
const EXIT_OUTPUT_LINES: u32 = 20;
/// Environment variables with this prefix never reach the tmux server (and so the panes):
/// the server's token and the chat platforms' secrets all live there. What a member needs
/// (`SWITCHBOARD_URL`, `SWITCHBOARD_RELAY_*` …) is given per session with `-e`.
const TOKEN_ENV_PREFIX: &str = "SWITCHBOARD_";
/// A single tmux client invocation that takes longer than this is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(15);
/// How often, and how many times, to ask again for the exit status of a pane that just died.
const DEAD_STATUS_POLL: Duration = Duration::from_millis(20);
const DEAD_STATUS_ATTEMPTS: u32 = 10;
const TMUX_BIN: &str = "tmux";
/// Separates the key tables from the screen in the quiescence snapshot (see `snapshot`).
const SNAPSHOT_MARK: &str = "switchboard-snapshot-screen-follows";

/// Errors from driving tmux.
#[derive(Debug, thiserror::Error)]
pub enum TmuxError {
    #[error("tmux is not installed or cannot be run")]
    NotInstalled,
    #[error("the startup directory {} does not exist or is not a directory", .0.display())]
    DirectoryMissing(PathBuf),
    #[error("tmux session {0:?} exists but was not created by the relay")]
    Foreign(String),
    #[error("the command exited right after starting ({})", describe_status(*.status))]
    Exited { status: Option<i32>, output: String },
    #[error("the text is {0} bytes, more than the limit of {MAX_PASTE_BYTES} bytes")]
    TooLarge(usize),
    #[error("`tmux {args}` failed: {stderr}")]
    Command { args: String, stderr: String },
    #[error("running tmux: {0}")]
    Io(#[from] std::io::Error),
}

impl TmuxError {
    /// A stable, machine-readable code for the error.
    pub fn code(&self) -> &'static str {
        match self {
            TmuxError::NotInstalled => "tmux_not_installed",
            TmuxError::DirectoryMissing(_) => "startup_directory_missing",
            TmuxError::Foreign(_) => "tmux_foreign_session",
            TmuxError::Exited { .. } => "startup_exited",
            TmuxError::TooLarge(_) => "message_too_large",
            TmuxError::Command { .. } => "tmux_command_failed",
            TmuxError::Io(_) => "tmux_io",
        }
    }
}

fn describe_status(status: Option<i32>) -> String {
    match status {
        Some(code) => format!("exit status {code}"),
        None => "no exit status, killed by a signal or gone".to_owned(),
    }
}

/// What held up [`Tmux::wait_quiescent`] last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    /// The pane's screen, cursor, history or activity kept changing.
    OutputChanging,
    /// The prompt pattern did not match any of the last non-empty lines.
    PromptNotSeen,
    /// The pane is in a mode (copy mode, a chooser, …).
    CopyMode,
    /// An attached client is in a key table other than `root` (e.g. after the prefix key).
    KeyTable(String),
}

impl Blocker {
    /// A stable, machine-readable code for the blocker.
    pub fn code(&self) -> &'static str {
        match self {
            Blocker::OutputChanging => "quiescence_output_changing",
            Blocker::PromptNotSeen => "quiescence_prompt_not_seen",
            Blocker::CopyMode => "quiescence_copy_mode",
            Blocker::KeyTable(_) => "quiescence_key_table",
        }
    }
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::OutputChanging => f.write_str("the pane's output kept changing"),
            Blocker::PromptNotSeen => f.write_str("the expected prompt did not appear"),
            Blocker::CopyMode => f.write_str("the pane is in copy mode (someone is scrolling it)"),
            Blocker::KeyTable(table) => write!(
                f,
                "a client attached to the session is in the middle of a key sequence (key table {table:?})"
            ),
        }
    }
}

/// Errors from [`Tmux::wait_quiescent`].
#[derive(Debug, thiserror::Error)]
pub enum QuiescenceError {
    #[error("the pane did not become quiet within {waited:?}: {blocked_by}")]
    Timeout {
        blocked_by: Blocker,
        waited: Duration,
    },
    #[error("the session or its pane is gone")]
    Gone,
    #[error(transparent)]
    Tmux(#[from] TmuxError),
}

/// What to start in a new session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartSpec {
    /// The session name (already validated: letter first, then letters/digits/`_`/`-`).
    pub session: String,
    /// The working directory of the command; must exist.
    pub directory: PathBuf,
    /// A shell command, run by tmux through the default shell (`$SHELL -c`). Empty: the
    /// default shell itself.
    pub command: String,
    /// Extra environment for the command.
    pub env: Vec<(String, String)>,
    /// Window width; 0 means the default (200).
    pub width: u16,
    /// Window height; 0 means the default (50).
    pub height: u16,
    /// How long to wait after starting before checking whether the command already exited.
    pub settle: Duration,
}

impl StartSpec {
    pub const DEFAULT_WIDTH: u16 = 200;
    pub const DEFAULT_HEIGHT: u16 = 50;
    pub const DEFAULT_SETTLE: Duration = Duration::from_millis(300);

    /// A spec with the default size, no extra environment and the default settle time.
    pub fn new(
        session: impl Into<String>,
        directory: impl Into<PathBuf>,
        command: impl Into<String>,
    ) -> Self {
        StartSpec {
            session: session.into(),
            directory: directory.into(),
            command: command.into(),
            env: Vec::new(),
            width: Self::DEFAULT_WIDTH,
            height: Self::DEFAULT_HEIGHT,
            settle: Self::DEFAULT_SETTLE,
        }
    }
}

impl Default for StartSpec {
    /// No session, directory or command yet; the default size and settle time.
    fn default() -> Self {
        StartSpec::new(String::new(), PathBuf::new(), String::new())
    }
}

/// What [`Tmux::start`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartOutcome {
    /// A new session was created and its command is still running after the settle time.
    Started,
    /// An owned session of that name was already running; nothing was done.
    AlreadyRunning,
}

/// The state of a session's active pane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PaneState {
    /// The pane's program exited (the pane remains because of `remain-on-exit`).
    pub dead: bool,
    /// The exit status, when dead and it exited normally.
    pub dead_status: Option<i32>,
    /// The pane is in a mode such as copy mode.
    pub in_mode: bool,
    /// The pid of the pane's first process.
    pub pid: Option<u32>,
    /// The name of the pane's foreground command.
    pub current_command: String,
}

/// Parameters of [`Tmux::wait_quiescent`].
#[derive(Debug, Clone)]
pub struct Quiescence {
    /// How long the pane must stay unchanged.
    pub quiet_window: Duration,
    /// When to give up.
    pub timeout: Duration,
    /// A prompt that must be visible: matched per line (multi-line off) against the last
    /// `prompt_lines` non-empty lines of the screen. The screen is captured with `-N`, which
    /// keeps trailing spaces, so a prompt `"> "` matches `^> `.
    pub prompt: Option<Regex>,
    /// How many of the last non-empty screen lines the prompt may be on (at least 1).
    pub prompt_lines: usize,
    /// How often to look.
    pub poll: Duration,
}

impl Default for Quiescence {
    fn default() -> Self {
        Quiescence {
            quiet_window: Duration::from_millis(750),
            timeout: Duration::from_secs(30),
            prompt: None,
            prompt_lines: 5,
            poll: Duration::from_millis(100),
        }
    }
}

/// The tmux server of one bundle, reached through its socket.
///
/// Cloning is cheap; clones share the lock that serializes [`Tmux::start`] and [`Tmux::stop`].
#[derive(Debug, Clone)]
pub struct Tmux {
    socket: PathBuf,
    /// Serializes start/stop so that "check, then create/kill" and "kill an empty server"
    /// do not interleave within this process.
    lifecycle: Arc<Mutex<()>>,
}

/// The raw result of one tmux client invocation.
struct Output {
    success: bool,
    stdout: String,
    stderr: String,
}

/// What `session_info` found out about a session.
struct SessionInfo {
    owned: bool,
    dead: bool,
}

/// One look at a pane, for quiescence.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    dead: bool,
    in_mode: bool,
    cursor: (String, String),
    history_size: String,
    window_activity: String,
    key_tables: Vec<String>,
    screen: Vec<String>,
}

impl Tmux {
    /// A handle on the tmux server at `socket` (which need not exist yet).
    pub fn new(socket: impl Into<PathBuf>) -> Self {
        Tmux {
            socket: socket.into(),
            lifecycle: Arc::new(Mutex::new(())),
        }
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

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

    /// The last `lines` lines (clamped to 1..=1000) of the pane, history included, wrapped
    /// lines joined, trailing spaces of each line and trailing blank lines removed.
    pub async fn capture(&self, session: &str, lines: u32) -> Result<Vec<String>, TmuxError> {
        let lines = lines.clamp(1, MAX_CAPTURE_LINES);
        // `-S -N` starts N lines into the history and runs to the end of the visible screen, so
        // even when the bottom of the screen is blank there are N lines of content to keep.
        let start = format!("-{lines}");
        let pane = pane_target(session);
        let args = ["capture-pane", "-p", "-J", "-S", &start, "-t", &pane];
        let output = self.exec(&args, None).await?;
        if !output.success {
            return Err(command_error(&args, &output));
        }
        let mut captured: Vec<String> = output
            .stdout
            .lines()
            .map(|line| line.trim_end().to_owned())
            .collect();
        while captured.last().is_some_and(|line| line.is_empty()) {
            captured.pop();
        }
        let skip = captured.len().saturating_sub(lines as usize);
        captured.drain(..skip);
        Ok(captured)
    }

    /// Waits until the pane is quiescent (see [`Quiescence`]): screen, cursor, history size
    /// and window activity unchanged for `quiet_window`, the prompt (if any) visible, the pane
    /// not in a mode, and no attached client in a key table other than `root`. Any change
    /// restarts the quiet window.
    pub async fn wait_quiescent(
        &self,
        session: &str,
        q: &Quiescence,
    ) -> Result<(), QuiescenceError> {
        let started = Instant::now();
        let poll = q.poll.max(Duration::from_millis(10));
        let mut last: Option<Snapshot> = None;
        let mut quiet_since = started;
        loop {
            let Some(snap) = self.snapshot(session).await? else {
                return Err(QuiescenceError::Gone);
            };
            if snap.dead {
                return Err(QuiescenceError::Gone);
            }
            let now = Instant::now();
            if last.as_ref() != Some(&snap) {
                quiet_since = now;
                last = Some(snap);
            }
            let Some(snap) = last.as_ref() else {
                return Err(QuiescenceError::Gone);
            };
            let blocker = if snap.in_mode {
                Some(Blocker::CopyMode)
            } else if let Some(table) = snap.key_tables.iter().find(|t| t.as_str() != "root") {
                Some(Blocker::KeyTable(table.clone()))
            } else if now.duration_since(quiet_since) < q.quiet_window {
                Some(Blocker::OutputChanging)
            } else if let Some(prompt) = &q.prompt
                && !prompt_visible(&snap.screen, prompt, q.prompt_lines)
            {
                Some(Blocker::PromptNotSeen)
            } else {
                None
            };
            let Some(blocker) = blocker else {
                tracing::debug!(session, waited = ?started.elapsed(), "pane quiescent");
                return Ok(());
            };
            let waited = now.duration_since(started);
            if waited >= q.timeout {
                tracing::debug!(
                    session,
                    ?waited,
                    blocker = blocker.code(),
                    "quiescence timeout"
                );
                return Err(QuiescenceError::Timeout {
                    blocked_by: blocker,
                    waited,
                });
            }
            tokio::time::sleep(poll.min(q.timeout - waited)).await;
        }
    }

    /// Pastes `text` into the session's pane as one bracketed paste, then presses Enter.
    ///
    /// LF/CR: the buffer is pasted with `-r`, so every LF arrives as LF (tmux's default would
    /// turn each LF into CR, like a terminal does when you paste by hand). Why LF:
    /// * an application that enabled bracketed paste gets exactly the bytes of `text` between
    ///   `ESC[200~` and `ESC[201~`;
    /// * a plain program reading lines from a cooked tty sees LF as the end of a line (CR would
    ///   work there too, only because of `ICRNL`);
    /// * a raw-mode program that did not enable bracketed paste sees LF as Ctrl-J, which line
    ///   editors treat as "newline" (or, like readline, as accept-line), whereas CR is Enter
    ///   and would submit every line as a separate message.
    ///
    /// The final Enter (`send-keys Enter`) is a CR, as a real keypress. Note the kernel's
    /// cooked-mode line limit: a program reading a cooked tty gets at most 4095 bytes of one
    /// line (the rest of that line is dropped by the tty driver; later lines arrive).
    pub async fn paste(&self, session: &str, text: &str) -> Result<(), TmuxError> {
        if text.len() > MAX_PASTE_BYTES {
            return Err(TmuxError::TooLarge(text.len()));
        }
        let pane = pane_target(session);
        if text.is_empty() {
            // tmux does not create a buffer from empty input; there is nothing to paste.
            let args = ["send-keys", "-t", pane.as_str(), "Enter"];
            let output = self.exec(&args, None).await?;
            if !output.success {
                return Err(command_error(&args, &output));
            }
            return Ok(());
        }
        let buffer = format!("switchboard-{}", uuid::Uuid::new_v4().simple());
        let load = ["load-buffer", "-b", buffer.as_str(), "-"];
        let output = self.exec(&load, Some(text.as_bytes())).await?;
        if !output.success {
            return Err(command_error(&load, &output));
        }
        // One client command, so nothing can get between the paste and its Enter.
        let args = [
            "paste-buffer",
            "-p",
            "-d",
            "-r",
            "-b",
            buffer.as_str(),
            "-t",
            pane.as_str(),
            ";",
            "send-keys",
            "-t",
            pane.as_str(),
            "Enter",
        ];
        let output = self.exec(&args, None).await?;
        if !output.success {
            // `-d` did not run if the paste failed; do not leave the text in the server.
            let _ = self
                .exec(&["delete-buffer", "-b", buffer.as_str()], None)
                .await;
            return Err(command_error(&args, &output));
        }
        tracing::debug!(session, bytes = text.len(), "pasted into tmux pane");
        Ok(())
    }

    // ----- internals -----

    /// Runs one tmux client command; a failing exit status is returned, not an error.
    async fn exec(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<Output, TmuxError> {
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
    async fn display(&self, session: &str, format: &str) -> Result<Option<String>, TmuxError> {
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

    async fn session_info(&self, session: &str) -> Result<Option<SessionInfo>, TmuxError> {
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
    async fn kill_session(&self, session: &str) -> Result<bool, TmuxError> {
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
    async fn remove_empty_server(&self) {
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

    async fn ensure_socket_dir(&self) -> Result<(), TmuxError> {
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

    /// One look at the pane for quiescence, in a single tmux invocation:
    /// a line of pane formats, the clients' key tables (one per line), a mark line, the screen.
    async fn snapshot(&self, session: &str) -> Result<Option<Snapshot>, TmuxError> {
        let exact = format!("={session}");
        let pane = pane_target(session);
        let args = [
            "has-session",
            "-t",
            exact.as_str(),
            ";",
            "display-message",
            "-p",
            "-t",
            pane.as_str(),
            "#{pane_dead}\t#{pane_in_mode}\t#{cursor_x}\t#{cursor_y}\t#{history_size}\t#{window_activity}",
            ";",
            "list-clients",
            "-t",
            exact.as_str(),
            "-F",
            "#{client_key_table}",
            ";",
            "display-message",
            "-p",
            "-t",
            pane.as_str(),
            SNAPSHOT_MARK,
            ";",
            "capture-pane",
            "-p",
            "-N",
            "-t",
            pane.as_str(),
        ];
        let output = self.exec(&args, None).await?;
        if !output.success {
            if is_absent(&output.stderr) {
                return Ok(None);
            }
            return Err(command_error(&args, &output));
        }
        let mut lines = output.stdout.lines();
        let header = lines.next().unwrap_or_default();
        let mut fields = header.split('\t').map(str::to_owned);
        let mut next = || fields.next().unwrap_or_default();
        let dead = next() == "1";
        let in_mode = next() == "1";
        let cursor = (next(), next());
        let history_size = next();
        let window_activity = next();
        let key_tables = lines
            .by_ref()
            .take_while(|line| *line != SNAPSHOT_MARK)
            .map(str::to_owned)
            .collect();
        let screen = lines.map(str::to_owned).collect();
        Ok(Some(Snapshot {
            dead,
            in_mode,
            cursor,
            history_size,
            window_activity,
            key_tables,
            screen,
        }))
    }
}

/// The active pane of the current window of exactly `session`.
fn pane_target(session: &str) -> String {
    format!("={session}:")
}

/// The environment of a tmux client, which becomes the server's if it starts one.
fn prepare_env(cmd: &mut Command) {
    let secrets: Vec<OsString> = std::env::vars_os()
        .map(|(key, _)| key)
        .filter(|key| key.to_string_lossy().starts_with(TOKEN_ENV_PREFIX))
        .collect();
    for key in secrets {
        cmd.env_remove(key);
    }
    // Running inside another tmux must not leak into ours.
    cmd.env_remove("TMUX").env_remove("TMUX_PANE");
    if std::env::var_os("TERM").is_none_or(|term| term.is_empty()) {
        cmd.env("TERM", "xterm-256color");
    }
}

/// tmux's ways of saying the server or the session is not there.
fn is_absent(stderr: &str) -> bool {
    stderr.contains("no server running")
        || stderr.contains("error connecting to")
        || stderr.contains("can't find session")
        || stderr.contains("no such session")
        || server_vanished(stderr)
}

/// The server went away while we talked to it (it exits once its last session is gone).
fn server_vanished(stderr: &str) -> bool {
    stderr.contains("server exited unexpectedly") || stderr.contains("lost server")
}

fn command_error(args: &[&str], output: &Output) -> TmuxError {
    TmuxError::Command {
        args: describe_args(args),
        stderr: output.stderr.trim().to_owned(),
    }
}

/// The arguments for an error message, without the values of `-e NAME=VALUE` (they may be
/// secrets handed to an agent).
fn describe_args(args: &[&str]) -> String {
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

/// The output of a dead pane without tmux's "Pane is dead (status …)" line.
fn exit_output(mut lines: Vec<String>, keep: usize) -> String {
    lines.retain(|line| !line.starts_with("Pane is dead"));
    while lines.last().is_some_and(|line| line.is_empty()) {
        lines.pop();
    }
    let skip = lines.len().saturating_sub(keep);
    lines[skip..].join("\n")
}

/// Whether `prompt` matches one of the last `count` non-empty lines of `screen`.
fn prompt_visible(screen: &[String], prompt: &Regex, count: usize) -> bool {
    screen
        .iter()
        .rev()
        .filter(|line| !line.trim().is_empty())
        .take(count.max(1))
        .any(|line| prompt.is_match(line))
}

#[cfg(test)]
mod tests {
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
        async fn wait_screen(
            &self,
            session: &str,
            pred: impl Fn(&[String]) -> bool,
        ) -> Vec<String> {
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
}
