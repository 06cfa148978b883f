//! (x) sandbox set-up (`--only x`): what confining a command adds to starting it — `bash -c
//! true` spawned and waited for directly, then through the launcher (`switchboard
//! sandbox-exec POLICY -- bash -c true`: Landlock files, TCP and scoping, rlimits), then the
//! same with a cgroup of its own capping its processes (made and removed per command, as
//! `run_command` does). Per command, in milliseconds; each run the median of 50 commands.

use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use switchboard_sandbox::{Launcher, Network, PidsGroup, Policy};

const PER_RUN: usize = 50;

/// Milliseconds per command, one figure per run: (direct, launcher, launcher + cgroup).
pub async fn sandbox(runs: usize) -> Result<(Vec<f64>, Vec<f64>, Vec<f64>)> {
    let exe = std::env::current_exe()?
        .parent()
        .map(|d| d.join("switchboard"))
        .context("where is the switchboard binary")?;
    anyhow::ensure!(
        exe.exists(),
        "{} is missing: build it (`cargo build --release -p switchboard`)",
        exe.display()
    );
    let launcher = Launcher::new(exe);
    let ws = tempfile::tempdir()?;
    let tmp = tempfile::tempdir()?;
    let path = std::env::var_os("PATH");
    let policy = Policy::for_workspace(ws.path(), tmp.path(), path.as_deref(), &[], Network::None);
    let (mut direct, mut confined, mut grouped) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..runs {
        direct.push(
            per_command(
                || {
                    let mut c = tokio::process::Command::new("bash");
                    c.args(["-c", "true"]);
                    (c, None)
                },
                ws.path(),
            )
            .await?,
        );
        confined.push(
            per_command(
                || {
                    let mut c = launcher.command(&policy, "bash");
                    c.args(["-c", "true"]);
                    (c, None)
                },
                ws.path(),
            )
            .await?,
        );
        grouped.push(
            per_command(
                || {
                    let group = PidsGroup::create(512);
                    let mut p = policy.clone();
                    p.cgroup = group.as_ref().map(|g| g.path().to_path_buf());
                    let mut c = launcher.command(&p, "bash");
                    c.args(["-c", "true"]);
                    (c, group)
                },
                ws.path(),
            )
            .await?,
        );
    }
    Ok((direct, confined, grouped))
}

/// The median time, in ms, to start, run and reap one command made by `make`.
async fn per_command(
    make: impl Fn() -> (tokio::process::Command, Option<PidsGroup>),
    cwd: &Path,
) -> Result<f64> {
    let mut times = Vec::with_capacity(PER_RUN);
    for _ in 0..PER_RUN {
        let t = Instant::now();
        let (mut cmd, group) = make();
        let status = cmd.current_dir(cwd).status().await?;
        drop(group);
        anyhow::ensure!(status.success(), "the command failed: {status}");
        times.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    Ok(times[times.len() / 2])
}
