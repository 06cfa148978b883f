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
//!
//! This file holds the types (errors, [`StartSpec`], [`PaneState`], [`Quiescence`], [`Tmux`]);
//! the work is split by concern:
//!
//! - `lifecycle.rs`: starting and stopping sessions, and the state of their panes;
//! - `pane.rs`: capturing a pane, waiting for it to go quiet, and pasting into it;
//! - `command.rs`: running one tmux client command, its environment and its errors.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use regex::Regex;
use tokio::sync::Mutex;

mod command;
mod lifecycle;
mod pane;
#[cfg(test)]
mod tests;

/// The session user option that marks a session as created by the relay.
pub const OWNED_OPTION: &str = "@switchboard-owned";
/// The largest text [`Tmux::paste`] accepts, in bytes.
pub const MAX_PASTE_BYTES: usize = 1024 * 1024;
/// The most lines [`Tmux::capture`] returns.
pub const MAX_CAPTURE_LINES: u32 = 1000;
/// How many lines of output an immediately exiting command reports in [`TmuxError::Exited`].
const EXIT_OUTPUT_LINES: u32 = 20;
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
}
