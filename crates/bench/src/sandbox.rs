//! (x) sandbox set-up (`--only x`): what confining a command adds to starting it — `bash -c
//! true` spawned and waited for directly, then as `run_command` starts it, through the
//! sandbox's kit (`switchboard_sandbox::Sandbox::command`: a private temporary directory,
//! the launcher `switchboard sandbox-exec POLICY -- bash -c true` applying Landlock files,
//! TCP and scoping, rlimits, capabilities dropped): with Landlock alone, with a cgroup of its
//! own capping its processes (made and removed per command), and with bubblewrap's
//! namespaces on top (where `bwrap` is installed). Per command, in milliseconds; each run the
//! median of 50 commands.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use switchboard_sandbox::{Confined, Launcher, NetworkPolicy, Sandbox, Spec};

const PER_RUN: usize = 50;

/// Milliseconds per command, one series per way, one figure per run: direct, Landlock,
/// Landlock + cgroup, Landlock + cgroup + bubblewrap (empty without `bwrap`).
pub struct Figures {
    pub direct: Vec<f64>,
    pub landlock: Vec<f64>,
    pub cgroup: Vec<f64>,
    pub bwrap: Vec<f64>,
}

pub async fn sandbox(runs: usize) -> Result<Figures> {
    let exe = std::env::current_exe()?
        .parent()
        .map(|d| d.join("switchboard"))
        .context("where is the switchboard binary")?;
    anyhow::ensure!(
        exe.exists(),
        "{} is missing: build it (`cargo build --release -p switchboard`)",
        exe.display()
    );
    let found = switchboard_sandbox::probe();
    anyhow::ensure!(found.available(), "no Landlock here: {}", found.describe());
    let base = Sandbox {
        launcher: Launcher::new(exe),
        required: true,
        network: NetworkPolicy::None,
        mcp_network: NetworkPolicy::Full,
        max_processes: 512,
        cpu_secs: None,
        memory_bytes: None,
        full_access: false,
        available: true,
        env: Vec::new(),
        bwrap: None,
        pids_cgroup: false,
    };
    let cgroup = Sandbox {
        pids_cgroup: found.pids_cgroup.is_some(),
        ..base.clone()
    };
    let bwrap = found.bwrap.clone().map(|b| Sandbox {
        bwrap: Some(b),
        ..cgroup.clone()
    });
    let ws = tempfile::tempdir()?;
    let mut f = Figures {
        direct: Vec::new(),
        landlock: Vec::new(),
        cgroup: Vec::new(),
        bwrap: Vec::new(),
    };
    for _ in 0..runs {
        f.direct.push(
            per_command(
                || {
                    let mut c = tokio::process::Command::new("bash");
                    c.args(["-c", "true"]);
                    Ok((c, None))
                },
                ws.path(),
            )
            .await?,
        );
        f.landlock
            .push(per_command(|| kit(&base, ws.path()), ws.path()).await?);
        f.cgroup
            .push(per_command(|| kit(&cgroup, ws.path()), ws.path()).await?);
        if let Some(b) = &bwrap {
            f.bwrap
                .push(per_command(|| kit(b, ws.path()), ws.path()).await?);
        }
    }
    Ok(f)
}

/// `bash -c true` as `run_command` starts it under `sandbox`.
fn kit(sandbox: &Sandbox, ws: &Path) -> Result<(tokio::process::Command, Option<Confined>)> {
    let spec = Spec {
        workspace: ws,
        hidden: &[],
        read_write: &[],
        read_only: &[],
        network: &sandbox.network,
        connect_ports: &[],
        private_home: true,
        own_pids: false,
        env: &[],
    };
    let (mut c, confined) = sandbox.command(&spec, "bash")?;
    c.args(["-c", "true"]);
    Ok((c, Some(confined)))
}

/// The median time, in ms, to make, start, run and reap one command made by `make`.
async fn per_command(
    make: impl Fn() -> Result<(tokio::process::Command, Option<Confined>)>,
    cwd: &Path,
) -> Result<f64> {
    let mut times = Vec::with_capacity(PER_RUN);
    for _ in 0..PER_RUN {
        let t = Instant::now();
        let (mut cmd, confined) = make()?;
        let status = cmd.current_dir(cwd).status().await?;
        drop(confined);
        anyhow::ensure!(status.success(), "the command failed: {status}");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}
