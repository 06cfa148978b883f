//! (h) workspace checkpoints: what every run pays before and after it, in a 10,000-file
//! workspace (100 directories of 100 small files) and a 100,000-file one (10 × 100
//! directories of 100 files): a checkpoint when nothing changed since the last one, and one
//! with 100 files changed, each in another directory (the worst case for the trees to
//! rewrite). Watched (the default) and, for comparison, with every file looked at.

use std::path::Path;
use std::time::Instant;

use anyhow::Result;
use switchboard_engine::checkpoints::{CheckpointConfig, Checkpoints};
use switchboard_protocol::CheckpointKind;
use uuid::Uuid;

/// Milliseconds of each run.
pub struct Figures {
    /// The first checkpoint (everything recorded).
    pub first: f64,
    pub unchanged: Vec<f64>,
    pub changed: Vec<f64>,
}

/// The path of file `f` of directory `d` in a workspace of `dirs` directories.
fn file(ws: &Path, dirs: usize, d: usize, f: usize) -> std::path::PathBuf {
    if dirs <= 100 {
        ws.join(format!("d{d}/f{f}.txt"))
    } else {
        ws.join(format!("g{}/d{d}/f{f}.txt", d / 100))
    }
}

/// A workspace of `files` files (a multiple of 100) checkpointed `runs` times.
pub async fn checkpoints(runs: usize, files: usize, watch: bool) -> Result<Figures> {
    let data = tempfile::tempdir()?;
    let ws = tempfile::tempdir()?;
    let dirs = files / 100;
    for d in 0..dirs {
        for f in 0..100 {
            let p = file(ws.path(), dirs, d, f);
            if f == 0 {
                std::fs::create_dir_all(p.parent().unwrap_or(ws.path()))?;
            }
            std::fs::write(p, format!("line {d} {f}\n").repeat(5))?;
        }
    }
    let cps = Checkpoints::new(CheckpointConfig {
        enabled: true,
        dir: data.path().to_path_buf(),
        watch,
        ..CheckpointConfig::default()
    });
    let session = Uuid::now_v7();
    // The first one records everything; the measured ones are the steady state.
    let t = Instant::now();
    cps.take(session, ws.path(), CheckpointKind::BeforeRun, None)
        .await?;
    let first = t.elapsed().as_secs_f64() * 1000.0;
    // The first look's objects are packed in the background; the runs come later.
    cps.settle(ws.path()).await?;
    let (mut unchanged, mut changed) = (Vec::new(), Vec::new());
    let step = dirs / 100;
    for run in 0..runs {
        let t = Instant::now();
        let taken = cps
            .take(session, ws.path(), CheckpointKind::BeforeRun, None)
            .await?;
        unchanged.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(!taken.created, "an unchanged workspace made a checkpoint");
        for i in 0..100 {
            let f = file(ws.path(), dirs, i * step, run % 100);
            std::fs::write(f, format!("changed in run {run}\n"))?;
        }
        let t = Instant::now();
        let taken = cps
            .take(session, ws.path(), CheckpointKind::AfterRun, None)
            .await?;
        changed.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(taken.files == 100, "{} files changed, not 100", taken.files);
    }
    Ok(Figures {
        first,
        unchanged,
        changed,
    })
}
