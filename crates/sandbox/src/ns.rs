//! Namespaces on top of Landlock, where bubblewrap (`bwrap`) is installed and this machine
//! lets an unprivileged user make namespaces: the command gets its own mount namespace (the
//! system read-only, a fresh `/tmp` and `/dev`, only its own writable directories bound in),
//! its own IPC namespace, for a long-lived process (an ACP agent, a relay member) its own PID
//! namespace (it sees and signals only its own processes), and under
//! network `none` its own network namespace (loopback only). Landlock then applies inside, as
//! without bubblewrap: the launcher runs in two stages — the limits, then `bwrap … --
//! switchboard sandbox-exec INNER -- PROGRAM` whose inner policy is Landlock alone (a process
//! under Landlock cannot mount, so bubblewrap comes first).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::{Network, Policy, SUBCOMMAND};

/// Finds `bwrap` and checks it can make the namespaces (user namespaces may be off): once
/// per process.
pub(crate) fn probe() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let bwrap = std::env::split_paths(&path)
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())?;
    let ok = std::process::Command::new(&bwrap)
        .args([
            "--ro-bind",
            "/",
            "/",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-net",
            "--die-with-parent",
            "--",
            "true",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(bwrap)
}

/// Its version, for `doctor`.
pub(crate) fn version(bwrap: &Path) -> Option<String> {
    let out = std::process::Command::new(bwrap)
        .arg("--version")
        .output()
        .ok()?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

impl Policy {
    /// The first stage's command: bubblewrap making the namespaces and running the launcher
    /// (`exe`) again with this policy's Landlock part, which runs `program` with `args`.
    pub fn namespaces_command(
        &self,
        bwrap: &Path,
        exe: &Path,
        program: &OsString,
        args: &[OsString],
    ) -> std::process::Command {
        let inner = Policy {
            bwrap: None,
            cgroup: None,
            max_processes: None,
            cpu_secs: None,
            memory_bytes: None,
            ..self.clone()
        };
        let mut cmd = std::process::Command::new(bwrap);
        cmd.env_clear().envs(self.environment());
        cmd.args(["--ro-bind", "/", "/", "--dev", "/dev", "--tmpfs", "/tmp"]);
        // A /proc of its own PID namespace; without one, the system's (where Landlock keeps
        // other processes' environment and memory out of reach: no ptrace outside).
        if self.own_pids {
            cmd.args(["--unshare-pid", "--proc", "/proc"]);
        } else {
            cmd.args(["--ro-bind", "/proc", "/proc"]);
        }
        // What it may read that lies under /tmp (a program, a script, this launcher: the
        // fresh /tmp would hide them), bound in again read-only; its writable directories
        // (the private temporary one lies under /tmp too) read-write.
        let tmp = Path::new("/tmp");
        for p in self
            .read_only
            .iter()
            .map(PathBuf::as_path)
            .chain([exe])
            .filter(|p| p.starts_with(tmp) && p.exists())
        {
            cmd.arg("--ro-bind").arg(p).arg(p);
        }
        for p in self.read_write.iter().filter(|p| p.exists()) {
            cmd.arg("--bind").arg(p).arg(p);
        }
        cmd.args(["--unshare-ipc", "--die-with-parent"]);
        // Without the network and nothing to reach on loopback (a proxy, Switchboard's
        // port): a network namespace of its own, loopback only.
        if self.network == Network::None && self.connect_ports.is_empty() {
            cmd.arg("--unshare-net");
        }
        if let Ok(cwd) = std::env::current_dir() {
            cmd.arg("--chdir").arg(cwd);
        }
        cmd.arg("--")
            .arg(exe)
            .arg(SUBCOMMAND)
            .arg(inner.to_arg())
            .arg("--")
            .arg(program)
            .args(args);
        cmd
    }
}
