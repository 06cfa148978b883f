//! How `run_command` confines a command: `bash -c COMMAND` through the sandbox's kit
//! ([`switchboard_sandbox::Sandbox`]), with the workspace read-write, a private temporary
//! directory as its `HOME` and `TMPDIR`, and the network `[sandbox]` gives commands.

use std::path::PathBuf;

use switchboard_sandbox::Spec;
pub use switchboard_sandbox::{Confined, Launcher, NetworkPolicy, Sandbox};
use tokio::process::Command;

/// `bash -c COMMAND` started through the launcher under the workspace's policy.
pub(crate) fn bash(
    sandbox: &Sandbox,
    workspace: &std::path::Path,
    hidden: Vec<PathBuf>,
    command: &str,
) -> Result<(Command, Confined), String> {
    let spec = Spec {
        workspace,
        hidden: &hidden,
        read_write: &[],
        read_only: &[],
        network: &sandbox.network,
        connect_ports: &[],
        private_home: true,
        own_pids: false,
        env: &[],
    };
    let (mut cmd, confined) = sandbox.command(&spec, "bash").map_err(|e| e.to_string())?;
    cmd.arg("-c").arg(command);
    Ok((cmd, confined))
}
