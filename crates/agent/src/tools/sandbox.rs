//! How `run_command` confines a command (`switchboard_sandbox`): the settings the binary
//! hands the agent, which runs they apply to, and what one command gets — its policy, a
//! private temporary directory (its `HOME` and `TMPDIR`), a cgroup capping its processes.

use std::path::PathBuf;

use switchboard_protocol::PermissionMode;
pub use switchboard_sandbox::{Launcher, Network};
use switchboard_sandbox::{PidsGroup, Policy};
use tokio::process::Command;

/// `[sandbox]` for the built-in agent's commands.
#[derive(Debug, Clone)]
pub struct SandboxSettings {
    pub launcher: Launcher,
    /// Refuse to run a command when this machine cannot confine it (else run it unconfined
    /// and say so in its output).
    pub required: bool,
    pub network: Network,
    /// Most processes one command may have at once.
    pub max_processes: u64,
    /// Confine `full-access` runs too (by default they are not: full access is the choice of
    /// running as the server's user).
    pub full_access: bool,
    /// Whether this machine can confine (Landlock is on); probed once by the binary.
    pub available: bool,
}

impl SandboxSettings {
    /// Whether a run in `mode` is sandboxed: `requested` (the message's `sandbox: true`)
    /// always is; otherwise every mode but `full-access`, and that one too with
    /// `full_access`. A message cannot turn the sandbox off.
    pub fn applies(&self, mode: PermissionMode, requested: Option<bool>) -> bool {
        requested == Some(true) || mode != PermissionMode::FullAccess || self.full_access
    }

    /// What a command is told of its sandbox, to tell a refusal by it from another.
    pub(crate) fn describe(&self, workspace: &std::path::Path) -> String {
        format!(
            "this command ran in the sandbox: it may write only in the workspace ({}) and its temporary directory ($TMPDIR), read the system and the toolchains on PATH, not the user's home or other directories{}. A \"Permission denied\" or \"Operation not permitted\" outside those comes from the sandbox: ask the user to widen it for this session rather than retrying",
            workspace.display(),
            match self.network {
                Network::None => ", and it has no network",
                Network::Full => "",
            }
        )
    }
}

/// What one confined command holds while it runs. Dropped after it: its cgroup goes once
/// nothing runs in it (what the command left in the background keeps it, and its cap), and
/// its temporary directory with it; without a cgroup the directory goes at once.
pub(crate) struct Confined {
    _tmp: Option<tempfile::TempDir>,
    _group: Option<PidsGroup>,
}

/// `bash -c COMMAND` started through the launcher under the workspace's policy.
pub(crate) fn bash(
    settings: &SandboxSettings,
    workspace: &std::path::Path,
    hidden: Vec<PathBuf>,
    command: &str,
) -> Result<(Command, Confined), String> {
    let tmp = tempfile::Builder::new()
        .prefix("switchboard-cmd-")
        .tempdir()
        .map_err(|e| format!("making the command's temporary directory: {e}"))?;
    let path = std::env::var_os("PATH");
    let mut policy = Policy::for_workspace(
        workspace,
        tmp.path(),
        path.as_deref(),
        &hidden,
        settings.network,
    );
    policy.required = settings.required;
    let mut group = PidsGroup::create(settings.max_processes);
    match &group {
        Some(g) => policy.cgroup = Some(g.path().to_path_buf()),
        // Without a cgroup, the rlimit (which does not bind root).
        None => policy.max_processes = Some(settings.max_processes),
    }
    let mut cmd = settings.launcher.command(&policy, "bash");
    cmd.arg("-c")
        .arg(command)
        .env("HOME", tmp.path())
        .env("TMPDIR", tmp.path());
    // With a cgroup, the directory lives as long as it.
    let tmp = match group.as_mut() {
        Some(g) => {
            g.remove_with(tmp.keep());
            None
        }
        None => Some(tmp),
    };
    Ok((
        cmd,
        Confined {
            _tmp: tmp,
            _group: group,
        },
    ))
}
